"""The data side of taco_masked_lm: the TC positions the collater adds (a typed
:mod:`taco_fairseq.batch` record, property-based over odd batches) and the update totals each
batch carries."""

import types
from unittest import mock

import numpy as np
import pytest
import torch
from fairseq.data import iterators
from fairseq.distributed import utils as distributed_utils
from fairseq.trainer import Trainer
from hypothesis import given, settings
from hypothesis import strategies as st

from batches import FixedBatch, masked_lm_batches
from conftest import fairseq_setup
from distributed_worker import Backward
from taco_fairseq import data
from taco_fairseq.batch import CrossWorkerTacoBatch, TacoBatch
from taco_fairseq.data import TC_POSITIONS, ContrastiveSamplingDataset
from taco_fairseq.sampling import SamplingOptions
from taco_fairseq.totals import UpdateTotals, UpdateTotalsIterator


def _batch(masked, anchors, pad=1):
    """A batch with ``masked`` masked tokens and ``anchors`` anchors: what the iterator reads."""
    target = torch.full((1, masked + 2), pad)
    target[0, :masked] = 7
    return {"target": target, "taco": types.SimpleNamespace(anchor=list(range(anchors)))}


def _batches(sizes):
    return [_batch(s, 10 * s) if s is not None else {} for s in sizes]


def test_groups_follow_update_freq_and_keep_placeholders_empty():
    batches = _batches([1, 2, 3, 4, 5, None, 7])
    out = list(UpdateTotalsIterator(iterators.CountingIterator(batches), 3, pad_idx=1))
    assert [b.get("update_totals") for b in out] == [
        UpdateTotals(6, 60, 0, 3), UpdateTotals(6, 60, 1, 3), UpdateTotals(6, 60, 2, 3),
        UpdateTotals(9, 90, 0, 3), UpdateTotals(9, 90, 1, 3), None,  # an exhausted shard
        UpdateTotals(7, 70, 0, 1),
    ]
    assert out[5] == {}
    # new dicts: the collated batches stay as the collater made them
    assert all("update_totals" not in b for b in batches)
    assert all(a["taco"] is b["taco"] for a, b in zip(out, batches) if b)


def test_grouped_like_fairseq_train_and_take_reaches_the_inner_iterator():
    inner = iterators.CountingIterator(_batches(range(1, 8)))
    outer = iterators.CountingIterator(UpdateTotalsIterator(inner, 2, pad_idx=1), start=0,
                                       total=7)
    grouped = iterators.GroupedIterator(outer, 2, skip_remainder_batch=True)
    groups = list(grouped)
    assert [[(b["update_totals"].masked_tokens, b["update_totals"].index) for b in g]
            for g in groups] == [[(3, 0), (3, 1)], [(7, 0), (7, 1)], [(11, 0), (11, 1)]]
    # the remainder batch was cut on the inner iterator too: the epoch ends there
    assert not inner.has_next()
    assert inner.n == 6


def test_the_update_after_a_skipped_one_uses_its_own_totals(synthetic_databin, monkeypatch):
    """fairseq's Trainer skips an update on an fp16 overflow (its FP16Optimizer raises
    OverflowError from clip_grad_norm) without advancing num_updates; the next update's TC
    term must still be scaled with the masked tokens and anchors of its own batch group."""
    cfg, task, model, criterion = fairseq_setup(
        synthetic_databin, "--update-freq", "2", "--optimizer", "adam", "--lr", "1e-4")
    trainer = Trainer(cfg, task, model, criterion)
    batches = task.get_batch_iterator(task.dataset("valid"), max_sentences=3, seed=1)
    batches = batches.next_epoch_itr(shuffle=False)
    groups = [[next(batches), next(batches)] for _ in range(2)]
    own = [[g[0]["update_totals"].masked_tokens, g[0]["update_totals"].anchors] for g in groups]
    assert own[0] != own[1]

    used = []  # update totals the criterion scales the TC term with, batch by batch
    forward = criterion.forward
    monkeypatch.setattr(criterion, "forward", lambda model, sample, reduce=True: (
        used.append(sample["taco"].all_worker_totals.tolist()), forward(model, sample, reduce))[1])
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


@pytest.mark.slow  # over 10 s on two busy cores
@pytest.mark.parametrize("update_freq", [2, 3])  # the end of shard 1: [batch, padding]; [padding]
def test_every_worker_all_reduces_once_per_update_at_its_first_batch(
        synthetic_databin, monkeypatch, update_freq):
    """The all-reduces of the update totals pair up across workers: each worker makes one per
    update, at the update's first batch, also when fairseq's padding batch (the placeholder of
    an exhausted shard, replaced by its dummy batch with ``ignore_grad``) is part of an update
    or all of it, and when fairseq retries an update (AMP overflow: the same batches again).
    Two shards, trained one after the other as fairseq's ``Trainer`` would, with a recording
    all-reduce; each update's batches are weighted with its own totals."""
    reduced = []  # the local totals each all-reduce got
    monkeypatch.setattr(distributed_utils, "get_data_parallel_world_size", lambda: 2)
    monkeypatch.setattr(distributed_utils, "get_data_parallel_group", lambda: None)
    monkeypatch.setattr(distributed_utils, "all_reduce",
                        lambda tensor, group: (reduced.append(tensor.tolist()), tensor)[1])
    layouts, reduce_calls = set(), []
    _, first, model, criterion = fairseq_setup(synthetic_databin, "--update-freq",
                                               str(update_freq))
    used = []  # the totals the criterion weights each batch with
    forward = criterion.forward
    monkeypatch.setattr(criterion, "forward", lambda model, sample, reduce=True: (
        used.append(sample["taco"].all_worker_totals.tolist()), forward(model, sample, reduce))[1])
    size = next(size for size in range(3, 9) if len(first.get_batch_iterator(
        first.dataset("valid"), max_sentences=size, seed=1)) % 2)  # shard 1: one batch short
    for shard in range(2):
        task = type(first)(first.cfg, first.dictionary)  # each worker its own task state
        task.datasets = first.datasets
        epoch_itr = task.get_batch_iterator(task.dataset("valid"), max_sentences=size, seed=1,
                                            num_shards=2, shard_id=shard)
        padding = epoch_itr.first_batch  # fairseq's Trainer.reset_dummy_batch
        groups = list(iterators.GroupedIterator(epoch_itr.next_epoch_itr(shuffle=False),
                                                update_freq))
        groups = [groups[0], groups[1], groups[1], *groups[-2:]]  # update 1 retried; the end
        calls = []
        for update, group in enumerate(groups):
            model.zero_grad()
            used.clear()
            for batch in group:
                before = len(reduced)
                task.train_step(batch or padding, model, criterion, Backward, update,
                                ignore_grad=not batch)
                calls.append(len(reduced) - before)
            own = [sum(int(b["target"].ne(task.dictionary.pad()).sum()) for b in group if b),
                   sum(len(b["taco"].anchor) for b in group if b)]
            assert reduced[-1] == own and used == [own] * len(group)
            layouts.add(tuple(bool(b) for b in group))
        assert calls == [n for group in groups for n in [1] + [0] * (len(group) - 1)]
        reduce_calls.append(sum(calls))
    assert reduce_calls[0] == reduce_calls[1] == len(groups)
    assert any(not all(layout) for layout in layouts)  # shard 1 ends with fairseq's padding


def _expected_anchors(batch, positions, exclude_special, cross_worker, pad=1, special=(0, 2)):
    """The anchors, written out position by position."""
    tokens = batch["net_input"]["src_tokens"].tolist()
    target = batch["target"].tolist()
    candidate = [[t != pad and not (exclude_special and t in special) for t in row]
                 for row in tokens]
    per_row = [sum(row) for row in candidate]
    anchors = []
    for r, row in enumerate(candidate):
        others = sum(per_row) - per_row[r]
        if per_row[r] < 2 or (others == 0 and not cross_worker):
            continue
        for c, is_candidate in enumerate(row):
            masked = target[r][c] != pad
            wanted = {"all": True, "masked": masked, "unmasked": not masked}[positions]
            if is_candidate and wanted:
                anchors.append(r * len(row) + c)
    return anchors, candidate


@settings(max_examples=40, deadline=None)
@given(batch=masked_lm_batches(), positions=st.sampled_from(TC_POSITIONS),
       exclude_special=st.booleans(), cross_worker=st.booleans(), k=st.integers(1, 8),
       window=st.sampled_from([3, 5, 9]))
def test_collated_positions_hold_the_sampler_invariants(
    batch, positions, exclude_special, cross_worker, k, window
):
    dataset = ContrastiveSamplingDataset(
        FixedBatch(batch), pad_idx=1, excluded_tokens=(0, 2) if exclude_special else (),
        positions=positions, sampling=SamplingOptions(window, k, cross_worker), seed=1,
    )
    with mock.patch.object(data.logger, "warning") as warning:
        taco = dataset.collater([])["taco"]
    assert isinstance(taco, CrossWorkerTacoBatch if cross_worker else TacoBatch)
    assert not taco.training and taco.all_worker_totals is None  # train_step's copy has them
    expected, candidate = _expected_anchors(batch, positions, exclude_special, cross_worker)
    assert taco.anchor.tolist() == expected
    seq_len = batch["net_input"]["src_tokens"].size(1)
    flat = np.array(candidate).ravel()
    anchor, positive = taco.anchor.numpy(), taco.positive.numpy()
    assert np.all(positive // seq_len == anchor // seq_len) and np.all(positive != anchor)
    assert flat[positive].all()
    per_row = np.array(candidate).sum(1)
    if cross_worker:
        assert taco.candidates.tolist() == np.flatnonzero(flat).tolist()
        assert np.array_equal(taco.anchor_row_length.numpy(), per_row[anchor // seq_len])
        uniform = taco.negative_uniform.numpy()
        assert uniform.shape == (len(anchor), k) and np.all((uniform >= 0) & (uniform < 1))
        assert not taco.dummy and not warning.called
    else:
        negative = taco.negative.numpy()
        assert negative.shape == (len(anchor), k) and flat[negative].all()
        assert np.all(negative // seq_len != (anchor // seq_len)[:, None])
        assert taco.skipped == ((per_row > 0).sum() < 2)
        # warned: an anchor draws its K negatives from fewer candidates (but some)
        available = per_row.sum() - per_row[anchor // seq_len]
        few = len(anchor) > 0 and 0 < available.min() < k
        assert warning.call_count == few
        assert not few or f"--tc-negatives {k} exceeds the {available.min()} tokens" in (
            warning.call_args.args[0])


def test_a_training_step_carries_the_all_worker_totals_and_only_it_does():
    positions = dict(anchor=torch.tensor([0]), positive=torch.tensor([1]),
                     negative=torch.tensor([[2]]), skipped=False)
    step = TacoBatch(**positions, training=True, all_worker_totals=torch.ones(2))
    assert step.training and step.to(torch.device("meta")).all_worker_totals.is_meta
    for wrong in ({"training": True}, {"all_worker_totals": torch.ones(2)}):
        with pytest.raises(ValueError, match="training step's positions carry"):
            TacoBatch(**positions, **wrong)


def test_positions_move_to_a_device_as_one_record():
    taco = TacoBatch(torch.tensor([0]), torch.tensor([1]), negative=torch.tensor([[2]]),
                     skipped=False)
    moved = taco.to(torch.device("meta"))
    assert moved.anchor.device.type == "meta" and moved.negative.device.type == "meta"
    assert taco.anchor.device.type == "cpu" and not moved.skipped
