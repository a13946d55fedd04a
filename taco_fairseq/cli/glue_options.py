"""Command-line options shared by the GLUE commands that fine-tune (``taco-glue``,
``taco-glue-sweep``, ``taco-compare``). The runner (fairseq, torch) is imported when it is
used, not for ``--help``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Sequence, Tuple

from taco_fairseq.cli.argtypes import positive, seed
from taco_fairseq.glue.recipes import SIZES, default_point
from taco_fairseq.glue.tasks import TASKS, GlueTask, get_tasks

if TYPE_CHECKING:
    from taco_fairseq.glue.runner import RunnerOptions


def split_fairseq_args(argv: Sequence[str]) -> Tuple[List[str], List[str]]:
    """``(own arguments, fairseq-train arguments)``: those after a ``--`` go to fairseq."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def add_runner_options(parser: argparse.ArgumentParser) -> None:
    """``--data --out --tasks --seeds --recipe --pretraining-data --cpu --delete-checkpoints``."""
    parser.add_argument("--data", type=Path, required=True,
                        help="prepared GLUE directory (taco-prepare-glue --destdir)")
    parser.add_argument("--out", type=Path, required=True, help="output directory of the runs")
    parser.add_argument("--tasks", nargs="+", metavar="TASK",
                        help=f"of {', '.join(TASKS)} (default: every task prepared in --data)")
    parser.add_argument("--seeds", nargs="+", type=seed, default=[1, 2, 3, 4],
                        help="fine-tuning seeds (default: %(default)s, the paper's 4 runs)")
    parser.add_argument("--recipe", choices=SIZES, default="small",
                        help="the recipes examples/taco/config/finetuning/<task>_<RECIPE>.yaml "
                        "(the architecture and positions come from the checkpoint); their "
                        "batch size, lr and epochs are the single-run default: "
                        + "; ".join(f"{s}: {default_point(s)}" for s in SIZES)
                        + " (default: %(default)s)")
    parser.add_argument("--pretraining-data", type=Path,
                        help="the checkpoints' pre-training data-bin, for the dictionary check "
                        "(default: the path recorded in each checkpoint)")
    parser.add_argument("--cpu", action="store_true",
                        help="train (adds --cpu for fairseq) and predict on the CPU")
    parser.add_argument("--delete-checkpoints", action="store_true",
                        help="delete each run's checkpoint_best.pt once its dev predictions "
                        "are written (no test-set predictions then)")
    parser.add_argument("--max-updates", nargs="+", action="extend", default=[],
                        metavar="TASK=N",
                        help="cap a task's updates, its learning-rate schedule ending there "
                        "(e.g. SST-2=1000 on a CPU)")
    parser.add_argument("--jobs", type=positive(int), default=1,
                        help="runs side by side (default: 1)")


def selected_tasks(args) -> Tuple[GlueTask, ...]:
    """``--tasks``, or every task prepared in ``--data``; each must be prepared there (its
    ``prep_info.json``), checked before anything is written.

    Raises:
        FileNotFoundError: no task is prepared in ``--data``, or a selected one is not (naming
            ``--data``, the tasks and the taco-prepare-glue command that prepares them).
    """
    from taco_fairseq.prep.pretraining import INFO_FILE

    names = args.tasks or [t for t in TASKS if (args.data / t).is_dir()]
    if not names:
        hint = (" (no such directory)" if not args.data.is_dir() else
                f": give its parent, {args.data.parent}" if args.data.name in TASKS else "")
        raise FileNotFoundError(f"no prepared GLUE task in {args.data}{hint}; --data is the "
                                "--destdir of taco-prepare-glue")
    tasks = get_tasks(names)
    unprepared = [t for t in tasks if not (args.data / t.name / INFO_FILE).is_file()]
    if unprepared:
        names = " ".join(t.name for t in unprepared)
        command = "taco-prepare-glue --glue-dir {} --pretraining-data DATA_BIN --destdir {} " \
            f"--tasks {names}"
        if any((args.data / t.name / t.splits["train"].file).is_file() for t in unprepared):
            raise FileNotFoundError(
                f"--data {args.data}: it holds GLUE's TSV files of {names}, not prepared ones "
                f"(no {INFO_FILE}); prepare them with {command.format(args.data, 'DESTDIR')} "
                "and give DESTDIR as --data")
        found = f"{names} not prepared (no {INFO_FILE})" if args.data.is_dir() else \
            "no such directory"
        raise FileNotFoundError(
            f"--data {args.data}: {found}; prepare {names} there with "
            f"{command.format('GLUE', args.data)}, or give as --data the --destdir of an "
            "earlier taco-prepare-glue")
    return tasks


def parse_update_caps(specs: Sequence[str], tasks: Sequence[GlueTask],
                      option: str = "--max-updates", tasks_option: str = "--tasks"
                      ) -> Dict[str, int]:
    """``TASK=N`` entries → {GLUE task name: N}, for tasks among the fine-tuned ``tasks``.

    Raises:
        ValueError: an entry is not ``TASK=N`` with N >= 1, names no GLUE task, a task twice or a
            task not in ``tasks`` (the message names ``option`` and ``tasks_option``).
    """
    caps = {}
    for spec in specs:
        task, sep, value = spec.partition("=")
        if not sep or not value.isdigit() or int(value) < 1:
            raise ValueError(f"{option}: expected TASK=N with N >= 1, got {spec!r}")
        name = get_tasks([task])[0].name
        if name in caps:
            raise ValueError(f"{option} caps {name} twice ({name}={caps[name]}, {spec})")
        caps[name] = int(value)
    idle = sorted(set(caps) - {t.name for t in tasks})
    if idle:
        raise ValueError(f"{option} caps {', '.join(idle)}, which is not fine-tuned (not in "
                         f"{tasks_option}: {', '.join(t.name for t in tasks)})")
    return caps


def runner_options(args, fairseq_args: Sequence[str]) -> RunnerOptions:
    """The :class:`RunnerOptions` of parsed options and the fairseq arguments after ``--``.

    Raises:
        ValueError, FileNotFoundError: as :func:`parse_update_caps`, :func:`selected_tasks`,
            :func:`.runner.check_fairseq_args` and :func:`.runner.check_precision_args` (before
            anything is written).
    """
    from taco_fairseq.glue.runner import RunnerOptions, check_precision_args

    check_precision_args(fairseq_args)
    return RunnerOptions(
        data_dir=args.data, out_dir=args.out, pretraining_data=args.pretraining_data,
        fairseq_args=(["--cpu"] if args.cpu else []) + list(fairseq_args), cpu=args.cpu,
        keep_checkpoints=not args.delete_checkpoints,
        max_updates=parse_update_caps(args.max_updates, selected_tasks(args)),
        recipe=args.recipe,
    )
