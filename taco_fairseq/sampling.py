"""Positions of the anchors, positives and negatives of TACO's TC loss for one batch (§3.1,
"Positive pairs", "Negative pairs", with the official implementation's choices):

* positive: another token of the anchor's sequence, at an offset drawn uniformly from
  {−W//2, …, W//2} \\ {0}; when that position is outside the sequence (or not a candidate
  token), a uniformly random other candidate token of the same sequence instead;
* negatives: K tokens drawn uniformly, with replacement, from the candidate tokens of the
  *other* sequences of the batch.

numpy, at collate time; positions are flat indices ``row * seq_len + column`` into the padded
``[batch, seq_len]`` batch. How they are drawn is one :class:`SamplingOptions` record, which
the task builds from its options and the loader hands to :func:`sample_positions` unread.
:func:`outside_row` ("uniform, the anchor's row left out") is shared with the cross-worker
negatives and the diagnostics.
"""

from dataclasses import dataclass
from typing import NamedTuple, Union

import numpy as np
import torch


@dataclass(frozen=True)
class SamplingOptions:
    """How a batch's TC positions are drawn: built once by the task from its ``tc_*`` options,
    where they are declared and checked (``task.sampling_options``), and passed unchanged
    through ``data.ContrastiveSamplingDataset`` (which reads none of its fields) to
    :func:`sample_positions`. A new sampling rule is a field here, read in this module.

    Attributes:
        window: W, odd and >= 3 (``--tc-window``): the positive is drawn at an offset in
            {−W//2, …, W//2} \\ {0} from its anchor.
        num_negatives: K >= 1 (``--tc-negatives``): negatives (or, across workers, variates)
            per anchor.
        cross_worker: draw K uniform variates per anchor that select negatives among the
            sequences of all workers (:class:`CrossWorkerPositions`,
            ``--tc-cross-worker-negatives``) instead of K negatives of this batch
            (:class:`ContrastivePositions`).
    """

    window: int
    num_negatives: int
    cross_worker: bool = False


class ContrastivePositions(NamedTuple):
    """Sampled int64 flat positions of one batch: ``anchor`` and ``positive`` (same row, not
    the anchor) ``[anchors]``, ``negative`` ``[anchors, K]`` (other rows; sorted per anchor)."""

    anchor: np.ndarray
    positive: np.ndarray
    negative: np.ndarray


class CrossWorkerPositions(NamedTuple):
    """Positions of a batch whose negatives are drawn across workers (:mod:`.distributed`).

    Attributes:
        anchor, positive: ``[anchors]`` int64, as in :class:`ContrastivePositions`.
        candidates: ``[candidates]`` int64 flat positions of the candidate tokens, row-major.
        anchor_row_start, anchor_row_length: ``[anchors]`` int64, the index in ``candidates``
            of the anchor row's first candidate, and the row's candidates.
        negative_uniform: ``[anchors, K]`` float64 variates in [0, 1) selecting the negatives.
    """

    anchor: np.ndarray
    positive: np.ndarray
    candidates: np.ndarray
    anchor_row_start: np.ndarray
    anchor_row_length: np.ndarray
    negative_uniform: np.ndarray


def window_outside_share(window: int, length: int) -> float:
    """The share of the positives whose window offset, drawn uniformly from {−W//2, …, W//2}
    \\ {0} for W = ``window``, falls outside a sequence of ``length`` tokens, over its anchors
    at every position: those positives are drawn uniformly from the rest of the sequence
    instead (:func:`sample_positions`). 0 for a window within the sequence everywhere, > 0 at
    its ends; every anchor's window reaches beyond it when ``window > length``."""
    half = window // 2
    column = np.arange(length)
    inside = np.minimum(column, half) + np.minimum(length - 1 - column, half)
    return float(1 - inside.mean() / (2 * half))


def outside_row(draw, row_start, row_length):
    """The pool index of the ``draw``-th element outside the block ``[row_start, row_start +
    row_length)``: uniform over the rest of the pool for ``draw`` uniform in ``[0, pool −
    row_length)``. Element-wise, on numpy arrays or torch tensors."""
    return draw + (draw >= row_start) * row_length


def uniform_below(uniform: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """``floor(u · bound)`` as int64 in ``[0, bound − 1]``, for variates ``u`` in [0, 1) (a
    product that rounds up to ``bound`` is clamped; ``bound`` 0 gives 0)."""
    return torch.minimum((uniform * bound).long(), (bound - 1).clamp(min=0))


def sample_positions(candidate: np.ndarray, anchor_mask: np.ndarray, options: SamplingOptions,
                     rng: np.random.Generator
                     ) -> Union[ContrastivePositions, CrossWorkerPositions]:
    """Draw a positive and K negatives (or, with ``options.cross_worker``, K variates) for
    every anchor: a position where both ``candidate`` (may be anchor, positive or negative) and
    ``anchor_mask`` hold (``[batch, seq_len]`` bool), whose row has another candidate and,
    within a batch, some other row has one (across workers, other workers' rows may).

    Args:
        options: W, K and where the negatives come from, as the task checked them.
        rng: the generator to draw from (seeded per batch).

    Returns:
        :class:`ContrastivePositions`, or :class:`CrossWorkerPositions` with
        ``options.cross_worker``; empty arrays (``[0, K]`` for the negatives or variates) when
        there are no anchors.

    Raises:
        ValueError: on masks of different shapes.
    """
    rows, anchor, positive = _anchors_and_positives(candidate, anchor_mask, options, rng)
    row = anchor // rows.seq_len
    k = options.num_negatives
    if options.cross_worker:
        return CrossWorkerPositions(
            anchor, positive, rows.pool.astype(np.int64), rows.start[row].astype(np.int64),
            rows.length[row].astype(np.int64), rng.random((len(anchor), k)))
    n_row = rows.length[row][:, None]
    draw = rng.integers(0, rows.size - n_row, size=(len(anchor), k))
    negative = np.sort(rows.pool[outside_row(draw, rows.start[row][:, None], n_row)], axis=1)
    return ContrastivePositions(anchor, positive, negative.reshape(len(anchor), k))


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


def _anchors_and_positives(candidate, anchor_mask, options: SamplingOptions, rng):
    """The checked arguments' :class:`_RowPool`, the anchors (asked, candidate, in a row with
    another candidate and, unless ``options.cross_worker``, some candidate elsewhere in the
    batch) and a positive each."""
    if candidate.shape != anchor_mask.shape or candidate.ndim != 2:
        raise ValueError(f"candidate {candidate.shape} and anchor_mask {anchor_mask.shape} must "
                         "both be [batch, seq_len]")
    rows = _RowPool(candidate)
    eligible_row = rows.length >= 2
    if not options.cross_worker:
        eligible_row &= rows.size - rows.length >= 1
    seq_len = rows.seq_len
    anchor = np.flatnonzero(anchor_mask & candidate & eligible_row[:, None]).astype(np.int64)
    if len(anchor) == 0:
        return rows, anchor, anchor
    row, column = np.divmod(anchor, seq_len)
    # a window offset, or a uniformly random other candidate of the row
    half = options.window // 2
    draw = rng.integers(0, 2 * half, size=len(anchor))
    target = column + np.where(draw < half, draw - half, draw - half + 1)
    target_clipped = np.clip(target, 0, seq_len - 1)
    in_window = (target == target_clipped) & candidate[row, target_clipped]
    other = outside_row(rng.integers(0, rows.length[row] - 1), rows.rank[row, column], 1)
    fallback = rows.pool[rows.start[row] + other]
    positive = np.where(in_window, row * seq_len + target_clipped, fallback).astype(np.int64)
    return rows, anchor, positive
