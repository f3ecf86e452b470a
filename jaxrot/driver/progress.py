"""Progress of long runs: a ``tqdm`` bar on a terminal, a plain line every ~10 s otherwise.

``simulate(..., progress=True)`` reports the compilation (timed as such) and then the steps done
with the time left; the command line's long commands report their items the same way.
:data:`QUIET` silences every report (``--quiet``).
"""

from __future__ import annotations

import sys
import time

#: no progress output at all (the command line's ``--quiet``)
QUIET = False
#: seconds between two plain lines when stderr is not a terminal
LINE_INTERVAL = 10.0


class Progress:
    """A counter towards ``total`` ``unit`` s, shown on stderr.

    Example::

        with Progress(1000, "steps", "buss4 on t_handle") as bar:
            bar.compiled(2.1)      # the compilation took 2.1 s
            bar.update(500)        # 500 more done
    """

    def __init__(self, total: int, unit: str = "steps", desc: str = ""):
        self.total, self.unit, self.desc, self.done = int(total), unit, desc, 0
        self._bar = None
        self._last = self._start = time.perf_counter()
        if QUIET:
            return
        if sys.stderr.isatty():
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, unit=f" {unit}", desc=desc or None, file=sys.stderr,
                             mininterval=0.5, dynamic_ncols=True, leave=True)

    def compiled(self, seconds: float) -> None:
        """The compilation took ``seconds``; the running phase starts (and its clock) now."""
        self._start = self._last = time.perf_counter()
        if QUIET:
            return
        msg = f"compiled in {seconds:.1f} s"
        if self._bar is not None:
            self._bar.set_postfix_str(msg)
            self._bar.reset(total=self.total)  # the rate and time left measure the running phase
        else:
            self._line(msg)

    def update(self, n: int) -> None:
        """``n`` more done."""
        self.done += int(n)
        if QUIET:
            return
        if self._bar is not None:
            self._bar.update(int(n))
        elif time.perf_counter() - self._last >= LINE_INTERVAL or self.done >= self.total:
            self._last = time.perf_counter()
            el = self._last - self._start
            left = el * (self.total - self.done) / max(self.done, 1)
            self._line(f"{self.done}/{self.total} {self.unit} ({100 * self.done / max(self.total, 1):.0f}%), "
                       f"{el:.0f} s, ~{left:.0f} s left")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _line(self, text: str) -> None:
        print(f"  {self.desc + ': ' if self.desc else ''}{text}", file=sys.stderr, flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def items(iterable, desc: str = "", total: int | None = None, unit: str = "items"):
    """``iterable``, reporting each item done (a bar over the items of a long study)."""
    seq = list(iterable) if total is None else iterable
    with Progress(len(seq) if total is None else total, unit, desc) as bar:
        for x in seq:
            yield x
            bar.update(1)
