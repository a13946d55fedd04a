"""A training run's ``--save-dir``: one run at a time writes there (:func:`hold`), and every
checkpoint file there is written whole or not at all (:func:`written_whole`). Both are applied
to ``fairseq-train`` by :mod:`taco_fairseq.fairseq_patches`; what they guarantee:
docs/reliability.md, "Exact resume"."""

import contextlib
import datetime
import errno
import json
import logging
import os
import shlex
import shutil
import socket
import sys
import time
from typing import Dict, Iterator

from .errors import NoSpaceError, OptionError

try:
    import fcntl
except ImportError:  # Windows: no flock, no lock
    fcntl = None

#: The file in a save directory whose lock the run that writes there holds.
LOCK_FILE = "training.lock"
#: Suffix of the file a checkpoint is written to before it takes the checkpoint's name
#: (fairseq's own for its first file).
PARTIAL_SUFFIX = ".tmp"
#: errno values of a full disk or an exceeded quota.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)

logger = logging.getLogger(__name__)

#: The save directories this process holds (real path -> open descriptor of the lock file),
#: held until the process ends.
_held: Dict[str, int] = {}


def hold(save_dir: str) -> None:
    """Hold ``save_dir`` for the rest of this process: an exclusive ``flock`` on its
    :data:`LOCK_FILE`, which records the holder (pid, host, start time, command). The kernel
    releases the lock when the process ends, however it ends (a kill too), so a run that died
    leaves a file that blocks nothing. Holding a directory held already is a no-op; where the
    file system cannot lock (``fcntl`` missing, or no locks on a network file system) a warning
    says the directory is unprotected and the run goes on.

    Raises:
        OptionError: another process holds ``save_dir`` (naming the run that holds it).
    """
    key = os.path.realpath(save_dir)
    if fcntl is None or key in _held:
        return
    os.makedirs(save_dir, exist_ok=True)
    path = os.path.join(save_dir, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = _holder(fd) if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK) else None
        os.close(fd)
        if holder is None:
            logger.warning(f"--save-dir {save_dir}: cannot lock {path} ({e.strerror}); a second "
                           "run started on this directory would not be stopped")
            return
        raise OptionError(
            f"--save-dir {save_dir} is in use by another training run ({holder}): both would "
            "write the same checkpoints. Wait for it to end or stop it, or give this run "
            "another --save-dir") from None
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    command = shlex.join([os.path.basename(sys.argv[0]), *sys.argv[1:]]) if sys.argv else "?"
    record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started,
                         "command": command})
    os.ftruncate(fd, 0)
    os.pwrite(fd, (record + "\n").encode("utf-8"), 0)
    _held[key] = fd


def _holder(fd: int, wait: float = 1.0) -> str:
    """Who holds the lock of ``fd``, as its file records it: ``pid P on HOST, started T:
    COMMAND``. A holder that has not recorded itself yet is waited for up to ``wait``
    seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            record = json.loads(os.pread(fd, 1 << 16, 0).decode("utf-8"))
            return (f"pid {record['pid']} on {record['host']}, started {record['started']}: "
                    f"{record['command']}")
        except (ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                return "a process that has not recorded itself in the lock file"
            time.sleep(0.05)


@contextlib.contextmanager
def written_whole(path: str) -> Iterator[str]:
    """Yield the path to write ``path``'s new content to: ``path`` + :data:`PARTIAL_SUFFIX`
    beside it, which replaces ``path`` (an atomic rename) once the block ends, and is removed
    if the block fails, leaving ``path`` as it was.

    Raises:
        NoSpaceError: the disk is full or the quota exceeded (an ``OSError`` with an errno
            of :data:`NO_SPACE`, also as the cause of torch's ``RuntimeError``).
    """
    partial = path + PARTIAL_SUFFIX
    try:
        yield partial
        os.replace(partial, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)
        if _no_space(e):
            raise NoSpaceError(no_space_message(path)) from e
        raise


def _no_space(error: BaseException) -> bool:
    """Whether ``error`` or an exception it was raised from is a full disk."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError) and error.errno in NO_SPACE:
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def no_space_message(path: str) -> str:
    """The one-line message for a checkpoint ``path`` that did not fit on its disk."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        free = f"{_size(shutil.disk_usage(directory).free)} free"
    except OSError:
        free = "free space unknown"
    rerun = ("it resumes from checkpoint_last.pt"
             if os.path.isfile(os.path.join(directory, "checkpoint_last.pt"))
             else "there is no checkpoint_last.pt yet, so it starts from update 0")
    return (f"no space left on the device of --save-dir {directory} ({free}): "
            f"{os.path.basename(path)} was not written and the checkpoints saved before are "
            "whole. Free space there (e.g. keep fewer checkpoints: --keep-interval-updates, "
            "--no-epoch-checkpoints) or move the run to another --save-dir, then rerun the "
            f"same command: {rerun}")


def _size(size: float) -> str:
    """``size`` bytes in bytes, KB, MB, GB or TB (powers of 1000)."""
    unit = "bytes"
    for larger in ("KB", "MB", "GB", "TB"):
        if size < 1000:
            break
        size, unit = size / 1000, larger
    return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
