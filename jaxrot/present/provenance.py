"""Which command made each result file: ``provenance.json`` in the output folder.

Every ``reproduce``/``bench`` run adds one entry per file it wrote (entries of earlier runs for other
files are kept)::

    {"buss_orders.png": {"command": "jaxrot reproduce buss_orders --out figures", "quick": false,
                         "sha256": "...", "data": {"buss_orders.json": "<its sha256>"},
                         "jaxrot": "0.4.0", "source": "<git describe of the checkout>",
                         "written": "2026-11-25T10:12:03+00:00"}}

``data`` holds the hashes of the JSON files written by the same run, so a figure can be checked to
have been drawn from the numbers beside it (not from an earlier or a ``--quick`` run, and not edited
since): :func:`check` lists what does not hold.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import pathlib
import subprocess

from . import output

MANIFEST = "provenance.json"


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _source() -> str | None:
    """``git describe --always --dirty`` of the checkout the package runs from, if it is one."""
    root = pathlib.Path(__file__).resolve().parents[2]
    try:
        r = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (r.stdout.strip() or None) if r.returncode == 0 else None


def record(folder, files, *, command: str, quick: bool) -> pathlib.Path:
    """Add the ``files`` of one run (paths inside ``folder``) to ``folder/provenance.json``."""
    from jaxrot import __version__

    folder = pathlib.Path(folder)
    files = [pathlib.Path(f) for f in files if pathlib.Path(f).name != MANIFEST]
    data = {f.relative_to(folder).as_posix(): sha256(f) for f in files if f.suffix == ".json"}
    when = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    common = {"command": command, "quick": bool(quick), "data": data, "jaxrot": __version__,
              "source": _source(), "written": when}
    manifest = folder / MANIFEST
    entries = json.loads(manifest.read_text()) if manifest.exists() else {}
    for f in files:
        entries[f.relative_to(folder).as_posix()] = {**common, "sha256": sha256(f)}
    with output.atomic(manifest) as tmp:
        tmp.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
    return manifest


def write_record(folder, stem: str, data, text: str, *, command: str) -> list[pathlib.Path]:
    """``stem.json`` (``data`` as JSON) and ``stem.md`` (``text``) in ``folder``, each written atomically,
    and their entry in its ``provenance.json`` (a full run's); the two paths."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / f"{stem}.json", folder / f"{stem}.md"]
    with output.atomic(files[0]) as tmp:
        tmp.write_text(json.dumps(data, indent=1))
    with output.atomic(files[1]) as tmp:
        tmp.write_text(text)
    record(folder, files, command=command, quick=False)
    return files


def check(folder, *, suffixes=(".png", ".gif", ".json", ".md")) -> list[str]:
    """The problems with the result files of ``folder`` (empty when every file with one of
    ``suffixes`` was written by a full run, is unchanged since, and its run's JSON numbers are the
    ones in the folder)."""
    folder = pathlib.Path(folder)
    manifest = folder / MANIFEST
    entries = json.loads(manifest.read_text()) if manifest.exists() else {}
    problems = []
    for f in sorted(p for p in folder.iterdir() if p.suffix in suffixes and p.name != MANIFEST):
        e = entries.get(f.name)
        if e is None:
            problems.append(f"{f.name}: no provenance entry (not written by a reproduce/bench command)")
            continue
        if e["quick"]:
            problems.append(f"{f.name}: written by a --quick run ({e['command']})")
        if sha256(f) != e["sha256"]:
            problems.append(f"{f.name}: changed since {e['command']} wrote it")
        for name, digest in e["data"].items():
            if not (folder / name).exists() or sha256(folder / name) != digest:
                problems.append(f"{f.name}: drawn from numbers that are no longer {name} "
                                f"(rerun {e['command']})")
    return problems
