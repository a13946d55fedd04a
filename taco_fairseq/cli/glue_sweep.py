"""Checkpoint sweep: fine-tune every checkpoint_<epoch>_<updates>.pt of several pre-training
runs on GLUE, plot the GLUE average against pre-training updates (PNG) with a CSV, and print
the speedup of each run over the baseline: the baseline's updates at its best score divided by
the updates at which the run first reaches that score, interpolated between its checkpoints
(the paper: TACO over MLM; the same speed-up as taco-compare's, docs/results.md#the-instrument).

Example (checkpoints saved with --save-interval-updates 5000 --keep-interval-updates -1):

    taco-glue-sweep --run TACO=checkpoints/taco_small \\
        --run MLM=checkpoints/mlm_small --data data-bin/glue --out runs/sweep -- --fp16

Writes OUT/sweep.csv, OUT/sweep.png and OUT/summary.{csv,md}; runs go under OUT like
taco-glue's (finished ones are skipped). Options after `--` go to fairseq-train.
"""

import argparse
import sys
from pathlib import Path

from taco_fairseq.cli.glue_options import (
    add_runner_options,
    runner_options,
    selected_tasks,
    split_fairseq_args,
)
from taco_fairseq.cli.extras import require_extras
from taco_fairseq.glue.recipes import default_point
from taco_fairseq.logs import configure_logging


#: matplotlib draws sweep.png, after the runs.
EXTRAS = ("plot",)


def _labeled_dir(text: str):
    label, sep, path = text.partition("=")
    if not sep or not label:
        raise argparse.ArgumentTypeError(f"expected LABEL=DIRECTORY, got {text!r}")
    return label, Path(path)


def main(argv=None) -> None:
    own, fairseq_args = split_fairseq_args(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=_labeled_dir, action="append", required=True,
                        metavar="LABEL=DIR", help="a pre-training run's checkpoint directory "
                        "(repeat: e.g. TACO=... and MLM=...)")
    parser.add_argument("--baseline", default="MLM",
                        help="label of the run the speedups are relative to (default: MLM)")
    add_runner_options(parser)
    args = parser.parse_args(own)
    require_extras(parser.prog, *EXTRAS)
    configure_logging()
    from taco_fairseq.glue.runner import plan_runs, run_all
    from taco_fairseq.glue.summary import summarize, write_summary
    from taco_fairseq.glue.sweep import (
        format_speedup,
        plot_sweep,
        speedup,
        sweep_checkpoints,
        sweep_curves,
        write_sweep_csv,
    )

    runs_by_label = dict(args.run)
    if len(runs_by_label) < len(args.run):
        labels = [label for label, _ in args.run]
        sys.exit(f"error: --run {max(labels, key=labels.count)} is given twice; give each run "
                 "its own LABEL")
    if args.baseline not in runs_by_label:
        sys.exit(f"error: --baseline {args.baseline} is not one of the --run labels "
                 f"{list(runs_by_label)}")
    try:
        checkpoints = sweep_checkpoints(runs_by_label)
        runs = plan_runs(checkpoints, selected_tasks(args), args.seeds,
                         [default_point(args.recipe)])
        results = run_all(runs, runner_options(args, fairseq_args), args.jobs)
        print(write_summary(results, args.out))
        curves = sweep_curves(summarize(results))
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    write_sweep_csv(curves, args.out / "sweep.csv")
    plot_sweep(curves, args.out / "sweep.png")
    print(f"wrote {args.out / 'sweep.csv'} and {args.out / 'sweep.png'}")
    for label, points in curves.items():
        if label != args.baseline:
            for metric in ("paper", "glue"):
                result = speedup(curves[args.baseline], points, metric)
                print(f"[GLUE avg, {'paper' if metric == 'paper' else 'MCC for CoLA'}] "
                      + format_speedup(label, args.baseline, result))


if __name__ == "__main__":
    main()
