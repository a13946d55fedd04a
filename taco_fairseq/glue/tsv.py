"""Read one GLUE TSV file into aligned inputs and labels, counting malformed rows.

GLUE's files are tab-separated without quoting: fields hold unbalanced ``"`` characters (e.g.
RTE train row 2164 starts with one), so they are read with ``csv.QUOTE_NONE`` and every quote
stays part of its sentence. Some files have no header line (CoLA train/dev), MRPC's header
starts with a UTF-8 byte-order mark. A row is *malformed* when it has another number of fields
than the layout's columns (a missing or an extra tab) or when its label is not one of the
task's labels (or, for STS-B, not a finite number); malformed rows are returned with their line
numbers, never dropped silently.
"""

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from .tasks import SplitLayout


@dataclass(frozen=True)
class MalformedRow:
    """A row that cannot be used: 1-based ``line`` number in the file and the ``reason``."""

    line: int
    reason: str


@dataclass
class TsvSplit:
    """The usable rows of one file, aligned: row ``i`` has ``inputs[i]``, ``labels[i]``, ...

    Attributes:
        path: the file.
        inputs: per row, the text of the layout's input columns (1 or 2 strings).
        labels: per row, the label string (a class label, or an STS-B score as written);
            None for test files.
        indices: per row, GLUE's example index: the layout's index column, else the 0-based
            number of the row among all data rows of the file (malformed ones included).
        malformed: the malformed rows, in file order; not part of the lists above.
        empty_inputs: usable rows with an empty input field (kept; reported).
    """

    path: Path
    inputs: List[Tuple[str, ...]] = field(default_factory=list)
    labels: Optional[List[str]] = None
    indices: List[str] = field(default_factory=list)
    malformed: List[MalformedRow] = field(default_factory=list)
    empty_inputs: int = 0

    def __len__(self) -> int:
        return len(self.inputs)


def read_split(path: Path, layout: SplitLayout, labels: Optional[Sequence[str]]) -> TsvSplit:
    """Read ``path`` with ``layout``.

    Args:
        path: a GLUE TSV file (UTF-8).
        layout: its expected columns.
        labels: the task's class labels, or None for a regression score (a finite float).
            Ignored for files without a label column.

    Returns:
        The usable rows and the malformed ones.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the header line differs from the layout's columns (the message shows
            both), the file is empty, or a line cannot be parsed at all (e.g. a field over
            csv's size limit).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GLUE file not found: {path}")
    result = TsvSplit(path=path, labels=[] if layout.label else None)
    positions = {name: i for i, name in enumerate(layout.columns)}
    inputs = [positions[name] for name in layout.inputs]
    label = positions.get(layout.label)
    index = positions.get(layout.index)
    # utf-8-sig drops MRPC's byte-order mark; newline="" lets csv see the raw line ends
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE, strict=True)
        if layout.has_header:
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{path} is empty; expected a header line")
            if tuple(header) != layout.columns:
                raise ValueError(
                    f"{path}: header {header} is not the original GLUE layout "
                    f"{list(layout.columns)}; give the task directory of the GLUE release "
                    "(e.g. from taco-download-glue)"
                )
        try:
            for row_number, row in enumerate(reader):
                problem = _problem(row, layout, label, labels)
                if problem:
                    result.malformed.append(MalformedRow(reader.line_num, problem))
                    continue
                text = tuple(row[i] for i in inputs)
                result.inputs.append(text)
                result.empty_inputs += any(not t.strip() for t in text)
                if label is not None:
                    result.labels.append(row[label])
                result.indices.append(row[index] if index is not None else str(row_number))
        except csv.Error as e:
            raise ValueError(f"{path}, line {reader.line_num}: {e}") from e
    return result


def _problem(row, layout: SplitLayout, label: Optional[int], labels) -> Optional[str]:
    if len(row) != len(layout.columns):
        return f"{len(row)} tab-separated fields, expected {len(layout.columns)}"
    if label is None:
        return None
    value = row[label]
    if labels is None:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            return f"{layout.label} {value!r} is not a number"
    elif value not in labels:
        return f"{layout.label} {value!r} is not one of {list(labels)}"
    return None
