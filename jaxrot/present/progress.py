"""Progress of an experiment's items (rows of a table, methods timed) with an honest time left.

The first item of a phase also compiles what the later ones reuse, often several times their
cost: an estimate drawn from it (Buss's table once said ~800 s left for a job of two minutes) is
worse than none. :func:`time_left` therefore gives no estimate until :data:`MIN_TIMED` items after
the first are done, and then extrapolates their mean time only. Reports go to stderr like
:mod:`jaxrot.driver.progress` (whose :data:`~jaxrot.driver.progress.QUIET` silences them too): a
``tqdm`` bar on a terminal, a plain line every ~10 s otherwise.
"""

from __future__ import annotations

import sys
import time

from jaxrot.driver import progress as _driver_progress

#: items timed after the first before a time left is given
MIN_TIMED = 2
#: seconds between two plain lines when stderr is not a terminal
LINE_INTERVAL = 10.0


def time_left(total: int, done: int, first_done: int | None, t_first: float | None, now: float) -> float | None:
    """Seconds left for ``total - done`` items, from the items done after the first report.

    ``first_done`` items were done at time ``t_first`` (the first report: it includes the
    compilation), ``done`` items at ``now``. None while fewer than :data:`MIN_TIMED` items have
    been timed after the first report."""
    if first_done is None or t_first is None or done - first_done < MIN_TIMED:
        return None
    per_item = (now - t_first) / (done - first_done)
    return per_item * max(total - done, 0)


def _seconds(s: float) -> str:
    s = max(0.0, s)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


class ItemProgress:
    """A counter towards ``total`` items, shown on stderr with an honest time left.

    Example::

        with ItemProgress(17, "rows", "Buss table") as bar:
            for row in rows:
                ...
                bar.update(1)

    ``clock`` (default :func:`time.perf_counter`) is there for tests.
    """

    def __init__(self, total: int, unit: str = "items", desc: str = "", *, clock=time.perf_counter,
                 stream=None):
        self.total, self.unit, self.desc, self.done = int(total), unit, desc, 0
        self._clock, self._stream = clock, stream
        self._start = self._last = clock()
        self._first_done: int | None = None
        self._t_first: float | None = None
        self._bar = None
        if self.quiet:
            return
        out = self.stream
        if out.isatty():
            from tqdm.auto import tqdm

            # tqdm's own rate and time left would include the first item's compilation
            self._bar = tqdm(total=self.total, unit=f" {unit}", desc=desc or None, file=out, mininterval=0.5,
                             dynamic_ncols=True, leave=True,
                             bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt}{unit} [{elapsed}{postfix}]")
            self._bar.set_postfix_str(self._left_text(), refresh=True)

    @property
    def quiet(self) -> bool:
        return _driver_progress.QUIET

    @property
    def stream(self):
        return sys.stderr if self._stream is None else self._stream

    def left(self) -> float | None:
        """The estimated seconds left, or None while there is no honest estimate yet."""
        return time_left(self.total, self.done, self._first_done, self._t_first, self._clock())

    def _left_text(self) -> str:
        if self.done >= self.total:
            return "done"
        left = self.left()
        if left is None:  # the first items include the compilation: no estimate from them
            first = self._first_done or 1
            return f"time left: estimated from {self.unit} {first + 1}-{first + MIN_TIMED}"
        return f"~{_seconds(left)} left"

    def update(self, n: int = 1) -> None:
        """``n`` more done."""
        now = self._clock()
        self.done += int(n)
        if self._first_done is None:
            self._first_done, self._t_first = self.done, now
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(int(n))
            self._bar.set_postfix_str(self._left_text(), refresh=False)
        elif now - self._last >= LINE_INTERVAL or self.done >= self.total:
            self._last = now
            self._line(f"{self.done}/{self.total} {self.unit} ({100 * self.done / max(self.total, 1):.0f}%), "
                       f"{_seconds(now - self._start)}, {self._left_text()}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _line(self, text: str) -> None:
        print(f"  {self.desc + ': ' if self.desc else ''}{text}", file=self.stream, flush=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
