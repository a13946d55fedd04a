#!/usr/bin/env bash
# Quick start on a CPU: set up .venv, prepare real English text, pre-train a small TACO model
# for a few minutes, save checkpoints and print mlm_loss / tc_loss / tc_accuracy over updates.
#
#   bash scripts/quickstart.sh                 # Wikipedia + two Gutenberg books from ../shared
#   VALID_DOCS=1 bash scripts/quickstart.sh my_text.txt ... # your own text files (plain, .xz
#                                              # or .gz; a plain file is one document)
#   UPDATES=400 ARCH=roberta_mini TOKENS=128 MAX_LINES=20000 VOCAB_SIZE=8000 \
#     bash scripts/quickstart.sh               # the longer run of earlier versions
#
# Environment: RUN (output directory, default runs/quickstart), UPDATES (default 200), ARCH
# (default roberta_tiny), TOKENS (tokens per sequence, default 64; 16 sequences per update),
# MAX_LINES (lines read per input file, default 5000), VOCAB_SIZE (SentencePiece pieces,
# default 4000; less text needs fewer), VALID_DOCS (the last documents held out for
# validation, default 10), THREADS (torch threads of the training, default 1: on cores that
# other jobs share, more threads made each update several times slower). Started again, it
# continues an interrupted run (from its checkpoint_last.pt, with the data prepared before) and
# leaves a finished one alone.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${RUN:-runs/quickstart}
UPDATES=${UPDATES:-200}
ARCH=${ARCH:-roberta_tiny}
TOKENS=${TOKENS:-64}
MAX_LINES=${MAX_LINES:-5000}
VOCAB_SIZE=${VOCAB_SIZE:-4000}
VALID_DOCS=${VALID_DOCS:-10}
THREADS=${THREADS:-1}
# a metrics line every 25 updates, or every update of a shorter run
LOG_INTERVAL=$(( UPDATES < 25 ? 1 : 25 ))
CORPUS=../shared/data/corpus
if [ $# -gt 0 ]; then
  TEXT=("$@")
else
  # books first: --valid-docs holds out the last documents (here Wikipedia articles)
  TEXT=("$CORPUS/books/11-0.txt.xz" "$CORPUS/books/pg1342.txt.xz"
        "$CORPUS/wikipedia-en-2015-wikiextractor/AA.txt.xz")
fi

bash scripts/setup_env.sh
mkdir -p "$RUN"

if grep -qs "done training" "$RUN/train.log"; then
  echo "== 1-2/3 $RUN holds a finished run: not training again (remove $RUN, or set RUN=...," \
       "to train anew)"
else
  if [ -f "$RUN/data-bin/prep_info.json" ]; then
    echo "== 1/3 Using the data prepared before in $RUN/data-bin"
  else
    echo "== 1/3 Preparing ${TEXT[*]} -> $RUN/data-bin"
    .venv/bin/taco-prepare-data --train "${TEXT[@]}" \
      --valid-docs "$VALID_DOCS" --max-lines "$MAX_LINES" --vocab-size "$VOCAB_SIZE" --workers 2 --destdir "$RUN/data-bin" --force
  fi

  echo "== 2/3 Pre-training $ARCH with TACO for $UPDATES updates (log: $RUN/train.log)"
  # an interrupted run continues from checkpoints/checkpoint_last.pt; its log is appended to
  OMP_NUM_THREADS=$THREADS .venv/bin/fairseq-train "$RUN/data-bin" \
    --user-dir taco_fairseq --task taco_masked_lm --criterion taco --arch "$ARCH" \
    --tokens-per-sample "$TOKENS" --batch-size 16 \
    --tc-window 5 --tc-negatives 50 --tc-temperature 0.07 --tc-weight 1.0 \
    --optimizer adam --adam-betas '(0.9,0.98)' --weight-decay 0.01 --clip-norm 1.0 \
    --lr 1e-3 --lr-scheduler polynomial_decay --warmup-updates 50 \
    --total-num-update "$UPDATES" --max-update "$UPDATES" \
    --save-dir "$RUN/checkpoints" --save-interval-updates 100 --no-epoch-checkpoints \
    --validate-interval-updates 100 --max-valid-steps 20 --skip-invalid-size-inputs-valid-test \
    --log-format json --log-interval "$LOG_INTERVAL" --cpu --num-workers 0 --seed 1 \
    2>&1 | tee -a "$RUN/train.log" | grep --line-buffered -E '"num_updates"|Saved checkpoint' \
    | cut -c1-160
fi

echo "== 3/3 Metrics over updates (bits; tc_accuracy: share of anchors whose positive wins)"
.venv/bin/taco-analyze-log "$RUN/train.log" \
  --metrics mlm_loss tc_loss tc_accuracy
echo "Validation:"
.venv/bin/taco-analyze-log "$RUN/train.log" --kind valid \
  --metrics valid_mlm_loss valid_tc_loss valid_tc_accuracy
echo "Checkpoints: $RUN/checkpoints"
