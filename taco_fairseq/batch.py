"""``batch["taco"]``: the TC positions of one batch, as a typed record.

:class:`TacoBatch` (negatives drawn within the batch) or :class:`CrossWorkerTacoBatch`
(``--tc-cross-worker-negatives``: negatives drawn by the criterion from all workers) is
written by the dataset's collater (:class:`taco_fairseq.data.ContrastiveSamplingDataset`) and
completed by ``TacoMaskedLMTask.train_step`` (``update_totals``, ``dummy``); the criterion only
reads it. Positions are int64 flat indices ``row * seq_len + column`` into the padded batch (see
:mod:`taco_fairseq.sampling`). fairseq does not move these records to the GPU with the rest of
the batch; the criterion calls :meth:`to`.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor


@dataclass
class _Positions:
    """Fields of both variants.

    Attributes:
        anchor: ``[anchors]``.
        positive: ``[anchors]``, in the anchor's row.
        update_totals: ``[2]`` float64, the masked tokens and anchors of the whole update over
            all workers (set by ``train_step``; None in validation, where the batch's own
            counts are used).
    """

    anchor: Tensor
    positive: Tensor
    update_totals: Optional[Tensor] = field(default=None, kw_only=True)

    def to(self, device: torch.device):
        """A copy with every tensor on ``device``."""
        return dataclasses.replace(self, **{
            f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
            if torch.is_tensor(getattr(self, f.name))
        })


@dataclass
class TacoBatch(_Positions):
    """Positions with the negatives drawn within the batch.

    Attributes:
        negative: ``[anchors, K]``, tokens of the other rows.
        skipped: True when the batch has no negatives (its tokens lie in one sequence), so its
            TC loss is skipped.
        available_negatives: the fewest candidates any anchor draws its negatives from (0
            without anchors).
    """

    negative: Tensor
    skipped: bool
    available_negatives: int


@dataclass
class CrossWorkerTacoBatch(_Positions):
    """Positions whose negatives the criterion draws from all workers' candidates
    (:func:`taco_fairseq.distributed.complete_negatives`); the fields of
    :class:`~taco_fairseq.sampling.CrossWorkerPositions` as tensors.

    Attributes:
        dummy: True for fairseq's padding batches, which share no candidates (``train_step``).
    """

    candidates: Tensor
    anchor_row_start: Tensor
    anchor_row_length: Tensor
    negative_uniform: Tensor
    dummy: bool = field(default=False, kw_only=True)
