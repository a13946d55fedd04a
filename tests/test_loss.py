"""The TC loss (:mod:`taco_fairseq.loss`) against the plain reference of TACO §3.1
(``tests/reference.py``): values, accuracies and gradients on padded batches drawn by the real
sampler, with repeated negatives, several K, detached and trained keys, both forward paths (CSR
on the CPU; the gather of other devices, forced here on the CPU), any input dtype and autocast
(property-based, hypothesis)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from reference import reference_info_nce, unit_rows
from taco_fairseq import loss as loss_module
from taco_fairseq.loss import global_bias, info_nce, normalize_rows, sampled_dot
from taco_fairseq.sampling import SamplingOptions, sample_positions

SEQ_LEN, HIDDEN, TEMPERATURE = 9, 16, 0.07
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _use_gather_path(monkeypatch, chunk_bytes=None):
    """Run the forward of non-CPU devices (batched gathers) on the CPU."""
    monkeypatch.setattr(loss_module, "_sampled_dot_csr", loss_module._sampled_dot_gather)
    if chunk_bytes:
        monkeypatch.setattr(loss_module, "_GATHER_CHUNK_BYTES", chunk_bytes)


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


def _padded_batch(seed, k, lengths):
    """fairseq-layout ``[seq_len, batch, hidden]`` states h and embeddings e (one position
    with h == e, a zero global-bias vector) and positions drawn by the sampler."""
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(SEQ_LEN, len(lengths), HIDDEN, generator=g)
    embedding = torch.randn(SEQ_LEN, len(lengths), HIDDEN, generator=g)
    embedding[2, 0] = hidden[2, 0]
    candidate = np.arange(SEQ_LEN)[None, :] < np.array(lengths)[:, None]
    sampled = sample_positions(
        candidate, candidate, SamplingOptions(5, k), np.random.default_rng(seed)
    )
    return hidden, embedding, [torch.from_numpy(a) for a in sampled]


def _loss_and_gradients(implementation, hidden, embedding, positions, detach_keys):
    h, e = hidden.clone().requires_grad_(), embedding.clone().requires_grad_()
    vectors = global_bias(h, e).transpose(0, 1)  # [batch, seq_len, hidden], as the criterion
    loss, correct = implementation(vectors, *positions, TEMPERATURE, detach_keys)
    weight = torch.linspace(0.5, 1.5, len(loss))  # distinct weights per anchor
    (loss * weight).sum().backward()
    return loss.detach(), correct, h.grad, e.grad


@pytest.mark.parametrize("path", ["csr", "gather"])
@pytest.mark.parametrize("detach_keys", [True, False])
@pytest.mark.parametrize("k", [1, 7, 50])
@pytest.mark.parametrize("lengths", [(9, 6, 3, 1), (9, 9, 9)], ids=["padded", "full"])
@pytest.mark.parametrize("seed", range(2))
def test_matches_the_reference(seed, lengths, k, detach_keys, path, monkeypatch):
    if path == "gather":  # in chunks of 2 anchors
        _use_gather_path(monkeypatch, 2 * (k + 1) * HIDDEN * 4)
    hidden, embedding, positions = _padded_batch(seed, k, lengths)
    anchor, _, negative = positions
    if lengths == (9, 9, 9):  # every position is an anchor: the path without a query copy
        assert torch.equal(anchor, torch.arange(SEQ_LEN * len(lengths)))
    if k > 1:  # few candidates: negatives repeat within an anchor's row
        assert (negative.sort(dim=1).values.diff(dim=1) == 0).any()

    def fast(vectors, anchor, positive, negative, temperature, detach_keys):
        return info_nce(vectors, anchor, positive, negative, temperature, detach_keys)

    got = _loss_and_gradients(fast, hidden, embedding, positions, detach_keys)
    want = _loss_and_gradients(reference_info_nce, hidden, embedding, positions, detach_keys)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert torch.equal(got[1], want[1])
    for got_grad, want_grad in zip(got[2:], want[2:]):
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-5)
    if detach_keys:  # rows only ever used as keys get no gradient
        rows = torch.ones(len(lengths) * SEQ_LEN, dtype=torch.bool)
        rows[anchor] = False
        assert not got[2].transpose(0, 1).reshape(-1, HIDDEN)[rows].any()


@pytest.mark.parametrize("path", ["csr", "gather"])
@pytest.mark.parametrize("seed", range(3))
def test_sampled_dot_forward_and_gradients(path, seed, monkeypatch):
    if path == "gather":
        _use_gather_path(monkeypatch, 3 * 9 * 12 * 4)  # 3 anchors per chunk
    g = torch.Generator().manual_seed(seed)
    queries, keys = torch.randn(40, 12, generator=g), torch.randn(30, 12, generator=g)
    index = torch.randint(30, (40, 9), generator=g)  # many repeats within a row
    q1, k1 = queries.clone().requires_grad_(), keys.clone().requires_grad_()
    q2, k2 = queries.clone().requires_grad_(), keys.clone().requires_grad_()
    out = sampled_dot(q1, k1, index)
    ref = (k2[index] * q2.unsqueeze(1)).sum(-1)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    weight = torch.randn(out.shape, generator=g)
    (out * weight).sum().backward()
    (ref * weight).sum().backward()
    torch.testing.assert_close(q1.grad, q2.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k1.grad, k2.grad, rtol=1e-5, atol=1e-5)


def test_normalize_rows_value_and_gradient():
    g = torch.Generator().manual_seed(0)
    vectors = torch.randn(6, 5, generator=g)
    vectors[1] = 0.0  # norm 0: no direction
    vectors[2] *= 1e-8  # norm below NORM_EPS: no direction
    vectors[3] *= 1e3
    weight = torch.randn(6, 5, generator=g)
    results = []
    for normalize in (normalize_rows, unit_rows):
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
    torch.testing.assert_close(z, unit_rows(view).reshape(12, 5))
    weight = torch.randn(12, 5, generator=g)
    (z * weight).sum().backward()
    reference = states.detach().clone().requires_grad_()
    (unit_rows(reference.transpose(0, 1)).reshape(12, 5) * weight).sum().backward()
    torch.testing.assert_close(states.grad, reference.grad)


@pytest.mark.parametrize("path", ["csr", "gather"])
def test_float32_under_autocast(path, monkeypatch):
    """--amp runs the criterion under autocast, which casts matrix products to half precision;
    the TC loss and its gradient must still be the float32 ones."""
    if path == "gather":
        _use_gather_path(monkeypatch)
    g = torch.Generator().manual_seed(0)
    vectors = torch.randn(200, 64, generator=g)
    anchor = torch.arange(100)
    negative = torch.randint(100, 200, (100, 50), generator=g)
    results = []
    for autocast in (False, True):
        v = vectors.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = info_nce(v, anchor, anchor + 100, negative, 0.07).loss
            loss.sum().backward()  # backward inside the region too
        assert loss.dtype == torch.float32
        results.append((loss.detach(), v.grad))
    (loss32, grad32), (loss_amp, grad_amp) = results
    torch.testing.assert_close(loss_amp, loss32, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad_amp, grad32, rtol=1e-4, atol=1e-6)


@st.composite
def tc_tables(draw):
    """A table of vectors (norms from 0.1 to 1000, some exactly zero), anchors with positives
    and negatives among its rows, a temperature and an input dtype."""
    rows = draw(st.integers(2, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    direction = rng.standard_normal((rows, draw(st.integers(1, 8))))
    direction /= np.maximum(np.linalg.norm(direction, axis=1, keepdims=True), 1e-12)
    vectors = direction * 10.0 ** rng.uniform(-1, 3, size=(rows, 1))
    vectors[rng.random(rows) < 0.3] = 0.0  # zero global-bias vectors
    anchors = draw(st.integers(0, 6))
    anchor = rng.integers(0, rows, anchors)
    positive = (anchor + rng.integers(1, rows, anchors)) % rows
    negative = rng.integers(0, rows, (anchors, draw(st.integers(1, 5))))
    return (vectors, anchor, positive, negative, draw(st.sampled_from([0.07, 0.01, 1.0])),
            draw(st.sampled_from(sorted(DTYPES))), draw(st.booleans()))


@settings(max_examples=40, deadline=None)
@given(tc_tables())
def test_finite_float32_and_equal_to_the_float64_reference(case):
    vectors, anchor, positive, negative, temperature, dtype, detach = case
    v = torch.tensor(vectors).to(DTYPES[dtype]).requires_grad_()
    index = [torch.from_numpy(a).long() for a in (anchor, positive, negative)]
    out = info_nce(v, *index, temperature, detach_keys=detach)
    assert out.loss.dtype == torch.float32 and out.loss.shape == (len(anchor),)
    assert torch.isfinite(out.loss).all() and (out.loss >= -1e-5).all()
    out.loss.sum().backward()
    assert torch.isfinite(v.grad.float()).all()
    # on the same (rounded) inputs; vectors shorter than NORM_EPS count as 0
    reference, _ = reference_info_nce(v.detach().double(), *index, temperature)
    torch.testing.assert_close(out.loss.double(), reference, rtol=1e-4, atol=1e-4)


def test_zero_vectors_in_half_precision_have_no_direction_and_no_gradient():
    """Cosine 0 and no gradient, so half-precision gradients stay finite (F.normalize's 1/eps
    slope would overflow float16); all scores 0 give log(K + 1), and a tie is not correct."""
    for dtype in (torch.bfloat16, torch.float16):
        vectors = torch.zeros(6, 4, dtype=dtype, requires_grad=True)
        out = info_nce(vectors, torch.tensor([0, 1]), torch.tensor([1, 0]),
                       torch.tensor([[3, 4], [5, 5]]), temperature=0.07)
        assert out.loss.dtype == torch.float32
        torch.testing.assert_close(out.loss, torch.full((2,), math.log(3.0)))
        assert not out.correct.any()
        out.loss.sum().backward()
        assert torch.equal(vectors.grad, torch.zeros_like(vectors.grad))
    vectors = torch.zeros(4, 8, dtype=torch.float16)
    vectors[1:] = torch.randn(3, 8).half()
    vectors.requires_grad_()
    info_nce(vectors, torch.tensor([0]), torch.tensor([1]), torch.tensor([[2, 3]]),
             0.07).loss.sum().backward()
    assert torch.equal(vectors.grad, torch.zeros_like(vectors.grad))
    assert torch.allclose(F.normalize(vectors.detach().float(), dim=-1)[0], torch.zeros(8))


def test_empty_anchor_set():
    v = torch.randn(4, 3, requires_grad=True)
    empty = torch.zeros(0, dtype=torch.long)
    out = info_nce(v, empty, empty, torch.zeros(0, 5, dtype=torch.long), 0.07)
    assert out.loss.shape == (0,)
    out.loss.sum().backward()
    assert torch.equal(v.grad, torch.zeros_like(v))


@pytest.mark.parametrize("path", ["csr", "gather"])
def test_float64_stays_float64_and_passes_gradcheck(path, monkeypatch):
    """Full precision is at least float32: float64 vectors are not rounded to float32, so
    the analytic gradient (custom normalize and sampled-product backward) is checked against
    finite differences."""
    if path == "gather":
        _use_gather_path(monkeypatch, 3 * 4 * 5 * 8)
    g = torch.Generator().manual_seed(0)
    vectors = torch.randn(10, 5, dtype=torch.float64, generator=g).requires_grad_()
    anchor, positive = torch.tensor([0, 3, 4, 7]), torch.tensor([1, 2, 5, 6])
    negative = torch.randint(10, (4, 3), generator=g)

    def loss(v):
        return info_nce(v, anchor, positive, negative, 0.5, detach_keys=False).loss

    assert loss(vectors).dtype == torch.float64
    assert torch.autograd.gradcheck(loss, (vectors,))


def test_global_bias_is_float32_difference():
    h = torch.randn(2, 3, 4, dtype=torch.float16)
    e = torch.randn(2, 3, 4, dtype=torch.float16)
    g = global_bias(h, e)
    assert g.dtype == torch.float32
    torch.testing.assert_close(g, h.float() - e.float())
    assert global_bias(h.double(), e.double()).dtype == torch.float64
    with pytest.raises(ValueError, match="same"):
        global_bias(h, e[:, :2])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": 0.0}, "temperature"),
        ({"negative": torch.zeros(2, 0, dtype=torch.long)}, "negative"),
        ({"positive": torch.zeros(3, dtype=torch.long)}, "positive"),
        ({"vectors": torch.randn(5)}, "vectors"),
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
