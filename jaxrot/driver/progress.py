"""Progress of long runs: a ``tqdm`` bar on a terminal, a plain line every ~10 s otherwise.

``simulate(..., progress=jaxrot.TqdmProgressMeter())`` (or :class:`TextProgressMeter`; ``True`` picks
tqdm on a terminal, text otherwise) reports the compilation (timed as such) and then the steps done
with the time left: a run of constant steps after each compiled chunk of frames, an error-controlled
run when it ends. The command line's long commands report their items the same way. :data:`QUIET`
silences every report (``--quiet``).
"""

from __future__ import annotations

import sys
import time

#: no progress output at all (the command line's ``--quiet``)
QUIET = False
#: seconds between two plain lines when stderr is not a terminal
LINE_INTERVAL = 10.0


class AbstractProgressMeter:
    """How :func:`jaxrot.simulate` reports progress (an object, as diffrax's ``progress_meter``)."""

    tty: bool | None = None  # None: tqdm on a terminal, lines otherwise

    def __eq__(self, other):
        return type(self) is type(other)

    def __hash__(self):
        return hash(type(self))

    def __repr__(self):
        return f"jaxrot.{type(self).__name__}()"


class TextProgressMeter(AbstractProgressMeter):
    """Plain lines on stderr, about every 10 s: steps done, elapsed and left.

    Example::

        jaxrot.simulate("buss4", p, 1e-4, 10**7, progress=jaxrot.TextProgressMeter())
    """

    tty = False


class TqdmProgressMeter(AbstractProgressMeter):
    """A ``tqdm`` bar on stderr.

    Example::

        jaxrot.simulate("buss4", p, 1e-4, 10**7, progress=jaxrot.TqdmProgressMeter())
    """

    tty = True


def progress_report(progress, n_frames: int, save_every: int, n_steps: int):
    """The report callback of a run with a progress meter (None without one): ``report(None, seconds)``
    after the compilation, then ``report(frames_done)``."""
    if progress is None or progress is False:
        return None
    if progress is True:
        meter = AbstractProgressMeter()
    elif isinstance(progress, AbstractProgressMeter):
        meter = progress
    else:
        raise TypeError(f"progress must be jaxrot.TextProgressMeter(), jaxrot.TqdmProgressMeter(), True or None, "
                        f"got {progress!r}")
    bar = Progress(n_steps, "steps", tty=meter.tty)
    done = [0]

    def report(frames, compile_seconds=None):
        if frames is None:
            bar.compiled(compile_seconds)
            return
        bar.update((frames - done[0]) * save_every)
        done[0] = frames
        if frames >= n_frames:
            bar.close()

    return report


class Progress:
    """A counter towards ``total`` ``unit`` s, shown on stderr.

    Example::

        with Progress(1000, "steps", "buss4 on t_handle") as bar:
            bar.compiled(2.1)      # the compilation took 2.1 s
            bar.update(500)        # 500 more done
    """

    def __init__(self, total: int, unit: str = "steps", desc: str = "", tty: bool | None = None):
        self.total, self.unit, self.desc, self.done = int(total), unit, desc, 0
        self._bar = None
        self._last = self._start = time.perf_counter()
        if QUIET:
            return
        if sys.stderr.isatty() if tty is None else tty:
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
