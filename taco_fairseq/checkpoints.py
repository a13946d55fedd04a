"""Check, before training starts, the checkpoint that ``fairseq-train`` will load.

fairseq itself starts from scratch, with one log line, when an explicit ``--restore-file`` does
not exist, and loads a checkpoint trained on another vocabulary of the same size without
complaint; another architecture fails deep in ``load_state_dict``, and a ``checkpoint_last.pt``
truncated by a kill during fairseq's (non-atomic) copy stops every later run with a bare
``EOFError``. :func:`checkpoint_to_load` and :func:`check_checkpoint_fits` turn these into
errors naming the file, the option and the fix, or, for an unreadable ``checkpoint_last.pt``,
into a resume from the newest intact checkpoint of ``--save-dir``. The task calls them when it
builds the model for training; :func:`restore_config` applies them where fairseq-train loads
the checkpoint, for every task (:mod:`taco_fairseq.fairseq_patches`).
"""

import copy
import hashlib
import logging
import os
import re
from typing import Dict, Optional

import torch
from fairseq.data import Dictionary
from fairseq.file_io import PathManager
from omegaconf import open_dict

from .errors import InputNotFoundError, OptionError, hydra_relative_path_hint

#: ``task_state`` key of the dictionary fingerprint saved with every checkpoint.
DICTIONARY_KEY = "dictionary_fingerprint"
#: ``task_state`` key of the SHA-256 of the data-bin's SentencePiece model (when it has one).
SENTENCEPIECE_KEY = "sentencepiece_sha256"

#: fairseq's default ``--restore-file``: resume from ``<save-dir>/checkpoint_last.pt`` if any.
DEFAULT_RESTORE_FILE = "checkpoint_last.pt"

#: Checkpoints fairseq-train saves besides ``checkpoint_last.pt``/``_best.pt``:
#: ``checkpoint_<epoch>_<updates>.pt`` and ``checkpoint<epoch>.pt`` (before the suffix).
_NUMBERED = re.compile(r"checkpoint(_\d+_\d+|\d+)$")

logger = logging.getLogger(__name__)
_warned = set()  # messages of _warn_once


def dictionary_fingerprint(dictionary) -> Dict[str, object]:
    """``{"size": symbols, "sha256": hex digest of the symbols in id order}``; counts are left
    out, so data-bins encoded with the same SentencePiece model match."""
    digest = hashlib.sha256("\n".join(dictionary.symbols).encode("utf-8")).hexdigest()
    return {"size": len(dictionary), "sha256": digest}


def load_lazily(path) -> dict:
    """A checkpoint loaded weights-only on the CPU, its tensors memory-mapped (not read) when
    it is in torch's zip format.

    Raises:
        OptionError: the file cannot be read as a fairseq checkpoint (cut short, e.g. by a kill
            while it was written, or not a checkpoint at all).
    """
    try:
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
    except RuntimeError:  # not in the zip format that mmap needs
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # EOFError, UnpicklingError, KeyError, ... for such files
            raise OptionError(
                f"{path} cannot be read as a checkpoint ({type(e).__name__}: {e}): it is cut "
                "short (e.g. by a kill while it was written) or not a fairseq checkpoint; give "
                "an intact checkpoint_*.pt"
            ) from e
    if not isinstance(state, dict) or "model" not in state:
        raise OptionError(f"{path} is not a fairseq checkpoint (it holds no model weights); "
                          "give a checkpoint_*.pt written by fairseq-train")
    return state


def file_sha256(path) -> str:
    """Hex SHA-256 of a file's bytes (the SentencePiece model's fingerprint)."""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_task_dictionary(dict_file) -> Dictionary:
    """``dict_file`` as the masked-LM and ``sentence_prediction`` tasks hold it: with
    ``<mask>`` added (the dictionary the fingerprint of :data:`DICTIONARY_KEY` is taken of)."""
    dictionary = Dictionary.load(str(dict_file))
    dictionary.add_symbol("<mask>")
    return dictionary


#: How to get out of a dictionary or SentencePiece model mismatch (the default).
DATA_FIX = (
    "Use the data-bin the checkpoint was trained on, or encode your text with its "
    "sentencepiece.bpe.model and dict.txt."
)


def check_dictionary(
    checkpoint, state: dict, dictionary, dict_name: str, sentencepiece_model=None,
    sentencepiece_sha256: Optional[str] = None, fix: str = DATA_FIX,
) -> None:
    """Check that ``dictionary`` (and ``sentencepiece_model``) are the ones ``checkpoint`` was
    trained with: the one check of every loader (training,
    :func:`taco_fairseq.hub.from_pretrained` and so the HuggingFace export and the analyses,
    GLUE preparation and runner).

    The dictionary: the fingerprint that ``taco_masked_lm`` checkpoints record
    (:data:`DICTIONARY_KEY`, the symbols in id order), else the rows of the token-embedding
    matrix against its size. The SentencePiece model: the SHA-256 they record
    (:data:`SENTENCEPIECE_KEY`). What a checkpoint does not record (e.g. fairseq's
    ``masked_lm``, fine-tuned ``sentence_prediction`` or older taco checkpoints) is not checked,
    with a warning.

    Args:
        checkpoint: the checkpoint's path (for messages).
        state: the checkpoint, as loaded by ``torch.load`` (tensors may be memory-mapped).
        dictionary: fairseq ``Dictionary`` as the task holds it (:func:`load_task_dictionary`).
        dict_name: what to call the dictionary in messages, e.g. its path.
        sentencepiece_model: path of the SentencePiece model to be used with it, if any.
        sentencepiece_sha256: its SHA-256 when known (e.g. recorded when data was encoded
            with it); default: computed from the file.
        fix: the end of the error message.

    Raises:
        OptionError: naming the checkpoint, the dictionary (or SentencePiece model), the data
            the checkpoint was trained on when it records it, and the fix.
    """
    task_state = state.get("task_state") or {}
    saved = task_state.get(DICTIONARY_KEY)
    rows = _embedding_rows(state)
    if saved is not None:
        differs, saved_size = saved != dictionary_fingerprint(dictionary), saved["size"]
    else:
        differs, saved_size = rows is not None and rows != len(dictionary), rows
        _warn_once(
            f"{checkpoint} records no fingerprint of its dictionary: only the size of "
            f"{dict_name} ({len(dictionary)} symbols) could be checked"
        )
    if differs:
        raise OptionError(
            f"checkpoint {checkpoint} was trained with another dictionary ({saved_size} "
            f"symbols) than {dict_name} ({len(dictionary)} symbols): token ids would mean other "
            f"pieces.{_trained_on(checkpoint, state)} {fix}"
        )
    if sentencepiece_model is None:
        return
    saved_model = task_state.get(SENTENCEPIECE_KEY)
    if saved_model is None:
        _warn_once(
            f"{checkpoint} records no fingerprint of its SentencePiece model: cannot check "
            f"that {sentencepiece_model} is the one it was trained with"
        )
    elif saved_model != (sentencepiece_sha256 or file_sha256(sentencepiece_model)):
        raise OptionError(
            f"checkpoint {checkpoint} was trained with another SentencePiece model than "
            f"{sentencepiece_model}: text would be cut into other pieces."
            f"{_trained_on(checkpoint, state, 'sentencepiece.bpe.model')} {fix}"
        )


def recorded_data_dir(checkpoint, state: dict) -> Optional[str]:
    """The data directory a checkpoint was trained on (the first of ``--data``/``task.data``),
    or None when it records none.

    A relative path is taken relative to the checkpoint's own directory or the nearest of its
    parents where it exists (a run started in the repository root records ``data-bin/x`` for
    ``checkpoints/y/checkpoint_last.pt``), else relative to the current directory (returned as
    given, whether it exists or not).
    """
    args = state.get("args")
    if args is not None:
        data = getattr(args, "data", None)
    else:
        task = (state.get("cfg") or {}).get("task")
        data = task.get("data") if isinstance(task, dict) else getattr(task, "data", None)
    if not data:
        return None
    data = str(data).split(os.pathsep)[0]
    if os.path.isabs(data):
        return data
    directory = os.path.dirname(os.path.abspath(checkpoint))
    while True:
        if os.path.isdir(os.path.join(directory, data)):
            return os.path.join(directory, data)
        parent = os.path.dirname(directory)
        if parent == directory:
            return data
        directory = parent


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
    ``checkpoint_last.pt``: a restarted run then goes back to the restore file. When
    ``checkpoint_last.pt`` cannot be read (e.g. truncated), returns the intact
    ``checkpoint_<epoch>_<updates>.pt`` or ``checkpoint<epoch>.pt`` of ``--save-dir`` with the
    most updates, with a warning (the unreadable file is left in place; fairseq replaces it at
    the next save).

    Raises:
        InputNotFoundError: when ``--restore-file`` (not the default) or ``--continue-once``
            names a file that does not exist; fairseq would silently start from scratch.
        OptionError: when ``checkpoint_last.pt`` cannot be read and no intact numbered
            checkpoint is there to resume from.
    """
    last = _last_checkpoint(cfg)
    if cfg.restore_file != DEFAULT_RESTORE_FILE:
        path = cfg.restore_file.replace(".pt", cfg.checkpoint_suffix + ".pt")
        if not PathManager.isfile(path):
            raise InputNotFoundError(
                f"--restore-file {path}: no such checkpoint (fairseq would start from scratch)"
                f"{hydra_relative_path_hint(path)}. Fix the path, or leave --restore-file out to "
                f"resume from {last} or start afresh."
            )
        if PathManager.isfile(last) and os.path.abspath(path) != os.path.abspath(last):
            logger.warning(
                f"loading --restore-file {path}, not {last}: this run restarts from {path}. "
                f"To resume an interrupted run, leave --restore-file out (use --continue-once "
                f"{path} to start from it only when {last} does not exist)"
            )
        return path
    if PathManager.isfile(last):
        return last if _readable(last) else _newest_intact_checkpoint(cfg, last)
    if cfg.continue_once is not None:
        if not PathManager.isfile(cfg.continue_once):
            raise InputNotFoundError(
                f"--continue-once {cfg.continue_once}: no such checkpoint (fairseq would start "
                "from scratch). Fix the path or leave the option out."
            )
        return cfg.continue_once
    if cfg.finetune_from_model is not None and PathManager.isfile(cfg.finetune_from_model):
        return cfg.finetune_from_model
    return None  # fresh start (fairseq reports a missing --finetune-from-model itself)


def restore_config(cfg, task, model):
    """The checkpoint config with which fairseq-train should load its checkpoint.

    Checks the checkpoint :func:`checkpoint_to_load` names against ``model`` and the task's
    dictionary (:func:`check_checkpoint_fits`; RoBERTa models only, and not for
    ``taco_masked_lm``, which checks when it builds the model), so that e.g. a GLUE
    fine-tuning (``sentence_prediction``) with more ``--max-positions`` than the pre-training
    checkpoint stops with a message instead of a ``size mismatch`` traceback; the
    checkpoint's dictionary and SentencePiece fingerprints then go into the task's state, so
    that the checkpoints of the run record them too.

    Args:
        cfg: fairseq's ``checkpoint`` config.
        task: the fairseq task (its ``source_dictionary``).
        model: the model being trained (unwrapped).

    Returns:
        ``cfg``, or a copy whose ``restore_file`` is the intact checkpoint to resume from when
        ``checkpoint_last.pt`` cannot be read.

    Raises:
        OptionError, InputNotFoundError: as :func:`checkpoint_to_load` and
            :func:`check_checkpoint_fits`.
    """
    from fairseq.models.roberta import RobertaModel

    from .task import TacoMaskedLMTask

    path = checkpoint_to_load(cfg)
    if path is None:
        return cfg
    if isinstance(model, RobertaModel) and not isinstance(task, TacoMaskedLMTask):
        check_checkpoint_fits(path, model, task.source_dictionary)
        # passed on to the checkpoints of this run (e.g. a GLUE fine-tuning), for its loaders
        task_state = load_lazily(path).get("task_state") or {}
        task.state.merge_state_dict(
            {key: task_state[key] for key in (DICTIONARY_KEY, SENTENCEPIECE_KEY)
             if key in task_state}
        )
    last = _last_checkpoint(cfg)
    fell_back = (cfg.restore_file == DEFAULT_RESTORE_FILE and PathManager.isfile(last)
                 and os.path.abspath(path) != os.path.abspath(last))
    if not fell_back:
        return cfg
    cfg = copy.deepcopy(cfg)
    with open_dict(cfg):
        # fairseq appends --checkpoint-suffix to an explicit --restore-file itself
        cfg.restore_file = path[: len(path) - len(f"{cfg.checkpoint_suffix}.pt")] + ".pt"
        cfg.finetune_from_model = None  # fairseq refuses it next to an explicit restore file
    return cfg


def check_checkpoint_fits(path: str, model: torch.nn.Module, dictionary) -> None:
    """Check that the checkpoint at ``path`` was trained on ``dictionary`` and fits ``model``.

    Reads the checkpoint memory-mapped (only the tensor shapes are looked at). Parameter names
    are compared as fairseq's RoBERTa loads them (the ``decoder``/``encoder`` and
    ``emb_layer_norm``/``layernorm_embedding`` renames of old checkpoints).

    Raises:
        OptionError: when the checkpoint's dictionary fingerprint (saved by ``taco_masked_lm``)
            or its embedding table's size differs from ``dictionary``, or when parameters are
            missing or have other shapes (another ``--arch`` or size options); the message names
            the checkpoint, the data's ``dict.txt`` and the fix.
    """
    state = load_lazily(path)
    check_dictionary(path, state, dictionary, "--data's dict.txt")
    weights = _canonical_weights(state["model"])
    expected = _canonical_weights(model.state_dict())
    positions = "sentence_encoder.embed_positions.weight"
    if positions in weights and positions in expected and (
        len(weights[positions]) != len(expected[positions])
    ):
        saved = _saved_model_option(state, "max_positions")
        raise OptionError(
            f"checkpoint {path} was pre-trained with --max-positions {saved} "
            f"({len(weights[positions])} position embeddings); the model being trained has "
            f"--max-positions {model.max_positions()}. Use --max-positions {saved} (hydra: "
            f"task.max_positions and model.max_positions); sentence_prediction cuts longer "
            "inputs with --shorten-method truncate."
        )
    missing = sorted(expected.keys() - weights.keys())
    mismatched = sorted(
        f"{name}: {tuple(weights[name].shape)} in the checkpoint, {tuple(t.shape)} here"
        for name, t in expected.items()
        if name in weights and weights[name].shape != t.shape
    )
    if missing or mismatched:
        arch = _saved_arch(state)
        details = "; ".join(mismatched[:3] + [f"missing {name}" for name in missing[:3]])
        raise OptionError(
            f"checkpoint {path} (--arch {arch}) does not fit the model being trained: "
            f"{details}{' ...' if len(missing) + len(mismatched) > 3 else ''}. Train with the "
            "checkpoint's --arch and size options, or start from scratch (another --save-dir, "
            "no --restore-file)."
        )


def _last_checkpoint(cfg) -> str:
    return os.path.join(cfg.save_dir, f"checkpoint_last{cfg.checkpoint_suffix}.pt")


def _readable(path: str) -> bool:
    try:
        load_lazily(path)
    except Exception:  # torch raises EOFError, RuntimeError, UnpicklingError, ... for such files
        return False
    return True


def _newest_intact_checkpoint(cfg, last: str) -> str:
    """The readable numbered checkpoint of ``--save-dir`` with the most updates (see
    :func:`checkpoint_to_load`)."""
    suffix = f"{cfg.checkpoint_suffix}.pt"
    candidates = {}
    for name in sorted(PathManager.ls(cfg.save_dir)):
        path = os.path.join(cfg.save_dir, name)
        if name.endswith(suffix) and _NUMBERED.fullmatch(name[: len(name) - len(suffix)]):
            try:
                state = load_lazily(path)
            except Exception:
                continue
            candidates[path] = int(state["optimizer_history"][-1]["num_updates"])
    if not candidates:
        raise OptionError(
            f"{last} cannot be read (cut short, e.g. by a kill while fairseq copied it) and "
            f"{cfg.save_dir} has no intact checkpoint_<epoch>_<updates>.pt or "
            f"checkpoint<epoch>.pt to resume from. Move {last} away to start from scratch, "
            "or pass --restore-file with a checkpoint to start from"
        )
    path = max(candidates, key=candidates.get)
    message = (
        f"{last} cannot be read (cut short, e.g. by a kill while fairseq copied it): resuming "
        f"from {path}, the intact checkpoint with the most updates ({candidates[path]}). The "
        f"unreadable file is left as it is; the next save replaces it"
    )
    _warn_once(message)
    return path


def _warn_once(message: str) -> None:
    """Log a warning once per process (the task and fairseq's loading both check)."""
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


def _trained_on(checkpoint, state: dict, file: str = "dict.txt") -> str:
    data = recorded_data_dir(checkpoint, state)
    return f" It was trained on {os.path.join(data, file)}." if data else ""


def _embedding_rows(state: dict) -> Optional[int]:
    weights = _canonical_weights(state.get("model") or {})
    embed = weights.get("sentence_encoder.embed_tokens.weight")
    return None if embed is None else len(embed)


def _canonical_weights(state_dict) -> Dict[str, torch.Tensor]:
    """The RoBERTa encoder's parameters by :func:`_canonical` name; classification heads are
    left out (fairseq adds or re-initializes those of a fine-tuning itself)."""
    return {
        _canonical(name): tensor for name, tensor in state_dict.items()
        if not name.startswith("classification_heads.")
    }


def _canonical(name: str) -> str:
    """A parameter name without its top module (``encoder.``/``decoder.``)."""
    return name.split(".", 1)[-1].replace(".emb_layer_norm.", ".layernorm_embedding.")


def _saved_model_option(state: dict, name: str):
    """An option of the checkpoint's model config (``cfg.model`` or old ``args``), or None."""
    model_cfg = (state.get("cfg") or {}).get("model") or state.get("args")
    if isinstance(model_cfg, dict):
        return model_cfg.get(name)
    return getattr(model_cfg, name, None)


def _saved_arch(state: dict) -> str:
    return _saved_model_option(state, "arch") or _saved_model_option(state, "_name") or "unknown"
