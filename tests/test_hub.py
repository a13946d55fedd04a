"""taco_fairseq.hub.from_pretrained: the documented example, SentencePiece (not GPT-2) BPE,
and errors that name what to pass."""

import ast
import json
import re

import pytest
import sentencepiece as spm
import torch

from conftest import REPO
from taco_fairseq import hub
from taco_fairseq.metadata import load_lazily, recorded_data_dir


def _documented_example() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- hub-example.*?-->\s*```python\n(.*?)```", text, re.S)
    assert match, "README.md lost its hub example"
    return match.group(1)


def test_documented_example_runs_as_written(trained_checkpoint, tiny_databin, tmp_path, monkeypatch, capsys):
    """The example after scripts/quickstart.sh: runs/quickstart/{checkpoints,data-bin}."""
    run = tmp_path / "runs" / "quickstart"
    run.mkdir(parents=True)
    (run / "checkpoints").symlink_to(trained_checkpoint)
    (run / "data-bin").symlink_to(tiny_databin)
    monkeypatch.chdir(tmp_path)
    exec(compile(_documented_example(), "README.md", "exec"), {})
    shape_line, *fills = capsys.readouterr().out.strip().splitlines()
    tokens = ast.literal_eval(shape_line.split("]")[0] + "]")
    assert tokens[0] == 0 and tokens[-1] == 2
    assert shape_line.endswith(f"(1, {len(tokens)}, 128) 3")  # roberta_tiny: H=128, L=2
    assert len(fills) == 3
    probabilities = [float(line.split()[0]) for line in fills]
    assert probabilities == sorted(probabilities, reverse=True) and 0 < sum(probabilities) <= 1
    assert all(line.split(None, 1)[1].startswith("The cat sat on the") for line in fills)


def test_loads_with_sentencepiece_in_eval_mode(trained_checkpoint, tiny_databin):
    roberta = hub.from_pretrained(trained_checkpoint / "checkpoint_last.pt", data_dir=tiny_databin)
    assert not roberta.model.training
    sp = spm.SentencePieceProcessor(model_file=str(tiny_databin / "sentencepiece.bpe.model"))
    text = "Zwingli was born in the Toggenburg valley of Switzerland."
    assert roberta.encode(text).tolist() == [0, *sp.encode(text), 2]  # fairseq id == piece id
    tokens = roberta.encode(text, "A second sentence.")
    assert (tokens == 2).sum() == 3  # <s> a </s> </s> b </s>
    first = roberta.extract_features(tokens)
    assert torch.equal(first, roberta.extract_features(tokens))  # no dropout
    layers = roberta.extract_features(tokens, return_all_hiddens=True)
    assert len(layers) == 3 and all(layer.shape == first.shape for layer in layers)
    assert torch.equal(layers[-1], first)


def test_fill_mask_returns_topk_fillings_with_their_own_probabilities(trained_checkpoint, tiny_databin):
    """Every token, special symbols included (fairseq's own fill_mask drops </s> and shifts the
    probabilities), in the order and with the probabilities of the model's softmax."""
    roberta = hub.from_pretrained(trained_checkpoint / "checkpoint_last.pt", data_dir=tiny_databin)
    dictionary = roberta.task.source_dictionary
    text = "The cat sat on the <mask>."
    fillings = roberta.fill_mask(text, topk=len(dictionary))
    assert len(fillings) == len(dictionary)
    sp = spm.SentencePieceProcessor(model_file=str(tiny_databin / "sentencepiece.bpe.model"))
    before, after = text.split("<mask>")  # encoded apart, as fairseq's fill_mask does
    tokens = torch.tensor([0, *sp.encode(before.rstrip()), roberta.task.mask_idx,
                           *sp.encode(after), 2])  # fairseq id == piece id
    with torch.no_grad():
        logits, _ = roberta.model(tokens.unsqueeze(0))
    expected = logits[0, tokens.eq(roberta.task.mask_idx)][0].softmax(-1).sort(descending=True)
    probabilities = torch.tensor([p for _, p, _ in fillings])
    torch.testing.assert_close(probabilities, expected.values)
    by_text = {filled_token: p for _, p, filled_token in fillings}
    assert by_text["</s>"] == pytest.approx(expected.values[expected.indices == 2].item())
    best_text, best_probability, best_token = roberta.fill_mask(text, topk=1)[0]
    assert best_text == text.replace(" <mask>", best_token) and best_probability == fillings[0][1]
    with pytest.raises(ValueError, match="exactly one <mask>"):
        roberta.fill_mask("no mask here")
    with pytest.raises(ValueError, match="topk must be in"):
        roberta.fill_mask(text, topk=0)


def test_a_glue_finetuned_checkpoint_loads_from_what_it_records_and_fills_masks(
        finetuned_checkpoint, trained_checkpoint, tiny_databin, glue_databin):
    """From the checkpoint alone (issue 43): its GLUE task directory, and the SentencePiece
    model of the pre-training data-bin that taco-prepare-glue recorded there; fairseq keeps the
    LM head through fine-tuning, so fill_mask works (it failed on the task's mask_idx)."""
    roberta = hub.from_pretrained(finetuned_checkpoint)
    assert roberta.cfg.task.data == str((glue_databin / "RTE").resolve())
    assert roberta.cfg.bpe.sentencepiece_model == str(
        (tiny_databin / "sentencepiece.bpe.model").resolve())
    pretrained = trained_checkpoint / "checkpoint_last.pt"
    weights = {path: load_lazily(path)["model"] for path in (finetuned_checkpoint, pretrained)}
    for name in ("encoder.lm_head.dense.weight", "encoder.lm_head.bias"):  # not fine-tuned
        assert torch.equal(weights[finetuned_checkpoint][name], weights[pretrained][name])
    text = "The cat sat on the <mask>."
    fillings, before = roberta.fill_mask(text, topk=3), hub.from_pretrained(pretrained).fill_mask(
        text, topk=3)
    # one update at lr 1e-5 barely moves the token embeddings the LM head shares
    assert [token for *_, token in fillings] == [token for *_, token in before]
    assert [p for _, p, _ in fillings] == pytest.approx([p for _, p, _ in before], abs=1e-3)
    tokens = roberta.encode("A sentence.", "Another one.")
    assert roberta.predict("sentence_classification_head", tokens).shape == (1, 2)


def test_errors_name_what_to_pass(trained_checkpoint, tiny_databin, tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds none of checkpoint_best.pt"):
        hub.from_pretrained(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        hub.from_pretrained(tmp_path / "missing.pt")
    no_model = tmp_path / "databin-without-spm"
    no_model.mkdir()
    (no_model / "dict.txt").write_bytes((tiny_databin / "dict.txt").read_bytes())
    with pytest.raises(FileNotFoundError,
                       match=r"a GLUE task directory\?\): pass the pre-training data-bin's"):
        hub.from_pretrained(trained_checkpoint, data_dir=no_model)
    # a GLUE task directory whose prep_info.json names a data-bin that is gone
    (no_model / "prep_info.json").write_text(json.dumps({"pretraining_data": str(tmp_path / "gone")}))
    with pytest.raises(FileNotFoundError, match=(
            rf"no sentencepiece.bpe.model in {re.escape(str(no_model.resolve()))} nor in the "
            rf"pre-training data-bin {re.escape(str(tmp_path / 'gone'))} that its "
            r"prep_info.json records: pass the pre-training data-bin's model")):
        hub.from_pretrained(trained_checkpoint, data_dir=no_model)
    other_vocabulary = tmp_path / "other-databin"
    other_vocabulary.mkdir()
    lines = (tiny_databin / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    (other_vocabulary / "dict.txt").write_text("".join(lines[:100]), encoding="utf-8")
    spm_file = tiny_databin / "sentencepiece.bpe.model"
    with pytest.raises(ValueError, match=r"trained with another dictionary \(2001 symbols\) than "
                                         rf"{re.escape(str(other_vocabulary / 'dict.txt'))}"):
        hub.from_pretrained(trained_checkpoint, data_dir=other_vocabulary, sentencepiece_model=spm_file)
    monkeypatch.setattr(hub, "recorded_data_dir", lambda checkpoint, state: str(tmp_path / "moved"))
    with pytest.raises(FileNotFoundError,
                       match=r"data_dir= in Python, --data for taco-export-hf"):
        hub.from_pretrained(trained_checkpoint)


def _databin_copy(tiny_databin, directory, swap=False):
    """A data-bin with ``tiny_databin``'s files; ``swap``: dict.txt with two entries swapped
    (same size, as after taco-prepare-data --force on other text)."""
    directory.mkdir()
    for name in ("sentencepiece.bpe.model", "valid.bin", "valid.idx"):
        (directory / name).symlink_to(tiny_databin / name)
    lines = (tiny_databin / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    if swap:
        lines[10], lines[11] = lines[11], lines[10]
    (directory / "dict.txt").write_text("".join(lines), encoding="utf-8")
    return directory


def test_a_dictionary_or_sentencepiece_model_of_the_same_size_is_refused(
        trained_checkpoint, tiny_databin, tmp_path):
    from taco_fairseq.analysis.checkpoints import load_checkpoint

    checkpoint = trained_checkpoint / "checkpoint_last.pt"
    swapped = _databin_copy(tiny_databin, tmp_path / "swapped", swap=True)
    message = (rf"checkpoint {re.escape(str(checkpoint))} was trained with another dictionary "
               rf"\(2001 symbols\) than {re.escape(str(swapped / 'dict.txt'))} \(2001 symbols\)"
               rf".* It was trained on {re.escape(str(tiny_databin / 'dict.txt'))}\.")
    with pytest.raises(ValueError, match=message):
        hub.from_pretrained(checkpoint, data_dir=swapped)
    with pytest.raises(ValueError, match=message):  # the analyses load through the hub
        load_checkpoint(checkpoint, swapped)
    # the right dict.txt with another SentencePiece model (here: one byte more)
    other_model = tmp_path / "other.model"
    other_model.write_bytes((tiny_databin / "sentencepiece.bpe.model").read_bytes() + b"\n")
    with pytest.raises(ValueError, match=(
            rf"trained with another SentencePiece model than {re.escape(str(other_model))}: text "
            r"would be cut into other pieces")):
        hub.from_pretrained(checkpoint, data_dir=tiny_databin, sentencepiece_model=other_model)


def test_a_relative_data_path_is_looked_for_beside_the_checkpoint(trained_checkpoint, tiny_databin,
                                                                  tmp_path, monkeypatch):
    """A run trained with --data databin (relative): from another directory that has a
    databin of its own, the checkpoint still loads the data-bin beside it."""
    state = torch.load(trained_checkpoint / "checkpoint_last.pt", weights_only=True)
    state["cfg"]["task"]["data"] = "databin"
    run = tmp_path / "run"
    run.mkdir()
    torch.save(state, run / "checkpoint_last.pt")
    (run / "databin").symlink_to(tiny_databin)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _databin_copy(tiny_databin, elsewhere / "databin", swap=True)
    monkeypatch.chdir(elsewhere)
    assert recorded_data_dir(run / "checkpoint_last.pt",
                             load_lazily(run / "checkpoint_last.pt")) == str(run / "databin")
    roberta = hub.from_pretrained(run / "checkpoint_last.pt")
    assert roberta.cfg.task.data == str(tiny_databin.resolve())
    # without one beside it: the current directory's, here one with another dictionary
    (run / "databin").unlink()
    with pytest.raises(ValueError, match="trained with another dictionary"):
        hub.from_pretrained(run / "checkpoint_last.pt")
