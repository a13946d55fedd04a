"""A study's record, ``OUT/study.json``: its options (:class:`.study.StudyOptions`) as data and
the command that last ran its phases, written by every ``taco-compare`` call that runs them,
before it does.

A later call in the same ``--out`` reads it. A rerun continues the study: its options may
change (e.g. tasks added; each pre-training run checks its own options,
:func:`.pretraining.check_same_options`) but not the primary endpoint, declared before the
results are seen (:func:`check_continues`). A ``--report-only`` call reports the recorded
study: given ``--out`` alone it takes the options from the record; given the study's options
(or some of them: the record's stand for those left out), those that say what the study is
must be the recorded ones (:func:`check_reported`). An older
taco-compare recorded the command line instead (``OUT/command.txt``); :func:`read_record`
reads it once into ``study.json``.

The file (format :data:`FORMAT`)::

    {"format": 1, "command": "taco-compare --data ... --out OUT ...",
     "options": {"objectives": ["mlm", "taco"], "pretrain_seeds": [1], ...,
                 "settings": {"data": "data-bin/wiki", "arch": "roberta_tiny", ...}}}

``options`` holds the fields of StudyOptions and of its PretrainSettings but ``out``, ``jobs``,
``reference`` and ``recipes_dir`` (the call's and the checkout's); paths as the command gave
them, lists for sequences and for pairs, an object for ``max_updates``.
"""

import dataclasses
import json
import os
import shlex
import typing
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional

from ..glue.recipes import Hyperparameters
from .pretraining import changed_options, option_values
from .study import StudyOptions

#: The record of a study's options in its ``--out``.
STUDY_FILE = "study.json"
#: What an older taco-compare recorded instead: the command line that ran the phases.
COMMAND_FILE = "command.txt"
#: The format of :data:`STUDY_FILE` this taco-compare writes and reads.
FORMAT = 1
#: What a study's --out holds once taco-compare has run there (the phases' files: study.py).
STUDY_FILES = (STUDY_FILE, COMMAND_FILE, "pretrain", "measures", "finetune")


@dataclass(frozen=True)
class StudyRecord:
    """What ``OUT/study.json`` records.

    Attributes:
        options: the study's options; its ``out`` is the directory the record lies in, its
            ``jobs`` and ``reference`` (not recorded) their defaults.
        command: the ``taco-compare`` command that last ran the phases, as the report gives it.
    """

    options: StudyOptions
    command: str

    @property
    def path(self) -> Path:
        """``OUT/study.json``."""
        return Path(self.options.out) / STUDY_FILE

    def write(self) -> None:
        """Write (or replace) :attr:`path`; never half-written."""
        data = {"format": FORMAT, "command": self.command, "options": _encoded(self.options)}
        partial = self.path.with_name(STUDY_FILE + ".partial")
        partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(partial, self.path)


def read_record(out: Path, read_command: Callable[[str], StudyOptions]
                ) -> Optional[StudyRecord]:
    """``out``'s record: its :data:`STUDY_FILE`; in the ``--out`` of an older taco-compare
    without one, its :data:`COMMAND_FILE` read once into it. None: neither exists.

    Args:
        read_command: the options of a recorded ``taco-compare`` command line, as that call
            parsed them (only the options: no file is read); raises ValueError for a command
            it cannot read.

    Raises:
        ValueError: study.json is not a record of :data:`FORMAT`, or command.txt holds no
            command ``read_command`` reads (naming the file, why and what to do).
    """
    out = Path(out)
    path = out / STUDY_FILE
    if path.is_file():
        return _read(path)
    old = out / COMMAND_FILE
    if not old.is_file():
        return None
    command = old.read_text(encoding="utf-8").strip()
    try:
        options = read_command(command)
    except ValueError as e:
        raise ValueError(f"{old}: not a taco-compare command this one reads ({e}), so the "
                         f"study's options are unknown; give the --out of a taco-compare "
                         f"study, or remove {old} to record the options of the next run") from None
    record = StudyRecord(dataclasses.replace(options, out=out, jobs=1, reference=None), command)
    record.write()
    return record


def recorded_command(out: Path) -> str:
    """The command that last ran the phases of the study in ``out`` (its :data:`STUDY_FILE`,
    or the :data:`COMMAND_FILE` of an older taco-compare, read, not converted); "" when there
    is neither or it cannot be read."""
    path = Path(out) / STUDY_FILE
    if path.is_file():
        try:
            return _read(path).command
        except ValueError:
            return ""
    path = Path(out) / COMMAND_FILE
    return path.read_text(encoding="utf-8").strip() if path.is_file() else ""


def no_study(out: Path) -> Optional[str]:
    """Why ``out`` holds no study for ``--report-only`` to report on, with what to do (None:
    it holds one: a record, pre-training runs, measures or fine-tunings)."""
    out = Path(out)
    if not out.is_dir():
        missing = "no such directory"
    elif not any((out / name).exists() for name in STUDY_FILES):
        missing = f"none of {', '.join(STUDY_FILES)} in it"
    else:
        return None
    return (f"no study here ({missing}; give the --out of a taco-compare study, or run "
            "taco-compare without --report-only to start one)")


def check_continues(recorded: StudyRecord, options: StudyOptions) -> None:
    """A rerun in the ``--out`` of ``recorded`` continues that study with ``options``: any of
    them may differ (a rerun may add tasks; each pre-training run checks its own options) but
    the primary endpoint, declared before the results are seen.

    Raises:
        ValueError: ``options.primary_endpoint`` is not the recorded one (naming both).
    """
    declared = recorded.options.primary_endpoint
    if options.primary_endpoint != declared:
        raise ValueError(
            f"--primary-endpoint {options.primary_endpoint}: {recorded.path} records "
            f"{declared} for this study (the primary endpoint is declared before the results "
            f"are seen); give --primary-endpoint {declared}, or use another --out for a new "
            "study")


def check_reported(recorded: StudyRecord, options: StudyOptions,
                   fairseq_options: bool = True) -> None:
    """A ``--report-only`` call that gives the study's options: the report is of the recorded
    study, so every option that says what it is (:func:`study_values`) must be the recorded
    one; where its files lie and how its runs ran may differ, and the ``fairseq-train``
    options (after ``--``) are compared only with ``fairseq_options`` (the call gives some;
    ``--user-dir`` may differ, as for a resume).

    Raises:
        ValueError: naming each option that differs (recorded → given) and how to report the
            recorded study.
    """
    changed = changed_options(study_values(recorded.options, fairseq_options),
                              study_values(options, fairseq_options), ("-- --user-dir",))
    if changed:
        reference = ["--reference", str(options.reference)] if options.reference else []
        raise ValueError(
            f"--report-only: {'; '.join(changed)} (recorded in {recorded.path} → given here): "
            "the report is of the recorded study, and these options say what it is; give the "
            "recorded ones (only the paths, --jobs, --cpu and --reference may differ), or none: "
            "taco-compare " + shlex.join(["--report-only", "--out", str(options.out),
                                          *reference]))


def study_values(options: StudyOptions, fairseq_options: bool = True) -> Dict[str, List[str]]:
    """What the study ``options`` is, as :func:`.pretraining.changed_options` compares it: the
    taco-compare option that sets each recorded field (its :func:`.pretraining.study_field`;
    those that say where files lie or how the runs ran left out) → its values as strings
    (pairs and ``max_updates`` as ``NAME=VALUE``; a flag that is off, None and an empty value
    left out); the fine-tuning points as ``--finetune-batch-size``, ``--finetune-lr`` and
    ``--finetune-epochs``; and with ``fairseq_options`` the ``fairseq-train`` options after
    ``--`` as ``"-- NAME"`` (:func:`.pretraining.option_values`)."""
    values: Dict[str, List[str]] = {}
    for field, value in _study_fields(options):
        option = field.metadata["option"]
        if option == "--":
            if fairseq_options:
                values.update({f"-- {name}": v for name, v in option_values(value).items()})
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], Hyperparameters):
            values.update({option: [str(v) for v in dict.fromkeys(getattr(p, name)
                                                                  for p in value)]
                           for name, option in _POINT_OPTIONS.items()})
        elif not (value is None or value is False
                  or isinstance(value, (str, list, tuple, dict)) and not value):
            values[option] = [] if value is True else _strings(value)
    return values


#: The options that set each field of the fine-tuning points (their grid, StudyOptions.points).
_POINT_OPTIONS = {"batch_size": "--finetune-batch-size", "lr": "--finetune-lr",
                  "epochs": "--finetune-epochs"}


def _study_fields(record) -> List[tuple]:
    """(field, value) of each recorded field of ``record`` that says what the study is, those
    of a nested record (``settings``) in its place."""
    found = []
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if not field.metadata.get("recorded", True) or field.metadata.get("where"):
            continue
        if dataclasses.is_dataclass(value):
            found += _study_fields(value)
        else:
            found.append((field, value))
    return found


def _strings(value) -> List[str]:
    """A field's value as the strings of a command line's values (a pair ``NAME=VALUE``)."""
    if isinstance(value, dict):
        value = list(value.items())
    if not isinstance(value, (list, tuple)):
        return [str(value)]
    return ["=".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in value]


def _recorded_fields(kind) -> List[dataclasses.Field]:
    """The fields of the record type ``kind`` that study.json holds (all but those whose
    metadata says ``recorded: False``)."""
    return [f for f in dataclasses.fields(kind) if f.metadata.get("recorded", True)]


def _encoded(value):
    """``value`` as JSON data: a record as an object of its recorded fields, a path as a
    string, a tuple as a list."""
    if dataclasses.is_dataclass(value):
        return {f.name: _encoded(getattr(value, f.name)) for f in _recorded_fields(type(value))}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _encoded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encoded(v) for v in value]
    return value


def _read(path: Path) -> StudyRecord:
    """The record in ``path`` (an ``OUT/study.json``).

    Raises:
        ValueError: not JSON, another format, or a field missing or not of its type.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e}); taco-compare writes it before each run: "
                         f"remove it and rerun the study's command") from None
    found = data.get("format") if isinstance(data, dict) else None
    if found != FORMAT:
        raise ValueError(f"{path}: format {found}, not {FORMAT}: written by another "
                         "taco-compare; report it with that one, or remove it and rerun the "
                         "study's command")
    try:
        command = _decoded(str, data.get("command"), "command")
        options = _decoded(StudyOptions, data.get("options"), "options", out=path.parent)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}; remove it and rerun the study's command to record it "
                         "again") from None
    return StudyRecord(options, command)


def _decoded(kind, value, where: str, **given):
    """The JSON ``value`` of the field ``where`` as the type ``kind`` (a record: of its
    recorded fields, with the others from ``given``).

    Raises:
        ValueError: ``value`` is not of ``kind`` (naming ``where``), or a record lacks a
            field without default, or rejects its values.
    """
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Union:  # Optional[X]
        if value is None:
            return None
        (kind,) = [a for a in arguments if a is not type(None)]
        return _decoded(kind, value, where)
    if dataclasses.is_dataclass(kind):
        _expect(isinstance(value, dict), where, "an object", value)
        hints = typing.get_type_hints(kind)
        fields = {}
        for f in _recorded_fields(kind):
            if f.name in value:
                fields[f.name] = _decoded(hints[f.name], value[f.name], f"{where}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{where}.{f.name} missing")
        return kind(**fields, **given)
    if kind is Path:
        _expect(isinstance(value, str), where, "a path", value)
        return Path(value)
    if origin is dict:
        _expect(isinstance(value, dict), where, "an object", value)
        return {k: _decoded(arguments[1], v, f"{where}.{k}") for k, v in value.items()}
    if origin in (list, tuple, SequenceABC):
        _expect(isinstance(value, list), where, "a list", value)
        if origin is tuple and arguments[-1] is not Ellipsis:  # a pair
            _expect(len(value) == len(arguments), where, f"{len(arguments)} values", value)
            return tuple(_decoded(a, v, where) for a, v in zip(arguments, value))
        items = [_decoded(arguments[0], v, where) for v in value]
        return tuple(items) if origin is tuple else items
    if kind is float:
        _expect(isinstance(value, (int, float)) and not isinstance(value, bool), where,
                "a number", value)
        return float(value)
    _expect(isinstance(value, kind) and (kind is bool or not isinstance(value, bool)), where,
            f"a {kind.__name__}", value)
    return value


def _expect(holds: bool, where: str, expected: str, value) -> None:
    """Raises ValueError naming ``where``, what was ``expected`` and the ``value`` found,
    unless it ``holds``."""
    if not holds:
        raise ValueError(f"{where}: expected {expected}, got {value!r}")
