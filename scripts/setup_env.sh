#!/usr/bin/env bash
# Create .venv with the pinned dependencies of constraints.txt and this package (editable).
# Cheap to re-run: it reinstalls only when setup.py, constraints.txt or this script changed.
# PYTHON=/path/to/python3.11 picks the interpreter (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "taco-fairseq's pinned fairseq (ve-fairseq 0.12.3) needs Python >= 3.11, found" \
       "$("$PYTHON" --version 2>&1); set PYTHON=/path/to/python3.11 (README.md, Install)" >&2
  exit 1
fi
stamp=.venv/.installed-from
wanted=$(cat setup.py constraints.txt scripts/setup_env.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
  exit 0
fi
echo "Setting up .venv (pinned versions from constraints.txt; pip's log: .venv/pip.log) ..."
"$PYTHON" -m venv .venv
if ! { .venv/bin/python -m pip install --upgrade pip &&
       # --no-compile: Python compiles a module when it is first imported; compiling all 15,000
       # files of the dependencies up front took minutes on busy cores. fairseq's are compiled
       # here, into this log: some of them print a SyntaxWarning when compiled
       .venv/bin/python -m pip install --no-compile -c constraints.txt \
         -e ".[test,plot,hf,tensorboard,analysis]" &&
       .venv/bin/python -m compileall -q .venv/lib/python3*/site-packages/fairseq \
         .venv/lib/python3*/site-packages/fairseq_cli &&
       # ve-fairseq pulls in torchaudio, whose only release here (2.11.1) cannot load next to
       # torch 2.13 and breaks `import transformers`; fairseq needs it only for speech tasks
       .venv/bin/python -m pip uninstall -y torchaudio; } > .venv/pip.log 2>&1
then
  tail -n 30 .venv/pip.log >&2
  echo "pip install failed; the whole log is in .venv/pip.log" >&2
  exit 1
fi
echo "$wanted" > "$stamp"
