#!/usr/bin/env bash
# The 5-seed study of PLAN.md and its baseline controls, as run on this project's 2-core CPU
# machine. Every step is a resumable taco-compare (rerun the script after an interruption:
# finished runs are left alone, interrupted ones continue from checkpoint_last.pt).
#
#   export DATA=/work/study/wiki-aa GLUE=/work/study/glue OUT=/work/study
#   bash docs/results/study5/run.sh study     # the study (PLAN.md, "Set-up")
#   bash docs/results/study5/run.sh controls  # the five controls (PLAN.md, "Baseline controls")
#   bash docs/results/study5/run.sh controls window255 pre-ln  # some of them
#
# DATA: the data-bin of PLAN.md (taco-prepare-data of the first 160,000 lines of Wikipedia AA,
# vocabulary 8,000, --valid-docs 100); GLUE: RTE MRPC CoLA STS-B SST-2 prepared for it
# (taco-prepare-glue); SHARED: the shared data; OUT: where the runs go.
set -euo pipefail
cd "$(dirname "$0")/../../.."
# This project's runs: DATA=/work/study/wiki-aa GLUE=/work/study/glue OUT=/work/study (no
# defaults, so that trying the script cannot write into a study under way).
: "${DATA:?set DATA to the pre-training data-bin}" "${GLUE:?set GLUE to the prepared GLUE tasks}"
: "${OUT:?set OUT to where the runs go}"
SHARED=${SHARED:-../shared}
compare() {
  .venv/bin/taco-compare --data "$DATA" --glue-data "$GLUE" --arch roberta_tiny \
    --final-tasks STS-B SST-2 --seeds 1 2 3 --finetune-lr 1e-4 3e-4 1e-3 \
    --finetune-search-from docs/results/lr1e-3-6k-search/search.json \
    --finetune-max-updates SST-2=1000 --probe-tasks RTE MRPC CoLA STS-B SST-2 \
    --primary-endpoint probe-average \
    --heldout-text "$SHARED/data/corpus/wikipedia-en-2015-wikiextractor/AB.txt.xz" \
    --heldout-max-lines 3000 --jobs 2 --cpu "$@"
}
# the study's schedule: 6,000 updates of 32 sequences, peak lr 1e-3 after 600 warm-up updates
study=(--max-update 6000 --checkpoint-updates 1000 2000 4000 6000 --lr 1e-3
       --warmup-updates 600)
# 128 sequences per update: 1,500 updates = the study's 6,000 in tokens; 250/500/1,000/1,500
# updates see the tokens of the study's 1,000/2,000/4,000/6,000, and the warm-up its 600
large=(--max-update 1500 --checkpoint-updates 250 500 1000 1500 --lr 1e-3
       --warmup-updates 150)
# past the plateau (~10,000 updates of 32)
long=(--max-update 12000 --checkpoint-updates 1000 2000 4000 6000 12000)

control() {
  case "$1" in
    # 1. a larger batch through --update-freq 4 (TACO's negatives still from 32 sequences)
    update-freq4)
      compare --out "$OUT/controls/update-freq4" --pretrain-seeds 1 --update-freq 4 "${large[@]}" \
        -- --num-workers 0 ;;
    # 5. TACO's negatives from one batch of 128 sequences, against 1.'s 4 x 32
    batch128)
      compare --out "$OUT/controls/batch128" --objectives taco --pretrain-seeds 1 \
        --batch-size 128 "${large[@]}" --reference "$OUT/controls/update-freq4" \
        -- --num-workers 0 ;;
    # 4. TACO's positive uniform over the whole block (W = 255), against the study's seed 1
    window255)
      compare --out "$OUT/controls/window255" --objectives taco --pretrain-seeds 1 \
        "${study[@]}" --reference "$OUT/study5" -- --num-workers 0 --tc-window 255 ;;
    # 2. pre-LayerNorm (fine-tuned with it too: its checkpoints have the pre-LN layers)
    pre-ln)
      compare --out "$OUT/controls/pre-ln" --pretrain-seeds 1 "${long[@]}" --lr 1e-3 \
        --warmup-updates 600 --finetune-options=--encoder-normalize-before \
        -- --num-workers 0 --encoder-normalize-before ;;
    # 3. a lower peak lr with a longer warm-up
    lr3e-4)
      compare --out "$OUT/controls/lr3e-4" --pretrain-seeds 1 "${long[@]}" --lr 3e-4 \
        --warmup-updates 2000 -- --num-workers 0 ;;
    *)
      echo "unknown control '$1': update-freq4 batch128 window255 pre-ln lr3e-4" >&2
      exit 2 ;;
  esac
}

case "${1:-}" in
  study)
    compare --out "$OUT/study5" --pretrain-seeds 1 2 3 4 5 "${study[@]}" -- --num-workers 0 ;;
  controls)
    # all five (1. before 5., whose reference it is), or those named after `controls`
    shift
    names=("$@")
    [ ${#names[@]} -gt 0 ] || names=(update-freq4 batch128 window255 pre-ln lr3e-4)
    for name in "${names[@]}"; do  # every name checked before the first control runs
      case "$name" in update-freq4|batch128|window255|pre-ln|lr3e-4) ;; *) control "$name" ;; esac
    done
    for name in "${names[@]}"; do control "$name"; done ;;
  *)
    echo "usage: $0 study | controls [update-freq4|batch128|window255|pre-ln|lr3e-4 ...]" >&2
    exit 2 ;;
esac
