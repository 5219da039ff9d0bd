#!/usr/bin/env bash
# A reviewer's copy of the stack, from patches/ or from a pull request (see `checkout.sh --help`).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
NDV_ENTRY=checkout.sh exec "$python" -m ndvstack checkout "$@"
