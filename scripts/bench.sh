#!/usr/bin/env bash
# Run a benchmark from scripts/bench/ (see `bench.sh --help`): ./scripts/bench.sh NAME [ARGS...].
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
usage() {
  cat <<EOF
usage: bench.sh [-h] NAME [ARGS ...]

Run the benchmark scripts/bench/NAME.py with ARGS (\`bench.sh NAME --help\`: its
options). Benchmarks are not tests: run one, read its figures.

benchmarks:
EOF
  # One line each: the first sentence of the benchmark's docstring.
  "$python" - "$root/scripts/bench" <<'EOF'
import ast, pathlib, sys
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.py")):
    doc = " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split("\n\n")[0].split())
    print(f"  {path.stem:<16}{doc.removeprefix('Benchmark: ').split(' (')[0].rstrip('.')}")
EOF
  printf '\noptions:\n  -h, --help      show this help message and exit\n'
}
if [[ $# -lt 1 || "$1" == "--help" || "$1" == "-h" ]]; then
  if [[ $# -ge 1 ]]; then usage; exit 0; fi
  usage >&2
  exit 2
fi
bench="$root/scripts/bench/$1.py"
[[ -f "$bench" ]] || { echo "error: no benchmark named $1 in scripts/bench/ (see bench.sh --help)" >&2; exit 2; }
shift
exec "$python" "$bench" "$@"
