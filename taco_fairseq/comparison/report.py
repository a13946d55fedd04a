"""The files a comparison writes: ``summary.csv`` (one row per fine-tuning), ``checkpoints.csv``
(validation loss and contextual score per checkpoint), the figures and ``report.md``; and
those of another comparison read back, for a report that describes a control against it
(``taco-compare --reference``: :func:`read_reference`)."""

import csv
import dataclasses
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence, TypeVar

import numpy as np

from .statistics import (
    ALPHA,
    INITIALIZATION,
    MEASURE_IDS,
    PROBE_AVERAGE,
    Comparison,
    MeasureTable,
    PairedTest,
    PrimaryEndpoint,
    Score,
    ScoreTable,
    better,
    glue_comparisons,
    improvement,
    is_finite_number,
    is_reference,
    measure_comparisons,
    paired_difference,
    paired_test,
    speedup,
    t_interval,
    with_holm,
)

_Parsed = TypeVar("_Parsed")

#: The columns of ``summary.csv``: the fields of :class:`.statistics.Score`.
SUMMARY_COLUMNS = [f.name for f in dataclasses.fields(Score)]
#: Where a call that runs the phases records its command, for the report of a later
#: ``--report-only`` call (and of a study that reads this one as its ``--reference``).
COMMAND_FILE = "command.txt"
#: The first columns of ``checkpoints.csv`` (every other measure follows).
CHECKPOINT_COLUMNS = ("objective", "pretrain_seed", "updates", "valid_mlm_loss",
                      "contextual_score", "intra_context_cos", "inter_context_cos")


def write_summary_csv(scores: Sequence[Score], path: Path) -> None:
    """``summary.csv``: one row per objective × pretrain_seed × updates × task × seed."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(SUMMARY_COLUMNS)
        for s in sorted(scores, key=lambda s: (s.objective, s.pretrain_seed, s.updates, s.task,
                                                s.seed)):
            writer.writerow([_text(getattr(s, c)) for c in SUMMARY_COLUMNS])


def write_checkpoints_csv(rows: Sequence[Mapping], path: Path) -> None:
    """``checkpoints.csv``: per checkpoint, the validation loss and contextual score
    (:data:`CHECKPOINT_COLUMNS`), then every other measure of the rows (probes, neighbour
    attention, ...) in the order they first appear. A measure that is missing or not a finite
    number (:func:`.statistics.is_finite_number`; e.g. ``valid_mlm_loss`` at update 0: fairseq
    validates after updates only) is an empty cell, which readers take as missing (``csv``
    gives ``""``, pandas NaN); a string is written as it is."""
    columns = list(dict.fromkeys([*CHECKPOINT_COLUMNS, *(k for r in rows for k in r)]))
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in sorted(rows, key=lambda r: (r["objective"], r["pretrain_seed"], r["updates"])):
            writer.writerow([_text(row[c]) if is_finite_number(row.get(c))
                             or isinstance(row.get(c), str) else "" for c in columns])


def read_summary_csv(path: Path) -> List[Score]:
    """The scores of a ``summary.csv`` (:func:`write_summary_csv`), one per row.

    Raises:
        OSError: it cannot be read.
        ValueError: it lacks a column of :data:`SUMMARY_COLUMNS`, or a cell is not of its
            type (naming the file and line).
    """
    fields = dataclasses.fields(Score)
    return _read_csv(path, SUMMARY_COLUMNS, "summary.csv",
                     lambda row: Score(**{f.name: f.type(row[f.name]) for f in fields}))


def read_checkpoints_csv(path: Path) -> List[dict]:
    """The rows of a ``checkpoints.csv`` (:func:`write_checkpoints_csv`) as phase 2 measured
    them: ``objective`` (a string), ``pretrain_seed`` and ``updates`` (integers) and every
    other column a number (an empty cell: None).

    Raises:
        OSError: it cannot be read.
        ValueError: it lacks a column of :data:`.statistics.MEASURE_IDS`, or a cell is not a
            number (naming the file and line).
    """
    return _read_csv(path, MEASURE_IDS, "checkpoints.csv", lambda row: {
        "objective": row["objective"], "pretrain_seed": int(row["pretrain_seed"]),
        "updates": int(row["updates"]),
        **{k: float(v) if v else None for k, v in row.items() if k not in MEASURE_IDS}})


def _read_csv(path: Path, columns: Sequence[str], kind: str,
              parse: Callable[[Dict[str, str]], _Parsed]) -> List[_Parsed]:
    """Each row of the CSV file ``path`` (a comparison's ``kind``, e.g. ``summary.csv``) as
    ``parse`` makes it of ``{column: cell}``.

    Raises:
        ValueError: the header lacks one of ``columns`` ("not the ``kind`` of a comparison"),
            or ``parse`` raised TypeError or ValueError (naming the file and line).
    """
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not the {kind} of a comparison (no column "
                             f"{', '.join(missing)})")
        parsed = []
        for row in reader:
            try:
                parsed.append(parse(row))
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}, line {reader.line_num}: {e}") from None
    return parsed


def plot_figures(table: Optional[ScoreTable], measures: Sequence[Mapping], baseline: str,
                 out: Path) -> List[Path]:
    """``glue_average.png`` (the paper's Figure 5: GLUE average over the curve tasks against
    updates), ``tasks.png`` (per task), ``difference.png`` (each objective − baseline at equal
    updates) and ``checkpoints.png`` (every per-checkpoint measure); ``table`` None (no
    fine-tuning has finished): ``checkpoints.png`` only. Returns the files written.

    Each point is the mean over pre-training seeds of the per-seed means over fine-tuning
    seeds; the error bars are the 95% t-interval over pre-training seeds (:func:`error_bars`;
    with one pre-training seed, ± the SD over fine-tuning seeds on the GLUE figures, none on
    the measures); each title says which. A GLUE axis spans at least :data:`GLUE_AXIS_SPAN`
    points, so that a small gap does not fill the figure."""
    import matplotlib

    matplotlib.use("Agg")
    written = []
    if table is not None:  # no fine-tuning finished yet: no GLUE figure
        tasks = table.curve_tasks()
        if tasks:
            written += [_plot_glue_average(table, tasks, out / "glue_average.png"),
                        _plot_difference(table, tasks, baseline, out / "difference.png")]
        written.append(_plot_tasks(table, out / "tasks.png"))
    measured = MeasureTable(measures)
    if measured.keys:
        written.append(_plot_measures(measured, len({r["pretrain_seed"] for r in measures}),
                                      out / "checkpoints.png"))
    return written


def _plot_glue_average(table: ScoreTable, tasks: Sequence[str], path: Path) -> Path:
    """:func:`plot_figures`' ``glue_average.png``: each objective's GLUE average over
    ``tasks`` (points) against updates."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for i, o in enumerate(table.objectives):
        _errorbar(ax, table.updates, [_glue_bar(table, o, u, tasks) for u in table.updates], o,
                  _dodge(i, len(table.objectives), table.updates))
    _axes(ax, f"GLUE average ({', '.join(tasks)}), points", GLUE_AXIS_SPAN)
    bars = error_bars(len(table.pretrain_seeds), len(table.seeds))
    ax.set_title(textwrap.fill(f"GLUE dev average vs pre-training updates: {bars}", 75),
                 fontsize=8)
    return _save(fig, path)


def _plot_difference(table: ScoreTable, tasks: Sequence[str], baseline: str,
                     path: Path) -> Path:
    """:func:`plot_figures`' ``difference.png``: each other objective's GLUE average over
    ``tasks`` minus ``baseline``'s (points), paired by pre-training seed, at every checkpoint
    but the initialization."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    others = [o for o in table.objectives if o != baseline]
    for i, o in enumerate(others):
        points = [(u, paired_difference(table, o, baseline, u, tasks))
                  for u in _compared(table.updates)]
        _errorbar(ax, [u for u, _ in points], [(d.difference, d.low, d.high) for _, d in points],
                  f"{o} − {baseline}", _dodge(i, len(others), table.updates))
    ax.axhline(0, color="grey", lw=0.8)
    _axes(ax, "difference of GLUE averages, points", GLUE_AXIS_SPAN)
    ax.set_title("Paired difference at equal updates\n("
                 + ("95% t-interval over pre-training seeds, uncorrected"
                    if len(table.pretrain_seeds) > 1 else "one pre-training seed: no interval")
                 + ")", fontsize=9)
    return _save(fig, path)


def _plot_tasks(table: ScoreTable, path: Path) -> Path:
    """:func:`plot_figures`' ``tasks.png``: a panel per task, each objective's dev score
    (points) at the checkpoints whose runs have all finished."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(table.tasks), figsize=(3.4 * len(table.tasks), 3.6),
                             squeeze=False)
    for ax, task in zip(axes[0], table.tasks):
        for i, o in enumerate(table.objectives):
            at = [u for u in table.updates if table.cell(o, u, task) is not None]
            _errorbar(ax, at, [_glue_bar(table, o, u, [task]) for u in at], o,
                      _dodge(i, len(table.objectives), table.updates))
        _axes(ax, "dev score, points", GLUE_AXIS_SPAN)
        ax.set_title(task)
    bars = error_bars(len(table.pretrain_seeds), len(table.seeds))
    fig.suptitle(textwrap.fill(bars, 60 * len(table.tasks)), fontsize=8)
    return _save(fig, path)


def _plot_measures(measured: MeasureTable, pretrain_seeds: int, path: Path) -> Path:
    """:func:`plot_figures`' ``checkpoints.png``: a panel per measure of ``measured`` (at
    least one; four panels a row), each objective's mean over its ``pretrain_seeds``
    (a count) against updates."""
    import matplotlib.pyplot as plt

    columns = min(4, len(measured.keys))
    rows = math.ceil(len(measured.keys) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.4 * rows), squeeze=False)
    for ax, key in zip(axes.ravel(), measured.keys):
        for i, o in enumerate(measured.objectives):
            at = [u for u in measured.updates if measured.values(key, o, u)]
            _errorbar(ax, at, [_bar(list(measured.values(key, o, u).values())) for u in at], o,
                      _dodge(i, len(measured.objectives), measured.updates))
        _axes(ax, MEASURE_LABELS.get(key, key))
    for ax in axes.ravel()[len(measured.keys):]:
        ax.axis("off")
    fig.suptitle("Per-checkpoint measures: mean over pre-training seeds"
                 + (", error bars: 95% t-interval over them" if pretrain_seeds > 1 else
                    " (one pre-training seed: no error bars)"), fontsize=9)
    return _save(fig, path)


def error_bars(pretrain_seeds: int, finetune_seeds: int) -> str:
    """What the points and error bars of the GLUE figures are, in words."""
    points = (f"mean of {pretrain_seeds} pre-training seed(s), each averaged over "
              f"{finetune_seeds} fine-tuning seed(s)")
    if pretrain_seeds > 1:
        return f"{points}; error bars: 95% t-interval over the pre-training seeds"
    if finetune_seeds > 1:
        return f"{points}; error bars: ± SD over the fine-tuning seeds (description only)"
    return f"{points}; no error bars"


def markdown_report(table: Optional[ScoreTable], measures: Sequence[Mapping], baseline: str,
                    header: str, timings: Mapping[str, float],
                    search: Optional[Mapping] = None,
                    primary: Optional[PrimaryEndpoint] = None,
                    figures: Optional[Sequence[Path]] = None,
                    reference: Optional["ReferenceStudy"] = None) -> str:
    """``report.md``: ``header`` (command, machine), the primary endpoint (default: the GLUE
    average over the curve tasks at the last checkpoint), the wall time of each phase, the
    search, the dev scores and, labelled exploratory with Holm-corrected verdicts
    (:mod:`.statistics`), the paired GLUE differences, the speed-up, whether the baseline
    itself improved, a table per checkpoint measure (references such as the uniform attention
    left out: :func:`.statistics.is_reference`), the description against a ``reference``
    study (:func:`reference_section`), the raw measures and the ``figures``
    (:func:`plot_figures`' files; None: all four names).

    ``table`` None: no fine-tuning has finished yet (an interim report); the fine-tuning
    sections say so, and a ``glue-average`` primary endpoint gets no verdict.

    Raises:
        ValueError: ``table`` and ``primary`` both None (no default primary endpoint).
    """
    if primary is None:
        if table is None:
            raise ValueError("a report without fine-tuning scores needs its primary endpoint")
        primary = PrimaryEndpoint("glue-average", table.updates[-1],
                                  tuple(table.curve_tasks() or table.tasks))
    measured = MeasureTable(measures)
    objectives = table.objectives if table is not None else measured.objectives
    candidates = [o for o in objectives if o != baseline]
    lines = [header, "", *primary_section(primary, table, measured, candidates, baseline)]
    lines += ["", "## Wall time", "", "| phase | minutes |", "|---|---|"]
    lines += [f"| {phase} | {seconds / 60:.1f} |" for phase, seconds in timings.items()]
    if search:
        lines += _search_section(search)
    if table is None:
        lines += ["", "## Dev scores", "", NO_FINETUNING, "", EXPLORATORY]
    else:
        lines += [*_dev_scores(table), "", EXPLORATORY,
                  *_glue_sections(table, candidates, baseline, primary)]
    for o in candidates:
        for key in measured.keys:
            lines += _measure_section(measured, key, o, baseline, primary)
    if reference is not None:
        lines += reference_section(measured, table, reference)
    if measures:
        lines += _per_checkpoint(measures, measured.keys)
    lines += _figures_section(table, measures, figures)
    return "\n".join(lines) + "\n"


def _search_section(search: Mapping) -> List[str]:
    """The report's fine-tuning hyper-parameters: per task of ``search`` (``OUT/search.json``),
    the point chosen and each point's mean dev score (points)."""
    reused = sorted({v["searched_in"] for v in search.values() if "searched_in" in v})
    where = (f"the search of {', '.join(reused)}, taken with --finetune-search-from"
             if reused else "search at the last checkpoint")
    lines = ["", f"## Fine-tuning hyper-parameters ({where}, the same for every "
             "objective)", "", "| task | chosen | mean dev score per point |", "|---|---|---|"]
    lines += [f"| {t} | {v['chosen']} | "
              + ", ".join(f"{p}: {s:.2f}" for p, s in v["mean_dev_score"].items()) + " |"
              for t, v in search.items()]
    return lines


def _glue_sections(table: ScoreTable, candidates: Sequence[str], baseline: str,
                   primary: PrimaryEndpoint) -> List[str]:
    """The report's exploratory GLUE sections: per candidate, its Holm-corrected table against
    ``baseline`` (:func:`.statistics.glue_comparisons`) and its speed-up; then whether the
    baseline's GLUE average rises over the run (speed-up and rise: with curve tasks and two
    compared checkpoints only, :func:`baseline_rise`)."""
    tasks = table.curve_tasks()
    rise = baseline_rise(table, baseline, tasks)
    lines = []
    for o in candidates:
        lines += ["", f"## Exploratory: {o} − {baseline} at equal updates, GLUE (Holm-corrected "
                  "over this table)", "", COMPARISON_HEADER, COMPARISON_RULE]
        lines += [comparison_row(c, o, 2, +1, _finetune_spread(
            table, o, baseline, c.updates, tasks if c.label == "average" else [c.label]))
                  for c in glue_comparisons(table, o, baseline, primary)]
        if primary.name == "glue-average":
            lines += ["", _primary_left_out(primary, "The GLUE average")]
        if rise is not None:
            lines += ["", f"### Speed-up of {o} over {baseline}", "",
                      speedup_sentence(speedup(table, o, baseline, tasks), o, baseline, rise)]
    if rise is not None:
        compared = _compared(table.updates)
        lines += ["", "## Does the baseline improve over the run?", "",
                  rise_sentence(rise, baseline, compared[0], compared[-1])]
    return lines


def _measure_section(measured: MeasureTable, key: str, candidate: str, baseline: str,
                     primary: PrimaryEndpoint) -> List[str]:
    """The report's exploratory table of the measure ``key``, ``candidate`` − ``baseline``
    (:func:`.statistics.measure_comparisons`, Holm-corrected), its initialization shown but not
    compared; none for a measure without comparison (e.g. a reference)."""
    family = measure_comparisons(measured, key, candidate, baseline, primary)
    if not family:
        return []
    lines = ["", f"## Exploratory: {key}, {candidate} − {baseline} ({DIRECTION[better(key)]}; "
             "Holm-corrected over this table)", "", COMPARISON_HEADER, COMPARISON_RULE]
    start = [measured.values(key, x, INITIALIZATION) for x in (baseline, candidate)]
    if all(start):
        lines.append(f"| {INITIALIZATION} | {key} | {len(start[0])} | "
                     + " | ".join(f"{np.mean(list(v.values())):.4f}" for v in start)
                     + " | | | | | initialization: the same network, not compared |")
    lines += [comparison_row(c, candidate, 4, better(key)) for c in family]
    if primary.name == "probe-average" and key == PROBE_AVERAGE:
        lines += ["", _primary_left_out(primary, f"`{PROBE_AVERAGE}`")]
    return lines


def _per_checkpoint(measures: Sequence[Mapping], keys: Sequence[str]) -> List[str]:
    """The report's raw measures: a row per checkpoint of each pre-training run, the measures
    ``keys`` ("-": not measured or not finite)."""
    lines = ["", "## Per checkpoint (each pre-training run)", "",
             f"| objective | pretrain seed | updates | {' | '.join(keys)} |",
             "|---|---|---|" + "---|" * len(keys)]
    for m in sorted(measures, key=lambda m: (m["objective"], m["pretrain_seed"], m["updates"])):
        lines.append(f"| {m['objective']} | {m['pretrain_seed']} | {m['updates']} | "
                     + " | ".join(_num(m.get(k)) for k in keys) + " |")
    return lines


def _figures_section(table: Optional[ScoreTable], measures: Sequence[Mapping],
                     figures: Optional[Sequence[Path]]) -> List[str]:
    """The report's figures: what their points and error bars are, and a link to each of
    ``figures`` (:func:`plot_figures`' files; None: all four names)."""
    pretrain_seeds = (table.pretrain_seeds if table is not None
                      else sorted({m["pretrain_seed"] for m in measures}))
    over = ("with its 95% t-interval over pre-training seeds (uncorrected)"
            if len(pretrain_seeds) > 1 else "without interval (one pre-training seed)")
    glue = ("No GLUE figures: no fine-tuning has finished yet." if table is None else
            f"GLUE figures: {error_bars(len(table.pretrain_seeds), len(table.seeds))}; every "
            f"GLUE axis spans at least {GLUE_AXIS_SPAN:.0f} points. The difference figure: the "
            f"paired difference {over}.")
    names = ([Path(f).stem for f in figures] if figures is not None else
             ["glue_average", "difference", "tasks", "checkpoints"])
    return ["", "## Figures", "",
            f"{glue} The checkpoint measures: the mean over pre-training seeds {over}.", "",
            *(f"![{name}]({name}.png)" for name in names)]


def _dev_scores(table: ScoreTable) -> List[str]:
    """The report's table of dev scores: per objective and checkpoint, each task and the
    average over the curve tasks."""
    spread = ("SD over pre-training seeds of their means over fine-tuning seeds"
              if len(table.pretrain_seeds) > 1 else "SD over fine-tuning seeds (one "
              "pre-training seed)")
    lines = ["", f"## Dev scores (mean over all runs ± {spread}; points; MCC for CoLA)", ""]
    tasks = table.curve_tasks()
    lines += [f"| objective | updates | {' | '.join(table.tasks)} | average ({', '.join(tasks)}) |",
              "|---|---|" + "---|" * (len(table.tasks) + 1)]
    for o in table.objectives:
        for u in table.updates:
            cells = [_mean_sd(table, o, u, [t]) if table.cell(o, u, t) is not None else ""
                     for t in table.tasks]
            avg = _mean_sd(table, o, u, tasks) if tasks else ""
            lines.append(f"| {o} | {u} | {' | '.join(cells)} | {avg} |")
    return lines


def _primary_left_out(primary: PrimaryEndpoint, what: str) -> str:
    """The line under an exploratory table that leaves the primary endpoint out."""
    return (f"{what} at {primary.updates} updates is the primary endpoint, tested above: it is "
            "not in this table nor in its Holm correction.")


#: Every GLUE axis spans at least this many points (scores or differences): a gap of a point
#: looks like one, not like the whole range of the figure.
GLUE_AXIS_SPAN = 10.0

#: Axis labels of the known per-checkpoint measures (others: the key).
MEASURE_LABELS = {"valid_mlm_loss": "validation MLM loss, bits",
                  "contextual_score": "contextual score (held-out text)"}

#: A measure's better direction (:func:`.statistics.better`) in words.
DIRECTION = {+1: "higher is better", -1: "lower is better", 0: "no better direction"}

#: The report's line above its exploratory sections.
EXPLORATORY = (
    "**Everything below is exploratory.** Each difference is paired by pre-training seed (each "
    "seed's value averaged over its fine-tuning seeds) with its 95% t-interval (n − 1 degrees "
    "of freedom) and p-value; the verdict uses the Holm-adjusted p within the table (α = 0.05), "
    "so an interval that excludes 0 can still be \"no significant difference\". With one "
    "pre-training seed nothing is tested. The initialization (updates 0) is the same network "
    "for every objective and is not compared.")

#: The report's dev-score section while no fine-tuning has finished.
NO_FINETUNING = (
    "**No fine-tuning has finished yet** (no finished run under OUT/finetune): no dev scores, "
    "no GLUE comparison, speed-up or GLUE figure. What follows is what exists so far: the "
    "per-checkpoint measures of phase 2.")

#: The header of every comparison table of the report (:func:`comparison_row`).
COMPARISON_HEADER = ("| updates | what | n | baseline | objective | difference | 95% t-interval | "
                     "p | Holm p | verdict |")
COMPARISON_RULE = "|---|---|---|---|---|---|---|---|---|---|"


def primary_section(primary: PrimaryEndpoint, table: Optional[ScoreTable],
                    measured: MeasureTable, candidates: Sequence[str], baseline: str) -> List[str]:
    """The report's opening: the primary endpoint of each candidate against the baseline, its
    paired difference over pre-training seeds, t-interval, p and verdict (with several
    candidates the p-values are Holm-corrected among them); ``table`` None: no fine-tuning
    has finished (``glue-average``: no verdict). Without candidates (a study of one objective,
    e.g. a control read against another study with ``--reference``) it says so, no table."""
    title = f"## Primary endpoint: {primary.describe()}"
    if not candidates:
        return [title, "", f"Not tested: this study has one objective ({baseline}), nothing to "
                "compare it with here (`taco-compare --reference REF_OUT` describes its runs "
                "against another study's)."]
    lines = [title, "",
             f"Declared before the runs (`--primary-endpoint {primary.name}`). The difference is "
             "paired by pre-training seed, each seed's value averaged over its fine-tuning seeds "
             "(and tasks); 95% t-interval with n − 1 degrees of freedom; two-sided paired t-test "
             "at α = 0.05" + (", Holm-corrected over the objectives" if len(candidates) > 1
                             else "") + ".", "", COMPARISON_HEADER, COMPARISON_RULE]
    tests = {o: primary.test(table, measured, o, baseline) for o in candidates}
    missing = {o: primary.missing(t) for o, t in tests.items() if t is not None}
    complete = with_holm([(primary.updates, o, t) for o, t in tests.items()
                          if t is not None and not missing[o]])
    adjusted = {c.label: c.adjusted_p for c in complete}
    for o, test in tests.items():
        if test is None:
            lines.append(f"| {primary.updates} | {o} − {baseline} | 0 | | | | | | | "
                         f"{_primary_unavailable(primary, table)} |")
            continue
        note = _finetune_spread(table, o, baseline, primary.updates, primary.tasks) if (
            primary.name == "glue-average") else ""
        incomplete = (f"no verdict: {test.n} of the {len(primary.seeds)} declared pre-training "
                      f"seeds (missing: {', '.join(map(str, missing[o]))})") if missing[o] else None
        lines.append(comparison_row(Comparison(primary.updates, f"{o} − {baseline}", test,
                                               adjusted.get(o)), o,
                                    2 if primary.name == "glue-average" else 4, +1, note,
                                    incomplete))
    if any(missing.values()):
        lines += ["", "**The primary test lacks declared pre-training seeds** (a run not "
                  "finished, or a value that is not finite on one side: see the per-checkpoint "
                  "table): it is not the declared test and gives no verdict."]
    return lines


def _primary_unavailable(primary: PrimaryEndpoint, table: Optional[ScoreTable]) -> str:
    """The verdict cell of a primary endpoint without test (:meth:`PrimaryEndpoint.test` None):
    why it has none."""
    if primary.name != "glue-average":
        return (f"not available: `{PROBE_AVERAGE}` not in OUT/measures (not measured at this "
                "checkpoint yet, or no probes asked for)")
    if table is None:
        return "no verdict: no fine-tuning finished"
    return "not available: not all of its fine-tunings have finished"


def comparison_row(c: Comparison, objective: str, digits: int, direction: int,
                   note: str = "", withheld: Optional[str] = None) -> str:
    """A row of :data:`COMPARISON_HEADER`; ``note`` fills the interval's cell when there is
    no test (n = 1); ``withheld``: why there is no verdict (it takes the verdict's place)."""
    t = c.test
    interval = f"[{t.low:+.{digits}f}, {t.high:+.{digits}f}]" if t.tested else note
    return (f"| {c.updates} | {c.label} | {t.n} | {t.baseline:.{digits}f} | "
            f"{t.candidate:.{digits}f} | {t.difference:+.{digits}f} | {interval} | "
            f"{_p(t.p)} | {_p(c.adjusted_p)} | "
            f"{withheld or verdict(t, c.adjusted_p, objective, direction)} |")


def verdict(test: PairedTest, adjusted_p: Optional[float], objective: str,
            direction: int = +1) -> str:
    """``ahead``/``behind`` (``higher``/``lower`` for a measure without a better ``direction``)
    when the (Holm-adjusted) p-value is at most :data:`.statistics.ALPHA`, else ``no
    significant difference``; ``not tested`` with one pre-training seed."""
    if not test.tested:
        return "n = 1 pre-training seed: not tested"
    if adjusted_p > ALPHA or test.difference == 0:
        return "no significant difference"
    higher = test.difference > 0
    if direction == 0:
        return f"{objective} {'higher' if higher else 'lower'}"
    return f"{objective} {'ahead' if higher == (direction > 0) else 'behind'}"


def baseline_rise(table: ScoreTable, baseline: str, tasks: Sequence[str]) -> Optional[PairedTest]:
    """:func:`.statistics.improvement` of the baseline from the first to the last compared
    checkpoint; None without two of them or without curve tasks."""
    updates = _compared(table.updates)
    if not tasks or len(updates) < 2:
        return None
    return improvement(table, baseline, updates[0], updates[-1], tasks)


def rise_sentence(rise: PairedTest, baseline: str, first: int, last: int) -> str:
    """Whether the baseline's GLUE average rises over the run, as a sentence."""
    head = (f"{baseline}'s GLUE average from {first} to {last} updates: "
            f"{rise.difference:+.2f} points")
    if not rise.tested:
        return (f"{head} (n = 1 pre-training seed: not tested). **Whether GLUE moves at all over "
                "the run is not established: read the differences and the speed-up as "
                "description.**")
    head += (f", 95% t-interval [{rise.low:+.2f}, {rise.high:+.2f}] over {rise.n} pre-training "
             f"seeds (paired), p = {_p(rise.p)}. ")
    if rise.p <= ALPHA and rise.difference > 0:
        return head + "It rises significantly: the comparison is meaningful."
    return head + ("**It does not rise significantly: the runs are too short or too small for "
                   "GLUE to tell the objectives apart; read the differences with that in mind.**")


def speedup_sentence(s: Mapping, candidate: str, baseline: str,
                     rise: Optional[PairedTest]) -> str:
    """The speed-up as a sentence: its numbers, the per-pre-training-seed range (a description,
    :func:`.statistics.speedup`) and whether it means anything (only when the baseline's
    ``rise`` is significant)."""
    head = (f"{baseline} is best at {s['baseline_updates']} updates (GLUE average "
            f"{s['baseline_best']:.2f}).")
    meaningful = rise is not None and rise.tested and rise.p <= ALPHA and rise.difference > 0
    if s["speedup"] is None:
        head += f" {candidate} does not reach it at any checkpoint: **not reached**."
    else:
        value = f"{s['speedup']:.2f}x"
        head += (f" {candidate} first reaches it at {s['candidate_updates']:.0f} updates "
                 f"(interpolated): speed-up {f'**{value}**' if meaningful else value}.")
    per_seed = s["per_seed"]
    if len(per_seed) > 1:
        reached = [v for v in per_seed if v is not None]
        low = f"{min(reached):.2f}x" if len(reached) == len(per_seed) else "not reached"
        high = f"{max(reached):.2f}x" if reached else "not reached"
        head += (" Per pre-training seed (on its own curves): "
                 + ", ".join("not reached" if v is None else f"{v:.2f}x" for v in per_seed)
                 + f"; range {low} to {high}, a description, not a 95% interval (as an interval "
                 f"for the median per-seed speed-up it covers with probability "
                 f"{1 - 2 ** (1 - len(per_seed)):.0%}).")
    if meaningful:
        return head + f" {baseline}'s GLUE average rises significantly over the run."
    return head + (f" **Not meaningful: {baseline}'s GLUE average does not rise significantly "
                   "over the run" + (" (one pre-training seed: not tested)" if rise is None or
                                    not rise.tested else "")
                   + ", so reaching its best says nothing about speed.**")


@dataclass(frozen=True)
class ReferenceStudy:
    """Another comparison's output directory that a report describes its runs against
    (``taco-compare --reference``), e.g. a control that trains TACO only against the study
    whose TACO and MLM runs it varies (docs/results/study5/PLAN.md, controls 4 and 5).

    Attributes:
        out: its ``--out``.
        measures: its ``checkpoints.csv`` rows (:func:`read_checkpoints_csv`) of the compared
            pre-training seeds.
        scores: its ``summary.csv`` scores of those seeds (empty without one).
        command: the command that ran its phases (its :data:`COMMAND_FILE`; "" without one).
    """

    out: Path
    measures: Sequence[Mapping]
    scores: Sequence[Score] = ()
    command: str = ""


def read_reference(out: Path, pretrain_seeds: Sequence[int],
                   checkpoint_updates: Sequence[int]) -> ReferenceStudy:
    """``out``'s ``checkpoints.csv`` (and ``summary.csv``, :data:`COMMAND_FILE` where they
    exist), checked against the study that reads it: its runs are matched by pre-training seed
    and update count.

    Args:
        out: the reference study's ``--out``.
        pretrain_seeds: the reading study's ``--pretrain-seeds``: the reference must have
            every one of them (only they are kept).
        checkpoint_updates: the reading study's ``--checkpoint-updates``: the reference must
            have a checkpoint at one of them (besides the initialization, update 0).

    Raises:
        ValueError: the message names what does not fit and what to do: no such directory,
            no ``checkpoints.csv`` (its report not written yet), a file that is not a
            comparison's, a pre-training seed it lacks, no common checkpoint.
    """
    out = Path(out)
    path = out / "checkpoints.csv"
    if not out.is_dir():
        raise ValueError("no such directory (give the --out of another taco-compare study)")
    if not path.is_file():
        raise ValueError(f"no checkpoints.csv (its report writes it: run taco-compare "
                         f"--report-only --out {out} with that study's options first)")
    rows = read_checkpoints_csv(path)
    have = sorted({r["pretrain_seed"] for r in rows})
    lacking = [s for s in pretrain_seeds if s not in have]
    if lacking:
        raise ValueError(
            f"its checkpoints.csv has pre-training seed(s) "
            f"{', '.join(map(str, have)) or 'none'}, not "
            f"{', '.join(map(str, lacking))} of --pretrain-seeds "
            f"{' '.join(map(str, pretrain_seeds))}: runs are matched by pre-training seed (the "
            "same initialization and batches); give a reference that has them")
    updates = sorted({r["updates"] for r in rows} - {INITIALIZATION})
    if not set(updates) & set(checkpoint_updates):
        raise ValueError(
            f"its checkpoints.csv has checkpoints at "
            f"{', '.join(map(str, updates)) or 'no update count'}, "
            f"none at --checkpoint-updates {' '.join(map(str, checkpoint_updates))}: runs "
            "are matched on update counts; give a reference with a checkpoint in common")
    summary = out / "summary.csv"
    scores = read_summary_csv(summary) if summary.is_file() else []
    command = out / COMMAND_FILE
    return ReferenceStudy(
        out, [r for r in rows if r["pretrain_seed"] in pretrain_seeds],
        [s for s in scores if s.pretrain_seed in pretrain_seeds],
        command.read_text(encoding="utf-8").strip() if command.is_file() else "")


def reference_section(measured: MeasureTable, table: Optional[ScoreTable],
                      reference: ReferenceStudy) -> List[str]:
    """The report's description of its runs against ``reference``'s: per objective of this
    study and objective of the reference (the same objective first), each measure (and each
    fine-tuned task both have) at each update count both have, this study's value, the
    reference's and the difference, over the pre-training seeds both have (:func:`paired_test`
    pairs them). A description, no test: two --out differ in more than one setting, and a
    control has one pre-training seed. This study's values are taken as its own CSVs would
    hold them (:func:`as_written`, as the reference's are), so that identical runs differ by
    0, not by a rounding error shown as ``-0.0000``."""
    measured = measured.mapped(as_written)
    table = table.mapped(as_written) if table is not None else None
    theirs = MeasureTable(reference.measures)
    their_table = ScoreTable(reference.scores) if reference.scores else None
    files = "checkpoints.csv" + (" and summary.csv" if their_table is not None else "")
    lines = ["", f"## Against {reference.out} (description, no test)", "",
             f"Each row: this study's run (the objective column) against the run of "
             f"{reference.out}'s {files} (the baseline column) of the same pre-training seed(s) "
             "at the same update count; the difference is this study's minus the reference's. "
             "The two studies differ in what their commands set, so this is a description: "
             "no interval, no test, no verdict. At 0 updates equal values say both started "
             "from the same network.", "",
             f"Reference command: `{reference.command}`" if reference.command else
             f"Reference command: not recorded ({reference.out / COMMAND_FILE} does not "
             "exist)"]
    for o in measured.objectives:
        for r in sorted(theirs.objectives, key=lambda x: x != o):
            lines += ["", f"### this study's {o} − the reference's {r}", "", COMPARISON_HEADER,
                      COMPARISON_RULE,
                      *_described_rows(measured, table, o, theirs, their_table, r)]
    return lines


def _described_rows(measured: MeasureTable, table: Optional[ScoreTable], objective: str,
                    theirs: MeasureTable, their_table: Optional[ScoreTable],
                    their_objective: str) -> List[str]:
    """:func:`reference_section`'s rows of this study's ``objective`` against the reference's
    ``their_objective``: each measure both have (references left out) at each update count
    both have, then each fine-tuned task both have (``table`` and ``their_table`` both given);
    rows without a common pre-training seed left out."""
    rows = []
    for key in (k for k in measured.keys if k in theirs.keys and not is_reference(k)):
        rows += [_described(u, key, paired_test(measured.values(key, objective, u),
                                                theirs.values(key, their_objective, u)),
                            objective, 4)
                 for u in measured.updates if u in theirs.updates]
    if table is not None and their_table is not None:
        for u in (u for u in table.updates if u in their_table.updates):
            for task in table.tasks:
                if table.has(objective, u, [task]) and their_table.has(their_objective, u, [task]):
                    rows.append(_described(u, f"{task} (fine-tuned)", paired_test(
                        table.seed_means(objective, u, [task]),
                        their_table.seed_means(their_objective, u, [task])), objective, 2))
    return [row for row in rows if row]


def _described(updates: int, label: str, test: Optional[PairedTest], objective: str,
               digits: int) -> str:
    """A :data:`COMPARISON_HEADER` row of ``test`` as a description (no interval, p or
    verdict); "" when the two share no pre-training seed."""
    if test is None:
        return ""
    plain = dataclasses.replace(test, low=None, high=None, p=None)
    return comparison_row(Comparison(updates, label, plain, None), objective, digits, +1,
                          withheld=f"description (n = {test.n}): no test")


def _compared(updates: Sequence[int]) -> List[int]:
    """``updates`` but the initialization: the checkpoints that are compared."""
    return [u for u in updates if u != INITIALIZATION]


def _finetune_spread(table: ScoreTable, candidate: str, baseline: str, updates: int,
                     tasks: Sequence[str]) -> str:
    """"fine-tuning SD candidate / baseline" (:meth:`.statistics.ScoreTable.finetune_sd`,
    points), the note of a GLUE row; "" with one fine-tuning seed."""
    sds = [table.finetune_sd(o, updates, tasks) for o in (candidate, baseline)]
    if None in sds:
        return ""
    return f"fine-tuning SD {sds[0]:.2f} / {sds[1]:.2f}"


def _mean_sd(table: ScoreTable, objective: str, updates: int, tasks: Sequence[str]) -> str:
    """A dev-score cell: the GLUE average over ``tasks`` (points) ± the SD over pre-training
    seeds of their means (with one pre-training seed, over fine-tuning seeds; none with one
    of each)."""
    mean = table.average(objective, updates, tasks)
    if len(table.pretrain_seeds) > 1:
        sd = float(np.std(list(table.seed_means(objective, updates, tasks).values()), ddof=1))
    else:
        sd = table.finetune_sd(objective, updates, tasks)
    return f"{mean:.2f}" if sd is None else f"{mean:.2f} ± {sd:.2f}"


def _glue_bar(table: ScoreTable, objective: str, updates: int, tasks: Sequence[str]):
    """(mean, low, high) of a GLUE point: :func:`_bar` over pre-training seeds, or ± the SD
    over fine-tuning seeds with one pre-training seed."""
    means = list(table.seed_means(objective, updates, tasks).values())
    if len(means) > 1:
        return _bar(means)
    sd = table.finetune_sd(objective, updates, tasks) or 0.0
    return means[0], means[0] - sd, means[0] + sd


def _bar(values: Sequence[float]):
    """(mean, low, high): the 95% t-interval of the mean; (mean, None, None) for one value."""
    if len(values) < 2:
        return float(np.mean(values)), None, None
    low, high, _ = t_interval(values)
    return float(np.mean(values)), low, high


def _errorbar(ax, x: Sequence[int], bars: Sequence, label: str, dodge: float = 0.0) -> None:
    """Points ``(mean, low, high)`` (low/high None: no bar) with their error bars, moved
    ``dodge`` along x so that two objectives' bars do not hide each other."""
    if not x:
        return
    mid = np.array([b[0] for b in bars], float)
    err = np.array([[m - (b[1] if b[1] is not None else m) for m, b in zip(mid, bars)],
                    [(b[2] if b[2] is not None else m) - m for m, b in zip(mid, bars)]])
    ax.errorbar(np.asarray(x, float) + dodge, mid, yerr=err, marker="o", capsize=3, label=label)


def _dodge(index: int, count: int, updates: Sequence[int]) -> float:
    """The x shift of the ``index``-th of ``count`` curves: 1.5% of the update range apart."""
    span = (max(updates) - min(updates)) if len(updates) > 1 else 1
    return (index - (count - 1) / 2) * 0.015 * span


def _p(p: Optional[float]) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _axes(ax, ylabel: str, span: Optional[float] = None) -> None:
    """Labels, grid, legend; with ``span``, the y-axis widened about its centre to at least
    ``span`` units."""
    ax.set_xlabel("pre-training updates")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if span is not None:
        low, high = ax.get_ylim()
        if high - low < span:
            centre = (low + high) / 2
            ax.set_ylim(centre - span / 2, centre + span / 2)
    if ax.get_legend_handles_labels()[0]:  # a partial report may have no curve here yet
        ax.legend(fontsize=8)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _num(value) -> str:
    return f"{value:.4f}" if is_finite_number(value) else "-"


def _text(value) -> str:
    """A cell of ``summary.csv`` and ``checkpoints.csv``: a float with 4 decimals."""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def as_written(value: float) -> float:
    """``value`` as ``summary.csv`` and ``checkpoints.csv`` hold it (:func:`_text`: 4
    decimals); not-finite values as they are."""
    return float(_text(float(value))) if math.isfinite(value) else value
