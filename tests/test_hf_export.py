"""HuggingFace export: real checkpoints (TACO tied/untied, MLM, fine-tuned STS-B) exported and
compared with fairseq on real text; failures of the parity check; loading offline."""

import csv
import json
import os
import stat
import subprocess
import sys

import pytest
import torch
from fairseq.data import Dictionary

from conftest import CORPUS, REPO, SHARED, fairseq_setup, run_fairseq, run_script, train_args
from taco_fairseq.hf_export import weights
from taco_fairseq.hf_export.check_text import MASK, read_check_lines, select_check_text
from taco_fairseq.hf_export.export import export_to_transformers
from taco_fairseq.hf_export.parity import (
    ParityError,
    check_logits,
    check_token_ids,
    fairseq_token_ids,
)
from taco_fairseq.hf_export.tokenizer import build_tokenizer
from taco_fairseq.hub import from_pretrained

from transformers import AutoModelForSequenceClassification  # noqa: E402  (after taco_fairseq)

ATOL = 1e-4


@pytest.fixture(scope="module")
def check_lines():
    """Held-out real text: the first 150 lines of Wikipedia AB and of WikiText-2 test."""
    paths = [CORPUS / "wikipedia-en-2015-wikiextractor/AB.txt.xz", CORPUS / "wikitext-2-raw/wiki.test.raw.xz"]
    if not all(p.is_file() for p in paths):
        pytest.skip("shared corpus not found")
    return read_check_lines(paths, 150)


@pytest.fixture(scope="module")
def cli_export(trained_checkpoint, tmp_path_factory):
    """The 20-update TACO checkpoint (tied embeddings) exported with the command."""
    out = tmp_path_factory.mktemp("hf") / "taco_tied"
    result = run_script("export_to_hf.py", trained_checkpoint, out, "--check-lines", "150")
    assert result.returncode == 0, result.stderr[-3000:]
    return out, result


@pytest.fixture(scope="module")
def untied_taco_run(tiny_databin, tmp_path_factory):
    """A TACO run with --untie-weights-roberta, logging to TensorBoard."""
    save_dir = tmp_path_factory.mktemp("taco_untied")
    run_fairseq("fairseq-train", *train_args(
        tiny_databin, save_dir, "--untie-weights-roberta", "--tensorboard-logdir",
        save_dir / "tb", "--max-update", "4", "--log-interval", "2",
        "--save-interval-updates", "4", "--max-valid-steps", "2"))
    return save_dir


def test_cli_export_passes_parity_on_real_text(cli_export):
    out, result = cli_export
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "dict.txt",
            "sentencepiece.bpe.model", "export_info.json"} <= names
    info = json.loads((out / "export_info.json").read_text())
    assert info["task"] == "taco_masked_lm" and info["architecture"] == "RobertaForMaskedLM"
    parity = info["parity"]
    assert parity["max_abs_diff"] <= ATOL
    assert parity["tokenized_texts"] >= 300 and parity["tokenized_ids"] > 20000
    assert parity["model_inputs"] >= 15
    config = json.loads((out / "config.json").read_text())
    assert config["max_position_embeddings"] == 64 + 2 and config["tie_word_embeddings"]
    assert "tokenized as fairseq does" in result.stdout


def test_cli_says_which_checkpoint_of_a_save_directory_it_exports(
        cli_export, trained_checkpoint, tmp_path):
    """A save directory means its checkpoint_best.pt, else checkpoint_last.pt, else model.pt;
    the command prints the file it chose before exporting and in its last line."""
    out, result = cli_export
    best = trained_checkpoint / "checkpoint_best.pt"
    rule = ("(the first it holds of checkpoint_best.pt, checkpoint_last.pt, model.pt; pass a "
            "checkpoint file to export another)")
    assert result.stdout.startswith(
        f"{trained_checkpoint} is a save directory: exporting {best} {rule}\n")
    assert result.stdout.splitlines()[-1].startswith(f"wrote {out} from {best}: ")

    only_last = tmp_path / "run"  # no checkpoint_best.pt, as after --disable-validation
    only_last.mkdir()
    (only_last / "checkpoint_last.pt").symlink_to(trained_checkpoint / "checkpoint_last.pt")
    out = tmp_path / "hf"
    result = run_script("export_to_hf.py", only_last, out, "--check-lines", "20")
    assert result.returncode == 0, result.stderr[-3000:]
    last = only_last / "checkpoint_last.pt"
    assert result.stdout.startswith(f"{only_last} is a save directory: exporting {last} {rule}\n")
    assert json.loads((out / "export_info.json").read_text())["checkpoint"] == str(last.resolve())


_OFFLINE_SCRIPT = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("compat", sys.argv[1])
compat = importlib.util.module_from_spec(spec)
spec.loader.exec_module(compat)
compat.hide_unloadable_torchaudio()  # this environment's torchaudio does not load (see compat)
from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline
model = AutoModelForMaskedLM.from_pretrained(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(sys.argv[2])
fill = pipeline("fill-mask", model=model, tokenizer=tokenizer)
print(json.dumps([fill(text, top_k=5) for text in sys.argv[3:]]))
"""


def test_export_loads_offline_and_fills_masks_like_fairseq(cli_export, trained_checkpoint, tmp_path):
    out, _ = cli_export
    texts = ["The city is the capital of <mask>.", "<mask> was born in 1950."]
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home")
    )
    compat = REPO / "taco_fairseq" / "hf_export" / "compat.py"
    result = subprocess.run(
        [sys.executable, "-c", _OFFLINE_SCRIPT, str(compat), str(out), *texts], capture_output=True,
        text=True, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    hf = json.loads(result.stdout.splitlines()[-1])
    roberta = from_pretrained(trained_checkpoint)
    for text, predictions in zip(texts, hf):
        fairseq = roberta.fill_mask(text, topk=5)
        assert [p["token_str"].strip() for p in predictions] == [f[2].strip() for f in fairseq]
        assert [p["score"] for p in predictions] == pytest.approx([f[1] for f in fairseq], abs=1e-6)


@pytest.mark.slow
def test_untied_taco_export(untied_taco_run, check_lines, tmp_path):
    out = tmp_path / "hf"
    report = export_to_transformers(untied_taco_run / "checkpoint_last.pt", out, check_lines)
    assert report.max_abs_diff <= ATOL and report.compared_logits > 0
    config = json.loads((out / "config.json").read_text())
    assert config["tie_word_embeddings"] is False
    model = weights.RobertaForMaskedLM.from_pretrained(out)
    decoder, embeddings = model.lm_head.decoder.weight, model.roberta.embeddings.word_embeddings.weight
    assert decoder.data_ptr() != embeddings.data_ptr() and not torch.equal(decoder, embeddings)


@pytest.mark.slow
def test_tensorboard_logs_taco_curves(untied_taco_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    steps = {}
    for tag in ("train_inner", "train", "valid"):
        events = EventAccumulator(str(untied_taco_run / "tb" / tag))
        events.Reload()
        for metric in ("mlm_loss", "tc_loss", "tc_accuracy"):
            scalars = events.Scalars(metric)
            assert all(torch.isfinite(torch.tensor(s.value)) for s in scalars), (tag, metric)
            steps[tag, metric] = [s.step for s in scalars]
        accuracy = [s.value for s in events.Scalars("tc_accuracy")]
        assert all(0.0 <= a <= 1.0 for a in accuracy)
    assert steps["train_inner", "tc_loss"] == [2, 4]
    assert steps["valid", "tc_accuracy"] == [4]


@pytest.mark.slow
def test_mlm_checkpoint_exports(tiny_databin, check_lines, tmp_path):
    args = train_args(tiny_databin, tmp_path / "ckpt", "--max-update", "2", "--disable-validation")
    args[args.index("taco_masked_lm")] = "masked_lm"
    args[args.index("taco")] = "masked_lm"
    run_fairseq("fairseq-train", *args)
    report = export_to_transformers(tmp_path / "ckpt" / "checkpoint_last.pt", tmp_path / "hf", check_lines)
    assert report.max_abs_diff <= ATOL
    assert json.loads((tmp_path / "hf" / "export_info.json").read_text())["task"] == "masked_lm"


def _stsb_task_dir(databin, destdir, rows):
    """STS-B as fairseq's sentence_prediction reads it: input0/input1 binarized with the
    pre-training dict.txt, label/{split}.label = score / 5 (fairseq's GLUE recipe)."""
    import sentencepiece

    from taco_fairseq.prep.binarize import DatasetWriter

    model = sentencepiece.SentencePieceProcessor(model_file=str(databin / "sentencepiece.bpe.model"))
    for key in ("input0", "input1", "label"):
        (destdir / key).mkdir(parents=True)
    for key in ("input0", "input1"):
        (destdir / key / "dict.txt").write_bytes((databin / "dict.txt").read_bytes())
    for split, tsv in (("train", "train.tsv"), ("valid", "dev.tsv")):
        with open(SHARED / "data/glue/STS-B" / tsv, encoding="utf-8") as f:
            table = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:rows + 1]
        (destdir / "label" / f"{split}.label").write_text("".join(f"{float(r[9]) / 5}\n" for r in table))
        for key, column in (("input0", 7), ("input1", 8)):
            with DatasetWriter(destdir / key / split, model.get_piece_size()) as dataset:
                dataset.add(model.encode([r[column] for r in table]))
    return destdir


@pytest.fixture(scope="module")
def stsb_checkpoint(tiny_databin, trained_checkpoint, tmp_path_factory):
    """The TACO checkpoint fine-tuned for 4 updates on 64 real STS-B pairs (regression)."""
    if not (SHARED / "data/glue/STS-B/train.tsv").is_file():
        pytest.skip("shared GLUE data not found")
    root = tmp_path_factory.mktemp("stsb")
    task_dir = _stsb_task_dir(tiny_databin, root / "STS-B", rows=64)
    run_fairseq(
        "fairseq-train", task_dir, "--task", "sentence_prediction", "--criterion",
        "sentence_prediction", "--num-classes", "1", "--regression-target",
        "--init-token", "0", "--separator-token", "2", "--arch", "roberta_tiny",
        "--max-positions", "64", "--shorten-method", "truncate",
        "--restore-file", trained_checkpoint / "checkpoint_last.pt", "--reset-optimizer",
        "--reset-dataloader", "--reset-meters", "--reset-lr-scheduler",
        "--batch-size", "16", "--optimizer", "adam", "--lr", "1e-3", "--max-update", "4",
        "--disable-validation", "--save-dir", root / "ckpt", "--no-epoch-checkpoints",
        "--cpu", "--num-workers", "0", "--seed", "1", "--user-dir", REPO / "taco_fairseq",
    )
    return root / "ckpt" / "checkpoint_last.pt", task_dir


def test_stsb_checkpoint_exports_regression_head(stsb_checkpoint, tiny_databin, check_lines, tmp_path):
    checkpoint, task_dir = stsb_checkpoint
    spm = tiny_databin / "sentencepiece.bpe.model"
    out = tmp_path / "hf"
    report = export_to_transformers(
        checkpoint, out, check_lines, data_dir=task_dir, sentencepiece_model=spm
    )
    assert report.max_abs_diff <= ATOL
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    assert model.config.num_labels == 1 and model.config.problem_type == "regression"
    roberta = from_pretrained(checkpoint, task_dir, spm)
    head = "sentence_classification_head"
    with open(SHARED / "data/glue/STS-B/dev.tsv", encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[100:104]
    for row in rows:
        tokens = roberta.encode(row[7], row[8])
        expected = roberta.predict(head, tokens, return_logits=True)
        with torch.no_grad():
            got = model(input_ids=tokens.unsqueeze(0)).logits
        assert got.shape == expected.shape == (1, 1)
        assert torch.allclose(got, expected, atol=ATOL, rtol=0)


def test_the_export_has_the_permissions_of_the_users_umask(trained_checkpoint, check_lines,
                                                           tmp_path):
    """Not those of its staging directory (issue 43: the directory 0700, model.safetensors
    0600 whatever the umask)."""
    previous = os.umask(0o027)
    try:
        export_to_transformers(trained_checkpoint, tmp_path / "hf", check_lines[:20])
    finally:
        os.umask(previous)
    out = tmp_path / "hf"
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in [out, *out.iterdir()]}
    assert modes == {"hf": 0o750, **{path.name: 0o640 for path in out.iterdir()}}


def test_corrupted_weight_fails_export_loudly(trained_checkpoint, monkeypatch, capsys, tmp_path):
    from taco_fairseq.hf_export import export

    convert = export.to_transformers

    def corrupted(*args, **kwargs):
        model = convert(*args, **kwargs)
        with torch.no_grad():
            model.roberta.encoder.layer[1].output.dense.bias[0] += 1e-2
        return model

    monkeypatch.setattr(export, "to_transformers", corrupted)
    from taco_fairseq.cli import export_hf as cli

    monkeypatch.setattr(cli, "configure_logging", lambda: None)  # keep pytest's handlers
    out = tmp_path / "hf"
    with pytest.raises(SystemExit) as exit_info:
        cli.main([str(trained_checkpoint), str(out), "--check-lines", "20"])
    message = str(exit_info.value.code)
    assert "transformers' logits differ from fairseq's by" in message
    assert "the text '" in message and "at token" in message
    difference = float(message.split("differ from fairseq's by ")[1].split()[0])
    assert difference > ATOL
    assert list(tmp_path.iterdir()) == []  # nothing written, no staging directory left


def _tokenization_hub(databin, dictionary):
    """A minimal stand-in for RobertaHubInterface's tokenization: its bpe and dictionary."""
    from types import SimpleNamespace

    from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE

    bpe = SentencepieceBPE(SimpleNamespace(
        sentencepiece_model=str(databin / "sentencepiece.bpe.model"),
        sentencepiece_enable_sampling=False, sentencepiece_alpha=None,
    ))
    return SimpleNamespace(bpe=bpe, task=SimpleNamespace(source_dictionary=dictionary))


def _check_text(hub, lines):
    sp = hub.bpe.sp
    return select_check_text(lines, sp.encode, sp.unk_id(), 64)


def test_tokenizer_follows_dict_txt_order(tiny_databin, check_lines, tmp_path):
    """A stock fairseq data-bin whose dict.txt is not in SentencePiece order and lacks pieces."""
    lines = (tiny_databin / "dict.txt").read_text(encoding="utf-8").splitlines()
    reordered = tmp_path / "dict.txt"
    reordered.write_text("\n".join(lines[::-1][:-40]) + "\n", encoding="utf-8")  # 40 pieces fewer
    dictionary = Dictionary.load(str(reordered))
    dictionary.add_symbol(MASK)
    hub = _tokenization_hub(tiny_databin, dictionary)
    tokenizer = build_tokenizer(dictionary, tiny_databin / "sentencepiece.bpe.model", tmp_path, max_positions=64)
    texts, ids = check_token_ids(hub, tokenizer, _check_text(hub, check_lines))
    assert texts >= 300 and ids > 20000
    sp_ids = hub.bpe.sp.encode(check_lines[0])
    assert fairseq_token_ids(hub, check_lines[0])[1:-1] != sp_ids  # the order matters here
    assert dictionary.unk() in sum((fairseq_token_ids(hub, t) for t in check_lines), [])


def test_swapped_dictionary_entries_fail_token_check(tiny_databin, check_lines, tmp_path):
    dictionary = Dictionary.load(str(tiny_databin / "dict.txt"))
    dictionary.add_symbol(MASK)
    swapped = Dictionary.load(str(tiny_databin / "dict.txt"))
    swapped.add_symbol(MASK)
    the, comma = swapped.index("▁the"), swapped.index(",")
    swapped.symbols[the], swapped.symbols[comma] = ",", "▁the"
    swapped.indices["▁the"], swapped.indices[","] = comma, the
    tokenizer = build_tokenizer(swapped, tiny_databin / "sentencepiece.bpe.model", tmp_path, max_positions=64)
    hub = _tokenization_hub(tiny_databin, dictionary)
    with pytest.raises(ParityError, match="token ids differ at position"):
        check_token_ids(hub, tokenizer, _check_text(hub, check_lines))


def test_check_text_has_the_hard_cases(tiny_databin, check_lines):
    hub = _tokenization_hub(tiny_databin, None)
    check = _check_text(hub, check_lines)
    sp = hub.bpe.sp
    masked = [s for s in check.sentences if MASK in s]
    assert len(masked) == 4
    assert any(s.startswith(MASK) for s in masked) and any(s.endswith(MASK) for s in masked)
    assert max(len(sp.encode(s)) for s in check.sentences) > 64  # truncation exercised
    assert any(sp.unk_id() in sp.encode(s) for s in check.sentences)
    assert any(sum(not c.isascii() for c in s) >= 5 for s in check.sentences)
    assert check.pairs and all(len(sp.encode(a)) + len(sp.encode(b)) + 4 <= 64 for a, b in check.pairs)


@pytest.mark.parametrize("arch", [pytest.param("roberta_small", marks=pytest.mark.slow),
                                  "roberta_tiny --untie-weights-roberta"])
def test_every_size_converts_exactly(arch, tiny_databin, check_lines, tmp_path):
    """Random (not initial) weights, so that every parameter counts: the paper's BERT-small and
    untied embeddings (roberta_tiny tied and untied with trained weights: the runs above)."""
    _, task, model, _ = fairseq_setup(tiny_databin, "--arch", *arch.split())
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.1)
    model.eval()
    hf_model = weights.to_transformers(model)
    hub = _tokenization_hub(tiny_databin, task.source_dictionary)
    hub.model = model
    tokenizer = build_tokenizer(task.source_dictionary, tiny_databin / "sentencepiece.bpe.model", tmp_path, max_positions=64)
    check = _check_text(hub, check_lines)
    inputs = [(s, None) for s in check.sentences] + list(check.pairs)  # mixed batches
    compared, worst, _ = check_logits(hub, hf_model, tokenizer, inputs, atol=ATOL)
    assert compared > 0 and worst <= ATOL


def test_unconvertible_options_are_named(tiny_databin):
    _, _, model, _ = fairseq_setup(tiny_databin, "--arch", "roberta_prenorm", "--encoder-layers", "1")
    with pytest.raises(ValueError) as error:
        weights.to_transformers(model)
    assert "--encoder-normalize-before is True" in str(error.value)
    assert "--layernorm-embedding is False" in str(error.value)


def test_export_refuses_a_data_bin_with_another_dictionary(trained_checkpoint, tiny_databin,
                                                           tmp_path):
    """Same size, two entries swapped: the parity check alone would pass (both sides would
    use the same wrong tokenizer)."""
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    (swapped / "sentencepiece.bpe.model").symlink_to(tiny_databin / "sentencepiece.bpe.model")
    lines = (tiny_databin / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[10], lines[11] = lines[11], lines[10]
    (swapped / "dict.txt").write_text("".join(lines), encoding="utf-8")
    result = run_script("export_to_hf.py", trained_checkpoint, tmp_path / "hf", "--data", swapped,
                        "--check-lines", "20")
    assert result.returncode == 1
    assert (f"was trained with another dictionary (2001 symbols) than {swapped / 'dict.txt'} "
            "(2001 symbols)") in result.stderr
    assert not (tmp_path / "hf").exists()
