"""The data side of ``taco_masked_lm``: TC positions drawn at collate time, and each update's
masked-token and anchor totals, read ahead and written into its batches because the criterion
needs them before the update's first backward pass.
"""

import itertools
from typing import Callable, Dict, Iterable, List

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset, iterators

from .batch import CrossWorkerTacoBatch, TacoBatch
from .sampling import sample_contrastive_positions, sample_cross_worker_positions

TC_POSITIONS = ("all", "masked", "unmasked")

Counts = Callable[[dict], Dict[str, int]]


class ContrastiveSamplingDataset(BaseWrapperDataset):
    """Wraps a masked-LM dataset (batches with ``id``, ``net_input.src_tokens`` and ``target``,
    ``[batch, seq_len]``); its collater adds ``batch["taco"]``, a
    :class:`~taco_fairseq.batch.TacoBatch` (``CrossWorkerTacoBatch`` with ``cross_worker``),
    drawn given (seed, epoch, example ids) like fairseq's masking, so a resumed run draws alike.

    Args:
        pad_idx, excluded_tokens: ids that are never anchors, positives or negatives (padding;
            e.g. ``<s>`` and ``</s>``, or none, as the official code).
        positions: the anchors: ``all`` (TACO), ``masked`` (concentrated TACO) or ``unmasked``.
        window, num_negatives, seed: W (odd, >= 3), K (>= 1) and the run's seed.

    Raises:
        ValueError: for an unknown ``positions``.
    """

    def __init__(self, dataset, pad_idx: int, excluded_tokens: Iterable[int], positions: str,
                 window: int, num_negatives: int, seed: int, cross_worker: bool = False):
        super().__init__(dataset)
        if positions not in TC_POSITIONS:
            raise ValueError(f"positions must be one of {TC_POSITIONS}, got {positions!r}")
        self.pad_idx = pad_idx
        self.excluded_tokens = np.array(sorted(set(excluded_tokens)), dtype=np.int64)
        self.positions = positions
        self.window = window
        self.num_negatives = num_negatives
        self.seed = seed
        self.cross_worker = cross_worker
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
        sample = sample_cross_worker_positions if self.cross_worker else (
            sample_contrastive_positions)
        sampled = sample(candidate, anchor_mask, self.window, self.num_negatives, rng)
        tensors = {name: torch.from_numpy(a) for name, a in sampled._asdict().items()}
        if self.cross_worker:
            batch["taco"] = CrossWorkerTacoBatch(**tensors)
            return batch
        row_length = candidate.sum(axis=1)
        available = row_length.sum() - row_length[sampled.anchor // candidate.shape[1]]
        batch["taco"] = TacoBatch(**tensors, skipped=bool((row_length > 0).sum() < 2),
                                  available_negatives=int(available.min()) if len(available) else 0)
        return batch


class UpdateTotalsIterator:
    """Iterate over ``batches`` (a fairseq ``CountingIterator``; empty placeholder batches
    count zero) adding ``batch["update_totals"]``: the key-wise sum of ``counts(batch)`` over
    the ``update_freq`` consecutive batches of the batch's update, read ahead."""

    def __init__(self, batches: iterators.CountingIterator, update_freq: int, counts: Counts):
        self._batches = batches
        self._update_freq = update_freq
        self._counts = counts
        self._ready: List[dict] = []

    def __iter__(self):
        return self

    def __next__(self):
        if not self._ready:
            group = list(itertools.islice(self._batches, self._update_freq))
            if not group:
                raise StopIteration
            per_batch = [self._counts(batch) for batch in group if len(batch) > 0]
            totals = {key: sum(c[key] for c in per_batch) for key in (per_batch or [{}])[0]}
            for batch in group:
                if len(batch) > 0:
                    batch["update_totals"] = totals
            self._ready = group
        return self._ready.pop(0)

    def take(self, n: int):
        """Truncate to ``n`` more batches (``CountingIterator.take`` passes a relative count)."""
        self._batches.take(self._batches.n - len(self._ready) + n)


class UpdateTotalsEpochIterator:
    """Wraps a fairseq ``EpochBatchIterator`` so that its batches carry update totals
    (:class:`UpdateTotalsIterator`; epoch e uses entry e-1 of the ``--update-freq`` list, the
    last beyond its length, as fairseq's ``train.py``). The rest is delegated, so the checkpoint
    state is the wrapped one's: mid-epoch checkpoints fall on update boundaries, where both
    have read as far."""

    def __init__(self, epoch_itr, update_freq: List[int], counts: Counts):
        self._epoch_itr = epoch_itr
        self._update_freq = list(update_freq)
        self._counts = counts

    def __getattr__(self, name):
        return getattr(self._epoch_itr, name)

    def __len__(self):
        return len(self._epoch_itr)

    def next_epoch_itr(self, *args, **kwargs):
        itr = self._epoch_itr.next_epoch_itr(*args, **kwargs)
        epoch = self._epoch_itr.epoch
        update_freq = self._update_freq[min(epoch, len(self._update_freq)) - 1]
        return iterators.CountingIterator(
            UpdateTotalsIterator(itr, update_freq, self._counts), start=itr.n, total=itr.total)
