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

import torch
from fairseq.data import Dictionary

from .. import checkpoint_compat  # noqa: F401  (fairseq checkpoints under weights_only)
from ..pretraining_data import DICT_FILE

logger = logging.getLogger(__name__)

_EMBEDDINGS = "encoder.sentence_encoder.embed_tokens.weight"
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
        ValueError: the file is not a fairseq checkpoint of a RoBERTa-style encoder.
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
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # torch raises several types for files it cannot read
        raise ValueError(f"{path} is not a readable fairseq checkpoint: {e}") from e
    cfg = state.get("cfg") if isinstance(state, dict) else None
    if cfg is None or _EMBEDDINGS not in state.get("model", {}):
        raise ValueError(
            f"{path} is not a fairseq checkpoint of a RoBERTa-style encoder (no cfg or no "
            f"{_EMBEDDINGS})"
        )
    model = cfg["model"]
    get = model.get if isinstance(model, dict) else lambda key: getattr(model, key, None)
    data = cfg["task"].get("data") if cfg.get("task") else None
    return CheckpointInfo(
        arch=get("_name") or get("arch"),
        max_positions=int(get("max_positions")),
        embedding_rows=state["model"][_EMBEDDINGS].shape[0],
        num_updates=int(state["optimizer_history"][-1]["num_updates"]),
        data=Path(str(data).split(":")[0]) if data else None,
    )


def check_compatible(
    checkpoint: Path, info: CheckpointInfo, task_dir: Path, pretraining_data: Optional[Path]
) -> None:
    """Check that the GLUE data in ``task_dir`` was encoded with the checkpoint's dictionary.

    The checkpoint's embedding matrix must have a row per symbol of the GLUE data's
    ``input0/dict.txt`` plus ``<mask>``, and that ``dict.txt`` must list the same symbols as
    the pre-training data-bin's (``pretraining_data``, else the one recorded in the
    checkpoint). When neither data-bin exists here, only the size is checked (a warning says
    so).

    Raises:
        ValueError: sizes or symbols differ; the message names both files and the fix.
    """
    glue_dict = Dictionary.load(str(Path(task_dir) / "input0" / DICT_FILE))
    fix = (
        "prepare the GLUE data with the data-bin the checkpoint was pre-trained on: "
        "scripts/prepare_glue.py --pretraining-data DATA_BIN"
    )
    if info.embedding_rows != len(glue_dict) + 1:
        raise ValueError(
            f"{checkpoint} has {info.embedding_rows} token embeddings, but the GLUE data in "
            f"{task_dir} was encoded with a dictionary of {len(glue_dict)} symbols (+ <mask> = "
            f"{len(glue_dict) + 1}); {fix}"
        )
    data = Path(pretraining_data) if pretraining_data else info.data
    if data is None or not (data / DICT_FILE).is_file():
        logger.warning(
            "cannot check the symbols of %s against its pre-training dictionary (%s not found; "
            "give --pretraining-data); only the dictionary size matched", checkpoint,
            data / DICT_FILE if data else "no data-bin recorded",
        )
        return
    if Dictionary.load(str(data / DICT_FILE)).symbols != glue_dict.symbols:
        raise ValueError(
            f"the GLUE data in {task_dir} was encoded with another dictionary than {checkpoint} "
            f"was pre-trained with ({data / DICT_FILE}); {fix}"
        )
