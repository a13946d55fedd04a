"""Fine-tune pre-training checkpoints on GLUE tasks and summarize the dev results.

Runs every checkpoint x task x seed x grid point with fairseq-train (task/criterion
sentence_prediction, the recipes of examples/taco/config/finetuning), writes each run's dev
predictions and metrics.json under OUT/<checkpoint>/<task>/<grid point>/seed<S>/, skips runs
that finished before, then writes OUT/summary.csv and OUT/summary.md of every finished run under
OUT, this call's and earlier calls' (as taco-glue-summary OUT: mean +- std over seeds, best run,
GLUE averages) and prints the table. Options after `--` go to every fairseq-train run (not
those the runner sets for each run, such as --seed or --lr: use the options below).

Examples:

    # the paper's small-model protocol: default hyper-parameters, 4 seeds
    taco-glue --checkpoints TACO=checkpoints/taco_small/checkpoint_1_250000.pt \\
        --data data-bin/glue --out runs/glue -- --fp16
    # the grid (batch {16,32,64,128} x lr {1e-5,2e-5,3e-5,5e-5} x epochs {4,6}), one seed
    taco-glue --checkpoints ckpt.pt --data data-bin/glue --tasks RTE MRPC \\
        --grid --seeds 1 --out runs/glue-grid
"""

import argparse
import random
import shlex
import sys

from taco_fairseq.cli.argtypes import positive
from taco_fairseq.cli.glue_options import (
    add_runner_options,
    runner_options,
    selected_tasks,
    split_fairseq_args,
)
from taco_fairseq.glue.recipes import Hyperparameters, default_point, grid
from taco_fairseq.logs import configure_logging


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkpoints", nargs="+", required=True, metavar="[NAME=]PATH",
                        help="pre-training checkpoints; NAME labels the results (default: "
                        "<directory>-<file stem>)")
    add_runner_options(parser)
    hyper = parser.add_argument_group("grid points (default: the --recipe's single point)")
    hyper.add_argument("--batch-sizes", nargs="+", type=positive(int), metavar="B")
    hyper.add_argument("--lrs", nargs="+", type=positive(float), metavar="LR")
    hyper.add_argument("--epochs", nargs="+", type=positive(int), metavar="E")
    grid_choice = hyper.add_mutually_exclusive_group()
    grid_choice.add_argument("--grid", action="store_true",
                             help="the paper's 32-point grid (instead of the three options above)")
    grid_choice.add_argument("--sample-grid", type=positive(int), metavar="N",
                             help="N random points of the grid (the paper's base models: 6)")
    hyper.add_argument("--grid-seed", type=int, default=1, help="seed of --sample-grid")
    parser.add_argument("--pooled", action="store_true",
                        help="summarize all grid points of a task together (mean over sampled "
                        "combinations) instead of reporting the best grid point")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the checkpoints and data as a real run does, print the "
                        "fairseq-train command of each run and exit")
    return parser


def grid_points(args) -> list:
    """The grid points chosen by the options.

    Raises:
        ValueError: ``--grid``/``--sample-grid`` with ``--batch-sizes``/``--lrs``/``--epochs``,
            or ``--sample-grid`` above the grid's size.
    """
    if args.grid or args.sample_grid:
        points = grid()
        given = [f"--{name.replace('_', '-')}" for name in ("batch_sizes", "lrs", "epochs")
                 if getattr(args, name)]
        if given:
            raise ValueError(f"{'--grid' if args.grid else '--sample-grid'} chooses the grid "
                             f"points itself: leave out {' and '.join(given)}, or leave it out to "
                             "run the points those options give")
        if args.sample_grid:
            if args.sample_grid > len(points):
                raise ValueError(f"--sample-grid {args.sample_grid}: the grid has "
                                 f"{len(points)} points (use --grid for all of them)")
            points = random.Random(args.grid_seed).sample(points, args.sample_grid)
        return points
    default = default_point(args.recipe)
    return [Hyperparameters(b, lr, e)
            for b in args.batch_sizes or [default.batch_size]
            for lr in args.lrs or [default.lr]
            for e in args.epochs or [default.epochs]]


def main(argv=None) -> None:
    own, fairseq_args = split_fairseq_args(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(own)
    configure_logging()
    from taco_fairseq.glue.pretrained import PretrainedCheckpoint
    from taco_fairseq.glue.runner import (
        check_checkpoints,
        fairseq_train_args,
        plan_runs,
        run_all,
    )
    from taco_fairseq.glue.summary import collect_results, write_summary

    try:
        checkpoints = [PretrainedCheckpoint.parse(spec) for spec in args.checkpoints]
        runs = plan_runs(checkpoints, selected_tasks(args), args.seeds, grid_points(args))
        options = runner_options(args, fairseq_args)
        if args.dry_run:  # with the checks of a real run
            infos = check_checkpoints(runs, options)
            for run in runs:
                command = fairseq_train_args(run, infos[run.checkpoint.path], options)
                print(shlex.join(["fairseq-train", *command]))
            return
        results = run_all(runs, options, args.jobs)
        finished = collect_results(args.out)  # earlier calls' runs too: the table of OUT
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    print(f"summary of the {len(finished)} finished runs under {args.out} ({len(results)} of "
          "this call):")
    print(write_summary(finished, args.out, pooled=args.pooled))


if __name__ == "__main__":
    main()
