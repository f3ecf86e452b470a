"""Progress of long runs: a ``tqdm`` bar on a terminal, a plain line about every 10 s otherwise.

``simulate(..., progress=jaxrot.TqdmProgressMeter())`` (or :class:`TextProgressMeter`; ``True`` picks
tqdm on a terminal, text otherwise) reports the compilation (timed as such), then the part of the
run done with the time left: the steps of a run of constant steps, the time the slowest body has
reached and the bodies finished of an error-controlled run, the bodies done of a fused batch. A run
with a meter goes in *pieces*, each a call of the same compiled program sized to take about half of
:data:`LINE_INTERVAL`, and a line follows a piece where the last one is that old; while a call runs
longer than that (a compilation, one long fused launch), a line says so every :data:`LINE_INTERVAL`
seconds. The pieces give the same numbers as the run without a meter. The command line's long
commands report their items the same way. :data:`QUIET` silences every report (``--quiet``).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import threading
import time

import jax

from .checks import is_concrete

#: no progress output at all (the command line's ``--quiet``)
QUIET = False
#: seconds between two plain lines when stderr is not a terminal (the promise: a line at least this often)
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
    """Plain lines on stderr, about every 10 s: the compilation, then the part done, elapsed and left.

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


def _meter(progress) -> AbstractProgressMeter | None:
    if progress is None or progress is False:
        return None
    if progress is True:
        return AbstractProgressMeter()
    if isinstance(progress, AbstractProgressMeter):
        return progress
    raise TypeError(f"progress must be jaxrot.TextProgressMeter(), jaxrot.TqdmProgressMeter(), True or None, "
                    f"got {progress!r}")


def progress_report(progress, n_frames: int, save_every: int, n_steps: int) -> RunProgress | None:
    """The report of a run of ``n_steps`` constant steps (``n_frames`` frames of ``save_every``) with a
    progress meter, or None without one. Called as ``report(None, seconds)`` after the compilation and
    ``report(frames_done)`` after each piece (or use its methods)."""
    meter = _meter(progress)
    return None if meter is None else RunProgress(meter, n_steps, "steps", save_every=save_every)


def span_report(progress, t0: float, t_end: float, bodies: int | None) -> RunProgress | None:
    """The report of an error-controlled run over ``[t0, t_end]`` of ``bodies`` bodies (None: one), or
    None without a meter: the part done is the time the slowest unfinished body has reached."""
    meter = _meter(progress)
    if meter is None or not all(map(is_concrete, (t0, t_end))):  # inside a trace: part of the caller's program
        return None
    return RunProgress(meter, 100, "%", span=(float(t0), float(t_end)), bodies=bodies)


_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("jaxrot_progress", default=None)


@contextlib.contextmanager
def reporting(report, *inputs):
    """Within, :func:`active` is ``report`` (the run's executor reports to it) and a line comes at least
    every :data:`LINE_INTERVAL`; closed at the end. A run whose ``inputs`` hold a tracer (part of
    someone's ``jit``/``grad``/``vmap``: it runs when their program does) reports nothing."""
    report = _live(report, inputs)
    token = _ACTIVE.set(report)
    try:
        if report is not None:
            report._engaged = True
        with report.beating() if report is not None else contextlib.nullcontext():
            yield report
    finally:
        _ACTIVE.reset(token)
        if report is not None:
            report.close()


def _live(report, inputs):
    """``report``, or None where ``inputs`` hold a tracer (the run is part of someone's program)."""
    if report is not None and not all(map(is_concrete, jax.tree_util.tree_leaves(inputs))):
        return None
    return report


@contextlib.contextmanager
def preparing(report, *inputs):
    """Within (the executor chosen: a fused kernel's source written and checked, which takes seconds
    on a first call), a line at least every :data:`LINE_INTERVAL` says the run is being prepared, where
    :func:`reporting` would report. An executor that refuses the job closes the report: the run does
    not start, and a bar is not left drawn."""
    live = _live(report, inputs)
    try:
        with live.waiting("preparing") if live is not None else contextlib.nullcontext():
            yield
    except BaseException:
        if report is not None:
            report.close()
        raise


def active():
    """The report of the run being carried out (see :func:`reporting`), or None."""
    return _ACTIVE.get()


class Progress:
    """A counter towards ``total`` ``unit`` s, shown on stderr: a ``tqdm`` bar on a terminal, plain
    lines at most every :data:`LINE_INTERVAL` seconds otherwise (and at the end).

    Example::

        with Progress(1000, "steps", "buss4 on t_handle") as bar:
            bar.compiled(2.1)      # the compilation took 2.1 s
            bar.update(500)        # 500 more done
    """

    def __init__(self, total: int, unit: str = "steps", desc: str = "", tty: bool | None = None):
        self.total, self.unit, self.desc, self.done = int(total), unit, desc, 0
        self._bar, self._note, self._count = None, "", True
        self._lock = threading.Lock()
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

    def update(self, n: int, note: str = "") -> None:
        """``n`` more done (``note``: said after the count)."""
        self.update_to(self.done + int(n), note)

    def update_to(self, done: int, note: str = "", count: bool = True) -> None:
        """``done`` done in all (``note``: said after the count; ``count=False``: the percentage only)."""
        n, self.done = int(done) - self.done, int(done)
        if QUIET:
            return
        if self._bar is not None:
            if note:
                self._bar.set_postfix_str(note, refresh=False)
            self._bar.update(n)
        else:
            self._note, self._count = note, count
            if time.perf_counter() - self._last >= LINE_INTERVAL or self.done >= self.total:
                self.status()

    def status(self) -> None:
        """The line of the count so far (lines only): done, elapsed, left."""
        if QUIET or self._bar is not None:
            return
        el = time.perf_counter() - self._start
        pct = f"{100 * self.done / max(self.total, 1):.0f}%"
        head = f"{self.done}/{self.total} {self.unit} ({pct})" if self._count and self.unit != "%" else pct
        left = f", ~{el * (self.total - self.done) / self.done:.0f} s left" if self.done else ""
        self._line(f"{head}{', ' + self._note if self._note else ''}, {el:.0f} s{left}")

    def note(self, text: str) -> None:
        """A line (a bar's postfix) about what is going on, between the counts."""
        if QUIET:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(text)
        else:
            self._line(text)

    def since_line(self) -> float:
        """Seconds since the last line (or the start)."""
        return time.perf_counter() - self._last

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _line(self, text: str) -> None:
        with self._lock:
            self._last = time.perf_counter()
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


class RunProgress:
    """The report of one run: the compilation, then the part done (see the module's text).

    ``total`` units of ``unit`` (steps; or thousandths of the span with ``span=(t0, t_end)``, whose
    lines say the time reached and, for ``bodies`` bodies, how many have finished)."""

    def __init__(self, meter: AbstractProgressMeter, total: int, unit: str, *, save_every: int = 1,
                 span=None, bodies=None):
        self.save_every, self.span, self.bodies = save_every, span, bodies
        self.bar = Progress(total, unit, tty=meter.tty)
        self._compiled = False
        self._what, self._engaged = ("preparing", time.perf_counter()), False
        self._beat_lock, self._depth, self._thread, self._stop = threading.Lock(), 0, None, None

    # the callback of the constant-step executors: report(None, seconds), then report(frames_done)
    def __call__(self, frames, compile_seconds=None):
        if frames is None:
            self.compiled(compile_seconds)
        else:
            self.steps(frames * self.save_every)

    def compiled(self, seconds: float) -> None:
        self._compiled = True
        self.bar.compiled(seconds)

    def steps(self, done: int) -> None:
        """``done`` constant steps of every body taken."""
        self.bar.update_to(min(done, self.bar.total))

    def reached(self, t_slowest: float, finished: int | None = None) -> None:
        """The slowest unfinished body is at ``t_slowest``; ``finished`` bodies are done."""
        t0, t1 = self.span
        frac = 1.0 if t1 == t0 else min(max((t_slowest - t0) / (t1 - t0), 0.0), 1.0)
        note = f"t = {t_slowest:.6g} of {t1:.6g} (the slowest body)" if self.bodies else f"t = {t_slowest:.6g} of {t1:.6g}"
        if self.bodies and finished is not None:
            note += f", {finished}/{self.bodies} bodies done"
        self.bar.update_to(math.floor(self.bar.total * frac) if frac < 1 else self.bar.total, note)

    def bodies_done(self, done: int, of: int) -> None:
        """``done`` of ``of`` bodies finished (a fused batch run in groups)."""
        self.bar.update_to(self.bar.total * done // max(of, 1), f"{done}/{of} bodies done", count=False)

    @contextlib.contextmanager
    def waiting(self, what: str = "running"):
        """Around a call that blocks (a compilation, a piece, a launch): while no line has come for
        :data:`LINE_INTERVAL`, one comes, with the count so far or what the run waits on."""
        before, self._engaged = self._what, True
        self._what = (what, time.perf_counter())
        try:
            with self.beating():
                yield
        finally:
            self._what = before

    @contextlib.contextmanager
    def beating(self):
        """Within, a thread gives a line wherever :data:`LINE_INTERVAL` has passed without one (nested:
        one thread)."""
        with self._beat_lock:
            self._depth += 1
            if self._depth == 1 and not QUIET:
                self._stop = threading.Event()
                self._thread = threading.Thread(target=self._beat, args=(self._stop,), daemon=True,
                                                name="jaxrot-progress")
                self._thread.start()
        try:
            yield
        finally:
            with self._beat_lock:
                self._depth -= 1
                thread = self._thread if self._depth == 0 else None
                if thread is not None:
                    self._stop.set()
                    self._thread = None
            if thread is not None:
                thread.join()

    def _beat(self, stop):
        while not stop.wait(min(1.0, LINE_INTERVAL / 4)):
            # not before the executor's first call (a run traced into someone's program never makes one)
            if self._engaged and self.bar.since_line() >= LINE_INTERVAL:
                what, since = self._what
                if self.bar.done or (self._compiled and what != "compiling"):
                    self.bar.status()
                else:
                    self.bar.note(f"{what}, {time.perf_counter() - since:.0f} s")

    def compile(self, call):
        """``call()`` (a piece of nothing: it compiles the program), timed and reported as the compilation."""
        start = time.perf_counter()
        with self.waiting("compiling"):
            out = call()
            jax.block_until_ready(out)
        self.compiled(time.perf_counter() - start)
        return out

    def close(self) -> None:
        self.bar.close()


#: a piece is at most this many times the one before
GROWTH = 16


class Pacer:
    """Sizes of the pieces of a run: each from the last one's rate, to take about half of
    :data:`LINE_INTERVAL` (at most ``most`` units and ``growth`` times the last; the first ``first``)."""

    def __init__(self, first: int = 1, most: int | None = None, growth: int | None = GROWTH):
        self.n, self.most, self.growth = max(1, first), most, growth

    def run(self, report: RunProgress, n: int, call, what: str = "running"):
        """``call(n)`` (the next ``n`` units), waited for; the next size from its time."""
        start = time.perf_counter()
        with report.waiting(what):
            out = jax.block_until_ready(call(n))
        took = time.perf_counter() - start
        # at most ``growth`` times the last: a piece of a few steps is mostly the call's own cost
        self.n = max(1, min(int(n * (LINE_INTERVAL / 2) / max(took, 1e-6)), (self.growth or sys.maxsize) * n,
                            self.most or sys.maxsize))
        return out
