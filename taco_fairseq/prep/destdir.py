"""Replace the outputs of an output directory only once the new ones are complete.

:func:`build_beside` holds ``DESTDIR``'s lock, gives an empty build directory beside it, and
when the build succeeds moves the outputs it replaces aside and the new ones in, by renames;
on any error, ``KeyboardInterrupt`` included, it removes the build directory, so ``DESTDIR``
keeps what it held. Beside ``DESTDIR`` in its parent directory (hidden names)::

    .DESTDIR.lock       the lock (``fcntl.flock``), holding its process id; removed at the end
    .DESTDIR.partial    the build directory; a killed run's is removed by the next run
    .DESTDIR.replaced   the replaced outputs while they are being swapped, then removed

An operating-system lock ends with its process, so a holder that died (``kill -9``, a power
cut) blocks no rerun.
"""

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Callable, Iterable, Iterator

logger = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"
BUILD_SUFFIX = ".partial"
REPLACED_SUFFIX = ".replaced"


class DestdirInUseError(RuntimeError):
    """Another process holds the output directory's lock."""


def sibling(destdir: Path, suffix: str) -> Path:
    """The hidden path ``.NAME{suffix}`` beside ``destdir`` (``destdir`` resolved first, so
    ``.`` or a path ending in ``/`` has a name)."""
    destdir = Path(destdir).resolve()
    return destdir.parent / f".{destdir.name}{suffix}"


@contextlib.contextmanager
def build_beside(
    destdir: Path,
    *,
    force: bool,
    outputs: Callable[[Path], Iterable[str]],
    command: str,
) -> Iterator[Path]:
    """Yield an empty directory to build ``destdir``'s outputs in; when the block ends without
    an error, make them ``destdir``'s (created if needed, with its parents).

    The swap moves the entries ``outputs(destdir)`` names into ``.DESTDIR.replaced``, every
    entry of the build directory into ``destdir``, and removes ``.DESTDIR.replaced``; other
    files of ``destdir`` stay. A Ctrl-C (SIGINT) during those renames is held back until they
    are done (the new outputs are complete then; a warning says so). On an error in the block
    the build directory is removed and ``destdir`` is untouched.

    Args:
        destdir: the output directory (``--destdir``).
        force: replace the outputs of a non-empty ``destdir``; without it such a directory is
            refused before anything is written.
        outputs: the names of the entries of a directory that the build replaces.
        command: the command's name, for the message of a held lock.

    Raises:
        DestdirInUseError: another process (``command``) is writing ``destdir``.
        FileExistsError: ``destdir`` is not empty and ``force`` is not set, or is not a
            directory.
        ValueError: ``destdir`` is a mount point (another file system than its parent
            directory), where the outputs cannot be moved in by renames.
    """
    destdir = Path(destdir)
    if destdir.exists() and not destdir.is_dir():
        raise FileExistsError(f"--destdir {destdir} is a file, not a directory; give a "
                              "directory (it is created if missing)")
    sibling(destdir, "").parent.mkdir(parents=True, exist_ok=True)
    with _locked(destdir, command):
        build, replaced = sibling(destdir, BUILD_SUFFIX), sibling(destdir, REPLACED_SUFFIX)
        for stale in (build, replaced):  # left by a run that was killed (kill -9, power cut)
            if stale.exists():
                logger.info("removing %s, left by an interrupted %s", stale, command)
                shutil.rmtree(stale)
        if destdir.is_dir() and any(destdir.iterdir()) and not force:
            raise FileExistsError(
                f"output directory {destdir} is not empty; use --force to replace the "
                "outputs in it"
            )
        build.mkdir()
        try:
            if destdir.is_dir() and os.stat(destdir).st_dev != os.stat(build).st_dev:
                raise ValueError(
                    f"--destdir {destdir} is a mount point (another file system than its "
                    f"parent directory), so the outputs cannot be built beside it in {build} "
                    f"and moved in; give a directory inside it, e.g. {destdir / 'data-bin'}"
                )
            yield build
            with _sigint_held_back(f"Ctrl-C came while the outputs in {destdir} were being "
                                   "replaced; they were replaced first, and are complete"):
                _swap(build, destdir, replaced, outputs)
        finally:
            shutil.rmtree(build, ignore_errors=True)  # gone after a swap; reading workers of
            # an interrupted build may still be writing into it: a rerun removes what is left


def _swap(build: Path, destdir: Path, replaced: Path, outputs: Callable[[Path], Iterable[str]]
          ) -> None:
    """Move ``destdir``'s ``outputs`` into ``replaced``, ``build``'s entries into ``destdir``,
    then remove ``replaced`` and ``build``."""
    destdir.mkdir(parents=True, exist_ok=True)
    replaced.mkdir()
    for name in outputs(destdir):
        os.rename(destdir / name, replaced / name)
    for entry in build.iterdir():
        os.rename(entry, destdir / entry.name)
    build.rmdir()
    shutil.rmtree(replaced)


@contextlib.contextmanager
def _locked(destdir: Path, command: str) -> Iterator[None]:
    """Hold the lock ``.DESTDIR.lock`` (``flock``, exclusive, not waiting), writing this
    process's id into it; remove it at the end.

    Raises:
        DestdirInUseError: another process holds it.
    """
    path = sibling(destdir, LOCK_SUFFIX)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise DestdirInUseError(
                f"--destdir {destdir}: another {command} (process {holder}) is writing it and "
                f"holds {path}; wait for it to end, or stop it, and run this again"
            ) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else its holder removed it between our open and flock: take a new one
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        yield
    finally:
        path.unlink(missing_ok=True)  # before the unlock: a waiter then sees a removed file
        os.close(fd)


@contextlib.contextmanager
def _sigint_held_back(message: str) -> Iterator[None]:
    """Hold a SIGINT back during the block and log ``message`` as a warning if one came (in
    the main thread only, the one Python delivers signals to)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came = []
    previous = signal.signal(signal.SIGINT, lambda *_: came.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if came:
        logger.warning(message)
