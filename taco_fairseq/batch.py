"""``batch["taco"]``: the TC positions of one batch (int64 flat indices ``row * seq_len +
column``), written by the collater, completed by ``train_step`` and read (and moved to the
GPU) by the criterion only."""

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor


@dataclass
class _Positions:
    """Fields of both variants: ``anchor`` and ``positive`` (``[anchors]``), and
    ``update_totals``: ``[2]`` float64, the masked tokens and anchors of the whole update over
    all workers (set by ``train_step``; None in validation: the batch's own counts are used)."""

    anchor: Tensor
    positive: Tensor
    update_totals: Optional[Tensor] = field(default=None, kw_only=True)

    def to(self, device: torch.device):
        """A copy with every tensor on ``device``."""
        return dataclasses.replace(self, **{
            f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
            if torch.is_tensor(getattr(self, f.name))})


@dataclass
class TacoBatch(_Positions):
    """:class:`~taco_fairseq.sampling.ContrastivePositions` as tensors, ``skipped`` (no
    negatives: all tokens lie in one sequence) and ``available_negatives`` (the fewest
    candidates an anchor draws its negatives from; 0 without anchors)."""

    negative: Tensor
    skipped: bool
    available_negatives: int


@dataclass
class CrossWorkerTacoBatch(_Positions):
    """Positions whose negatives the criterion draws from all workers' candidates
    (:func:`taco_fairseq.distributed.complete_negatives`): the fields of
    :class:`~taco_fairseq.sampling.CrossWorkerPositions` as tensors, and ``dummy``, True for
    fairseq's padding batches, which share no candidates (``train_step``)."""

    candidates: Tensor
    anchor_row_start: Tensor
    anchor_row_length: Tensor
    negative_uniform: Tensor
    dummy: bool = field(default=False, kw_only=True)
