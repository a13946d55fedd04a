#!/usr/bin/env bash
# The part-of-speech study of PLAN.md, as run on this project's 2-core CPU machine.
#
#   export DATA=/work/study/wiki-aa GLUE=/work/study/glue OUT=/work/study
#   bash docs/results/pos-study/run.sh                        # every run, one taco-compare
#   bash docs/results/pos-study/run.sh mlm-seed2 mlm-seed3    # some runs, each a part
#
# DATA: the data-bin of PLAN.md (taco-prepare-data of the first 160,000 lines of Wikipedia AA,
# vocabulary 8,000, --valid-docs 100: docs/results.md, "The CPU study"); GLUE: RTE MRPC CoLA
# STS-B SST-2 prepared for it (taco-prepare-glue); SHARED: the shared data; OUT: where the
# runs go. Each taco-compare is resumable (rerun it after an interruption: finished runs are
# left alone, interrupted ones continue from checkpoint_last.pt, measured checkpoints are
# kept) and measures each checkpoint as soon as it is saved.
#
# With no argument: the whole study in OUT/pos-study (as started on 2026-12-04). With run
# names (`rows.py missing` lists those without their last checkpoint): each run its own part,
# OUT/pos-study-parts/<run>, all side by side (name at most two: one per core), after the
# committed initializations are restored into it. Since the run directories do not survive
# between sessions (PLAN.md, amendment of 2026-12-05), a session runs the parts it can
# finish, and the rows reach checkpoints.csv with
#   .venv/bin/python docs/results/pos-study/rows.py merge OUT/pos-study-parts/* [OUT/pos-study]
set -euo pipefail
cd "$(dirname "$0")/../../.."
: "${DATA:?set DATA to the pre-training data-bin}" "${GLUE:?set GLUE to the prepared GLUE tasks}"
: "${OUT:?set OUT to where the runs go}"
SHARED=${SHARED:-../shared}

compare() {  # taco-compare with PLAN.md's options and those given
  .venv/bin/taco-compare --data "$DATA" --glue-data "$GLUE" \
    --arch roberta_tiny --max-update 20000 \
    --checkpoint-updates 500 1000 1500 2000 3000 4000 6000 7000 10000 14000 20000 \
    --lr 1e-3 --warmup-updates 600 \
    --probe-tasks RTE MRPC CoLA STS-B SST-2 --primary-endpoint pos-ambiguous \
    --conllu-train "$SHARED/data/ud-english-ewt/en_ewt-ud-dev.conllu" \
    --conllu-test "$SHARED/data/ud-english-ewt/en_ewt-ud-test.conllu" \
    --heldout-mlm-text "wikitext2=$SHARED/data/corpus/wikitext-2-raw/wiki.test.raw.xz" \
      "book=$SHARED/data/corpus/books/pg1342.txt.xz" \
    --heldout-text "$SHARED/data/corpus/wikipedia-en-2015-wikiextractor/AB.txt.xz" \
    --heldout-max-lines 3000 --cpu "$@" -- --num-workers 0
}

if [ $# -eq 0 ]; then
  compare --out "$OUT/pos-study" --objective-max-update taco=7000 --pretrain-seeds 1 2 3 4 5 \
    --jobs 2
  exit
fi
for run in "$@"; do
  [[ $run =~ ^(mlm|taco)-seed[1-5]$ ]] || { echo "run.sh: $run is not a run of PLAN.md" \
    "(mlm-seedS or taco-seedS, S in 1-5)" >&2; exit 2; }
done
pids=()
for run in "$@"; do
  objective=${run%-seed*} seed=${run#*-seed} part="$OUT/pos-study-parts/$run"
  stop=(); [ "$objective" = taco ] && stop=(--objective-max-update taco=7000)
  .venv/bin/python docs/results/pos-study/rows.py restore "$part"
  # --jobs 2: one thread for the run, as when two runs share the two cores
  compare --out "$part" --objectives "$objective" --pretrain-seeds "$seed" "${stop[@]}" \
    --jobs 2 > "$part.log" 2>&1 &
  pids+=($!)
  echo "$run: $part (log: $part.log)"
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
