"""End to end: raw corpus files -> fairseq data-bin (dict.txt, SentencePiece model, .bin/.idx)."""

import gzip
import json
import re

import pytest
import sentencepiece as spm
import torch
from fairseq.data import Dictionary, data_utils

from conftest import REPO, run_script
from taco_fairseq.prep.corpus import read_document_lines
from taco_fairseq.prep.documents import count_documents
from taco_fairseq.prep.pretraining import PrepareOptions, prepare_pretraining_data


@pytest.fixture(scope="module")
def databin(tmp_path_factory, wikipedia_aa, wikitext_test):
    """600 lines of Wikipedia articles + 600 WikiText lines; the last 2 documents (the last
    article, cut at 600 lines, and WikiText) are the validation split. Written over a
    directory holding a stale output and a foreign file (``force``)."""
    destdir = tmp_path_factory.mktemp("databin")
    (destdir / "test.bin").write_bytes(b"stale output of an earlier run")
    (destdir / "notes.md").write_text("not an output")
    options = PrepareOptions(
        destdir=destdir,
        train=[wikipedia_aa, wikitext_test],
        valid_docs=2,
        vocab_size=1000,
        max_lines=600,
        workers=2,
        keep_text=True,
        force=True,
    )
    info = prepare_pretraining_data(options)
    dictionary = Dictionary.load(str(destdir / "dict.txt"))
    model = spm.SentencePieceProcessor(model_file=str(destdir / "sentencepiece.bpe.model"))
    return destdir, info, dictionary, model


def _dataset(destdir, split, dictionary):
    return data_utils.load_indexed_dataset(str(destdir / split), dictionary)


def _text_lines(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_output_layout(databin):
    destdir, info, _, _ = databin
    assert sorted(p.name for p in destdir.iterdir()) == [
        "dict.txt",
        "notes.md",
        "prep_info.json",
        "sentencepiece.bpe.model",
        "text",
        "train.bin",
        "train.idx",
        "valid.bin",
        "valid.idx",
    ]
    assert sorted(p.name for p in (destdir / "text").iterdir()) == ["train.txt", "valid.txt"]
    assert json.loads((destdir / "prep_info.json").read_text()) == info
    assert info["vocab"] == {
        "sentencepiece_pieces": 1000,
        "dict_txt_entries": 996,
        "fairseq_dictionary_size": 1000,
    }


def test_dict_ids_are_sentencepiece_ids_and_counts_are_training_counts(databin):
    destdir, _, dictionary, model = databin
    assert len(dictionary) == model.get_piece_size()
    for sp_id in range(model.get_piece_size()):
        assert dictionary.index(model.id_to_piece(sp_id)) == sp_id
    train = _dataset(destdir, "train", dictionary)
    occurrences = torch.bincount(torch.cat([train[i] for i in range(len(train))]), minlength=1000)
    assert dictionary.count[4:] == occurrences[4:].tolist()


@pytest.mark.parametrize("split", ["train", "valid"])
def test_datasets_are_the_sentencepiece_ids_of_the_text(databin, split):
    destdir, info, dictionary, model = databin
    dataset = _dataset(destdir, split, dictionary)
    lines = _text_lines(destdir / "text" / f"{split}.txt")
    assert len(dataset) == len(lines) == info["splits"][split]["dataset_entries"]
    # one entry per line, in order; a document break is an entry of only </s>, as
    # --sample-break-mode complete_doc wants
    for tokens, line in zip(dataset, lines):
        assert tokens.tolist() == model.encode(line) + [dictionary.eos()]
    assert sum(1 for t in dataset if len(t) == 1) == info["splits"][split]["docs"] - 1
    pieces = info["splits"][split]["tokens"]
    assert int(dataset.sizes.sum()) == pieces + len(dataset)
    unknown = sum(int((t == dictionary.unk()).sum()) for t in dataset)
    assert unknown == info["splits"][split]["unk_tokens"]


def test_valid_docs_holds_out_the_last_documents(databin, wikipedia_aa, wikitext_test):
    destdir, info, _, _ = databin
    article = "\n".join(read_document_lines(wikipedia_aa, max_lines=600)).split("\n\n")[-1]
    wikitext = "\n".join(read_document_lines(wikitext_test, max_lines=600))
    valid = (destdir / "text" / "valid.txt").read_text(encoding="utf-8")
    assert valid == f"{article}\n\n{wikitext}\n"
    inputs = info["inputs"]["train"]
    assert [(s["format"], s["lines"]) for s in inputs] == [("wikiextractor", 600), ("plain", 600)]
    splits = info["splits"]
    assert splits["train"]["lines"] + splits["valid"]["lines"] == 1200
    assert splits["train"]["docs"] + 2 == sum(s["docs"] for s in inputs)
    assert splits["valid"]["docs"] == 2


@pytest.mark.slow
def test_cli_with_valid_and_test_files(tmp_path, head, wikipedia_aa, wikitext_test, alice, earnest):
    wiki_gz = tmp_path / "AA-head.txt.gz"
    wiki_gz.write_bytes(gzip.compress(head(wikipedia_aa, 800)))
    wikitext_plain = tmp_path / "wiki.test.head.raw"
    wikitext_plain.write_bytes(head(wikitext_test, 100))
    destdir = tmp_path / "data-bin"

    result = run_script(
        "prepare_pretraining_data.py", "--train", alice, wiki_gz, "--valid", wikitext_plain,
        "--test", earnest, "--vocab-size", "1000", "--workers", "2", "--destdir", destdir,
    )

    assert result.returncode == 0, result.stderr
    names = {p.name for p in destdir.iterdir()}
    info = json.loads((destdir / "prep_info.json").read_text())
    for split, stats in info["splits"].items():  # the log counts what prep_info.json counts
        assert (f"{destdir / split}: {stats['dataset_entries']} entries, {stats['tokens']} "
                "tokens (not counting the </s> that ends each entry), "
                f"{stats['unk_tokens']} of them <unk>") in result.stderr
    assert {"test.bin", "test.idx", "valid.bin", "train.bin", "dict.txt"} <= names
    assert "text" not in names
    # the closing hint names the plugin's directory, to paste as it is (it said "--user-dir ...")
    assert (f"train with: fairseq-train {destdir} --user-dir {REPO / 'taco_fairseq'} --task "
            "taco_masked_lm --criterion taco --arch roberta_tiny,") in result.stderr
    # a small corpus: the model it suggests fits it (it said roberta_small for any corpus)
    formats = {
        split: [(s["format"], s["gutenberg_stripped"]) for s in stats]
        for split, stats in info["inputs"].items()
    }
    assert formats == {
        "train": [("plain", True), ("wikiextractor", False)],
        "valid": [("plain", False)],
        "test": [("plain", True)],
    }
    assert info["splits"]["valid"]["lines"] == 100 and info["splits"]["valid"]["docs"] == 1
    dictionary = Dictionary.load(str(destdir / "dict.txt"))
    model = spm.SentencePieceProcessor(model_file=str(destdir / "sentencepiece.bpe.model"))
    test = _dataset(destdir, "test", dictionary)
    assert len(test) == info["splits"]["test"]["lines"]
    assert model.decode(dictionary.string(test[-1][:-1]).split()) == "TABLEAU"  # see test_prep_corpus


@pytest.mark.slow
def test_cli_names_a_missing_input(tmp_path, wikitext_test):
    missing = tmp_path / "no-such-file.txt.xz"
    result = run_script(
        "prepare_pretraining_data.py", "--train", wikitext_test, "--valid", missing,
        "--destdir", tmp_path / "out",
    )
    assert result.returncode == 1
    assert f"error: --valid: input file not found: {missing}" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_refuses_a_file_given_twice(tmp_path, wikitext_test):
    """The same file twice in --train (once through a symbolic link): with --valid-docs its
    documents held out for validation would also stay in train."""
    link = tmp_path / "same.raw.xz"
    link.symlink_to(wikitext_test)
    result = run_script(
        "prepare_pretraining_data.py", "--train", wikitext_test, link, "--valid-docs", "1",
        "--destdir", tmp_path / "out",
    )
    assert result.returncode == 1
    assert (f"error: --train: {link} is given twice (as {wikitext_test} and {link}); give "
            "each file once") in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture
def tiny_options(tmp_path, wikitext_test):
    """Train on the first 40 WikiText lines (one document); validate on the same lines."""
    return PrepareOptions(
        destdir=tmp_path / "out",
        train=[wikitext_test],
        valid=[wikitext_test],
        max_lines=40,
        vocab_size=300,
    )


def test_refuses_a_non_empty_destdir(tiny_options):
    tiny_options.destdir.mkdir()
    (tiny_options.destdir / "dict.txt").write_text("a 1\n")
    message = f"{re.escape(str(tiny_options.destdir))} is not empty.*--force"
    with pytest.raises(FileExistsError, match=message):
        prepare_pretraining_data(tiny_options)
    assert (tiny_options.destdir / "dict.txt").read_text() == "a 1\n"


def test_vocab_size_too_large_is_explained_and_cleaned_up(tiny_options):
    tiny_options.vocab_size = 8000
    message = r"--vocab-size 8000 is too large.*--vocab-size \d+ or less"
    with pytest.raises(ValueError, match=message):
        prepare_pretraining_data(tiny_options)
    assert not tiny_options.destdir.exists()  # a rerun needs no --force


ONE_VALIDATION_SPLIT = "either --valid files, --valid-fraction F or --valid-docs N"


@pytest.mark.parametrize(
    "change, error, message",
    [
        ({"train": []}, ValueError, "no training input"),
        ({"valid": []}, ValueError, ONE_VALIDATION_SPLIT),
        ({"valid_docs": 1}, ValueError, ONE_VALIDATION_SPLIT),
        ({"valid": [], "valid_docs": 1}, ValueError, "cannot hold out 1 documents.*only 1"),
        ({"valid": [], "valid_fraction": 0.5}, ValueError,
         r"--valid-fraction 0.5 holds out at most \d+ bytes, less than the smallest of the 1 "),
        ({"shards": 2}, ValueError, "--shards 2: the training split has only 1 documents"),
        ({"num_threads": 1025}, ValueError,
         r"--num-threads must be in 1\.\.1024 \(SentencePiece's limit on trainer threads\), "
         "got 1025"),
        ({"num_threads": 0}, ValueError, r"--num-threads must be in 1\.\.1024"),
        ({"test": ["missing.txt"]}, FileNotFoundError, "input file not found: missing.txt"),
        ({"train": ["."]}, FileNotFoundError, r"input file is not a regular file: \.$"),
    ],
)
def test_invalid_options(tiny_options, change, error, message):
    for name, value in change.items():
        setattr(tiny_options, name, value)
    with pytest.raises(error, match=message):
        prepare_pretraining_data(tiny_options)
    assert not tiny_options.destdir.exists()


@pytest.mark.parametrize("split", ["valid", "test"])
def test_a_file_twice_in_valid_or_test_is_refused(tiny_options, wikitext_test, split):
    again = wikitext_test.parent / ".." / wikitext_test.parent.name / wikitext_test.name
    setattr(tiny_options, split, [wikitext_test, again])
    message = f"--{split}: {again} is given twice (as {wikitext_test} and {again}); give each"
    with pytest.raises(ValueError, match=re.escape(message)):
        prepare_pretraining_data(tiny_options)
    assert not tiny_options.destdir.exists()


def test_a_training_file_given_as_validation_text_is_warned(tiny_options, caplog):
    """The fixture's validation file is its training file: the validation loss would be
    measured on training text, which is said loudly (a fresh user found it silent)."""
    with caplog.at_level("WARNING", logger="taco_fairseq.prep.pretraining"):
        prepare_pretraining_data(tiny_options)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"--valid: {tiny_options.valid[0]} is also given to --train: the valid loss "
               "will be measured on text the model trains on" in m for m in warned)


@pytest.mark.parametrize("held_out", [{"valid_docs": 1}, {"valid_fraction": 0.1}])
def test_the_validation_share_is_logged_and_a_large_one_from_valid_docs_is_warned(
    tmp_path, wikipedia_aa, wikitext_test, caplog, held_out
):
    """The last document (300 WikiText lines) is most of the text: --valid-docs 1 warns
    loudly; --valid-fraction 0.1 holds out at most a tenth of the bytes, Wikipedia articles."""
    options = PrepareOptions(
        destdir=tmp_path / "out", train=[wikipedia_aa, wikitext_test], max_lines=300,
        vocab_size=500, keep_text=True, **held_out,
    )
    with caplog.at_level("INFO", logger="taco_fairseq.prep.pretraining"):
        info = prepare_pretraining_data(options)
    text = options.destdir / "text"
    sizes = {  # document bytes: without the empty lines between documents
        split: (text / f"{split}.txt").stat().st_size - count_documents(text / f"{split}.txt")[1]
        + 1 for split in ("train", "valid")
    }
    share = sizes["valid"] / (sizes["valid"] + sizes["train"])
    record = next(r for r in caplog.records if "validation split:" in r.getMessage())
    assert f"({100 * share:.2f}%)" in record.getMessage()
    token_share = info["splits"]["valid"]["share_of_training_input_tokens"]
    if "valid_docs" in held_out:
        assert record.levelname == "WARNING" and share > 0.5 and token_share > 0.5
        assert "--valid-docs 1 holds out the LAST 1 documents" in record.getMessage()
        assert "--valid-fraction F" in record.getMessage()
    else:
        assert record.levelname == "INFO" and 0.08 < share <= 0.1 and token_share < 0.15
        valid = _text_lines(text / "valid.txt")
        assert "" in valid and not set(valid) & set(read_document_lines(wikitext_test))


@pytest.mark.slow
@pytest.mark.parametrize("argv, message", [
    (["--valid-fraction", "1"], "argument --valid-fraction: must be in (0, 1), got 1"),
    (["--valid-fraction", "nan"], "argument --valid-fraction: must be in (0, 1), got nan"),
    (["--valid-docs", "3", "--character-coverage", "0"],
     "argument --character-coverage: must be in (0, 1], got 0"),
    (["--valid-docs", "3", "--seed", "-1"], "argument --seed: must be >= 0, got -1"),
    (["--valid-fraction", "0.01", "--valid-docs", "3"],
     "argument --valid-docs: not allowed with argument --valid-fraction"),
    (["--valid-docs", "3", "--shards", "0"], "argument --shards: "),
    (["--valid-docs", "3", "--num-threads", "0"], "argument --num-threads: must be > 0, got 0"),
    (["--valid-docs", "3", "--num-threads", "1025"],
     "argument --num-threads: must be <= 1024 (SentencePiece's limit), got 1025"),
])
def test_cli_checks_the_split_options(tmp_path, wikitext_test, argv, message):
    result = run_script("prepare_pretraining_data.py", "--train", wikitext_test, *argv,
                        "--destdir", tmp_path / "out")
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.slow
def test_the_data_bin_depends_on_num_threads_not_on_workers(tmp_path, wikipedia_aa, wikitext_test):
    """``workers`` (reading processes, encoding threads) leaves every output byte as it is, so
    the default (all CPUs) gives the same data-bin on any machine; SentencePiece's trainer
    threads change the model, which is why ``num_threads`` is a fixed number in the recipe."""
    outputs = ("dict.txt", "sentencepiece.bpe.model", "train.bin", "train.idx", "valid.bin",
               "valid.idx")

    def build(name, **threads):
        options = PrepareOptions(destdir=tmp_path / name, train=[wikipedia_aa, wikitext_test],
                                 valid_docs=1, max_lines=600, vocab_size=1000, **threads)
        info = prepare_pretraining_data(options)
        return info, {output: (options.destdir / output).read_bytes() for output in outputs}

    info, one_worker = build("workers1", workers=1)
    assert info["options"]["num_threads"] == 16 and info["options"]["workers"] == 1
    assert build("workers2", workers=2)[1] == one_worker
    one_thread = build("threads1", workers=2, num_threads=1)[1]
    assert one_thread["sentencepiece.bpe.model"] != one_worker["sentencepiece.bpe.model"]
