"""The TC loss against a straightforward computation of its formula (TACO §3.1)."""

import math

import pytest
import torch
import torch.nn.functional as F

from taco_fairseq import contrastive
from taco_fairseq.loss import NORM_EPS, global_bias, info_nce, sampled_dot


def reference_info_nce(vectors, anchor, positive, negative, temperature):
    """One anchor at a time, exactly as the formula reads."""
    losses, correct = [], []
    for n in range(len(anchor)):
        a = vectors[anchor[n]]

        def cos(b):
            return a.dot(b) / (max(a.norm(), NORM_EPS) * max(b.norm(), NORM_EPS))

        pos = cos(vectors[positive[n]]) / temperature
        negs = torch.stack([cos(vectors[j]) / temperature for j in negative[n]])
        denominator = torch.exp(pos) + torch.exp(negs).sum()
        losses.append(-torch.log(torch.exp(pos) / denominator))
        correct.append(bool(pos > negs.max()))
    return torch.stack(losses), torch.tensor(correct)


def test_hand_computed_value():
    # anchor (1, 0); positive (1, 1) at 45 degrees; negatives (0, 1) and (-1, 0)
    vectors = torch.tensor([[1.0, 0.0], [2.0, 2.0], [0.0, 3.0], [-1.0, 0.0]])
    out = info_nce(
        vectors, torch.tensor([0]), torch.tensor([1]), torch.tensor([[2, 3]]), temperature=0.5
    )
    s_pos, s_neg = math.cos(math.pi / 4) / 0.5, [0.0 / 0.5, -1.0 / 0.5]
    expected = -s_pos + math.log(math.exp(s_pos) + sum(math.exp(s) for s in s_neg))
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)
    assert out.correct.tolist() == [True]


@pytest.mark.parametrize("seed", range(5))
def test_matches_reference_on_padded_batches(seed):
    g = torch.Generator().manual_seed(seed)
    batch, seq_len, hidden, k = 4, 9, 16, 7
    hidden_states = torch.randn(batch, seq_len, hidden, generator=g)
    embeddings = torch.randn(batch, seq_len, hidden, generator=g)
    lengths = torch.tensor([9, 6, 3, 1])
    vectors = global_bias(hidden_states, embeddings).flatten(0, 1)
    # anchors: every real token of rows with >= 2 tokens; positives in the same row;
    # negatives from other rows' real tokens (duplicates included)
    real = [(b, t) for b in range(batch) for t in range(lengths[b])]
    anchor, positive, negative = [], [], []
    for b, t in real:
        if lengths[b] < 2:
            continue
        anchor.append(b * seq_len + t)
        positive.append(b * seq_len + (t + 1) % int(lengths[b]))
        others = [ob * seq_len + ot for ob, ot in real if ob != b]
        picks = torch.randint(len(others), (k,), generator=g)
        negative.append([others[i] for i in picks])
    anchor, positive, negative = map(torch.tensor, (anchor, positive, negative))

    out = info_nce(vectors, anchor, positive, negative, temperature=0.07)
    ref_loss, ref_correct = reference_info_nce(vectors, anchor, positive, negative, 0.07)
    torch.testing.assert_close(out.loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert torch.equal(out.correct, ref_correct)


def _random_case(seed, n=40, rows=30, hidden=12, k=9):
    g = torch.Generator().manual_seed(seed)
    queries = torch.randn(n, hidden, generator=g)
    keys = torch.randn(rows, hidden, generator=g)
    index = torch.randint(rows, (n, k), generator=g)  # many repeats within a row
    return queries, keys, index


@pytest.mark.parametrize("path", ["csr", "gather"])
@pytest.mark.parametrize("seed", range(3))
def test_sampled_dot_forward_and_gradients_match_gather(path, seed, monkeypatch):
    if path == "gather":  # the non-CPU path, run on CPU
        monkeypatch.setattr(contrastive, "_sampled_dot_csr", contrastive._sampled_dot_gather)
        monkeypatch.setattr(contrastive, "_GATHER_CHUNK_BYTES", 3 * 9 * 12 * 4)  # 3 anchors
    queries, keys, index = _random_case(seed)
    q1, k1 = queries.clone().requires_grad_(), keys.clone().requires_grad_()
    q2, k2 = queries.clone().requires_grad_(), keys.clone().requires_grad_()
    out = sampled_dot(q1, k1, index)
    ref = (k2[index] * q2.unsqueeze(1)).sum(-1)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 100))
    (out * weight).sum().backward()
    (ref * weight).sum().backward()
    torch.testing.assert_close(q1.grad, q2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k1.grad, k2.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("detach_keys", [True, False])
def test_gradients_match_reference(detach_keys):
    g = torch.Generator().manual_seed(0)
    vectors = torch.randn(20, 8, generator=g)
    anchor = torch.arange(0, 10)
    positive = (anchor + 1) % 10
    negative = torch.randint(10, 20, (10, 6), generator=g)
    v1, v2 = vectors.clone().requires_grad_(), vectors.clone().requires_grad_()
    info_nce(v1, anchor, positive, negative, 0.1, detach_keys=detach_keys).loss.sum().backward()

    # reference: keys detached by hand when asked
    z = F.normalize(v2, dim=-1, eps=NORM_EPS)
    keys = z.detach() if detach_keys else z
    pos = (z[anchor] * keys[positive]).sum(-1) / 0.1
    neg = (z[anchor].unsqueeze(1) * keys[negative]).sum(-1) / 0.1
    (torch.logsumexp(torch.cat([pos[:, None], neg], 1), 1) - pos).sum().backward()
    torch.testing.assert_close(v1.grad, v2.grad, rtol=1e-5, atol=1e-6)
    if detach_keys:  # rows used only as negatives get no gradient
        assert v1.grad[10:].abs().max() == 0
    else:
        assert v1.grad[10:].abs().max() > 0


def test_zero_vectors_and_low_precision_stay_finite():
    vectors = torch.zeros(6, 4, dtype=torch.bfloat16, requires_grad=True)
    out = info_nce(
        vectors,
        torch.tensor([0, 1]),
        torch.tensor([1, 0]),
        torch.tensor([[3, 4], [5, 5]]),
        temperature=0.07,
    )
    assert out.loss.dtype == torch.float32
    # all scores 0: loss = log(K + 1), and a tie is not a correct answer
    torch.testing.assert_close(out.loss, torch.full((2,), math.log(3.0)))
    assert not out.correct.any()
    out.loss.sum().backward()
    assert torch.isfinite(vectors.grad.float()).all()


def test_global_bias_is_float32_difference():
    h = torch.randn(2, 3, 4, dtype=torch.float16)
    e = torch.randn(2, 3, 4, dtype=torch.float16)
    g = global_bias(h, e)
    assert g.dtype == torch.float32
    torch.testing.assert_close(g, h.float() - e.float())
    with pytest.raises(ValueError, match="same"):
        global_bias(h, e[:, :2])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": 0.0}, "temperature"),
        ({"negative": torch.zeros(2, 0, dtype=torch.long)}, "negative"),
        ({"positive": torch.zeros(3, dtype=torch.long)}, "positive"),
    ],
)
def test_bad_arguments_raise(kwargs, message):
    args = {
        "vectors": torch.randn(5, 3),
        "anchor": torch.tensor([0, 1]),
        "positive": torch.tensor([1, 0]),
        "negative": torch.tensor([[3], [4]]),
        "temperature": 0.07,
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        info_nce(**args)
