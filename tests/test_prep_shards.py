"""Sharded preparation (``--shards``): fairseq's ``DATA=shard0:shard1`` layout from real text,
trained on across an epoch boundary and loaded back through the recorded colon path."""

import json

import numpy as np
import pytest
from fairseq.data import Dictionary, data_utils

from conftest import run_fairseq, train_args
from taco_fairseq import hub
from taco_fairseq.prep.corpus import read_document_lines
from taco_fairseq.prep.documents import count_documents
from taco_fairseq.prep.pretraining import PrepareOptions, prepare_pretraining_data


@pytest.fixture(scope="module")
def sharded(tmp_path_factory, wikipedia_aa, alice, wikitext_test):
    """100 lines of Wikipedia (one article) and of a book in 2 shards; WikiText validates."""
    destdir = tmp_path_factory.mktemp("sharded")
    info = prepare_pretraining_data(PrepareOptions(
        destdir=destdir, train=[wikipedia_aa, alice], valid=[wikitext_test], shards=2,
        vocab_size=400, max_lines=100, workers=2, keep_text=True,
    ))
    return destdir, info


def _documents(path):
    text = path.read_text(encoding="utf-8")
    return text[:-1].split("\n\n") if text else []


def test_layout_is_fairseqs_sharded_data(sharded):
    destdir, info = sharded
    shard0, shard1 = destdir / "shard0", destdir / "shard1"
    assert sorted(p.name for p in shard0.iterdir()) == [
        "dict.txt", "sentencepiece.bpe.model", "train.bin", "train.idx", "valid.bin", "valid.idx"]
    assert sorted(p.name for p in shard1.iterdir()) == [
        "dict.txt", "sentencepiece.bpe.model", "train.bin", "train.idx"]
    for name in ("dict.txt", "sentencepiece.bpe.model"):
        assert (shard0 / name).read_bytes() == (shard1 / name).read_bytes()
        assert not (destdir / name).exists()
    assert info["data"] == f"{shard0}:{shard1}"
    assert info["splits"]["valid"]["lines"] == 100  # the --valid file, in shard0
    assert json.loads((destdir / "prep_info.json").read_text()) == info


def test_every_training_document_is_in_exactly_one_shard(sharded, wikipedia_aa, alice):
    destdir, info = sharded
    text = destdir / "text"
    expected = "\n".join(read_document_lines(wikipedia_aa, max_lines=100)).split("\n\n")
    expected.append("\n".join(read_document_lines(alice, max_lines=100)))
    shards = [_documents(text / f"train.shard{i}.txt") for i in range(2)]
    assert sorted(shards[0] + shards[1]) == sorted(expected)
    assert all(shards)
    sizes = [sum(len(d.encode()) + 1 for d in docs) for docs in shards]
    assert abs(sizes[0] - sizes[1]) <= max(len(d.encode()) + 1 for d in expected)
    assert [(s["docs"], s["lines"]) for s in info["shards"]] == [
        count_documents(text / f"train.shard{i}.txt")[::-1] for i in range(2)]


def test_shard_datasets_and_dict_counts(sharded):
    destdir, info = sharded
    dictionary = Dictionary.load(str(destdir / "shard0" / "dict.txt"))
    counts = np.zeros(len(dictionary), dtype=np.int64)
    for i, shard in enumerate(info["shards"]):
        dataset = data_utils.load_indexed_dataset(str(destdir / f"shard{i}" / "train"), dictionary)
        assert len(dataset) == shard["dataset_entries"]
        ids = np.concatenate([dataset[j].numpy() for j in range(len(dataset))])
        counts += np.bincount(ids, minlength=len(dictionary))
    assert sum(s["dataset_entries"] for s in info["shards"]) == info["splits"]["train"][
        "dataset_entries"]
    assert dictionary.count[dictionary.nspecial:] == counts[dictionary.nspecial:].tolist()


@pytest.mark.slow
def test_training_runs_over_both_shards_and_the_hub_loads_it(sharded, tmp_path):
    """Two epochs of a few updates: epoch 1 on shard0, epoch 2 on shard1, validation on shard0;
    the hub finds the data-bin through the colon path the checkpoint records."""
    destdir, info = sharded
    save_dir = tmp_path / "run"
    result = run_fairseq("fairseq-train", *train_args(
        info["data"], save_dir, "--max-update", "1000", "--max-epoch", "2",
        "--save-interval-updates", "0", "--tokens-per-sample", "32", "--batch-size", "64"))
    log = result.stdout
    loads = [line for line in log.splitlines() if "loaded" in line and "/train" in line]
    shards = [int("shard1" in line) for line in loads]  # each load logs 2 lines (fairseq)
    assert [shard for i, shard in enumerate(shards) if i == 0 or shard != shards[i - 1]][:2] == [
        0, 1]
    assert "begin training epoch 2" in log and "end of epoch 2" in log
    valid = [line for line in log.splitlines() if "loaded" in line and "/valid" in line]
    assert valid and all("shard0" in line for line in valid)
    roberta = hub.from_pretrained(save_dir / "checkpoint_last.pt")
    assert roberta.encode("Anarchism is a political philosophy.").numel() > 2
