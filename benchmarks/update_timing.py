"""Time fairseq updates of several training command lines side by side.

Each command line (e.g. ``--task masked_lm --criterion masked_lm`` and ``--task
taco_masked_lm --criterion taco`` on the same data and model) gets its own process, which
builds fairseq's ``Trainer`` exactly as ``fairseq-train`` does and runs
``Trainer.train_step`` on the batches of its training iterator, one update per request. The
parent interleaves the requests (A B, B A, A B, …), so slow drifts of the machine's load hit
all runs alike, and checks that all runs see the same batches. A process per run also makes
its peak memory its own.
"""

import contextlib
import hashlib
import logging
import multiprocessing
import os
import resource
import statistics
import sys
import time
import traceback
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch


class StepTiming(NamedTuple):
    """One update of one run.

    Attributes:
        update_s: seconds of ``Trainer.train_step`` (forward, backward, optimizer step).
        cpu_s: CPU seconds of the process (all its threads) during ``Trainer.train_step``.
        load_s: seconds to draw the update's batches from the iterator (dataset items,
            collate; with ``--num-workers 0`` all in the training process).
        ntokens: tokens of the update's batches.
        fingerprint: hash of the update's input tokens and targets.
    """

    update_s: float
    cpu_s: float
    load_s: float
    ntokens: int
    fingerprint: str


#: Environment for processes whose CPU peak memory is compared: glibc's mmap threshold fixed at
#: 64 KiB, so that freed tensors go back to the OS and the peak RSS follows the peak of live
#: memory rather than the allocator's fragmentation (which moves it by several percent from
#: run to run). Ignored by other C libraries.
EXACT_RSS_ENVIRON = {"MALLOC_MMAP_THRESHOLD_": "65536"}

#: Updates (one of them warm-up) of the processes that measure peak memory: the peak is
#: reached from the second update on (the first allocates Adam's state).
MEMORY_UPDATES = 3


class MemoryUse(NamedTuple):
    """Memory of one run's process, in bytes.

    Attributes:
        peak: CPU: peak resident set size of the process (``getrusage`` max RSS); CUDA:
            ``torch.cuda.max_memory_allocated``.
        at_start: the same measure when the trainer was built, before the first update.
        kind: ``"CPU max RSS"`` or ``"CUDA max allocated"``.
    """

    peak: int
    at_start: int
    kind: str


class UpdateStats(NamedTuple):
    """Summary of one run over the measured updates (warm-up excluded).

    Attributes:
        name: the run's name.
        update_s: median seconds per update.
        cpu_s: median CPU seconds per update (less sensitive than ``update_s`` to other
            processes competing for the cores).
        tokens_per_s: median tokens per second of the updates.
        load_s: median seconds to draw an update's batches.
        memory: :class:`MemoryUse` of the run's process.
        update_times: seconds of each measured update, in the order of the rounds (update i
            of every run saw the same batches).
        extra: what the run's process answered to the extra commands (see
            :func:`compare_updates`).
    """

    name: str
    update_s: float
    cpu_s: float
    tokens_per_s: float
    load_s: float
    memory: MemoryUse
    update_times: Tuple[float, ...]
    extra: Dict[str, object]


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


class TrainerSession:
    """fairseq's ``Trainer`` built from a ``fairseq-train`` command line, stepping through the
    training batches of epoch 1 (as ``fairseq_cli.train``; no validation, no checkpoints).

    Args:
        argv: the command line, without the program name (data directory first).
    """

    def __init__(self, argv: Sequence[str]):
        import numpy as np
        from fairseq import options, tasks, utils
        from fairseq.data import iterators
        from fairseq.dataclass.utils import convert_namespace_to_omegaconf
        from fairseq.trainer import Trainer

        args = options.parse_args_and_arch(options.get_training_parser(), list(argv))
        cfg = convert_namespace_to_omegaconf(args)
        np.random.seed(cfg.common.seed)
        utils.set_torch_seed(cfg.common.seed)
        task = tasks.setup_task(cfg.task)
        model = task.build_model(cfg.model)
        criterion = task.build_criterion(cfg.criterion)
        self.trainer = Trainer(cfg, task, model, criterion)
        self.epoch_itr = self.trainer.get_train_iterator(epoch=1)
        self.trainer.begin_epoch(self.epoch_itr.epoch)
        self._batches = iterators.GroupedIterator(
            self.epoch_itr.next_epoch_itr(shuffle=True), cfg.optimization.update_freq[0]
        )
        self._cuda = self.trainer.device.type == "cuda"
        self.memory_at_start = self._memory()

    def step(self) -> StepTiming:
        """Draw the next update's batches and run ``Trainer.train_step`` on them.

        Raises:
            RuntimeError: when the epoch has no more batches, or fairseq skips the update
                (e.g. out of memory).
        """
        start = time.perf_counter()
        samples = next(self._batches, None)
        if samples is None:
            raise RuntimeError("out of training batches: use more data or fewer updates")
        loaded = time.perf_counter()
        digest = hashlib.sha1()
        for sample in samples:
            digest.update(sample["net_input"]["src_tokens"].numpy().tobytes())
            digest.update(sample["target"].numpy().tobytes())
        self._synchronize()
        begin, cpu_begin = time.perf_counter(), time.process_time()
        log = self.trainer.train_step(samples)
        self._synchronize()
        end, cpu_end = time.perf_counter(), time.process_time()
        if log is None:
            raise RuntimeError("fairseq skipped the update (out of memory or overflow)")
        ntokens = sum(sample["ntokens"] for sample in samples)
        return StepTiming(
            end - begin, cpu_end - cpu_begin, loaded - start, ntokens, digest.hexdigest()
        )

    def memory(self) -> MemoryUse:
        """The peak memory so far, see :class:`MemoryUse`."""
        kind = "CUDA max allocated" if self._cuda else "CPU max RSS"
        return MemoryUse(self._memory(), self.memory_at_start, kind)

    def _memory(self) -> int:
        return torch.cuda.max_memory_allocated() if self._cuda else _peak_rss_bytes()

    def _synchronize(self):
        if self._cuda:
            torch.cuda.synchronize()


#: Extra work a run's process can be asked for after its updates: name -> function of the
#: session returning something picklable.
Extras = Dict[str, Callable[[TrainerSession], object]]


def _serve(connection, argv: List[str], threads: Optional[int], extras: Extras):
    """The body of a run's process: answer "step", "memory", extra names and "stop"."""
    try:
        logging.getLogger("fairseq").setLevel(logging.WARNING)  # keep the parent's output clear
        if threads:
            torch.set_num_threads(threads)
        session = TrainerSession(argv)
        connection.send(("ok", None))
        while True:
            command = connection.recv()
            if command == "stop":
                break
            if command == "step":
                answer = session.step()
            elif command == "memory":
                answer = session.memory()
            else:
                answer = extras[command](session)
            connection.send(("ok", answer))
    except BaseException:  # report to the parent, which raises with the worker's traceback
        connection.send(("error", traceback.format_exc()))
    finally:
        connection.close()


class _Run:
    """A run's process and the parent's end of its pipe."""

    def __init__(self, context, name, argv, threads, extras, environ):
        self.name = name
        self.connection, child = context.Pipe()
        self.process = context.Process(
            target=_serve, args=(child, list(argv), threads, extras)
        )
        with _environment(environ):
            self.process.start()
        child.close()

    def ask(self, command):
        self.connection.send(command)
        return self.receive()

    def receive(self):
        try:
            status, answer = self.connection.recv()
        except EOFError:
            self.process.join(timeout=10)
            code = self.process.exitcode
            killed = " (killed: out of memory?)" if code is not None and code < 0 else ""
            raise RuntimeError(
                f"the process of run {self.name!r} ended with exit code {code}{killed} "
                "before answering"
            ) from None
        if status == "error":
            raise RuntimeError(f"run {self.name!r} failed:\n{answer}")
        return answer

    def close(self):
        if self.process.is_alive():
            try:
                self.connection.send("stop")
            except (BrokenPipeError, OSError):
                pass
            self.process.join(timeout=60)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
        self.connection.close()


def compare_updates(
    runs: Dict[str, Sequence[str]],
    steps: int,
    warmup: int,
    threads: Optional[int] = None,
    extras: Optional[Dict[str, Extras]] = None,
    progress: Optional[Callable[[str], None]] = None,
    environ: Optional[Dict[str, str]] = None,
) -> List[UpdateStats]:
    """Run the updates of several training command lines interleaved and summarize them.

    Round r asks every run for one update, in the order of ``runs`` for even r and in the
    reverse order for odd r; the first ``warmup`` rounds are not measured. After the updates
    each run is asked for its memory, then for its ``extras`` (in its own process).

    Args:
        runs: name -> ``fairseq-train`` command line (without the program name).
        steps: measured updates per run, >= 1.
        warmup: updates per run before measuring (the first builds the optimizer state).
        threads: torch threads of each run's process (default: torch's default).
        extras: name of a run -> {name: function of its :class:`TrainerSession`}.
        progress: called with a line of text after each round.
        environ: environment variables added for the runs' processes (e.g.
            :data:`EXACT_RSS_ENVIRON`).

    Returns:
        one :class:`UpdateStats` per run, in the order of ``runs``.

    Raises:
        ValueError: if ``steps`` < 1 or ``warmup`` < 0.
        RuntimeError: if a run fails (with its traceback), runs out of batches, or the runs
            see different batches in a round.
    """
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got {steps} and {warmup}")
    extras = extras or {}
    context = multiprocessing.get_context("spawn")
    started = []
    try:
        for name, argv in runs.items():
            started.append(
                _Run(context, name, argv, threads, extras.get(name, {}), environ or {})
            )
        for run in started:
            run.receive()  # built
        timings: Dict[str, List[StepTiming]] = {run.name: [] for run in started}
        for round_index in range(warmup + steps):
            order = started if round_index % 2 == 0 else started[::-1]
            answers = {run.name: run.ask("step") for run in order}
            if len({answer.fingerprint for answer in answers.values()}) > 1:
                raise RuntimeError(
                    f"the runs saw different batches in update {round_index + 1}: compare "
                    "their data, --seed, --batch-size and --tokens-per-sample options"
                )
            if round_index >= warmup:
                for name, answer in answers.items():
                    timings[name].append(answer)
            if progress:
                progress(
                    f"update {round_index + 1}/{warmup + steps}"
                    + ("" if round_index >= warmup else " (warm-up)")
                    + ": "
                    + ", ".join(f"{n} {a.update_s:.3f} s" for n, a in answers.items())
                )
        results = []
        for run in started:
            memory = run.ask("memory")
            extra = {name: run.ask(name) for name in extras.get(run.name, {})}
            results.append(_summarize(run.name, timings[run.name], memory, extra))
        return results
    finally:
        for run in started:
            run.close()


@contextlib.contextmanager
def _environment(environ: Dict[str, str]):
    """Set ``environ`` in ``os.environ`` (which a started process inherits), then restore."""
    saved = {key: os.environ.get(key) for key in environ}
    os.environ.update(environ)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                del os.environ[key]
            else:
                os.environ[key] = value


def _summarize(name, timings: List[StepTiming], memory: MemoryUse, extra) -> UpdateStats:
    return UpdateStats(
        name=name,
        update_s=statistics.median(t.update_s for t in timings),
        cpu_s=statistics.median(t.cpu_s for t in timings),
        tokens_per_s=statistics.median(t.ntokens / t.update_s for t in timings),
        load_s=statistics.median(t.load_s for t in timings),
        memory=memory,
        update_times=tuple(t.update_s for t in timings),
        extra=extra,
    )
