#!/usr/bin/env bash
# The main job: the patched torch wheel in dist/ (see `build.sh --help`).
# Today: from the release wheel, without a source build (stack.sh wheel).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec "$python" -m ndvstack wheel "$@"
