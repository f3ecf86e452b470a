"""Access to SPEC section 8 golden values (``../shared/golden.json`` beside the checkout)."""

import json
import pathlib

import pytest

_CANDIDATES = [
    pathlib.Path(__file__).resolve().parents[1] / "shared" / "golden.json",
    pathlib.Path(__file__).resolve().parents[2] / "shared" / "golden.json",
]


def golden():
    for p in _CANDIDATES:
        if p.exists():
            return json.loads(p.read_text())
    pytest.skip("golden.json (shared/) not found beside the checkout")
