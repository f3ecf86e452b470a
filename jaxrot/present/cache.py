"""jaxrot's on-disk cache of compiled programs (JAX's persistent compilation cache).

Each new process compiles the same XLA programs again, and on a small CPU compiling is most of a
first call. ``import jaxrot`` (:func:`enable_by_default`) and the ``jaxrot`` command (:func:`enable`)
therefore keep them in ``$XDG_CACHE_HOME/jaxrot/jax`` (``~/.cache/jaxrot/jax`` when
``XDG_CACHE_HOME`` is unset), and a later process loads them instead. The setting is JAX's own and
global: a program's own compiled functions are kept there too.

The variable :data:`ENV` chooses: ``off`` (or ``0``, ``no``, ``false``) switches the cache off, as the
command's ``--no-cache`` does; a path puts it there. A cache folder already given to JAX
(``JAX_COMPILATION_CACHE_DIR``, ``jax.config.update("jax_compilation_cache_dir", ...)`` before
``import jaxrot``, or after it and before the first computation) is left as it is, and so is JAX's
own switch (``jax_enable_compilation_cache``). A folder that cannot be created or written leaves the
cache off: silently on import, with a one-line note from the command, which goes on.

JAX releases before 0.7 also write programs that call back into Python (``jax.pure_callback``, as
equinox's checks inside compiled code do) to the cache; another process that loads such a program
calls whatever callback has that number there, and computes wrong values. On those releases the
command leaves the cache off, with a one-line note.

Like any JAX compilation cache, the folder is trusted: whoever can write to it can make the
command run code of theirs, so it belongs to the user alone.
"""

from __future__ import annotations

import os
import pathlib
import re
import tempfile

#: the variable that switches the cache off (``off``) or names its folder
ENV = "JAXROT_COMPILATION_CACHE"
#: programs compiled faster than this are not kept: a file per program costs disk and a read, and
#: these are many (a fifth of those ``reproduce buss --quick`` compiles) but ~1% of its compile time
MIN_COMPILE_SECONDS = 0.1
_OFF = ("off", "0", "no", "false")
#: the same for ``import jaxrot``'s default cache: a program's first calls compile many small programs
#: (each operation run outside a compiled function is one), quicker to load than to compile, and
#: together seconds of a short script's first run (measured: docs/user_guide/compile_time.md)
LIBRARY_MIN_COMPILE_SECONDS = 0.0
#: the folder ``import jaxrot`` gave JAX (None: it gave none)
_BY_DEFAULT: dict = {"folder": None}
#: the first JAX release that keeps programs with Python callbacks out of the persistent cache
SAFE_JAX = (0, 7)


def unsafe_reason(jax_version: str) -> str:
    return (f"JAX {jax_version} keeps programs that call back into Python in the cache, where another process "
            f"computes wrong values with them (JAX {'.'.join(map(str, SAFE_JAX))} marks such programs as not cacheable)")


def safe_for(jax_version: str) -> bool:
    """Whether this JAX release keeps programs with Python callbacks out of the persistent cache."""
    return _release(jax_version) >= SAFE_JAX


def _release(version: str) -> tuple[int, int]:
    """(major, minor) from a version string's leading numbers (``"0.7.0rc1"``, ``"0.10.2.dev2026"``)."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def choose(environ=None, *, configured: str | None = None, no_cache: bool = False,
           jax_version: str | None = None) -> tuple[pathlib.Path | None, str]:
    """Where the command's cache goes: ``(folder, why)``, ``folder`` None when it is not used.

    ``configured`` is a folder JAX was already given (its setting wins); ``no_cache`` is the
    command's ``--no-cache``; ``jax_version`` the running JAX's (None: not checked)."""
    environ = os.environ if environ is None else environ
    value = environ.get(ENV, "").strip()
    if no_cache:
        return None, "--no-cache"
    if value.lower() in _OFF:
        return None, f"{ENV}={value}"
    if configured:
        return None, f"JAX's own cache folder {configured!r} is in use"
    if jax_version is not None and not safe_for(jax_version):
        return None, unsafe_reason(jax_version)
    if value:
        return pathlib.Path(value).expanduser(), ENV
    base = environ.get("XDG_CACHE_HOME", "").strip()
    # XDG: a relative XDG_CACHE_HOME is invalid and is ignored
    root = pathlib.Path(base) if base and os.path.isabs(base) else pathlib.Path("~/.cache").expanduser()
    return root / "jaxrot" / "jax", "default"


def usable(folder: pathlib.Path) -> str | None:
    """None when ``folder`` can be created and written, else the reason it cannot."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".jaxrot-probe-", dir=folder)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        return e.strerror or str(e)
    return None


def enable_by_default(environ=None) -> pathlib.Path | None:
    """``import jaxrot``: JAX's persistent compilation cache in jaxrot's folder (:func:`choose`), unless
    it is switched off (:data:`ENV`, ``jax_enable_compilation_cache``), JAX was given a folder already,
    JAX is older than :data:`SAFE_JAX` or the folder cannot be written. Programs are kept whatever
    their compile time (:data:`LIBRARY_MIN_COMPILE_SECONDS`) unless that threshold was set. Returns the
    folder, or None. Nothing is said: a library's import prints nothing."""
    import jax

    environ = os.environ if environ is None else environ
    if not jax.config.jax_enable_compilation_cache:
        return None
    folder, _ = choose(environ, configured=jax.config.jax_compilation_cache_dir, jax_version=jax.__version__)
    if folder is None or usable(folder) is not None:
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in environ \
            and jax.config.jax_persistent_cache_min_compile_time_secs == 1.0:  # JAX's default: not set
        jax.config.update("jax_persistent_cache_min_compile_time_secs", LIBRARY_MIN_COMPILE_SECONDS)
    _BY_DEFAULT["folder"] = str(folder)
    return folder


def enable(*, no_cache: bool = False, environ=None) -> pathlib.Path | None:
    """Switch JAX's persistent compilation cache on for this process (the command); returns its
    folder, or None where it stays off (see the module's text)."""
    import jax

    import sys

    configured = jax.config.jax_compilation_cache_dir
    if configured is not None and configured == _BY_DEFAULT["folder"]:  # import jaxrot's, not the user's
        jax.config.update("jax_compilation_cache_dir", None)
        configured = None
    folder, why = choose(environ, configured=configured, no_cache=no_cache, jax_version=jax.__version__)
    if folder is None:
        # said even under --quiet, as below: results or every run's time depend on it
        if why == unsafe_reason(jax.__version__):
            print(f"jaxrot: note: compilation cache off: {why}", file=sys.stderr, flush=True)
        elif configured and not safe_for(jax.__version__):
            print(f"jaxrot: warning: JAX's own cache folder {configured!r} is in use, and "
                  f"{unsafe_reason(jax.__version__)}; unset JAX_COMPILATION_CACHE_DIR", file=sys.stderr, flush=True)
        return None
    problem = usable(folder)
    if problem is not None:  # said even under --quiet: every run is slower until it is fixed
        print(f"jaxrot: note: compilation cache off: cannot write {str(folder)!r} ({problem}); "
              f"set {ENV} to another folder, or to 'off'", file=sys.stderr, flush=True)
        return None
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder
