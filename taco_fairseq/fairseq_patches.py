"""Narrow fixes of fairseq (ve-fairseq 0.12.3), applied when ``taco_fairseq`` is imported:
``TokenBlockDataset`` and ``LanguagePairDataset`` see a numpy with ``np.compat.long`` (int64,
removed in numpy 2; numpy is unchanged), and ``checkpoint_utils.load_checkpoint`` goes first
through :func:`taco_fairseq.checkpoints.restore_config`, for every task."""


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


def apply() -> None:
    """Apply both fixes (idempotent)."""
    from .checkpoints import restore_config

    if not hasattr(np, "compat"):
        for module in (token_block_dataset, language_pair_dataset):
            if module.np is np:
                module.np = _NumpyWithCompatLong("numpy")
    original = checkpoint_utils.load_checkpoint
    if getattr(original, "checked_by_taco_fairseq", False):
        return

    @functools.wraps(original)
    def load_checkpoint(cfg, trainer, **passthrough_args):
        cfg = restore_config(cfg, trainer.task, trainer.get_model())
        return original(cfg, trainer, **passthrough_args)

    load_checkpoint.checked_by_taco_fairseq = True
    checkpoint_utils.load_checkpoint = load_checkpoint
