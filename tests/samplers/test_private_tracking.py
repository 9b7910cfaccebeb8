"""Private gradient tracking: ``DIGingSGLD(η, tracking_noise=σ)``.

The sampler (its draws without the option, the tracker's sum with it), its exact law on
quadratic potentials (the engine's step against the recursion with the noise drawn, Monte
Carlo against the propagated and the stationary law), and its privacy accounting (the closed
form of the composed Gaussian mechanism, dp-accounting's own subsampled composition, and the
measured distinguishability of neighbouring data sets through the released copies and
positions, which must reach but never exceed the reported ε).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats

import dgsgld
from dgsgld import communication as comm
from dgsgld import theory as th
from dgsgld.evaluate import privacy as P
from tests._moments import (
    INIT_COV,
    INIT_MEAN,
    assert_exact_law,
    bonferroni,
    exact_quadratic,
    z_scores,
)
from tests._problems import linear_regression, permuted_rings, ring


def _problem():
    return linear_regression(num_agents=4, local_size=4, dim=2, heterogeneous=True,
                             dtype=np.float64)


# -- the sampler --------------------------------------------------------------------------


def test_without_the_option_nothing_changes_and_its_noise_has_its_own_key():
    """``tracking_noise=None`` is the default's step bit for bit; with ``σ`` the position
    update (``x¹ = W x⁰ − η y⁰ + √(2η) w``, before any copy was mixed) is the same, so the
    copies' noise does not reuse the step's keys, and the tracker moves by ``(W − I) ξ``
    exactly with ``ξ`` of standard deviation ``σ``."""
    prob = _problem()
    W = jnp.asarray(ring(4), jnp.float32)
    x0 = jax.random.normal(jax.random.key(0), (4, 2))
    plain, none = dgsgld.DIGingSGLD(0.05), dgsgld.DIGingSGLD(0.05, tracking_noise=None)
    noisy = dgsgld.DIGingSGLD(0.05, tracking_noise=3.0)
    key = jax.random.key(5)
    a = plain.step(key, plain.init(x0, prob.potential, key), prob.potential, W)
    b = none.step(key, none.init(x0, prob.potential, key), prob.potential, W)
    c = noisy.step(key, noisy.init(x0, prob.potential, key), prob.potential, W)
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert np.array_equal(np.asarray(u), np.asarray(v))
    assert np.array_equal(np.asarray(a.position), np.asarray(c.position))
    state = noisy.init(x0, prob.potential, key)
    xi = np.asarray(noisy._tracking_noise(key, state, W), np.float64)
    np.testing.assert_allclose(np.asarray(c.tracker) - np.asarray(a.tracker),
                               (np.asarray(W, np.float64) - np.eye(4)) @ xi, atol=1e-5)
    # ξ's law: 4 000 draws of one coordinate, s.d. 3 (the sample s.d.'s s.e. is 3/√8000).
    draws = jax.vmap(lambda k: noisy._tracking_noise(k, state, W)[0, 0])(
        jax.random.split(jax.random.key(1), 4000))
    assert abs(float(jnp.std(draws)) - 3.0) < 5 * 3.0 / math.sqrt(8000)


def test_the_tracker_sum_is_kept_and_bad_noise_is_named():
    """``Σ_i y_i = Σ_i ∇̃f_i(x_i)`` after 200 steps with tracking noise 30 times the gradients'
    scale, up to float64 rounding; a non-positive ``σ`` is refused by name."""
    prob = _problem()
    with jax.enable_x64(True):
        algo = dgsgld.DIGingSGLD(0.02, tracking_noise=30.0)
        trace = dgsgld.sample(algo, prob.potential, permuted_rings(4, 3, seed=2),
                              jnp.zeros((8, 4, 2)), jax.random.key(3), 200,
                              output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
        state = trace.state
        gap = np.asarray(state.tracker.sum(1) - state.grad.sum(1))
        assert np.abs(gap).max() < 1e-10, np.abs(gap).max()
        assert np.abs(np.asarray(state.tracker)).max() > 10     # the noise is there
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="tracking_noise"):
            dgsgld.DIGingSGLD(0.02, tracking_noise=bad)


# -- the exact law ------------------------------------------------------------------------


def test_the_step_is_its_exact_recursion_with_the_noise_drawn():
    """Same key, any state: the engine's ``s⁺`` is ``M s + G [w; ξ]`` with the step's own
    ``w`` and ``ξ / σ`` (float64, no Monte Carlo error)."""
    prob = _problem()
    W = permuted_rings(4, 2)[1]
    sigma = 2.5
    with jax.enable_x64(True):
        algo = dgsgld.DIGingSGLD(0.07, tracking_noise=sigma)
        q = th.quadratic_from_potential(prob.potential, jnp.zeros((4, 2)))
        rec = th.linear_recursion(algo, q, W, xp=np)
        assert rec.noise.shape == (16, 16)
        rng = np.random.default_rng(0)
        key = jax.random.key(3)
        state = algo.init(jnp.asarray(rng.normal(size=(4, 2))), prob.potential, key)
        state = state._replace(tracker=jnp.asarray(rng.normal(size=(4, 2))))
        Wj = jnp.asarray(W)
        new = algo.step(key, state, prob.potential, Wj)
        w = np.asarray(algo.noise(key, state.position)).ravel()
        xi = np.asarray(algo._tracking_noise(key, state, Wj)).ravel() / sigma
        s = np.concatenate([np.asarray(state.position).ravel(),
                            np.asarray(state.tracker).ravel()])
        expected = rec.matrix @ s + rec.offset + rec.noise @ np.concatenate([w, xi])
        got = np.concatenate([np.asarray(new.position).ravel(), np.asarray(new.tracker).ravel()])
        np.testing.assert_allclose(got, expected, atol=1e-12)


def test_chains_match_the_exact_law_with_tracking_noise():
    """4 000 chains of 12 steps on a periodic schedule against the propagated exact law
    (per-agent means and covariances at iterations 1, 4, 12, Bonferroni at family-wise 1e-3:
    tests/_moments.py). Not vacuous: the law without the tracking noise is far outside
    those bounds at the last check."""
    prob = _problem()
    schedule = permuted_rings(4, 3, seed=4)
    algo = dgsgld.DIGingSGLD(0.08, tracking_noise=5.0)
    assert_exact_law(algo, prob, schedule, 4000, 12, (1, 4, 12))
    with jax.enable_x64(True):
        q = exact_quadratic(prob)
        laws = [th.exact_moments(a, q, schedule, INIT_MEAN, INIT_COV, 12)
                for a in (algo, dgsgld.DIGingSGLD(0.08))]
    cov, plain = np.asarray(laws[0].cov[-1]), np.asarray(laws[1].cov[-1])
    se = np.sqrt((np.einsum("naa->na", cov)[..., :, None] * np.einsum("naa->na", cov)[
        ..., None, :] + cov ** 2) / 3999)
    assert np.max(np.abs(plain - cov) / se) > 2 * bonferroni(3 * 4 * 5)
    np.testing.assert_allclose(laws[0].mean[-1], laws[1].mean[-1], atol=1e-12)  # mean kept


@pytest.mark.slow
def test_chains_reach_the_stationary_law_with_tracking_noise():
    """Static ring, η = 0.05, σ = 8: 4 000 chains after 600 steps (the reduced recursion's
    spectral radius ρ gives a transient below ρ⁶⁰⁰ of the initial gap, far below one standard
    error) against ``stationary_moments``; the noise raises every agent's variance
    (the stationary law without it is far outside the bounds)."""
    prob = _problem()
    W = ring(4)
    algo = dgsgld.DIGingSGLD(0.05, tracking_noise=8.0)
    with jax.enable_x64(True):
        q = exact_quadratic(prob)
        st = th.stationary_moments(algo, q, W)
        plain = th.stationary_moments(dgsgld.DIGingSGLD(0.05), q, W)
    assert st.spectral_radius ** 600 < 1e-6
    init = jnp.asarray(np.random.default_rng(1).normal(size=(4000, 4, 2)))
    trace = dgsgld.sample(algo, prob.potential, W, init, jax.random.key(2), 600,
                          output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
    x = np.asarray(trace.state.position, np.float64)
    z = np.concatenate([np.ravel(p) for p in z_scores(x, st.mean[0], st.cov[0])])
    assert np.max(np.abs(z)) < bonferroni(z.size)
    np.testing.assert_allclose(st.mean[0], plain.mean[0], atol=1e-9)
    z_plain = z_scores(x, plain.mean[0], plain.cov[0])[1]
    assert np.max(np.abs(z_plain)) > 3 * bonferroni(z.size)


@pytest.mark.slow
@pytest.mark.parametrize("channel", [comm.Channel(activity=0.7), comm.Channel(every=2),
                                     comm.Channel(error_feedback=True, consensus=0.5)],
                         ids=["stragglers", "every-2", "error-feedback"])
def test_chains_match_the_exact_law_through_channels_with_tracking_noise(channel):
    """The copies go through the channel: stragglers (``activity=0.7``, the active sets
    enumerated, each outcome's noise ``σ (W'_a − I) ξ`` on its active rows), rounds every
    other step (``W = I`` between: no noise) and error feedback (``(1 − γ) I + γ W``):
    4 000 chains of 12 steps against the exact law (tests/_moments.py's bounds)."""
    algo = dgsgld.DIGingSGLD(0.08, tracking_noise=5.0, channel=channel)
    assert_exact_law(algo, _problem(), permuted_rings(4, 3, seed=4), 4000, 12, (1, 4, 12),
                     channel=channel)


def test_channels_whose_law_needs_noise_free_of_w_are_refused():
    """The tracking noise ``σ (W − I) ξ`` depends on the mixing matrix, so random link drops
    and random-k messages (propagated for noise free of ``W``; without the option they are,
    tests/communication) are refused by name."""
    prob = _problem()
    q = exact_quadratic(prob)
    for channel in (comm.Channel(probability=0.8, per_link=True),
                    comm.Channel(comm.random_k(0.5))):
        algo = dgsgld.DIGingSGLD(0.05, tracking_noise=1.0, channel=channel)
        with pytest.raises(ValueError, match="channel"):
            th.exact_moments(algo, q, ring(4), INIT_MEAN, INIT_COV, 3, channel=channel)


# -- the privacy accounting -----------------------------------------------------------------


@pytest.fixture
def dp():
    return pytest.importorskip("dp_accounting")


def _gaussian_epsilon(mu, delta):
    """ε of the Gaussian mechanism with ``μ = shift / s.d.`` at ``δ`` (Balle and Wang 2018:
    ``δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)``), solved with scipy."""
    def excess(e):
        return stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(
            -e / mu - mu / 2) - delta
    return optimize.brentq(excess, 0.0, 500.0)


def _pair(sign, clip, local=1):
    """Two agents, one parameter: agent 0's data at ``100 · sign`` (clipped gradient
    ``−sign · C`` near 0), agent 1's at 100 in both data sets."""
    data = jnp.array([[100.0 * sign] * local, [100.0] * local], jnp.float32)
    return dgsgld.Potential(lambda t, d: -0.5 * (t[0] - d) ** 2, None, data, clip=clip)


@pytest.mark.parametrize("eta, sigma, steps", [(0.01, 30.0, 100), (0.05, 2.0, 7)])
def test_full_batch_private_tracking_matches_its_closed_form(eta, sigma, steps, dp):
    """Full batches, ``Δ = 2C``: each step releases the copy (noise ``σ``) and the position
    (shift ``η Δ``, noise ``√(2η)``) about one gradient: ``μ² = T Δ² (η/2 + 1/σ²)``; the
    PLD accountant agrees. A schedule ``σ_k`` gives ``μ² = Σ_k Δ² (η/2 + 1/σ_k²)``. Without
    the option ε is infinite (the trackers' exact gradients)."""
    pot, delta, clip = _pair(1.0, 1.5, local=3), 1e-5, 1.5
    algo = dgsgld.DIGingSGLD(eta, tracking_noise=sigma)
    mu = math.sqrt(steps * (2 * clip) ** 2 * (eta / 2 + 1 / sigma ** 2))
    report = P.privacy_epsilon(algo, pot, steps, delta)
    assert report.unbounded is None and report.accountant == "gaussian"
    np.testing.assert_allclose(report.epsilon, _gaussian_epsilon(mu, delta), rtol=1e-6)
    np.testing.assert_allclose(report.noise_multiplier, 1 / (mu / math.sqrt(steps)), rtol=1e-6)
    pld = P.privacy_epsilon(algo, pot, steps, delta, accountant="pld").epsilon
    np.testing.assert_allclose(pld, report.epsilon, rtol=1e-3)
    sigmas = sigma * (1 + np.arange(steps) / steps)
    schedule = dgsgld.DIGingSGLD(eta, tracking_noise=lambda k: sigma * (1 + k / steps))
    mu = math.sqrt(np.sum((2 * clip) ** 2 * (eta / 2 + 1 / sigmas ** 2)))
    np.testing.assert_allclose(P.privacy_epsilon(schedule, pot, steps, delta).epsilon,
                               _gaussian_epsilon(mu, delta), rtol=1e-5)
    assert np.isinf(P.privacy_epsilon(dgsgld.DIGingSGLD(eta), pot, steps, delta).epsilon).all()


def test_subsampled_private_tracking_is_dp_accountings_own_composition(dp):
    """Mini-batches of 5 of 50 without replacement: the copy and the position of a step use
    one draw, so they are one subsampled event of multiplier ``z = 1 / (Δ √(η/2 + 1/σ²))``,
    ``Δ = 2C n/b``, composed T times (dp-accounting's RDP, at the grid-rounded ``z``)."""
    data = jnp.zeros((2, 50), jnp.float32)
    pot = dgsgld.Potential(lambda t, d: -0.5 * (t[0] - d) ** 2, None, data, 5, clip=0.5)
    eta, sigma, steps, delta = 0.01, 40.0, 300, 1e-5
    z = 1 / (2 * 0.5 * 50 / 5 * math.sqrt(eta / 2 + 1 / sigma ** 2))
    report = P.privacy_epsilon(dgsgld.DIGingSGLD(eta, tracking_noise=sigma), pot, steps, delta)
    acc = dp.rdp.RdpAccountant(list(P.ORDERS), dp.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp.SampledWithoutReplacementDpEvent(
        50, 5, dp.GaussianDpEvent(float(P._rounded_down(np.array([z]))[0]))), steps)
    assert report.accountant == "rdp"
    np.testing.assert_allclose(report.epsilon, acc.get_epsilon(delta), rtol=1e-6)


def _released(algo, sign, clip, eta, steps, num_chains, key):
    """What agent 0's neighbours receive over ``steps`` steps of ``num_chains`` runs on
    :func:`_pair`'s data set ``sign`` over ``W = [[.7, .3], [.3, .7]]`` from ``x = 0``: the
    copies ``ŷ⁽ᵏ⁾ (C, T, 2)`` (the tracker sent plus its step's ``ξ``) and the positions
    ``x⁽ᵏ⁾ (C, T + 1, 2)``."""
    pot = _pair(sign, clip)
    W = jnp.array([[0.7, 0.3], [0.3, 0.7]], jnp.float32)

    def chain(key):
        state = algo.init(jnp.zeros((2, 1)), pot, key)

        def body(state, k):
            step_key = jax.random.fold_in(key, k)
            copy = state.tracker + algo._tracking_noise(step_key, state, W)
            return algo.step(step_key, state, pot, W), (copy[:, 0], state.position[:, 0])

        last, (copies, positions) = jax.lax.scan(body, state, jnp.arange(steps))
        return copies, jnp.concatenate([positions, last.position[None, :, 0]])

    copies, positions = jax.jit(jax.vmap(chain))(jax.random.split(key, num_chains))
    return np.asarray(copies, np.float64), np.asarray(positions, np.float64), np.asarray(W)


@pytest.mark.slow  # fast twin:
# tests/evaluate/test_privacy.py::test_measured_privacy_loss_reaches_but_never_exceeds_the_reported_epsilon
def test_measured_privacy_loss_of_copies_and_positions_reaches_but_never_exceeds_epsilon(dp):
    """Neighbouring data sets of agent 0 (its one datum at ``±100``: clipped gradient ``∓C``
    throughout), T = 4 steps, full batches, η = 0.02, ``σ = √(2/η)`` (the copies as noisy as
    the positions' drift). The adversary rebuilds from the released copies alone
    ``e⁽ᵏ⁺¹⁾ = e⁽ᵏ⁾ + (W ŷ⁽ᵏ⁾)_0 − ŷ_0⁽ᵏ⁾`` (``e⁽⁰⁾ = 0``), then ``u_k = ŷ_0⁽ᵏ⁾ − e⁽ᵏ⁾ = g + ξ``
    and ``v_k = x_0⁽ᵏ⁺¹⁾ − (W x⁽ᵏ⁾)_0 + η e⁽ᵏ⁾ = −η g + √(2η) w``: if the implementation's
    trackers were not ``g +`` (public) ``+`` fresh noise, these would not be the Gaussian
    mechanisms accounted. The Neyman–Pearson statistic ``Σ_k (u_k/σ² − v_k/2)``, standardized,
    is ``N(μ, 1)`` under one data set and ``N(0, 1)`` under the other with
    ``μ² = T (2C)² (η/2 + 1/σ²) = 1``, and the test at the reported ε rejects beyond
    ``t = ε/μ + μ/2``.

    Monte Carlo slack as in tests/evaluate/test_privacy.py: over 200 000 runs of each, one-sided
    Clopper–Pearson bounds at level 1e-4 on both rejection rates; the lower bound of
    ``log((p − δ)/p')`` must not exceed the reported ε (an upper bound), and as the accounting
    is exact here the upper bound must reach it."""
    eta, steps, delta, n = 0.02, 4, 0.01, 200_000
    sigma = math.sqrt(2 / eta)
    a = 1 / sigma ** 2 + eta / 2
    clip = 1 / math.sqrt(steps * 4 * a)
    mu = 2 * clip * math.sqrt(steps * a)
    assert abs(mu - 1.0) < 1e-12
    algo = dgsgld.DIGingSGLD(eta, tracking_noise=sigma)
    stat = []
    for sign, seed in ((1.0, 7), (-1.0, 8)):
        copies, positions, W = _released(algo, sign, clip, eta, steps, n, jax.random.key(seed))
        e = np.zeros(n)
        total = np.zeros(n)
        for k in range(steps):
            u = copies[:, k, 0] - e
            v = positions[:, k + 1, 0] - positions[:, k] @ W[0] + eta * e
            total += u / sigma ** 2 - v / 2
            e = e + copies[:, k] @ W[0] - copies[:, k, 0]
        # g = −sign · C: the statistic's mean is −sign · C T a; N(μ, 1) under sign = +1.
        stat.append(-total / math.sqrt(steps * a) + clip * math.sqrt(steps * a))
    reported = float(P.privacy_epsilon(algo, _pair(1.0, clip), steps, delta).epsilon[0])
    t = reported / mu + mu / 2
    k1, k2 = int((stat[0] > t).sum()), int((stat[1] > t).sum())
    p_lo, p_hi = _clopper_pearson(k1, n, 1e-4)
    q_lo, q_hi = _clopper_pearson(k2, n, 1e-4)
    lower, upper = math.log((p_lo - delta) / q_hi), math.log((p_hi - delta) / q_lo)
    assert lower <= reported <= upper, (lower, reported, upper)
    # The statistic's law itself: mean μ and 0, variance 1 (s.e. 1/√n and √(2/n)).
    for s, m in zip(stat, (mu, 0.0)):
        assert abs(s.mean() - m) < 5 / math.sqrt(n) and abs(s.var() - 1) < 5 * math.sqrt(2 / n)


def _clopper_pearson(k, n, level):
    """One-sided bounds ``(lower, upper)`` on a binomial probability at ``level`` each."""
    lower = stats.beta.ppf(level, k, n - k + 1) if k > 0 else 0.0
    upper = stats.beta.ppf(1 - level, k + 1, n - k) if k < n else 1.0
    return lower, upper
