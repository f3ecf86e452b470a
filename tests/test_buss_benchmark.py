"""The protocol object of Buss's prism table and the table's headline claim."""

import numpy as np
import pytest

from jaxrot import analysis
from jaxrot.studies.buss_protocol import BUSS_TABLE, PrismProtocol, run_table, spearman


def test_axis_map_names_buss_splittings_in_our_axes():
    p = PrismProtocol()
    assert p.method("split2_<123>") == "split2_231" and p.method("split4_<231>_ep") == "split4_312_ep"
    assert PrismProtocol(axis_map="xyz").method("split2_<231>") == "split2_231"
    assert p.method("buss3_ep") == "buss3_ep"


@pytest.mark.parametrize("kw", [dict(tilt_deg=-1), dict(towards="z"), dict(axis_map="xyy"), dict(eps=0),
                                dict(metric="nope"), dict(revolutions=0)])
def test_bad_protocols_are_refused(kw):
    with pytest.raises(ValueError):
        PrismProtocol(**kw)


def test_problem_has_the_tilt_and_the_span():
    proto = PrismProtocol(revolutions=3.0)
    p = proto.problem()
    w = np.asarray(p.state0.Pi) / np.asarray(p.body.J)
    assert np.degrees(np.arccos(w[2] / np.linalg.norm(w))) == pytest.approx(0.7)
    assert w[1] == 0 and w[0] > 0
    np.testing.assert_allclose(p.body.J, [(16 + 324) / 12, (1 + 324) / 12, (1 + 16) / 12])
    assert analysis.total_rotation_angle(p, p.t_end, n_frames=4000) == pytest.approx(3.0 * 2 * np.pi, rel=1e-6)


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [1, 1, 2]) == pytest.approx(1.0)


def test_third_order_ep_is_unexpectedly_accurate():
    """Buss: N(3rd) / N(3rd EP) = 3661 / 652 = 5.6; with the nearest-point EP >= 4 under the protocol."""
    rows = [r for r in BUSS_TABLE if r[1] in ("buss3", "buss3_ep")]
    res = run_table(PrismProtocol(), rows=rows)
    N = {r["method"]: r["N"] for r in res["rows"]}
    assert N["buss3"] / N["buss3_ep"] >= 4, N
