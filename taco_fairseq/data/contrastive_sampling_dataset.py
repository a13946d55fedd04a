"""A dataset wrapper that adds TACO's sampled positions to every collated batch."""

from typing import Iterable

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset

from ..sampling import sample_contrastive_positions, sample_cross_worker_positions

TC_POSITIONS = ("all", "masked", "unmasked")


class ContrastiveSamplingDataset(BaseWrapperDataset):
    """Wraps a masked-LM dataset; its collater adds ``batch["taco"]``.

    ``batch["taco"]`` holds the flat positions of :class:`ContrastivePositions` as int64
    tensors (``anchor [anchors]``, ``positive [anchors]``, ``negative [anchors, K]``) and
    ``skipped`` (1 when the batch has no negatives, i.e. its tokens lie in one sequence, so the
    TC loss is skipped for it; else 0) and ``available_negatives`` (the fewest candidate tokens
    any anchor can draw its negatives from; 0 without anchors).

    With ``cross_worker`` (``--tc-cross-worker-negatives``) ``batch["taco"]`` holds the fields
    of :class:`~taco_fairseq.sampling.CrossWorkerPositions` instead of
    ``negative`` (``negative_uniform`` float64, the others int64), and ``skipped`` is 0: the
    criterion draws the negatives from all workers' batches.

    Sampling is deterministic given (seed, epoch, ids of the batch's examples), like fairseq's
    ``MaskTokensDataset``, so a resumed run draws what an uninterrupted one would have.

    Args:
        dataset: a dataset whose collater returns fairseq's masked-LM batch (``id``,
            ``net_input.src_tokens [batch, seq_len]``, ``target [batch, seq_len]`` with pad at
            unmasked positions).
        pad_idx: the padding index (never an anchor, positive or negative).
        excluded_tokens: token ids that are never anchors, positives or negatives (e.g.
            ``<s>`` and ``</s>``); empty to keep special tokens as anchors (the official code).
        positions: which tokens are anchors: ``all`` (TACO), ``masked`` (concentrated TACO)
            or ``unmasked``.
        window: W, odd, >= 3.
        num_negatives: K >= 1.
        seed: the run's seed.
        cross_worker: leave the negatives to the criterion (see above).

    Raises:
        ValueError: for an unknown ``positions``.
    """

    def __init__(
        self,
        dataset,
        pad_idx: int,
        excluded_tokens: Iterable[int],
        positions: str,
        window: int,
        num_negatives: int,
        seed: int,
        cross_worker: bool = False,
    ):
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
        if self.cross_worker:
            sampled = sample_cross_worker_positions(
                candidate, anchor_mask, self.window, self.num_negatives, rng
            )
            batch["taco"] = {k: torch.from_numpy(v) for k, v in sampled._asdict().items()}
            batch["taco"]["skipped"] = 0
            return batch
        sampled = sample_contrastive_positions(
            candidate, anchor_mask, self.window, self.num_negatives, rng
        )
        row_length = candidate.sum(axis=1)
        available = row_length.sum() - row_length[sampled.anchor // candidate.shape[1]]
        batch["taco"] = {
            "anchor": torch.from_numpy(sampled.anchor),
            "positive": torch.from_numpy(sampled.positive),
            "negative": torch.from_numpy(sampled.negative),
            "skipped": int((row_length > 0).sum() < 2),
            "available_negatives": int(available.min()) if len(available) else 0,
        }
        return batch
