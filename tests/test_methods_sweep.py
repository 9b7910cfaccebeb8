"""The methods sweep: its records, cost counts and validation (the numbers are in docs/methods.md)."""

import numpy as np
import pytest

from dgsgld.experiments import methods


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
