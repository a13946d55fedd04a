#!/usr/bin/env bash
# The GPU check in one command, for a machine with one CUDA GPU and no network (docs/results.md,
# "On a GPU"): install from carried wheels, benchmark TACO against masked LM at the BERT-small
# and BERT-base shapes with --fp16, a short TACO-vs-MLM study at the BERT-small shape, the
# official negative pool on one GPU (256 sequences per batch), and one 2-process run on the one
# GPU (NCCL) with --tc-cross-worker-negatives. Every result goes to one folder, OUT, with
# OUT/summary.md. Sized for 10 minutes on one GPU, install included: each step has a time
# limit, a step that would start after BUDGET seconds (default 570) is skipped, and the
# summary is written whatever failed. Not yet run on a GPU.
#
#   WHEELS=/path/to/wheels bash scripts/gpu_check.sh [OUT]   # OUT: default runs/gpu-check
#   bash scripts/gpu_check.sh --dry-run [OUT]                # the same steps at toy sizes, CPU
#
# Environment:
#   WHEELS   a folder of wheels (see below): the script makes OUT/venv from it with
#            `pip install --no-index --find-links WHEELS`; unset: use PYTHON as it is
#   PYTHON   the interpreter without WHEELS (default .venv/bin/python, scripts/setup_env.sh);
#            with WHEELS, the one OUT/venv is made from (default python3, >= 3.11)
#   SHARED   the shared data (default ../shared): corpus and GLUE
#   DRY_RUN  1: as --dry-run (CPU, gloo instead of NCCL, toy sizes; what CI runs)
#   BUDGET   seconds after which no step starts (default 570; dry run 3600)
#
# Filling WHEELS on a machine with network, same platform and Python version, from the
# repository root (PyPI's torch wheel carries CUDA; several GB):
#   python3.11 -m pip download -d wheels -c constraints.txt ".[plot,analysis]" setuptools wheel
#
# Two processes on one GPU: fairseq's own launcher refuses a --distributed-world-size larger
# than the GPUs it sees, so each rank is started here with --distributed-rank R
# --distributed-no-spawn --device-id 0. NCCL (>= 2.5) refuses two ranks on one GPU ("Duplicate
# GPU detected") unless they look like two hosts: each rank gets its own NCCL_HOSTID and talks
# over sockets on the loopback interface (NCCL_SOCKET_IFNAME=lo, NCCL_P2P_DISABLE=1,
# NCCL_SHM_DISABLE=1, NCCL_IB_DISABLE=1). If NCCL still fails, the step says so and repeats
# the run with gloo on the GPU, which exercises the cross-worker negatives but not NCCL.
set -uo pipefail  # no -e: a failed step is recorded in the summary and the next one runs
cd "$(dirname "$0")/.."

DRY_RUN=${DRY_RUN:-0}
OUT=""
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY_RUN=1 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown option $arg; usage: bash scripts/gpu_check.sh [--dry-run] [OUT]" >&2
        exit 2 ;;
    *) OUT=$arg ;;
  esac
done
if [ "$DRY_RUN" = 1 ]; then OUT=${OUT:-runs/gpu-check-dry}; else OUT=${OUT:-runs/gpu-check}; fi
SHARED=${SHARED:-../shared}
CORPUS=$SHARED/data/corpus
WIKI_TRAIN=$CORPUS/wikipedia-en-2015-wikiextractor/AA.txt.xz
WIKI_HELDOUT=$CORPUS/wikipedia-en-2015-wikiextractor/AB.txt.xz
for path in "$WIKI_TRAIN" "$WIKI_HELDOUT" "$SHARED/data/glue/RTE"; do
  if [ ! -e "$path" ]; then
    echo "error: $path not found; set SHARED=/path/to/shared (the corpus and GLUE data)" >&2
    exit 2
  fi
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY=$OUT/summary.md
STEPS=$OUT/steps.tsv
: > "$STEPS"

# sizes: the GPU check, or toy ones for the dry run (CPU, a couple of minutes)
if [ "$DRY_RUN" = 1 ]; then
  DEVICE=(--cpu); FP16=(); BACKEND=gloo
  DATA_LINES=1500; VOCAB=800; VALID_DOCS=3
  BENCH=(--device cpu --shapes tiny --steps 1 --warmup 1 --collate-batches 2 --tc-tokens 512
         --tc-negatives 5 --tc-fixed-tokens 512 --tc-hidden 32 --tc-repeats 1 --threads 1)
  STUDY=(--arch roberta_tiny --tokens-per-sample 64 --batch-size 8 --max-update 3
         --checkpoint-updates 3 --warmup-updates 1 --tasks RTE --seeds 1 --finetune-lr 1e-4
         --finetune-max-updates RTE=2 --heldout-sentences 20 --cpu --jobs 2
         -- --num-workers 0 --max-valid-steps 1)
  SHAPE=(--arch roberta_tiny --tokens-per-sample 64)
  POOL_RUNS=("tiny:roberta_tiny:16")
  TWO_PROC_BATCHES=(1)
  UPDATES=2; LIMIT=900; BUDGET=${BUDGET:-3600}  # generous: a CI machine's CPU may be shared
else
  DEVICE=(); FP16=(--fp16); BACKEND=nccl
  DATA_LINES=40000; VOCAB=30522; VALID_DOCS=20
  BENCH=(--device cuda --fp16 --shapes small base --steps 20 --base-steps 10)
  STUDY=(--arch roberta_small --tokens-per-sample 256 --batch-size 32 --lr 5e-4
         --warmup-updates 60 --max-update 600 --checkpoint-updates 300 600 --tasks RTE
         --seeds 1 --finetune-lr 1e-4 3e-4 --finetune-max-updates RTE=300
         --finetune-options=--fp16 --jobs 2 --heldout-sentences 500 --heldout-max-lines 3000
         -- --fp16 --num-workers 2)
  SHAPE=(--arch roberta_small --tokens-per-sample 256)
  POOL_RUNS=("small:roberta_small:256" "base:roberta_base:256")
  TWO_PROC_BATCHES=(1 32)
  UPDATES=20; LIMIT=240; BUDGET=${BUDGET:-570}
fi
DEADLINE=$(( $(date +%s) + BUDGET ))

# step NAME SECONDS COMMAND...: run COMMAND with a time limit of SECONDS or what is left of
# BUDGET (a shell function of this script gets it as STEP_LIMIT and applies it to its
# commands), its output in OUT/NAME.log; record name, exit status (124: time limit, 125:
# skipped, no budget left) and seconds in OUT/steps.tsv
step() {
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  if [ "$DRY_RUN" = 1 ]; then limit=$LIMIT; fi
  if [ $(( DEADLINE - start )) -lt "$limit" ]; then limit=$(( DEADLINE - start )); fi
  if [ "$limit" -le 0 ]; then
    echo "== $name: skipped, the budget of $BUDGET s is spent"
    printf '%s\t125\t0\n' "$name" >> "$STEPS"
    return 125
  fi
  echo "== $name (log: $OUT/$name.log)"
  if declare -F "$1" > /dev/null; then
    STEP_LIMIT=$limit "$@" > "$OUT/$name.log" 2>&1
  else
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  fi
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - start ))" >> "$STEPS"
  [ "$rc" = 0 ] || { echo "   failed (exit $rc):"; tail -n 5 "$OUT/$name.log" | sed 's/^/   /'; }
  return "$rc"
}

# 1. the environment: a venv from the carried wheels, or PYTHON as it is
if [ -n "${WHEELS:-}" ]; then
  install() {
    "${PYTHON:-python3}" -m venv "$OUT/venv" &&
      timeout "$STEP_LIMIT" "$OUT/venv/bin/python" -m pip install --no-index \
        --find-links "$WHEELS" -c constraints.txt -e ".[plot,analysis]" &&
      # as scripts/setup_env.sh: ve-fairseq's torchaudio does not load next to torch 2.13
      "$OUT/venv/bin/python" -m pip uninstall -y torchaudio
  }
  step install 240 install || { echo "error: installing from $WHEELS failed" >&2; exit 1; }
  PY=$OUT/venv/bin/python
else
  PY=${PYTHON:-.venv/bin/python}
fi
BIN=$(dirname "$PY")
check_environment() {
  timeout "$STEP_LIMIT" "$PY" - "$DRY_RUN" <<'EOF'
import sys
import fairseq, torch
import taco_fairseq  # noqa: F401
dry_run = sys.argv[1] == "1"
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, fairseq {fairseq.__version__}")
if torch.cuda.is_available():
    print(f"GPU: {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}, "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
          f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")
elif not dry_run:
    sys.exit("error: torch sees no CUDA GPU; use --dry-run for the CPU")
else:
    print("CPU only (dry run)")
EOF
}
step environment 60 check_environment || exit 1

# 2. data: Wikipedia AA for pre-training, RTE for fine-tuning, AB as held-out text
DATA=$OUT/data-bin
GLUE=$OUT/glue
step data 120 "$PY" scripts/prepare_pretraining_data.py --train "$WIKI_TRAIN" \
  --max-lines "$DATA_LINES" --vocab-size "$VOCAB" --valid-docs "$VALID_DOCS" \
  --workers "$(nproc)" --destdir "$DATA" --force
step glue 60 "$PY" scripts/prepare_glue.py --glue-dir "$SHARED/data/glue" --tasks RTE \
  --pretraining-data "$DATA" --destdir "$GLUE"

# 3. benchmark: taco against masked_lm update times, memory, throughput
step benchmark "$LIMIT" "$PY" -m benchmarks --data "$DATA" "${BENCH[@]}" \
  --output "$OUT/benchmark.md"

# the fairseq-train options of the remaining steps: taco with cross-worker negatives, the
# recipes' optimizer, a json line per update, nothing saved
TRAIN=("$DATA" --user-dir taco_fairseq --task taco_masked_lm --criterion taco
       --sample-break-mode none --tc-cross-worker-negatives --optimizer adam
       --adam-betas "(0.9,0.999)" --adam-eps 1e-6 --weight-decay 0.01 --clip-norm 1.0
       --lr 1e-4 --lr-scheduler polynomial_decay --warmup-updates 2 --total-num-update 250000
       --max-update "$UPDATES" --log-format json --log-interval 1 --disable-validation
       --no-save --num-workers 0 --seed 1 "${DEVICE[@]}" "${FP16[@]}")

# 5. two processes on the one device, negatives drawn across both
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
two_processes() {  # BACKEND BATCH
  local backend=$1 batch=$2 port pids=() rc=0 r
  port=$(free_port)
  local ddp=()
  [ "$DRY_RUN" = 1 ] && ddp=(--ddp-backend legacy_ddp)
  for r in 0 1; do
    NCCL_HOSTID=taco-gpu-check-rank$r NCCL_SOCKET_IFNAME=lo NCCL_P2P_DISABLE=1 \
      NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN OMP_NUM_THREADS=1 \
      timeout "$STEP_LIMIT" "$BIN/fairseq-train" "${TRAIN[@]}" "${SHAPE[@]}" \
      --batch-size "$batch" --distributed-backend "$backend" "${ddp[@]}" \
      --distributed-world-size 2 --distributed-rank "$r" --distributed-no-spawn \
      --device-id 0 --distributed-init-method "tcp://127.0.0.1:$port" \
      > "$OUT/two-processes-$backend-batch$batch-rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || rc=$?; done
  cat "$OUT/two-processes-$backend-batch$batch-rank0.log"
  return "$rc"
}
for batch in "${TWO_PROC_BATCHES[@]}"; do
  if ! step "two-processes-$BACKEND-batch$batch" "$LIMIT" two_processes "$BACKEND" "$batch" &&
     [ "$BACKEND" = nccl ]; then
    step "two-processes-gloo-batch$batch" "$LIMIT" two_processes gloo "$batch"
  fi
done

# 6. the official negative pool on one GPU: 256 sequences per batch (examples/taco/README.md, "Sequences per update")
for run in "${POOL_RUNS[@]}"; do
  IFS=: read -r name arch batch <<< "$run"
  step "pool-$name" "$LIMIT" "$BIN/fairseq-train" "${TRAIN[@]}" --arch "$arch" \
    --tokens-per-sample "${SHAPE[3]}" --batch-size "$batch"
done

# 7. a short two-objective study at the BERT-small shape
step study "$LIMIT" "$PY" scripts/compare_objectives.py --data "$DATA" --glue-data "$GLUE" \
  --out "$OUT/study" --heldout-text "$WIKI_HELDOUT" "${STUDY[@]}"

# 8. the summary
"$PY" -m benchmarks.gpu_check "$OUT" > "$SUMMARY"
echo "== summary: $SUMMARY"
cat "$SUMMARY"
! grep -qv $'\t0\t' "$STEPS"  # exit status: 0 when every step succeeded
