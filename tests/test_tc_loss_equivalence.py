"""The fast TC loss (:func:`info_nce`) against the straightforward computation that gathers an
``[anchors, K, hidden]`` tensor, on random padded batches sampled by the real sampler: losses,
accuracies and gradients, with repeated negatives, several K, detached and trained keys, and
both forward paths (CSR on CPU; the gather used on other devices, forced here on CPU)."""

import numpy as np
import pytest
import torch

from taco_fairseq import contrastive
from taco_fairseq.loss import NORM_EPS, global_bias, info_nce, normalize_rows
from taco_fairseq.sampling import sample_contrastive_positions

SEQ_LEN, HIDDEN, TEMPERATURE = 9, 16, 0.07


def _padded_batch(seed, k, lengths):
    """fairseq-layout ``[seq_len, batch, hidden]`` states h and embeddings e (one position
    with h == e, a zero global-bias vector) and positions drawn by the sampler."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(SEQ_LEN, len(lengths), HIDDEN, generator=g)
    embedding = torch.randn(SEQ_LEN, len(lengths), HIDDEN, generator=g)
    embedding[2, 0] = hidden[2, 0]
    candidate = np.arange(SEQ_LEN)[None, :] < np.array(lengths)[:, None]
    sampled = sample_contrastive_positions(
        candidate, candidate, 5, k, np.random.default_rng(seed)
    )
    return hidden, embedding, [torch.from_numpy(a) for a in sampled]


def _unit_rows(vectors):
    """Rows divided by their norm; rows shorter than NORM_EPS have no direction: 0."""
    norm = vectors.norm(dim=-1, keepdim=True)
    return torch.where(norm >= NORM_EPS, vectors / norm.clamp(min=NORM_EPS), 0.0)


def _gather_reference(vectors, anchor, positive, negative, detach_keys):
    z = _unit_rows(vectors.reshape(-1, HIDDEN))
    keys = z.detach() if detach_keys else z
    queries = z[anchor]
    positive_score = (queries * keys[positive]).sum(-1) / TEMPERATURE
    negative_score = (queries.unsqueeze(1) * keys[negative]).sum(-1) / TEMPERATURE
    logits = torch.cat([positive_score[:, None], negative_score], dim=1)
    loss = torch.logsumexp(logits, dim=1) - positive_score
    return loss, positive_score > negative_score.max(dim=1).values


def _loss_and_gradients(implementation, hidden, embedding, positions, detach_keys):
    h, e = hidden.clone().requires_grad_(), embedding.clone().requires_grad_()
    vectors = global_bias(h, e).transpose(0, 1)  # [batch, seq_len, hidden], as the criterion
    loss, correct = implementation(vectors, *positions, detach_keys)
    weight = torch.linspace(0.5, 1.5, len(loss))  # distinct weights per anchor
    (loss * weight).sum().backward()
    return loss.detach(), correct, h.grad, e.grad


@pytest.mark.parametrize("path", ["csr", "gather"])
@pytest.mark.parametrize("detach_keys", [True, False])
@pytest.mark.parametrize("k", [1, 7, 50])
@pytest.mark.parametrize("lengths", [(9, 6, 3, 1), (9, 9, 9)], ids=["padded", "full"])
@pytest.mark.parametrize("seed", range(2))
def test_fast_path_matches_gather_reference(seed, lengths, k, detach_keys, path, monkeypatch):
    if path == "gather":  # the non-CPU forward, in chunks of 2 anchors
        monkeypatch.setattr(contrastive, "_sampled_dot_csr", contrastive._sampled_dot_gather)
        monkeypatch.setattr(contrastive, "_GATHER_CHUNK_BYTES", 2 * (k + 1) * HIDDEN * 4)
    hidden, embedding, positions = _padded_batch(seed, k, lengths)
    anchor, _, negative = positions
    if lengths == (9, 9, 9):  # every position is an anchor: the path without a query copy
        assert torch.equal(anchor, torch.arange(SEQ_LEN * len(lengths)))
    if k > 1:  # few candidates: negatives repeat within an anchor's row
        assert (negative.sort(dim=1).values.diff(dim=1) == 0).any()

    def fast(vectors, anchor, positive, negative, detach_keys):
        return info_nce(vectors, anchor, positive, negative, TEMPERATURE, detach_keys)

    got = _loss_and_gradients(fast, hidden, embedding, positions, detach_keys)
    want = _loss_and_gradients(_gather_reference, hidden, embedding, positions, detach_keys)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert torch.equal(got[1], want[1])
    for got_grad, want_grad in zip(got[2:], want[2:]):
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-5)


def test_normalize_rows_matches_the_straightforward_computation():
    g = torch.Generator().manual_seed(0)
    vectors = torch.randn(6, 5, generator=g)
    vectors[1] = 0.0  # norm 0: no direction
    vectors[2] *= 1e-8  # norm below NORM_EPS: no direction
    vectors[3] *= 1e3
    weight = torch.randn(6, 5, generator=g)
    results = []
    for normalize in (normalize_rows, _unit_rows):
        leaf = vectors.clone().requires_grad_()
        z = normalize(leaf)
        (z * weight).sum().backward()
        results.append((z.detach(), leaf.grad))
    (z_fast, grad_fast), (z_ref, grad_ref) = results
    torch.testing.assert_close(z_fast, z_ref, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad_fast, grad_ref, rtol=1e-5, atol=1e-6)
    assert not z_fast[1:3].any() and not grad_fast[1:3].any()  # no direction, no gradient
    assert grad_fast[[0, 3, 4, 5]].abs().min(dim=1).values.gt(0).all()


def test_normalize_rows_reads_a_transposed_view_in_row_major_order():
    g = torch.Generator().manual_seed(1)
    states = torch.randn(4, 3, 5, generator=g, requires_grad=True)  # [seq_len, batch, hidden]
    view = states.transpose(0, 1)  # [batch, seq_len, hidden], not contiguous
    z = normalize_rows(view)
    assert z.shape == (12, 5) and z.is_contiguous()
    torch.testing.assert_close(z, _unit_rows(view).reshape(12, 5))
    weight = torch.randn(12, 5, generator=g)
    (z * weight).sum().backward()
    reference = states.detach().clone().requires_grad_()
    (_unit_rows(reference.transpose(0, 1)).reshape(12, 5) * weight).sum().backward()
    torch.testing.assert_close(states.grad, reference.grad)
