import sys

try:
    from ndvstack.cli import main

    status = main()
except KeyboardInterrupt:  # before main() handles it (while importing): one line, no traceback
    print("interrupted", file=sys.stderr)
    status = 130
sys.exit(status)
