"""Write and print the summary of GLUE runs (used by the runner and the summary commands)."""

from pathlib import Path
from typing import Sequence

from .summary import format_markdown, summarize, write_csv

SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"


def write_summary(results: Sequence[dict], out_dir: Path, pooled: bool = False) -> str:
    """Write ``summary.csv`` and ``summary.md`` of ``results`` into ``out_dir``; returns the
    markdown table."""
    cells = summarize(results, pooled=pooled)
    write_csv(cells, Path(out_dir) / SUMMARY_CSV)
    table = format_markdown(cells)
    (Path(out_dir) / SUMMARY_MD).write_text(table + "\n", encoding="utf-8")
    return table
