"""What a fairseq checkpoint records besides its weights, read without loading them, and the
checks of data against it: weights-only loading (:data:`SAFE_GLOBALS`), the one reader
(:func:`load_lazily`), its options (:func:`saved_option`, :func:`recorded_data_dir`), and the
fingerprints of the data it was trained on (:func:`data_fingerprints`, saved with the task's
state by masked-LM tasks) with the one check of every loader (:func:`check_training_data`).
Which checkpoint ``fairseq-train`` resumes from, and its checks: :mod:`taco_fairseq.resume`."""

import argparse
import functools
import hashlib
import json
import logging
import os
from typing import Dict, Optional

import numpy as np
import torch
from fairseq import utils
from fairseq.data import Dictionary

from .errors import OptionError

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

#: The SentencePiece model file of a data-bin (``scripts/prepare_pretraining_data.py``).
SENTENCEPIECE_MODEL = "sentencepiece.bpe.model"
#: What a data-bin records of its preparation (taco-prepare-data, taco-prepare-glue): json.
INFO_FILE = "prep_info.json"
#: ``task_state`` key of the dictionary fingerprint (:func:`dictionary_fingerprint`).
DICTIONARY_KEY = "dictionary_fingerprint"
#: ``task_state`` key of the SHA-256 of the data-bin's SentencePiece model (when it has one).
SENTENCEPIECE_KEY = "sentencepiece_sha256"
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
        weights = canonical_weights(state.get("model") or {})
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


def load_task_dictionary(dict_file) -> Dictionary:
    """``dict_file`` as the masked-LM and ``sentence_prediction`` tasks hold it: with
    ``<mask>`` added (the dictionary the fingerprint of
    :data:`DICTIONARY_KEY` is taken of)."""
    dictionary = Dictionary.load(str(dict_file))
    dictionary.add_symbol("<mask>")
    return dictionary


def check_training_data(checkpoint, state: dict, dictionary, dict_name: str,
                        sentencepiece_model=None, sentencepiece_sha256: Optional[str] = None,
                        fix: str = DATA_FIX) -> None:
    """Check that ``dictionary`` (:func:`check_dictionary`) and
    ``sentencepiece_model`` are the ones ``checkpoint`` was trained with. The SentencePiece
    model is checked against the SHA-256 that ``taco_masked_lm`` checkpoints record
    (:data:`SENTENCEPIECE_KEY`); a checkpoint that records none is not
    checked, with a warning.

    Args:
        checkpoint: the checkpoint's path (for messages).
        state: the checkpoint (:func:`load_lazily`).
        dictionary: fairseq ``Dictionary`` as the task holds it (:func:`load_task_dictionary`).
        dict_name: what to call the dictionary in messages, e.g. its path.
        sentencepiece_model: path of the SentencePiece model to be used with it, if any.
        sentencepiece_sha256: its SHA-256 when known; default: computed from the file.
        fix: the end of the error message.

    Raises:
        OptionError: naming the checkpoint, the dictionary (or SentencePiece model), the data
            the checkpoint was trained on when it records it, and the fix.
    """
    check_dictionary(checkpoint, state, dictionary, dict_name, fix)
    if sentencepiece_model is None:
        return
    saved_model = (state.get("task_state") or {}).get(SENTENCEPIECE_KEY)
    if saved_model is None:
        warn_once(f"{checkpoint} records no fingerprint of its SentencePiece model: cannot "
                  f"check that {sentencepiece_model} is the one it was trained with")
    elif saved_model != (sentencepiece_sha256 or file_sha256(sentencepiece_model)):
        raise OptionError(
            f"checkpoint {checkpoint} was trained with another SentencePiece model than "
            f"{sentencepiece_model}: text would be cut into other pieces."
            f"{trained_on(checkpoint, state, SENTENCEPIECE_MODEL)} {fix}")


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


def data_fingerprints(dictionary, data_dir) -> Dict[str, object]:
    """The ``task_state`` entries that a masked-LM task on ``data_dir`` with ``dictionary``
    (``<mask>`` added) saves with its state in every checkpoint
    (:func:`masked_lm_state_dict`): :data:`DICTIONARY_KEY`, and :data:`SENTENCEPIECE_KEY` when
    ``data_dir`` has a SentencePiece model. The layout is unchanged since the first checkpoints
    that recorded them, which load and are checked alike."""
    model = os.path.join(data_dir, SENTENCEPIECE_MODEL)
    return {DICTIONARY_KEY: dictionary_fingerprint(dictionary),
            **({SENTENCEPIECE_KEY: file_sha256(model)} if os.path.isfile(model) else {})}


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


def canonical_weights(state_dict) -> Dict[str, torch.Tensor]:
    """RoBERTa's parameters by name without the top module, old LayerNorm name renamed,
    classification heads left out."""
    return {
        name.split(".", 1)[-1].replace(".emb_layer_norm.", ".layernorm_embedding."): tensor
        for name, tensor in state_dict.items() if not name.startswith("classification_heads.")
    }


def masked_lm_state_dict(task) -> dict:
    """What a masked-LM task (fairseq's ``masked_lm``, and so ``taco_masked_lm``) saves as the
    ``task_state`` of every checkpoint: fairseq's task state with the fingerprints of its data
    (:func:`data_fingerprints` of its dictionary and first ``--data`` directory) in place of
    any it was given. fairseq's ``MaskedLMTask.state_dict`` returns this once ``taco_fairseq``
    is imported (:mod:`taco_fairseq.fairseq_patches`)."""
    return {**(task.state.state_dict if task.state is not None else {}),
            **data_fingerprints(task.source_dictionary, utils.split_paths(task.cfg.data)[0])}


def recorded_pretraining_data(data_dir) -> Optional[str]:
    """The pre-training data-bin that ``data_dir``'s :data:`INFO_FILE` records
    (``pretraining_data``, written by ``taco-prepare-glue`` for a GLUE task directory), or None
    when it has no such file or entry.

    Raises:
        json.JSONDecodeError: the file is not json.
    """
    path = os.path.join(data_dir, INFO_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("pretraining_data")
