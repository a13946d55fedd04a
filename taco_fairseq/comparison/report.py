"""``report.md`` of a comparison (``taco-compare``), in markdown (:func:`markdown_report`): the
primary endpoint, the dev scores, the exploratory comparisons with their Holm-corrected
verdicts, the speed-up, the description against a ``--reference`` study, the raw measures and
links to the figures. The CSV files: :mod:`.tables`; the figures: :mod:`.figures`."""

import dataclasses
from pathlib import Path
from typing import List, Mapping, Optional, Sequence

import numpy as np

from .figures import GLUE_AXIS_SPAN, error_bars
from .statistics import (
    ALPHA,
    INITIALIZATION,
    Comparison,
    MeasureTable,
    PairedTest,
    PrimaryEndpoint,
    ScoreTable,
    better,
    compared_updates,
    glue_comparisons,
    improvement,
    is_finite_number,
    is_reference,
    measure_comparisons,
    paired_test,
    speedup,
    with_holm,
)
from .tables import ReferenceStudy, as_written


def markdown_report(table: Optional[ScoreTable], measures: Sequence[Mapping], baseline: str,
                    header: str, timings: Mapping[str, float],
                    search: Optional[Mapping] = None,
                    primary: Optional[PrimaryEndpoint] = None,
                    figures: Optional[Sequence[Path]] = None,
                    reference: Optional[ReferenceStudy] = None) -> str:
    """``report.md``: ``header`` (command, machine), the primary endpoint (default: the GLUE
    average over the curve tasks at the last checkpoint), the wall time of each phase
    (:func:`_minutes`), the
    search, the dev scores and, labelled exploratory with Holm-corrected verdicts
    (:mod:`.statistics`), the paired GLUE differences, the speed-up, whether the baseline
    itself improved, a table per checkpoint measure (references such as the uniform attention
    left out: :func:`.statistics.is_reference`), the description against a ``reference``
    study (:func:`reference_section`), the raw measures and the ``figures``
    (:func:`.figures.plot_figures`' files; None: all four names).

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
    lines += [f"| {phase} | {_minutes(phase, seconds, timings)} |"
              for phase, seconds in timings.items()]
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


def _minutes(phase: str, seconds: float, timings: Mapping[str, float]) -> str:
    """The wall-time table's cell of ``phase``: its minutes. Checkpoint measures taken beside
    pre-training, each as soon as its checkpoint is saved (:func:`.study.pretrain_all`), are
    in pre-training's minutes, not timed separately: the ``checkpoint measures`` phase times
    only those measured after it, and its cell says so."""
    minutes = f"{seconds / 60:.1f}"
    if phase != "checkpoint measures" or "pre-training" not in timings:
        return minutes
    if minutes == "0.0":
        return "measured beside pre-training, not timed separately (in its minutes)"
    return f"{minutes} (those measured after pre-training; any beside it are in its minutes)"


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
        compared = compared_updates(table.updates)
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
    if any(primary.excludes(key, u) for u in measured.updates):
        lines += ["", _primary_left_out(primary, f"`{key}`")]
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
    ``figures`` (:func:`.figures.plot_figures`' files; None: all four names)."""
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
            lines.append(f"| {primary.updates} | {primary.label(o, baseline)} | 0 | | | | | | | "
                         f"{_primary_unavailable(primary, table)} |")
            continue
        note = _finetune_spread(table, o, baseline, primary.updates, primary.tasks) if (
            primary.name == "glue-average") else ""
        incomplete = (f"no verdict: {test.n} of the {len(primary.seeds)} declared pre-training "
                      f"seeds (missing: {', '.join(map(str, missing[o]))})") if missing[o] else None
        lines.append(comparison_row(Comparison(primary.updates, primary.label(o, baseline), test,
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
        return (f"not available: `{primary.measure}` not in OUT/measures (not measured at this "
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
    updates = compared_updates(table.updates)
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


def reference_section(measured: MeasureTable, table: Optional[ScoreTable],
                      reference: ReferenceStudy) -> List[str]:
    """The report's description of its runs against ``reference``'s: per objective of this
    study and objective of the reference (the same objective first), each measure (and each
    fine-tuned task both have) at each update count both have, this study's value, the
    reference's and the difference, over the pre-training seeds both have
    (:func:`.statistics.paired_test` pairs them). A description, no test: two --out differ in
    more than one setting, and a control has one pre-training seed. This study's values are
    taken as its own CSVs would hold them (:func:`.tables.as_written`, as the reference's
    are), so that identical runs differ by 0, not by a rounding error shown as ``-0.0000``."""
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
             f"Reference command: not recorded in {reference.out}"]
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


def _p(p: Optional[float]) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _num(value) -> str:
    return f"{value:.4f}" if is_finite_number(value) else "-"
