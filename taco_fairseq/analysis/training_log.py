"""Read the metrics out of a fairseq training log written with ``--log-format json``."""

import json
import math
from typing import Dict, Iterable, List, Sequence

#: fairseq's json progress bar tags each record with one of these logger names.
RECORD_KINDS = ("train_inner", "train", "valid")


def parse_json_log(lines: Iterable[str]) -> List[Dict]:
    """The json records of a fairseq log, in order.

    fairseq prints ``<time> | INFO | train_inner | {"epoch": 1, "loss": "14.3", ...}`` (or,
    under hydra, ``[<time>][train_inner][INFO] - {...}``); values are strings. Each record
    comes back as a dict of floats (strings that are not numbers are kept) plus ``kind``: the
    logger name. Lines that are not json records are ignored.
    """
    records = []
    for line in lines:
        start = line.find("{")
        if start < 0:
            continue
        head = line[:start]
        kind = next((k for k in RECORD_KINDS if f"| {k} |" in head or f"[{k}]" in head), None)
        if kind is None:
            continue
        try:
            values = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        record = {key: _number(value) for key, value in values.items()}
        record["kind"] = kind
        records.append(record)
    return records


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


def format_table(records: Sequence[Dict], columns: Sequence[str], kind: str = "train_inner") -> str:
    """A plain-text table of ``columns`` (``num_updates`` first) for the records of ``kind``.

    The update count is ``num_updates`` of ``train_inner`` records and ``valid_num_updates`` /
    ``train_num_updates`` of ``valid`` / ``train`` records (fairseq prefixes them). An update
    count logged twice (a resumed run appending to the log of the run it continues logs the
    updates after its checkpoint again) is one row, with the later record. Missing values print
    as ``-``.
    """
    rows = {}
    for record in (r for r in records if r["kind"] == kind):
        updates = record.get(f"{kind}_num_updates", record.get("num_updates"))
        rows[id(record) if updates is None else updates] = record
    header = ["num_updates", *columns]
    body = [[_cell(r.get(f"{kind}_num_updates", r.get("num_updates")))]
            + [_cell(r.get(c)) for c in columns] for r in rows.values()]
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h)
              for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in body]
    return "\n".join(lines)


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if value.is_integer() else f"{value:.4g}"
    return str(value)
