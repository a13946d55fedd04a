#!/usr/bin/env bash
# The test suite: sets up .venv if needed, then runs pytest (extra arguments go to pytest),
# one worker per core (pytest-xdist; a test file stays on one worker, so that its fixtures are
# built once; -n 0 runs everything in this process).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
.venv/bin/python -m pytest -q -n auto --dist loadfile "$@"
