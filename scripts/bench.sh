#!/usr/bin/env bash
# Run a benchmark from scripts/bench/: ./scripts/bench.sh NAME [ARGS...] (NAME: apply_export, ...).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
if [[ $# -lt 1 || "$1" == "--help" || "$1" == "-h" ]]; then
  echo "usage: bench.sh NAME [ARGS...]; NAME is one of: $(cd "$root/scripts/bench" && ls *.py | sed 's/\.py$//' | tr '\n' ' ')"
  [[ $# -ge 1 ]] && exit 0 || exit 2
fi
bench="$root/scripts/bench/$1.py"
[[ -f "$bench" ]] || { echo "error: no benchmark named $1 in scripts/bench/" >&2; exit 2; }
shift
exec "$python" "$bench" "$@"
