"""Cross-worker negatives (``--tc-cross-worker-negatives``): K negatives per anchor drawn
uniformly from the candidates of *all* workers' sequences but its own, as TACO's sampler (§3.1)
would with the global batch on one worker. The loader draws the variates; each training step
all-gathers the detached candidate vectors and maps the variates to them. Validation draws
within each worker's batch (fairseq does not mark its padding batches there).
"""

from typing import List, NamedTuple

import torch
from fairseq.distributed import utils as distributed_utils
from torch import Tensor

from .batch import CrossWorkerTacoBatch
from .sampling import outside_row, uniform_below


class CompletedNegatives(NamedTuple):
    """The inputs of :func:`taco_fairseq.loss.info_nce` for a cross-worker batch: ``vectors``
    ``[rows + T, hidden]`` (the batch's, then all workers' T detached candidates), ``anchor``
    and ``positive`` ``[anchors]`` of the anchors with negatives, ``negative`` ``[anchors, K]``
    (rows of the gathered part, >= ``rows``), and ``dropped``, the number of anchors without
    any negative."""

    vectors: Tensor
    anchor: Tensor
    positive: Tensor
    negative: Tensor
    dropped: int


def global_negative_index(
    uniform: Tensor, row_start: Tensor, row_length: Tensor, pool_sizes: List[int], rank: int
) -> Tensor:
    """``[anchors, K]`` int64 indices in [0, T) of the global pool (workers' ``pool_sizes``
    in rank order, T their sum) outside each anchor's row: ``outside_row(floor(u · (T − n)))``
    for ``uniform`` ``[anchors, K]`` and the anchor row's ``row_start`` in this worker's pool
    and ``row_length`` n (``[anchors]``); meaningless where T = n (callers drop those)."""
    start = sum(pool_sizes[:rank]) + row_start.unsqueeze(1)
    length = row_length.unsqueeze(1)
    return outside_row(uniform_below(uniform, sum(pool_sizes) - length), start, length)


def complete_negatives(vectors: Tensor, taco: CrossWorkerTacoBatch,
                       across_workers: bool) -> CompletedNegatives:
    """Draw the negatives of a cross-worker batch ``taco``, on the device of its ``[batch *
    seq_len, hidden]`` float32 ``vectors``: with ``across_workers`` (training steps, which all
    workers take in step) over the data-parallel group, else within this batch."""
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
