"""The data side of ``taco_masked_lm``: TC positions drawn at collate time. (Each update's
totals are read ahead of its batches by :mod:`taco_fairseq.totals`.)"""

import logging
from typing import Iterable

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset

from .batch import CrossWorkerTacoBatch, TacoBatch
from .sampling import CrossWorkerPositions, SamplingOptions, sample_positions

logger = logging.getLogger(__name__)

TC_POSITIONS = ("all", "masked", "unmasked")


class ContrastiveSamplingDataset(BaseWrapperDataset):
    """Wraps a masked-LM dataset (batches with ``id``, ``net_input.src_tokens`` and ``target``,
    ``[batch, seq_len]``); its collater adds ``batch["taco"]``, a
    :class:`~taco_fairseq.batch.TacoBatch` (``CrossWorkerTacoBatch`` for cross-worker
    positions), drawn given (seed, epoch, example ids) like fairseq's masking, so a resumed run
    draws alike. Anchors with fewer candidate negatives than ``--tc-negatives`` (drawn with
    replacement: repeats) are warned about, once per process.

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
        self._warned_few_negatives = False

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
        batch["taco"] = TacoBatch(**tensors, skipped=bool((row_length > 0).sum() < 2))
        if not self._warned_few_negatives:
            self._warn_if_few_negatives(row_length, sampled.anchor // candidate.shape[1])
        return batch

    def _warn_if_few_negatives(self, row_length: np.ndarray, anchor_row: np.ndarray) -> None:
        """Warn when an anchor draws its K negatives from fewer candidates, those of the rows
        other than its own (``row_length``: ``[batch]`` candidates per row; ``anchor_row``:
        ``[anchors]`` each anchor's row); batches without negatives (``skipped``) are not
        warned about. Once per dataset and process: a data-loading worker process
        (``--num-workers`` >= 1, new each epoch) warns once of its own."""
        if len(anchor_row) == 0:
            return
        available = int((row_length.sum() - row_length[anchor_row]).min())
        if 0 < available < self.sampling.num_negatives:
            logger.warning(
                f"--tc-negatives {self.sampling.num_negatives} exceeds the {available} tokens "
                "of the other sequences of a batch: such anchors draw repeated negatives "
                "(sampling is with replacement). Lower --tc-negatives or use larger batches")
            self._warned_few_negatives = True
