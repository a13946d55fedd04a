"""Cross-worker negatives (``--tc-cross-worker-negatives``): each anchor's K negatives are drawn
uniformly from the candidate tokens of *all* data-parallel workers' sequences other than its
own, as TACO's sampler (§3.1, "Negative pairs") would with the whole global batch on one worker.

The loader draws the variates (:func:`taco_fairseq.sampling.sample_cross_worker_positions`);
at every training step the criterion all-gathers the workers' detached candidate vectors and
maps each variate to the global pool (workers in rank order) by :func:`global_negative_index`.
Validation draws within each worker's batch: fairseq's validation loop does not mark the
padding batches that keep workers in step.
"""

from typing import List, NamedTuple

import torch
from fairseq.distributed import utils as distributed_utils
from torch import Tensor

from .batch import CrossWorkerTacoBatch
from .sampling import outside_row, uniform_below


class CompletedNegatives(NamedTuple):
    """The inputs of :func:`taco_fairseq.loss.info_nce` for a cross-worker batch.

    Attributes:
        vectors: ``[rows + T, hidden]`` the batch's vectors, then the T candidate vectors of
            all workers (detached).
        anchor: ``[anchors]`` int64 rows of the anchors that have negatives.
        positive: ``[anchors]`` int64.
        negative: ``[anchors, K]`` int64 rows of ``vectors`` (all >= ``rows``).
        dropped: anchors without any negative (all workers' tokens lie in their row).
    """

    vectors: Tensor
    anchor: Tensor
    positive: Tensor
    negative: Tensor
    dropped: int


def global_negative_index(
    uniform: Tensor, row_start: Tensor, row_length: Tensor, pool_sizes: List[int], rank: int
) -> Tensor:
    """Map variates to indices of the global candidate pool outside each anchor's row:
    ``outside_row(floor(u · (T − n)))`` for the n candidates of the anchor's row.

    Args:
        uniform: ``[anchors, K]`` float64 in [0, 1).
        row_start: ``[anchors]`` int64, the anchor row's first candidate in this worker's pool.
        row_length: ``[anchors]`` int64, candidates in the anchor's row (0 for a worker that
            contributes no candidates, e.g. fairseq's padding batches).
        pool_sizes: candidates contributed by each worker, in rank order (T = their sum).
        rank: this worker's position in ``pool_sizes``.

    Returns:
        ``[anchors, K]`` int64 in [0, T); meaningless where T − n = 0 (callers drop those).
    """
    start = sum(pool_sizes[:rank]) + row_start.unsqueeze(1)
    length = row_length.unsqueeze(1)
    return outside_row(uniform_below(uniform, sum(pool_sizes) - length), start, length)


def complete_negatives(vectors: Tensor, taco: CrossWorkerTacoBatch,
                       across_workers: bool) -> CompletedNegatives:
    """Draw the negatives of a cross-worker batch.

    Args:
        vectors: ``[batch * seq_len, hidden]`` float32 global-bias vectors of the batch.
        taco: the batch's positions, on ``vectors``' device.
        across_workers: all-gather over the data-parallel group (training steps, which every
            worker takes in step); else draw within this batch.
    """
    local = vectors.index_select(0, taco.candidates).detach()
    row_length = taco.anchor_row_length
    if taco.dummy:  # fairseq's padding batch shares nothing
        local, row_length = local[:0], torch.zeros_like(row_length)
    world_size = distributed_utils.get_data_parallel_world_size() if across_workers else 1
    if world_size > 1:
        pool, pool_sizes = _all_gather_rows(local, distributed_utils.get_data_parallel_group())
        rank = distributed_utils.get_data_parallel_rank()
    else:
        pool, pool_sizes, rank = local, [len(local)], 0
    index = global_negative_index(taco.negative_uniform, taco.anchor_row_start, row_length,
                                  pool_sizes, rank)
    keep = sum(pool_sizes) - row_length > 0
    return CompletedNegatives(torch.cat([vectors, pool.to(vectors.dtype)]), taco.anchor[keep],
                              taco.positive[keep], index[keep] + len(vectors),
                              int((~keep).sum()))


def _all_gather_rows(rows: Tensor, group):
    """All-gather ``[n_r, hidden]`` tensors of different lengths n_r: ``([Σ n_r, hidden],
    [n_0, n_1, ...])``, in rank order."""
    size = torch.tensor([len(rows)], device=rows.device)
    sizes = [int(n) for n in distributed_utils.all_gather(size, group, return_tensor=True)]
    padded = rows.new_zeros(max(sizes), rows.size(1))
    padded[: len(rows)] = rows
    gathered = distributed_utils.all_gather(padded, group, return_tensor=True)
    return torch.cat([part[:n] for part, n in zip(gathered, sizes)]), sizes
