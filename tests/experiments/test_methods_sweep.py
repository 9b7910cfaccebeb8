"""The methods sweep: its records, cost counts and validation (the numbers are in
docs/results/methods.md)."""

import numpy as np
import pytest

from experiments import methods as methods


def test_unknown_panel_or_method_raises():
    with pytest.raises(ValueError, match="panel"):
        methods.methods_sweep([0], panels=["fig9"])
    with pytest.raises(ValueError, match="method"):
        methods.methods_sweep([0], panels=["fig2a"], methods=["HMC"])


@pytest.mark.slow
def test_one_small_panel(tmp_path):
    """Fig. 2(b) at b = 1, tiny run: every record is there, SVRG counts 2b + n/m = 2 + 5/10
    evaluations, only tracking methods report tracker noise, and the files are written."""
    out = methods.methods_sweep(
        [0], tmp_path, panels=["fig2b (b=1)"], trials=4,
        methods=["DIGing-SGLD", "DE-SGLD", "DIGing-SGLD+SVRG", "DE-SGHMC"],
        overrides={"num_step_sizes": 2, "num_steps": 5}, plot=False,
    )
    recs = out["panels"]["fig2b (b=1)"]["methods"]
    assert recs["DIGing-SGLD+SVRG"]["gradient_evaluations"] == [2.5]
    assert recs["DE-SGLD"]["gradient_evaluations"] == [1.0]
    assert recs["DE-SGLD"]["tracker_noise"] == [None]
    assert recs["DIGing-SGLD"]["tracker_noise"][0] > 0
    assert all(np.isfinite(r["final"][0]) for r in recs.values())
    assert (tmp_path / "methods.md").read_text().count("fig2b (b=1)") == 4


def _record(final):
    return {"final": [final], "tracker_noise": [None], "gradient_evaluations": [1.0],
            "ms_per_iteration": [1.0], "step_size": [0.1]}


def test_update_replaces_only_its_rows():
    """_merge: the re-run rows replace the earlier ones in place, the others are kept, new
    panels are appended and the run is recorded."""
    base = {"seeds": [0], "trials": 4, "overrides": {}, "panels": {
        "fig2a": {"metric": "W2", "methods": {"DE-SGLD": _record(1.0), "D-ULA": _record(2.0)}},
        "fig2c": {"metric": "W2", "methods": {"DE-SGLD": _record(3.0)}}}}
    new = {"panels": {"fig2a": {"metric": "W2", "methods": {"D-ULA": _record(5.0)}},
                      "fig3a (random)": {"metric": "accuracy",
                                         "methods": {"D-ULA": _record(0.9)}}},
           "wall_time_s": 7.0}
    out = methods._merge(base, new)
    assert list(out["panels"]) == ["fig2a", "fig2c", "fig3a (random)"]
    assert list(out["panels"]["fig2a"]["methods"]) == ["DE-SGLD", "D-ULA"]
    assert out["panels"]["fig2a"]["methods"]["D-ULA"]["final"] == [5.0]
    assert out["panels"]["fig2a"]["methods"]["DE-SGLD"]["final"] == [1.0]
    assert out["panels"]["fig2c"] == base["panels"]["fig2c"]
    assert out["updates"] == [{"panels": ["fig2a", "fig3a (random)"], "methods": ["D-ULA"],
                               "wall_time_s": 7.0}]
    assert "updates" not in base  # the earlier result is not modified


def test_update_needs_the_same_settings(tmp_path):
    with pytest.raises(ValueError, match="methods.json"):
        methods.methods_sweep([0], tmp_path, panels=["fig2a"], update=True)
    (tmp_path / "methods.json").write_text(
        '{"seeds": [0, 1], "trials": 4, "overrides": {}, "panels": {}}')
    with pytest.raises(ValueError, match="seeds"):
        methods.methods_sweep([0], tmp_path, panels=["fig2a"], trials=4, update=True)
    with pytest.raises(ValueError, match="trials"):
        methods.methods_sweep([0, 1], tmp_path, panels=["fig2a"], trials=8, update=True)
