"""``batch["taco"]``: the TC positions of one batch (int64 flat indices ``row * seq_len +
column``), made by the collater; ``train_step`` hands the criterion a completed copy (a training
step, with the update's totals over all workers: :mod:`taco_fairseq.totals`); read (and moved
to the GPU) by the criterion only. Frozen: each step makes a new record."""

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor


@dataclass(frozen=True)
class _Positions:
    """Fields of both variants: ``anchor`` and ``positive`` (``[anchors]``); ``training``, True
    in a training step (``train_step``; False as the collater makes it, and in validation), and
    ``all_worker_totals``, then ``[2]`` float64: the masked tokens and anchors of the whole
    update summed over all data-parallel workers (:class:`taco_fairseq.totals.AllWorkerTotals`;
    None otherwise: the batch's own counts are used).

    Raises:
        ValueError: ``all_worker_totals`` given without ``training``, or the other way round.
    """

    anchor: Tensor
    positive: Tensor
    training: bool = field(default=False, kw_only=True)
    all_worker_totals: Optional[Tensor] = field(default=None, kw_only=True)

    def __post_init__(self):
        if self.training != (self.all_worker_totals is not None):
            raise ValueError("a training step's positions carry the update's all-worker totals, "
                             "other positions none")

    def to(self, device: torch.device):
        """A copy with every tensor on ``device``."""
        return dataclasses.replace(self, **{
            f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
            if torch.is_tensor(getattr(self, f.name))})


@dataclass(frozen=True)
class TacoBatch(_Positions):
    """:class:`~taco_fairseq.sampling.ContrastivePositions` as tensors (``negative``:
    ``[anchors, K]``), and ``skipped``: no negatives (all tokens lie in one sequence)."""

    negative: Tensor
    skipped: bool


@dataclass(frozen=True)
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
