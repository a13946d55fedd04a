#!/usr/bin/env bash
# GLUE quick start on a CPU: prepare the five GLUE tasks in ../shared/data/glue (RTE, MRPC,
# CoLA, STS-B, SST-2) with the quick start's data-bin, fine-tune its TACO checkpoint on each
# for a few updates, and print the results table (dev metrics, GLUE averages). A smoke test of
# the whole pipeline: a few minutes of pre-training and MAX_UPDATE updates of fine-tuning give
# scores near chance.
#
#   bash scripts/glue_quickstart.sh      # runs scripts/quickstart.sh first if its checkpoint is missing
#
# Environment: RUN (the quick start's output directory, default runs/quickstart), MAX_UPDATE
# (fine-tuning updates per run, default 100), SEEDS (default "1"), GLUE (default
# ../shared/data/glue); RUN, UPDATES and MAX_LINES also reach scripts/quickstart.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${RUN:-runs/quickstart}
MAX_UPDATE=${MAX_UPDATE:-100}
SEEDS=${SEEDS:-1}
GLUE=${GLUE:-../shared/data/glue}
CHECKPOINT=$RUN/checkpoints/checkpoint_last.pt

bash scripts/setup_env.sh
if [ ! -f "$CHECKPOINT" ]; then
  echo "== 0/2 No checkpoint at $CHECKPOINT: running scripts/quickstart.sh"
  RUN=$RUN bash scripts/quickstart.sh
fi

echo "== 1/2 Preparing the GLUE tasks in $GLUE -> $RUN/glue-bin"
.venv/bin/taco-prepare-glue --glue-dir "$GLUE" --pretraining-data "$RUN/data-bin" \
  --destdir "$RUN/glue-bin" --workers 2 --force 2>&1 | grep -v -E "encoding|INFO"

echo "== 2/2 Fine-tuning $CHECKPOINT on each task ($MAX_UPDATE updates, seeds $SEEDS; logs and"
echo "       predictions in $RUN/glue)"
CAPS=()  # the schedule of each run ends at its cap (--max-updates)
for task_dir in "$RUN"/glue-bin/*/; do CAPS+=("$(basename "$task_dir")=$MAX_UPDATE"); done
# shellcheck disable=SC2086
if ! .venv/bin/taco-glue --checkpoints "TACO=$CHECKPOINT" --data "$RUN/glue-bin" \
    --out "$RUN/glue" --seeds $SEEDS --cpu --max-updates "${CAPS[@]}" -- --num-workers 0 \
    2> "$RUN/glue.log"; then
  tail -n 5 "$RUN/glue.log" >&2
  exit 1
fi
