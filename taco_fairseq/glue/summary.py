"""Summaries of GLUE runs: checkpoint × dev set, mean ± std over seeds and the best run, and
the GLUE average as the paper computes it next to the standard GLUE choice.

Aggregation, per checkpoint and dev set (a column of the paper's tables; MNLI has two):

1. runs are grouped by grid point (batch size, learning rate, epochs); each group gives the
   mean and sample standard deviation over its seeds of every metric;
2. the reported grid point is the one with the highest mean of the paper's metric on the
   task's first dev set (MNLI: matched; with one grid point, simply that one);
   ``pooled=True`` instead treats all runs as one group (the paper's base-model protocol: mean
   over sampled hyper-parameter combinations);
3. ``best`` is the highest value of any single run (the run used for test predictions).

GLUE averages (in points) are means over the dev-set columns of the per-column means: with the
paper's metrics (F1 for MRPC/QQP, Spearman for STS-B, accuracy otherwise; MNLI-m and MNLI-mm
both count), and with the standard GLUE choice, which differs for CoLA (MCC). Both are over the
columns a checkpoint has results for, which the table states.
"""

import csv
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from .runner import RESULT_FILE, settings_changes
from .tasks import EVAL_COLUMNS, task_of_column

SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"


@dataclass
class Cell:
    """One metric of one checkpoint on one dev-set column.

    ``std`` is NaN for a single run; ``point`` is the reported grid point
    ``(batch_size, lr, epochs)`` (None when pooled); ``runs`` counts the runs behind the mean.
    """

    checkpoint: str
    column: str
    metric: str
    mean: float
    std: float
    best: float
    runs: int
    point: Optional[Tuple[int, float, int]]


def collect_results(out_dir: Path) -> List[dict]:
    """The ``metrics.json`` of every finished run under ``out_dir``, in path order, each with
    ``"run_dir"``: the directory it is in.

    Raises:
        FileNotFoundError: no finished run under ``out_dir``.
    """
    paths = sorted(Path(out_dir).rglob(RESULT_FILE))
    if not paths:
        raise FileNotFoundError(f"no finished GLUE run ({RESULT_FILE}) under {out_dir}")
    return [dict(json.loads(p.read_text(encoding="utf-8")), run_dir=str(p.parent)) for p in paths]


def summarize(results: Sequence[dict], pooled: bool = False) -> List[Cell]:
    """Cells for every (checkpoint, column, metric) of ``results`` (see the module doc),
    checkpoints in first-seen order, columns in the paper's order.

    Raises:
        ValueError: two runs of one checkpoint name and task differ in more than their seed
            and grid point (e.g. another checkpoint file, ``--max-updates`` or fairseq
            options): they would be averaged together.
    """
    _check_comparable(results)
    groups: Dict[Tuple[str, str], Dict[tuple, List[dict]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        s = result["settings"]
        point = None if pooled else (s["batch_size"], s["lr"], s["epochs"])
        for column, values in result["dev"].items():
            groups[s["checkpoint"], column][point].append(values)
    checkpoints = list(dict.fromkeys(r["settings"]["checkpoint"] for r in results))
    cells = []
    for checkpoint in checkpoints:
        for column in EVAL_COLUMNS:
            if (checkpoint, column) not in groups:
                continue
            by_point = groups[checkpoint, column]
            task = task_of_column(column)
            # one grid point per task, chosen on its first dev set (MNLI: matched)
            primary = groups[checkpoint, task.primary_column]
            point = max(primary,
                        key=lambda p: statistics.fmean(v[task.paper_metric] for v in primary[p]))
            runs = by_point[point]
            every_run = [v for group in by_point.values() for v in group]
            for metric in task.metrics:
                values = [v[metric] for v in runs]
                cells.append(Cell(
                    checkpoint, column, metric, statistics.fmean(values),
                    statistics.stdev(values) if len(values) > 1 else math.nan,
                    max(v[metric] for v in every_run), len(values), point,
                ))
    return cells


def _check_comparable(results: Sequence[dict]) -> None:
    first: Dict[Tuple[str, str], Tuple[Optional[str], dict]] = {}
    for result in results:
        shared = {key: value for key, value in result["settings"].items()
                  if key not in ("seed", "batch_size", "lr", "epochs")}
        shared["pretraining_updates"] = result.get("pretraining_updates")
        run_dir, earlier = first.setdefault((shared["checkpoint"], shared["task"]),
                                            (result.get("run_dir"), shared))
        if earlier != shared:
            raise ValueError(
                f"{run_dir} and {result.get('run_dir')}: runs of {shared['checkpoint']} on "
                f"{shared['task']} with other settings ({settings_changes(earlier, shared)}) "
                "would be averaged together; summarize them apart (another --out, or another "
                "NAME= for the checkpoint)")


def glue_averages(cells: Sequence[Cell]) -> Dict[str, Dict[str, float]]:
    """checkpoint → ``{"paper": ..., "glue": ..., "columns": n}``: the mean over its columns of
    the paper's metric and of the standard GLUE metric (means over seeds)."""
    table = _means(cells)
    averages = {}
    for checkpoint, columns in table.items():
        paper = [columns[c][task_of_column(c).paper_metric] for c in columns]
        glue = [columns[c][task_of_column(c).glue_metric] for c in columns]
        averages[checkpoint] = {"paper": statistics.fmean(paper), "glue": statistics.fmean(glue),
                                "columns": len(paper)}
    return averages


def write_csv(cells: Sequence[Cell], path: Path) -> None:
    """One row per cell, plus rows ``GLUE-avg-paper``/``GLUE-avg-glue`` per checkpoint."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["checkpoint", "column", "metric", "mean", "std", "best", "runs",
                         "batch_size", "lr", "epochs"])
        for c in cells:
            writer.writerow([c.checkpoint, c.column, c.metric, _num(c.mean), _num(c.std),
                             _num(c.best), c.runs, *(c.point or ("", "", ""))])
        for checkpoint, avg in glue_averages(cells).items():
            for kind in ("paper", "glue"):
                writer.writerow([checkpoint, f"GLUE-avg-{kind}", f"{avg['columns']} columns",
                                 _num(avg[kind]), "", "", "", "", "", ""])


def format_markdown(cells: Sequence[Cell]) -> str:
    """The results table: a row per checkpoint, a column per dev set with the paper's metric
    as ``mean ± std (best)``, CoLA's MCC, and both GLUE averages."""
    by_key = {(c.checkpoint, c.column, c.metric): c for c in cells}
    checkpoints = list(dict.fromkeys(c.checkpoint for c in cells))
    columns = [col for col in EVAL_COLUMNS if any(c.column == col for c in cells)]
    averages = glue_averages(cells)
    n = max(a["columns"] for a in averages.values())
    header = ["checkpoint"] + [f"{col} ({_short(task_of_column(col).paper_metric)})"
                               for col in columns]
    if "CoLA" in columns:
        header.append("CoLA (MCC)")
    of = f"of {len(EVAL_COLUMNS)}"
    header += [f"GLUE avg, paper ({n} {of})", f"GLUE avg, MCC for CoLA ({n} {of})"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for checkpoint in checkpoints:
        row = [checkpoint]
        for col in columns:
            cell = by_key.get((checkpoint, col, task_of_column(col).paper_metric))
            row.append(_format_cell(cell) if cell else "-")
        if "CoLA" in columns:
            cell = by_key.get((checkpoint, "CoLA", "mcc"))
            row.append(_format_cell(cell) if cell else "-")
        avg = averages[checkpoint]
        mark = "" if avg["columns"] == n else f" ({avg['columns']} {of})"
        row += [f"{avg['paper']:.2f}{mark}", f"{avg['glue']:.2f}{mark}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def write_summary(results: Sequence[dict], out_dir: Path, pooled: bool = False) -> str:
    """Write ``summary.csv`` (:func:`write_csv`) and ``summary.md`` (:func:`format_markdown`)
    of ``results`` into ``out_dir``; returns the markdown table."""
    cells = summarize(results, pooled=pooled)
    write_csv(cells, Path(out_dir) / SUMMARY_CSV)
    table = format_markdown(cells)
    (Path(out_dir) / SUMMARY_MD).write_text(table + "\n", encoding="utf-8")
    return table


def _means(cells) -> Dict[str, Dict[str, Dict[str, float]]]:
    table: Dict[str, Dict[str, Dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for c in cells:
        table[c.checkpoint][c.column][c.metric] = c.mean
    return table


def _format_cell(cell: Cell) -> str:
    std = "" if math.isnan(cell.std) else f" ± {cell.std:.2f}"
    return f"{cell.mean:.2f}{std} ({cell.best:.2f})"


def _short(metric: str) -> str:
    return {"accuracy": "acc", "f1": "F1", "mcc": "MCC", "spearman": "Spearman",
            "pearson": "Pearson"}[metric]


def _num(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.4f}"
