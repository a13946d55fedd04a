"""One rank of a gloo process group for the multi-process tests (started by
``multiprocess.worker_results``): ``python tests/distributed_worker.py DATABIN OUT RANK WORLD
PORT``. Each job builds taco set-ups with ``conftest.fairseq_setup``; what the tests compare is
saved to ``OUT/rank{RANK}.pt``. All jobs share one launch (start-up is most of the cost).
"""

import dataclasses
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from fairseq.distributed import LegacyDistributedDataParallel, ModuleProxyWrapper
from fairseq.distributed import utils as distributed_utils

from conftest import fairseq_setup
from taco_fairseq.distributed import complete_negatives

NO_DROPOUT = ("--dropout", "0", "--attention-dropout", "0")

#: every TC variant (and untied embeddings), as command-line options
DDP_VARIANTS = {
    "default": (),
    "positions-masked": ("--tc-positions", "masked"),
    "positions-unmasked": ("--tc-positions", "unmasked"),
    "embedding-token": ("--tc-embedding", "token"),
    "embedding-original-token": ("--tc-embedding", "original-token"),
    "keys-with-gradient": ("--tc-key-gradients",),
    "weight-0": ("--tc-weight", "0"),
    "cross-worker-negatives": ("--tc-cross-worker-negatives",),
    "untied-embeddings": ("--untie-weights-roberta",),
}


class Backward:
    """Stands in for the optimizer: the one method ``FairseqTask.train_step`` calls."""

    @staticmethod
    def backward(loss):
        loss.backward()


def shard_batches(task, rank, world_size, batch_size=3):
    """This rank's batches of the valid split, sharded as fairseq shards training batches."""
    itr = task.get_batch_iterator(
        task.dataset("valid"), max_sentences=batch_size, seed=1, num_shards=world_size,
        shard_id=rank,
    )
    return itr.next_epoch_itr(shuffle=False)


def ddp_variants(databin, rank, world_size):
    """Two updates of every variant under fairseq's legacy_ddp (``LegacyDistributedDataParallel``)
    and under torch's ``DistributedDataParallel`` with ``find_unused_parameters=False`` (what
    fairseq's pytorch_ddp wraps on GPUs), which fails when a parameter gets no gradient; then
    a control model with an unused parameter.

    Returns:
        ``{"BACKEND/VARIANT": "ok" or the error, "weights/VARIANT": [parameters, 2] (sum, sum
        of squares) after the updates}``.
    """
    backends = {
        "legacy_ddp": lambda m: LegacyDistributedDataParallel(m, dist.group.WORLD),
        "pytorch_ddp": torch.nn.parallel.DistributedDataParallel,
    }
    results = {}
    for name, options in [*DDP_VARIANTS.items(), ("control-unused-parameter", ())]:
        torch.manual_seed(1)
        _, task, model, criterion = fairseq_setup(databin, *options)
        if name.startswith("control"):
            model.register_parameter("unused", torch.nn.Parameter(torch.zeros(3)))
            del backends["legacy_ddp"]  # it fills missing gradients with zeros
        batches = shard_batches(task, rank, world_size)
        for backend, wrap in backends.items():
            wrapped = ModuleProxyWrapper(wrap(model))
            try:
                for update in range(2):
                    wrapped.zero_grad()
                    task.train_step(next(batches), wrapped, criterion, Backward, update)
                    if backend == "legacy_ddp":
                        wrapped.all_reduce_grads()
                    with torch.no_grad():
                        for p in model.parameters():
                            if p.grad is not None:  # as optimizers do
                                p -= 0.1 * p.grad
                results[f"{backend}/{name}"] = "ok"
            except RuntimeError as e:
                results[f"{backend}/{name}"] = str(e)
            dist.barrier()
        results[f"weights/{name}"] = torch.stack(
            [torch.stack([p.detach().sum(), p.detach().pow(2).sum()]) for p in model.parameters()]
        )
    return results


def cross_worker(databin, rank, world_size):
    """The TC loss and its gradient with cross-worker negatives: step 0 on this rank's first
    batch; step 1 on the same batch with rank 1 playing fairseq's padding (dummy) batch; then
    the negatives that batch draws (``"drawn"``: indices into the gathered pool of all ranks'
    candidates, ``[anchors, K]``, and the ranks' candidate counts)."""
    torch.manual_seed(1)
    _, task, model, criterion = fairseq_setup(
        databin, "--tc-cross-worker-negatives", "--sample-break-mode", "none", *NO_DROPOUT
    )
    sample = next(shard_batches(task, rank, world_size))
    steps = []
    for dummy in (False, rank == 1):
        model.zero_grad()
        step = {**sample, "taco": dataclasses.replace(  # a training step: gather across ranks
            sample["taco"], training=True, all_worker_totals=torch.ones(2), dummy=dummy)}
        losses = criterion.compute_losses(model, step)
        if losses.tc_loss.requires_grad:  # not when no anchor has negatives
            losses.tc_loss.backward()
        steps.append({
            "tc_loss": losses.tc_loss.detach(),
            "anchors": losses.num_anchors,
            "grad": [torch.zeros_like(p) if p.grad is None else p.grad.clone()
                     for p in model.parameters()],
        })
    taco = dataclasses.replace(sample["taco"], dummy=False)
    rows = sample["net_input"]["src_tokens"].numel()
    drawn = complete_negatives(torch.zeros(rows, 1), taco, across_workers=True)
    pool_sizes = [int(n) for n in distributed_utils.all_gather(
        torch.tensor([len(taco.candidates)]), dist.group.WORLD, return_tensor=True)]
    return {"steps": steps, "model": model.state_dict(), "sample": sample,
            "drawn": {"negative": drawn.negative - rows, "pool_sizes": pool_sizes}}


JOBS = {"ddp-variants": ddp_variants, "cross-worker": cross_worker}


def main(databin, out_dir, rank, world_size, port):
    """Run every job; save ``{job: result}``."""
    rank, world_size = int(rank), int(world_size)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    results = {name: job(databin, rank, world_size) for name, job in JOBS.items()}
    torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
