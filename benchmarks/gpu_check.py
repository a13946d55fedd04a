"""The summary of ``scripts/gpu_check.sh``: ``python -m benchmarks.gpu_check OUT`` prints
OUT/summary.md's markdown from the files the script wrote in OUT (``steps.tsv``: step, exit
status, seconds; ``environment.log``; ``benchmark.md``; ``study/report.md``; the json training
logs of the ``pool-*`` and ``two-processes-*`` steps).

What it checks: a two-process run with one sequence per process (``--batch-size 1``) has no
negatives within a process, so ``tc_skipped`` 0 with anchors on every update means each
process drew its negatives from the other's sequence (``--tc-cross-worker-negatives``).
"""

import argparse
import math
from pathlib import Path
from typing import Dict, List, Optional

from taco_fairseq.analysis.training_log import latest_per_update, parse_json_log

#: Metrics of the training runs' last logged update, in the order shown.
RUN_METRICS = ("loss", "tc_loss", "tc_accuracy", "tc_anchors", "tc_skipped", "wps", "ups",
               "gb_free")


def read_steps(out: Path) -> List[Dict]:
    """``[{"name", "status", "seconds"}]`` of ``OUT/steps.tsv``, in the order they ran."""
    steps = []
    for line in (out / "steps.tsv").read_text().splitlines():
        name, status, seconds = line.split("\t")
        steps.append({"name": name, "status": int(status), "seconds": int(seconds)})
    return steps


def train_records(log: Path) -> List[Dict]:
    """The ``train_inner`` records of a fairseq json log, one per update (none when the log
    does not exist)."""
    if not log.is_file():
        return []
    return latest_per_update(parse_json_log(log.read_text().splitlines()), "train_inner")


def cross_worker_verdict(records: List[Dict]) -> str:
    """Whether a ``--batch-size 1`` two-process run trained the TC loss on every update: each
    process then drew its negatives from the other's sequence."""
    if not records:
        return "no updates logged"
    if all(r.get("tc_skipped") == 0 and r.get("tc_anchors", 0) > 0
           and math.isfinite(r.get("tc_loss", math.nan)) for r in records):
        return (f"yes: TC loss on all {len(records)} updates with one sequence per process "
                "(negatives from the other process)")
    return "NO: some update had no negatives (tc_skipped > 0) or no finite TC loss"


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _run_table(runs: Dict[str, List[Dict]], extra: Optional[Dict[str, str]] = None) -> List[str]:
    lines = ["| run | updates | " + " | ".join(RUN_METRICS) + (" | cross-worker negatives |"
                                                             if extra else " |"),
             "|---" * (len(RUN_METRICS) + 2 + bool(extra)) + "|"]
    for name, records in runs.items():
        last = records[-1] if records else {}
        cells = [name, str(len(records))] + [_cell(last.get(m)) for m in RUN_METRICS]
        if extra:
            cells.append(extra.get(name, ""))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def summary(out: Path) -> str:
    """The markdown summary of the GPU check in ``out``."""
    steps = read_steps(out)
    failed = [s["name"] for s in steps if s["status"] != 0]
    lines = ["# GPU check", ""]
    environment = out / "environment.log"
    if environment.is_file():
        lines += [f"- {line}" for line in environment.read_text().splitlines() if line.strip()]
        lines.append("")
    lines += ["## Steps", "", "| step | status | seconds | log |", "|---|---|---|---|"]
    for s in steps:
        status = {0: "ok", 124: "time limit", 125: "skipped (budget spent)"}.get(
            s["status"], f"failed (exit {s['status']})")
        lines.append(f"| {s['name']} | {status} | {s['seconds']} | {s['name']}.log |")
    total = sum(s["seconds"] for s in steps)
    lines += ["", f"{len(steps) - len(failed)} of {len(steps)} steps succeeded in {total} s"
              + (f"; failed: {', '.join(failed)}." if failed else "."), ""]

    benchmark = out / "benchmark.md"
    lines += ["## Benchmark (taco against masked_lm; `benchmark.md`)", "",
              benchmark.read_text().strip() if benchmark.is_file() else "not run or failed", ""]

    study = out / "study" / "report.md"
    lines += ["## Study (TACO against MLM, BERT-small shape)", "",
              "`study/report.md` (and `study/summary.csv`, figures)" if study.is_file()
              else "not run or failed", ""]

    pool = {log.stem: train_records(log) for log in sorted(out.glob("pool-*.log"))}
    if pool:
        lines += ["## One process, one large batch (`pool-*`: on a GPU the official negative "
                  "pool, 256 sequences)", "",
                  *_run_table(pool), ""]
    two = {log.stem.removesuffix("-rank0"): train_records(log)
           for log in sorted(out.glob("two-processes-*-rank0.log"))}
    if two:
        verdicts = {name: cross_worker_verdict(records) for name, records in two.items()
                    if name.endswith("-batch1")}
        lines += ["## Two processes on one device (`--tc-cross-worker-negatives`)", "",
                  *_run_table(two, verdicts), ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the folder scripts/gpu_check.sh wrote")
    args = parser.parse_args(argv)
    if not (args.out / "steps.tsv").is_file():
        parser.error(f"{args.out}/steps.tsv not found: not a folder of scripts/gpu_check.sh")
    print(summary(args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
