"""Intra- and inter-context pairs of tokens and how similar their representations are.

Paper, appendix A.3 ("Intra-/Inter-context Similarity"): "For every token w_i in the corpus,
we randomly sample a positive token w_{j≠i} within the same context (sentence) and another token
w_k from other sentences", then average a similarity of the last-layer states (h_i, h_j)
(intra-context) and (h_i, h_k) (inter-context) over all tokens. The *contextual score* (§2.2)
is the gap: mean intra-context cosine similarity − mean inter-context cosine similarity. The
appendix's Table 9 also gives, for the dot product and the L1, L2 and L10 distances, the ratio
of the intra-context mean over the inter-context mean.

Here a *context* is a row of a padded ``[batch, seq_len]`` batch (a sentence for the corpus
score, a training sequence for the online diagnostics) and only positions marked ``valid`` take
part. Everything is vectorized with static shapes (no host synchronization on a GPU).
"""

from typing import Dict, NamedTuple, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from .loss import NORM_EPS

#: Measures of a pair of vectors (a, b): similarities (higher = closer) and distances.
MEASURES = ("cosine", "dot", "l1", "l2", "l10")
SIMILARITIES = ("cosine", "dot")
_LP_ORDER = {"l1": 1.0, "l2": 2.0, "l10": 10.0}


class ContextPairs(NamedTuple):
    """One intra- and one inter-context partner for every position of a ``[batch, seq_len]``
    batch (see :func:`sample_context_pairs`).

    Attributes:
        anchor: ``[batch, seq_len]`` bool, positions that have both partners.
        intra: ``[batch, seq_len]`` int64, flat index (row · seq_len + column) of a uniformly
            drawn other valid position of the same row.
        inter: ``[batch, seq_len]`` int64, flat index of a uniformly drawn valid position of
            another row. Both are in range everywhere but meaningful only where ``anchor``.
    """

    anchor: Tensor
    intra: Tensor
    inter: Tensor


class PairSums(NamedTuple):
    """Sums of pair measures over the anchors of one or more batches (summable).

    Attributes:
        count: number of anchors (pairs of each kind).
        intra: measure name -> sum over anchors of measure(h_anchor, h_intra).
        inter: measure name -> sum over anchors of measure(h_anchor, h_inter).
    """

    count: Tensor
    intra: Dict[str, Tensor]
    inter: Dict[str, Tensor]


def sample_context_pairs(valid: Tensor, generator: torch.Generator) -> ContextPairs:
    """Draw an intra- and an inter-context partner for every valid position.

    For position (b, t) with ``valid[b, t]``: the intra partner is uniform over the other
    ``L_b − 1`` valid positions of row b (never itself), the inter partner uniform over the
    ``N − L_b`` valid positions of all other rows (``L_b``: valid positions of row b, ``N``: of
    the batch). A position is an anchor when both sets are non-empty.

    Args:
        valid: ``[batch, seq_len]`` bool, positions that may be anchors and partners (e.g. not
            padding, not ``<s>``/``</s>``).
        generator: the source of randomness, on ``valid``'s device (the global RNG is not
            touched, so training is not changed by drawing pairs).

    Returns:
        :class:`ContextPairs`.

    Raises:
        ValueError: if ``valid`` is not a 2-d bool tensor.
    """
    if valid.dim() != 2 or valid.dtype != torch.bool:
        raise ValueError(
            f"valid must be a [batch, seq_len] bool tensor, got {valid.dtype} {tuple(valid.shape)}"
        )
    batch, seq_len = valid.shape
    count = valid.long()
    row_cum = count.cumsum(1)  # [B, T]: valid positions up to and including t
    row_len = row_cum[:, -1:]  # [B, 1]
    row_start = row_len.cumsum(0) - row_len  # [B, 1]: rank of the row's first valid position
    flat_cum = (row_cum + row_start).flatten()  # [B·T]: valid positions of the batch up to here
    total = flat_cum[-1]
    uniform = torch.rand(
        (2, batch, seq_len), generator=generator, device=valid.device, dtype=torch.float64
    )

    # intra: rank (within the row) of the anchor plus 1 + r, r uniform in [0, L_b − 2], mod L_b
    others_in_row = (row_len - 1).clamp(min=1)
    step = _uniform_below(uniform[0], others_in_row)
    intra_rank = (row_cum + step) % row_len.clamp(min=1)  # row_cum − 1 is the anchor's rank
    intra_column = torch.searchsorted(row_cum, intra_rank + 1).clamp(max=seq_len - 1)
    rows = torch.arange(batch, device=valid.device).unsqueeze(1)
    intra = rows * seq_len + intra_column

    # inter: a rank r uniform in [0, N − L_b) over the other rows, skipping the row's own block
    others_outside = (total - row_len).clamp(min=1)
    rank = _uniform_below(uniform[1], others_outside)
    rank = rank + (rank >= row_start).long() * row_len
    inter = torch.searchsorted(flat_cum, rank.flatten() + 1).clamp(max=batch * seq_len - 1)

    anchor = valid & (row_len >= 2) & (total - row_len >= 1)
    return ContextPairs(anchor, intra, inter.view(batch, seq_len))


def _uniform_below(uniform: Tensor, bound: Tensor) -> Tensor:
    """floor(uniform · bound) as int64, in [0, bound − 1] (bound >= 1)."""
    return torch.minimum((uniform * bound).long(), bound - 1)


def pair_measure_sums(
    states: Tensor, pairs: ContextPairs, measures: Sequence[str] = ("cosine",)
) -> PairSums:
    """Sum each measure over the anchors' intra- and inter-context pairs.

    Measures of vectors a, b: ``cosine`` = a·b / (max(‖a‖, ε) · max(‖b‖, ε)) (ε =
    :data:`taco_fairseq.loss.NORM_EPS`), ``dot`` = a·b, ``l1``/``l2``/``l10`` =
    ‖a − b‖_p for p = 1, 2, 10. Cosine and dot product are computed in float32, the distances
    in float64 (|x|^10 overflows float32 for large states).

    Args:
        states: ``[batch, seq_len, hidden]`` representations (e.g. last-layer states).
        pairs: from :func:`sample_context_pairs` on the same ``[batch, seq_len]``.
        measures: names from :data:`MEASURES`.

    Returns:
        :class:`PairSums`: float64 sums (``count`` int64), no gradient.

    Raises:
        ValueError: for an unknown measure or mismatched shapes.
    """
    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise ValueError(f"unknown measures {unknown}; choose from {MEASURES}")
    if states.dim() != 3 or states.shape[:2] != pairs.anchor.shape:
        raise ValueError(
            f"states must be [batch, seq_len, hidden] with [batch, seq_len] = "
            f"{tuple(pairs.anchor.shape)}, got {tuple(states.shape)}"
        )
    with torch.no_grad():
        flat = states.detach().flatten(0, 1).float()  # [B·T, hidden]
        anchor = pairs.anchor.flatten()
        unit = F.normalize(flat, dim=-1, eps=NORM_EPS) if "cosine" in measures else None
        sums = []
        for partner in (pairs.intra, pairs.inter):
            index = partner.flatten()
            sums.append({
                m: torch.where(anchor, _measure(m, flat, unit, index), 0).double().sum()
                for m in measures
            })
        return PairSums(anchor.sum(), *sums)


def _measure(name: str, flat: Tensor, unit: Tensor, index: Tensor) -> Tensor:
    """``[B·T]``: the measure between every row of ``flat`` and the row ``index`` points to
    (``unit``: the rows normalized); computed at every position, with static shapes."""
    if name == "cosine":
        return (unit * unit.index_select(0, index)).sum(-1)
    if name == "dot":
        return (flat * flat.index_select(0, index)).sum(-1)
    difference = flat.double() - flat.index_select(0, index).double()
    return torch.linalg.vector_norm(difference, ord=_LP_ORDER[name], dim=-1)


def summarize(sums: PairSums) -> Dict[str, float]:
    """Means, gaps and ratios of summed pair measures (the paper's contextual score, §2.2, and
    appendix Table 9).

    For every measure m of ``sums``: ``{m}_intra`` and ``{m}_inter`` (means over anchors),
    ``{m}_gap`` = intra − inter (for ``cosine``: the contextual score) and ``{m}_ratio`` =
    intra / inter (Table 9; for distances a ratio below 1 means tokens of the same context are
    closer). ``pairs`` is the number of anchors.

    Raises:
        ValueError: if there are no pairs (every context had fewer than two valid tokens, or
            there was only one context).
    """
    count = int(sums.count)
    if count == 0:
        raise ValueError(
            "no intra/inter-context pairs: need at least two contexts with two or more tokens"
        )
    row = {"pairs": count}
    for measure, intra_sum in sums.intra.items():
        intra = float(intra_sum) / count
        inter = float(sums.inter[measure]) / count
        row[f"{measure}_intra"] = intra
        row[f"{measure}_inter"] = inter
        row[f"{measure}_gap"] = intra - inter
        row[f"{measure}_ratio"] = intra / inter if inter != 0 else float("nan")
    return row


def add_sums(a: PairSums, b: PairSums) -> PairSums:
    """The elementwise sum of two :class:`PairSums` with the same measures."""
    return PairSums(
        a.count + b.count,
        {m: a.intra[m] + b.intra[m] for m in a.intra},
        {m: a.inter[m] + b.inter[m] for m in a.inter},
    )
