"""The token-alignment contrastive (TC) loss of TACO (Fu et al., ACL 2022, §3.1), pure torch:

* global bias of token j of sequence i:   g_j^i = h_j^i − e_j^i
* score:                                  f(a, b) = cos(a, b) / τ
* InfoNCE for an anchor x with positive c and negatives c_1^-, …, c_K^-:
      L(g_x, g_c) = −log( exp f(g_x, g_c) / (exp f(g_x, g_c) + Σ_k exp f(g_x, g_{c_k^-})) )

Positions are flat row indices of the vectors, as drawn by :mod:`taco_fairseq.sampling`.
"""

import contextlib
import warnings
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

#: Vectors with a smaller norm have no direction: their cosine with anything is 0 (never NaN)
#: and they get no gradient (a 1/norm slope would overflow half precision).
NORM_EPS = 1e-6

#: Upper bound, in bytes, of the [chunk, K, hidden] block that the gather path materializes.
_GATHER_CHUNK_BYTES = 64 * 2**20


class InfoNCEOutput(NamedTuple):
    """Per anchor (``[anchors]``): ``loss``, float32 nats, and ``correct``, whether the positive
    scores strictly above all K negatives."""

    loss: Tensor
    correct: Tensor


def global_bias(hidden: Tensor, embedding: Tensor) -> Tensor:
    """Global bias g = h − e (TACO §3.1), float32 (float64 from float64 inputs), of last-layer
    states h and the static embeddings e of the same tokens, both ``[..., hidden]``.

    Raises:
        ValueError: if the shapes differ.
    """
    if hidden.shape != embedding.shape:
        raise ValueError(f"hidden states {tuple(hidden.shape)} and embeddings "
                         f"{tuple(embedding.shape)} must have the same [batch, seq_len, hidden] "
                         "shape")
    return at_least_float32(hidden) - at_least_float32(embedding)


def at_least_float32(tensor: Tensor) -> Tensor:
    """``tensor`` in float32 if it is of a narrower float type (float16, bfloat16), else as it
    is (float32, float64): the TC loss is computed in full precision."""
    return tensor.to(torch.promote_types(tensor.dtype, torch.float32))


def info_nce(vectors: Tensor, anchor: Tensor, positive: Tensor, negative: Tensor,
             temperature: float, detach_keys: bool = True) -> InfoNCEOutput:
    """InfoNCE with cosine-similarity scores over sampled rows of ``vectors`` (TACO §3.1).

    With ``z = vectors / ‖vectors‖`` row-wise (:func:`normalize_rows`) and, for anchor ``n``,
    ``s_pos = z[anchor[n]]·z[positive[n]] / τ`` and ``s_k = z[anchor[n]]·z[negative[n, k]] / τ``:
    ``loss[n] = logsumexp([s_pos, s_1, …, s_K]) − s_pos``, in float32 also under autocast
    (float64 from float64 ``vectors``),
    without an ``[anchors, K, hidden]`` tensor (:func:`sampled_dot`).

    Args:
        vectors: ``[..., hidden]`` (e.g. ``[batch, seq_len, hidden]``, row ``b * seq_len + t``;
            views are read in place), any float dtype.
        anchor, positive: ``[anchors]`` int64 rows of the anchors and their positives.
        negative: ``[anchors, K]`` int64 rows of the negatives, K >= 1 (repeats allowed).
        temperature: τ > 0.
        detach_keys: positives and negatives carry no gradient (as the official code).

    Raises:
        ValueError: on inconsistent shapes or a non-positive temperature.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if vectors.dim() < 2:
        raise ValueError(f"vectors must be [..., hidden], got shape {tuple(vectors.shape)}")
    if anchor.dim() != 1 or positive.shape != anchor.shape:
        raise ValueError(f"anchor and positive must both be [anchors], got "
                         f"{tuple(anchor.shape)} and {tuple(positive.shape)}")
    if negative.dim() != 2 or negative.size(0) != anchor.size(0) or negative.size(1) < 1:
        raise ValueError(f"negative must be [anchors={anchor.size(0)}, K>=1], got "
                         f"{tuple(negative.shape)}")
    with full_precision(vectors.device):
        z = normalize_rows(at_least_float32(vectors))
        keys = z.detach() if detach_keys else z
        index = torch.cat([positive.unsqueeze(1), negative], dim=1)  # [anchors, 1 + K]
        every_row = len(anchor) == len(z) and torch.equal(
            anchor, torch.arange(len(z), device=anchor.device))
        queries = z if every_row else z.index_select(0, anchor)  # no copy if all rows anchor
        logits = sampled_dot(queries, keys, index) / temperature
        positive_score = logits[:, 0]
        loss = torch.logsumexp(logits, dim=1) - positive_score
    correct = positive_score.detach() > logits.detach()[:, 1:].max(dim=1).values
    return InfoNCEOutput(loss, correct)


def normalize_rows(vectors: Tensor) -> Tensor:
    """``[rows, hidden]``: ``vectors`` (``[..., hidden]``, any strides) over their norm, 0 below
    ``NORM_EPS``, same dtype, with few temporaries; backward ``dv = (dz − z (z·dz)) / ‖v‖``, 0
    for short rows."""
    return _NormalizeRows.apply(vectors)


class _NormalizeRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, vectors):
        norm = torch.linalg.vector_norm(vectors, dim=-1, keepdim=True)
        short = norm < NORM_EPS
        z = torch.empty(vectors.shape, dtype=vectors.dtype, device=vectors.device)
        torch.div(vectors, norm.clamp(min=NORM_EPS), out=z)  # contiguous whatever the strides
        z = z.masked_fill_(short, 0.0).view(-1, z.size(-1))
        ctx.shape = vectors.shape
        ctx.save_for_backward(z, norm.reshape(-1, 1), short.reshape(-1, 1))
        return z

    @staticmethod
    def backward(ctx, grad_z):
        z, norm, short = ctx.saved_tensors
        with full_precision(grad_z.device):
            buffer = torch.mul(z, grad_z)  # one [rows, hidden] buffer: z * dz, then the result
            radial = buffer.sum(dim=1, keepdim=True)
            grad = torch.addcmul(grad_z, z, radial, value=-1, out=buffer)
            grad.div_(norm.clamp(min=NORM_EPS)).masked_fill_(short, 0.0)
        return grad.view(ctx.shape)


def full_precision(device: torch.device):
    """A context in which autocast is off on ``device`` (where torch has autocast for it)."""
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device_type=device.type, enabled=False)
    return contextlib.nullcontext()


def sampled_dot(queries: Tensor, keys: Tensor, index: Tensor) -> Tensor:
    """``[n, K]`` float32 ``out[n, k] = queries[n] · keys[index[n, k]]`` of ``[n, hidden]``
    queries, ``[rows, hidden]`` keys (float32) and an ``[n, K]`` int64 index, without an ``[n,
    K, hidden]`` tensor: on the CPU a sampled product over the index as a CSR pattern, else a
    gather in chunks of at most 64 MiB; backward by ``embedding_bag`` and a sparse product."""
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
        queries, keys, index = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_queries = grad_keys = None
        with full_precision(grad_out.device):
            if ctx.needs_input_grad[0]:
                # grad_queries[n] = Σ_k grad_out[n, k] · keys[index[n, k]]
                grad_queries = F.embedding_bag(index, keys, per_sample_weights=grad_out,
                                               mode="sum")
            if ctx.needs_input_grad[1]:
                # grad_keys[r] = Σ_{(n, k): index[n, k] = r} grad_out[n, k] · queries[n]
                rows = torch.arange(index.size(0), device=index.device)
                pattern = torch.stack([index.reshape(-1),
                                       rows.repeat_interleave(index.size(1))])
                scatter = torch.sparse_coo_tensor(pattern, grad_out.reshape(-1), (
                    keys.size(0), index.size(0)), check_invariants=False)
                grad_keys = torch.sparse.mm(scatter, queries)
        return grad_queries, grad_keys, None


def _sampled_dot_csr(queries: Tensor, keys: Tensor, index: Tensor) -> Tensor:
    n, k = index.shape
    if n == 0:
        return queries.new_zeros(0, k)
    # A CSR pattern needs sorted, distinct columns per row: sort each row, keep the first of
    # each run of equal columns, and give every entry the value of its run.
    sorted_index, order = index.sort(dim=1)
    first = torch.ones_like(sorted_index, dtype=torch.bool)
    first[:, 1:] = sorted_index[:, 1:] != sorted_index[:, :-1]
    crow = F.pad(first.sum(dim=1).cumsum(dim=0), (1, 0))
    columns = sorted_index[first]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        pattern = torch.sparse_csr_tensor(crow, columns, queries.new_zeros(len(columns)),
                                          size=(n, keys.size(0)), check_invariants=False)
    values = torch.sparse.sampled_addmm(pattern, queries, keys.t(), beta=0.0).values()
    run = first.view(-1).cumsum(dim=0).sub_(1).view(n, k)  # each entry's distinct value
    return values.new_empty(n, k).scatter_(1, order, values[run])


def _sampled_dot_gather(queries: Tensor, keys: Tensor, index: Tensor) -> Tensor:
    n, k = index.shape
    out = queries.new_empty(n, k)
    chunk = max(1, _GATHER_CHUNK_BYTES // (k * keys.size(1) * keys.element_size()))
    for start in range(0, n, chunk):
        rows = slice(start, start + chunk)
        gathered = keys[index[rows]]  # [chunk, K, hidden]
        out[rows] = torch.bmm(gathered, queries[rows].unsqueeze(-1)).squeeze(-1)
    return out
