#!/usr/bin/env bash
# The pilot of issue 42: masked-LM pre-training runs, MLM only, that should leave the
# bag-of-words plateau (docs/results.md, "The pilot"). Each run logs its validation masked-LM
# loss and the first layer's neighbour share every 500 updates (fairseq-train's json log).
#
#   DATA=/work/study/wiki-aa OUT=/work/study/pilot bash docs/results/pilot/run.sh RECIPE SEED
#
# DATA: the study's data-bin (docs/results.md, "The CPU study": the first 160,000 lines of
# Wikipedia AA, vocabulary 8,000, --valid-docs 100); OUT: where the runs go. RECIPE:
#   blocks32   32-token blocks x 128 sequences (the study's 4,096 tokens per update)
#   blocks128  the part-of-speech study's 128-token blocks x 32 sequences
# The study's optimizer (bert_small.yaml: Adam, weight decay 0.01, clip 1.0, dropout 0.1),
# peak lr 1e-3 after 600 warm-up updates, linear decay to 0 at 10,000 updates (the planned
# study's N), stopped at 4,000. One thread a run (two runs share the two cores).
# Rows: .venv/bin/python docs/results/pilot/curves.py OUT/RECIPE-seedSEED/train.log ...
set -euo pipefail
cd "$(dirname "$0")/../../.."
: "${DATA:?set DATA to the pre-training data-bin}" "${OUT:?set OUT to where the runs go}"
recipe=${1:?RECIPE} seed=${2:?SEED}
case $recipe in
  blocks32) tokens=32 batch=128 ;;
  blocks128) tokens=128 batch=32 ;;
  *) echo "run.sh: unknown recipe $recipe (blocks32 or blocks128)" >&2; exit 2 ;;
esac
run="$OUT/$recipe-seed$seed"
mkdir -p "$run"
USER_DIR=${USER_DIR:-$PWD/taco_fairseq}
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/fairseq-train "$DATA" --user-dir "$USER_DIR" \
  --task masked_lm --criterion mlm --arch roberta_tiny \
  --sample-break-mode none --tokens-per-sample "$tokens" --max-positions "$tokens" \
  --batch-size "$batch" --update-freq 1 \
  --optimizer adam --adam-betas '(0.9,0.999)' --adam-eps 1e-6 --weight-decay 0.01 \
  --clip-norm 1.0 --dropout 0.1 --attention-dropout 0.1 \
  --lr 1e-3 --lr-scheduler polynomial_decay --warmup-updates 600 --total-num-update 10000 \
  --max-update 4000 --seed "$seed" \
  --save-dir "$run/checkpoints" --no-epoch-checkpoints --save-interval-updates 500 \
  --keep-interval-updates -1 --validate-interval-updates 500 \
  --log-format json --log-interval 100 --cpu --num-workers 0 >> "$run/train.log" 2>&1
