"""The token-alignment contrastive (TC) loss of TACO as pure torch functions.

Fu et al., "Contextual Representation Learning beyond Masked Language Modeling", ACL 2022,
§3.1 (the equations are restated in ../shared/paper/NOTES.md, "Objective"):

* global bias of token j of sequence i:   g_j^i = h_j^i − e_j^i
* score:                                  f(a, b) = cos(a, b) / τ
* InfoNCE for an anchor x with positive c and negatives c_1^-, …, c_K^-:
      L(g_x, g_c) = −log( exp f(g_x, g_c) / (exp f(g_x, g_c) + Σ_k exp f(g_x, g_{c_k^-})) )

Nothing here imports fairseq: positions are flat indices into a ``[rows, hidden]`` table of
global-bias vectors, as produced by :mod:`taco_fairseq.data.contrastive_sampling`.
"""

import contextlib
import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

#: Vectors with a smaller norm have no direction: their cosine with anything is 0 (never NaN)
#: and they get no gradient (a 1/norm slope would overflow half precision). Real global-bias
#: vectors have norms of order sqrt(hidden).
NORM_EPS = 1e-6

#: Upper bound, in bytes, of the [chunk, K, hidden] block that the gather path materializes.
_GATHER_CHUNK_BYTES = 64 * 2**20


class InfoNCEOutput(NamedTuple):
    """Per-anchor results of :func:`info_nce`.

    Attributes:
        loss: ``[anchors]`` float32, the InfoNCE loss of each anchor in nats.
        correct: ``[anchors]`` bool, whether the positive scores strictly above all K negatives.
    """

    loss: Tensor
    correct: Tensor


def global_bias(hidden: Tensor, embedding: Tensor) -> Tensor:
    """Global bias g = h − e (TACO §3.1), computed in float32 whatever the input dtype.

    Args:
        hidden: ``[batch, seq_len, hidden]`` last-layer states h.
        embedding: ``[batch, seq_len, hidden]`` static embeddings e of the same tokens.

    Returns:
        ``[batch, seq_len, hidden]`` float32.

    Raises:
        ValueError: if the shapes differ.
    """
    if hidden.shape != embedding.shape:
        raise ValueError(
            f"hidden states {tuple(hidden.shape)} and embeddings {tuple(embedding.shape)} "
            "must have the same [batch, seq_len, hidden] shape"
        )
    return hidden.float() - embedding.float()


def info_nce(
    vectors: Tensor,
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    temperature: float,
    detach_keys: bool = True,
) -> InfoNCEOutput:
    """InfoNCE with cosine-similarity scores over sampled rows of ``vectors`` (TACO §3.1).

    For anchor ``a = anchor[n]``, positive ``p = positive[n]`` and negatives
    ``negative[n, :]``, with ``z = vectors / ‖vectors‖`` row-wise (0 below NORM_EPS)::

        s_pos = z[a]·z[p] / τ,   s_k = z[a]·z[negative[n, k]] / τ
        loss[n] = logsumexp([s_pos, s_1, …, s_K]) − s_pos

    The scores of the negatives are computed without building an ``[anchors, K, hidden]``
    tensor (see :func:`sampled_dot`), and everything is float32, also inside an autocast
    region (``--amp``), which would otherwise run the products in half precision.

    Args:
        vectors: ``[rows, hidden]`` the table of vectors (e.g. global-bias vectors of every
            position of a padded batch, flattened); any float dtype, upcast to float32.
        anchor: ``[anchors]`` int64 row indices of the anchors.
        positive: ``[anchors]`` int64 row index of each anchor's positive.
        negative: ``[anchors, K]`` int64 row indices of each anchor's negatives, K >= 1.
            Duplicates are allowed (sampling with replacement). The loss is invariant to the
            order within a row.
        temperature: τ > 0.
        detach_keys: if True (the official implementation), positives and negatives carry no
            gradient (stop-gradient); only the anchor's vector does.

    Returns:
        :class:`InfoNCEOutput` with per-anchor ``loss`` (nats) and ``correct``.

    Raises:
        ValueError: on inconsistent shapes or a non-positive temperature.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if vectors.dim() != 2:
        raise ValueError(f"vectors must be [rows, hidden], got shape {tuple(vectors.shape)}")
    if anchor.dim() != 1 or positive.shape != anchor.shape:
        raise ValueError(
            f"anchor and positive must both be [anchors], got {tuple(anchor.shape)} and "
            f"{tuple(positive.shape)}"
        )
    if negative.dim() != 2 or negative.size(0) != anchor.size(0) or negative.size(1) < 1:
        raise ValueError(
            f"negative must be [anchors={anchor.size(0)}, K>=1], got {tuple(negative.shape)}"
        )
    with full_precision(vectors.device):
        z = _unit_rows(vectors.float())
        keys = z.detach() if detach_keys else z
        queries = z.index_select(0, anchor)
        positive_score = (queries * keys.index_select(0, positive)).sum(-1) / temperature
        negative_score = sampled_dot(queries, keys, negative) / temperature
        logits = torch.cat([positive_score.unsqueeze(1), negative_score], dim=1)
        loss = torch.logsumexp(logits, dim=1) - positive_score
    correct = positive_score.detach() > negative_score.detach().max(dim=1).values
    return InfoNCEOutput(loss, correct)


def _unit_rows(x: Tensor) -> Tensor:
    norm = x.norm(dim=-1, keepdim=True)
    return torch.where(norm >= NORM_EPS, x / norm.clamp(min=NORM_EPS), 0.0)


def full_precision(device: torch.device):
    """A context in which autocast is off on ``device`` (a no-op where torch has no
    autocast for its type)."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


def sampled_dot(queries: Tensor, keys: Tensor, index: Tensor) -> Tensor:
    """``out[n, k] = queries[n] · keys[index[n, k]]`` without an ``[n, K, hidden]`` tensor.

    Forward: on CPU a sampled dense-dense product (``torch.sparse.sampled_addmm``, the
    ``index`` pattern as CSR, repeated columns moved to copies of ``keys``); elsewhere a gather
    in chunks of at most 64 MiB. Backward: ``embedding_bag`` sums for the queries, a sparse
    product for the keys. Work and memory grow as anchors × K × hidden and rows × hidden.

    Args:
        queries: ``[n, hidden]`` float32.
        keys: ``[rows, hidden]`` float32.
        index: ``[n, K]`` int64 in ``[0, rows)``.

    Returns:
        ``[n, K]`` float32.
    """
    return _SampledDot.apply(queries, keys, index)


class _SampledDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, queries, keys, index):
        ctx.save_for_backward(queries, keys, index)
        if queries.device.type == "cpu":
            return _sampled_dot_csr(queries, keys, index)
        return _sampled_dot_gather(queries, keys, index)

    @staticmethod
    def backward(ctx, grad_out):
        with full_precision(grad_out.device):
            return _SampledDot._backward(ctx, grad_out.contiguous())

    @staticmethod
    def _backward(ctx, grad_out):
        queries, keys, index = ctx.saved_tensors
        grad_queries = grad_keys = None
        if ctx.needs_input_grad[0]:
            # grad_queries[n] = Σ_k grad_out[n, k] · keys[index[n, k]]
            grad_queries = F.embedding_bag(
                index, keys, per_sample_weights=grad_out, mode="sum"
            )
        if ctx.needs_input_grad[1]:
            # grad_keys[r] = Σ_{(n, k): index[n, k] = r} grad_out[n, k] · queries[n]
            rows = torch.arange(index.size(0), device=index.device)
            pattern = torch.stack([index.reshape(-1), rows.repeat_interleave(index.size(1))])
            scatter = torch.sparse_coo_tensor(
                pattern,
                grad_out.reshape(-1),
                (keys.size(0), index.size(0)),
                check_invariants=False,
            )
            grad_keys = torch.sparse.mm(scatter, queries)
        return grad_queries, grad_keys, None


def _sampled_dot_csr(queries: Tensor, keys: Tensor, index: Tensor) -> Tensor:
    n, k = index.shape
    if n == 0:
        return queries.new_zeros(0, k)
    # A CSR pattern needs sorted, distinct columns per row. Sort each row (the result is
    # returned in the original order) and move the r-th repeat of a column to copy r of keys.
    sorted_index, order = index.sort(dim=1)
    position = torch.arange(k, device=index.device).expand(n, k)
    run_start = torch.ones_like(sorted_index, dtype=torch.bool)
    run_start[:, 1:] = sorted_index[:, 1:] != sorted_index[:, :-1]
    repeat = position - torch.where(run_start, position, 0).cummax(dim=1).values
    copies = int(repeat.max()) + 1
    columns, resort = (repeat * keys.size(0) + sorted_index).sort(dim=1)
    crow = torch.arange(0, n * k + 1, k, device=index.device)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        pattern = torch.sparse_csr_tensor(
            crow,
            columns.reshape(-1),
            queries.new_zeros(n * k),
            size=(n, copies * keys.size(0)),
            check_invariants=False,
        )
    table = keys if copies == 1 else keys.repeat(copies, 1)
    values = torch.sparse.sampled_addmm(pattern, queries, table.t(), beta=0.0).values()
    original_position = order.gather(1, resort)
    return torch.empty_like(values.view(n, k)).scatter_(1, original_position, values.view(n, k))


def _sampled_dot_gather(queries: Tensor, keys: Tensor, index: Tensor) -> Tensor:
    n, k = index.shape
    out = queries.new_empty(n, k)
    per_anchor = k * keys.size(1) * keys.element_size()
    chunk = max(1, _GATHER_CHUNK_BYTES // per_anchor)
    for start in range(0, n, chunk):
        rows = slice(start, start + chunk)
        gathered = keys[index[rows]]  # [chunk, K, hidden]
        out[rows] = torch.bmm(gathered, queries[rows].unsqueeze(-1)).squeeze(-1)
    return out
