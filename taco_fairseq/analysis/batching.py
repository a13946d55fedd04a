"""Batches of variable-length token sequences for the frozen-encoder measures (probes,
contextual score, neighbour attention): grouped by length, right-padded."""

from typing import List, Sequence

import torch
from torch import Tensor


def length_batches(lengths: Sequence[int], batch_tokens: int) -> List[List[int]]:
    """Indices grouped into batches of similar length: sorted by (length, index), cut where a
    batch's padded size ``len(batch) × longest`` would exceed ``batch_tokens`` (one sentence
    per batch at least). Deterministic."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches, current = [], []
    for i in order:
        if current and (len(current) + 1) * lengths[i] > batch_tokens:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def pad(sequences: Sequence[Tensor], pad_index: int) -> Tensor:
    """``[batch, longest]``: the ``[length]`` sequences right-padded with ``pad_index``."""
    return torch.nn.utils.rnn.pad_sequence(list(sequences), batch_first=True,
                                           padding_value=pad_index)
