"""Positions of the anchors, positives and negatives of TACO's TC loss for one batch.

TACO §3.1 ("Positive pairs", "Negative pairs") and the official implementation's choices
(../shared/paper/NOTES.md):

* positive: another token of the anchor's sequence, at an offset drawn uniformly from
  {−W//2, …, W//2} \\ {0}; when that position is outside the sequence (or not a candidate
  token), a uniformly random other candidate token of the same sequence instead;
* negatives: K tokens drawn uniformly, with replacement, from the candidate tokens of the
  *other* sequences of the batch.

Pure numpy, no fairseq and no torch: the data loader's worker processes run it at collate time.
Positions are flat indices ``row * seq_len + column`` into the padded ``[batch, seq_len]`` batch.
"""

from typing import NamedTuple

import numpy as np


class ContrastivePositions(NamedTuple):
    """Sampled positions of one batch, all flat indices into ``[batch * seq_len]``.

    Attributes:
        anchor: ``[anchors]`` int64.
        positive: ``[anchors]`` int64, same row as the anchor, never the anchor itself.
        negative: ``[anchors, K]`` int64, rows other than the anchor's; sorted within each
            anchor's row (the loss does not depend on their order, and sorting puts repeats
            side by side).
    """

    anchor: np.ndarray
    positive: np.ndarray
    negative: np.ndarray


def sample_contrastive_positions(
    candidate: np.ndarray,
    anchor_mask: np.ndarray,
    window: int,
    num_negatives: int,
    rng: np.random.Generator,
) -> ContrastivePositions:
    """Draw one positive and ``num_negatives`` negatives for every eligible anchor.

    An anchor is eligible when ``anchor_mask`` and ``candidate`` hold at its position, its
    sequence has another candidate token (a positive exists) and some other sequence has a
    candidate token (negatives exist). A batch whose candidate tokens all lie in one sequence
    therefore has no anchors.

    Args:
        candidate: ``[batch, seq_len]`` bool, tokens that may be anchors, positives or negatives
            (not padding; special tokens unless excluded).
        anchor_mask: ``[batch, seq_len]`` bool, the positions asked to be anchors (all tokens,
            the masked ones or the unmasked ones).
        window: W, odd and >= 3; offsets are drawn from {−W//2 … W//2} \\ {0}.
        num_negatives: K >= 1.
        rng: the generator to draw from (seed it per batch for reproducibility).

    Returns:
        :class:`ContrastivePositions`; with no eligible anchor all arrays are empty
        (``negative`` of shape ``[0, K]``).

    Raises:
        ValueError: on masks of different shapes, an even or too small window, or K < 1.
    """
    _check_arguments(candidate, anchor_mask, window, num_negatives)
    rows = _RowPool(candidate)
    eligible_row = (rows.length >= 2) & (rows.size - rows.length >= 1)
    anchor, positive = _anchors_and_positives(rows, anchor_mask, eligible_row, window, rng)
    if len(anchor) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return ContrastivePositions(empty, empty, np.zeros((0, num_negatives), np.int64))

    # negatives: uniform over the candidates of the other rows (with replacement)
    row = anchor // rows.seq_len
    n_row = rows.length[row]
    draw = rng.integers(0, (rows.size - n_row)[:, None], size=(len(anchor), num_negatives))
    start = rows.start[row][:, None]
    draw = draw + np.where(draw >= start, n_row[:, None], 0)
    negative = np.sort(rows.pool[draw], axis=1)

    return ContrastivePositions(anchor, positive, negative)


class CrossWorkerPositions(NamedTuple):
    """Sampled positions of one worker's batch whose negatives are completed across workers
    (``--tc-cross-worker-negatives``, see :mod:`taco_fairseq.distributed`).

    Attributes:
        anchor: ``[anchors]`` int64 flat indices into ``[batch * seq_len]``.
        positive: ``[anchors]`` int64, as in :class:`ContrastivePositions`.
        candidates: ``[candidates]`` int64 flat indices of the batch's candidate tokens in
            row-major order (the worker's share of the global pool of negatives).
        anchor_row_start: ``[anchors]`` int64, index in ``candidates`` of the first candidate
            of the anchor's row.
        anchor_row_length: ``[anchors]`` int64, candidates in the anchor's row (excluded from
            its negatives).
        negative_uniform: ``[anchors, K]`` float64 in [0, 1): the variates that select the K
            negatives among the candidates of all workers outside the anchor's row.
    """

    anchor: np.ndarray
    positive: np.ndarray
    candidates: np.ndarray
    anchor_row_start: np.ndarray
    anchor_row_length: np.ndarray
    negative_uniform: np.ndarray


def sample_cross_worker_positions(
    candidate: np.ndarray,
    anchor_mask: np.ndarray,
    window: int,
    num_negatives: int,
    rng: np.random.Generator,
) -> CrossWorkerPositions:
    """Draw positives as :func:`sample_contrastive_positions`, and K uniform variates per
    anchor instead of negatives: the loader cannot see the other workers' tokens, so the
    criterion maps the variates to negatives after an all-gather
    (:func:`taco_fairseq.distributed.global_negative_index`).

    An anchor is eligible when ``anchor_mask`` and ``candidate`` hold at its position and its
    sequence has another candidate token; whether negatives exist is decided by the criterion
    (the other sequences of all workers).

    Args:
        as :func:`sample_contrastive_positions`.

    Returns:
        :class:`CrossWorkerPositions`.

    Raises:
        ValueError: as :func:`sample_contrastive_positions`.
    """
    _check_arguments(candidate, anchor_mask, window, num_negatives)
    rows = _RowPool(candidate)
    anchor, positive = _anchors_and_positives(rows, anchor_mask, rows.length >= 2, window, rng)
    row = anchor // rows.seq_len
    return CrossWorkerPositions(
        anchor,
        positive,
        rows.pool.astype(np.int64),
        rows.start[row].astype(np.int64),
        rows.length[row].astype(np.int64),
        rng.random((len(anchor), num_negatives)),
    )


def _check_arguments(candidate, anchor_mask, window, num_negatives) -> None:
    if candidate.shape != anchor_mask.shape or candidate.ndim != 2:
        raise ValueError(
            f"candidate {candidate.shape} and anchor_mask {anchor_mask.shape} must both be "
            "[batch, seq_len]"
        )
    if window < 3 or window % 2 == 0:
        raise ValueError(f"window must be an odd integer >= 3, got {window}")
    if num_negatives < 1:
        raise ValueError(f"num_negatives must be >= 1, got {num_negatives}")


class _RowPool:
    """The candidate positions of a ``[batch, seq_len]`` mask, row by row."""

    def __init__(self, candidate: np.ndarray):
        self.candidate = candidate
        self.seq_len = candidate.shape[1]
        self.pool = np.flatnonzero(candidate)  # candidate positions, row-major
        self.size = len(self.pool)
        self.length = candidate.sum(axis=1)  # candidates per row
        self.start = np.concatenate([[0], np.cumsum(self.length)[:-1]])  # row's offset in pool
        self.rank = np.cumsum(candidate, axis=1) - 1  # rank of a candidate within its row


def _anchors_and_positives(rows: _RowPool, anchor_mask, eligible_row, window, rng):
    """Anchors (asked, candidate, in an eligible row) and one positive each, int64."""
    candidate = rows.candidate
    anchor = np.flatnonzero(anchor_mask & candidate & eligible_row[:, None])
    if len(anchor) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    seq_len = rows.seq_len
    row, column = np.divmod(anchor, seq_len)
    n_row = rows.length[row]

    # positive: a window offset, or a uniformly random other candidate of the row
    half = window // 2
    draw = rng.integers(0, 2 * half, size=len(anchor))
    offset = np.where(draw < half, draw - half, draw - half + 1)
    target = column + offset
    inside = (target >= 0) & (target < seq_len)
    target_clipped = np.clip(target, 0, seq_len - 1)
    in_window = inside & candidate[row, target_clipped]
    other = rng.integers(0, n_row - 1)
    anchor_rank = rows.rank[row, column]
    other = other + (other >= anchor_rank)
    fallback = rows.pool[rows.start[row] + other]
    positive = np.where(in_window, row * seq_len + target_clipped, fallback)
    return anchor.astype(np.int64), positive.astype(np.int64)
