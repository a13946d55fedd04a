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


def update_count(record: Dict):
    """The update count of a record: ``num_updates`` of ``train_inner`` records,
    ``valid_num_updates`` / ``train_num_updates`` of ``valid`` / ``train`` records (fairseq
    prefixes them); None if it has none."""
    return record.get(f"{record['kind']}_num_updates", record.get("num_updates"))


def latest_per_update(records: Sequence[Dict], kind: str) -> List[Dict]:
    """The records of ``kind``, one per update count in the order they first appear: where an
    update is logged twice (a resumed run appending to the log of the run it continues logs
    the updates after its checkpoint again), the later record."""
    rows = {}
    for record in (r for r in records if r["kind"] == kind):
        updates = update_count(record)
        rows[id(record) if updates is None else updates] = record
    return list(rows.values())


def format_table(records: Sequence[Dict], columns: Sequence[str], kind: str = "train_inner") -> str:
    """A plain-text table of ``columns`` (``num_updates`` first) for the records of ``kind``, a
    row per update count (:func:`latest_per_update`); missing values print as ``-``."""
    header = ["num_updates", *columns]
    body = [[_cell(update_count(r))] + [_cell(r.get(c)) for c in columns]
            for r in latest_per_update(records, kind)]
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
