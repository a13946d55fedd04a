#!/usr/bin/env bash
# The test suite: sets up .venv if needed, then runs pytest (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
.venv/bin/python -m pytest -q "$@"
