"""The pre-training checkpoints a GLUE fine-tuning starts from: naming, inspection and the
checks that keep a run from silently starting from random weights or wrong token ids.

fairseq's ``--restore-file`` starts from scratch, with only a log line, when the file does not
exist; and a checkpoint pre-trained with another ``dict.txt`` of the same size loads without
complaint while every token id means something else. :func:`check_compatible` turns both into
errors before fine-tuning starts.
"""

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..metadata import (DICTIONARY_KEY, SENTENCEPIECE_MODEL, check_dictionary,
                        check_training_data, data_fingerprints, load_lazily,
                        load_task_dictionary, recorded_data_dir, saved_option)
from ..errors import InputNotFoundError, OptionError
from ..prep.pretraining import DICT_FILE, INFO_FILE
from .databin import read_prep_info

logger = logging.getLogger(__name__)

_EMBEDDINGS = "encoder.sentence_encoder.embed_tokens.weight"
#: The end of an error about GLUE data that does not fit a checkpoint.
GLUE_DATA_FIX = (
    "Prepare the GLUE data with the data-bin the checkpoint was pre-trained on: "
    "taco-prepare-glue --pretraining-data DATA_BIN"
)
_NAME = re.compile(r"[^A-Za-z0-9_.@+-]+")


@dataclass(frozen=True)
class PretrainedCheckpoint:
    """A pre-training checkpoint under the name results are reported with."""

    name: str
    path: Path

    @classmethod
    def parse(cls, spec: str) -> "PretrainedCheckpoint":
        """``NAME=PATH`` or ``PATH`` (named ``<directory>-<file stem>``, e.g.
        ``taco_small-checkpoint_1_5000``); characters other than letters, digits and
        ``_.@+-`` in a name become ``-`` (names are directory names)."""
        name, sep, path = spec.partition("=")
        if not sep:
            path = spec
            name = f"{Path(path).parent.name}-{Path(path).stem}"
        return cls(_NAME.sub("-", name).strip("-") or "checkpoint", Path(path))


@dataclass(frozen=True)
class CheckpointInfo:
    """What fine-tuning needs to know about a pre-training checkpoint.

    Attributes:
        arch: fairseq architecture (``--arch``), e.g. ``roberta_small``.
        max_positions: positions of the model; fine-tuning inputs are truncated to it.
        embedding_rows: rows of the token-embedding matrix (dictionary + ``<mask>``).
        num_updates: pre-training updates when it was saved.
        data: the pre-training data-bin recorded in the checkpoint (may not exist here).
    """

    arch: str
    max_positions: int
    embedding_rows: int
    num_updates: int
    data: Optional[Path]


def inspect_checkpoint(path: Path) -> CheckpointInfo:
    """Read a fairseq RoBERTa-style pre-training checkpoint (memory-mapped, on the CPU).

    Raises:
        FileNotFoundError: ``path`` does not exist (fairseq would start from random weights).
        ValueError: the file is not a readable fairseq checkpoint of a RoBERTa-style encoder.
    """
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(
            f"pre-training checkpoint {path} is a directory; give a checkpoint file in it, "
            f"e.g. {path / 'checkpoint_last.pt'}"
        )
    if not path.is_file():
        raise FileNotFoundError(
            f"pre-training checkpoint {path} not found (fairseq would silently fine-tune from "
            "random weights); give an existing checkpoint_*.pt"
        )
    state = load_lazily(path)
    cfg = state.get("cfg")
    if cfg is None or _EMBEDDINGS not in state["model"]:
        raise ValueError(
            f"{path} is not a fairseq checkpoint of a RoBERTa-style encoder (no cfg or no "
            f"{_EMBEDDINGS})"
        )
    data = recorded_data_dir(path, state)
    return CheckpointInfo(
        arch=saved_option(state, "model", "_name") or saved_option(state, "model", "arch"),
        max_positions=int(saved_option(state, "model", "max_positions")),
        embedding_rows=state["model"][_EMBEDDINGS].shape[0],
        num_updates=int(state["optimizer_history"][-1]["num_updates"]),
        data=Path(data) if data else None,
    )


def check_compatible(
    checkpoint: Path, info: CheckpointInfo, task_dir: Path, pretraining_data: Optional[Path]
) -> None:
    """Check that the GLUE data in ``task_dir`` was encoded with the checkpoint's dictionary
    and SentencePiece model.

    The shared check of every loader (:func:`check_glue_data`) compares ``input0/dict.txt``
    and the SentencePiece model that ``prep_info.json`` records (by its SHA-256) with the
    fingerprints the checkpoint records. A checkpoint without a dictionary fingerprint (e.g.
    pre-trained by fairseq without the plugin) is checked by size, and its dictionary's symbols
    against the pre-training data-bin's (``pretraining_data``, else the one recorded in the
    checkpoint) when that exists here (a warning says when it does not). A given
    ``pretraining_data`` must hold the checkpoint's ``dict.txt`` in any case.

    Raises:
        InputNotFoundError: ``pretraining_data`` has no ``dict.txt``.
        ValueError: sizes, symbols or SentencePiece models differ; the message names both
            files and the fix.
    """
    state = load_lazily(checkpoint)
    dictionary = check_glue_data(checkpoint, state, task_dir)
    given = None if pretraining_data is None else Path(pretraining_data) / DICT_FILE
    if given is not None and not given.is_file():
        raise InputNotFoundError(f"--pretraining-data {pretraining_data}: no {DICT_FILE} "
                                 f"there; give the data-bin {checkpoint} was pre-trained on")
    if DICTIONARY_KEY in (state.get("task_state") or {}):
        if given is not None:  # without a fingerprint, the symbols are compared below
            check_dictionary(checkpoint, state, load_task_dictionary(given),
                             f"--pretraining-data's {given}", fix="Give the data-bin it was "
                             "pre-trained on, or leave --pretraining-data out.")
        return
    data = Path(pretraining_data) if pretraining_data else info.data
    if data is None or not (data / DICT_FILE).is_file():
        logger.warning(
            "cannot check the symbols of %s against its pre-training dictionary (%s not found; "
            "give --pretraining-data); only the dictionary size matched", checkpoint,
            data / DICT_FILE if data else "no data-bin recorded",
        )
        return
    if load_task_dictionary(data / DICT_FILE).symbols != dictionary.symbols:
        raise OptionError(
            f"the GLUE data in {task_dir} was encoded with another dictionary than {checkpoint} "
            f"was pre-trained with ({data / DICT_FILE}). {GLUE_DATA_FIX}"
        )


def check_glue_data_fits(data: Path, task_dir: Path, checkpoints: str) -> None:
    """:func:`check_glue_data` before pre-training, for the ``checkpoints`` (a description,
    for messages) that a pre-training on the data-bin ``data`` will save: against the
    fingerprints they will record (:func:`taco_fairseq.metadata.data_fingerprints`), so that
    GLUE data prepared with another dictionary or SentencePiece model is an error at once, with
    the message fine-tuning would give.

    Raises:
        ValueError: as :func:`check_glue_data`.
    """
    data = Path(data).resolve()
    state = {"model": {}, "cfg": {"task": {"data": str(data)}},
             "task_state": data_fingerprints(load_task_dictionary(data / DICT_FILE), data)}
    check_glue_data(checkpoints, state, task_dir)


def check_glue_data(checkpoint, state: dict, task_dir: Path):
    """:func:`taco_fairseq.metadata.check_training_data` for a prepared GLUE task
    directory: its ``input0/dict.txt`` and the SentencePiece model its ``prep_info.json``
    records (by SHA-256).

    Args:
        checkpoint: a pre-training or fine-tuned checkpoint (path, for messages).
        state: the checkpoint (:func:`taco_fairseq.metadata.load_lazily`).
        task_dir: the prepared task directory.

    Returns:
        the task's dictionary (``input0/dict.txt`` with ``<mask>``).

    Raises:
        ValueError: as ``check_training_data``, with the GLUE fix.
    """
    task_dir = Path(task_dir)
    glue_dict = task_dir / "input0" / DICT_FILE
    prep = read_prep_info(task_dir) if (task_dir / INFO_FILE).is_file() else {}
    encoded_with = Path(prep.get("pretraining_data", "?")) / SENTENCEPIECE_MODEL
    dictionary = load_task_dictionary(glue_dict)
    check_training_data(
        checkpoint, state, dictionary, str(glue_dict),
        sentencepiece_model=f"{encoded_with} (which encoded {task_dir})" if prep else None,
        sentencepiece_sha256=prep.get("sentencepiece_sha256"), fix=GLUE_DATA_FIX,
    )
    return dictionary
