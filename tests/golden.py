"""Golden values (tests/data/golden.json: consistency targets from the spec
author's NumPy implementation, not outputs of jaxrot)."""

import json
import pathlib

_PATH = pathlib.Path(__file__).resolve().parent / "data" / "golden.json"


def golden():
    return json.loads(_PATH.read_text())
