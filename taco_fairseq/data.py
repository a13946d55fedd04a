"""The data side of ``taco_masked_lm``: TC positions drawn at collate time, and each update's
masked-token and anchor totals (:class:`UpdateTotals`), read ahead and attached to its batches
because the criterion needs them before the update's first backward pass.
"""

import itertools
from dataclasses import dataclass
from typing import Iterable, List

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, iterators

from .batch import CrossWorkerTacoBatch, TacoBatch
from .sampling import CrossWorkerPositions, SamplingOptions, sample_positions

TC_POSITIONS = ("all", "masked", "unmasked")


class ContrastiveSamplingDataset(BaseWrapperDataset):
    """Wraps a masked-LM dataset (batches with ``id``, ``net_input.src_tokens`` and ``target``,
    ``[batch, seq_len]``); its collater adds ``batch["taco"]``, a
    :class:`~taco_fairseq.batch.TacoBatch` (``CrossWorkerTacoBatch`` for cross-worker
    positions), drawn given (seed, epoch, example ids) like fairseq's masking, so a resumed run
    draws alike.

    Args:
        pad_idx, excluded_tokens: ids that are never anchors, positives or negatives (padding;
            e.g. ``<s>`` and ``</s>``, or none, as the official code).
        positions: the anchors: ``all`` (TACO), ``masked`` (concentrated TACO) or ``unmasked``.
        sampling: how the positions are drawn, handed to
            :func:`~taco_fairseq.sampling.sample_positions` as it is.
        seed: the run's seed.

    Raises:
        ValueError: for an unknown ``positions``.
    """

    def __init__(self, dataset, pad_idx: int, excluded_tokens: Iterable[int], positions: str,
                 sampling: SamplingOptions, seed: int):
        super().__init__(dataset)
        if positions not in TC_POSITIONS:
            raise ValueError(f"positions must be one of {TC_POSITIONS}, got {positions!r}")
        self.pad_idx = pad_idx
        self.excluded_tokens = np.array(sorted(set(excluded_tokens)), dtype=np.int64)
        self.positions = positions
        self.sampling = sampling
        self.seed = seed
        self.epoch = 0

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return False  # the samples depend on the epoch

    def set_epoch(self, epoch, **unused):
        super().set_epoch(epoch)
        self.epoch = epoch

    def collater(self, samples):
        batch = self.dataset.collater(samples)
        if len(batch) == 0:
            return batch
        tokens = batch["net_input"]["src_tokens"].numpy()
        candidate = (tokens != self.pad_idx) & ~np.isin(tokens, self.excluded_tokens)
        if self.positions == "all":
            anchor_mask = candidate
        else:
            masked = batch["target"].numpy() != self.pad_idx
            anchor_mask = masked if self.positions == "masked" else ~masked
        rng = np.random.default_rng([self.seed, self.epoch, *batch["id"].tolist()])
        sampled = sample_positions(candidate, anchor_mask, self.sampling, rng)
        tensors = {name: torch.from_numpy(a) for name, a in sampled._asdict().items()}
        if isinstance(sampled, CrossWorkerPositions):
            batch["taco"] = CrossWorkerTacoBatch(**tensors)
            return batch
        row_length = candidate.sum(axis=1)
        available = row_length.sum() - row_length[sampled.anchor // candidate.shape[1]]
        batch["taco"] = TacoBatch(**tensors, skipped=bool((row_length > 0).sum() < 2),
                                  available_negatives=int(available.min()) if len(available) else 0)
        return batch


@dataclass(frozen=True)
class UpdateTotals:
    """This worker's part of one update, which :class:`UpdateTotalsIterator` attaches to each of
    the update's batches as ``batch["update_totals"]`` (``task.train_step`` sums it over the
    workers, once per update, for the criterion).

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
    """Iterate over ``batches`` (a fairseq ``CountingIterator``), reading the ``update_freq``
    consecutive batches of each update ahead (the groups of fairseq's ``GroupedIterator``), and
    yield each as a new dict with ``update_totals``: its :class:`UpdateTotals`. fairseq's empty
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
                {**batch, "update_totals": UpdateTotals(masked, anchors, index, len(group))}
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
