"""Multi-process training with fairseq's own distributed mode (gloo on the CPU): the objective
and its gradient do not depend on how an update's batches are split over workers, and no TC
variant leaves a parameter without gradient (DistributedDataParallel's failure)."""

import json

import pytest
import torch

from conftest import USER_DIR, run_fairseq
from distributed_worker import DDP_VARIANTS
from multiprocess import fairseq_train_ranks, worker_results
import taco_fairseq  # noqa: F401  (weights-only loading of fairseq checkpoints)


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


def test_two_processes_equal_one_process_with_update_freq_2(tiny_databin, tmp_path):
    """fairseq shards the same shuffled batches over ranks (rank r takes batches r, r+2, ...),
    so one process with --update-freq 2 and two processes see the same global batches, masks
    and TACO samples; masked tokens and anchors differ between the batches of an update."""
    one, two = tmp_path / "one", tmp_path / "two"
    single = run_fairseq("fairseq-train", *_sgd_args(tiny_databin, one, "--update-freq", "2"))
    rank0, rank1 = fairseq_train_ranks(_sgd_args(tiny_databin, two))

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


@pytest.fixture(scope="module")
def ddp_results(tiny_databin):
    return [rank["ddp-variants"] for rank in worker_results(tiny_databin)]


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
