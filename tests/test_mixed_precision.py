"""Mixed precision and odd batches: the TC math runs in float32 whatever the input dtype or
autocast region, and never gives NaN/inf; property-based tests (hypothesis) over batch shapes,
padding, special tokens and every ``tc_positions``/``tc_embedding`` value."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fairseq.data import BaseWrapperDataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import fairseq_setup
from taco_fairseq import contrastive
from taco_fairseq.criterions.taco import TC_EMBEDDINGS
from taco_fairseq.loss import NORM_EPS, info_nce
from taco_fairseq.data.contrastive_sampling_dataset import TC_POSITIONS, ContrastiveSamplingDataset

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PROPERTY = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("path", ["csr", "gather"])
def test_tc_math_stays_float32_under_autocast(path, monkeypatch):
    """--amp runs the criterion under autocast, which casts matrix products to half precision;
    the TC loss and its gradient must still be the float32 ones."""
    if path == "gather":  # the path of GPUs (batched products), run on the CPU
        monkeypatch.setattr(contrastive, "_sampled_dot_csr", contrastive._sampled_dot_gather)
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
    hidden = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal((rows, hidden))
    direction /= np.maximum(np.linalg.norm(direction, axis=1, keepdims=True), 1e-12)
    vectors = direction * 10.0 ** rng.uniform(-1, 3, size=(rows, 1))
    vectors[rng.random(rows) < 0.3] = 0.0  # zero global-bias vectors
    anchors = draw(st.integers(0, 6))
    anchor = rng.integers(0, rows, anchors)
    positive = (anchor + rng.integers(1, rows, anchors)) % rows
    negative = rng.integers(0, rows, (anchors, draw(st.integers(1, 5))))
    temperature = draw(st.sampled_from([0.07, 0.01, 1.0]))
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    detach = draw(st.booleans())
    return vectors, anchor, positive, negative, temperature, dtype, detach


@PROPERTY
@given(tc_tables())
def test_info_nce_is_finite_float32_and_matches_float64(case):
    vectors, anchor, positive, negative, temperature, dtype, detach = case
    v = torch.tensor(vectors).to(DTYPES[dtype]).requires_grad_()
    index = [torch.from_numpy(a).long() for a in (anchor, positive, negative)]
    out = info_nce(v, *index, temperature, detach_keys=detach)
    assert out.loss.dtype == torch.float32 and out.loss.shape == (len(anchor),)
    assert torch.isfinite(out.loss).all() and (out.loss >= -1e-5).all()
    out.loss.sum().backward()
    assert torch.isfinite(v.grad.float()).all()

    # float64 reference on the same (rounded) inputs; vectors shorter than NORM_EPS count as 0
    x = v.detach().double()
    norm = x.norm(dim=-1, keepdim=True)
    z = torch.where(norm >= NORM_EPS, x / norm.clamp(min=NORM_EPS), 0.0)
    a, p, n = index
    logits = torch.cat([(z[a] * z[p]).sum(-1, keepdim=True),
                        (z[a].unsqueeze(1) * z[n]).sum(-1)], 1) / temperature
    reference = torch.logsumexp(logits, 1) - logits[:, 0]
    torch.testing.assert_close(out.loss.double(), reference, rtol=1e-4, atol=1e-4)


def test_empty_anchor_set():
    v = torch.randn(4, 3, requires_grad=True)
    empty = torch.zeros(0, dtype=torch.long)
    out = info_nce(v, empty, empty, torch.zeros(0, 5, dtype=torch.long), 0.07)
    assert out.loss.shape == (0,)
    out.loss.sum().backward()
    assert torch.equal(v.grad, torch.zeros_like(v))


class _FixedBatch(BaseWrapperDataset):
    """A dataset whose collater returns a prepared masked-LM batch."""

    def __init__(self, batch):
        super().__init__(None)
        self.batch = batch

    def collater(self, samples):
        return copy.deepcopy(self.batch)


@st.composite
def masked_lm_batches(draw, vocab=2000, pad=1, bos=0, eos=2, mask=2000, max_len=12):
    """A right-padded batch as fairseq's masked_lm collates it: rows of 0..max_len tokens
    (0 = an all-padding row) starting with <s> and ending with </s> (plus stray </s> inside),
    some positions masked (target = the token, input = <mask>)."""
    lengths = draw(st.lists(st.integers(0, max_len), min_size=1, max_size=6))
    seq_len = max(max(lengths), 1)
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    tokens = np.full((len(lengths), seq_len), pad)
    target = np.full_like(tokens, pad)
    for row, length in enumerate(lengths):
        tokens[row, :length] = rng.integers(4, vocab, length)
        tokens[row, :length][rng.random(length) < 0.1] = eos
        if length:
            tokens[row, 0], tokens[row, length - 1] = bos, eos
        masked = np.flatnonzero(rng.random(length) < draw(st.sampled_from([0.0, 0.15, 0.5])))
        target[row, masked] = tokens[row, masked]
        tokens[row, masked] = mask
    return {
        "id": torch.arange(len(lengths)),
        "nsentences": len(lengths),
        "ntokens": int(sum(lengths)),
        "net_input": {"src_tokens": torch.from_numpy(tokens),
                      "src_lengths": torch.tensor(lengths)},
        "target": torch.from_numpy(target),
    }


def _expected_anchors(batch, positions, exclude_special, cross_worker, pad=1, special=(0, 2)):
    """The anchors, written out position by position."""
    tokens = batch["net_input"]["src_tokens"].tolist()
    target = batch["target"].tolist()
    candidate = [[t != pad and not (exclude_special and t in special) for t in row]
                 for row in tokens]
    per_row = [sum(row) for row in candidate]
    anchors = []
    for r, row in enumerate(candidate):
        others = sum(per_row) - per_row[r]
        if per_row[r] < 2 or (others == 0 and not cross_worker):
            continue
        for c, is_candidate in enumerate(row):
            masked = target[r][c] != pad
            wanted = {"all": True, "masked": masked, "unmasked": not masked}[positions]
            if is_candidate and wanted:
                anchors.append(r * len(row) + c)
    return anchors, candidate


@PROPERTY
@given(batch=masked_lm_batches(), positions=st.sampled_from(TC_POSITIONS),
       exclude_special=st.booleans(), cross_worker=st.booleans(), k=st.integers(1, 8),
       window=st.sampled_from([3, 5, 9]))
def test_collated_positions_hold_the_sampler_invariants(
    batch, positions, exclude_special, cross_worker, k, window
):
    dataset = ContrastiveSamplingDataset(
        _FixedBatch(batch), pad_idx=1, excluded_tokens=(0, 2) if exclude_special else (),
        positions=positions, window=window, num_negatives=k, seed=1, cross_worker=cross_worker,
    )
    taco = dataset.collater([])["taco"]
    expected, candidate = _expected_anchors(batch, positions, exclude_special, cross_worker)
    assert taco["anchor"].tolist() == expected
    seq_len = batch["net_input"]["src_tokens"].size(1)
    flat = np.array(candidate).ravel()
    anchor, positive = taco["anchor"].numpy(), taco["positive"].numpy()
    assert np.all(positive // seq_len == anchor // seq_len) and np.all(positive != anchor)
    assert flat[positive].all()
    per_row = np.array(candidate).sum(1)
    if cross_worker:
        assert taco["candidates"].tolist() == np.flatnonzero(flat).tolist()
        assert np.array_equal(taco["anchor_row_length"].numpy(), per_row[anchor // seq_len])
        uniform = taco["negative_uniform"].numpy()
        assert uniform.shape == (len(anchor), k) and np.all((uniform >= 0) & (uniform < 1))
        assert taco["skipped"] == 0
    else:
        negative = taco["negative"].numpy()
        assert negative.shape == (len(anchor), k) and flat[negative].all()
        assert np.all(negative // seq_len != (anchor // seq_len)[:, None])
        assert taco["skipped"] == int((per_row > 0).sum() < 2)
        available = per_row.sum() - per_row[anchor // seq_len]
        assert taco["available_negatives"] == (int(available.min()) if len(anchor) else 0)


@pytest.fixture(scope="module")
def models(tiny_databin):
    """The taco criterion and a roberta_tiny model in each dtype (no dropout)."""
    _, task, model, criterion = fairseq_setup(
        tiny_databin, "--dropout", "0", "--attention-dropout", "0"
    )
    assert task.dictionary.pad() == 1 and task.mask_idx == 2000  # as masked_lm_batches
    return criterion, {name: copy.deepcopy(model).to(dtype) for name, dtype in DTYPES.items()}


@settings(PROPERTY, max_examples=30)  # a forward and backward pass each
@given(batch=masked_lm_batches(), positions=st.sampled_from(TC_POSITIONS),
       embedding=st.sampled_from(TC_EMBEDDINGS),
       precision=st.sampled_from([*sorted(DTYPES), "amp"]))
def test_criterion_loss_and_gradients_are_finite(models, batch, positions, embedding, precision):
    """Models in float16/bfloat16 (--fp16/--bf16) or float32 under bfloat16 autocast (--amp)."""
    criterion, by_dtype = models
    autocast = precision == "amp"
    model = by_dtype["float32" if autocast else precision]
    criterion.tc_embedding = embedding
    dataset = ContrastiveSamplingDataset(
        _FixedBatch(batch), pad_idx=1, excluded_tokens=(), positions=positions, window=5,
        num_negatives=6, seed=1,
    )
    sample = dataset.collater([])
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss, sample_size, log = criterion(model, sample)
    assert log["tc_loss"].dtype == torch.float32
    assert log["tc_anchors"] == len(sample["taco"]["anchor"])
    assert int(sample_size) == int(batch["target"].ne(1).sum())
    assert torch.isfinite(loss) and torch.isfinite(log["tc_loss"])
    loss.backward()
    for p in model.parameters():
        assert p.grad is None or torch.isfinite(p.grad.float()).all()


def test_zero_vectors_get_no_gradient_in_half_precision():
    """A zero global-bias vector has no direction: cosine 0 and no gradient, so half-precision
    gradients stay finite (F.normalize's 1/eps slope would overflow float16)."""
    vectors = torch.zeros(4, 8, dtype=torch.float16)
    vectors[1:] = torch.randn(3, 8).half()
    vectors.requires_grad_()
    out = info_nce(vectors, torch.tensor([0]), torch.tensor([1]), torch.tensor([[2, 3]]), 0.07)
    out.loss.sum().backward()
    assert torch.isfinite(vectors.grad).all()
    assert torch.equal(vectors.grad, torch.zeros_like(vectors.grad))
    assert torch.allclose(F.normalize(vectors.detach().float(), dim=-1)[0], torch.zeros(8))
