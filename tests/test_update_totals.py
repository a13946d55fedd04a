"""Update totals: each batch carries the counts of the whole update it belongs to."""

from fairseq.data import iterators

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
