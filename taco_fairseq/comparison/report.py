"""The files a comparison writes: ``summary.csv`` (one row per fine-tuning), ``checkpoints.csv``
(validation loss and contextual score per checkpoint), the figures and ``report.md``."""

import csv
import dataclasses
import math
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from .statistics import Score, ScoreTable, improvement, paired_difference, speedup

SUMMARY_COLUMNS = [f.name for f in dataclasses.fields(Score)]
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
    attention, ...) in the order they first appear."""
    columns = list(dict.fromkeys([*CHECKPOINT_COLUMNS, *(k for r in rows for k in r)]))
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in sorted(rows, key=lambda r: (r["objective"], r["pretrain_seed"], r["updates"])):
            writer.writerow([_text(row.get(c, "")) for c in columns])


def plot_figures(table: ScoreTable, measures: Sequence[Mapping], baseline: str,
                 out: Path) -> List[Path]:
    """``glue_average.png`` (the paper's Figure 5: GLUE average over the curve tasks against
    updates, mean ± std over seeds), ``tasks.png`` (per task), ``difference.png`` (each
    objective − baseline at equal updates, 95% interval) and ``checkpoints.png`` (validation
    loss, contextual score). Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    tasks = table.curve_tasks()
    if tasks:
        fig, ax = plt.subplots(figsize=(6, 4))
        for o in table.objectives:
            runs = [table.seed_averages(o, u, tasks) for u in table.updates]
            mean = np.array([r.mean() for r in runs])
            std = np.array([r.std(ddof=1) if r.size > 1 else 0.0 for r in runs])
            ax.plot(table.updates, mean, marker="o", label=o)
            ax.fill_between(table.updates, mean - std, mean + std, alpha=0.2)
        _axes(ax, f"GLUE average ({', '.join(tasks)}), points")
        ax.set_title("GLUE dev average vs pre-training updates\n(mean ± std over seeds)")
        written.append(_save(fig, out / "glue_average.png"))

        others = [o for o in table.objectives if o != baseline]
        fig, ax = plt.subplots(figsize=(6, 4))
        for o in others:
            diffs = [paired_difference(table, o, baseline, u, tasks) for u in table.updates]
            mid = np.array([d["difference"] for d in diffs])
            err = np.array([[m - d["low"] for m, d in zip(mid, diffs)],
                            [d["high"] - m for m, d in zip(mid, diffs)]])
            ax.errorbar(table.updates, mid, yerr=err, marker="o", capsize=3,
                        label=f"{o} − {baseline}")
        ax.axhline(0, color="grey", lw=0.8)
        _axes(ax, "difference of GLUE averages, points")
        ax.set_title("Paired difference at equal updates\n(95% bootstrap interval)")
        written.append(_save(fig, out / "difference.png"))

    fig, axes = plt.subplots(1, len(table.tasks), figsize=(3.2 * len(table.tasks), 3.2),
                             squeeze=False)
    for ax, task in zip(axes[0], table.tasks):
        for o in table.objectives:
            points = [(u, table.cell(o, u, task)) for u in table.updates
                      if table.cell(o, u, task) is not None]
            if points:
                x = [u for u, _ in points]
                mean = np.array([c.mean() for _, c in points])
                std = np.array([c.std(ddof=1) if c.size > 1 else 0.0 for _, c in points])
                ax.errorbar(x, mean, yerr=std, marker="o", capsize=3, label=o)
        _axes(ax, "dev score, points")
        ax.set_title(task)
    written.append(_save(fig, out / "tasks.png"))

    if measures:
        keys = [k for k in ("valid_mlm_loss", "contextual_score")
                if any(_finite(m.get(k)) for m in measures)]
        fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.5), squeeze=False)
        for ax, key in zip(axes[0], keys):
            for o in table.objectives:
                rows = sorted((m for m in measures if m["objective"] == o and _finite(m.get(key))),
                              key=lambda m: m["updates"])
                by_updates: Dict[int, List[float]] = {}
                for m in rows:
                    by_updates.setdefault(m["updates"], []).append(m[key])
                ax.plot(list(by_updates), [np.mean(v) for v in by_updates.values()],
                        marker="o", label=o)
            _axes(ax, {"valid_mlm_loss": "validation MLM loss, bits",
                       "contextual_score": "contextual score (held-out text)"}[key])
        written.append(_save(fig, out / "checkpoints.png"))
    return written


def markdown_report(table: ScoreTable, measures: Sequence[Mapping], baseline: str,
                    header: str, timings: Mapping[str, float],
                    search: Optional[Mapping] = None) -> str:
    """``report.md``: ``header`` (command, machine), the wall time of each phase, the
    per-checkpoint table, the paired differences, the speed-up, whether the baseline itself
    improved, the checkpoint measures and the figures."""
    lines = [header, "", "## Wall time", "", "| phase | minutes |", "|---|---|"]
    lines += [f"| {phase} | {seconds / 60:.1f} |" for phase, seconds in timings.items()]
    if search:
        reused = sorted({v["searched_in"] for v in search.values() if "searched_in" in v})
        where = (f"the search of {', '.join(reused)}, taken with --finetune-search-from"
                 if reused else "search at the last checkpoint")
        lines += ["", f"## Fine-tuning hyper-parameters ({where}, the same for every "
                  "objective)", "", "| task | chosen | mean dev score per point |",
                  "|---|---|---|"]
        lines += [f"| {t} | {v['chosen']} | "
                  + ", ".join(f"{p}: {s:.2f}" for p, s in v["mean_dev_score"].items()) + " |"
                  for t, v in search.items()]
    lines += ["", "## Dev scores (mean ± std over seeds, the mean alone for one seed; points; "
              "MCC for CoLA)", ""]
    tasks = table.curve_tasks()
    lines += [f"| objective | updates | {' | '.join(table.tasks)} | average ({', '.join(tasks)}) |",
              "|---|---|" + "---|" * (len(table.tasks) + 1)]
    for o in table.objectives:
        for u in table.updates:
            cells = []
            for t in table.tasks:
                c = table.cell(o, u, t)
                cells.append("" if c is None else f"{c.mean():.2f}" if c.size == 1
                             else f"{c.mean():.2f} ± {c.std(ddof=1):.2f}")
            avg = f"{table.average(o, u, tasks):.2f}" if tasks else ""
            lines.append(f"| {o} | {u} | {' | '.join(cells)} | {avg} |")
    for o in [o for o in table.objectives if o != baseline]:
        lines += ["", f"## {o} − {baseline} at equal updates (95% bootstrap interval)", "",
                  "| updates | tasks | difference | interval | verdict |", "|---|---|---|---|---|"]
        for u in table.updates:
            for label, over in (("average", tasks), *((t, [t]) for t in table.complete_tasks(u))):
                if not over or any(table.cell(x, u, t) is None
                                   for x in (o, baseline) for t in over):
                    continue
                d = paired_difference(table, o, baseline, u, over)
                lines.append(f"| {u} | {label} | {d['difference']:+.2f} | "
                             f"[{d['low']:+.2f}, {d['high']:+.2f}] | {verdict(d, o)} |")
        if tasks and len(table.updates) > 1:
            s = speedup(table, o, baseline, tasks)
            lines += ["", f"### Speed-up of {o} over {baseline}", "", speedup_sentence(s, o,
                                                                                   baseline)]
    if tasks and len(table.updates) > 1:
        first, last = table.updates[0], table.updates[-1]
        rise = improvement(table, baseline, first, last, tasks)
        lines += ["", "## Does the baseline improve over the run?", "",
                  f"{baseline}'s GLUE average from {first} to {last} updates: "
                  f"{rise['difference']:+.2f} points [{rise['low']:+.2f}, {rise['high']:+.2f}]. "
                  + ("It rises clearly: the comparison is meaningful." if rise["low"] > 0 else
                     "**It does not rise clearly: the runs are too short or too small for GLUE "
                     "to tell the objectives apart; read the differences with that in mind.**")]
    if measures:
        lines += ["", "## Per checkpoint", "",
                  "| objective | pretrain seed | updates | valid MLM loss (bits) | contextual "
                  "score | intra | inter |", "|---|---|---|---|---|---|---|"]
        for m in sorted(measures, key=lambda m: (m["objective"], m["pretrain_seed"],
                                                 m["updates"])):
            lines.append(f"| {m['objective']} | {m['pretrain_seed']} | {m['updates']} | "
                         + " | ".join(_num(m.get(k)) for k in CHECKPOINT_COLUMNS[3:]) + " |")
    lines += ["", "## Figures", ""] + [
        f"![{name}]({name}.png)" for name in ("glue_average", "difference", "tasks",
                                               "checkpoints")]
    return "\n".join(lines) + "\n"


def verdict(d: Mapping[str, float], objective: str) -> str:
    """``ahead``/``behind`` when the interval excludes 0, else ``indistinguishable``."""
    if d["low"] > 0:
        return f"{objective} ahead"
    if d["high"] < 0:
        return f"{objective} behind"
    return "indistinguishable"


def speedup_sentence(s: Mapping, candidate: str, baseline: str) -> str:
    """The speed-up as a sentence with its numbers and interval."""
    head = (f"{baseline} is best at {s['baseline_updates']} updates (GLUE average "
            f"{s['baseline_best']:.2f}).")
    if s["speedup"] is None:
        return (f"{head} {candidate} does not reach it at any checkpoint: **not reached** "
                f"(not reached in {s['not_reached']:.0%} of the bootstrap resamples; 95% "
                f"interval of the speed-up, 0 = not reached: [{s['low']:.2f}, {s['high']:.2f}]).")
    return (f"{head} {candidate} first reaches it at {s['candidate_updates']:.0f} updates "
            f"(interpolated): speed-up **{s['speedup']:.2f}x**, 95% interval "
            f"[{s['low']:.2f}, {s['high']:.2f}] (0 = not reached, in {s['not_reached']:.0%} of "
            "the resamples).")


def _axes(ax, ylabel: str) -> None:
    ax.set_xlabel("pre-training updates")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # a partial report may have no curve here yet
        ax.legend(fontsize=8)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _num(value) -> str:
    return f"{value:.4f}" if _finite(value) else "-"


def _text(value) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)
