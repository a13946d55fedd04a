"""Narrow fixes of fairseq (ve-fairseq 0.12.3) applied when ``taco_fairseq`` is imported.

* ``--sample-break-mode eos``: fairseq's ``TokenBlockDataset`` (and ``LanguagePairDataset``)
  use ``np.compat.long``, which numpy 2 removed; every ``eos`` run stopped with
  ``AttributeError: module 'numpy' has no attribute 'compat'`` (fairseq's own ``masked_lm`` as
  well). The two modules get a view of numpy that adds exactly that alias (numpy 1's
  ``np.compat.long`` was Python's ``int``, i.e. int64); numpy itself is left unchanged.
* ``checkpoint_utils.load_checkpoint``, where ``fairseq-train`` loads the checkpoint it
  resumes or starts from, first goes through
  :func:`taco_fairseq.checkpoints.restore_config`: for every task, an unreadable
  ``checkpoint_last.pt`` resumes from the newest intact checkpoint instead of stopping with
  ``EOFError``, a missing ``--restore-file`` is an error instead of a silent start from scratch,
  and a RoBERTa checkpoint that does not fit the model (e.g. a GLUE fine-tuning with more
  ``--max-positions`` than pre-training) is refused with a message instead of a ``size
  mismatch`` traceback. Everything else is fairseq's.
"""

import functools
import types

import numpy as np
from fairseq import checkpoint_utils
from fairseq.data import language_pair_dataset, token_block_dataset


class _NumpyWithCompatLong(types.ModuleType):
    """numpy, plus ``compat.long`` when the installed numpy has no ``compat``."""

    compat = types.SimpleNamespace(long=np.int64)

    def __getattr__(self, name):
        return getattr(np, name)


def patch_numpy_compat() -> None:
    """Give fairseq's two users of ``np.compat.long`` a numpy that has it (no-op on numpy 1)."""
    if hasattr(np, "compat"):
        return
    for module in (token_block_dataset, language_pair_dataset):
        if module.np is np:
            module.np = _NumpyWithCompatLong("numpy")


def patch_load_checkpoint() -> None:
    """Check (and, for an unreadable ``checkpoint_last.pt``, redirect) what fairseq-train
    loads; see the module doc."""
    from .checkpoints import restore_config

    original = checkpoint_utils.load_checkpoint
    if getattr(original, "checked_by_taco_fairseq", False):
        return

    @functools.wraps(original)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        cfg = restore_config(cfg, trainer.task, trainer.get_model())
        return original(cfg, trainer, **passthrough_args)

    load_checkpoint.checked_by_taco_fairseq = True
    checkpoint_utils.load_checkpoint = load_checkpoint


def apply() -> None:
    """Apply every fix of this module (idempotent)."""
    patch_numpy_compat()
    patch_load_checkpoint()
