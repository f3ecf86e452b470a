"""Writing results: one output folder, checked before a run, and files that appear whole or not at all.

Every command writes into one folder (``--out``; default :data:`DEFAULT_OUT` in the current
directory). :func:`prepare` creates it and proves it writable *before* anything is computed, so an
unwritable path fails in a second with one line naming it, not after a long run.

A run's files are written into a staging folder inside the output folder and moved into place one
by one with ``os.replace`` (atomic on one file system) only when the run has finished
(:func:`staged`). An error, Ctrl-C or SIGTERM removes the staging folder: nothing half-written is
left, and a file from an earlier run is never replaced by a partial one. Single files (a plot, a saved
trajectory, a GIF) go through :func:`atomic` in the same way.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import tempfile

#: the default output folder, relative to the current directory
DEFAULT_OUT = "jaxrot-results"

#: the files this process has completed (for the message of an interrupted command)
WRITTEN: list[pathlib.Path] = []

#: temporary files and staging folders of writes under way (removed by :func:`discard_pending`)
PENDING: set[pathlib.Path] = set()


class OutputError(ValueError):
    """The output folder or file cannot be written (the message names it)."""


def prepare(folder) -> pathlib.Path:
    """Create ``folder`` (and its parents) and check that files can be written there."""
    path = pathlib.Path(folder).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".jaxrot-probe-", dir=path)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise OutputError(f"cannot write to the output folder {str(path)!r}: {e.strerror or e}") from None
    return path.resolve()


def check_file(path, option: str = "output") -> pathlib.Path:
    """Check that the folder of the file ``path`` exists and is writable (before a run)."""
    path = pathlib.Path(path).expanduser()
    folder = path.parent.resolve()
    if not folder.is_dir():
        raise OutputError(f"{option}: the folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"{option}: cannot write to the folder {str(folder)!r}")
    return path


@contextlib.contextmanager
def atomic(path):
    """Yield a temporary path beside ``path`` (same folder and suffix); on success it replaces
    ``path`` atomically, on any error or interrupt it is removed.

    Example::

        with atomic("run.png") as tmp:
            fig.savefig(tmp)
    """
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=path.suffix, dir=path.parent or ".")
    os.close(fd)
    PENDING.add(pathlib.Path(tmp))
    try:
        yield pathlib.Path(tmp)
        os.replace(tmp, path)
        WRITTEN.append(path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    finally:
        PENDING.discard(pathlib.Path(tmp))


@contextlib.contextmanager
def staged(folder, on_done=None):
    """Yield a staging folder inside ``folder``; when the block ends normally every file written
    there is moved into ``folder`` (each with ``os.replace``) and ``on_done(paths)`` is called with
    them, otherwise the staging folder is removed."""
    folder = pathlib.Path(folder)
    stage = pathlib.Path(tempfile.mkdtemp(prefix=".jaxrot-partial-", dir=folder))
    PENDING.add(stage)
    try:
        yield stage
        moved = []
        for src in sorted(p for p in stage.rglob("*") if p.is_file()):
            dst = folder / src.relative_to(stage)
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
            WRITTEN.append(dst)
            moved.append(dst)
        if on_done is not None:
            on_done(moved)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        PENDING.discard(stage)


def discard_pending() -> None:
    """Remove the temporary files and staging folders of every write under way (on an interrupt
    that ends the process before their ``finally`` blocks can run)."""
    for path in list(PENDING):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
        PENDING.discard(path)
