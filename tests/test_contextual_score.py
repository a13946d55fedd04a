"""Contextual score: the Table-9 measures against numpy on the same pairs, a hand-built model
with known answers, sentences from real text, and a trained checkpoint."""

import math

import numpy as np
import pytest
import torch
from fairseq.data import Dictionary

from taco_fairseq.analysis.checkpoints import (
    find_checkpoints,
    interval_checkpoints,
    iter_run_checkpoints,
    run_name,
)
from taco_fairseq.analysis.contextual_score import (
    MEASURES,
    add_sums,
    contextual_score,
    encode_sentences,
    pair_measure_sums,
    score_checkpoints,
    summarize,
)
from taco_fairseq.analysis.sentences import read_sentences, sample_sentences
from test_diagnostics import VALID, _draws  # the pair-sampling tests' batch


def test_measure_sums_and_ratios_match_numpy_on_the_same_pairs():
    rng = np.random.default_rng(0)
    states = torch.from_numpy(rng.normal(size=(4, 6, 8)).astype(np.float32))
    pairs = _draws(VALID, 1)[0]
    sums = pair_measure_sums(states, pairs, MEASURES)

    flat = states.flatten(0, 1).double().numpy()
    anchors = pairs.anchor.flatten().numpy()
    a = flat[anchors]

    def measures(b):
        return {
            "cosine": (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1),
            "dot": (a * b).sum(1),
            "l1": np.abs(a - b).sum(1),
            "l2": np.sqrt(((a - b) ** 2).sum(1)),
            "l10": (np.abs(a - b) ** 10).sum(1) ** 0.1,
        }

    intra = measures(flat[pairs.intra.flatten().numpy()[anchors]])
    inter = measures(flat[pairs.inter.flatten().numpy()[anchors]])
    assert int(sums.count) == anchors.sum() == 5
    for m in MEASURES:
        np.testing.assert_allclose(float(sums.intra[m]), intra[m].sum(), rtol=1e-5)
        np.testing.assert_allclose(float(sums.inter[m]), inter[m].sum(), rtol=1e-5)

    row = summarize(sums)
    assert row["pairs"] == 5
    for m in MEASURES:
        assert row[f"{m}_intra"] == pytest.approx(intra[m].mean(), rel=1e-5)
        assert row[f"{m}_inter"] == pytest.approx(inter[m].mean(), rel=1e-5)
        assert row[f"{m}_gap"] == pytest.approx(intra[m].mean() - inter[m].mean(), abs=1e-5)
        assert row[f"{m}_ratio"] == pytest.approx(intra[m].mean() / inter[m].mean(), rel=1e-5)


def test_sums_add_up():
    states = torch.randn(4, 6, 8, generator=torch.Generator().manual_seed(1))
    first, second = _draws(VALID, 2)
    a, b = (pair_measure_sums(states, p, ("cosine", "l2")) for p in (first, second))
    total = add_sums(a, b)
    assert int(total.count) == int(a.count) + int(b.count)
    assert float(total.inter["l2"]) == pytest.approx(float(a.inter["l2"]) + float(b.inter["l2"]))


def test_bad_measures_or_no_pairs_are_refused():
    pairs = _draws(VALID, 1)[0]
    with pytest.raises(ValueError, match="unknown measures"):
        pair_measure_sums(torch.zeros(4, 6, 8), pairs, ("cosine", "l3"))
    with pytest.raises(ValueError, match="batch, seq_len, hidden"):
        pair_measure_sums(torch.zeros(4, 5, 8), pairs)
    no_pairs = pair_measure_sums(torch.zeros(1, 3, 8), _draws(VALID[:1, :3], 1)[0])
    with pytest.raises(ValueError, match="no intra/inter-context pairs"):
        summarize(no_pairs)


class SentenceVectorModel(torch.nn.Module):
    """A toy encoder whose state for every token of sentence s is r·e_s (a scaled unit vector
    of its own), whatever the position; ``<s>``, ``</s>`` and padding get another vector, so
    pairing them would break the exact answers below."""

    def __init__(self, token_sentence, dim, radius):
        super().__init__()
        table = torch.zeros(len(token_sentence), dim)
        for token, sentence in enumerate(token_sentence):
            table[token, sentence] = radius
        self.table = torch.nn.Parameter(table)

    def forward(self, tokens, features_only=True):
        assert features_only
        return self.table[tokens], {}


def _toy(num_sentences=7, radius=2.0):
    dictionary = Dictionary()  # <s>=0 <pad>=1 </s>=2 <unk>=3
    sentences, token_sentence = [], [num_sentences] * 4  # specials: a vector of their own
    for s in range(num_sentences):
        words = [dictionary.add_symbol(f"w{s}_{i}") for i in range(2 + s % 4)]
        token_sentence += [s] * len(words)
        sentences.append(torch.tensor([dictionary.bos(), *words, dictionary.eos()]))
    model = SentenceVectorModel(token_sentence, num_sentences + 1, radius)
    return model, sentences, dictionary


@pytest.mark.parametrize("batch_size", [2, 3, 64])
def test_toy_model_gives_the_exact_statistics(batch_size):
    """Tokens of a sentence share one vector, sentences are orthogonal: intra cosine 1, inter
    0, intra distances 0, inter distances ‖r·e_s − r·e_t‖_p = r·2^(1/p)."""
    radius = 2.0
    model, sentences, dictionary = _toy(radius=radius)
    row = contextual_score(model, sentences, dictionary, batch_size=batch_size, seed=3)
    assert row["sentences"] == 7
    assert row["pairs"] == sum(len(s) - 2 for s in sentences)  # every word, no <s>/</s>
    assert row["cosine_intra"] == pytest.approx(1.0)
    assert row["cosine_inter"] == pytest.approx(0.0, abs=1e-7)
    assert row["cosine_gap"] == pytest.approx(1.0)
    assert row["dot_intra"] == pytest.approx(radius**2)
    assert row["dot_inter"] == pytest.approx(0.0, abs=1e-7)
    for name, p in (("l1", 1), ("l2", 2), ("l10", 10)):
        assert row[f"{name}_intra"] == pytest.approx(0.0, abs=1e-7)
        assert row[f"{name}_inter"] == pytest.approx(radius * 2 ** (1 / p))
        assert row[f"{name}_ratio"] == pytest.approx(0.0, abs=1e-7)


def test_toy_model_seed_fixes_the_result():
    model, sentences, dictionary = _toy()
    with torch.no_grad():
        model.table[4:] += torch.randn(model.table[4:].shape,
                                       generator=torch.Generator().manual_seed(0))
    first, second, other = (contextual_score(model, sentences, dictionary, 3, seed)
                            for seed in (1, 1, 2))
    assert first == second
    assert first["cosine_inter"] != other["cosine_inter"]


def test_too_few_sentences_or_bad_batch_size():
    model, sentences, dictionary = _toy()
    with pytest.raises(ValueError, match="two sentences"):
        contextual_score(model, sentences[:1], dictionary)
    with pytest.raises(ValueError, match="batch size"):
        contextual_score(model, sentences, dictionary, batch_size=1)


def test_sentences_of_real_text(alice, wikipedia_aa, head, tmp_path):
    book = list(read_sentences(alice, max_lines=400))
    assert len(book) > 100
    # hard-wrapped lines are joined: sentences run over several lines of the file
    assert "In another moment down went Alice after it, never once considering how in the " \
        "world she was to get out again." in book
    assert max(len(s) for s in book) > 200
    assert all(s == s.strip() and s for s in book)

    wiki = list(read_sentences(wikipedia_aa, max_lines=400))
    assert not any("<doc" in s for s in wiki)
    lines = list(read_sentences(wikipedia_aa, mode="line", max_lines=400))
    assert len(lines) == 400 < len(wiki)  # a line of Wikipedia is a paragraph

    sample = sample_sentences([alice, wikipedia_aa], 30, seed=4, max_lines=400)
    assert len(sample) == 30 and set(sample) <= set(book) | set(wiki)
    assert sample == sample_sentences([alice, wikipedia_aa], 30, seed=4, max_lines=400)
    with pytest.raises(ValueError, match="sentence mode"):
        list(read_sentences(alice, mode="paragraph"))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="no text"):
        sample_sentences([empty], 5, seed=1)


def test_score_of_trained_checkpoints(trained_checkpoint, tiny_databin, wikitext_test):
    files = find_checkpoints(trained_checkpoint)
    assert [f.name for f in files][-1] == "checkpoint_last.pt"
    checkpoints = list(iter_run_checkpoints([trained_checkpoint], tiny_databin))
    assert [c.updates for c in checkpoints] == [10, 20]  # checkpoint_last (20) skipped
    assert {c.run for c in checkpoints} == {run_name(trained_checkpoint)}

    sentences = sample_sentences([wikitext_test], 40, seed=1, max_lines=200)
    encoded = encode_sentences(checkpoints[0].hub, sentences)
    rows = score_checkpoints(checkpoints, sentences, batch_size=16, seed=1)
    assert [r["updates"] for r in rows] == [10, 20]
    for row in rows:
        assert row["sentences"] == len(encoded.tokens) == 40 - encoded.too_long - encoded.too_short
        assert row["pairs"] == sum(len(t) - 2 for t in encoded.tokens)  # every token
        assert -1 <= row["cosine_inter"] <= 1 and -1 <= row["cosine_intra"] <= 1
        assert all(math.isfinite(v) for k, v in row.items() if k not in ("run", "checkpoint"))
        assert row["l1_inter"] > 0 and row["l10_inter"] > 0
    assert rows[0]["cosine_intra"] != rows[1]["cosine_intra"]


def test_interval_checkpoints_are_ordered_by_updates_not_by_name(tmp_path):
    names = ["checkpoint_2_1000.pt", "checkpoint_1_900.pt", "checkpoint_last.pt",
             "checkpoint3.pt", "checkpoint_1_100.pt.tmp", "checkpoint_best.pt"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert interval_checkpoints(tmp_path) == [(900, tmp_path / "checkpoint_1_900.pt"),
                                              (1000, tmp_path / "checkpoint_2_1000.pt")]
    assert [f.name for f in find_checkpoints(tmp_path)] == [
        "checkpoint_1_900.pt", "checkpoint_2_1000.pt", "checkpoint3.pt", "checkpoint_best.pt",
        "checkpoint_last.pt"]
    assert interval_checkpoints(tmp_path / "missing") == []


def test_missing_run_or_data_bin(tmp_path, trained_checkpoint):
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        find_checkpoints(tmp_path)
    with pytest.raises(FileNotFoundError, match="--data-bin"):
        next(iter_run_checkpoints([trained_checkpoint], tmp_path))
