#!/usr/bin/env bash
# Submit the stack upstream with ghstack (see `submit.sh --help`).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
NDV_ENTRY=submit.sh exec "$python" -m ndvstack submit "$@"
