"""Document text files: concatenating inputs, counting, holding out the last documents."""

import pytest

from taco_fairseq.prep.corpus import read_document_lines
from taco_fairseq.prep.documents import count_documents, move_last_documents, write_documents

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


def test_move_last_documents(train_text, tmp_path):
    path, _, docs = train_text
    valid = tmp_path / "valid.txt"

    move_last_documents(path, valid, 2)

    assert path.read_text(encoding="utf-8") == "\n\n".join("\n".join(d) for d in docs[:2]) + "\n"
    assert valid.read_text(encoding="utf-8") == "\n\n".join("\n".join(d) for d in docs[2:]) + "\n"
    assert count_documents(valid) == (len(docs[2]) + len(docs[3]), 2)


def test_move_last_documents_keeps_one_for_training(train_text, tmp_path):
    path, _, _ = train_text
    with pytest.raises(ValueError, match="cannot hold out 4 documents.*has only 4"):
        move_last_documents(path, tmp_path / "valid.txt", 4)
