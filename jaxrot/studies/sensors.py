"""Sensor recordings in, throws out: reading gyroscope CSV files (phyphox's export by its column
names, any other CSV by named columns) and finding the free flights in them.

Every problem with a file is a :class:`SensorDataError` (a ``ValueError``) naming the file, the line
and the column, and saying what to do: a missing column, a field that is not a number, NaN, a line
with too few fields, times that do not increase, too few samples.

Free flights (:func:`find_flights`): a thrown body spins fast while the hand that threw it moves
slowly, so a flight is a stretch where the rate magnitude ``|omega|`` rises above ``high`` and
stays above ``low`` (hysteresis: noise does not split a flight), lasting at least ``min_duration``;
``trim`` seconds are cut from both ends (the hand's last and the catch's first touch). Real
recordings blur the release and the catch: give the windows yourself (:func:`cut`, the command's
``--window START:END``) where the detected ones look wrong in the report's plot.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os

import numpy as np

from .identify_model import MIN_SAMPLES, Throw

#: phyphox's "Gyroscope rotation rate" export
PHYPHOX_TIME = "Time (s)"
PHYPHOX_GYRO = ("Gyroscope x (rad/s)", "Gyroscope y (rad/s)", "Gyroscope z (rad/s)")


class SensorDataError(ValueError):
    """A recording that cannot be used, with the file, line and column in the message."""


@dataclasses.dataclass(frozen=True)
class Recording:
    """Gyroscope samples: times ``ts`` (s) and rates ``omega`` (n, 3) in the sensor frame (rad/s)."""

    ts: np.ndarray
    omega: np.ndarray
    source: str = ""

    def __len__(self):
        return len(self.ts)

    @property
    def rate(self) -> np.ndarray:
        """``|omega|`` per sample."""
        return np.linalg.norm(self.omega, axis=1)


def _delimiter(header: str) -> str:
    counts = {d: header.count(d) for d in (",", ";", "\t")}
    return max(counts, key=counts.get) if max(counts.values()) else ","


def _number(text: str, decimal_comma: bool):
    t = text.strip()
    if decimal_comma:
        t = t.replace(",", ".")
    return float(t)


def read_csv(path, *, time: str = PHYPHOX_TIME, gyro=PHYPHOX_GYRO) -> Recording:
    """Read a gyroscope recording from a CSV file by its column names.

    Args:
      path: the file (comma, semicolon or tab separated; phyphox's decimal-comma exports too).
      time: the time column's name (s).
      gyro: the names of the x, y and z rate columns (rad/s).

    Returns:
      a :class:`Recording`.

    Raises:
      SensorDataError: naming the file, line and column (missing column, not a number, NaN, times not
        increasing, too few samples).

    Example::

        rec = read_csv("Gyroscope rotation rate.csv")        # phyphox's export
        rec = read_csv("imu.csv", time="t", gyro=("gx", "gy", "gz"))
    """
    name = os.fspath(path)
    gyro = tuple(gyro)
    if len(gyro) != 3:
        raise SensorDataError(f"give three gyroscope columns (x, y, z), got {len(gyro)}: {gyro}")
    try:
        with open(name, newline="", encoding="utf-8-sig") as f:
            text = f.read()
    except FileNotFoundError:
        raise SensorDataError(f"{name}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SensorDataError(f"{name}: cannot be read as text: {e}") from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise SensorDataError(f"{name}: the file is empty (line 1 should name the columns)")
    delim = _delimiter(lines[0])
    decimal_comma = delim != ","
    rows = list(csv.reader(lines, delimiter=delim))
    header = [h.strip() for h in rows[0]]
    lookup = {h.lower(): i for i, h in reversed(list(enumerate(header)))}
    cols = []
    for role, col in (("time", time), ("x rate", gyro[0]), ("y rate", gyro[1]), ("z rate", gyro[2])):
        i = lookup.get(col.strip().lower())
        if i is None:
            raise SensorDataError(
                f"{name}: no column {col!r} (the {role}) in line 1; its columns are "
                f"{', '.join(repr(h) for h in header)}. Name the columns with --time-column and --gyro-columns "
                f"(Python: read_csv(time=..., gyro=(...)))")
        cols.append((i, col))
    need = max(i for i, _ in cols) + 1
    data = []
    for n, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue  # blank lines (a trailing newline)
        if len(row) < need:
            raise SensorDataError(f"{name}, line {n}: {len(row)} field(s), but column {cols[-1][1]!r} is field "
                                  f"{need} of the header")
        vals = []
        for i, col in cols:
            try:
                v = _number(row[i], decimal_comma)
            except ValueError:
                raise SensorDataError(f"{name}, line {n}, column {col!r}: {row[i].strip()!r} is not a number") from None
            if not math.isfinite(v):
                raise SensorDataError(f"{name}, line {n}, column {col!r}: {row[i].strip()} (not a finite number); "
                                      "remove the line or cut the recording around it")
            vals.append(v)
        if data and not vals[0] > data[-1][1][0]:
            raise SensorDataError(f"{name}, line {n}, column {time!r}: time {vals[0]!r} is not after the previous "
                                  f"sample's {data[-1][1][0]!r} (line {data[-1][0]}); times must increase")
        data.append((n, vals))
    if len(data) < MIN_SAMPLES:
        raise SensorDataError(f"{name}: {len(data)} sample(s); at least {MIN_SAMPLES} are needed")
    arr = np.asarray([v for _, v in data], np.float64)
    return Recording(arr[:, 0], arr[:, 1:4], name)


def parse_window(text: str) -> tuple[float, float]:
    """``"2.0:3.09"`` -> ``(2.0, 3.09)`` (seconds on the recording's clock)."""
    parts = str(text).split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        a, b = float(parts[0]), float(parts[1])
    except ValueError:
        raise SensorDataError(f"a window is START:END in seconds (e.g. 2.0:3.09), got {text!r}") from None
    if not (math.isfinite(a) and math.isfinite(b) and b > a):
        raise SensorDataError(f"window {text!r}: END must be after START")
    return a, b


def find_flights(rec: Recording, *, high: float = 3.0, low: float = 1.5, min_duration: float = 0.3,
                 trim: float = 0.02) -> list[tuple[float, float]]:
    """The free flights of ``rec``: ``|omega|`` above ``high`` (rad/s), staying above ``low``, for at
    least ``min_duration`` (s), less ``trim`` (s) at each end. Returns ``[(start, end), ...]``.

    Raises:
      SensorDataError: where none is found (with the largest rate seen and the remedy).
    """
    if not (0 < low <= high):
        raise ValueError(f"need 0 < low <= high, got low={low}, high={high}")
    r = rec.rate
    out, k, n = [], 0, len(r)
    while k < n:
        if r[k] <= high:
            k += 1
            continue
        a = k
        while a > 0 and r[a - 1] > low:
            a -= 1
        b = k
        while b + 1 < n and r[b + 1] > low:
            b += 1
        t0, t1 = rec.ts[a] + trim, rec.ts[b] - trim
        if t1 - t0 >= min_duration:
            out.append((float(t0), float(t1)))
        k = b + 1
    if not out:
        raise SensorDataError(
            f"{rec.source or 'the recording'}: no free flight found: |omega| never stays above {low} rad/s for "
            f"{min_duration} s after reaching {high} rad/s (the largest rate is {r.max():.3g} rad/s). Give the "
            "windows with --window START:END, or lower --high/--low")
    return out


def cut(rec: Recording, windows, *, min_rate: float = 1.5) -> list[Throw]:
    """The throws inside ``windows`` (``[(start, end), ...]`` in seconds), each checked: inside the
    recording, at least :data:`~jaxrot.studies.identify_model.MIN_SAMPLES` samples, and a free flight
    (median ``|omega|`` at least ``min_rate`` rad/s)."""
    throws = []
    src = rec.source or "the recording"
    for a, b in windows:
        label = f"{a:g}:{b:g}"
        if not b > a:
            raise SensorDataError(f"window {label}: END must be after START")
        if b < rec.ts[0] or a > rec.ts[-1]:
            raise SensorDataError(f"window {label} lies outside {src} ({rec.ts[0]:g} to {rec.ts[-1]:g} s)")
        sel = (rec.ts >= a) & (rec.ts <= b)
        k = int(sel.sum())
        if k < MIN_SAMPLES:
            raise SensorDataError(f"window {label} holds {k} sample(s) of {src}; at least {MIN_SAMPLES} are needed "
                                  "(a longer window)")
        rate = np.median(rec.rate[sel])
        if rate < min_rate:
            raise SensorDataError(f"window {label} has no free flight: the median rate there is {rate:.3g} rad/s, "
                                  f"below {min_rate} rad/s (the body is in the hand or at rest); check the window")
        throws.append(Throw(rec.ts[sel], omega=rec.omega[sel], label=label))
    if not throws:
        raise SensorDataError("no windows given")
    return throws
