"""Clipped per-datum gradients and the privacy accountant (dgsgld.evaluate.privacy).

Clipping: the clipped gradient against hand computations (global norm over pytree leaves,
padded data, every estimator and the device rows), and the clipped Langevin's stationary mean
against the exact stationary law of the same chain (1-D transfer operator). The accountant:
one Gaussian mechanism against its closed form, composition against dp-accounting's own
composition, and the measured distinguishability of neighbouring data sets through the
library's own runs, which must never exceed the reported ε (and, where the accounting is
exact, must reach it).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats

import dgsgld
from dgsgld import communication as comm
from dgsgld import gradients as G
from dgsgld.evaluate import privacy as P
from dgsgld.model.potential import clip_rows
from dgsgld.parallel.devices import AgentRows
from dgsgld.samplers.precondition import (
    DensePreconditioner,
    DiagonalPreconditioner,
    LowRankPreconditioner,
)

dp = pytest.importorskip("dp_accounting")


def test_a_preconditioner_scales_the_drift_sensitivity():
    """With ``M = c I`` a step of size η is, message for message, the step of size ``η c``
    without ``M`` (drift ``η c g``, noise ``√(2ηc) w``), so their ε are equal; a diagonal or
    dense ``M`` is bounded through ``√λ_max(M)``: ``M = diag(c, c/10)`` gives the ε of ``M = c I``
    (the bound is attained along the first axis), and a larger ``λ_max`` never lowers ε."""
    pot = dgsgld.Potential(_linear, None, _data(), clip=1.0)
    c, eta = 3.0, 0.002
    plain = P.privacy_epsilon(dgsgld.DESGLD(eta * c), pot, 40, 1e-5).epsilon
    scaled = P.privacy_epsilon(
        dgsgld.DESGLD(eta, preconditioner=DiagonalPreconditioner(jnp.full(2, c))), pot, 40,
        1e-5)
    np.testing.assert_allclose(scaled.epsilon, plain, rtol=1e-6)  # step sizes are float32
    assert any("√λ_max(M)" in note for note in scaled.notes)
    mixed = P.privacy_epsilon(dgsgld.DESGLD(eta, preconditioner=DensePreconditioner(
        jnp.diag(jnp.array([c, c / 10])))), pot, 40, 1e-5).epsilon
    np.testing.assert_allclose(mixed, plain, rtol=1e-6)
    wider = P.privacy_epsilon(dgsgld.DESGLD(eta, preconditioner=LowRankPreconditioner(
        jnp.full(2, c), jnp.array([[1.0], [0.0]]))), pot, 40, 1e-5).epsilon
    assert (wider > plain).all()


def _linear(t, d):
    return -0.5 * (d[0] @ t - d[1]) ** 2


def _data(seed=0, agents=3, local=8, dim=2):
    z = 3.0 * jax.random.normal(jax.random.key(seed), (agents, local, dim))
    y = 5.0 * jax.random.normal(jax.random.key(seed + 1), (agents, local))
    return z, y


#: Compiled once per potential structure: eager op-by-op dispatch is several times slower.
_full_grad = jax.jit(lambda pot, x: pot.full_grad(x))
_grad = jax.jit(lambda pot, x, key: pot.grad(x, key))


def _by_hand(z, y, x, clip, prior=0.0):
    """Σ_j clip_C((z_jᵀx − y_j) z_j) + prior x / N per agent, in float64."""
    z, y, x = (np.asarray(a, np.float64) for a in (z, y, x))
    per = (np.einsum("nkp,np->nk", z, x) - y)[..., None] * z
    norm = np.linalg.norm(per, axis=-1, keepdims=True)
    return (per * np.minimum(1.0, clip / norm)).sum(1) + prior * x / z.shape[0]


# -- clipping --------------------------------------------------------------------------------


def test_clipped_full_and_minibatch_gradients_match_hand_computation():
    z, y = _data()
    x = jnp.ones((3, 2))
    pot = dgsgld.Potential(_linear, lambda t: -0.5 * t @ t, (z, y), clip=1.5)
    np.testing.assert_allclose(_full_grad(pot, x), _by_hand(z, y, x, 1.5, prior=1.0), rtol=2e-5,
                               atol=2e-5)
    # A mini-batch of b: (n/b) Σ_{j∈S} clip(g_j) on the batch the key draws.
    mb = dgsgld.Potential(_linear, lambda t: -0.5 * t @ t, (z, y), 3, clip=1.5)
    key = jax.random.key(3)
    idx = np.asarray(mb.batch_indices(key))
    zb = np.take_along_axis(np.asarray(z), idx[..., None], 1)
    yb = np.take_along_axis(np.asarray(y), idx, 1)
    expect = 8 / 3 * _by_hand(zb, yb, x, 1.5) + np.asarray(x) / 3
    np.testing.assert_allclose(_grad(mb, x, key), expect, rtol=2e-5, atol=2e-5)
    # The values stay the unclipped potential's; without clip nothing changes.
    plain = dgsgld.Potential(_linear, lambda t: -0.5 * t @ t, (z, y))
    np.testing.assert_array_equal(pot.agent_values(x), plain.agent_values(x))
    assert np.abs(np.asarray(_full_grad(pot, x) - _full_grad(plain, x))).max() > 1.0


def test_clipping_is_the_huber_derivative_for_linear_regression():
    """``clip_C((zᵀx − y) z) = ψ_{C/‖z‖}(zᵀx − y) z``: per-datum clipping of a linear-Gaussian
    likelihood is Huber regression with threshold ``C / ‖z_j‖`` per datum
    (docs/guide/privacy.md)."""
    z, y = _data(5, agents=1, local=50)
    x = jnp.array([[0.3, -0.7]])
    c = 2.0
    pot = dgsgld.Potential(_linear, None, (z, y), clip=c)
    r = np.einsum("nkp,np->nk", z, x) - np.asarray(y)
    thresholds = c / np.linalg.norm(np.asarray(z), axis=-1)
    huber = (np.clip(r, -thresholds, thresholds)[..., None] * np.asarray(z)).sum(1)
    np.testing.assert_allclose(_full_grad(pot, x), huber, rtol=1e-5, atol=1e-4)


def test_clip_takes_the_global_norm_over_pytree_leaves_and_skips_padding():
    z, y = _data(agents=2, local=5)

    def ll(t, d):
        return -0.5 * (d[0] @ t["w"] + t["b"] - d[1]) ** 2

    params = {"w": jnp.array([[0.5, -1.0], [2.0, 0.1]]), "b": jnp.array([0.3, -0.2])}
    mask = jnp.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    pot = dgsgld.Potential(ll, None, (z, y), clip=0.7, mask=mask)
    got = _full_grad(pot, params)
    zn, yn = np.asarray(z, np.float64), np.asarray(y, np.float64)
    for i in range(2):
        r = zn[i] @ np.asarray(params["w"][i]) + float(params["b"][i]) - yn[i]
        per = np.concatenate([r[:, None] * zn[i], r[:, None]], axis=1)     # (w, b) per datum
        norm = np.linalg.norm(per, axis=1, keepdims=True)                   # one norm per datum
        total = (per * np.minimum(1, 0.7 / norm))[: int(mask[i].sum())].sum(0)
        np.testing.assert_allclose(got["w"][i], total[:2], rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(got["b"][i], total[2], rtol=2e-5, atol=2e-6)
    rows = clip_rows({"a": jnp.array([[3.0, 0.0], [0.0, 0.0]]), "b": jnp.array([4.0, 0.0])}, 1.0)
    np.testing.assert_allclose(rows["a"], [[0.6, 0.0], [0.0, 0.0]])   # ‖(3, 0, 4)‖ = 5
    np.testing.assert_allclose(rows["b"], [0.8, 0.0])                  # a zero row stays zero


def test_every_estimator_and_the_device_rows_take_the_clipped_gradient():
    z, y = _data(agents=2, local=6)
    x = jnp.array([[0.4, 1.0], [-2.0, 0.5]])
    pot = dgsgld.Potential(_linear, None, (z, y), 2, clip=1.0)
    full = _by_hand(z, y, x, 1.0)
    # SVRG's first estimate is its anchor's full gradient; SAGA's is its table's sum.
    for est in (G.svrg(5), G.saga()):
        grad, state = jax.jit(lambda p, x: est.start(p, x, jax.random.key(0)))(pot, x)
        np.testing.assert_allclose(grad, full, rtol=2e-5, atol=2e-5)
    table = state.table
    assert float(jnp.linalg.norm(table, axis=-1).max()) <= 1.0 + 1e-6
    # A device's rows differentiate the same data term: clipped as well.
    np.testing.assert_allclose(_full_grad(AgentRows(pot, jnp.int32(0)), x), full, rtol=2e-5,
                               atol=2e-5)
    # Forward-over-reverse (a Hessian-vector product of the clipped field) works.
    hvp = jax.jit(lambda p, x: jax.jvp(p.full_grad, (x,), (jnp.ones_like(x),))[1])
    assert hvp(pot, x).shape == (2, 2)


def test_clip_is_checked():
    z, y = _data()
    for bad in (0.0, -1.0, float("inf"), float("nan"), True, [1.0, 2.0]):
        with pytest.raises(ValueError, match="`clip`"):
            dgsgld.Potential(_linear, None, (z, y), clip=bad)
    with pytest.raises(ValueError, match="gradient_fn"):
        dgsgld.Potential(None, None, (z, y), gradient_fn=lambda p, d, k: p, clip=1.0)


def _stationary_mean(drift, eta, lo, hi, size=1500):
    """Mean of the stationary law of ULA ``x⁺ = x − η b(x) + √(2η) w`` on ``[lo, hi]``: the
    leading left eigenvector of its transition matrix on a grid (rows normalized; the law's
    mass beyond the grid is negligible here, ~10 sd away), by 600 powers of the matrix (the
    chain contracts by 0.84 a step: 1e-40 of the start is left)."""
    x = np.linspace(lo, hi, size)
    mean = x - eta * drift(x)
    kernel = stats.norm.pdf(x[None, :], mean[:, None], np.sqrt(2 * eta))
    kernel /= kernel.sum(axis=1, keepdims=True)
    p = np.full(size, 1.0 / size)
    for _ in range(600):
        p = p @ kernel
    return float(p @ x)


def test_clipped_langevin_samples_its_exact_stationary_law_and_clipping_biases_it():
    """1-D Gaussian mean, 16 data near 1 and 4 outliers at 8, prior N(0, 10), clip C = 1:
    the clipped drift is ``Σ_j ψ_C(x − d_j) + x/10`` (Huber's loss). SGLD through
    ``dgsgld.sample`` (2 agents, full batches) must have the stationary mean of that very
    chain at the same η (transfer operator on a grid), while the posterior mean (unclipped) is
    far from it: the bias of clipping.

    Monte Carlo: 4000 independent chains after 300 steps (the chain contracts by
    ``1 − η · 16 ≈ 0.84`` a step near the mode: forgotten after 300); stationary sd ≈ 0.25, so
    the standard error of the mean is ≈ 0.004; 0.02 is five of them."""
    rng = np.random.default_rng(0)
    d = np.concatenate([rng.normal(1.0, 1.0, 16), np.full(4, 8.0)])
    c, eta, lam = 1.0, 0.01, 0.1

    def ll(t, datum):
        return -0.5 * (t[0] - datum) ** 2

    data = jnp.asarray(d.reshape(2, 10, 1), jnp.float32)
    pot = dgsgld.Potential(ll, lambda t: -0.5 * lam * jnp.sum(t ** 2), data[..., 0], clip=c)
    trace = dgsgld.sample(dgsgld.SGLD(eta), pot, None, jnp.zeros((4000, 1)),
                          jax.random.key(1), 300, output=dgsgld.Output(thin=300))
    sampled = float(trace.positions[:, -1, 0].mean())
    exact = _stationary_mean(lambda x: np.clip(x[:, None] - d, -c, c).sum(1) + lam * x,
                             eta, -4, 8)
    posterior = d.sum() / (len(d) + lam)
    assert abs(sampled - exact) < 0.02, (sampled, exact)
    assert abs(exact - posterior) > 0.4                      # clipping moved the mean


# -- the accountant: closed forms ------------------------------------------------------------


def _gaussian_delta(mu, eps):
    """δ(ε) of the Gaussian mechanism with ``μ = sensitivity / σ`` (Balle and Wang 2018)."""
    return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


def _gaussian_epsilon(mu, delta):
    return optimize.brentq(lambda e: _gaussian_delta(mu, e) - delta, 0.0, 500.0)


def _one_agent(n=1, batch=None, clip=1.0, value=0.0):
    data = jnp.full((1, n), value, jnp.float32)
    return dgsgld.Potential(lambda t, d: -0.5 * (t[0] - d) ** 2, None, data, batch, clip=clip)


@pytest.mark.parametrize("eta, clip, steps", [(0.02, 2.5, 1), (0.01, 1.0, 50), (0.001, 0.3, 7)])
def test_full_batch_gaussian_matches_its_closed_form(eta, clip, steps):
    """SGLD with full batches: each step is the Gaussian mechanism with shift ``2Cη`` and
    noise ``√(2η)``, and ``T`` of them compose to ``μ = √T · 2Cη / √(2η)``; ε from the
    analytic Gaussian mechanism, solved here with scipy. The PLD accountant agrees; the RDP
    accountant is an upper bound within the classic conversion ``min_α α μ²/2 +
    log(1/δ)/(α − 1)``."""
    pot = _one_agent(4, None, clip)
    delta = 1e-5
    mu = math.sqrt(steps) * 2 * clip * eta / math.sqrt(2 * eta)
    exact = _gaussian_epsilon(mu, delta)
    report = P.privacy_epsilon(dgsgld.SGLD(eta), pot, steps, delta)
    assert report.accountant == "gaussian" and report.steps.tolist() == [steps]
    np.testing.assert_allclose(report.epsilon, exact, rtol=1e-6)
    np.testing.assert_allclose(report.noise_multiplier, math.sqrt(2 * eta) / (2 * clip * eta))
    pld = P.privacy_epsilon(dgsgld.SGLD(eta), pot, steps, delta, accountant="pld").epsilon
    np.testing.assert_allclose(pld, exact, rtol=1e-3)
    rdp = P.privacy_epsilon(dgsgld.SGLD(eta), pot, steps, delta, accountant="rdp").epsilon[0]
    classic = min(a * mu ** 2 / 2 + math.log(1 / delta) / (a - 1) for a in P.ORDERS)
    assert exact <= rdp <= classic + 1e-9


def test_subsampled_composition_is_dp_accountings_own():
    """Mini-batches of 5 of 50 without replacement, T = 200 constant steps: the reported RDP
    ε is dp-accounting's for the same event composed 200 times, noise multiplier
    ``√(2η) / (η · 2C n/b)``; the curve is monotone and starts at 0."""
    pot = _one_agent(50, 5, 0.5)
    eta, steps, delta = 0.01, 200, 1e-5
    z = math.sqrt(2 * eta) / (eta * 2 * 0.5 * 50 / 5)
    report = P.privacy_epsilon(dgsgld.DESGLD(eta), pot, steps, delta,
                               checkpoints=[0, 1, 50, 200])
    acc = dp.rdp.RdpAccountant(list(P.ORDERS), dp.NeighboringRelation.REPLACE_ONE)
    z_grid = float(P._rounded_down(np.array([z]))[0])
    assert z * (1 - P.GRID) <= z_grid <= z
    acc.compose(dp.SampledWithoutReplacementDpEvent(50, 5, dp.GaussianDpEvent(z_grid)), steps)
    np.testing.assert_allclose(report.epsilon, acc.get_epsilon(delta), rtol=1e-9)
    assert report.accountant == "rdp" and report.sampling.tolist() == [0.1]
    curve = report.curve[:, 0]
    assert curve[0] == 0 and np.all(np.diff(curve) > 0) and curve[-1] == report.epsilon[0]
    # Without the grid's rounding (z itself) ε is lower, by little.
    exact = dp.rdp.RdpAccountant(list(P.ORDERS), dp.NeighboringRelation.REPLACE_ONE)
    exact.compose(dp.SampledWithoutReplacementDpEvent(50, 5, dp.GaussianDpEvent(z)), steps)
    assert exact.get_epsilon(delta) <= report.epsilon[0] <= 1.05 * exact.get_epsilon(delta)


def test_schedules_give_per_step_multipliers():
    """A decaying step ``η_k = 0.05/(k+1)^0.55`` (D-ULA's, Nα_k with N = 1): full batches
    compose exactly, ``μ² = Σ_k (2C)² η_k / 2``."""
    pot = _one_agent(4, None, 1.0)
    schedule = dgsgld.samplers.PolynomialDecay(0.05, 0.55)
    steps, delta = 300, 1e-6
    etas = 0.05 / (np.arange(steps) + 1.0) ** 0.55
    mu = math.sqrt(np.sum(4 * etas / 2))
    report = P.privacy_epsilon(dgsgld.DULA(schedule), pot, steps, delta)
    np.testing.assert_allclose(report.epsilon, _gaussian_epsilon(mu, delta), rtol=1e-5)
    np.testing.assert_allclose(report.noise_multiplier, math.sqrt(2 / 0.05) / 2, rtol=1e-6)


def test_mechanisms_of_every_sampler():
    """Per-step noise multiplier ``s / (a Δ)`` with ``Δ = 2C`` (full batches): SGLD-type
    ``√(2/η)/Δ``; D-ULA at ``Nα``; SGHMC ``√(2γ/η)/Δ``; push-sum (uniform rule) ``√(2/α)/Δ``."""
    data = (jnp.ones((4, 10, 2)), jnp.zeros((4, 10)))
    pot = dgsgld.Potential(_linear, None, data, clip=0.5)
    cases = [
        (dgsgld.DESGLD(0.01), math.sqrt(2 / 0.01)),
        (dgsgld.EXTRASGLD(0.01), math.sqrt(2 / 0.01)),
        (dgsgld.SGLD(0.01), math.sqrt(2 / 0.01)),
        (dgsgld.DULA(0.01), math.sqrt(2 / 0.04)),
        (dgsgld.DESGHMC(0.01, friction=3.0), math.sqrt(2 * 3.0 / 0.01)),
        (dgsgld.PushSumSGLD(0.01, noise_rule="uniform"), math.sqrt(2 / 0.01)),
    ]
    for algorithm, z in cases:
        report = P.privacy_epsilon(algorithm, pot, 10, 1e-5)
        np.testing.assert_allclose(report.noise_multiplier, z / 1.0, rtol=1e-6,
                                   err_msg=type(algorithm).__name__)
        assert np.isfinite(report.epsilon).all() and report.unbounded is None
    # Push-sum's mass rule: noise √(2α v_i) with the weights of the schedule.
    ring = np.roll(np.eye(4), 1, axis=0) * 0.5 + np.eye(4) * 0.5          # column stochastic
    ring[:, 0] = [0.2, 0.8, 0, 0]                                          # agent 0 gives more
    with pytest.raises(ValueError, match="weights"):
        P.privacy_epsilon(dgsgld.PushSumSGLD(0.01), pot, 10, 1e-5)
    report = P.privacy_epsilon(dgsgld.PushSumSGLD(0.01), pot, 10, 1e-5, network=ring)
    with pytest.raises(ValueError, match="weights"):          # the run's weights differ
        P.privacy_epsilon(dgsgld.PushSumSGLD(0.01, channel=comm.Channel(activity=0.5)), pot,
                          10, 1e-5, network=ring)
    v = P.push_sum_weights(ring, 10)
    np.testing.assert_allclose(v[1], ring @ np.ones(4), rtol=1e-6)
    np.testing.assert_allclose(report.noise_multiplier,
                               np.sqrt(2 * 0.01 * v[:10].min(0)) / 0.01, rtol=1e-5)


def test_tracking_samplers_report_infinity_and_their_position_messages():
    """DIGing-SGLD's tracker is sent without noise: ε = ∞. Its positions alone, over the
    complete graph ``W = J/N`` (``[Wᵐ]_ii = 1/N`` for ``m ≥ 1``, so ``A_i = 1 − 1/N``): the
    Gaussian mechanism with sensitivity ``2C (2 − 1/N) η``."""
    data = (jnp.ones((4, 10, 2)), jnp.zeros((4, 10)))
    pot = dgsgld.Potential(_linear, None, data, clip=1.0)
    w = np.full((4, 4), 0.25)
    np.testing.assert_allclose(P.tracker_gain(w, 100), 0.75)
    eta, steps, delta = 0.01, 100, 1e-5
    report = P.privacy_epsilon(dgsgld.DIGingSGLD(eta), pot, steps, delta, network=w)
    assert np.isinf(report.epsilon).all() and report.unbounded == "tracker"
    mu = math.sqrt(steps) * 2 * (2 - 0.25) * eta / math.sqrt(2 * eta)
    np.testing.assert_allclose(report.position_epsilon, _gaussian_epsilon(mu, delta), rtol=1e-5)
    # Without a static network the positions' ε is not derived (and says so).
    report = P.privacy_epsilon(dgsgld.DIGingSGHMC(eta), pot, steps, delta)
    assert report.position_epsilon is None and any("static" in n for n in report.notes)
    assert np.isinf(P.privacy_epsilon(dgsgld.PushDIGingSGLD(eta), pot, steps, delta).epsilon).all()


def test_private_tracking_hook_composes_tracker_and_position_releases():
    """A tracking sampler whose rule gives Gaussian public copies of the tracker (std ``σ``):
    each step releases ``ŷ = ∇̃f + public + ξ`` and ``x⁺ = public − η ∇̃f + √(2η) w``, one
    Gaussian mechanism of ``μ² = Δ² (η/2 + 1/σ²)`` (docs/guide/privacy.md), composed over T
    steps."""

    class PrivateDIGing(dgsgld.DIGingSGLD):
        pass

    sigma = 30.0
    P.register_mechanism(PrivateDIGing, lambda a, t, c: P._diging(a, t, c)._replace(
        tracker_noise=np.full(t, sigma)))
    try:
        data = (jnp.ones((4, 10, 2)), jnp.zeros((4, 10)))
        pot = dgsgld.Potential(_linear, None, data, clip=1.0)
        eta, steps, delta = 0.01, 100, 1e-5
        report = P.privacy_epsilon(PrivateDIGing(eta), pot, steps, delta)
        mu = math.sqrt(steps * 4.0 * (eta / 2 + 1 / sigma ** 2))
        assert report.unbounded is None
        np.testing.assert_allclose(report.epsilon, _gaussian_epsilon(mu, delta), rtol=1e-5)
    finally:
        del P.MECHANISMS[PrivateDIGing]


def test_estimators_and_sampling_schemes_set_the_sensitivity():
    z, y = _data(agents=2, local=20)
    mb = dgsgld.Potential(_linear, None, (z, y), 4, clip=1.0)
    s = P.gradient_sensitivity(mb)
    assert s.delta.tolist() == [10.0, 10.0] and s.sampling.tolist() == [0.2, 0.2]
    for est in (G.svrg(5), G.saga()):
        s = P.gradient_sensitivity(mb, est)
        assert s.delta.tolist() == [22.0, 22.0] and s.sampling.tolist() == [1.0, 1.0]
    s = P.gradient_sensitivity(dgsgld.Potential(_linear, None, (z, y), 4, clip=1.0,
                                                replace=True))
    assert s.delta.tolist() == [40.0, 40.0] and s.sampling.tolist() == [1.0, 1.0]
    unclipped = P.privacy_epsilon(dgsgld.DESGLD(0.01), dgsgld.Potential(_linear, None, (z, y)),
                                  10, 1e-5)
    assert np.isinf(unclipped.epsilon).all() and unclipped.unbounded == "gradient"


def test_channels_skip_only_inactive_steps():
    """An activity pattern frees the steps an agent sits out; rounds every τ and an event
    trigger free nothing (their local steps shape the next message; whether to send depends
    on the data); a random activity counts every step unless the realized mask is given."""
    data = (jnp.ones((2, 10, 1)), jnp.zeros((2, 10)))
    pot = dgsgld.Potential(_linear, None, data, clip=1.0)
    base = P.privacy_epsilon(dgsgld.DESGLD(0.01), pot, 40, 1e-5).epsilon
    pattern = comm.Channel(comm.quantize(4), activity=[[1, 0], [1, 1]])
    report = P.privacy_epsilon(dgsgld.DESGLD(0.01, channel=pattern), pot, 40, 1e-5)
    assert report.steps.tolist() == [40, 20]
    np.testing.assert_allclose(report.epsilon[0], base[0])
    np.testing.assert_allclose(
        report.epsilon[1], P.privacy_epsilon(dgsgld.DESGLD(0.01), pot, 20, 1e-5).epsilon[1])
    for channel in (comm.Channel(every=5), comm.Channel(threshold=0.1),
                    comm.Channel(activity=0.5)):
        report = P.privacy_epsilon(dgsgld.DESGLD(0.01), pot, 40, 1e-5, channel=channel)
        np.testing.assert_allclose(report.epsilon, base)
    mask = np.zeros((40, 2), bool)
    mask[::4] = True
    report = P.privacy_epsilon(dgsgld.DESGLD(0.01, channel=comm.Channel(activity=0.5)), pot,
                               40, 1e-5, active=mask)
    assert report.steps.tolist() == [10, 10]


def test_active_steps_are_read_from_a_run():
    """With ``activity = 0.5`` each agent takes about half the steps; the mask read from the
    positions has the realized ones (400 agent-steps: 0.5 ± 4 · 0.025)."""
    data = (jnp.ones((4, 5, 1)), jnp.zeros((4, 5)))
    pot = dgsgld.Potential(_linear, None, data, clip=1.0)
    channel = comm.Channel(activity=0.5)
    trace = dgsgld.sample(dgsgld.DESGLD(0.01, channel=channel), pot, np.full((4, 4), 0.25),
                          jnp.zeros((2, 4, 1)), jax.random.key(0), 50)
    mask = P.active_from_positions(trace.positions)
    assert mask.shape == (2, 50, 4) and abs(mask.mean() - 0.5) < 0.1
    report = P.privacy_epsilon(dgsgld.DESGLD(0.01, channel=channel), pot, 50, 1e-5,
                               active=mask[0])
    assert report.steps.tolist() == mask[0].sum(0).tolist()


def test_bad_inputs_are_named():
    pot = _one_agent(4, 2)
    sgld = dgsgld.SGLD(0.01)
    with pytest.raises(ValueError, match="`delta`"):
        P.privacy_epsilon(sgld, pot, 10, 0.0)
    with pytest.raises(ValueError, match="`num_steps`"):
        P.privacy_epsilon(sgld, pot, 0, 1e-5)
    with pytest.raises(ValueError, match="pld"):
        P.privacy_epsilon(sgld, pot, 10, 1e-5, accountant="pld")
    with pytest.raises(ValueError, match="`active`"):
        P.privacy_epsilon(sgld, pot, 10, 1e-5, active=np.ones((9, 1), bool))
    with pytest.raises(ValueError, match="`checkpoints`"):
        P.privacy_epsilon(sgld, pot, 10, 1e-5, checkpoints=[11])

    class Mine(dgsgld.SamplingAlgorithm):
        pass

    with pytest.raises(ValueError, match="register_mechanism"):
        P.privacy_epsilon(Mine(0.1), pot, 10, 1e-5)
    P.register_mechanism(Mine, lambda a, t, c: P.Mechanism(np.full(t, 0.1), np.full(t, 1.0)))
    try:
        assert P.privacy_epsilon(Mine(0.1), pot, 10, 1e-5).epsilon[0] > 0
    finally:
        del P.MECHANISMS[Mine]


# -- the accountant against measured distinguishability ------------------------------------


def _clopper_pearson(k, n, level):
    """One-sided bounds ``(lower, upper)`` on a binomial probability at ``level`` each."""
    lower = stats.beta.ppf(level, k, n - k + 1) if k > 0 else 0.0
    upper = stats.beta.ppf(1 - level, k + 1, n - k) if k < n else 1.0
    return lower, upper


def test_measured_privacy_loss_reaches_but_never_exceeds_the_reported_epsilon():
    """Neighbouring data sets of one agent: a single datum at ``+M`` or at ``−M`` (M = 100 ≫ C:
    its clipped gradient is ``∓C`` throughout). SGLD, full batch, ``T = 4`` steps of
    ``η = 0.02`` from ``x = 0``: the released positions' sufficient statistic is
    ``x_T − x_0 ~ N(±TηC, 2ηT)``, and the Neyman–Pearson test at the reported ``ε`` rejects when
    the standardized statistic exceeds ``t = ε/μ + μ/2`` (``μ = 2TηC/√(2ηT) = 1``). Over
    ``n = 200 000`` runs of each data set (the library's own chains), ``ε̂ = log((p̂ − δ)/p̂')``
    with ``p = P_D(reject) ≈ 0.15``, ``p' = P_D'(reject) ≈ 0.02``.

    Monte Carlo slack: one-sided Clopper–Pearson bounds at level 1e-4 each (z ≈ 3.7) on ``p``
    and ``p'``: the lower bound ``log((p_lo − δ)/p'_hi)`` exceeds the true ε with probability
    below 2e-4, and so must stay below the reported ε (the accountant is an upper bound); as
    the accounting is exact for full batches, the upper bound ``log((p_hi − δ)/p'_lo)`` must
    reach it too (the relative error of ``p'`` at n = 200 000 is ≈ 1.6 %, so the bounds are
    about ±0.1 apart)."""
    eta, clip, steps, delta, n = 0.02, 2.5, 4, 0.01, 200_000
    mu = 2 * steps * eta * clip / math.sqrt(2 * eta * steps)
    assert abs(mu - 1.0) < 1e-9
    finals = []
    for sign in (1.0, -1.0):
        pot = _one_agent(1, None, clip, value=100.0 * sign)
        trace = dgsgld.sample(dgsgld.SGLD(eta), pot, None, jnp.zeros((n, 1)),
                              jax.random.key(7 if sign > 0 else 8), steps,
                              output=dgsgld.Output(thin=steps))
        finals.append(np.asarray(trace.positions[:, -1, 0], np.float64))
    reported = float(P.privacy_epsilon(dgsgld.SGLD(eta), _one_agent(1, None, clip), steps,
                                       delta).epsilon[0])
    t = reported / mu + mu / 2
    scale = math.sqrt(2 * eta * steps)
    stat = [(f + steps * eta * clip) / scale for f in finals]   # N(μ, 1) under D, N(0, 1) D'
    k, k2 = int((stat[0] > t).sum()), int((stat[1] > t).sum())
    p_lo, p_hi = _clopper_pearson(k, n, 1e-4)
    q_lo, q_hi = _clopper_pearson(k2, n, 1e-4)
    lower, upper = math.log((p_lo - delta) / q_hi), math.log((p_hi - delta) / q_lo)
    assert lower <= reported <= upper, (lower, reported, upper)


@pytest.mark.slow  # fast twin: test_subsampled_composition_is_dp_accountings_own
def test_subsampled_step_is_bounded_by_the_without_replacement_accountant():
    """One step, two data, mini-batches of one (``q = 1/2``, scale ``n/b = 2``): datum 1 at
    ``±M`` (clipped gradient ``∓C``), datum 2 at 0 (gradient 0 at ``x = 0``). The released
    ``x_1`` is ``½ N(2ηC, 2η) + ½ N(0, 2η)`` against ``½ N(−2ηC, 2η) + ½ N(0, 2η)``; replacing
    datum 1 by a copy of datum 2 instead gives ``N(0, 2η)``. The exact ε of both pairs
    (hockey-stick divergence by quadrature) must not exceed the reported RDP ε.

    The library's ``x_1`` has this law: mean ``±ηC`` and variance ``2η + (2ηC)²/4`` over
    100 000 runs (standard errors 0.0010 and 0.0005; the bounds are five of them)."""
    eta, clip, delta, n = 0.05, 1.0, 1e-3, 100_000
    shift, sd = 2 * eta * clip, math.sqrt(2 * eta)
    for sign in (1.0, -1.0):
        data = jnp.array([[100.0 * sign, 0.0]])
        pot = dgsgld.Potential(lambda t, d: -0.5 * (t[0] - d) ** 2, None, data, 1, clip=clip)
        trace = dgsgld.sample(dgsgld.SGLD(eta), pot, None, jnp.zeros((n, 1)),
                              jax.random.key(11), 1)
        x1 = np.asarray(trace.positions[:, -1, 0], np.float64)
        assert abs(x1.mean() - sign * shift / 2) < 0.005
        assert abs(x1.var() - (sd ** 2 + shift ** 2 / 4)) < 0.0025
    reported = float(P.privacy_epsilon(dgsgld.SGLD(eta), pot, 1, delta).epsilon[0])
    x = np.linspace(-6, 6, 200_001)
    dx = x[1] - x[0]
    half = lambda m: 0.5 * stats.norm.pdf(x, m, sd) + 0.5 * stats.norm.pdf(x, 0, sd)  # noqa

    def epsilon(p, q):
        def excess(e):
            return max(np.sum(np.maximum(p - math.exp(e) * q, 0)),
                       np.sum(np.maximum(q - math.exp(e) * p, 0))) * dx - delta
        return 0.0 if excess(0.0) < 0 else optimize.brentq(excess, 0.0, 50.0)

    # Datum 1 (gradient −C) replaced by one whose gradient is +C, or by a copy of datum 2.
    for p, q in ((half(shift), half(-shift)), (half(shift), stats.norm.pdf(x, 0, sd))):
        assert epsilon(p, q) <= reported
    assert epsilon(half(shift), half(-shift)) > 0.3 * reported           # not vacuous


def test_the_guide_runs_and_prints_the_closed_form():
    """docs/guide/privacy.md's example: DE-SGLD, full batches, C = 1, η = 0.01: after k steps
    ``μ² = 2C²kη`` (0.5, 1 and 2 at the checkpoints 25, 50, 100), every agent alike."""
    import contextlib
    import io
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[2]
    text = (root / "docs" / "guide" / "privacy.md").read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    namespace, out = {}, io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/guide/privacy.md", "exec"), namespace)
    report = namespace["report"]
    expect = [_gaussian_epsilon(math.sqrt(m), 1e-5) for m in (0.5, 1.0, 2.0)]
    np.testing.assert_allclose(report.curve, np.repeat(np.array(expect)[:, None], 4, 1),
                               rtol=1e-6)
    assert out.getvalue().splitlines()[0] == "[6.57 6.57 6.57 6.57] gaussian"
