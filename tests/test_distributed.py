"""Multi-process training with fairseq's own distributed mode (gloo on the CPU): the objective
and its gradient do not depend on how an update's batches are split over workers, no TC
variant leaves a parameter without gradient (DistributedDataParallel's failure), and
--tc-cross-worker-negatives draws negatives from all workers' sequences with the distribution
of one worker holding the whole batch."""

import dataclasses
import json
import math
import shutil

import pytest
import torch

from conftest import ONE_THREAD, USER_DIR, fairseq_setup, run_fairseq, train_args
from distributed_worker import DDP_VARIANTS, NO_DROPOUT
from multiprocess import fairseq_train_ranks, worker_results
import taco_fairseq  # noqa: F401  (weights-only loading of fairseq checkpoints)
from taco_fairseq.batch import CrossWorkerTacoBatch

#: Several fairseq processes per test (or per module fixture).
pytestmark = pytest.mark.slow


def _sgd_args(databin, save_dir, *extra):
    """Two plain SGD updates with lr 1 (parameters after an update = before − gradient), no
    dropout, a checkpoint after each update."""
    return [
        databin, "--user-dir", USER_DIR, "--task", "taco_masked_lm", "--criterion", "taco",
        "--arch", "roberta_tiny", "--tokens-per-sample", "64", "--batch-size", "4",
        "--optimizer", "sgd", "--lr", "1", "--lr-scheduler", "fixed", "--clip-norm", "0",
        "--dropout", "0", "--attention-dropout", "0", "--cpu", "--num-workers", "0",
        "--seed", "1", "--max-update", "2", "--log-format", "json", "--log-interval", "1",
        "--disable-validation", "--no-epoch-checkpoints", "--save-interval-updates", "1",
        "--keep-interval-updates", "-1", "--save-dir", save_dir, "--tc-weight", "0.7", *extra,
    ]


def _train_records(output):
    return [json.loads(line.split("train_inner | ")[1])
            for line in output.splitlines() if "train_inner | " in line]


def _weights(save_dir, update):
    return torch.load(save_dir / f"checkpoint_1_{update}.pt", weights_only=True)["model"]


def test_two_processes_equal_one_process_with_update_freq_2(synthetic_databin, tmp_path):
    """fairseq shards the same shuffled batches over ranks (rank r takes batches r, r+2, ...),
    so one process with --update-freq 2 and two processes see the same global batches, masks
    and TACO samples; masked tokens and anchors differ between the batches of an update.
    Every process runs one thread (as the ranks do), so the per-batch gradients are bitwise
    those of the ranks: with several threads the order of MKL's and OpenMP's reductions can
    vary between processes (a rare 1e-6 difference after update 1)."""
    one, two = tmp_path / "one", tmp_path / "two"
    single = run_fairseq("fairseq-train", *_sgd_args(synthetic_databin, one, "--update-freq", "2"),
                         env=ONE_THREAD)
    rank0, rank1 = fairseq_train_ranks(_sgd_args(synthetic_databin, two))

    logged = [_train_records(out) for out in (single.stdout, rank0)]
    assert [r["bsz"] for r in logged[0]] == ["8", "8"] == [r["bsz"] for r in logged[1]]
    for a, b in zip(*logged):
        for key in ("loss", "mlm_loss", "tc_loss", "tc_anchors", "tc_accuracy", "gnorm"):
            assert a[key] == b[key], key

    # update 1 from the same initial weights: equal weights after it = equal gradients
    for name, w in _weights(one, 1).items():
        torch.testing.assert_close(_weights(two, 1)[name], w, rtol=0, atol=1e-7)
    # update 2: the gradient itself (lr 1)
    gradients = {}
    for run in (one, two):
        before, after = _weights(run, 1), _weights(run, 2)
        gradients[run] = {name: before[name] - after[name] for name in before}
    scale = max(float(g.abs().max()) for g in gradients[one].values())
    for name, g in gradients[one].items():
        torch.testing.assert_close(gradients[two][name], g, rtol=1e-5, atol=1e-6 * scale)


def test_two_processes_resume_from_their_last_checkpoint(synthetic_databin, tmp_path):
    """Rank 0 loads checkpoint_last.pt and fairseq broadcasts it, its cfg by then a
    DictConfig, to rank 1, which unpickles it weights-only (before the patch: "Unsupported
    global: GLOBAL omegaconf.dictconfig.DictConfig" on rank 1)."""
    fairseq_train_ranks(_sgd_args(synthetic_databin, tmp_path, "--max-update", "1"))
    rank0, rank1 = fairseq_train_ranks(_sgd_args(synthetic_databin, tmp_path))
    assert "Loaded checkpoint" in rank0 and "(epoch 1 @ 1 updates)" in rank0
    assert [r["num_updates"] for r in _train_records(rank0)] == ["2"]


@pytest.fixture(scope="module")
def ddp_results(synthetic_databin):
    return [rank["ddp-variants"] for rank in worker_results(synthetic_databin)]


@pytest.mark.parametrize("backend", ["legacy_ddp", "pytorch_ddp"])
@pytest.mark.parametrize("variant", sorted(DDP_VARIANTS))
def test_every_variant_trains_under_ddp(ddp_results, backend, variant):
    for rank in ddp_results:
        assert rank[f"{backend}/{variant}"] == "ok"
    # gradients were averaged over the ranks: the same weights on both
    torch.testing.assert_close(ddp_results[0][f"weights/{variant}"],
                               ddp_results[1][f"weights/{variant}"], rtol=1e-6, atol=0)


def test_ddp_check_catches_an_unused_parameter(ddp_results):
    for rank in ddp_results:
        assert "parameters that were not used in producing loss" in rank[
            "pytorch_ddp/control-unused-parameter"]


def _merge(samples):
    """The batches of all workers as the one batch of a single worker (rows in rank order)."""
    seq_len = samples[0]["net_input"]["src_tokens"].size(1)
    assert all(s["net_input"]["src_tokens"].size(1) == seq_len for s in samples)
    merged = {
        "net_input": {k: torch.cat([s["net_input"][k] for s in samples])
                      for k in ("src_tokens", "src_lengths")},
        "target": torch.cat([s["target"] for s in samples]),
        "ntokens": sum(s["ntokens"] for s in samples),
        "nsentences": sum(s["nsentences"] for s in samples),
    }
    parts, rows, pool = [], 0, 0
    for s in samples:
        t, shift = s["taco"], rows * seq_len
        parts.append((t.anchor + shift, t.positive + shift, t.candidates + shift,
                      t.anchor_row_start + pool, t.anchor_row_length, t.negative_uniform))
        rows += s["net_input"]["src_tokens"].size(0)
        pool += len(t.candidates)
    merged["taco"] = CrossWorkerTacoBatch(*map(torch.cat, zip(*parts)), training=True,
                                          all_worker_totals=torch.ones(2))
    return merged


@pytest.fixture(scope="module")
def two_workers(synthetic_databin):
    return [rank["cross-worker"] for rank in worker_results(synthetic_databin)]


def _reference(synthetic_databin, state, sample):
    _, _, model, criterion = fairseq_setup(
        synthetic_databin, "--tc-cross-worker-negatives", "--sample-break-mode", "none", *NO_DROPOUT
    )
    model.load_state_dict(state)
    model.zero_grad()
    losses = criterion.compute_losses(model, sample)
    losses.tc_loss.backward()
    grad = [torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters()]
    return losses, grad


def test_two_workers_equal_one_worker_holding_both_batches(two_workers, synthetic_databin):
    ranks = two_workers
    for name, a in ranks[0]["model"].items():  # the same initial model on both ranks
        assert torch.equal(a, ranks[1]["model"][name])
    merged = _merge([r["sample"] for r in ranks])
    losses, grad = _reference(synthetic_databin, ranks[0]["model"], merged)
    steps = [r["steps"][0] for r in ranks]
    assert all(s["anchors"] > 0 for s in steps)
    assert losses.num_anchors == sum(s["anchors"] for s in steps)
    torch.testing.assert_close(
        losses.tc_loss, sum(s["tc_loss"] for s in steps), rtol=1e-5, atol=0
    )
    # keys carry no gradient, so each worker's anchors give its share of the gradient
    scale = max(float(g.abs().max()) for g in grad)
    for ref, g0, g1 in zip(grad, steps[0]["grad"], steps[1]["grad"]):
        torch.testing.assert_close(g0 + g1, ref, rtol=1e-4, atol=1e-6 * scale)


def test_negatives_come_from_the_sequences_of_both_workers(two_workers):
    """Each rank's negatives, as drawn on two gloo processes, hit every sequence of both ranks
    but never the anchor's own, and come from the other rank in the share uniform sampling over
    all candidates outside the anchor's sequence gives."""
    samples = [rank["sample"] for rank in two_workers]
    pool_sizes = two_workers[0]["drawn"]["pool_sizes"]
    assert pool_sizes == [len(s["taco"].candidates) for s in samples]
    offsets = [0, pool_sizes[0]]
    # the (rank, sequence) of every candidate of the gathered pool, in rank order
    sequence_of = [(r, int(row)) for r, s in enumerate(samples)
                   for row in s["taco"].candidates // s["net_input"]["src_tokens"].size(1)]
    every_sequence = set(sequence_of)
    assert len({r for r, _ in every_sequence}) == 2
    for rank, result in enumerate(two_workers):
        taco, negative = samples[rank]["taco"], result["drawn"]["negative"]
        assert negative.shape == (len(taco.anchor), 50)
        start = (taco.anchor_row_start + offsets[rank]).unsqueeze(1)
        own = (negative >= start) & (negative < start + taco.anchor_row_length.unsqueeze(1))
        assert not own.any()
        assert {sequence_of[i] for i in negative.flatten().tolist()} == every_sequence
        other = (negative < offsets[rank]) | (negative >= offsets[rank] + pool_sizes[rank])
        expected = (pool_sizes[1 - rank] / (sum(pool_sizes) - taco.anchor_row_length)).mean()
        assert abs(float(other.float().mean()) - float(expected)) < 0.03


def test_dummy_batch_shares_no_keys(two_workers, synthetic_databin):
    """With rank 1 on fairseq's padding batch, rank 0 draws only from its own batch."""
    rank0 = two_workers[0]
    sample = {**rank0["sample"]}
    sample["taco"] = dataclasses.replace(sample["taco"], training=True,
                                         all_worker_totals=torch.ones(2), dummy=False)
    losses, _ = _reference(synthetic_databin, rank0["model"], sample)
    torch.testing.assert_close(rank0["steps"][1]["tc_loss"], losses.tc_loss, rtol=1e-5, atol=0)
    # and differs from the step whose negatives came from both workers
    assert not torch.isclose(rank0["steps"][0]["tc_loss"], losses.tc_loss, rtol=1e-3)


def test_fairseq_train_with_one_sequence_per_worker(synthetic_databin, tmp_path):
    """--batch-size 1: each worker holds one sequence, yet every anchor gets negatives."""
    args = train_args(synthetic_databin, tmp_path, "--tc-cross-worker-negatives", "--batch-size",
                      "1", "--max-update", "3", "--log-interval", "1", "--disable-validation",
                      "--save-interval-updates", "0")
    rank0, _ = fairseq_train_ranks(args)
    records = [json.loads(line.split("train_inner | ")[1])
               for line in rank0.splitlines() if "train_inner | " in line]
    assert [r["num_updates"] for r in records] == ["1", "2", "3"]
    for r in records:
        assert r["bsz"] == "2" and r["tc_skipped"] == "0"
        assert int(r["tc_anchors"]) > 0 and math.isfinite(float(r["tc_loss"]))


@pytest.mark.parametrize("flag", ["--tc-key-gradients", "--tc-detach-keys"])  # new, deprecated
def test_needs_detached_keys(synthetic_databin, flag):
    with pytest.raises(ValueError, match="--tc-cross-worker-negatives needs the positives and "
                       "negatives detached.*Leave out --tc-key-gradients"):
        fairseq_setup(synthetic_databin, "--tc-cross-worker-negatives", flag)


def test_a_resume_on_more_workers_goes_on_where_the_data_was_left(synthetic_databin, tmp_path):
    """The issue's case: a save-dir of one process resumed with two. Before, the sequences per
    update doubled without a word and each rank restarted at the one process's position in its
    own half of the batches, skipping batches. Now it is refused by name on every rank unless
    --allow-changed-batch; allowed, with the same sequences per update (one process with
    --update-freq 2 trains as two with 1: the test above) the resumed updates are the
    uninterrupted run's."""
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    one = run_fairseq("fairseq-train", *_sgd_args(synthetic_databin, whole, "--update-freq", "2",
                                                  "--max-update", "4"), env=ONE_THREAD)
    resumed.mkdir()
    shutil.copy(whole / "checkpoint_1_2.pt", resumed / "checkpoint_last.pt")
    args = _sgd_args(synthetic_databin, resumed, "--max-update", "4")
    with pytest.raises(AssertionError) as refused:  # a rank failed
        fairseq_train_ranks(args)
    error = (f"error: {resumed / 'checkpoint_last.pt'} (update 2) was trained with other batches "
             "than this run's: --distributed-world-size 1 in the checkpoint, 2 in this run; "
             "--update-freq 2 in the checkpoint, 1 in this run. Resume with the checkpoint's "
             "values; to go on from update 2 with the new ones, add --allow-changed-batch")
    assert str(refused.value).count(error) == 2  # on both ranks
    assert "Traceback" not in str(refused.value)

    rank0, _ = fairseq_train_ranks([*args, "--allow-changed-batch"])
    assert "--allow-changed-batch: each of the 2 workers goes on in epoch 1 at its batch 2 of" in (
        rank0)
    assert "after the 4 batches of the epoch read before" in rank0
    logged = {r["num_updates"]: r for r in _train_records(one.stdout)}
    again = _train_records(rank0)
    assert [r["num_updates"] for r in again] == ["3", "4"]
    for record in again:
        for key in ("loss", "mlm_loss", "tc_loss", "tc_anchors", "tc_accuracy", "gnorm", "bsz"):
            assert record[key] == logged[record["num_updates"]][key], key
