"""The CSV files of a comparison (``taco-compare``): ``summary.csv`` (one row per fine-tuning)
and ``checkpoints.csv`` (the measures of each pre-training checkpoint), written and read back;
and another comparison's outputs read back, for a report that describes a control against it
(``taco-compare --reference``: :func:`read_reference`); and the rows of a study run in parts
merged (:func:`merge_runs`). Numbers are written with 4 decimals (:func:`as_written`)."""

import csv
import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Sequence, Tuple, TypeVar

from .statistics import INITIALIZATION, MEASURE_IDS, Score, is_finite_number

_Parsed = TypeVar("_Parsed")

#: The columns of ``summary.csv``: the fields of :class:`.statistics.Score`.
SUMMARY_COLUMNS = [f.name for f in dataclasses.fields(Score)]

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
        command: the command that ran its phases (:func:`.record.recorded_command`; "" when
            not recorded).
    """

    out: Path
    measures: Sequence[Mapping]
    scores: Sequence[Score] = ()
    command: str = ""


def read_reference(out: Path, pretrain_seeds: Sequence[int],
                   checkpoint_updates: Sequence[int]) -> ReferenceStudy:
    """``out``'s ``checkpoints.csv`` (and ``summary.csv`` and its recorded command where they
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
    from .record import recorded_command  # the study's record (its options' types: torch)

    summary = out / "summary.csv"
    scores = read_summary_csv(summary) if summary.is_file() else []
    return ReferenceStudy(
        out, [r for r in rows if r["pretrain_seed"] in pretrain_seeds],
        [s for s in scores if s.pretrain_seed in pretrain_seeds], recorded_command(out))


def _text(value) -> str:
    """A cell of ``summary.csv`` and ``checkpoints.csv``: a float with 4 decimals."""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def as_written(value: float) -> float:
    """``value`` as ``summary.csv`` and ``checkpoints.csv`` hold it (:func:`_text`: 4
    decimals); not-finite values as they are."""
    return float(_text(float(value))) if math.isfinite(value) else value


def checkpoint_name(row: Mapping) -> str:
    """``<objective>-seed<S>@<updates>``: taco-compare's name of a row's checkpoint (that of
    its cached measures, ``OUT/measures/<name>.json``)."""
    return f"{row['objective']}-seed{row['pretrain_seed']}@{row['updates']}"


def measured_rows(out: Path) -> List[dict]:
    """The rows a comparison's phase 2 has measured so far (``OUT/measures/*.json``: every
    checkpoint it measured, whether or not its ``checkpoints.csv`` was rewritten since).

    Raises:
        FileNotFoundError: ``out`` has no ``measures`` directory (not a taco-compare --out).
    """
    directory = Path(out) / "measures"
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no measures here; give a taco-compare --out")
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def merge_runs(committed: Sequence[Mapping], outs: Mapping[Path, List[dict]]) -> List[dict]:
    """The rows of a study run in parts across sessions, whose run directories do not survive
    (docs/results/pos-study, docs/results/promise-study): ``committed`` with each run
    (objective and pre-training seed) that one of ``outs`` (a taco-compare ``--out`` → its
    :func:`measured_rows`) measured after update 0 replaced by all that part's rows of it (a
    run rerun from update 0 is not bit-identical to a lost one, so its rows never mix), and
    the initializations (update 0) it lacks added.

    Raises:
        ValueError: two parts measured the same run after update 0 (merge one of them).
    """
    def run_of(row: Mapping) -> Tuple[str, int]:
        return row["objective"], row["pretrain_seed"]

    rows = {checkpoint_name(r): dict(r) for r in committed}
    owner: Dict[Tuple[str, int], Path] = {}
    for part, measured in outs.items():
        for run in {run_of(r) for r in measured if r["updates"] != 0}:
            if run in owner:
                raise ValueError(f"{run[0]} seed {run[1]} was measured in {owner[run]} and in "
                                 f"{part}: merge the part whose rows should stand")
            owner[run] = part
            rows = {k: r for k, r in rows.items() if run_of(r) != run or r["updates"] == 0}
        for row in measured:
            if row["updates"] != 0 or checkpoint_name(row) not in rows:
                rows[checkpoint_name(row)] = row
    return list(rows.values())
