"""An update's totals, M (its masked tokens) and A (its TC anchors), over all its batches and
all data-parallel workers: the one module that counts, sums and applies them.

The TC loss of an update is a mean over its A anchors, while fairseq divides the update's summed
loss by its summed sample size, the M masked tokens; so each batch's summed TC loss is scaled by
``max(M, 1) / max(A, 1)`` (:func:`tc_scale`), and M and A must be known before the backward
pass of the update's first batch. Their path, one way:

1. :class:`UpdateTotalsIterator` (through :class:`UpdateTotalsEpochIterator`, which
   ``task.get_batch_iterator`` returns) reads each update's batches ahead and attaches this
   worker's counts to each, ``batch["update_totals"]``: an :class:`UpdateTotals` record;
2. :class:`AllWorkerTotals` (one per task, called by ``task.train_step``) sums them over the
   workers, one all-reduce per update, into the ``all_worker_totals`` of the training step's
   ``batch["taco"]`` (:class:`~taco_fairseq.batch.TacoBatch`);
3. the criterion scales by :func:`tc_scale` of those, or of the batch's own counts outside
   training.
"""

import itertools
from dataclasses import dataclass
from typing import List, Optional

import torch
from fairseq.data import iterators
from fairseq.distributed import utils as distributed_utils
from torch import Tensor

#: The batch key of a batch's :class:`UpdateTotals`.
UPDATE_TOTALS_KEY = "update_totals"


@dataclass(frozen=True)
class UpdateTotals:
    """This worker's part of one update, which :class:`UpdateTotalsIterator` attaches to each of
    the update's batches as ``batch["update_totals"]`` (:class:`AllWorkerTotals` sums it over
    the workers, once per update).

    Attributes:
        masked_tokens, anchors: the masked tokens (``target`` not padding) and TC anchors of the
            update's batches on this worker (fairseq's padding batches count 0).
        index: the batch's place in the update; 0 opens it.
        batches: the update's batches on this worker, padding batches included
            (``--update-freq``; fewer in an epoch's last update).
    """

    masked_tokens: int
    anchors: int
    index: int
    batches: int


class UpdateTotalsIterator:
    """Iterate over ``batches`` (a fairseq ``CountingIterator`` of ``taco_masked_lm`` batches),
    reading the ``update_freq`` consecutive batches of each update ahead (the groups of
    fairseq's ``GroupedIterator``), and yield each as a new dict with ``update_totals``: its
    :class:`UpdateTotals` (``pad_idx`` marks the targets of unmasked tokens). fairseq's empty
    placeholder batches (an exhausted shard) are yielded as they are."""

    def __init__(self, batches: iterators.CountingIterator, update_freq: int, pad_idx: int):
        self._batches = batches
        self._update_freq = update_freq
        self._pad_idx = pad_idx
        self._ready: List[dict] = []

    def __iter__(self):
        return self

    def __next__(self):
        if not self._ready:
            group = list(itertools.islice(self._batches, self._update_freq))
            if not group:
                raise StopIteration
            real = [batch for batch in group if len(batch) > 0]
            masked = sum(int(batch["target"].ne(self._pad_idx).sum()) for batch in real)
            anchors = sum(len(batch["taco"].anchor) for batch in real)
            self._ready = [
                {**batch, UPDATE_TOTALS_KEY: UpdateTotals(masked, anchors, index, len(group))}
                if len(batch) > 0 else batch for index, batch in enumerate(group)]
        return self._ready.pop(0)

    def take(self, n: int):
        """Truncate to ``n`` more batches (``CountingIterator.take`` passes a relative count)."""
        self._batches.take(self._batches.n - len(self._ready) + n)


class UpdateTotalsEpochIterator:
    """Wraps a fairseq ``EpochBatchIterator`` so that its batches carry their
    :class:`UpdateTotals` (:class:`UpdateTotalsIterator`; epoch e uses entry e-1 of the
    ``--update-freq`` list, the last beyond its length, as fairseq's ``train.py``; ``pad_idx``
    marks the targets of unmasked tokens). The rest is delegated, so the checkpoint state is
    the wrapped one's: mid-epoch checkpoints fall on update boundaries, where both have read as
    far."""

    def __init__(self, epoch_itr, update_freq: List[int], pad_idx: int):
        self._epoch_itr = epoch_itr
        self._update_freq = list(update_freq)
        self._pad_idx = pad_idx

    def __getattr__(self, name):
        return getattr(self._epoch_itr, name)

    def __len__(self):
        return len(self._epoch_itr)

    def next_epoch_itr(self, *args, **kwargs):
        """The wrapped iterator's ``next_epoch_itr`` (same arguments: ``shuffle``,
        ``fix_batches_to_gpus``, ...), its batches read by an :class:`UpdateTotalsIterator`
        with this epoch's ``--update-freq``.

        Returns:
            a fairseq ``CountingIterator`` that starts where the wrapped one does (``n``, also
            mid-epoch after a resume) and has its ``total``.
        """
        itr = self._epoch_itr.next_epoch_itr(*args, **kwargs)
        epoch = self._epoch_itr.epoch
        update_freq = self._update_freq[min(epoch, len(self._update_freq)) - 1]
        return iterators.CountingIterator(
            UpdateTotalsIterator(itr, update_freq, self._pad_idx), start=itr.n, total=itr.total)


class AllWorkerTotals:
    """The totals of the update being trained, summed over all data-parallel workers by one
    all-reduce when the update opens, for its batches on this worker (a task keeps one and asks
    it at every training step).

    An update opens at the batch whose :class:`UpdateTotals` has ``index`` 0, or at fairseq's
    padding batch (``ignore_grad``; it carries no record and counts 0) when it comes after the
    open update's last batch: fairseq pads a worker's shard with at most one empty batch, at its
    end, so a padding batch that opens an update is alone in it. This holds on every worker
    alike, so all all-reduce together: after an update fairseq skipped (its batches are over; a
    retried one starts again at index 0), on a worker with only padding in an update, and after
    resuming (checkpoints fall on update boundaries).
    """

    def __init__(self):
        self._open_totals: Optional[Tensor] = None  # [2]: the open update's, all workers
        self._calls_left = 0  # batches of the open update still to come on this worker

    def of_step(self, sample: dict, ignore_grad: bool, device: torch.device) -> Tensor:
        """The totals for a training step on ``sample`` (fairseq's padding batch when
        ``ignore_grad``).

        Returns:
            ``[2]`` float64 on ``device``: the masked tokens and anchors of the update, all
            workers.

        Raises:
            KeyError: a batch that is not fairseq's padding batch lacks ``update_totals`` (it
                did not come from an :class:`UpdateTotalsIterator`).
            RuntimeError: the batch comes after the first of an update (``index`` > 0) and no
                update has opened yet: the first batches came out of order, not from an
                update's first one.
        """
        own: Optional[UpdateTotals] = None if ignore_grad else sample[UPDATE_TOTALS_KEY]
        if own is not None:
            opens = own.index == 0
        else:
            opens = self._calls_left == 0
        if opens:
            local = (own.masked_tokens, own.anchors) if own is not None else (0, 0)
            totals = torch.tensor(local, dtype=torch.float64, device=device)
            if distributed_utils.get_data_parallel_world_size() > 1:
                totals = distributed_utils.all_reduce(
                    totals, group=distributed_utils.get_data_parallel_group())
            self._open_totals = totals
            self._calls_left = own.batches - 1 if own is not None else 0
        elif self._open_totals is None:
            raise RuntimeError(f"batch {own.index} of an update came first: train_step needs "
                               "an update's batches in order, from its first one")
        else:
            self._calls_left = max(self._calls_left - 1, 0)
        return self._open_totals


def tc_scale(all_worker_totals: Optional[Tensor], masked_tokens, anchors,
             device: torch.device) -> Tensor:
    """``max(M, 1) / max(A, 1)``, the factor of a batch's summed TC loss that makes it the
    update's mean over its A anchors once fairseq divides by the M masked tokens.

    Args:
        all_worker_totals: ``[2]`` (M, A) of a training step (:class:`AllWorkerTotals`), or
            None outside training: then the batch's own ``masked_tokens`` and ``anchors``
            (numbers or 0-d tensors) are M and A.
        device: where the factor goes.

    Returns:
        a 0-d float32 tensor on ``device``.
    """
    if all_worker_totals is None:
        all_worker_totals = torch.tensor([float(masked_tokens), float(anchors)])
    masked_total, anchor_total = all_worker_totals.to(device, torch.float32).unbind()
    return masked_total.clamp(min=1) / anchor_total.clamp(min=1)
