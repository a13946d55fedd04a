"""The one plain reference of the TC loss that the tests compare :mod:`taco_fairseq.loss`
against: the formula of TACO §3.1 with an ``[anchors, K, hidden]`` gather, in the dtype of its
input (float64 for a tight check)."""

import torch

from taco_fairseq.loss import NORM_EPS


def unit_rows(vectors):
    """Rows divided by their norm; rows shorter than NORM_EPS have no direction: 0."""
    norm = vectors.norm(dim=-1, keepdim=True)
    return torch.where(norm >= NORM_EPS, vectors / norm.clamp(min=NORM_EPS), 0.0)


def reference_info_nce(vectors, anchor, positive, negative, temperature, detach_keys=True):
    """``(loss [anchors], correct [anchors])`` of InfoNCE with cosine scores / τ:
    ``loss = −log(exp s_pos / (exp s_pos + Σ_k exp s_k))``, ``correct = s_pos > max_k s_k``.

    Args:
        vectors: ``[..., hidden]``, rows in row-major order of ``...``.
        anchor, positive: ``[anchors]`` row indices; negative: ``[anchors, K]``.
        detach_keys: positives and negatives without gradient.
    """
    z = unit_rows(vectors.reshape(-1, vectors.size(-1)))
    keys = z.detach() if detach_keys else z
    queries = z[anchor]
    positive_score = (queries * keys[positive]).sum(-1) / temperature
    negative_score = (queries.unsqueeze(1) * keys[negative]).sum(-1) / temperature
    logits = torch.cat([positive_score[:, None], negative_score], dim=1)
    loss = torch.logsumexp(logits, dim=1) - positive_score
    return loss, positive_score > negative_score.max(dim=1).values
