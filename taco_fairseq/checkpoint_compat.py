"""Let fairseq checkpoints load under ``torch.load(weights_only=True)``, torch >= 2.6's default.

Besides tensors and plain containers, fairseq checkpoints (ours and stock RoBERTa ones) pickle:

* ``argparse.Namespace``: the ``args`` of older checkpoints and ``cfg["model"]`` of
  architectures declared with ``add_args``, such as RoBERTa;
* numpy scalars (e.g. ``best``/``val_loss`` metrics of older checkpoints), rebuilt from
  ``numpy._core.multiarray.scalar`` (``numpy.core.multiarray.scalar`` when pickled by numpy 1.x)
  and numpy's numeric dtype classes.

Exactly these are allow-listed (:data:`SAFE_GLOBALS`); none of them can run code on load.
Importing ``taco_fairseq`` calls :func:`allow_fairseq_checkpoint_globals`.
"""

import argparse

import numpy as np
import torch

_NUMPY_SCALAR = np.dtype("float64").type(0).__reduce__()[0]  # numpy's multiarray.scalar
_NUMERIC_DTYPES = [
    type(np.dtype(name))
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "bool")
]

#: What :func:`allow_fairseq_checkpoint_globals` registers.
SAFE_GLOBALS = [
    argparse.Namespace,
    _NUMPY_SCALAR,
    (_NUMPY_SCALAR, "numpy.core.multiarray.scalar"),
    np.dtype,
    *_NUMERIC_DTYPES,
]


def allow_fairseq_checkpoint_globals() -> None:
    """Add :data:`SAFE_GLOBALS` to torch's weights-only unpickler (no-op on torch < 2.4,
    whose ``torch.load`` does not default to weights-only)."""
    add_safe_globals = getattr(torch.serialization, "add_safe_globals", None)
    if add_safe_globals is not None:
        add_safe_globals(SAFE_GLOBALS)


allow_fairseq_checkpoint_globals()
