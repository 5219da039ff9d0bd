#!/usr/bin/env bash
# The main job: the patched torch wheel in dist/ (see `build.sh --help`): from the release
# wheel (default), or with --from-source from a pytorch checkout by upstream's own build.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
NDV_ENTRY=build.sh exec "$python" -m ndvstack wheel "$@"
