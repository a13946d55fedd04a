"""A pre-trained checkpoint and the data it was trained on: the one check of every loader
(:func:`taco_fairseq.hub.from_pretrained` and so the HuggingFace export and the analyses, GLUE
preparation and runner). Imported on demand, not by ``import taco_fairseq``; training checks
the dictionary alone (:func:`taco_fairseq.checkpoints.check_dictionary`).
"""

from typing import Optional

from fairseq.data import Dictionary

from .checkpoints import (
    DATA_FIX,
    SENTENCEPIECE_KEY,
    SENTENCEPIECE_MODEL,
    check_dictionary,
    file_sha256,
    trained_on,
    warn_once,
)
from .errors import OptionError


def load_task_dictionary(dict_file) -> Dictionary:
    """``dict_file`` as the masked-LM and ``sentence_prediction`` tasks hold it: with
    ``<mask>`` added (the dictionary the fingerprint of
    :data:`taco_fairseq.checkpoints.DICTIONARY_KEY` is taken of)."""
    dictionary = Dictionary.load(str(dict_file))
    dictionary.add_symbol("<mask>")
    return dictionary


def check_training_data(checkpoint, state: dict, dictionary, dict_name: str,
                        sentencepiece_model=None, sentencepiece_sha256: Optional[str] = None,
                        fix: str = DATA_FIX) -> None:
    """Check that ``dictionary`` (:func:`taco_fairseq.checkpoints.check_dictionary`) and
    ``sentencepiece_model`` are the ones ``checkpoint`` was trained with. The SentencePiece
    model is checked against the SHA-256 that ``taco_masked_lm`` checkpoints record
    (:data:`taco_fairseq.checkpoints.SENTENCEPIECE_KEY`); a checkpoint that records none is not
    checked, with a warning.

    Args:
        checkpoint: the checkpoint's path (for messages).
        state: the checkpoint (:func:`taco_fairseq.checkpoints.load_lazily`).
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
