"""A data-bin made the standard fairseq way, as fairseq's RoBERTa README makes one with a
SentencePiece model: text encoded to pieces (``encode(out_type=str)``, what ``spm_encode``
writes), ``fairseq-preprocess --only-source`` with its own frequency-ordered ``dict.txt``, the
model copied in as ``sentencepiece.bpe.model``. Its ids are not SentencePiece's: every command
must give fairseq-preprocess's ids (checked byte for byte against a real ``--srcdict`` run).
"""

import json
import lzma
import shutil
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from fairseq.data import Dictionary
from fairseq.data.indexed_dataset import MMapIndexedDataset

from conftest import run_fairseq, run_script, train_args
from taco_fairseq.hf_export.export import export_to_transformers
from taco_fairseq.hub import from_pretrained
from taco_fairseq.prep.binarize import DatasetWriter
from taco_fairseq.prep.vocabulary import DictionaryEncoder

#: fairseq-preprocess, fairseq-train and the commands in subprocesses.
pytestmark = pytest.mark.slow

#: Lines whose pieces need fairseq's text route: characters the model does not know (which
#: fairseq-preprocess's dict.txt may list, as spm_encode writes them as they are), a run of
#: unknown characters (one piece), U+0085 (a piece fairseq splits away as whitespace), an
#: empty line (an entry of only </s>).
HARD_LINES = ["Caf\u00e9 na\u00efve \u201cquoted\u201d \u2014 it\u2019s", "\u4e2d\u6587 \u2603",
              "x\u0085y", ""]


def _text_lines(path: Path, count: int):
    with lzma.open(path, "rt", encoding="utf-8") as f:
        lines = [line.strip() for _, line in zip(range(count), f)]
    return [line for line in lines if line]


def _write_pieces(model, lines, path: Path):
    """What ``spm_encode --output_format=piece`` writes: one line of pieces per line."""
    path.write_text("".join(" ".join(p) + "\n" for p in model.encode(lines, out_type=str)),
                    encoding="utf-8")


@pytest.fixture(scope="module")
def fairseq_databin(wikitext_test, alice, tmp_path_factory):
    """The standard data-bin: a 2,000-piece model trained with SentencePiece's own defaults
    (``<unk>=0 <s>=1 </s>=2``, no ``<pad>``) on WikiText-2 test (2,891 lines; train), the
    first 500 lines of a Gutenberg book plus :data:`HARD_LINES` (valid).

    Returns:
        (data-bin, {split: its text lines}).
    """
    root = tmp_path_factory.mktemp("fairseq_databin")
    lines = {"train": _text_lines(wikitext_test, 3000),
             "valid": _text_lines(alice, 500) + HARD_LINES}
    (root / "train.txt").write_text("\n".join(lines["train"]) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(root / "train.txt"), model_prefix=str(root / "spm"),
                                   vocab_size=2000, minloglevel=2)
    model = spm.SentencePieceProcessor(model_file=str(root / "spm.model"))
    for split, text in lines.items():
        _write_pieces(model, text, root / f"{split}.pieces")
    databin = root / "data-bin"
    run_fairseq("fairseq-preprocess", "--only-source", "--trainpref", root / "train.pieces",
                "--validpref", root / "valid.pieces", "--destdir", databin, "--workers", "1")
    shutil.copy(root / "spm.model", databin / "sentencepiece.bpe.model")
    return databin, lines


def _encoder(databin: Path) -> DictionaryEncoder:
    model = spm.SentencePieceProcessor(model_file=str(databin / "sentencepiece.bpe.model"))
    return DictionaryEncoder(model, Dictionary.load(str(databin / "dict.txt")), "d and m")


def test_encoder_writes_fairseq_preprocess_bytes(fairseq_databin, tmp_path):
    databin, lines = fairseq_databin
    encoder = _encoder(databin)
    dictionary = encoder.dictionary
    assert not encoder.identity
    assert len(dictionary) != encoder.model.get_piece_size()
    assert encoder.extra_symbols > 0 and encoder.missing_pieces < 20
    for split, text in lines.items():
        with DatasetWriter(tmp_path / split, len(dictionary)) as dataset:
            dataset.add(encoder.encode(text, num_threads=2))
        for suffix in (".bin", ".idx"):
            expected = (databin / f"{split}{suffix}").read_bytes()
            assert (tmp_path / f"{split}{suffix}").read_bytes() == expected, (split, suffix)
    # the hard lines: an unknown character that is a dict.txt symbol keeps its id, U+0085 goes
    hard = encoder.encode(HARD_LINES)
    assert dictionary.index("\u00e9") != dictionary.unk()
    assert dictionary.index("\u00e9") in hard[0].tolist()
    pieces = encoder.model.encode(HARD_LINES[2], out_type=str)
    assert "\x85" in pieces
    assert [dictionary[i] for i in hard[2]] == [p for p in pieces if p != "\x85"]
    assert hard[3].tolist() == []
    assert encoder.encode([]) == []


def test_a_dict_of_another_vocabulary_is_refused(fairseq_databin, tmp_path):
    databin, _ = fairseq_databin
    model = spm.SentencePieceProcessor(model_file=str(databin / "sentencepiece.bpe.model"))
    other = Dictionary()
    for i in range(2000):
        other.add_symbol(f"\u2581w{i}")
    for piece in ("\u2581the", ",", "."):
        other.add_symbol(piece)
    with pytest.raises(ValueError, match=r"^d and m do not belong together: only 3 of the "
                       r"model's 1997 pieces are dict.txt symbols"):
        DictionaryEncoder(model, other, "d and m")


def _entries(prefix: Path):
    dataset = MMapIndexedDataset(str(prefix))
    return [dataset[i].tolist() for i in range(len(dataset))]


def test_every_command_on_a_standard_data_bin(fairseq_databin, glue_data, tmp_path):
    """pre-training -> GLUE preparation (byte for byte fairseq-preprocess --srcdict's) ->
    fine-tuning -> hub (fairseq-preprocess's ids) -> HuggingFace export with its parity check."""
    databin, lines = fairseq_databin
    save_dir = tmp_path / "pretrain"
    run_fairseq("fairseq-train", *train_args(databin, save_dir, "--max-update", "4",
                                             "--save-interval-updates", "4",
                                             "--max-valid-steps", "1"))
    checkpoint = save_dir / "checkpoint_last.pt"

    glue = tmp_path / "glue"
    prep = run_script("prepare_glue.py", "--glue-dir", glue_data, "--tasks", "RTE",
                      "--pretraining-data", databin, "--checkpoint", checkpoint,
                      "--destdir", glue, "--keep-text", "--workers", "2")
    assert prep.returncode == 0, prep.stderr[-3000:]
    rte = glue / "RTE"
    model = spm.SentencePieceProcessor(model_file=str(databin / "sentencepiece.bpe.model"))
    pieces = tmp_path / "pieces"
    pieces.mkdir()
    splits = {"train": "trainpref", "valid": "validpref", "test": "testpref"}
    for split in splits:
        text = (rte / "text" / f"{split}.input0.txt").read_text(encoding="utf-8")
        _write_pieces(model, text.split("\n")[:-1], pieces / split)
    reference = tmp_path / "reference"
    run_fairseq("fairseq-preprocess", "--only-source", "--srcdict", databin / "dict.txt",
                *[a for split, option in splits.items() for a in (f"--{option}", pieces / split)],
                "--destdir", reference, "--workers", "1")
    for split in splits:
        for suffix in (".bin", ".idx"):
            assert ((rte / "input0" / f"{split}{suffix}").read_bytes()
                    == (reference / f"{split}{suffix}").read_bytes()), (split, suffix)

    runs = tmp_path / "runs"
    finetune = run_script("run_glue.py", "--checkpoints", f"std={checkpoint}", "--data", glue,
                          "--out", runs, "--tasks", "RTE", "--seeds", "1", "--batch-sizes", "16",
                          "--lrs", "1e-3", "--epochs", "1", "--cpu",
                          "--", "--max-update", "2", "--num-workers", "0")
    assert finetune.returncode == 0, finetune.stderr[-3000:]
    (metrics_file,) = runs.glob("std/RTE/*/seed1/metrics.json")
    accuracy = json.loads(metrics_file.read_text())["dev"]["RTE"]["accuracy"]
    assert 0 <= accuracy <= 100

    hub = from_pretrained(save_dir)  # the data-bin recorded in the checkpoint
    valid = _entries(databin / "valid")
    for line, entry in zip(lines["valid"], valid):
        assert hub.encode(line).tolist() == [hub.task.source_dictionary.bos(), *entry], line
    fillings = hub.fill_mask("Alice was beginning to get very <mask> of sitting.", topk=3)
    assert len(fillings) == 3 and all(0 < p <= 1 for _, p, _ in fillings)

    # with unknown characters: "é" and the quotes are dict.txt symbols, not pieces (not U+0085,
    # a known difference of the tokenizer: docs/huggingface.md)
    check_lines = lines["valid"][:150] + HARD_LINES[:2]
    report = export_to_transformers(checkpoint, tmp_path / "hf", check_lines)
    assert report.tokenized_texts >= len(check_lines) and report.max_abs_diff <= 1e-4
