"""The oldest versions pyproject.toml declares are the versions .ci/oldest installs and tests: its
constraints file pins every lower bound of the runtime dependencies (and of the fused kernels' extra),
so neither can change without the other."""

import pathlib
import re

import pytest
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / ".ci" / "oldest-constraints.txt"


def _name(requirement: str) -> str:
    """The distribution's normalised name (PEP 503): ``Warp_Lang`` and ``warp-lang`` are one."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)).lower()


def lower_bounds(requirements) -> dict[str, Version]:
    """``name -> version`` of each requirement's ``>=`` bound (one without a bound is left out)."""
    bounds = {}
    for req in requirements:
        m = re.search(r">=\s*([^,;\s]+)", req.split(";")[0])
        if m:
            bounds[_name(req)] = Version(m.group(1))
    return bounds


def pins(text: str) -> dict[str, Version]:
    """``name -> version`` of a constraints file of ``name==version`` lines (comments allowed)."""
    out = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)", line)
            assert m, f"not a name==version pin: {line!r}"
            out[_name(m.group(1))] = Version(m.group(2))
    return out


def declared() -> dict[str, Version]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return lower_bounds(project["dependencies"]) | lower_bounds(project["optional-dependencies"]["fast"])


def test_the_oldest_pins_are_the_declared_lower_bounds():
    bounds = declared()
    assert {"jax", "jaxlib", "equinox"} <= bounds.keys()
    assert pins(CONSTRAINTS.read_text()) == bounds, (
        "pyproject.toml's lower bounds and .ci/oldest-constraints.txt differ: a new lower bound is "
        "tested by running .ci/oldest with it pinned there")

