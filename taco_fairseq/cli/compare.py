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
Holm-corrected. OUT/command.txt records the command that ran the phases, for the report of a
later --report-only call, which must give its options: the report of what exists so far
(before any fine-tuning has finished, of the checkpoint measures, with their tests; the
fine-tuning sections say that none has finished). --reference REF_OUT adds a description
(no test) of this study's runs against another study's at equal updates and pre-training
seed, from REF_OUT/checkpoints.csv (and summary.csv): e.g. a control that trains
--objectives taco only against the study it varies. Run it again and it continues:
pre-training from checkpoint_last.pt, finished fine-tunings skipped. Options after `--` go to
every pre-training fairseq-train call (not those the comparison sets itself, such as --seed).

Example (a toy run on the CPU; docs/results.md has the study's command):

    taco-compare --data data-bin/wiki --glue-data data-bin/glue \\
        --out runs/compare --arch roberta_tiny --max-update 40 --checkpoint-updates 20 40 \\
        --tasks RTE --seeds 1 --cpu -- --num-workers 0
"""

import argparse
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from taco_fairseq.comparison.objectives import available_objectives
from taco_fairseq.comparison.pretraining import PretrainSettings, changed_options, option_values
from taco_fairseq.comparison.figures import plot_figures
from taco_fairseq.comparison.report import markdown_report
from taco_fairseq.comparison.tables import (
    COMMAND_FILE,
    read_reference,
    write_checkpoints_csv,
    write_summary_csv,
)
from taco_fairseq.comparison.statistics import PRIMARY_ENDPOINTS, PrimaryEndpoint, ScoreTable
from taco_fairseq.comparison.study import (
    MeasureInputs,
    PhaseTimer,
    StudyOptions,
    finetune_all,
    initial_checkpoints,
    measure_checkpoints,
    chosen_points,
    pretrain_all,
    read_measures,
    read_search,
    scores_of,
    search_points,
    set_threads,
    study_checkpoints,
)
from taco_fairseq.cli.argtypes import positive, seed
from taco_fairseq.cli.glue_options import parse_update_caps, split_fairseq_args
from taco_fairseq.glue.pretrained import check_glue_data_fits
from taco_fairseq.glue.recipes import Hyperparameters, default_point
from taco_fairseq.glue.runner import check_fairseq_args, check_given_once
from taco_fairseq.glue.summary import collect_results
from taco_fairseq.glue.tasks import get_tasks
from taco_fairseq.logs import configure_logging
from taco_fairseq.prep.pretraining import INFO_FILE

#: What a study's --out holds once taco-compare has run there (the phases' files: study.py).
STUDY_FILES = (COMMAND_FILE, "pretrain", "measures", "finetune")

#: The options a ``--report-only`` call may give otherwise than ``OUT/command.txt``
#: (:func:`check_recorded_study`): where the study's files lie (paths, written relative to the
#: directory the study ran in, which command.txt does not record; the report reads none of
#: --data, --glue-data and --heldout-text, and --finetune-search-from is checked against
#: OUT/search.json), how the runs ran, the report's own options, and, after ``--``, what the
#: rerun check of a pre-training lets differ (--user-dir, :func:`.pretraining.check_same_options`).
#: Every other option says what the study is and must be the recorded one.
REPORT_ONLY_MAY_DIFFER = ("--out", "--data", "--glue-data", "--heldout-text",
                          "--finetune-search-from", "--jobs", "--cpu", "--report-only",
                          "--reference", "-- --user-dir")


def build_parser() -> argparse.ArgumentParser:
    """taco-compare's options (module doc); what comes after ``--`` is split off first
    (:func:`taco_fairseq.cli.glue_options.split_fairseq_args`)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    small = default_point("small")
    parser.add_argument("--data", type=Path, required=True, help="pre-training data-bin")
    parser.add_argument("--glue-data", type=Path, required=True,
                        help="GLUE tasks prepared with the data-bin's vocabulary "
                        "(taco-prepare-glue --pretraining-data DATA)")
    parser.add_argument("--out", type=Path, required=True, help="output directory")
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
    group = parser.add_argument_group("masked-LM loss on held-out text, at every checkpoint and "
                                      "the initialization")
    group.add_argument("--heldout-mlm-text", nargs="+", default=[], metavar="NAME=FILE",
                       help="raw text (plain, .xz or .gz) whose masked-LM loss is measured as "
                       "mlm_loss_NAME, bits per masked token, e.g. wikitext2=../shared/data/"
                       "corpus/wikitext-2-raw/wiki.test.raw.xz (default: none)")
    parser.add_argument("--primary-endpoint", choices=PRIMARY_ENDPOINTS, default="glue-average",
                        help="the one comparison the report tests without correction, declared "
                        "before the runs: glue-average (the fine-tuned GLUE average at the last "
                        "checkpoint over --tasks, or over --final-tasks without --tasks: the "
                        "paper's claim), probe-average (the average of the frozen-encoder "
                        "linear probes) or pos-ambiguous (the part-of-speech probe's accuracy "
                        "on ambiguous words), each at each objective's last checkpoint; every "
                        "other verdict is exploratory (default: %(default)s)")
    parser.add_argument("--jobs", type=positive(int), default=1,
                        help="pre-trainings, checkpoint measures and fine-tunings side by "
                        "side; on the CPU each gets cores/jobs threads")
    parser.add_argument("--cpu", action="store_true", help="train and evaluate on the CPU")
    parser.add_argument("--report-only", action="store_true",
                        help="run nothing: write the report of what has finished so far (e.g. "
                        "while the runs go on, or after an interruption; before any "
                        "fine-tuning has finished, of the checkpoint measures); give the "
                        "command recorded in OUT/command.txt: an option that says what the "
                        "study is and differs from it is an error (the paths, --jobs, --cpu "
                        "and --reference may differ; the options after `--` may be left out)")
    parser.add_argument("--reference", type=Path, metavar="REF_OUT",
                        help="another study's --out (its checkpoints.csv, and summary.csv if "
                        "there is one): the report adds, per measure and checkpoint (matched "
                        "on updates and pre-training seed), this study's runs against "
                        "REF_OUT's of each objective, as a description without test (e.g. a "
                        "control that trains --objectives taco only, against the study it "
                        "varies)")
    return parser


def parse_options(argv) -> Tuple[StudyOptions, bool]:
    """The study's options and whether only the report is asked for (``--report-only``)."""
    own, fairseq_args = split_fairseq_args(argv)
    parser = build_parser()
    args = parser.parse_args(own)
    try:
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
        mlm_texts = named_files(args.heldout_mlm_text, "--heldout-mlm-text")
        caps = parse_update_caps(args.finetune_max_updates, finetuned, "--finetune-max-updates",
                                 "--tasks or --final-tasks")
        check_fairseq_args(caps, shlex.split(args.finetune_options))
        settings = PretrainSettings(
            data=args.data, arch=args.arch, max_update=args.max_update,
            checkpoint_updates=tuple(sorted(set(args.checkpoint_updates))),
            objective_max_update=objective_max_updates(args.objective_max_update,
                                                       args.objectives),
            tokens_per_sample=args.tokens_per_sample, batch_size=args.batch_size,
            update_freq=args.update_freq, lr=args.lr,
            warmup_updates=(args.warmup_updates if args.warmup_updates is not None
                            else min(10000, max(1, args.max_update // 10))),
            cpu=args.cpu, extra=tuple(fairseq_args))
        unknown = [o for o in args.objectives if o not in available_objectives()]
        if unknown:
            raise ValueError(f"--objectives {unknown}: no such recipe; choose from "
                             f"{', '.join(available_objectives())}")
    except ValueError as e:
        parser.error(str(e))
    unprepared = sorted({t.name for t in [*finetuned, *probed]
                         if not (args.glue_data / t.name / INFO_FILE).is_file()})
    if unprepared:  # found now, not after hours of pre-training
        parser.error(f"--glue-data {args.glue_data}: {', '.join(unprepared)} not prepared (no "
                     f"{INFO_FILE}); prepare them with taco-prepare-glue --tasks "
                     f"{' '.join(unprepared)}")
    if not (args.data / "dict.txt").is_file():
        parser.error(f"--data {args.data}: no dict.txt (prepare it with "
                     "taco-prepare-data)")
    why = check_heldout_text(args.heldout_text) or check_heldout_text(
        [path for _, path in mlm_texts], "--heldout-mlm-text")
    if why:  # read in phase 2, after hours of pre-training
        parser.error(why)
    if args.conllu_train is not None:  # read now, not after hours of pre-training
        from taco_fairseq.analysis.conllu import CoNLLUError, read_conllu

        for option, path in (("--conllu-train", args.conllu_train),
                             ("--conllu-test", args.conllu_test)):
            try:
                read_conllu(path)
            except (FileNotFoundError, CoNLLUError) as e:
                parser.error(f"{option}: {e}")
    for task in dict.fromkeys(t.name for t in [*finetuned, *probed]):  # before phase 1
        try:
            check_glue_data_fits(args.data, args.glue_data / task, f"{args.out / 'pretrain'}/*/"
                                 f"checkpoints/*.pt (to be pre-trained on --data {args.data})")
        except (FileNotFoundError, ValueError) as e:
            parser.error(f"--glue-data {args.glue_data} (checked against --data {args.data} "
                         f"before pre-training): {e}")
    options = StudyOptions(
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
        conllu_test=args.conllu_test, mlm_texts=mlm_texts, jobs=args.jobs, cpu=args.cpu,
        reference=args.reference,
    )
    if args.finetune_search_from is not None:
        check_search(options, args.finetune_search_from, parser, copy=not args.report_only)
    if args.reference is not None:
        if args.reference.resolve() == args.out.resolve():
            parser.error(f"--reference {args.reference} is --out itself: give the --out of "
                         "another study")
        try:  # checked now, not after the runs
            read_reference(args.reference, options.pretrain_seeds,
                           options.settings.checkpoint_updates)
        except (OSError, ValueError) as e:
            parser.error(f"--reference {args.reference}: {e}")
    return options, args.report_only


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
            raise ValueError(f"--objective-max-update {spec}: {objective} is not among "
                             f"--objectives {' '.join(objectives)}")
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


def machine() -> str:
    """The report's ``Machine:`` line: platform, CPU cores, the GPU (or the CPU) and the
    Python, torch and fairseq versions."""
    import fairseq
    import torch

    device = (torch.cuda.get_device_name(0) if torch.cuda.is_available()
              else f"CPU only ({platform.processor() or platform.machine()})")
    return (f"{platform.platform()}, {os.cpu_count()} cores, {device}; Python "
            f"{platform.python_version()}, torch {torch.__version__}, fairseq "
            f"{fairseq.__version__}")


def main(argv=None) -> None:
    """taco-compare (module doc): the phases, or with ``--report-only`` none, then the report.
    Exits with a one-line error (SystemExit) on options that do not fit, a --out without a
    study for --report-only or --report-only options that differ from the study's recorded
    command (:func:`check_recorded_study`), or nothing to report yet."""
    argv = [str(a) for a in (sys.argv[1:] if argv is None else argv)]
    # force: importing fairseq (its wav2vec2_classification) set the root logger to DEBUG
    configure_logging()
    options, report_only = parse_options(argv)
    if report_only:  # before anything is written
        why = no_study(options.out)
        if why:
            sys.exit(f"error: --out {options.out}: {why}")
    options.out.mkdir(parents=True, exist_ok=True)
    command = "taco-compare " + shlex.join(argv)
    timer = PhaseTimer(options.out)
    recorded = options.out / COMMAND_FILE
    before = recorded.read_text(encoding="utf-8") if recorded.is_file() else None
    if before is not None and report_only:  # the report is of the recorded study
        try:
            check_recorded_study(argv, recorded)
        except ValueError as e:
            sys.exit(f"error: {e}")
    elif before is not None:
        declared = recorded_primary_endpoint(before)
        if declared != options.primary_endpoint:
            sys.exit(f"error: --primary-endpoint {options.primary_endpoint}: {recorded} records "
                     f"{declared} for this study (the primary endpoint is declared before the "
                     f"results are seen); give --primary-endpoint {declared}, or use another "
                     "--out for a new study")
    try:
        if report_only:
            measures = read_measures(options)
            scores = scores_of(finished_finetunings(options.out), chosen_points(options))
        else:
            recorded.write_text(command + "\n", encoding="utf-8")
            measures, scores = run_phases(options, timer)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        if not report_only:  # the runs were not made with this command (e.g. other options)
            if before is None:
                recorded.unlink()
            else:
                recorded.write_text(before, encoding="utf-8")
        sys.exit(f"error: {e}")
    if not measures and not scores:
        sys.exit(f"error: --out {options.out}: nothing to report yet (no checkpoint measured in "
                 "measures/, no fine-tuning finished in finetune/: each checkpoint is measured "
                 "as soon as it is saved; follow pretrain/*/train.log meanwhile)")
    print("== 5/5 report", flush=True)
    write_report(options, command_lines(options.out, command, report_only), measures, scores,
                 timer.seconds)


def no_study(out: Path) -> Optional[str]:
    """Why ``out`` holds no study for ``--report-only`` to report on, with what to do (None:
    it holds one: a recorded command, pre-training runs, measures or fine-tunings)."""
    if not out.is_dir():
        missing = "no such directory"
    elif not any((out / name).exists() for name in STUDY_FILES):
        missing = f"none of {', '.join(STUDY_FILES)} in it"
    else:
        return None
    return (f"no study here ({missing}; give the --out of a taco-compare study, or run "
            "taco-compare without --report-only to start one)")


def finished_finetunings(out: Path) -> List[dict]:
    """The results of the fine-tunings finished under ``OUT/finetune`` (``metrics.json``
    contents, :func:`taco_fairseq.glue.summary.collect_results`); none before the first."""
    try:
        return collect_results(out / "finetune")
    except FileNotFoundError:  # no fine-tuning finished yet: a report of the measures
        return []


def recorded_primary_endpoint(command: str) -> str:
    """The ``--primary-endpoint`` of a recorded ``taco-compare`` command (its default when
    the command has none, as before the option existed)."""
    own, _ = split_fairseq_args(shlex.split(command)[1:])
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--primary-endpoint", default="glue-average")
    return parser.parse_known_args(own)[0].primary_endpoint


def study_values(argv: Sequence[str]) -> Dict[str, List[str]]:
    """The options of a taco-compare command line as it parses them (defaults filled in, as
    strings; ``--checkpoint-updates`` sorted, as the study uses them; a flag not given and an
    option without a value, or with an empty one, left out), and its ``fairseq-train``
    options after ``--`` as ``"-- NAME"``
    (:func:`taco_fairseq.comparison.pretraining.option_values`). Options a later taco-compare
    no longer has are left out (they cannot change this one's report).

    Raises:
        ValueError: ``argv`` does not parse (argparse's message).
    """
    own, fairseq_args = split_fairseq_args(argv)
    parser = build_parser()

    def error(message):
        raise ValueError(message)

    parser.error = error  # argparse's own errors call it (instead of printing and exiting)
    args = parser.parse_known_args(own)[0]
    values = {}
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if (not action.option_strings or action.dest == "help" or value is None
                or value is False or value in ("", [])):
            continue
        if action.dest == "checkpoint_updates":
            value = sorted(set(value))
        values[action.option_strings[0]] = (
            [] if value is True else [str(v) for v in value] if isinstance(value, list)
            else [str(value)])
    values.update({f"-- {name}": v for name, v in option_values(fairseq_args).items()})
    return values


def check_recorded_study(argv: Sequence[str], recorded: Path) -> None:
    """A ``--report-only`` call's options (``argv``) against the command that ran the study
    (``recorded``, ``OUT/command.txt``): the report is of the recorded study, so every option
    but those of :data:`REPORT_ONLY_MAY_DIFFER` must be the recorded one (options after ``--``
    are compared only when ``argv`` gives some: the report reads none of them).

    Raises:
        ValueError: naming each option that differs (recorded → given) and the recorded
            command to repeat with ``--report-only``; or ``recorded`` does not parse.
    """
    command = recorded.read_text(encoding="utf-8").strip()
    ran = shlex.split(command)[1:]
    try:
        before = study_values(ran)
    except ValueError as e:
        raise ValueError(f"{recorded}: not a taco-compare command ({e}): cannot check the "
                         "options against it; give --out of a taco-compare study") from None
    now = study_values(argv)
    if not split_fairseq_args(argv)[1]:
        before = {k: v for k, v in before.items() if not k.startswith("-- ")}
    changed = changed_options(before, now, REPORT_ONLY_MAY_DIFFER)
    if changed:
        raise ValueError(
            f"--report-only: {'; '.join(changed)} (recorded in {recorded} → given here): the "
            "report is of the study that command ran, and these options say what it is; "
            "repeat the recorded command with --report-only (only the paths, --jobs, --cpu and "
            "--reference may be changed): taco-compare "
            + shlex.join(["--report-only", *_with_out(ran, now["--out"][0])]))


def _with_out(ran: Sequence[str], given: str) -> List[str]:
    """The recorded command ``ran`` with the ``--out`` ``given`` (the study being reported,
    perhaps a copy), so that repeating it cannot write into the recorded directory."""
    own, fairseq_args = split_fairseq_args(ran)
    command = [f"--out={given}" if a.startswith("--out=") else a for a in own]
    for i, a in enumerate(command[:-1]):
        if a == "--out":
            command[i + 1] = str(given)
    return [*command, *(["--", *fairseq_args] if fairseq_args else [])]


def command_lines(out: Path, command: str, report_only: bool) -> List[str]:
    """The report's ``Command:`` line: ``command``, or after ``--report-only`` the command that
    ran the phases last (``OUT/command.txt``) and a line naming the ``--report-only`` call."""
    if not report_only:
        return [f"Command: `{command}`"]
    path = Path(out) / COMMAND_FILE
    ran = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
    return [f"Command: `{ran}`" if ran else
            f"Command: not recorded ({path} does not exist: the runs were made by a taco-compare "
            "that did not record it, or none has run in this --out)", "",
            f"Report written by `{command}` (--report-only: it ran nothing)."]


def run_phases(options: StudyOptions, timer: PhaseTimer):
    """Phases 1-4 (taco_fairseq/comparison/study.py); returns the checkpoint measures and
    the dev scores."""
    set_threads(options)
    s = options.settings
    stops = "".join(f", {o} to {n}" for o, n in s.objective_max_update)
    print(f"== 1/5 pre-training {len(options.runs)} runs "
          f"({', '.join(r.name for r in options.runs)}) to {s.max_update} updates{stops}, "
          f"{options.jobs} at a time", flush=True)
    inputs = MeasureInputs(options)

    def record():  # checkpoints.csv of every row so far, after each checkpoint measured
        measures = read_measures(options)
        write_checkpoints_csv(measures, options.out / "checkpoints.csv")
        print(f"   measured {len(measures)} checkpoints so far "
              f"({options.out / 'checkpoints.csv'})", flush=True)

    def measure(found):  # phase 2 beside phase 1: each checkpoint as soon as it is saved
        measure_checkpoints(options, found, inputs, record)

    with timer.phase("pre-training"):
        pretrain_all(options, measure)
    found = study_checkpoints(options)
    initial = initial_checkpoints(options)
    print(f"== 2/5 validation loss, contextual score, neighbour attention and probes "
          f"({', '.join(options.probe_tasks) or 'none'}) of {len(found)} checkpoints and "
          f"{len(initial)} initializations", flush=True)
    with timer.phase("checkpoint measures"):  # those not measured beside phase 1
        measures = measure_checkpoints(options, [*initial, *found])
    if not (options.tasks or options.final_tasks):
        print("== 3/5 and 4/5: no fine-tuning (neither --tasks nor --final-tasks)", flush=True)
        return measures, []
    reused = {e["searched_in"] for e in read_search(options.out).values() if "searched_in" in e}
    if reused:
        print(f"== 3/5 fine-tuning points from {', '.join(sorted(reused))} (no search)",
              flush=True)
    elif len(options.points) > 1:
        print(f"== 3/5 fine-tuning search over {len(options.points)} points at "
              f"{options.last_updates} updates", flush=True)
    else:
        print(f"== 3/5 fine-tuning with one point: {options.points[0].label}", flush=True)
    with timer.phase("fine-tuning search"):
        points = search_points(options, found)
    last = [c for c in found if c.updates == options.last_updates]
    print(f"== 4/5 fine-tuning "
          + (f"{len(found)} checkpoints on {', '.join(options.tasks)} (+ "
             f"{', '.join(options.final_tasks) or 'nothing'} at the last)" if options.tasks else
             f"the {len(last)} last checkpoints on {', '.join(options.final_tasks)}")
          + f" x seeds {options.seeds}", flush=True)
    with timer.phase("fine-tuning"):
        scores = finetune_all(options, found, points)
    return measures, scores


def write_report(options: StudyOptions, command: List[str], measures, scores, timings) -> None:
    """summary.csv, checkpoints.csv, the figures and report.md in OUT (its header with the
    ``command`` lines, :func:`command_lines`); prints the report. Without ``scores`` (no
    fine-tuning finished yet) summary.csv has its header only and the report is of the
    ``measures``; with ``options.reference``, it describes the runs against that study's
    (:func:`taco_fairseq.comparison.tables.read_reference`)."""
    out = options.out
    try:  # read again (parse_options checked it): the reference may have reported since
        reference = None if options.reference is None else read_reference(
            options.reference, options.pretrain_seeds, options.settings.checkpoint_updates)
    except (OSError, ValueError) as e:
        sys.exit(f"error: --reference {options.reference}: {e}")
    write_summary_csv(scores, out / "summary.csv")
    write_checkpoints_csv(measures, out / "checkpoints.csv")
    table = ScoreTable(scores) if scores else None
    baseline = options.objectives[0]
    figures = plot_figures(table, measures, baseline, out)
    header = "\n".join([
        "# Objective comparison", "", *command, "",
        f"Machine: {machine()}", "",
        "Scores: GLUE dev, points (MCC for CoLA, F1 for MRPC, Spearman for STS-B, accuracy "
        "otherwise); "
        + ("averages over the tasks fine-tuned at every checkpoint." if options.tasks else
           f"averages over the tasks fine-tuned at the last checkpoint only (--final-tasks "
           f"{' '.join(options.final_tasks)})."),
    ])
    primary = PrimaryEndpoint(options.primary_endpoint, options.last_updates,
                              tuple(options.average_tasks), tuple(options.pretrain_seeds),
                              options.settings.objective_max_update)
    report = markdown_report(table, measures, baseline, header, timings,
                             read_search(options.out), primary, figures, reference)
    (out / "report.md").write_text(report, encoding="utf-8")
    print(report)
    print(f"wrote {out / 'summary.csv'}, {out / 'checkpoints.csv'}, {out / 'report.md'} and the "
          "figures", flush=True)


if __name__ == "__main__":
    main()
