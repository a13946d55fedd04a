#!/usr/bin/env bash
# The part-of-speech study of PLAN.md, as run on this project's 2-core CPU machine: one
# resumable taco-compare (rerun it after an interruption: finished runs are left alone,
# interrupted ones continue from checkpoint_last.pt, measured checkpoints are kept).
#
#   export DATA=/work/study/wiki-aa GLUE=/work/study/glue OUT=/work/study
#   bash docs/results/pos-study/run.sh
#
# DATA: the data-bin of PLAN.md (taco-prepare-data of the first 160,000 lines of Wikipedia AA,
# vocabulary 8,000, --valid-docs 100: docs/results.md, "The CPU study"); GLUE: RTE MRPC CoLA
# STS-B SST-2 prepared for it (taco-prepare-glue); SHARED: the shared data; OUT: where the
# runs go (OUT/pos-study). Each checkpoint is measured as soon as it is saved and
# OUT/pos-study/checkpoints.csv rewritten: copy it here and commit it as rows arrive.
# After the run directory was lost, restore the committed initializations first (the same
# parameters; every other checkpoint of a rerun is measured again, restore_measures.py):
#   .venv/bin/python docs/results/pos-study/restore_measures.py restore "$OUT/pos-study"
set -euo pipefail
cd "$(dirname "$0")/../../.."
: "${DATA:?set DATA to the pre-training data-bin}" "${GLUE:?set GLUE to the prepared GLUE tasks}"
: "${OUT:?set OUT to where the runs go}"
SHARED=${SHARED:-../shared}
.venv/bin/taco-compare --data "$DATA" --glue-data "$GLUE" --out "$OUT/pos-study" \
  --arch roberta_tiny --max-update 20000 --objective-max-update taco=7000 \
  --checkpoint-updates 500 1000 1500 2000 3000 4000 6000 7000 10000 14000 20000 \
  --lr 1e-3 --warmup-updates 600 --pretrain-seeds 1 2 3 4 5 \
  --probe-tasks RTE MRPC CoLA STS-B SST-2 --primary-endpoint pos-ambiguous \
  --conllu-train "$SHARED/data/ud-english-ewt/en_ewt-ud-dev.conllu" \
  --conllu-test "$SHARED/data/ud-english-ewt/en_ewt-ud-test.conllu" \
  --heldout-mlm-text "wikitext2=$SHARED/data/corpus/wikitext-2-raw/wiki.test.raw.xz" \
    "book=$SHARED/data/corpus/books/pg1342.txt.xz" \
  --heldout-text "$SHARED/data/corpus/wikipedia-en-2015-wikiextractor/AB.txt.xz" \
  --heldout-max-lines 3000 --jobs 2 --cpu -- --num-workers 0
