"""What a ``taco-compare`` call does once its options are known: run the study (its record
written, phases 1-4 of :mod:`.study`, then the report) or, with ``--report-only``, report what
has finished so far.

The report's files in ``OUT``: ``summary.csv``, ``checkpoints.csv`` (:mod:`.tables`), the
figures (:mod:`.figures`) and ``report.md`` (:mod:`.report`), whose header gives the command
that ran the phases (:mod:`.record`) and the machine.
"""

import os
import platform
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from ..glue.summary import collect_results
from .figures import plot_figures
from .record import STUDY_FILE, StudyRecord, check_continues
from .report import markdown_report
from .statistics import PrimaryEndpoint, Score, ScoreTable
from .study import (
    MeasureInputs,
    PhaseTimer,
    StudyOptions,
    chosen_points,
    finetune_all,
    initial_checkpoints,
    measure_checkpoints,
    pretrain_all,
    read_measures,
    read_search,
    scores_of,
    search_points,
    set_threads,
    study_checkpoints,
)
from .tables import read_reference, write_checkpoints_csv, write_summary_csv


def run_study(options: StudyOptions, command: str, recorded: Optional[StudyRecord]) -> None:
    """Run the study of ``options`` (phases 1-4, :func:`run_phases`) and write its report: a
    new study, or the continuation of the one ``recorded`` in ``OUT`` (:func:`.record.
    check_continues`). ``options`` and ``command`` are recorded in ``OUT/study.json`` first; if
    the phases stop on an error, the record is put back as it was (``recorded``; none:
    removed), so that it stays the record of the last call the runs were made with.

    Raises:
        ValueError: the call does not continue the recorded study (nothing is written).
        FileNotFoundError, ValueError, RuntimeError: as :func:`run_phases` (e.g. a run was
            pre-trained with other options) and :func:`write_report`.
    """
    if recorded is not None:
        check_continues(recorded, options)
    options.out.mkdir(parents=True, exist_ok=True)
    timer = PhaseTimer(options.out)
    record = StudyRecord(options, command)
    record.write()
    try:
        measures, scores = run_phases(options, timer)
    except (FileNotFoundError, ValueError, RuntimeError):
        if recorded is None:
            record.path.unlink()
        else:
            recorded.write()
        raise
    write_report(options, [f"Command: `{command}`"], measures, scores, timer.seconds)


def report_study(options: StudyOptions, command: str, recorded: Optional[StudyRecord]) -> None:
    """``--report-only``: the report of what has finished so far (before any fine-tuning has
    finished, of the checkpoint measures), under the command that ran the phases
    (``recorded``'s; none: not recorded) and a line naming this ``command``; runs nothing and
    writes no input of the runs.

    Raises:
        ValueError: as :func:`write_report`.
    """
    scores = scores_of(finished_finetunings(options.out), chosen_points(options))
    lines = [f"Command: `{recorded.command}`" if recorded is not None else
             f"Command: not recorded ({options.out / STUDY_FILE} does not exist: the runs were "
             "made by a taco-compare that did not record it, or none has run in this --out)",
             "", f"Report written by `{command}` (--report-only: it ran nothing)."]
    write_report(options, lines, read_measures(options), scores,
                 PhaseTimer(options.out).seconds)


def finished_finetunings(out: Path) -> List[dict]:
    """The results of the fine-tunings finished under ``OUT/finetune`` (``metrics.json``
    contents, :func:`taco_fairseq.glue.summary.collect_results`); none before the first."""
    try:
        return collect_results(out / "finetune")
    except FileNotFoundError:  # no fine-tuning finished yet: a report of the measures
        return []


def run_phases(options: StudyOptions, timer: PhaseTimer):
    """Phases 1-4 (:mod:`.study`); returns the checkpoint measures and the dev scores."""
    s = options.settings
    stops = "".join(f", {o} to {n}" for o, n in s.objective_max_update)
    print(f"== 1/5 pre-training {len(options.runs)} runs "
          f"({', '.join(r.name for r in options.runs)}) to {s.max_update} updates{stops}, "
          f"{options.jobs} at a time", flush=True)
    set_threads(options)
    inputs = MeasureInputs(options)

    written = None  # the rows checkpoints.csv holds (None: not written yet)

    def record():  # checkpoints.csv of every row so far, when a measure has changed it
        nonlocal written
        measures = read_measures(options)
        if measures == written:  # a checkpoint measured before, found again
            return
        write_checkpoints_csv(measures, options.out / "checkpoints.csv")
        written = measures
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
          + f" x seeds {list(options.seeds)}", flush=True)
    with timer.phase("fine-tuning"):
        scores = finetune_all(options, found, points)
    return measures, scores


def write_report(options: StudyOptions, command: List[str], measures: Sequence[dict],
                 scores: Sequence[Score], timings: dict) -> None:
    """summary.csv, checkpoints.csv, the figures and report.md in OUT (its header with the
    ``command`` lines); prints the report. Without ``scores`` (no fine-tuning finished yet)
    summary.csv has its header only and the report is of the ``measures``; with
    ``options.reference``, it describes the runs against that study's
    (:func:`taco_fairseq.comparison.tables.read_reference`).

    Raises:
        ValueError: nothing to report yet (no measure, no score: nothing is written), or
            ``options.reference`` cannot be read (naming ``--reference``).
    """
    out = options.out
    if not measures and not scores:
        raise ValueError(f"--out {out}: nothing to report yet (no checkpoint measured in "
                         "measures/, no fine-tuning finished in finetune/: each checkpoint is "
                         "measured as soon as it is saved; follow pretrain/*/train.log "
                         "meanwhile)")
    print("== 5/5 report", flush=True)
    try:  # read again (checked before the runs): the reference may have reported since
        reference = None if options.reference is None else read_reference(
            options.reference, options.pretrain_seeds, options.settings.checkpoint_updates)
    except (OSError, ValueError) as e:
        raise ValueError(f"--reference {options.reference}: {e}") from None
    measures, scores = in_arm_order(options.arms, measures, scores)
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


def in_arm_order(arms: Sequence[str], measures: Sequence[dict],
                 scores: Sequence[Score]) -> Tuple[List[dict], List[Score]]:
    """``measures`` and ``scores`` sorted by the study's ``arms`` (its objectives in the
    declared order, then their branches: :attr:`.study.StudyOptions.arms`), pre-training seed
    and updates, so that the report lists its objectives in the same order whether the rows
    come as they were measured (a run) or as they were read back (``--report-only``, a rerun).
    An objective that is not an arm (none, from taco-compare) goes last, by name."""
    rank = {o: i for i, o in enumerate(arms)}
    arm = lambda objective: (rank.get(objective, len(rank)), objective)
    return (sorted(measures, key=lambda r: (arm(r["objective"]), r["pretrain_seed"],
                                            r["updates"])),
            sorted(scores, key=lambda s: (arm(s.objective), s.pretrain_seed, s.updates,
                                          s.task, s.seed)))


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
