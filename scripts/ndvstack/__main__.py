import sys

from ndvstack.cli import main

sys.exit(main())
