"""Per-agent ESS, split R-hat, consensus error and the ArviZ export.

Draws come from AR(1) chains ``x_t = φ x_{t−1} + √(1 − φ²) ε_t`` (stationary N(0, 1)), whose
integrated autocorrelation time is known: ``τ = (1 + φ)/(1 − φ)``, so ESS = ``m n / τ``.
"""

import sys
from typing import NamedTuple

import numpy as np
import pytest

import dgsgld
from dgsgld import evaluate

C, T = 4, 2000


def ar1(shape, phi, seed):
    """``(C, T, *shape)`` stationary AR(1) chains with coefficient ``phi`` (per entry)."""
    rng = np.random.default_rng(seed)
    phi = np.broadcast_to(np.asarray(phi, float), shape)
    eps = rng.standard_normal((C, T, *shape))
    x = np.empty_like(eps)
    x[:, 0] = eps[:, 0]
    for t in range(1, T):
        x[:, t] = phi * x[:, t - 1] + np.sqrt(1.0 - phi**2) * eps[:, t]
    return x


def test_ess_matches_the_ar1_autocorrelation_time():
    phi = np.array([0.0, 0.5, 0.9])
    x = ar1((3,), phi, seed=0)
    want = C * T * (1.0 - phi) / (1.0 + phi)
    # The estimator of τ has relative standard deviation about sqrt(2 (2M + 1) / (m n)) (Sokal),
    # M the truncation lag: M ≈ 40 for φ = 0.9 gives 5 %, so 20 % is four standard deviations.
    assert np.allclose(evaluate.ess(x), want, rtol=0.2)


def test_rhat_is_one_for_agreeing_chains_and_large_otherwise():
    x = ar1((2,), 0.5, seed=1)
    # Agreeing chains: R̂² − 1 ≈ (B/W − 1)/n with B/W ~ F(2m−1, ·): |R̂ − 1| ≲ 3/(2·1000).
    assert np.all(np.abs(evaluate.rhat(x) - 1.0) < 5e-3)
    assert np.all(np.abs(evaluate.split_rhat(x) - 1.0) < 5e-3)
    # Chains centred at 0, 0, 2, 2 (unit variance): the 8 half-chains have means 0 (×4) and
    # 2 (×4), whose variance (ddof 1) is 8/7, so R̂ ≈ sqrt(1 + 8/7). Noise: each half-chain
    # mean has sd sqrt(τ/n) ≈ 0.05, moving R̂ by about 1 %.
    shifted = x + np.array([0.0, 0.0, 2.0, 2.0])[:, None, None]
    assert np.all(evaluate.rhat(shifted) > 1.3)
    assert np.allclose(evaluate.split_rhat(shifted), np.sqrt(1 + 8 / 7), rtol=0.04)
    # A trend inside every chain: only the split statistic can see it.
    trend = x + np.linspace(-3.0, 3.0, T)[None, :, None]
    assert np.all(evaluate.split_rhat(trend) > 1.3)


def test_statistics_are_per_agent_and_coordinate():
    # (chain, draw, agent, coordinate); agent 1 is stuck at a different value in every chain.
    x = ar1((3, 2), 0.5, seed=2)
    x[:, :, 1, :] = np.arange(C)[:, None, None] + 0.01 * x[:, :, 1, :]
    r, e = evaluate.rhat(x), evaluate.ess(x)
    assert r.shape == e.shape == (3, 2)
    assert np.all(r[1] > 2.0) and np.all(np.abs(r[[0, 2]] - 1.0) < 5e-3)
    assert np.all(e[1] < 50) and np.all(e[[0, 2]] > 1000)
    summary = evaluate.agent_summary(x, burn_in=100)
    assert {k: v.shape for k, v in summary.items()} == {k: (3, 2) for k in
                                                          ("mean", "sd", "ess", "rhat")}
    assert np.array_equal(summary["rhat"], evaluate.rhat(x[:, 100:]))
    with pytest.raises(ValueError, match="`burn_in`"):
        evaluate.agent_summary(x, burn_in=T)


def test_against_arviz():
    az = pytest.importorskip("arviz")
    rng = np.random.default_rng(3)
    for trial in range(6):
        m, n = int(rng.integers(2, 5)), int(rng.integers(4, 400))
        x = rng.standard_normal((m, n)).cumsum(axis=1) * rng.uniform(0.1, 3.0)
        if trial % 2:
            x = np.round(x)  # ties in the ranks
        assert np.isclose(evaluate.ess(x), az.ess(x, method="bulk"), rtol=1e-10)
        assert np.isclose(evaluate.rhat(x), az.rhat(x, method="rank"), rtol=1e-10)
        assert np.isclose(evaluate.split_rhat(x), az.rhat(x, method="split"), rtol=1e-10)


def fake_trace(positions, centralized=False):
    div = dgsgld.Divergence(np.full(C, -1), np.full(C, -1))
    count = np.zeros(C, np.int32)
    state = dgsgld.SGLDState(None, None, count) if centralized else dgsgld.DIGingState(
        None, None, None, count)
    return dgsgld.Trace(positions, None, None, state, div)


def test_to_arviz_dims_and_per_agent_diagnostics():
    az = pytest.importorskip("arviz")
    x = ar1((3, 2), 0.5, seed=5)
    idata = evaluate.to_arviz(fake_trace(x), var_names="theta", burn_in=10)
    # ArviZ 1.x (arviz-base) builds an xarray.DataTree, ArviZ 0.x an InferenceData.
    if int(az.__version__.split(".")[0]) >= 1:
        import xarray
        assert isinstance(idata, xarray.DataTree)
    else:
        assert isinstance(idata, az.InferenceData)
    theta = idata.posterior["theta"]
    assert theta.dims == ("chain", "draw", "agent", "theta_dim_0")
    assert theta.shape == (C, T - 10, 3, 2)
    assert np.array_equal(idata.posterior["agent"].values, np.arange(3))
    assert np.array_equal(theta.values, x[:, 10:])
    assert np.allclose(az.ess(idata)["theta"].values, evaluate.ess(x[:, 10:]), rtol=1e-10)

    named = evaluate.to_arviz(fake_trace({"w": x, "b": x[..., 0]}))
    assert named.posterior["b"].dims == ("chain", "draw", "agent")
    central = evaluate.to_arviz(fake_trace(x[:, :, 0], centralized=True))
    assert central.posterior["x"].dims == ("chain", "draw", "x_dim_0")


def test_to_arviz_errors(monkeypatch):
    x = ar1((3, 2), 0.5, seed=6)[:, :20]
    with pytest.raises(ValueError, match="`var_names` must name each of the 2"):
        evaluate.to_arviz(fake_trace((x, x)), var_names="theta")
    with pytest.raises(ValueError, match=r"Output\(positions=True\)"):
        evaluate.to_arviz(fake_trace(None))
    monkeypatch.setitem(sys.modules, "arviz", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'dgsgld\[diagnostics\]'"):
        evaluate.to_arviz(fake_trace(x))


# -- parameter pytrees: every statistic keeps the structure of the positions -------------------


class Params(NamedTuple):
    w: np.ndarray
    b: np.ndarray


def test_statistics_keep_the_pytree_structure():
    # Each leaf's statistics are those of the leaf alone (the same estimator per leaf), so a
    # pytree's results equal the per-array results exactly.
    w, b, s = (ar1(shape, 0.5, seed)[:, :300] for shape, seed in [((3, 2), 7), ((3,), 8),
                                                                   ((1, 1), 9)])
    for tree, parts in [
        ({"w": w, "b": b}, lambda t: (t["w"], t["b"])),
        (Params(w, b), lambda t: (t.w, t.b)),
        ({"scale": s}, lambda t: (t["scale"],)),
    ]:
        for fn in (evaluate.ess, evaluate.rhat, evaluate.split_rhat):
            got = fn(tree)
            assert type(got) is type(tree)
            for g, leaf in zip(parts(got), parts(tree)):
                assert g.shape == leaf.shape[2:]
                assert np.array_equal(g, fn(leaf))
        summary = evaluate.agent_summary(tree, burn_in=10)
        for stat in ("mean", "sd", "ess", "rhat"):
            for g, leaf in zip(parts(summary[stat]), parts(tree)):
                assert np.array_equal(g, evaluate.agent_summary(leaf, burn_in=10)[stat])
    # A scalar parameter (no agent axis, e.g. centralized): (chain, draw) -> ().
    assert evaluate.ess({"scale": s[:, :, 0, 0]})["scale"].shape == ()


def test_statistics_of_an_equinox_mlp_skip_its_non_array_leaves():
    eqx = pytest.importorskip("equinox")
    import jax

    # (chain, draw, agent) = (2, 50, 3) copies of a small MLP, weights as AR(1) noise.
    mlp = eqx.nn.MLP(1, 1, 4, 1, key=jax.random.key(0))
    rng = np.random.default_rng(10)
    stacked = jax.tree.map(
        lambda x: rng.standard_normal((2, 50, 3, *x.shape)) if eqx.is_array(x) else x, mlp)
    got = evaluate.ess(stacked)
    assert isinstance(got, eqx.nn.MLP) and got.activation is None  # non-array leaf skipped
    assert got.layers[0].weight.shape == (3, 4, 1)
    assert np.array_equal(got.layers[1].bias, evaluate.ess(stacked.layers[1].bias))
    avg = evaluate.network_average(stacked)
    assert np.allclose(avg.layers[0].weight, stacked.layers[0].weight.mean(axis=2))
    idata_names = evaluate.to_arviz(stacked).posterior.data_vars
    assert set(idata_names) == {"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                "layers.1.bias"}


def test_network_average_averages_agents_leaf_by_leaf():
    rng = np.random.default_rng(11)
    tree = {"w": rng.standard_normal((2, 6, 4, 3)), "b": rng.standard_normal((2, 6, 4))}
    avg = evaluate.network_average(tree)
    assert np.allclose(avg["w"], tree["w"].mean(axis=2)) and avg["b"].shape == (2, 6)
    # Inside a trace_fn the state's positions are (N, ...): axis=0.
    assert np.allclose(evaluate.network_average(tree["w"][0, 0], axis=0),
                       tree["w"][0, 0].mean(0))
    with pytest.raises(ValueError, match=r"`positions\['b'\]` has no agent axis 3"):
        evaluate.network_average(tree, axis=3)


def test_diverged_chains_are_refused_or_dropped_with_a_count():
    w, b = ar1((3, 2), 0.5, seed=12)[:, :300], ar1((3,), 0.5, seed=13)[:, :300]
    w[1, 200:] = np.nan  # chain 1 diverged in one leaf only
    tree = {"w": w, "b": b}
    assert np.array_equal(evaluate.diverged_chains(tree), [False, True, False, False])
    for fn in (evaluate.ess, evaluate.rhat, evaluate.agent_summary):
        with pytest.raises(ValueError, match=r"1 of 4 chains diverged.*diverged='drop'"):
            fn(tree)
    with pytest.warns(RuntimeWarning, match="Dropped 1 of 4 diverged chains"):
        got = evaluate.ess(tree, diverged="drop")
    keep = [0, 2, 3]
    assert np.array_equal(got["b"], evaluate.ess(b[keep]))  # the other leaf loses it too
    assert np.array_equal(got["w"], evaluate.ess(w[keep]))
    with pytest.warns(RuntimeWarning, match="Dropped 1 of 4"):
        idata = evaluate.to_arviz(fake_trace(tree), diverged="drop")
    assert idata.posterior["w"].shape[0] == 3
    # A chain flagged in trace.divergence counts even if its kept draws are finite.
    trace = fake_trace({"w": w[[0, 2, 3]], "b": b[[0, 2, 3]]})
    trace = trace._replace(divergence=dgsgld.Divergence(np.array([-1, 5, -1]), np.zeros(3)))
    with pytest.raises(ValueError, match="1 of 3 chains diverged"):
        evaluate.agent_summary(trace)
    with pytest.raises(ValueError, match="`diverged` must be 'raise' or 'drop'"):
        evaluate.ess(tree, diverged="ignore")
