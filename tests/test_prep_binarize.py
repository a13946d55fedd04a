"""Ids written straight into fairseq's dataset give the bytes of the route they replaced:
SentencePiece pieces as text, then ``fairseq-preprocess --only-source --srcdict dict.txt``."""

import re
import subprocess
import sys

import numpy as np
import pytest
import sentencepiece as spm
from fairseq.binarizer import FileBinarizer, VocabularyDatasetBinarizer
from fairseq.data import Dictionary

from taco_fairseq.prep.binarize import DatasetWriter
from taco_fairseq.prep.pretraining import PrepareOptions, prepare_pretraining_data


def _write_pieces(model, text_path, pieces_path):
    """The replaced route's first step: each line as space-separated pieces (an unknown
    character appears as itself, which is not in dict.txt, so fairseq maps it to <unk>)."""
    lines = text_path.read_text(encoding="utf-8").split("\n")[:-1]
    encoded = model.encode(lines, out_type=str)
    pieces_path.write_text("".join(" ".join(p) + "\n" for p in encoded), encoding="utf-8")
    return encoded


@pytest.fixture(scope="module")
def routes(tmp_path_factory, wikipedia_aa, wikitext_test, alice):
    """A data-bin of Wikipedia and a Gutenberg book (train) and WikiText (valid) with a small
    vocabulary and character coverage (so that there are <unk>s), and the same splits
    binarized by fairseq-preprocess from the pieces of the same model."""
    root = tmp_path_factory.mktemp("routes")
    info = prepare_pretraining_data(
        PrepareOptions(
            destdir=root / "new", train=[wikipedia_aa, alice], valid=[wikitext_test],
            max_lines=1500, vocab_size=600, character_coverage=0.99, workers=2,
            keep_text=True,
        )
    )
    model = spm.SentencePieceProcessor(model_file=str(root / "new" / "sentencepiece.bpe.model"))
    pieces = {}
    for split in ("train", "valid"):
        pieces[split] = _write_pieces(
            model, root / "new" / "text" / f"{split}.txt", root / f"{split}.spm"
        )
    command = [sys.executable, "-m", "fairseq_cli.preprocess", "--only-source",
               "--srcdict", str(root / "new" / "dict.txt"), "--destdir", str(root / "old"),
               "--trainpref", str(root / "train.spm"), "--validpref", str(root / "valid.spm"),
               "--workers", "2", "--dataset-impl", "mmap"]
    subprocess.run(command, check=True, capture_output=True)
    return root, info, pieces


@pytest.mark.slow
@pytest.mark.parametrize("name", ["train.bin", "train.idx", "valid.bin", "valid.idx", "dict.txt"])
def test_same_bytes_as_fairseq_preprocess(routes, name):
    root, _, _ = routes
    assert (root / "new" / name).read_bytes() == (root / "old" / name).read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("split", ["train", "valid"])
def test_counts_are_fairseq_preprocess_counts(routes, split):
    root, info, pieces = routes
    log = (root / "old" / "preprocess.log").read_text()
    entries, tokens = map(int, re.search(
        rf"{split}\.spm: (\d+) sents, (\d+) tokens", log).groups())
    stats = info["splits"][split]
    assert (stats["dataset_entries"], stats["tokens"] + stats["dataset_entries"]) == (
        entries, tokens)
    dictionary = Dictionary.load(str(root / "new" / "dict.txt"))
    replaced = sum(dictionary.index(p) == dictionary.unk() for line in pieces[split] for p in line)
    assert stats["unk_tokens"] == replaced > 0


def _write_with_fairseq(text, dictionary, prefix):
    """fairseq-preprocess's binarizer, as that command calls it."""
    return FileBinarizer.multiprocess_dataset(
        str(text), "mmap", VocabularyDatasetBinarizer(dictionary, append_eos=True),
        str(prefix), vocab_size=len(dictionary), num_workers=1,
    )


@pytest.mark.parametrize("symbols", [100, 70_000])  # uint16 and uint32 elements
def test_any_dictionary_size_and_empty_entries(tmp_path, symbols):
    dictionary = Dictionary()
    for i in range(symbols - dictionary.nspecial):
        dictionary.add_symbol(f"w{i}")
    rng = np.random.default_rng(0)
    lines = [[f"w{i}" for i in rng.integers(0, symbols + 50, rng.integers(0, 30))]
             for _ in range(200)]  # ids >= symbols - 4 are unknown words; some lines empty
    text = tmp_path / "words.txt"
    text.write_text("".join(" ".join(line) + "\n" for line in lines))
    summary = _write_with_fairseq(text, dictionary, tmp_path / "old")

    with DatasetWriter(tmp_path / "new", len(dictionary)) as dataset:
        dataset.add([[dictionary.index(w) for w in line] for line in lines[:50]])
        dataset.add([[dictionary.index(w) for w in line] for line in lines[50:]])

    for ext in ("bin", "idx"):
        assert (tmp_path / f"new.{ext}").read_bytes() == (tmp_path / f"old.{ext}").read_bytes()
    assert (dataset.entries, dataset.tokens, dataset.unk_tokens) == (
        summary.num_seq, summary.num_tok, summary.num_replaced)
    assert any(not line for line in lines) and summary.num_replaced > 0


def test_an_id_outside_the_dictionary_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"token id 600 is outside the dictionary of 600 "):
        with DatasetWriter(tmp_path / "x", 600) as dataset:
            dataset.add([[5, 6], [600]])
    assert not (tmp_path / "x.idx").exists()
