"""Standard fairseq options that crash inside fairseq's own code and that the plugin makes work:
``--sample-break-mode eos`` (numpy 2 has no ``np.compat``) and ``--mask-whole-words``
(``masked_lm`` reads ``self.args``)."""

import json

import pytest
import torch

from conftest import fairseq_setup, first_batch, run_fairseq, train_args


@pytest.mark.slow
def test_eos_blocks_and_whole_word_masking_train_end_to_end(tiny_databin, tmp_path):
    out = run_fairseq("fairseq-train", *train_args(
        tiny_databin, tmp_path / "run", "--sample-break-mode", "eos", "--mask-whole-words",
        "--max-update", "3", "--log-interval", "1", "--no-save", "--max-valid-steps", "2",
        "--skip-invalid-size-inputs-valid-test"))
    updates = [json.loads(line.split("train_inner | ")[1])["num_updates"]
               for line in out.stdout.splitlines() if "train_inner | " in line]
    assert updates == ["1", "2", "3"]
    assert '"valid_loss"' in out.stdout and "done training" in out.stdout


def test_eos_blocks_hold_one_line_each(tiny_databin):
    _, task, _, _ = fairseq_setup(tiny_databin, "--sample-break-mode", "eos")
    dictionary = task.dictionary
    tokens = _original_tokens(first_batch(task, batch_size=8), dictionary)
    real = tokens.ne(dictionary.pad())
    assert (tokens[:, 0] == dictionary.bos()).all()
    # one </s> per block, at its end: a block is one line of the data
    assert (tokens.eq(dictionary.eos()).sum(1) == 1).all()
    last = real.sum(1) - 1
    assert (tokens[torch.arange(len(tokens)), last] == dictionary.eos()).all()


def test_whole_word_masking_masks_every_piece_of_a_word(tiny_databin):
    """Word starts are the SentencePiece pieces beginning with ▁ (and special symbols)."""
    _, task, _, _ = fairseq_setup(tiny_databin, "--mask-whole-words", "--mask-prob", "0.3")
    dictionary = task.dictionary
    batch = first_batch(task, batch_size=8)
    masked = batch["target"].ne(dictionary.pad())  # masked, randomized or kept positions
    original = _original_tokens(batch, dictionary)
    continuations = 0
    for row_tokens, row_masked in zip(original.tolist(), masked.tolist()):
        for i in range(1, len(row_tokens)):
            previous, symbol = row_tokens[i - 1], dictionary[row_tokens[i]]
            if min(previous, row_tokens[i]) >= dictionary.nspecial and not symbol.startswith(
                "\u2581"
            ):  # a piece inside a word: masked together with the piece before it
                continuations += 1
                assert row_masked[i] == row_masked[i - 1], (symbol, i)
    assert continuations > 50 and masked.any()


def _original_tokens(batch, dictionary):
    """``[batch, seq_len]``: the tokens before masking (targets hold them where masked)."""
    target = batch["target"]
    return torch.where(target.ne(dictionary.pad()), target, batch["net_input"]["src_tokens"])


def test_a_validation_without_its_best_checkpoint_metric_stops_in_one_line():
    """A validation none of whose batches had a masked token logs no loss (the criteria log
    None for them): fairseq-train stops naming the update and what to check, not with a
    KeyError from choosing the best checkpoint."""
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    import fairseq_cli.train as fairseq_train
    import taco_fairseq
    from taco_fairseq.errors import OptionError

    taco_fairseq.register()  # the patches
    cfg = OmegaConf.create({"checkpoint": {"best_checkpoint_metric": "loss",
                                           "maximize_best_checkpoint_metric": False}})
    trainer = SimpleNamespace(get_num_updates=lambda: 500, task=None)
    with pytest.raises(OptionError, match=r"the validation at update 500 logged no loss: none "
                       r"of its batches had a masked token .*--mask-prob"):
        fairseq_train.get_valid_stats(cfg, trainer, {"mlm_loss": None}, False)
    stats = fairseq_train.get_valid_stats(cfg, trainer, {"loss": 9.1}, False)
    assert stats == {"loss": 9.1, "num_updates": 500}
