"""WordSim353 loading, pair selection and the embedding similarity of checkpoints."""

import math

import pytest
import torch
import torch.nn.functional as F

from conftest import SHARED
from taco_fairseq.analysis.checkpoints import iter_run_checkpoints
from taco_fairseq.analysis.wordsim import (
    WordPair,
    distinct_pairs,
    embedding_similarity,
    known_pairs,
    load_wordsim353,
    read_pair_list,
    select_pairs,
    word_vectors,
)


WORDSIM = SHARED / "data" / "wordsim353" / "combined.tsv"


@pytest.fixture(scope="module")
def wordsim():
    if not WORDSIM.is_file():
        pytest.skip(f"shared WordSim353 file not found: {WORDSIM}")
    return load_wordsim353(WORDSIM)


def test_loads_every_row(wordsim):
    assert len(wordsim) == 353
    assert wordsim[0] == WordPair("love", "sex", 6.77)
    assert WordPair("Jerusalem", "Israel", 8.46) in wordsim  # case kept
    assert sum(p[:2] == ("money", "cash") for p in wordsim) == 2
    assert min(p.score for p in wordsim) == 0.23 and max(p.score for p in wordsim) == 10.0


def test_distinct_pairs_merge_duplicates_and_drop_self_pairs(wordsim):
    pairs = distinct_pairs(wordsim)
    assert len(pairs) == 350  # 353 - tiger/tiger - second money/cash - money/bank
    assert not any(p.word1 == p.word2 for p in pairs)
    merged = {p[:2]: p.score for p in pairs}
    assert merged[("money", "cash")] == pytest.approx((9.15 + 9.08) / 2)
    assert merged[("bank", "money")] == pytest.approx((8.12 + 8.50) / 2)
    assert ("money", "bank") not in merged


def test_selection(wordsim, tmp_path):
    pairs = distinct_pairs(wordsim)
    top = select_pairs(pairs, top=5)
    assert [p.score for p in top] == sorted((p.score for p in pairs), reverse=True)[:5]
    sample = select_pairs(pairs, sample=20, seed=3)
    assert len(sample) == 20 and sample == select_pairs(pairs, sample=20, seed=3)
    assert sample != select_pairs(pairs, sample=20, seed=4)
    assert select_pairs(pairs) == pairs
    with pytest.raises(ValueError, match="not both"):
        select_pairs(pairs, top=3, sample=3)
    with pytest.raises(ValueError, match=">= 1"):
        select_pairs(pairs, top=0)

    listed = tmp_path / "pairs.txt"
    listed.write_text("# mine\ncash money\nfoo\tbar\n\n")
    given = read_pair_list(listed, pairs)
    assert given[0] == WordPair("cash", "money", pytest.approx((9.15 + 9.08) / 2))
    assert given[1][:2] == ("foo", "bar") and math.isnan(given[1].score)
    listed.write_text("one two three\n")
    with pytest.raises(ValueError, match="pairs.txt:1"):
        read_pair_list(listed)


def test_bad_wordsim_file(tmp_path):
    bad = tmp_path / "ws.tsv"
    bad.write_text("word1\tword2\tscore\nlove\tsex\thigh\n")
    with pytest.raises(ValueError, match="ws.tsv:2"):
        load_wordsim353(bad)
    with pytest.raises(FileNotFoundError, match="WordSim353"):
        load_wordsim353(tmp_path / "missing.tsv")


def test_word_vectors_average_pieces_and_skip_unknown_words(trained_checkpoint, tiny_databin):
    checkpoint = next(iter_run_checkpoints([trained_checkpoint], tiny_databin))
    hub = checkpoint.hub
    dictionary = hub.task.source_dictionary
    table = hub.model.encoder.sentence_encoder.embed_tokens.weight.detach()
    vectors = word_vectors(hub, ["the", "Maradona", "snowman☃"])
    assert vectors.pieces["the"] == ["▁the"]  # as mid-sentence, after a space
    assert len(vectors.pieces["Maradona"]) > 1  # not a piece of the 2,000 of tiny_databin
    assert vectors.pieces["Maradona"][0].startswith("▁")
    ids = [dictionary.index(p) for p in vectors.pieces["Maradona"]]
    torch.testing.assert_close(vectors.vectors["Maradona"], table[ids].mean(0),
                               rtol=0, atol=0)
    assert vectors.unknown == {"snowman☃"} and "snowman☃" not in vectors.vectors

    pairs = [WordPair("the", "Maradona", 1.0), WordPair("the", "snowman☃", 2.0)]
    known, skipped = known_pairs(pairs, [vectors])
    assert known == pairs[:1] and skipped == pairs[1:]


def test_embedding_similarity_over_checkpoints(trained_checkpoint, tiny_databin, wordsim):
    pairs = distinct_pairs(wordsim) + [WordPair("snowman☃", "ice", 5.0)]
    checkpoints = iter_run_checkpoints([trained_checkpoint], tiny_databin)
    result = embedding_similarity(checkpoints, pairs, sample=20, seed=1)
    assert WordPair("snowman☃", "ice", 5.0) in result.skipped
    assert [r["updates"] for r in result.summary] == [10, 20]
    assert all(r["pairs"] == 20 for r in result.summary)
    assert len(result.pairs) == 40
    first = [r for r in result.pairs if r["updates"] == 10]
    last = [r for r in result.pairs if r["updates"] == 20]
    assert [r["word1"] for r in first] == [r["word1"] for r in last]  # same pairs throughout
    assert result.summary[0]["mean_cosine"] == pytest.approx(
        sum(r["cosine"] for r in first) / 20)

    # the cosine of a pair, directly from the checkpoint's embedding matrix
    hub = next(iter_run_checkpoints([trained_checkpoint], tiny_databin)).hub
    table = hub.model.encoder.sentence_encoder.embed_tokens.weight.detach()
    row = first[0]
    a, b = (table[[hub.task.source_dictionary.index(p) for p in row[k].split()]].mean(0)
            for k in ("pieces1", "pieces2"))
    assert row["cosine"] == pytest.approx(float(F.cosine_similarity(a, b, dim=0)), abs=1e-6)
