"""Find the checkpoints of pre-training runs and load them for analysis.

A *run* is a fairseq ``--save-dir`` (``checkpoint_{epoch}_{updates}.pt`` from
``--save-interval-updates``, ``checkpoint{epoch}.pt``, ``checkpoint_last.pt``, ...) or a
directory holding one as ``checkpoints/`` (the layout of ``scripts/quickstart.sh``), or a single
checkpoint file. A checkpoint is loaded with the data-bin it was trained on (its ``dict.txt``
and ``sentencepiece.bpe.model``) as fairseq's RoBERTa hub interface, in eval mode
(:func:`taco_fairseq.hub.from_pretrained`).
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import torch
from fairseq.checkpoint_utils import checkpoint_paths
from fairseq.models.roberta import RobertaHubInterface

from ..metadata import load_lazily
from ..hub import from_pretrained

logger = logging.getLogger(__name__)

#: fairseq's name of the checkpoints of --save-interval-updates; the group is the updates.
INTERVAL_PATTERN = r"checkpoint_\d+_(\d+)\.pt"


@dataclass
class Checkpoint:
    """A loaded checkpoint.

    Attributes:
        run: the run's name (its directory name).
        path: the checkpoint file.
        updates: its number of updates.
        hub: fairseq's ``RobertaHubInterface`` (``.model`` in eval mode on the requested
            device, ``.encode(text)`` with the data-bin's SentencePiece model,
            ``.task.source_dictionary``).
    """

    run: str
    path: Path
    updates: int
    hub: RobertaHubInterface


def run_name(run: Union[str, Path]) -> str:
    """The name of a run: ``RUN`` for the directory ``RUN``, ``RUN/checkpoints`` and the
    checkpoint files in them."""
    path = Path(run).resolve()
    if path.is_file():
        path = path.parent
    return path.parent.name if path.name == "checkpoints" else path.name


def interval_checkpoints(directory: Union[str, Path]) -> List[Tuple[int, Path]]:
    """``(updates, path)`` of every ``checkpoint_<epoch>_<updates>.pt`` in ``directory``
    (fairseq's ``checkpoint_paths``), by updates; empty when there is none or no directory."""
    if not Path(directory).is_dir():
        return []
    found = checkpoint_paths(str(directory), INTERVAL_PATTERN, keep_match=True)
    return [(int(updates), Path(path)) for path, updates in reversed(found)]


def find_checkpoints(run: Union[str, Path]) -> List[Path]:
    """The checkpoint files of a run: interval checkpoints by update count, then the others
    (epoch, ``_last``, ``_best``) by name.

    Raises:
        FileNotFoundError: if ``run`` is neither a checkpoint file nor a directory with
            ``checkpoint*.pt`` files (directly or in ``checkpoints/``).
    """
    path = Path(run)
    if path.is_file():
        return [path]
    for directory in (path, path / "checkpoints"):
        files = sorted(directory.glob("checkpoint*.pt")) if directory.is_dir() else []
        if files:
            interval = [file for _, file in interval_checkpoints(directory)]
            return interval + [f for f in files if f not in interval]
    raise FileNotFoundError(
        f"no checkpoint*.pt files in {path} or {path / 'checkpoints'}: give a fairseq --save-dir, "
        "its parent, or a checkpoint file"
    )


def load_checkpoint(
    path: Union[str, Path], data_bin: Optional[Union[str, Path]] = None, device: str = "cpu"
) -> Checkpoint:
    """Load a RoBERTa checkpoint with its dictionary and SentencePiece model
    (:func:`taco_fairseq.hub.from_pretrained`) and its number of updates.

    Args:
        path: the checkpoint file.
        data_bin: the data-bin it was trained on; default: the one its config names
            (``task.data``; a relative one is looked for beside the checkpoint, then in the
            current directory).
        device: where to put the model.

    Raises:
        FileNotFoundError: if the checkpoint, the data-bin or its ``sentencepiece.bpe.model``
            is missing (the message says to pass ``--data-bin``).
        ValueError: if the data-bin's dictionary or SentencePiece model is not the one the
            checkpoint was trained with.
    """
    path = Path(path)
    try:
        hub = from_pretrained(path, data_bin)
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{e} (commands: --data-bin DIR, a data-bin made by "
            "taco-prepare-data)"
        ) from e
    return Checkpoint(run_name(path), path, checkpoint_updates(path), hub.to(device))


def checkpoint_updates(path: Union[str, Path]) -> int:
    """The number of updates a fairseq checkpoint was saved at (its tensors are memory-mapped,
    not read)."""
    return int(load_lazily(path)["optimizer_history"][-1]["num_updates"])


def iter_run_checkpoints(
    runs: Sequence[Union[str, Path]], data_bin: Optional[Union[str, Path]] = None,
    device: str = "cpu",
) -> Iterator[Checkpoint]:
    """Load every checkpoint of every run in turn (:func:`find_checkpoints`), one model in
    memory at a time, skipping a checkpoint whose update count its run already had (e.g.
    ``checkpoint_last.pt``).

    Raises:
        FileNotFoundError: as :func:`find_checkpoints` and :func:`load_checkpoint`.
    """
    files = {run: find_checkpoints(run) for run in runs}  # fail before any work
    for run, paths in files.items():
        seen = set()
        for path in paths:
            checkpoint = load_checkpoint(path, data_bin, device)
            if checkpoint.updates in seen:
                logger.info("skipping %s: update %d already analyzed", path, checkpoint.updates)
                continue
            seen.add(checkpoint.updates)
            yield checkpoint


def default_device() -> str:
    """``cuda`` when a GPU is visible, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"
