"""The data loader's collate with and without TACO's contrastive sampling.

``ContrastiveSamplingDataset.collater`` calls the wrapped masked-LM collater, then draws the
anchors, positives and negatives of the batch; timing both collaters on the same items gives
the cost of the sampling.
"""

import statistics
import time
from typing import NamedTuple

from taco_fairseq.data import ContrastiveSamplingDataset


class CollateStats(NamedTuple):
    """Median seconds per batch of the two collaters on the same items.

    Attributes:
        plain_s: the wrapped masked-LM collater (what ``--task masked_lm`` collates).
        taco_s: ``ContrastiveSamplingDataset.collater`` (the same batch plus the sampling).
        batches: batches timed.
    """

    plain_s: float
    taco_s: float
    batches: int


def time_collate(dataset: ContrastiveSamplingDataset, batches, repeats: int = 3) -> CollateStats:
    """Time both collaters on each batch, alternating which goes first.

    Args:
        dataset: the ``taco_masked_lm`` training dataset.
        batches: lists of dataset indices, e.g. the training iterator's batches.
        repeats: timings of each collater per batch.

    Raises:
        TypeError: if ``dataset`` is not a :class:`ContrastiveSamplingDataset`.
        ValueError: if there is no batch or ``repeats`` < 1.
    """
    if not isinstance(dataset, ContrastiveSamplingDataset):
        raise TypeError(f"expected the taco_masked_lm dataset, got {type(dataset).__name__}")
    if len(batches) == 0 or repeats < 1:
        raise ValueError(f"need batches and repeats >= 1, got {len(batches)} and {repeats}")
    collaters = {"plain": dataset.dataset.collater, "taco": dataset.collater}
    times = {name: [] for name in collaters}
    for indices in batches:
        samples = [dataset[int(i)] for i in indices]
        for repeat in range(repeats):
            order = list(collaters) if repeat % 2 == 0 else list(collaters)[::-1]
            for name in order:
                start = time.perf_counter()
                collaters[name](samples)
                times[name].append(time.perf_counter() - start)
    return CollateStats(
        statistics.median(times["plain"]), statistics.median(times["taco"]), len(batches)
    )


def time_session_collate(session, batches: int = 20) -> CollateStats:
    """:func:`time_collate` on the first ``batches`` training batches of a
    :class:`~benchmarks.update_timing.TrainerSession` of ``taco_masked_lm``."""
    task = session.trainer.task
    dataset = task.dataset(session.trainer.cfg.dataset.train_subset)
    return time_collate(dataset, session.epoch_itr.frozen_batches[:batches])
