"""The benchmark scripts that reach into the kernels' generators still call them as they are: a
script written against an interface that has since changed fails only when someone next measures."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def benchmarks_path(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))


def test_generated_lengths_writes_out_the_attempt_and_both_derivatives(benchmarks_path):
    import generated_lengths

    rows = {r["source"]: r for r in generated_lengths.measure(ROOT, "buss4(3)")}
    assert set(rows) == {"attempt", "vjp", "jvp"}
    # the derivatives write out the attempt's step and its products: longer than the attempt; and they
    # are two sources (a script passing the generator an option it has since dropped got one twice)
    assert 0 < rows["attempt"]["lines"] < min(rows["vjp"]["lines"], rows["jvp"]["lines"])
    assert rows["vjp"] != {**rows["jvp"], "source": "vjp"}


def test_ab_checkouts_generation_writes_a_pair_and_its_derivatives(benchmarks_path):
    import json
    import subprocess

    import ab_checkouts

    code = ab_checkouts._GENERATION.format(names=repr({"buss4(3)": True}))
    r = subprocess.run([sys.executable, "-c", code, ROOT], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr[-2000:]
    # (not refused: a refusal is timed under another name)
    assert list(json.loads(r.stdout.strip().splitlines()[-1])) == ["buss4(3) (s)"]
