"""Update totals: each batch carries the counts of the whole update it belongs to."""

import torch
from fairseq.data import iterators
from fairseq.trainer import Trainer

from conftest import fairseq_setup
from taco_fairseq.data.update_totals import UpdateTotalsIterator


def _batches(sizes):
    return [{"n": s} if s is not None else {} for s in sizes]


def _counts(batch):
    return {"items": batch["n"]}


def test_groups_follow_update_freq_and_keep_placeholders_empty():
    batches = _batches([1, 2, 3, 4, 5, None, 7])
    out = list(UpdateTotalsIterator(iterators.CountingIterator(batches), 3, _counts))
    assert [b.get("update_totals") for b in out] == [
        {"items": 6}, {"items": 6}, {"items": 6},
        {"items": 9}, {"items": 9}, None,  # fairseq's placeholder for an exhausted shard
        {"items": 7},
    ]
    assert out[5] == {}


def test_grouped_like_fairseq_train_and_take_reaches_the_inner_iterator():
    inner = iterators.CountingIterator(_batches(range(1, 8)))
    outer = iterators.CountingIterator(UpdateTotalsIterator(inner, 2, _counts), start=0, total=7)
    grouped = iterators.GroupedIterator(outer, 2, skip_remainder_batch=True)
    groups = list(grouped)
    assert [[b["update_totals"]["items"] for b in g] for g in groups] == [[3, 3], [7, 7], [11, 11]]
    # the remainder batch was cut on the inner iterator too: the epoch ends there
    assert not inner.has_next()
    assert inner.n == 6


def test_the_update_after_a_skipped_one_uses_its_own_totals(tiny_databin, monkeypatch):
    """fairseq's Trainer skips an update on an fp16 overflow (its FP16Optimizer raises
    OverflowError from clip_grad_norm) without advancing num_updates; the next update's TC
    term must still be scaled with the masked tokens and anchors of its own batch group."""
    cfg, task, model, criterion = fairseq_setup(
        tiny_databin, "--update-freq", "2", "--optimizer", "adam", "--lr", "1e-4")
    trainer = Trainer(cfg, task, model, criterion)
    batches = task.get_batch_iterator(task.dataset("valid"), max_sentences=3, seed=1)
    batches = batches.next_epoch_itr(shuffle=False)
    groups = [[next(batches), next(batches)] for _ in range(2)]
    own = [[g[0]["update_totals"][k] for k in ("masked_tokens", "anchors")] for g in groups]
    assert own[0] != own[1]

    used = []  # update totals the criterion scales the TC term with, batch by batch
    forward = criterion.forward
    monkeypatch.setattr(criterion, "forward", lambda model, sample, reduce=True: (
        used.append(sample["taco"]["update_totals"].tolist()), forward(model, sample, reduce))[1])
    clip = trainer.optimizer.clip_grad_norm
    overflows = [OverflowError("gradient overflow (simulated)")]

    def clip_grad_norm(*args, **kwargs):
        if overflows:
            raise overflows.pop()
        return clip(*args, **kwargs)

    monkeypatch.setattr(trainer.optimizer, "clip_grad_norm", clip_grad_norm)
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)  # fairseq's grad_norm

    trainer.train_step(groups[0])
    assert trainer.get_num_updates() == 0 and not overflows  # skipped
    trainer.train_step(groups[1])
    assert trainer.get_num_updates() == 1
    assert used == [own[0], own[0], own[1], own[1]]
