"""Document text files: concatenating inputs, counting, splitting by whole documents."""

import numpy as np
import pytest

from taco_fairseq.prep.corpus import read_document_lines
from taco_fairseq.prep.documents import balance_shards, count_documents, document_spans
from taco_fairseq.prep.documents import last_documents, sample_documents
from taco_fairseq.prep.documents import write_document_groups, write_documents

LIMITS = {"max_docs": 3, "max_lines": 250}


@pytest.fixture
def train_text(tmp_path, wikipedia_aa, wikitext_test):
    """A document text file of the first 3 Wikipedia articles (250 lines) and 250 WikiText lines,
    and the documents it should hold (lists of lines)."""
    path = tmp_path / "train.txt"
    stats = write_documents([wikipedia_aa, wikitext_test], path, **LIMITS)
    wiki = "\n".join(read_document_lines(wikipedia_aa, **LIMITS)).split("\n\n")
    wikitext = list(read_document_lines(wikitext_test, **LIMITS))
    return path, stats, [doc.split("\n") for doc in wiki] + [wikitext]


def test_write_documents_separates_files_like_documents(train_text):
    path, stats, docs = train_text
    assert len(docs) == 4  # 3 articles (the third one cut) + WikiText
    assert path.read_text(encoding="utf-8") == "\n\n".join("\n".join(d) for d in docs) + "\n"
    assert [(s.docs, s.lines) for s in stats] == [(3, 250), (1, 250)]
    assert count_documents(path) == (500, 4)


def _docs_text(docs):
    return "\n\n".join("\n".join(d) for d in docs) + "\n" if docs else ""


def test_document_spans_are_the_documents(train_text):
    path, _, docs = train_text
    data = path.read_bytes()
    spans = document_spans(path)
    assert spans.shape == (len(docs), 2)
    assert [data[a:b].decode() for a, b in spans] == ["\n".join(d) + "\n" for d in docs]


def test_write_document_groups_keeps_order_and_separators(train_text, tmp_path):
    path, _, docs = train_text
    dests = [tmp_path / f"{k}.txt" for k in range(3)]
    groups = np.array([1, 0, 1, 1])  # group 2 gets none

    write_document_groups(path, document_spans(path), groups, dests)

    assert dests[0].read_text(encoding="utf-8") == _docs_text([docs[1]])
    assert dests[1].read_text(encoding="utf-8") == _docs_text([docs[0], docs[2], docs[3]])
    assert dests[2].read_text(encoding="utf-8") == ""
    assert count_documents(dests[1]) == (sum(map(len, [docs[0], docs[2], docs[3]])), 3)


def test_last_documents():
    assert last_documents(4, 2).tolist() == [False, False, True, True]
    with pytest.raises(ValueError, match="cannot hold out 4 documents.*has only 4"):
        last_documents(4, 4)


def test_sample_documents_holds_out_at_most_the_fraction_spread_over_the_input():
    sizes = np.random.default_rng(0).integers(100, 5000, size=2000)
    sizes[-3:] = 10**6  # whole books at the end: larger than the budget
    mask = sample_documents(sizes, 0.01, seed=3)
    held = sizes[mask].sum() / sizes.sum()
    assert 0.0099 < held <= 0.01
    assert not mask[-3:].any()
    assert mask[:1000].any() and mask[1000:].any()
    assert (sample_documents(sizes, 0.01, seed=3) == mask).all()
    assert (sample_documents(sizes, 0.01, seed=4) != mask).any()


@pytest.mark.parametrize("fraction, message", [
    (0.001, r"--valid-fraction 0.001 holds out at most 3 bytes, less than the smallest of the "
            r"3 training documents \(1000 bytes\)"),
])
def test_sample_documents_refuses_a_budget_below_every_document(fraction, message):
    with pytest.raises(ValueError, match=message):
        sample_documents(np.array([1000, 1000, 1000]), fraction, seed=1)


def test_balance_shards_deals_documents_out_by_size():
    sizes = np.random.default_rng(1).integers(1, 10_000, size=500)
    shards = balance_shards(sizes, 3)
    totals = np.bincount(shards, weights=sizes, minlength=3)
    assert set(shards.tolist()) == {0, 1, 2}
    assert totals.max() - totals.min() <= sizes.max()
    assert balance_shards(sizes, 1).tolist() == [0] * 500
    assert balance_shards(np.array([5, 1, 1, 3]), 2).tolist() == [0, 1, 1, 1]
