"""Writing results: one output folder, checked before a run, and files that appear whole or not at all.

Every command writes into one folder (``--out``; default :data:`DEFAULT_OUT` in the current
directory). :func:`prepare` creates it and proves it writable *before* anything is computed, so an
unwritable path fails in a second with one line naming it, not after a long run; a folder it
created is removed again if the run ends without writing anything into it (an error, Ctrl-C or
SIGTERM), so a failed run leaves no empty folder behind. A single output file is checked the
same way by :func:`check_file`.

A run's files are written into a staging folder inside the output folder and moved into place one
by one with ``os.replace`` (atomic on one file system) only when the run has finished
(:func:`staged`). An error, Ctrl-C or SIGTERM removes the staging folder: nothing half-written is
left, and a file from an earlier run is never replaced by a partial one. Single files (a plot, a saved
trajectory, a GIF) go through :func:`atomic` in the same way.

Every file gets the permissions a plain ``open`` would give it (``0o666`` less the user's umask),
though its temporary file is created private (``0o600``) while it is being written.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import stat
import tempfile
import threading

#: the default output folder, relative to the current directory
DEFAULT_OUT = "jaxrot-results"

#: the files this process has completed (for the message of an interrupted command)
WRITTEN: list[pathlib.Path] = []

#: temporary files and staging folders of writes under way (removed by :func:`discard_pending`)
PENDING: set[pathlib.Path] = set()

#: folders :func:`prepare` created; removed by :func:`remove_empty_created` while they are empty
CREATED: list[pathlib.Path] = []

#: the longest part of a file's own name kept in its temporary file's name (a name near the file
#: system's limit of 255 bytes must not fail only at its temporary file, after the run)
_TMP_STEM = 40

_UMASK_LOCK = threading.Lock()


class OutputError(ValueError):
    """The output folder or file cannot be written (the message names it)."""


def umask() -> int:
    """The process's umask, read without changing it where the system allows (Linux)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    with _UMASK_LOCK:  # elsewhere it can only be read by setting it, and put back at once
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def file_mode() -> int:
    """The permissions of a file created by ``open``: ``0o666`` less the umask."""
    return 0o666 & ~umask()


def _absolute(path) -> pathlib.Path:
    """``path`` made absolute, ``~`` and ``..`` resolved (symbolic links kept)."""
    return pathlib.Path(os.path.abspath(pathlib.Path(path).expanduser()))


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def prepare(folder) -> pathlib.Path:
    """Create ``folder`` (and its parents) and check that files can be written there.

    The folders it creates are recorded in :data:`CREATED`, so that a run which ends without
    writing anything can remove them (:func:`remove_empty_created`)."""
    path = _absolute(folder)
    CREATED.extend(p for p in (path, *path.parents) if not p.exists() and p not in CREATED)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".jaxrot-probe-", dir=path)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        remove_empty_created()
        raise OutputError(f"cannot write to the output folder {str(path)!r}: {_why(e)}") from None
    return path.resolve()


def temporary_folder(prefix: str = "jaxrot-") -> pathlib.Path:
    """A new folder in the system's temporary folder, recorded like one :func:`prepare` created."""
    path = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    CREATED.append(path)
    return prepare(path)


def remove_empty_created() -> None:
    """Remove each folder :func:`prepare` created that is still empty (deepest first); one that
    holds anything, and every folder above it, is kept."""
    for path in sorted(CREATED, key=lambda p: len(p.parts), reverse=True):
        try:
            path.rmdir()
        except FileNotFoundError:
            pass
        except OSError:  # not empty (results in it), or no longer ours to remove: keep it
            continue
        with contextlib.suppress(ValueError):
            CREATED.remove(path)


def _kept(folder: pathlib.Path) -> None:
    """``folder`` now holds results: it and the folders above it are no longer candidates for removal."""
    folder = _absolute(folder)
    for p in list(CREATED):
        if p == folder or p in folder.parents:
            CREATED.remove(p)


def check_file(path, option: str = "output") -> pathlib.Path:
    """Check, before a run, that the file ``path`` can be written: its folder exists, the path is
    not a folder, and both the file's name and the temporary file :func:`atomic` writes first can
    be created there (a name too long or not allowed by the file system, a read-only file system,
    a folder without write permission, also for root). Raises :class:`OutputError` naming ``path``."""
    shown = str(path)
    path = pathlib.Path(path).expanduser()
    folder = path.parent
    if not folder.is_dir():
        why = "is a file, not a folder" if folder.exists() else "does not exist"
        raise OutputError(f"{option}: cannot write {shown!r}: {str(folder.absolute())!r} {why}")
    try:
        try:
            mode = path.stat().st_mode
        except FileNotFoundError:  # a new file: its name created and removed at once
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.remove(path)
        else:
            if stat.S_ISDIR(mode):
                raise OutputError(f"{option}: cannot write {shown!r}: it is a folder")
            if not stat.S_ISREG(mode):
                raise OutputError(f"{option}: cannot write {shown!r}: it is not a regular file")
        fd, probe = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=path.suffix, dir=folder)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise OutputError(f"{option}: cannot write {shown!r}: {_why(e)}") from None
    return path


def _tmp_prefix(path: pathlib.Path) -> str:
    return f".{path.stem[:_TMP_STEM]}-"


@contextlib.contextmanager
def atomic(path):
    """Yield a temporary path beside ``path`` (same folder and suffix); on success it replaces
    ``path`` atomically, with the permissions of a new file (:func:`file_mode`), on any error or
    interrupt it is removed. A file that cannot be created or put in place raises
    :class:`OutputError` naming ``path``, not the temporary file.

    Example::

        with atomic("run.png") as tmp:
            fig.savefig(tmp)
    """
    path = pathlib.Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(path), suffix=path.suffix, dir=path.parent)
    except OSError as e:
        raise OutputError(f"cannot write {str(path)!r}: {_why(e)}") from None
    os.close(fd)
    tmp = pathlib.Path(tmp)
    PENDING.add(tmp)
    try:
        yield tmp
        try:
            os.chmod(tmp, file_mode())  # mkstemp made it private (0o600)
            os.replace(tmp, path)
        except OSError as e:
            raise OutputError(f"cannot write {str(path)!r}: {_why(e)}") from None
        WRITTEN.append(path)
        _kept(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    finally:
        PENDING.discard(tmp)


@contextlib.contextmanager
def staged(folder, on_done=None):
    """Yield a staging folder inside ``folder``; when the block ends normally every file written
    there is moved into ``folder`` (each with ``os.replace``) and ``on_done(paths)`` is called with
    them, otherwise the staging folder is removed, and ``folder`` too if :func:`prepare` created it
    and it is still empty."""
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
        if moved:
            _kept(folder)
        if on_done is not None:
            on_done(moved)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        PENDING.discard(stage)
        remove_empty_created()


#: what :func:`discard_pending` removed: the command's thread may still run after an interrupt and
#: make a staging folder (and the output folder above it) anew, so :func:`sweep` removes them again
_DISCARDED: list[pathlib.Path] = []
_DISCARDED_CREATED: list[pathlib.Path] = []


def discard_pending() -> None:
    """Remove the temporary files and staging folders of every write under way, and the folders
    :func:`prepare` created that are left empty (on an interrupt that ends the process before
    their ``finally`` blocks can run)."""
    _DISCARDED.extend(p for p in PENDING if p not in _DISCARDED)
    _DISCARDED_CREATED.extend(p for p in CREATED if p not in _DISCARDED_CREATED)
    for path in list(PENDING):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
        PENDING.discard(path)
    remove_empty_created()


def sweep() -> None:
    """:func:`discard_pending` again, and what it removed before removed once more where it is back
    (empty folders only, among those :func:`prepare` created): the last thing an interrupted command
    does before its process ends, while its thread may still be writing."""
    discard_pending()
    for path in _DISCARDED:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    for path in sorted(_DISCARDED_CREATED, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            path.rmdir()
