"""Check, before training starts, the checkpoint that ``fairseq-train`` will load.

fairseq itself starts from scratch, with one log line, when an explicit ``--restore-file`` does
not exist, and loads a checkpoint trained on another vocabulary of the same size without
complaint; another architecture fails deep in ``load_state_dict``. :func:`checkpoint_to_load`
and :func:`check_checkpoint_fits` turn these into errors naming the file, the option and the
fix. The task calls them when it builds the model for training.
"""

import hashlib
import logging
import os
from typing import Dict, Optional

import torch
from fairseq.file_io import PathManager

#: ``task_state`` key of the dictionary fingerprint saved with every checkpoint.
DICTIONARY_KEY = "dictionary_fingerprint"

#: fairseq's default ``--restore-file``: resume from ``<save-dir>/checkpoint_last.pt`` if any.
DEFAULT_RESTORE_FILE = "checkpoint_last.pt"

logger = logging.getLogger(__name__)


def dictionary_fingerprint(dictionary) -> Dict[str, object]:
    """``{"size": symbols, "sha256": hex digest of the symbols in id order}``; counts are left
    out, so data-bins encoded with the same SentencePiece model match."""
    digest = hashlib.sha256("\n".join(dictionary.symbols).encode("utf-8")).hexdigest()
    return {"size": len(dictionary), "sha256": digest}


def checkpoint_to_load(cfg) -> Optional[str]:
    """The checkpoint ``fairseq-train`` will load (``fairseq.checkpoint_utils.load_checkpoint``).

    Args:
        cfg: a config with fairseq's ``restore_file``, ``save_dir``, ``continue_once``,
            ``finetune_from_model`` and ``checkpoint_suffix`` (the task's interpolations of the
            ``checkpoint`` config).

    Returns:
        the path, or None when training starts from scratch (no ``checkpoint_last.pt`` in
        ``--save-dir`` and no other checkpoint asked for).

    Logs a warning when an explicit ``--restore-file`` is loaded although ``--save-dir`` holds a
    ``checkpoint_last.pt``: a restarted run then goes back to the restore file.

    Raises:
        FileNotFoundError: when ``--restore-file`` (not the default) or ``--continue-once``
            names a file that does not exist; fairseq would silently start from scratch.
    """
    last = os.path.join(cfg.save_dir, f"checkpoint_last{cfg.checkpoint_suffix}.pt")
    if cfg.restore_file != DEFAULT_RESTORE_FILE:
        path = cfg.restore_file.replace(".pt", cfg.checkpoint_suffix + ".pt")
        if not PathManager.isfile(path):
            raise FileNotFoundError(
                f"--restore-file {path}: no such checkpoint (fairseq would start from scratch). "
                f"Fix the path, or leave --restore-file out to resume from {last} or start "
                "afresh."
            )
        if PathManager.isfile(last) and os.path.abspath(path) != os.path.abspath(last):
            logger.warning(
                f"loading --restore-file {path}, not {last}: this run restarts from {path}. "
                f"To resume an interrupted run, leave --restore-file out (use --continue-once "
                f"{path} to start from it only when {last} does not exist)"
            )
        return path
    if PathManager.isfile(last):
        return last
    if cfg.continue_once is not None:
        if not PathManager.isfile(cfg.continue_once):
            raise FileNotFoundError(
                f"--continue-once {cfg.continue_once}: no such checkpoint (fairseq would start "
                "from scratch). Fix the path or leave the option out."
            )
        return cfg.continue_once
    if cfg.finetune_from_model is not None and PathManager.isfile(cfg.finetune_from_model):
        return cfg.finetune_from_model
    return None  # fresh start (fairseq reports a missing --finetune-from-model itself)


def check_checkpoint_fits(path: str, model: torch.nn.Module, dictionary) -> None:
    """Check that the checkpoint at ``path`` was trained on ``dictionary`` and fits ``model``.

    Reads the checkpoint memory-mapped (only the tensor shapes are looked at). Parameter names
    are compared as fairseq's RoBERTa loads them (the ``decoder``/``encoder`` and
    ``emb_layer_norm``/``layernorm_embedding`` renames of old checkpoints).

    Raises:
        ValueError: when the checkpoint's dictionary fingerprint (saved by ``taco_masked_lm``)
            or its embedding table's size differs from ``dictionary``, or when parameters are
            missing or have other shapes (another ``--arch`` or size options); the message names
            the checkpoint, the data's ``dict.txt`` and the fix.
    """
    state = _load_lazily(path)
    saved = state.get("task_state", {}).get(DICTIONARY_KEY)
    ours = dictionary_fingerprint(dictionary)
    if saved is not None and saved != ours:
        raise ValueError(_vocabulary_message(path, saved["size"], ours["size"]))
    weights = {_canonical(name): tensor for name, tensor in state["model"].items()}
    expected = {_canonical(name): t for name, t in model.state_dict().items()}
    embed = "sentence_encoder.embed_tokens.weight"
    if embed in weights and embed in expected and len(weights[embed]) != len(expected[embed]):
        raise ValueError(_vocabulary_message(path, len(weights[embed]), len(expected[embed])))
    missing = sorted(expected.keys() - weights.keys())
    mismatched = sorted(
        f"{name}: {tuple(weights[name].shape)} in the checkpoint, {tuple(t.shape)} here"
        for name, t in expected.items()
        if name in weights and weights[name].shape != t.shape
    )
    if missing or mismatched:
        arch = _saved_arch(state)
        details = "; ".join(mismatched[:3] + [f"missing {name}" for name in missing[:3]])
        raise ValueError(
            f"checkpoint {path} (--arch {arch}) does not fit the model being trained: "
            f"{details}{' ...' if len(missing) + len(mismatched) > 3 else ''}. Train with the "
            "checkpoint's --arch and size options, or start from scratch (another --save-dir, "
            "no --restore-file)."
        )


def _vocabulary_message(path: str, saved_size: int, size: int) -> str:
    return (
        f"checkpoint {path} was trained with another dictionary ({saved_size} symbols) than "
        f"--data's dict.txt ({size} symbols): token ids would mean other pieces. Use the "
        "data-bin the checkpoint was trained on, or encode your text with its "
        "sentencepiece.bpe.model and dict.txt."
    )


def _load_lazily(path: str) -> dict:
    try:
        return torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except RuntimeError:  # not in the zip format that mmap needs
        return torch.load(path, map_location="cpu", weights_only=True)


def _canonical(name: str) -> str:
    """A parameter name without its top module (``encoder.``/``decoder.``)."""
    return name.split(".", 1)[-1].replace(".emb_layer_norm.", ".layernorm_embedding.")


def _saved_arch(state: dict) -> str:
    model_cfg = (state.get("cfg") or {}).get("model") or state.get("args")
    if isinstance(model_cfg, dict):
        return model_cfg.get("arch") or model_cfg.get("_name") or "unknown"
    return getattr(model_cfg, "arch", None) or "unknown"
