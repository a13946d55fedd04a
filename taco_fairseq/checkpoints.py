"""fairseq checkpoints: weights-only loading (:data:`SAFE_GLOBALS`), the one metadata reader
(:func:`load_lazily`), data fingerprints, and the checks of the checkpoint ``fairseq-train``
loads (:func:`restore_config`; what they catch: docs/reliability.md)."""

import argparse
import copy
import functools
import hashlib
import logging
import os
import re
from typing import Dict, Optional

import numpy as np
import torch
from fairseq import checkpoint_utils, utils
from fairseq.file_io import PathManager
from omegaconf import open_dict

from .errors import InputNotFoundError, OptionError, hydra_relative_path_hint

_NUMPY_SCALAR = np.dtype("float64").type(0).__reduce__()[0]  # numpy's multiarray.scalar
#: What importing this module adds to torch's weights-only unpickler, none of which can run code:
#: what fairseq checkpoints pickle besides tensors and containers (``args`` of older checkpoints
#: and ``cfg["model"]`` of RoBERTa are Namespaces; numpy scalars, also as numpy 1.x named them).
SAFE_GLOBALS = [
    argparse.Namespace, _NUMPY_SCALAR, (_NUMPY_SCALAR, "numpy.core.multiarray.scalar"), np.dtype,
    *(type(np.dtype(name)) for name in
      ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "bool")),
]
torch.serialization.add_safe_globals(SAFE_GLOBALS)

#: The SentencePiece model file of a data-bin (``taco-prepare-data``).
SENTENCEPIECE_MODEL = "sentencepiece.bpe.model"
#: ``task_state`` key of the dictionary fingerprint saved with every checkpoint.
DICTIONARY_KEY = "dictionary_fingerprint"
#: ``task_state`` key of the SHA-256 of the data-bin's SentencePiece model (when it has one).
SENTENCEPIECE_KEY = "sentencepiece_sha256"
#: fairseq's default ``--restore-file``: resume from ``<save-dir>/checkpoint_last.pt`` if any.
DEFAULT_RESTORE_FILE = "checkpoint_last.pt"
#: How to get out of a dictionary or SentencePiece model mismatch (the default).
DATA_FIX = ("Use the data-bin the checkpoint was trained on, or encode your text with its "
            "sentencepiece.bpe.model and dict.txt.")

logger = logging.getLogger(__name__)


def load_lazily(path) -> dict:
    """A checkpoint loaded weights-only on the CPU, tensors memory-mapped when it can be.

    Raises:
        OptionError: the file is no readable fairseq checkpoint (e.g. cut short by a kill).
    """
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except (RuntimeError, OSError):  # not in the zip format that mmap needs, or cut short
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # EOFError, UnpicklingError, KeyError, ... for such files
            # of torch's weights-only message, the diagnosis, not the advice to load unsafely
            reason = str(e).split("WeightsUnpickler error:")[-1].split("Check the documentation")[0]
            raise OptionError(
                f"{path} cannot be read as a checkpoint ({type(e).__name__}: "
                f"{' '.join(reason.split())}): it is cut "
                "short (e.g. by a kill while it was written) or not a fairseq checkpoint; give "
                "an intact checkpoint_*.pt") from e
    if not isinstance(state, dict) or "model" not in state:
        raise OptionError(f"{path} is not a fairseq checkpoint (it holds no model weights); "
                          "give a checkpoint_*.pt written by fairseq-train")
    return state


def saved_option(state: dict, group: str, name: str):
    """Option ``name`` of the ``group`` (``task``, ``model``, ...) config of a checkpoint
    (``cfg[group]``, a dict or Namespace, or the ``args`` of older checkpoints), or None."""
    section = state.get("args") or (state.get("cfg") or {}).get(group)
    if isinstance(section, dict):
        return section.get(name)
    return getattr(section, name, None)


def dictionary_fingerprint(dictionary) -> Dict[str, object]:
    """``{"size": symbols, "sha256": hex digest of the symbols in id order}``; counts are left
    out, so data-bins encoded with the same SentencePiece model match."""
    digest = hashlib.sha256("\n".join(dictionary.symbols).encode("utf-8")).hexdigest()
    return {"size": len(dictionary), "sha256": digest}


def file_sha256(path) -> str:
    """Hex SHA-256 of a file's bytes (the SentencePiece model's fingerprint)."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def check_dictionary(checkpoint, state: dict, dictionary, dict_name: str,
                     fix: str = DATA_FIX) -> None:
    """Check that ``dictionary`` (fairseq's, ``<mask>`` added; ``dict_name`` in messages) is
    the one ``checkpoint`` (``state``, :func:`load_lazily`) was trained with: against its
    recorded fingerprint (:data:`DICTIONARY_KEY`), else, with a warning, against the rows of
    its token-embedding matrix.

    Raises:
        OptionError: naming the checkpoint, the dictionary, its training data and ``fix``.
    """
    saved = (state.get("task_state") or {}).get(DICTIONARY_KEY)
    if saved is not None:
        differs, saved_size = saved != dictionary_fingerprint(dictionary), saved["size"]
    else:
        weights = _canonical_weights(state.get("model") or {})
        embed = weights.get("sentence_encoder.embed_tokens.weight")
        saved_size = None if embed is None else len(embed)
        differs = saved_size is not None and saved_size != len(dictionary)
        warn_once(f"{checkpoint} records no fingerprint of its dictionary: only the size of "
                  f"{dict_name} ({len(dictionary)} symbols) could be checked")
    if differs:
        raise OptionError(
            f"checkpoint {checkpoint} was trained with another dictionary ({saved_size} "
            f"symbols) than {dict_name} ({len(dictionary)} symbols): token ids would mean other "
            f"pieces.{trained_on(checkpoint, state)} {fix}")


def recorded_data_dir(checkpoint, state: dict) -> Optional[str]:
    """The first ``--data`` directory a checkpoint was trained on, or None; a relative one is
    looked for beside the checkpoint and its parent directories, else returned as given."""
    data = saved_option(state, "task", "data")
    if not data:
        return None
    data = str(data).split(os.pathsep)[0]
    if os.path.isabs(data):
        return data
    directory = os.path.dirname(os.path.abspath(checkpoint))
    while not os.path.isdir(os.path.join(directory, data)):
        if os.path.dirname(directory) == directory:
            return data
        directory = os.path.dirname(directory)
    return os.path.join(directory, data)


def checkpoint_to_load(cfg) -> Optional[str]:
    """The checkpoint ``fairseq-train`` will load given fairseq's ``checkpoint`` config
    ``cfg``, or None for a fresh start; for an unreadable ``checkpoint_last.pt`` the intact
    numbered checkpoint with the most updates (with a warning).

    Raises:
        InputNotFoundError: ``--restore-file`` (not the default) or ``--continue-once`` names no
            file (fairseq would silently start from scratch).
        OptionError: ``checkpoint_last.pt`` is unreadable and no intact checkpoint is there.
    """
    last = _last_checkpoint(cfg)
    if cfg.restore_file != DEFAULT_RESTORE_FILE:
        path = cfg.restore_file.replace(".pt", cfg.checkpoint_suffix + ".pt")
        if not PathManager.isfile(path):
            raise InputNotFoundError(
                f"--restore-file {path}: no such checkpoint (fairseq would start from scratch)"
                f"{hydra_relative_path_hint(path)}. Fix the path, or leave --restore-file out to "
                f"resume from {last} or start afresh.")
        if PathManager.isfile(last) and os.path.abspath(path) != os.path.abspath(last):
            logger.warning(
                f"loading --restore-file {path}, not {last}: this run restarts from {path}. "
                f"To resume an interrupted run, leave --restore-file out (use --continue-once "
                f"{path} to start from it only when {last} does not exist)")
        return path
    if PathManager.isfile(last):
        try:
            load_lazily(last)
            return last
        except Exception:  # torch raises EOFError, RuntimeError, ... for such files
            return _newest_intact_checkpoint(cfg, last)
    if cfg.continue_once is not None:
        if not PathManager.isfile(cfg.continue_once):
            raise InputNotFoundError(
                f"--continue-once {cfg.continue_once}: no such checkpoint (fairseq would start "
                "from scratch). Fix the path or leave the option out.")
        return cfg.continue_once
    if cfg.finetune_from_model is not None and PathManager.isfile(cfg.finetune_from_model):
        return cfg.finetune_from_model
    return None  # fresh start (fairseq reports a missing --finetune-from-model itself)


def data_fingerprints(dictionary, data_dir) -> Dict[str, object]:
    """The ``task_state`` entries that a masked-LM task on ``data_dir`` with ``dictionary``
    (``<mask>`` added) records in every checkpoint: :data:`DICTIONARY_KEY`, and
    :data:`SENTENCEPIECE_KEY` when ``data_dir`` has a SentencePiece model."""
    model = os.path.join(data_dir, SENTENCEPIECE_MODEL)
    return {DICTIONARY_KEY: dictionary_fingerprint(dictionary),
            **({SENTENCEPIECE_KEY: file_sha256(model)} if os.path.isfile(model) else {})}


def restore_config(cfg, task, model):
    """The ``checkpoint`` config with which fairseq-train loads its checkpoint: ``cfg``, or a
    copy naming the newest intact checkpoint (:func:`checkpoint_to_load`), checked by
    :func:`check_checkpoint_fits` for RoBERTa models. Masked-LM tasks record their data's
    fingerprints (:func:`data_fingerprints`), others (GLUE) those of the checkpoint loaded.

    Raises:
        OptionError, InputNotFoundError: from the two functions named.
    """
    from fairseq.models.roberta import RobertaModel
    from fairseq.tasks.masked_lm import MaskedLMTask

    masked_lm = isinstance(task, MaskedLMTask)
    if masked_lm:
        task.state.merge_state_dict(data_fingerprints(task.source_dictionary,
                                                      utils.split_paths(task.cfg.data)[0]))
    path = checkpoint_to_load(cfg)
    if path is None:
        return cfg
    if isinstance(model, RobertaModel):
        task_state = check_checkpoint_fits(path, model, task.source_dictionary).get(
            "task_state") or {}
        if not masked_lm:
            task.state.merge_state_dict({key: task_state[key] for key in (
                DICTIONARY_KEY, SENTENCEPIECE_KEY) if key in task_state})
    last = _last_checkpoint(cfg)
    if cfg.restore_file != DEFAULT_RESTORE_FILE or path == last or not PathManager.isfile(last):
        return cfg  # fairseq loads path itself
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        # fairseq appends --checkpoint-suffix to an explicit --restore-file itself
        cfg.restore_file = path[: len(path) - len(f"{cfg.checkpoint_suffix}.pt")] + ".pt"
        cfg.finetune_from_model = None  # fairseq refuses it next to an explicit restore file
    return cfg


def check_checkpoint_fits(path: str, model: torch.nn.Module, dictionary) -> dict:
    """The checkpoint at ``path`` (:func:`load_lazily`), checked to be trained on
    ``dictionary`` and to fit ``model`` (parameter names and shapes).

    Raises:
        OptionError: another dictionary, ``--arch``, size options or ``--max-positions``.
    """
    state = load_lazily(path)
    check_dictionary(path, state, dictionary, "--data's dict.txt")
    weights = _canonical_weights(state["model"])
    expected = _canonical_weights(model.state_dict())
    positions = "sentence_encoder.embed_positions.weight"
    missing = sorted(expected.keys() - weights.keys())
    mismatched = sorted(
        f"{name}: {tuple(weights[name].shape)} in the checkpoint, {tuple(t.shape)} here"
        for name, t in expected.items() if name in weights and weights[name].shape != t.shape)
    if mismatched and not missing and all(m.startswith(positions) for m in mismatched):
        saved = saved_option(state, "model", "max_positions")
        raise OptionError(
            f"checkpoint {path} was pre-trained with --max-positions {saved} "
            f"({len(weights[positions])} position embeddings); the model being trained has "
            f"--max-positions {model.max_positions()}. Use --max-positions {saved} (hydra: "
            f"task.max_positions and model.max_positions); sentence_prediction cuts longer "
            "inputs with --shorten-method truncate.")
    if missing or mismatched:
        arch = (saved_option(state, "model", "arch") or saved_option(state, "model", "_name")
                or "unknown")
        details = "; ".join(mismatched[:3] + [f"missing {name}" for name in missing[:3]])
        raise OptionError(
            f"checkpoint {path} (--arch {arch}) does not fit the model being trained: "
            f"{details}{' ...' if len(missing) + len(mismatched) > 3 else ''}. Train with the "
            "checkpoint's --arch and size options, or start from scratch (another --save-dir, "
            "no --restore-file).")
    return state


def _last_checkpoint(cfg) -> str:
    return os.path.join(cfg.save_dir, f"checkpoint_last{cfg.checkpoint_suffix}.pt")


def _newest_intact_checkpoint(cfg, last: str) -> str:
    """The readable numbered checkpoint of ``--save-dir`` with the most updates."""
    numbered = r"checkpoint(?:_\d+_\d+|\d+)" + re.escape(f"{cfg.checkpoint_suffix}.pt")
    candidates = {}
    for path in sorted(checkpoint_utils.checkpoint_paths(cfg.save_dir, numbered)):
        try:
            candidates[path] = int(load_lazily(path)["optimizer_history"][-1]["num_updates"])
        except Exception:  # unreadable, or no update count
            continue
    if not candidates:
        raise OptionError(
            f"{last} cannot be read (cut short, e.g. by a kill while fairseq copied it) and "
            f"{cfg.save_dir} has no intact checkpoint_<epoch>_<updates>.pt or "
            f"checkpoint<epoch>.pt to resume from. Move {last} away to start from scratch, "
            "or pass --restore-file with a checkpoint to start from")
    path = max(candidates, key=candidates.get)
    warn_once(
        f"{last} cannot be read (cut short, e.g. by a kill while fairseq copied it): resuming "
        f"from {path}, the intact checkpoint with the most updates ({candidates[path]}). The "
        f"unreadable file is left as it is; the next save replaces it")
    return path


@functools.lru_cache(maxsize=None)
def warn_once(message: str) -> None:
    """Log a warning once per process (the task and fairseq's loading both check)."""
    logger.warning(message)


def trained_on(checkpoint, state: dict, file: str = "dict.txt") -> str:
    """`` It was trained on DATA/file.`` (or ``DATA (no file there)``), ``""`` if unrecorded."""
    data = recorded_data_dir(checkpoint, state)
    if not data:
        return ""
    path = os.path.join(data, file)
    return f" It was trained on {path if os.path.isfile(path) else f'{data} (no {file} there)'}."


def _canonical_weights(state_dict) -> Dict[str, torch.Tensor]:
    """RoBERTa's parameters by name without the top module, old LayerNorm name renamed,
    classification heads left out."""
    return {
        name.split(".", 1)[-1].replace(".emb_layer_norm.", ".layernorm_embedding."): tensor
        for name, tensor in state_dict.items() if not name.startswith("classification_heads.")
    }
