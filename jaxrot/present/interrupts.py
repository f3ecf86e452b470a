"""Commands that stop at once on Ctrl-C or SIGTERM, leaving no partial file.

Python runs a signal handler only between bytecodes of the main thread. A compiled JAX call (an
XLA program running for minutes, or its compilation) is one long call into C++, so a Ctrl-C in
the main thread would be handled only when it returns. :func:`call_interruptibly` therefore runs
the command in a worker thread and keeps the main thread waiting in short, interruptible joins:
the interrupt is seen within a fraction of a second, the staging folders and temporary files of
:mod:`jaxrot.present.output` are removed, and the caller may end the process without waiting
for the computation (which cannot be cancelled from Python).
"""

from __future__ import annotations

import signal
import threading

from . import output


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C (exit code 143 instead of 130)."""

    exit_code = 143


def _on_sigterm(signum, frame):
    raise Terminated


def call_interruptibly(fn, *args):
    """``fn(*args)`` in a worker thread; its result, or its exception re-raised here.

    On Ctrl-C (or SIGTERM, as :class:`Terminated`) while ``fn`` runs, the pending outputs are
    discarded (:func:`jaxrot.present.output.discard_pending`) and the interrupt is raised here at
    once; ``fn`` may still be running in its (daemon) thread. Signal handlers are installed only
    when called from the main thread, and restored afterwards.
    """
    box = {}

    def work():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    worker = threading.Thread(target=work, name="jaxrot-command", daemon=True)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main else None
    try:
        worker.start()
        while worker.is_alive():
            worker.join(0.1)  # short waits: a signal is handled between them
    except KeyboardInterrupt:
        output.discard_pending()
        raise
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    if "error" in box:
        raise box["error"]
    return box["value"]
