"""Let ``transformers`` import where an installed ``torchaudio`` cannot be loaded.

``ve-fairseq`` depends on ``torchaudio``, and pip may install a build that does not match the
installed torch (e.g. PyPI's torchaudio 2.11.1, built against CUDA torch, next to the CPU
torch 2.13.0: ``OSError: ... _torchaudio.so``). ``transformers`` imports torchaudio whenever it
is installed, so every ``import transformers.models...`` then fails, although no text model
needs it. :func:`hide_unloadable_torchaudio` marks such a torchaudio as absent
(``sys.modules["torchaudio"] = None``, Python's documented way to block an import), which
``transformers`` reads as "not installed". A torchaudio that loads is left alone.
"""

import importlib
import logging
import sys

logger = logging.getLogger(__name__)


def hide_unloadable_torchaudio() -> bool:
    """Mark torchaudio as not installed if importing it fails with ``OSError``.

    Call before the first ``transformers`` import. Idempotent.

    Returns:
        True if torchaudio was hidden (now or by an earlier call).
    """
    if "torchaudio" in sys.modules:
        return sys.modules["torchaudio"] is None
    try:
        importlib.import_module("torchaudio")
    except ImportError:
        return False
    except OSError as e:
        for name in [n for n in sys.modules if n == "torchaudio" or n.startswith("torchaudio.")]:
            del sys.modules[name]
        sys.modules["torchaudio"] = None
        logger.warning(
            "torchaudio is installed but cannot be loaded (%s); hiding it so that transformers "
            "imports (text models do not use it). `pip uninstall torchaudio` removes this "
            "warning; fairseq needs torchaudio only for speech tasks.",
            e,
        )
        return True
    return False
