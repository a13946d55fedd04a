#!/usr/bin/env bash
# The study of PLAN.md (issue 42), one pre-training seed per call, as run on this project's
# 2-core CPU machine:
#
#   DATA=/work/study/wiki-aa OUT=/work/study/promise-study bash docs/results/promise-study/run.sh 6
#
# DATA: the data-bin of PLAN.md (docs/results.md, "The CPU study"), made for seeds 6 on by
#   .venv/bin/taco-prepare-data --train ../shared/data/corpus/wikipedia-en-2015-wikiextractor/AA.txt.xz \
#     --max-lines 160000 --valid-docs 100 --vocab-size 8000 --num-threads 1 --destdir DATA
# (--num-threads 1: SentencePiece's model depends on the number of threads, docs/pretraining.md;
# on a rebuild, seed 6's initialization has its recorded book loss, 13.0260 bits, with one
# thread and 13.0264 with 2; the study's data-bin was built as --workers 1 when --workers
# also set these threads, PLAN.md's addenda); SHARED: the
# shared data (default ../shared); OUT: where the runs go (OUT/seedS: one taco-compare per
# seed, resumable: rerun it after an interruption). The three runs of PLAN.md, two at a time
# (--jobs 2: one thread each): mlm to N = 10,500 updates, taco from scratch to 3,500 on the
# same schedule, and taco-branch continuing mlm from its checkpoint at B = 4,500 to 6,500
# (--branch-update: mlm's optimizer state, schedule and data position). Each checkpoint is
# measured as soon as it is saved (OUT/seedS/measures); beside the run,
#   .venv/bin/python docs/results/promise-study/rows.py follow OUT/seedS
# merges the rows into checkpoints.csv beside this file and commits them as they come, until
# the seed's three runs are done (run directories do not survive between sessions). Then
#   .venv/bin/python docs/results/promise-study/analysis.py          # into decision.md
#   .venv/bin/python docs/results/promise-study/analysis.py curves   # curves.png
set -euo pipefail
cd "$(dirname "$0")/../../.."
: "${DATA:?set DATA to the pre-training data-bin}" "${OUT:?set OUT to where the runs go}"
SHARED=${SHARED:-../shared}
seed=${1:?give the pre-training seed (PLAN.md: 6 to 18)}
[[ $seed =~ ^([6-9]|1[0-8])$ ]] || { echo "run.sh: seed $seed is not one of PLAN.md's (6-18)" >&2; exit 2; }

# --glue-data: none is read (no fine-tuning, no GLUE probe: PLAN.md, "Measures")
exec .venv/bin/taco-compare --data "$DATA" --glue-data "$OUT/no-glue" --out "$OUT/seed$seed" \
  --objectives mlm taco --pretrain-seeds "$seed" --arch roberta_tiny --max-update 10500 \
  --checkpoint-updates 500 1000 1500 2000 2500 3000 3500 4000 4500 5000 5500 6000 6500 8000 10500 \
  --objective-max-update taco=3500 taco-branch=6500 --branch-update 4500 \
  --tokens-per-sample 32 --batch-size 128 --lr 1e-3 --warmup-updates 600 \
  --no-probes --primary-endpoint pos-ambiguous --pos-window 32 \
  --conllu-train "$SHARED/data/ud-english-ewt/en_ewt-ud-dev.conllu" \
  --conllu-test "$SHARED/data/ud-english-ewt/en_ewt-ud-test.conllu" \
  --heldout-mlm-text "wikitext2=$SHARED/data/corpus/wikitext-2-raw/wiki.test.raw.xz" \
    "book=$SHARED/data/corpus/books/pg1342.txt.xz" \
  --heldout-text "$SHARED/data/corpus/wikipedia-en-2015-wikiextractor/AB.txt.xz" \
  --heldout-max-lines 3000 --cpu --jobs 2 -- --num-workers 0
