"""An order-preserving parallel map over a stream that reads the stream only as needed."""

import collections
import multiprocessing
from typing import Callable, Iterable, Iterator, Tuple, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def ordered_imap(
    func: Callable[[T], R],
    items: Iterable[T],
    *,
    workers: int,
    initializer: Callable[..., None],
    initargs: Tuple = (),
    max_pending_per_worker: int = 4,
) -> Iterator[R]:
    """Yield ``func(item)`` for each item, in input order, computed by a pool of processes.

    Unlike ``multiprocessing.Pool.imap``, whose feeder thread reads the whole input ahead of
    the workers, at most ``workers * max_pending_per_worker`` items are in flight, so a large
    stream (e.g. chunks of lines of a corpus file) is never held in memory.

    Args:
        func: a picklable (module-level) function.
        items: picklable inputs, read lazily.
        workers: number of processes (>= 1).
        initializer: called once in each process with ``initargs`` (e.g. to load a model).
        max_pending_per_worker: submitted, not yet yielded items per process.

    Raises:
        Whatever ``func`` raises in a worker, re-raised here.
    """
    pending: collections.deque = collections.deque()
    with multiprocessing.Pool(workers, initializer, initargs) as pool:
        for item in items:
            pending.append(pool.apply_async(func, (item,)))
            if len(pending) >= workers * max_pending_per_worker:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()
