"""Does TACO beat MLM? The paper's same-run comparison (§4, appendix A) in one resumable command.

Pre-trains each objective (default: mlm and taco; an objective is a recipe NAME of
examples/taco/config/pretraining/NAME_small.yaml) from the same data-bin with the same seed,
initialization, batches, masks and schedule; keeps the checkpoints at --checkpoint-updates;
records each checkpoint's validation MLM loss, contextual score and neighbour attention on
held-out text and frozen-encoder GLUE probes (the initialization too, as update 0);
fine-tunes every checkpoint on --tasks x --seeds and the last one on --final-tasks too (only
--final-tasks: the last checkpoint only, far cheaper) with the GLUE runner; and writes
OUT/summary.csv (one row per objective x pretrain_seed x updates x task x seed),
OUT/checkpoints.csv, OUT/report.md and figures (GLUE average vs updates, per task,
paired difference over pre-training seeds with 95% t-intervals, speed-up). The report opens
with the --primary-endpoint, declared before the runs; every other verdict is exploratory and
Holm-corrected. OUT/study.json records the study's options and the command that ran the
phases (taco_fairseq/comparison/record.py): run it again and it continues the study
(pre-training from checkpoint_last.pt, finished fine-tunings skipped; its options may change,
its --primary-endpoint may not); --report-only --out OUT reports what exists so far (before
any fine-tuning has finished, of the checkpoint measures, with their tests; the fine-tuning
sections say that none has finished) of the recorded study (study options given besides must
be the recorded ones). --reference REF_OUT adds a description (no test) of this study's runs
against another study's at equal updates and pre-training seed, from REF_OUT/checkpoints.csv
(and summary.csv): e.g. a control that trains --objectives taco only against the study it
varies. Options after `--` go to every pre-training fairseq-train call (not those the
comparison sets itself, such as --seed).

Example (a toy run on the CPU; docs/results.md has the study's command):

    taco-compare --data data-bin/wiki --glue-data data-bin/glue \\
        --out runs/compare --arch roberta_tiny --max-update 40 --checkpoint-updates 20 40 \\
        --tasks RTE --seeds 1 --cpu -- --num-workers 0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from taco_fairseq.cli.argtypes import positive, seed
from taco_fairseq.cli.constants import tool_constant
from taco_fairseq.cli.extras import require_extras
from taco_fairseq.cli.glue_options import parse_update_caps, split_fairseq_args
from taco_fairseq.comparison.objectives import available_objectives
from taco_fairseq.glue.recipes import Hyperparameters, default_point
from taco_fairseq.glue.tasks import get_tasks
from taco_fairseq.logs import configure_logging

if TYPE_CHECKING:  # the study's modules (fairseq, torch) are imported where they are used
    from taco_fairseq.comparison.record import StudyRecord
    from taco_fairseq.comparison.study import StudyOptions


#: The extras a study needs (checked before anything runs): sentencex reads the held-out text,
#: matplotlib draws the report's figures.
EXTRAS = ("analysis", "plot")


class _RaisingParser(argparse.ArgumentParser):
    """An argument parser whose errors raise ValueError (argparse's message) instead of
    printing the usage and exiting: for a recorded command line, not this call's."""

    def error(self, message):
        raise ValueError(message)


def build_parser(raise_errors: bool = False) -> argparse.ArgumentParser:
    """taco-compare's options (module doc); what comes after ``--`` is split off first
    (:func:`taco_fairseq.cli.glue_options.split_fairseq_args`). ``raise_errors``: the parser's
    errors raise ValueError instead of exiting (for a recorded command line)."""
    parser = (_RaisingParser if raise_errors else argparse.ArgumentParser)(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    small = default_point("small")
    parser.add_argument("--data", type=Path, required=True, help="pre-training data-bin")
    parser.add_argument("--glue-data", type=Path, required=True,
                        help="GLUE tasks prepared with the data-bin's vocabulary "
                        "(taco-prepare-glue --pretraining-data DATA)")
    group = parser.add_argument_group("pre-training")
    group.add_argument("--objectives", nargs="+", default=["mlm", "taco"], metavar="NAME",
                       help="recipes to compare; the first is the baseline (default: "
                       "%(default)s; available: " + ", ".join(available_objectives()) + ")")
    group.add_argument("--pretrain-seeds", nargs="+", type=seed, default=[1], metavar="S",
                       help="one pre-training run per objective and seed (default: 1)")
    group.add_argument("--arch", required=True, help="e.g. roberta_tiny, roberta_small")
    group.add_argument("--max-update", type=positive(int), required=True,
                       help="updates of each run; the learning rate decays to 0 there")
    group.add_argument("--checkpoint-updates", nargs="+", type=positive(int), required=True,
                       metavar="N", help="update counts whose checkpoints are measured and "
                       "fine-tuned")
    group.add_argument("--objective-max-update", nargs="+", default=[], metavar="OBJECTIVE=N",
                       help="stop these objectives' runs at N updates (one of "
                       "--checkpoint-updates) on the schedule of --max-update, whose learning "
                       "rate they share: e.g. taco=7000 with --max-update 20000 compares TACO's "
                       "7,000 updates with MLM's 20,000, as the paper's speed-up does")
    group.add_argument("--branch-update", type=positive(int), metavar="B",
                       help="also continue each seed's baseline run (the first of --objectives) "
                       "from its checkpoint at B updates (one of --checkpoint-updates) with every "
                       "other objective (of the taco_masked_lm task and the baseline's model), "
                       "keeping the baseline's optimizer state, learning-rate schedule and data "
                       "position: runs named OBJECTIVE-branch, whose rows carry that name, with "
                       "the checkpoints after B, to --max-update or --objective-max-update "
                       "OBJECTIVE-branch=N. E.g. does TACO still help once masked LM has left "
                       "its plateau? (default: no branch)")
    group.add_argument("--tokens-per-sample", type=positive(int), default=128, help="default: 128")
    group.add_argument("--batch-size", type=positive(int), default=32,
                       help="sequences per update and worker (default: 32)")
    group.add_argument("--update-freq", type=positive(int), default=1, help="default: 1")
    group.add_argument("--lr", type=positive(float), default=5e-4, help="peak learning rate "
                       "(default: 5e-4)")
    group.add_argument("--warmup-updates", type=positive(int, zero=True),
                       help="default: a tenth of --max-update, at most 10,000")
    group = parser.add_argument_group("GLUE fine-tuning")
    group.add_argument("--tasks", nargs="*", default=[], metavar="TASK",
                       help="fine-tuned at every checkpoint (default: none; then --final-tasks "
                       "is needed)")
    group.add_argument("--final-tasks", nargs="+", default=[], metavar="TASK",
                       help="fine-tuned at the last checkpoint only; without --tasks the "
                       "fine-tuned GLUE average is over these at the last checkpoint")
    group.add_argument("--seeds", nargs="+", type=seed, metavar="S",
                       help="fine-tuning seeds (needed with --tasks or --final-tasks)")
    group.add_argument("--finetune-lr", nargs="+", type=positive(float), default=[small.lr],
                       metavar="LR", help="several: searched at the last checkpoint of the first "
                       "--pretrain-seeds, the same for every objective (default: %(default)s)")
    group.add_argument("--finetune-epochs", nargs="+", type=positive(int), default=[small.epochs],
                       metavar="E", help="as --finetune-lr (default: %(default)s)")
    group.add_argument("--finetune-search-from", type=Path, metavar="SEARCH_JSON",
                       help="no search: each task's point as chosen by an earlier study's "
                       "OUT/search.json (its points must be among --finetune-lr x "
                       "--finetune-epochs)")
    group.add_argument("--finetune-batch-size", type=positive(int), default=small.batch_size,
                       help="default: %(default)s")
    group.add_argument("--finetune-max-updates", nargs="+", action="extend", default=[],
                       metavar="TASK=N", help="cap a task's fine-tuning updates, e.g. SST-2=2000")
    group.add_argument("--finetune-options", default="",
                       help="further fairseq-train options of every fine-tuning, one string, "
                       "e.g. --finetune-options=--fp16 (with '=': argparse reads a lone "
                       "'--fp16' as an option of its own)")
    group = parser.add_argument_group("contextual score")
    group.add_argument("--heldout-text", nargs="+", type=Path, default=[], metavar="FILE",
                       help="raw text not seen in pre-training, plain, .xz or .gz; each file is "
                       "checked for text before pre-training (default: not measured)")
    group.add_argument("--heldout-sentences", type=positive(int), default=2000,
                       help="default: 2000")
    group.add_argument("--heldout-max-lines", type=positive(int), help="lines read per file")
    group = parser.add_argument_group(
        "frozen-encoder probes (docs/analysis.md), at every checkpoint and the initialization")
    group.add_argument("--probe-tasks", nargs="+", metavar="TASK",
                       help="GLUE tasks of the linear probes; with STS-B, the unsupervised "
                       "STS-B too (default: the tasks of --tasks and --final-tasks)")
    group.add_argument("--probe-max-train", type=positive(int), metavar="N",
                       help="at most N training examples per probed task, a seeded uniform "
                       "subsample (default: all)")
    group.add_argument("--no-probes", action="store_true", help="no probes")
    group.add_argument("--conllu-train", type=Path, metavar="CONLLU",
                       help="a CoNLL-U treebank the part-of-speech probe is trained on (e.g. "
                       "../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu); with "
                       "--conllu-test (default: no part-of-speech probe)")
    group.add_argument("--conllu-test", type=Path, metavar="CONLLU",
                       help="the CoNLL-U treebank it is scored on (e.g. en_ewt-ud-test.conllu)")
    group.add_argument("--pos-window", type=positive(int), metavar="N",
                       help="positions per sequence the part-of-speech probe encodes, <s> and "
                       "</s> included, 3 to --tokens-per-sample (the runs' positions): a "
                       "sentence longer than N - 2 pieces is encoded in overlapping windows "
                       "(default: --tokens-per-sample; a checkpoint measured with another window "
                       "is measured again)")
    group = parser.add_argument_group("masked-LM loss on held-out text, at every checkpoint and "
                                      "the initialization")
    group.add_argument("--heldout-mlm-text", nargs="+", default=[], metavar="NAME=FILE",
                       help="raw text (plain, .xz or .gz) whose masked-LM loss is measured as "
                       "mlm_loss_NAME, bits per masked token, e.g. wikitext2=../shared/data/"
                       "corpus/wikitext-2-raw/wiki.test.raw.xz (default: none)")
    parser.add_argument("--primary-endpoint", default="glue-average",
                        choices=tool_constant("taco_fairseq.comparison.statistics",
                                              "PRIMARY_ENDPOINTS"),
                        help="the comparison the report tests first, declared before the "
                        "runs: glue-average (the fine-tuned GLUE average at the last "
                        "checkpoint over --tasks, or over --final-tasks without --tasks: the "
                        "paper's claim), probe-average (the average of the frozen-encoder "
                        "linear probes) or pos-ambiguous (the part-of-speech probe's accuracy "
                        "on ambiguous words), each objective at its last checkpoint against "
                        "the baseline at its own (one test per objective, a branch of "
                        "--branch-update included; with several, Holm-corrected among them); "
                        "every other verdict is exploratory (default: %(default)s)")
    add_call_options(parser.add_argument_group(
        "this call (--report-only --out OUT alone reports the study recorded there)"))
    return parser


def add_call_options(parser, out_required: bool = True) -> None:
    """The options of one taco-compare call rather than of its study: ``--out`` (where the
    study is), ``--jobs``, ``--cpu``, ``--report-only`` and ``--reference``, to ``parser`` (a
    parser or an argument group)."""
    parser.add_argument("--out", type=Path, required=out_required, help="output directory")
    parser.add_argument("--jobs", type=positive(int), default=1,
                        help="pre-trainings, checkpoint measures and fine-tunings side by "
                        "side; on the CPU each gets cores/jobs threads, or OMP_NUM_THREADS "
                        "if set")
    parser.add_argument("--cpu", action="store_true", help="train and evaluate on the CPU")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: write the report of what has finished so far (e.g. "
                        "while the runs go on, or after an interruption; before any "
                        "fine-tuning has finished, of the checkpoint measures) of the study "
                        "recorded in OUT/study.json (--out alone suffices; a call that leaves "
                        "out an option a run needs, e.g. --data, takes the record's for each "
                        "study option it leaves out); a study option given that says what the "
                        "study is and differs from the record is an error (the paths, --jobs, "
                        "--cpu and --reference may differ; the options after `--` may be left "
                        "out)")
    parser.add_argument("--reference", type=Path, metavar="REF_OUT",
                        help="another study's --out (its checkpoints.csv, and summary.csv if "
                        "there is one): the report adds, per measure and checkpoint (matched "
                        "on updates and pre-training seed), this study's runs against "
                        "REF_OUT's of each objective, as a description without test (e.g. a "
                        "control that trains --objectives taco only, against the study it "
                        "varies)")


def parse_options(argv) -> Tuple[StudyOptions, bool]:
    """The study's options on the command line ``argv``, their values checked
    (:func:`study_options`) and then its input files, before anything runs; and whether only
    the report is asked for (``--report-only``). Exits (argparse's usage and a one-line error,
    code 2) on options that do not fit; with one line naming them (code 1) when the
    :data:`EXTRAS` are not installed. Configures logging once the options parse."""
    own, fairseq_args = split_fairseq_args(argv)
    parser = build_parser()
    args = parser.parse_args(own)
    require_extras(parser.prog, *EXTRAS)
    # before fairseq is imported: it then leaves the root logger as configured (its
    # wav2vec2_classification's basicConfig would set it to DEBUG otherwise)
    configure_logging()
    try:
        options = study_options(args, fairseq_args)
    except ValueError as e:
        parser.error(str(e))
    check_inputs(options, parser)
    if args.finetune_search_from is not None:
        check_search(options, args.finetune_search_from, parser, copy=not args.report_only)
    if options.reference is not None:
        check_reference(options, parser)
    return options, args.report_only


def study_options(args: argparse.Namespace, fairseq_args: Sequence[str]) -> StudyOptions:
    """The study's options of arguments parsed by :func:`build_parser` and of the
    ``fairseq-train`` options after ``--``, their values checked (no file is read).

    Raises:
        ValueError: an option does not fit (naming it and what to give).
    """
    from taco_fairseq.comparison.pretraining import PretrainSettings, arms
    from taco_fairseq.comparison.study import StudyOptions
    from taco_fairseq.glue.runner import check_fairseq_args, check_given_once

    for option in ("--objectives", "--pretrain-seeds", "--seeds", "--finetune-lr",
                   "--finetune-epochs"):
        check_given_once(option, getattr(args, option[2:].replace("-", "_")))
    if not args.tasks and not args.final_tasks and args.primary_endpoint == "glue-average":
        raise ValueError(
            "neither --tasks nor --final-tasks: give --final-tasks TASK... (fine-tuned at "
            "the last checkpoint) or --tasks TASK... (at every checkpoint); the primary "
            "endpoint (--primary-endpoint glue-average, the default) is their average "
            "(without fine-tuning, declare a probe's primary endpoint)")
    if (args.tasks or args.final_tasks) and not args.seeds:
        raise ValueError("--tasks/--final-tasks without --seeds: give the fine-tuning "
                         "seeds, e.g. --seeds 1 2 3")
    finetuned = get_tasks([*args.tasks, *args.final_tasks])
    if args.no_probes and args.probe_tasks:
        raise ValueError("--probe-tasks with --no-probes: give one of them")
    probed = ([] if args.no_probes else get_tasks(args.probe_tasks) if args.probe_tasks
              else finetuned)
    if args.primary_endpoint == "probe-average" and not probed:
        raise ValueError("--primary-endpoint probe-average without probes (--no-probes, or "
                         "neither --probe-tasks nor fine-tuned tasks): the primary endpoint "
                         "would never be measured; give --probe-tasks TASK... or declare "
                         "another --primary-endpoint")
    if (args.conllu_train is None) != (args.conllu_test is None):
        raise ValueError("--conllu-train and --conllu-test go together: the probe is "
                         "trained on one treebank and scored on the other")
    if args.primary_endpoint == "pos-ambiguous" and args.conllu_train is None:
        raise ValueError("--primary-endpoint pos-ambiguous without --conllu-train/"
                         "--conllu-test: the primary endpoint would never be measured")
    if args.pos_window is not None:
        from taco_fairseq.analysis.pos_probe import check_window

        if args.conllu_train is None:
            raise ValueError("--pos-window without --conllu-train/--conllu-test: there is no "
                             "part-of-speech probe to window")
        check_window(args.pos_window)
        if args.pos_window > args.tokens_per_sample:
            raise ValueError(f"--pos-window {args.pos_window}: above --tokens-per-sample "
                             f"{args.tokens_per_sample}, the runs' positions; give at most "
                             f"{args.tokens_per_sample}")
    mlm_texts = named_files(args.heldout_mlm_text, "--heldout-mlm-text")
    caps = parse_update_caps(args.finetune_max_updates, finetuned, "--finetune-max-updates",
                             "--tasks or --final-tasks")
    check_fairseq_args(caps, shlex.split(args.finetune_options))
    settings = PretrainSettings(
        data=args.data, arch=args.arch, max_update=args.max_update,
        checkpoint_updates=tuple(sorted(set(args.checkpoint_updates))),
        objective_max_update=objective_max_updates(
            args.objective_max_update, arms(args.objectives, args.branch_update is not None)),
        branch=None if args.branch_update is None else (args.objectives[0], args.branch_update),
        tokens_per_sample=args.tokens_per_sample, batch_size=args.batch_size,
        update_freq=args.update_freq, lr=args.lr,
        warmup_updates=(args.warmup_updates if args.warmup_updates is not None
                        else min(10000, max(1, args.max_update // 10))),
        cpu=args.cpu, extra=tuple(fairseq_args))
    unknown = [o for o in args.objectives if o not in available_objectives()]
    if unknown:
        raise ValueError(f"--objectives {unknown}: no such recipe; choose from "
                         f"{', '.join(available_objectives())}")
    if args.branch_update is not None:
        check_branches(args.objectives)
    return StudyOptions(
        out=args.out, objectives=args.objectives, pretrain_seeds=args.pretrain_seeds,
        settings=settings, glue_data=args.glue_data,
        tasks=[t.name for t in get_tasks(args.tasks)],
        final_tasks=[t.name for t in get_tasks(args.final_tasks)] if args.final_tasks else [],
        primary_endpoint=args.primary_endpoint,
        seeds=args.seeds or [],
        points=[Hyperparameters(args.finetune_batch_size, lr, epochs)
                for lr in args.finetune_lr for epochs in args.finetune_epochs],
        max_updates=caps, finetune_args=shlex.split(args.finetune_options),
        heldout_text=args.heldout_text, heldout_sentences=args.heldout_sentences,
        heldout_max_lines=args.heldout_max_lines,
        probe_tasks=list(dict.fromkeys(t.name for t in probed)),
        probe_max_train=args.probe_max_train, conllu_train=args.conllu_train,
        conllu_test=args.conllu_test, pos_window=args.pos_window, mlm_texts=mlm_texts,
        jobs=args.jobs, cpu=args.cpu,
        reference=args.reference,
    )


def check_inputs(options: StudyOptions, parser: argparse.ArgumentParser) -> None:
    """The input files of ``options`` that the phases read, checked before anything runs
    (not after hours of pre-training): the GLUE tasks prepared for --data, --data's
    dict.txt, the held-out texts and treebanks. Exits through ``parser.error`` (a one-line
    error naming the option and what to do) on the first that does not fit."""
    from taco_fairseq.glue.pretrained import check_glue_data_fits
    from taco_fairseq.prep.pretraining import INFO_FILE

    tasks = list(dict.fromkeys([*options.tasks, *options.final_tasks, *options.probe_tasks]))
    unprepared = sorted(t for t in tasks if not (options.glue_data / t / INFO_FILE).is_file())
    if unprepared:
        parser.error(f"--glue-data {options.glue_data}: {', '.join(unprepared)} not prepared "
                     f"(no {INFO_FILE}); prepare them with taco-prepare-glue --tasks "
                     f"{' '.join(unprepared)}")
    data = options.settings.data
    if not (data / "dict.txt").is_file():
        parser.error(f"--data {data}: no dict.txt (prepare it with taco-prepare-data)")
    why = check_heldout_text(options.heldout_text) or check_heldout_text(
        [path for _, path in options.mlm_texts], "--heldout-mlm-text")
    if why:  # read in phase 2
        parser.error(why)
    if options.conllu_train is not None:
        from taco_fairseq.analysis.conllu import CoNLLUError, read_conllu

        for option, path in (("--conllu-train", options.conllu_train),
                             ("--conllu-test", options.conllu_test)):
            try:
                read_conllu(path)
            except (FileNotFoundError, CoNLLUError) as e:
                parser.error(f"{option}: {e}")
    for task in tasks:  # checked against the fingerprints the checkpoints will record
        try:
            check_glue_data_fits(data, options.glue_data / task, f"{options.out / 'pretrain'}/*/"
                                 f"checkpoints/*.pt (to be pre-trained on --data {data})")
        except (FileNotFoundError, ValueError) as e:
            parser.error(f"--glue-data {options.glue_data} (checked against --data {data} "
                         f"before pre-training): {e}")


def check_reference(options: StudyOptions, parser: argparse.ArgumentParser) -> None:
    """``--reference``: another study's --out whose checkpoints.csv fits this study's seeds
    and checkpoints (:func:`taco_fairseq.comparison.tables.read_reference`), checked now, not
    after the runs. Exits through ``parser.error`` (naming it and what to do) otherwise."""
    from taco_fairseq.comparison.tables import read_reference

    if options.reference.resolve() == options.out.resolve():
        parser.error(f"--reference {options.reference} is --out itself: give the --out of "
                     "another study")
    try:
        read_reference(options.reference, options.pretrain_seeds,
                       options.settings.checkpoint_updates)
    except (OSError, ValueError) as e:
        parser.error(f"--reference {options.reference}: {e}")


def read_command(command: str) -> StudyOptions:
    """The options of a ``taco-compare`` command line as an older taco-compare recorded it
    (``OUT/command.txt``, :func:`taco_fairseq.comparison.record.read_record`): its words from
    the first option on (the program may be ``taco-compare`` or ``python
    scripts/compare_objectives.py``), parsed and checked as :func:`study_options` does; options
    this taco-compare no longer has are left out, and no file is read.

    Raises:
        ValueError: the command does not parse, or an option does not fit (the message says
            which).
    """
    return study_options(*command_arguments(command))


def command_arguments(command: str) -> Tuple[argparse.Namespace, List[str]]:
    """The arguments of a recorded ``taco-compare`` command line as :func:`build_parser` parses
    them (options this taco-compare no longer has left out) and its ``fairseq-train`` options
    after ``--`` (:func:`read_command`).

    Raises:
        ValueError: the command does not parse (argparse's message).
    """
    words = shlex.split(command)
    first = next((i for i, word in enumerate(words) if word.startswith("-")), len(words))
    own, fairseq_args = split_fairseq_args(words[first:])
    args, _ = build_parser(raise_errors=True).parse_known_args(own)
    return args, list(fairseq_args)


def recorded_study_call(argv: Sequence[str]) -> Optional[argparse.Namespace]:
    """The call options (:func:`add_call_options`) of a ``--report-only`` call that leaves out
    an option a run needs (``--data``, ``--glue-data``, ``--arch``, ``--max-update``,
    ``--checkpoint-updates``; e.g. ``--out`` alone): it reports the recorded study
    (:func:`recorded_options`), with ``given`` added (the study's options the call gives, dest
    → value, no default filled in) and ``fairseq_args`` (those after ``--``). None: ``argv``
    gives every option a run needs (or is no --report-only call). Exits (argparse's usage and
    a one-line error) on an option that does not parse, or on ``--report-only`` without
    ``--out``."""
    own, fairseq_args = split_fairseq_args(argv)
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_call_options(parser, out_required=False)
    call, _ = parser.parse_known_args(own)
    if not call.report_only:
        return None
    study = build_parser()
    needed = [action.dest for action in study._actions if action.required]
    for action in study._actions:  # none required, no default: the options given only
        action.required, action.default = False, argparse.SUPPRESS
    given = vars(study.parse_args(own))
    if all(dest in given for dest in needed):
        return None
    if call.out is None:
        parser.error("--report-only without --out: give the --out of the study to report")
    call.given = {dest: value for dest, value in given.items() if dest not in vars(call)}
    call.fairseq_args = list(fairseq_args)
    return call


def check_branches(objectives: Sequence[str]) -> None:
    """``--branch-update`` needs objectives to branch (a baseline and at least one more), each
    of the plugin's ``taco_masked_lm`` task, which takes ``--tc-allow-changed-objective``, and
    building the baseline's model (the same ``model`` settings of its recipe): the branch
    continues the baseline's optimizer state, which holds one state per trainable parameter.

    Raises:
        ValueError: naming the objective or what to give.
    """
    from taco_fairseq.comparison.objectives import model_settings, objective_args

    if len(objectives) < 2:
        raise ValueError(f"--branch-update with one objective ({objectives[0]}): give the "
                         "baseline first and the objectives that branch from it after it, "
                         "e.g. --objectives mlm taco")
    for objective in objectives[1:]:
        args = objective_args(objective)
        if args[args.index("--task") + 1] != "taco_masked_lm":
            raise ValueError(f"--branch-update: objective {objective} is not of the "
                             "taco_masked_lm task, which alone can continue another "
                             "objective's run (--tc-allow-changed-objective); leave it out of "
                             "--objectives or run it without --branch-update")
        model, baseline_model = model_settings(objective), model_settings(objectives[0])
        if model != baseline_model:
            raise ValueError(
                f"--branch-update: objective {objective} builds another model than the "
                f"baseline {objectives[0]} (model settings {model or 'none'} against "
                f"{baseline_model or 'none'}), so it cannot continue the baseline's optimizer "
                "state; branch only objectives of the baseline's model, e.g. --objectives mlm "
                "taco")


def objective_max_updates(specs: Sequence[str], objectives: Sequence[str]
                          ) -> Tuple[Tuple[str, int], ...]:
    """``--objective-max-update`` entries ``OBJECTIVE=N`` → ``((objective, N), ...)`` in
    ``objectives``' order.

    Raises:
        ValueError: an entry is not ``OBJECTIVE=N`` with N >= 1, names an objective not in
            ``--objectives``, or one twice.
    """
    stops: Dict[str, int] = {}
    for spec in specs:
        objective, sep, value = spec.partition("=")
        if not sep or not value.isdigit() or int(value) < 1:
            raise ValueError(f"--objective-max-update: expected OBJECTIVE=N with N >= 1, got "
                             f"{spec!r}")
        if objective not in objectives:
            from taco_fairseq.comparison.pretraining import BRANCH_SUFFIX

            branched = objective.endswith(BRANCH_SUFFIX) and objective[
                : -len(BRANCH_SUFFIX)] in objectives
            hint = " (a branch: add --branch-update B)" if branched else ""
            raise ValueError(f"--objective-max-update {spec}: {objective} is not among the "
                             f"runs' objectives {' '.join(objectives)}{hint}")
        if objective in stops:
            raise ValueError(f"--objective-max-update gives {objective} twice")
        stops[objective] = int(value)
    return tuple((o, stops[o]) for o in objectives if o in stops)


#: Non-empty lines of each --heldout-text file read before pre-training to find text in it.
HELDOUT_CHECK_LINES = 10


def named_files(specs: Sequence[str], option: str) -> Tuple[Tuple[str, Path], ...]:
    """``NAME=FILE`` entries → ``((name, path), ...)``; a name is letters, digits, ``-`` and
    ``_`` (it names a column).

    Raises:
        ValueError: an entry is not ``NAME=FILE`` with such a name, or a name is given twice.
    """
    files: Dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not path or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"{option}: expected NAME=FILE with a NAME of letters, digits, - "
                             f"and _, got {spec!r}")
        if name in files:
            raise ValueError(f"{option} gives {name} twice")
        files[name] = Path(path)
    return tuple(files.items())


def check_heldout_text(paths: Sequence[Path], option: str = "--heldout-text") -> Optional[str]:
    """Why ``--heldout-text`` (or ``option``) cannot be read in phase 2 (None: it can):
    a file that does not exist, a directory, or one whose first :data:`HELDOUT_CHECK_LINES`
    non-empty lines hold no sentence as phase 2 reads them
    (:func:`taco_fairseq.analysis.sentences.read_sentences`: empty, blank or markup only,
    not UTF-8, not decompressible); a large ``.xz`` is not read to its end."""
    from taco_fairseq.analysis.sentences import read_sentences

    absent = [str(f) for f in paths if not f.exists()]
    if absent:
        return (f"{option}: no such file: {', '.join(absent)} (a relative path is read "
                f"from {Path.cwd()})")
    for path in paths:
        if path.is_dir():
            return (f"{option} {path}: a directory, not a file; give text files in it "
                    "(plain, .xz or .gz)")
        try:
            found = next(read_sentences(path, max_lines=HELDOUT_CHECK_LINES), None)
        except (OSError, ValueError) as e:
            problem = str(e).removeprefix(f"{path}: ")
        else:
            if found is not None:
                continue
            problem = "no text found"
        return (f"{option} {path}: {problem}; give a file of raw text not seen in "
                "pre-training")
    return None


def _without_source(search: dict) -> dict:
    """A search.json's entries without where they were read from (``"searched_in"``)."""
    return {task: {k: v for k, v in entry.items() if k != "searched_in"}
            for task, entry in search.items()}


def check_search(options: StudyOptions, source: Path, parser, copy: bool = True) -> None:
    """``--finetune-search-from SOURCE``: it must choose a point of the grid for every task,
    and a different search must not be in OUT already; ``copy``: copies it to
    ``OUT/search.json`` (not for ``--report-only``, which writes no input of the runs)."""
    from taco_fairseq.comparison.study import read_search

    if not source.is_file():
        parser.error(f"--finetune-search-from {source}: no such file (give the search.json "
                     "of an earlier study's --out)")
    try:
        search = json.loads(source.read_text())
    except (OSError, ValueError) as e:
        parser.error(f"--finetune-search-from {source}: cannot read it as JSON ({e})")
    if not isinstance(search, dict) or not all(isinstance(v, dict) for v in search.values()):
        parser.error(f"--finetune-search-from {source}: not the search.json of a comparison "
                     '(task → {"chosen": POINT, ...})')
    labels = {p.label for p in options.points}
    for task in [*options.tasks, *options.final_tasks]:
        chosen = search.get(task, {}).get("chosen")
        if chosen not in labels:
            parser.error(f"--finetune-search-from {source}: "
                         + (f"{task} chose {chosen}, not a point of --finetune-lr x "
                            "--finetune-epochs x --finetune-batch-size" if chosen else
                            f"no point for {task}"))
    search = {task: {**entry, "searched_in": entry.get("searched_in", str(source.resolve()))}
              for task, entry in search.items()}
    target = options.out / "search.json"
    if target.is_file():
        recorded = read_search(options.out)
        if _without_source(recorded) != _without_source(search):
            parser.error(f"--finetune-search-from {source}: {target} holds another search; "
                         "choose another --out")
        search = recorded  # the same search from another path (e.g. another checkout)
    if not copy:
        return
    options.out.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(search, indent=2) + "\n")


def main(argv=None) -> None:
    """taco-compare (module doc): the phases, or with ``--report-only`` none, then the report
    (:mod:`taco_fairseq.comparison.run`). Exits with a one-line error (SystemExit) on options
    that do not fit, a --out without a study for --report-only, a call that does not continue
    the recorded study or reports it with other options (:mod:`taco_fairseq.comparison.record`),
    runs that fail, or nothing to report yet; with status 130 and one line on Ctrl-C."""
    argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
    command = "taco-compare " + shlex.join(argv)
    call = recorded_study_call(argv)
    if call is None:
        options, report_only = parse_options(argv)
        out = options.out
    else:
        report_only, out = True, call.out
        require_extras("taco-compare", *EXTRAS)  # as parse_options does
        configure_logging()
    from taco_fairseq.comparison.record import check_reported, no_study, read_record
    from taco_fairseq.comparison.run import report_study, run_study

    if report_only:  # before anything is written
        why = no_study(out)
        if why:
            sys.exit(f"error: --out {out}: {why}")
    try:
        recorded = read_record(out, read_command)
        if call is not None:
            options = recorded_options(call, recorded)
        elif report_only and recorded is not None:
            check_reported(recorded, options, fairseq_options=bool(split_fairseq_args(argv)[1]))
        (report_study if report_only else run_study)(options, command, recorded)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        print(f"taco-compare: interrupted; run the same command again to continue the study in "
              f"{out} (finished runs and measures are kept, interrupted runs resume from their "
              "checkpoint_last.pt)", file=sys.stderr)
        sys.exit(130)


def recorded_options(call: argparse.Namespace, recorded: Optional[StudyRecord]) -> StudyOptions:
    """The options of a ``--report-only`` call that leaves out an option a run needs
    (:func:`recorded_study_call`): the ``recorded`` study's, with the call's ``--jobs`` and
    ``--reference`` (checked as :func:`parse_options` checks it: exits on one that does not
    fit). The study's options the call gives (those after ``--`` too) must be the recorded
    ones (:func:`taco_fairseq.comparison.record.check_reported`, with the record's in place of
    those it leaves out); a ``--finetune-search-from`` given is checked as
    :func:`parse_options` checks it.

    Raises:
        ValueError: nothing records the study's options, or an option given differs from the
            record (naming it), does not fit, or the recorded command does not parse.
    """
    from taco_fairseq.comparison.record import COMMAND_FILE, STUDY_FILE, check_reported

    if recorded is None:
        raise ValueError(f"--out {call.out}: no {STUDY_FILE} (nor the {COMMAND_FILE} of an "
                         "older taco-compare) records the study's options; give them with "
                         "--report-only")
    options = dataclasses.replace(recorded.options, jobs=call.jobs, reference=call.reference)
    if call.given or call.fairseq_args:
        try:
            args, fairseq_args = command_arguments(recorded.command)
        except ValueError as e:
            raise ValueError(f"{recorded.path}: its command does not parse ({e}); give "
                             "--report-only --out alone, or all the study's options") from None
        given = study_options(argparse.Namespace(**{**vars(args), **call.given}),
                              call.fairseq_args or fairseq_args)
        check_reported(recorded, dataclasses.replace(given, out=call.out,
                                                     reference=call.reference),
                       fairseq_options=bool(call.fairseq_args))
        if "finetune_search_from" in call.given:
            check_search(options, call.given["finetune_search_from"], build_parser(),
                         copy=False)
    if options.reference is not None:
        check_reference(options, build_parser())
    return options


if __name__ == "__main__":
    main()
