"""The default run's selection (tests/tiers.py): covering samples cover, stale entries are errors."""

import itertools
import types

import pytest

from . import tiers


class _Item:
    def __init__(self, nodeid, **params):
        self.nodeid = nodeid
        self.callspec = types.SimpleNamespace(params=params)
        self.marks = []

    def get_closest_marker(self, name):
        return next((m for m in self.marks if m == name), None)

    def add_marker(self, mark):
        self.marks.append(mark)


def _matrix(fn="tests/test_x.py::test_m"):
    return [_Item(f"{fn}[{a}-{b}-{c}]", a=a, b=b, c=c)
            for a, b, c in itertools.product(["a1", "a2", "a3"], ["b1", "b2"], ["c1", "c2", "c3", "c4"])]


def test_a_covering_sample_covers_every_value_and_every_named_pair():
    items = _matrix()
    kept = [it for it in items if it.nodeid in tiers.covering_sample(items, (("a", "b"), ("c",)))]
    assert {(it.callspec.params["a"], it.callspec.params["b"]) for it in kept} == set(itertools.product(["a1", "a2", "a3"], ["b1", "b2"]))
    assert {it.callspec.params["c"] for it in kept} == {"c1", "c2", "c3", "c4"}
    assert len(kept) == 6  # the six (a, b) pairs carry the four c values: no case beyond them


def test_apply_marks_listed_tests_and_the_rest_of_a_matrix(monkeypatch):
    items = _matrix() + [_Item("tests/test_x.py::test_long"), _Item("tests/test_x.py::test_short")]
    monkeypatch.setattr(tiers, "SLOW", {"tests/test_x.py::test_long": "test_short"})
    monkeypatch.setattr(tiers, "COVER", {"tests/test_x.py::test_m": (("c",),)})
    tiers.apply(items, "slow")
    slow = {it.nodeid for it in items if it.marks}
    assert "tests/test_x.py::test_long" in slow and "tests/test_x.py::test_short" not in slow
    assert sum(1 for it in items[:24] if not it.marks) == 4  # one case per value of c


def test_an_entry_naming_no_collected_test_is_an_error(monkeypatch):
    items = [_Item("tests/test_x.py::test_short")]
    monkeypatch.setattr(tiers, "SLOW", {"tests/test_x.py::test_renamed": "test_short"})
    monkeypatch.setattr(tiers, "COVER", {})
    with pytest.raises(ValueError, match="test_renamed"):
        tiers.apply(items, "slow")
    # a file collected only in part (a -k or node selection) is not checked
    tiers.apply([_Item("tests/test_x.py::test_short")], "slow", whole_files=[])


def test_every_entry_says_what_covers_it():
    assert all(isinstance(why, str) and why.strip() for why in tiers.SLOW.values())
    assert all(specs and all(axes for axes in specs) for specs in tiers.COVER.values())
