"""Annotate each batch with counts summed over all the batches of its update.

fairseq accumulates the gradients of ``--update-freq`` batches and divides their sum by the
summed sample size. To make TACO's objective *mean MLM loss over masked tokens + λ · mean TC
loss over anchors* exact for the whole update, the criterion must know, before the backward
pass of the first batch, the total number of masked tokens and of anchors in the update.
fairseq's ``train.py`` groups ``update_freq`` consecutive batches of the epoch iterator into one
update (``GroupedIterator``); this module reads the same groups one step ahead and writes their
totals into every batch. The task then sums them across workers (see ``TacoMaskedLMTask``).
"""

import itertools
from typing import Callable, Dict, List

from fairseq.data import iterators

Counts = Callable[[dict], Dict[str, int]]


class UpdateTotalsIterator:
    """Iterate over ``batches`` unchanged but for ``batch["update_totals"]``.

    Args:
        batches: a fairseq ``CountingIterator`` over the batches of an epoch in training order
            (empty dicts are fairseq's placeholders for exhausted shards; they count zero and
            stay empty).
        update_freq: batches per update, as ``GroupedIterator`` groups them.
        counts: maps a batch to the counts to sum (e.g. masked tokens and anchors).

    Each non-empty batch gets ``update_totals``: the key-wise sum of ``counts`` over the
    ``update_freq`` consecutive batches of its update (reading up to ``update_freq - 1``
    batches ahead).
    """

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
            self._ready = _with_totals(group, self._counts)
        return self._ready.pop(0)

    def take(self, n: int):
        """Truncate to ``n`` more batches (``CountingIterator.take`` passes a relative count)."""
        self._batches.take(self._batches.n - len(self._ready) + n)


def _with_totals(group: List[dict], counts: Counts) -> List[dict]:
    per_batch = [counts(batch) for batch in group if len(batch) > 0]
    totals = {key: sum(c[key] for c in per_batch) for key in (per_batch[0] if per_batch else ())}
    for batch in group:
        if len(batch) > 0:
            batch["update_totals"] = totals
    return group


class UpdateTotalsEpochIterator:
    """Wraps a fairseq ``EpochBatchIterator`` so that its batches carry update totals.

    Everything but :meth:`next_epoch_itr` is delegated to the wrapped iterator, so checkpoint
    state (epoch, iterations in epoch) is the wrapped one's. Mid-epoch checkpoints fall on
    update boundaries, where this wrapper has read exactly as far as the trainer.

    Args:
        epoch_itr: the iterator returned by ``FairseqTask.get_batch_iterator``.
        update_freq: the ``--update-freq`` list; epoch e uses entry e-1 (the last entry
            beyond its length), as fairseq's ``train.py``.
        counts: see :class:`UpdateTotalsIterator`.
    """

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
            UpdateTotalsIterator(itr, update_freq, self._counts), start=itr.n, total=itr.total
        )
