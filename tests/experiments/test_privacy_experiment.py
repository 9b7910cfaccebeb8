"""``python -m experiments reproduce privacy``: its rows' accounting and its tables."""

import json
import math
import sys

import jax
import numpy as np
import pytest

from dgsgld import networks as nets
from experiments import privacy as experiment

pytest.importorskip("dp_accounting")


def _tiny(**changes) -> dict:
    cfg = experiment._config(True, 0) | {"num_chains": 16, "num_steps": 40, "checkpoints": 2}
    return cfg | changes


@pytest.fixture(scope="module")
def logistic():
    return experiment._problem("logistic", 0, 20), nets.random_regular(20, 4, 0)


def test_rows_carry_the_closed_form_epsilon(logistic):
    """Full batches: DE-SGLD's agents step at ``η = N η̄``; T steps compose to the Gaussian
    mechanism ``μ² = T (2C)² η / 2`` (ε from dp-accounting's analytic Gaussian: checked against
    its closed form in tests/evaluate/test_privacy.py). DIGing-SGLD: ε = ∞, with its position
    messages' ε (at ``T`` only) above DE-SGLD's (the tracker's sensitivity is larger)."""
    problem, mixing = logistic
    cfg, key = _tiny(), jax.random.key(0)
    step, clip = 2e-4, 0.3
    de = experiment._run("DE-SGLD", experiment.METHODS["DE-SGLD"], problem, clip, step,
                         mixing, cfg, key)
    diging = experiment._run("DIGing-SGLD", experiment.METHODS["DIGing-SGLD"], problem, clip,
                             step, mixing, cfg, key)
    from dp_accounting import get_epsilon_gaussian

    assert [r["iteration"] for r in de] == [20, 40]
    for r in de:
        mu = math.sqrt(r["iteration"] * 20 * step / 2) * 2 * clip
        assert r["epsilon"] == pytest.approx(get_epsilon_gaussian(1 / mu, 1e-5), rel=1e-6)
        assert 0.0 <= r["accuracy"] <= 1.0 and r["accuracy_se"] >= 0
    assert all(math.isinf(r["epsilon"]) and r["unbounded"] == "tracker" for r in diging)
    assert diging[0]["position_epsilon"] is None
    assert de[-1]["epsilon"] < diging[-1]["position_epsilon"] < math.inf


def test_private_tracking_rows_carry_their_closed_form(logistic):
    """DIGing-SGLD with private tracking at ``κ``: copies of noise ``σ = κ √(2/η)``, so full
    batches compose to ``μ² = T (2C)² (η/2 + 1/σ²) = T (2C)² η (1 + 1/κ²) / 2``; finite ε,
    utility measured, no position ε (the whole release is accounted)."""
    problem, mixing = logistic
    cfg, key = _tiny(), jax.random.key(0)
    step, clip, kappa = 2e-4, 0.3, 0.5
    rows = experiment._run("private", experiment.private_tracking(kappa), problem, clip, step,
                           mixing, cfg, key)
    from dp_accounting import get_epsilon_gaussian

    eta = 20 * step
    for r in rows:
        mu = 2 * clip * math.sqrt(r["iteration"] * eta * (1 + 1 / kappa ** 2) / 2)
        assert r["epsilon"] == pytest.approx(get_epsilon_gaussian(1 / mu, 1e-5), rel=1e-5)
        assert r["unbounded"] is None and r["position_epsilon"] is None
        assert 0.0 <= r["accuracy"] <= 1.0 and not r["diverged"]
    algo = experiment.private_tracking(kappa)(step, 20)
    assert float(algo.tracking_noise) == pytest.approx(kappa * math.sqrt(2 / eta), rel=1e-6)


@pytest.mark.slow  # fast twin: test_private_tracking_rows_carry_their_closed_form
def test_digits_rows_account_the_subsampled_bnn():
    """The digits BNN rows: mini-batches of 16 without replacement, the RDP accountant, a
    finite NLL; the centralized curator (batches of N b on the pooled data) spends less."""
    cfg = _tiny() | {"digits": {"agents": 10, "batch_size": 16, "num_chains": 1,
                                "num_steps": 20, "thin": 10, "clips": [1.0],
                                "agent_steps": [1e-3], "kappas": [1.0],
                                "methods": ["SGLD (centralized)",
                                            "DIGing-SGLD (private, κ = 1)"]}}
    rows = experiment.digits_rows(cfg, jax.random.key(0), None)
    by = {r["method"]: r for r in rows}
    private, central = by["DIGing-SGLD (private, κ = 1)"], by["SGLD (centralized)"]
    assert 0 < central["epsilon"] < private["epsilon"] < math.inf
    assert all(np.isfinite(r["nll"]) and 0 <= r["accuracy"] <= 1 for r in rows)
    text = experiment.table(rows)       # the BNN's own last iteration heads its table
    assert "| DIGing-SGLD (private, κ = 1) | 1.0e-04 | 1.0 |" in text and "T = 20\n" in text


def test_frontier_picks_the_best_row_within_each_budget():
    rows = [
        {"method": "A", "epsilon": 0.5, "accuracy": 0.70, "average_step": 1e-4, "clip": 0.1,
         "iteration": 10, "unbounded": None, "position_epsilon": None},
        {"method": "A", "epsilon": 2.0, "accuracy": 0.80, "average_step": 1e-4, "clip": 0.3,
         "iteration": 10, "unbounded": None, "position_epsilon": None},
        {"method": "A", "epsilon": math.inf, "accuracy": 0.90, "average_step": 1e-4,
         "clip": None, "iteration": 10, "unbounded": "gradient", "position_epsilon": None},
        {"method": "B", "epsilon": math.inf, "accuracy": 0.85, "average_step": 1e-4,
         "clip": 1.0, "iteration": 10, "unbounded": "tracker", "position_epsilon": 5.0},
    ]
    text = experiment._frontier(rows, "accuracy")
    a = next(ln for ln in text.splitlines() if ln.startswith("| A |")).split(" | ")
    b = next(ln for ln in text.splitlines() if ln.startswith("| B |")).split(" | ")
    assert a[1].startswith("0.700") and a[2].startswith("0.800") and a[3].startswith("0.800")
    assert a[4].startswith("0.900")
    assert b[1] == "—" and b[2] == "—" and b[3].startswith("0.850")


def test_clipping_bias_rows():
    """From posterior draws, a tight clip (C = 0.3) widens the law several times (the full
    run measures tr Σ̂ / tr Σ ≈ 13); a loose one (C = 100: no per-datum gradient near the
    posterior is that large) keeps it (16 chains x 20 kept draws: within 30 %)."""
    cfg = _tiny() | {"bias": {"clips": [0.3, 100.0], "average_step": 1e-4,
                              "num_steps": 800, "num_chains": 16}}
    rows = experiment.clipping_bias(cfg, jax.random.key(0))
    by = {r["clip"]: r for r in rows}
    assert by[0.3]["spread"] > 2 * by[100.0]["spread"] and 0.7 < by[100.0]["spread"] < 1.3
    assert all(r["mean_bias_se"] >= 0 and not r["diverged"] for r in rows)


@pytest.mark.slow  # fast twins above (a row's accounting, the frontier, the bias rows)
def test_small_reproduction_writes_its_tables(tmp_path, monkeypatch):
    from experiments.__main__ import main

    monkeypatch.setattr(sys, "argv", ["python -m experiments"])
    assert main(["reproduce", "privacy", "--small", "--quiet", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "privacy.json").read_text())
    assert data["config"]["complete"]
    rows = data["rows"]
    last = [r for r in rows if r["iteration"] == data["config"]["num_steps"]]
    by = {(r["problem"], r["method"], r["clip"]): r for r in last}
    for problem in ("synthetic logistic regression", "linear regression"):
        de, dula = by[(problem, "DE-SGLD", 1.0)], by[(problem, "D-ULA", 1.0)]
        central = by[(problem, "SGLD (centralized)", 1.0)]
        assert de["epsilon"] == pytest.approx(dula["epsilon"])     # both step at N η̄
        assert central["epsilon"] < de["epsilon"]
        assert by[(problem, "DE-SGLD", None)]["epsilon"] is None or math.isinf(
            by[(problem, "DE-SGLD", None)]["epsilon"])
    text = (tmp_path / "privacy.md").read_text()
    assert "Best accuracy within a privacy budget" in text and "Clipping bias" in text
    assert len(data["clipping_bias"]) == 6
    assert np.isfinite([r["w2"] for r in data["clipping_bias"]]).all()
