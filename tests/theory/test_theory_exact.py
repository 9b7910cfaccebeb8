"""Exact moment propagation on quadratic potentials: closed forms, stationarity, the engine's
steps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld import theory as th
from tests._problems import linear_regression, permuted_rings, ring


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def small_quadratic(N=4, d=2, seed=0):
    rng = np.random.default_rng(seed)
    A = []
    for _ in range(N):
        R = rng.normal(size=(d, d))
        A.append(R @ R.T + 0.5 * np.eye(d))
    return th.Quadratic(np.stack(A), 2.0 * rng.normal(size=(N, d)))


def test_ula_matches_closed_forms():
    # Centralized ULA x⁺ = (I − ηA)x + ηb + √(2η)w: cov_k = Mᵏ S₀ Mᵏ + 2η Σ_{j<k} M^{2j},
    # stationary N(A⁻¹b, (A(I − ηA/2))⁻¹).
    q = small_quadratic()
    A, b = q.hessians.sum(0), q.shifts.sum(0)
    eta, S0, m0 = 0.05, 0.3 * np.eye(2), np.array([1.0, -1.0])
    out = th.exact_moments(dgsgld.SGLD(eta), q, None, m0, S0, 400)
    M = np.eye(2) - eta * A
    for k in (1, 2, 7):
        Mk = np.linalg.matrix_power(M, k)
        cov = Mk @ S0 @ Mk.T + sum(2 * eta * np.linalg.matrix_power(M, 2 * j) for j in range(k))
        mean = Mk @ m0 + sum(np.linalg.matrix_power(M, j) @ (eta * b) for j in range(k))
        np.testing.assert_allclose(out.cov[k], cov, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(out.mean[k], mean, rtol=1e-12, atol=1e-14)
    closed = np.linalg.inv(A @ (np.eye(2) - eta * A / 2))
    st = th.stationary_moments(dgsgld.SGLD(eta), q, None)
    np.testing.assert_allclose(st.cov[0], closed, rtol=1e-10)
    np.testing.assert_allclose(st.mean[0], np.linalg.solve(A, b), rtol=1e-10)
    np.testing.assert_allclose(out.cov[-1], closed, rtol=1e-8)  # 400 steps: ρ⁴⁰⁰ ≈ 1e-10


# Default run: DIGing-SGLD on the periodic schedule (a static W is its period-1 case); the static
# case and DE- and EXTRA-SGLD in the slow set.
@pytest.mark.parametrize("make", [dgsgld.DIGingSGLD,
                                  pytest.param(dgsgld.DESGLD, marks=pytest.mark.slow),
                                  pytest.param(dgsgld.EXTRASGLD, marks=pytest.mark.slow)])
@pytest.mark.parametrize("periodic", [pytest.param(False, marks=pytest.mark.slow), True])
def test_long_propagation_reaches_the_stationary_law(make, periodic):
    q = small_quadratic()
    mixing = permuted_rings(4, 3, seed=1) if periodic else ring(4)
    eta, T = 0.05, 1501
    out = th.exact_moments(make(eta), q, mixing, np.zeros(2), np.eye(2), T)
    st = th.stationary_moments(make(eta), q, mixing)
    assert st.spectral_radius < 1
    phase = T % st.mean.shape[0]
    np.testing.assert_allclose(out.mean[-1], st.mean[phase], atol=1e-10)
    np.testing.assert_allclose(out.cov[-1], st.cov[phase], atol=1e-10)


def test_bias_free_means_for_tracking_methods():
    # Full batches, static W: DIGing and EXTRA put every agent's stationary mean at x*;
    # DE-SGLD does not on heterogeneous data.
    q = small_quadratic(N=4)
    W = ring(4)
    x_star = q.minimizer()
    for make in (dgsgld.DIGingSGLD, dgsgld.EXTRASGLD):
        st = th.stationary_moments(make(0.02), q, W)
        np.testing.assert_allclose(st.mean[0], np.broadcast_to(x_star, (4, 2)), atol=1e-10)
    st = th.stationary_moments(dgsgld.DESGLD(0.02), q, W)
    assert np.max(np.abs(st.mean[0] - x_star)) > 1e-2


@pytest.mark.parametrize("make", [dgsgld.DIGingSGLD, dgsgld.EXTRASGLD])
def test_conserved_direction_has_unit_eigenvalues(make):
    # The stacked recursion has d eigenvalues of modulus 1 (Σ(y − ∇F(x)) resp. Σz conserved);
    # the reduced one used by `stationary_moments` has none.
    q = small_quadratic()
    rec = th.linear_recursion(make(0.05), q, ring(4), xp=np)
    mods = np.sort(np.abs(np.linalg.eigvals(rec.matrix)))[::-1]
    np.testing.assert_allclose(mods[:2], 1.0, atol=1e-10)
    assert mods[2] < 1 - 1e-3
    assert th.stationary_moments(make(0.05), q, ring(4)).spectral_radius < 1 - 1e-3


# Slow set (fast twins:
# tests/samplers/test_preconditioner.py::test_each_step_is_its_exact_recursion, every sampler's
# step against its recursion, and tests/theory/test_theory_mc.py's DIGing-SGLD chains of the
# engine against this exact law, positions and trackers).
@pytest.mark.parametrize("make", [pytest.param(dgsgld.DIGingSGLD, marks=pytest.mark.slow),
                                  pytest.param(dgsgld.DESGLD, marks=pytest.mark.slow),
                                  pytest.param(dgsgld.EXTRASGLD, marks=pytest.mark.slow)])
def test_recursion_matrix_matches_the_engine_step(make):
    # Same key, two states: the noise is identical, so the difference of the engine's next
    # states is exactly M (s₁ − s₂), with no Monte Carlo error.
    prob = linear_regression(num_agents=4, local_size=4, dim=2, dtype=np.float64)
    q = th.quadratic_from_potential(prob.potential, jnp.zeros((4, 2)))
    W = permuted_rings(4, 2)[1]
    eta = 0.07
    algo = make(eta)
    kind = {dgsgld.DIGingSGLD: "diging", dgsgld.DESGLD: "de", dgsgld.EXTRASGLD: "extra"}[type(algo)]
    rec = th.linear_recursion(algo, q, W, xp=np)
    rng = np.random.default_rng(0)
    key = jax.random.key(3)

    def flat(state):
        parts = [state.position]
        if kind == "diging":
            parts.append(state.tracker)
        if kind == "extra":
            parts.append(state.dual)
        return np.concatenate([np.asarray(p).ravel() for p in parts])

    def random_state():
        x = jnp.asarray(rng.normal(size=(4, 2)))
        state = algo.init(x, prob.potential, key)
        if kind == "diging":  # any tracker; `grad` must stay ∇F(x) (full batch)
            state = state._replace(tracker=jnp.asarray(rng.normal(size=(4, 2))))
        if kind == "extra":  # any dual variable with Σ z = 0
            z = rng.normal(size=(4, 2))
            state = state._replace(dual=jnp.asarray(z - z.mean(0)))
        return state

    s1, s2 = random_state(), random_state()
    step = jax.jit(lambda k, s, p, w: algo.step(k, s, p, w))
    n1 = step(key, s1, prob.potential, jnp.asarray(W))
    n2 = step(key, s2, prob.potential, jnp.asarray(W))
    np.testing.assert_allclose(flat(n1) - flat(n2), rec.matrix @ (flat(s1) - flat(s2)), atol=1e-10)


def test_quadratic_from_potential_recovers_the_regression():
    prob = linear_regression(num_agents=4, local_size=3, dim=3, dtype=np.float64)
    q = th.quadratic_from_potential(prob.potential, jnp.ones((4, 3)))
    np.testing.assert_allclose(q.hessians, prob.hessians, rtol=1e-12)
    np.testing.assert_allclose(q.shifts, np.einsum("nki,nk->ni", prob.Z, prob.y), rtol=1e-12)
    mean, cov = q.target()
    np.testing.assert_allclose(mean, prob.mean, rtol=1e-10)
    np.testing.assert_allclose(cov, prob.cov, rtol=1e-10)


def test_host_inputs_compile_one_program_each(caplog):
    """``quadratic_from_potential`` and ``exact_moments`` on host (NumPy) inputs prepare them
    on the host and compute in one jitted program each: op-by-op dispatch would compile each
    of their dozens of operations as a program of its own. Shapes no other test uses, so that
    none of these programs is compiled already in this worker; the values are checked too."""
    import logging

    prob = linear_regression(num_agents=3, local_size=4, dim=4, dtype=np.float64, seed=5)
    stack = np.asarray(permuted_rings(3, 2), np.float64)
    with caplog.at_level(logging.WARNING), jax.log_compiles():
        q = th.quadratic_from_potential(prob.potential, np.zeros((3, 4)))
        out = th.exact_moments(dgsgld.DIGingSGLD(0.03), q, stack, np.zeros(4), np.eye(4), 7)
    compiled = [r.getMessage().split()[1] for r in caplog.records
                if r.getMessage().startswith("Compiling")]
    assert compiled == ["jit(_quadratic_parts)", "jit(_propagate)"], compiled
    np.testing.assert_allclose(q.hessians, prob.hessians, rtol=1e-12)
    # The host path equals the traced one (jnp preparation inside the caller's jit).
    traced = jax.jit(lambda m: th.exact_moments(dgsgld.DIGingSGLD(0.03), q, stack, m,
                                                np.eye(4), 7).cov)(np.zeros(4))
    np.testing.assert_allclose(out.cov, traced, rtol=1e-12, atol=1e-14)


@pytest.mark.slow
def test_quadratic_from_potential_rejects_non_quadratic():
    def loglik(theta, datum):
        z, y = datum
        t = z @ theta
        return y * t - jax.nn.softplus(t)

    data = (jnp.asarray(np.random.default_rng(0).normal(size=(2, 5, 2))), jnp.ones((2, 5)))
    pot = dgsgld.Potential(loglik, lambda t: -0.5 * t @ t, data)
    with pytest.raises(ValueError, match="not quadratic"):
        th.quadratic_from_potential(pot, jnp.zeros((2, 2)))


@pytest.mark.slow  # fast twin: test_host_inputs_compile_one_program_each (exact_moments traced
# under jax.jit equals the host path)
def test_exact_moments_is_jittable_and_vmaps_over_steps():
    q = small_quadratic()
    W = permuted_rings(4, 4)
    etas = jnp.asarray([0.01, 0.02, 0.04])

    def final_cov(eta):
        return th.exact_moments(dgsgld.DIGingSGLD(eta), q, W, jnp.zeros(2), jnp.eye(2), 12).cov[-1]

    batched = jax.jit(jax.vmap(final_cov))(etas)
    for i, eta in enumerate(etas):
        one = th.exact_moments(dgsgld.DIGingSGLD(float(eta)), q, W, np.zeros(2), np.eye(2), 12)
        np.testing.assert_allclose(batched[i], one.cov[-1], rtol=1e-12)


def test_step_size_schedule():
    # A schedule count -> η is evaluated per step: two halves with constant steps agree. Every
    # run has 10 steps (one compiled program); the halves are their first 5.
    q = small_quadratic()
    W = ring(4)
    sched = lambda k: jnp.where(k < 5, 0.01, 0.03)
    out = th.exact_moments(dgsgld.DESGLD(sched), q, W, np.zeros(2), np.eye(2), 10)
    first = th.exact_moments(dgsgld.DESGLD(0.01), q, W, np.zeros(2), np.eye(2), 10)
    full = np.asarray(first.mean[5])
    cov0 = np.zeros((8, 8))
    for i in range(4):
        cov0[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = first.cov[5][i]
    # Restarting from the per-agent marginals drops cross-agent covariance, so compare means.
    second = th.exact_moments(dgsgld.DESGLD(0.03), q, W, full, cov0, 10)
    np.testing.assert_allclose(out.mean[-1], second.mean[5], rtol=1e-12)


@pytest.mark.slow  # fast twin: tests/theory/test_theory_mc.py::test_exact_moments_match_monte_carlo
# (the exact moments the summaries are computed from, against Monte Carlo)
def test_summaries_are_consistent():
    q = small_quadratic()
    out = th.exact_moments(dgsgld.DIGingSGLD(0.05), q, ring(4), np.zeros(2), np.eye(2), 5)
    # Σ_i E‖x_i − x̄‖² from the per-agent and average moments matches the stored summary.
    per = np.einsum("kiaa->k", out.cov) + np.sum(out.mean**2, axis=(1, 2))
    avg = np.einsum("kaa->k", out.average_cov) + np.sum(out.average_mean**2, axis=1)
    np.testing.assert_allclose(out.consensus_sq, per - 4 * avg, atol=1e-12)
    np.testing.assert_allclose(out.sq_norm, per, rtol=1e-12)
    # k = 0: x ~ N(0, I) i.i.d., so E‖x̃‖² = (N − 1) d, and y⁽⁰⁾ = ∇F(x⁽⁰⁾).
    assert out.consensus_sq[0] == pytest.approx(3 * 2)
    Ab = q.hessians
    expected_y = np.sum(np.einsum("iab,iab->i", Ab, Ab)) + np.sum(q.shifts**2)
    assert out.aux_sq[0] == pytest.approx(expected_y)


def test_stationary_w2_slope_is_one_for_ula():
    # ULA on a Gaussian: W2 to the target is O(η) (Σ_η − A⁻¹ ≈ η/2 I), slope 1 in log–log.
    q = small_quadratic()
    steps = np.geomspace(1e-4, 1e-3, 5)
    w2 = th.stationary_w2(dgsgld.SGLD(1.0), q, None, steps)[:, 0]
    slope, _ = th.loglog_slope(steps, w2)
    assert slope == pytest.approx(1.0, abs=0.02)
