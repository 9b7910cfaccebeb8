"""Sampler mathematics: posterior moments, the bias DIGing-SGLD removes, invariants."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _problems import (
    complete_graph,
    linear_regression,
    log_likelihood,
    paper_size_potential,
    permuted_rings,
    ring,
)

import dgsgld

CHAINS = 4000


def posterior_init(problem, num_chains, num_agents, seed=5):
    """Every chain starts with all its agents at one exact posterior draw: no burn-in for the
    network average, so short runs measure the stationary law."""
    chol = np.linalg.cholesky(problem.cov)
    z = np.asarray(jax.random.normal(jax.random.key(seed), (num_chains, problem.mean.size)))
    draw = problem.mean + z @ chol.T
    return jnp.asarray(np.repeat(draw[:, None, :], num_agents, axis=1), jnp.float32)


def final_moments(trace):
    x = np.asarray(trace.state.position, np.float64)  # (C, N, d)
    m = x.mean(0)
    s = np.einsum("cni,cnj->nij", x - m, x - m) / (x.shape[0] - 1)
    return m, s


@pytest.mark.parametrize(
    "make", [dgsgld.DIGingSGLD, dgsgld.EXTRASGLD], ids=["diging", "extra"]
)
def test_agent_moments_match_posterior(make, key):
    """Full batch, complete graph, small step: each agent's law is the posterior up to O(η).

    Tolerances. Chains are independent, so the mean of C draws has standard error
    sqrt(S_jj / C); |z| < 4.5 fails with probability < 7e-6 per coordinate, < 1e-4 over the 10
    coordinates here. DIGing/EXTRA have no stationary mean bias on a linear-Gaussian model (the
    drift's fixed point is the exact minimiser), so no bias term is added to the mean.
    Covariance entries of C Gaussian draws have standard error sqrt((S_ii S_jj + S_ij²)/C); we
    allow 4.5 of them plus the O(η) stationary bias: the agents' disagreement adds variance
    2η(1 − 1/N) per coordinate on the complete graph (mixing to the average, then fresh noise),
    and the network average is ULA with step h = η/N, whose covariance bias is at most
    h λ_max(A) ‖Σ̂‖ / (2 − hλ_max).
    """
    pb = linear_regression(heterogeneous=True)
    n, eta = 5, 0.002
    trace = dgsgld.sample(make(eta), pb.potential, complete_graph(n), posterior_init(pb, CHAINS, n),
                          key, num_steps=300,
                          output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
    m, s = final_moments(trace)
    se = np.sqrt(np.diagonal(s, axis1=1, axis2=2) / CHAINS)
    assert np.all(np.abs(m - pb.mean) <= 4.5 * se)
    diag = np.diagonal(s, axis1=1, axis2=2)
    se_cov = np.sqrt((diag[:, :, None] * diag[:, None, :] + s**2) / CHAINS)
    h, lam = eta / n, np.linalg.eigvalsh(pb.hessians.sum(0)).max()
    bias = 2 * eta * (1 - 1 / n) + h * lam * np.abs(pb.cov).max() / (2 - h * lam)
    assert np.all(np.abs(s - pb.cov) <= 4.5 * se_cov + bias)


def test_centralized_sgld_matches_exact_ula_covariance(key):
    """Full-batch SGLD is ULA; on a Gaussian target its stationary law is exactly
    N(m̂, (A(I − ηA/2))⁻¹). Started from that law it stays there, so only MC error remains
    (same standard errors as above, 4.5 of them)."""
    pb = linear_regression()
    A = pb.hessians.sum(0)
    eta = 0.1
    exact_cov = np.linalg.inv(A @ (np.eye(2) - eta * A / 2))
    chol = np.linalg.cholesky(exact_cov)
    z = np.asarray(jax.random.normal(jax.random.key(3), (CHAINS, 2)))
    init = jnp.asarray(pb.mean + z @ chol.T, jnp.float32)
    trace = dgsgld.sample(dgsgld.SGLD(eta), pb.potential, None, init, key, num_steps=50)
    x = np.asarray(trace.positions[:, -1], np.float64)
    m, s = x.mean(0), np.cov(x.T)
    assert np.all(np.abs(m - pb.mean) <= 4.5 * np.sqrt(np.diag(s) / CHAINS))
    se_cov = np.sqrt((np.outer(np.diag(s), np.diag(s)) + s**2) / CHAINS)
    assert np.all(np.abs(s - exact_cov) <= 4.5 * se_cov)
    # The step-size bias is visible: the exact ULA covariance differs from the posterior's.
    assert np.abs(exact_cov - pb.cov).max() > 5 * se_cov.max()


# Slow set: the time-varying network (the paper's setting) and a static ring.
@pytest.mark.slow  # fast twin:
# tests/theory/test_theory_exact.py::test_bias_free_means_for_tracking_methods (exact stationary
# means: DIGing's at the minimiser, DE's off it) with test_agent_moments_match_posterior[diging]
@pytest.mark.parametrize(
    "stack", [pytest.param(ring(5)[None], marks=pytest.mark.slow), permuted_rings(5, 10)],
    ids=["static-ring", "time-varying"]
)
def test_de_sgld_bias_exceeds_diging(stack, key):
    """Heterogeneous data, full batch: DE-SGLD's agents settle around a network-biased mean,
    DIGing-SGLD's around the posterior mean. The mean error averaged over agents has MC noise
    of order sqrt(tr Σ̂ / C) ≈ 0.012 here; we require DE's to exceed DIGing's by 4 of those.
    (Measured with C = 10⁴: DE's error is 20–45 standard errors, DIGing's within 2.)"""
    pb = linear_regression(heterogeneous=True)
    eta, n = 0.05, 5
    init = posterior_init(pb, CHAINS, n)
    bias = {}
    for name, make in [("diging", dgsgld.DIGingSGLD), ("de", dgsgld.DESGLD)]:
        trace = dgsgld.sample(make(eta), pb.potential, stack, init, key, num_steps=200,
                              output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
        m, _ = final_moments(trace)
        bias[name] = np.linalg.norm(m - pb.mean, axis=1).mean()
    noise = np.sqrt(np.trace(pb.cov) / CHAINS)
    assert bias["de"] > bias["diging"] + 4 * noise
    assert bias["diging"] < 4 * noise


def test_tracking_invariant_with_minibatches(key):
    """Σ_i y_i = Σ_i ∇̃f_i(x_i) at every iteration, to float32 rounding, with mini-batches.

    Rounding: each step adds O(N · eps · |y|) error, so after K steps the residual relative to
    the gradients' scale stays below K · N · 1.2e-7 ≈ 1e-4 for K = 200, N = 5."""
    pb = linear_regression(local_size=6, batch_size=2, heterogeneous=True)

    def residual(state):
        return jnp.stack([jnp.sum(state.tracker, 0), jnp.sum(state.grad, 0)])

    init = jax.random.normal(key, (8, 5, 2))
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.02), pb.potential, permuted_rings(5, 7), init,
                          key, num_steps=200, output=dgsgld.Output(trace_fn=residual))
    y_sum, g_sum = np.asarray(trace.values[:, :, 0]), np.asarray(trace.values[:, :, 1])
    scale = np.abs(np.asarray(trace.state.grad)).max()
    assert np.abs(y_sum - g_sum).max() <= 200 * 5 * 1.2e-7 * 10 * scale
    # The gradients really are stochastic: the same point gives different estimates.
    grad = jax.jit(lambda x, k: pb.potential.grad(x, k))
    g1, g2 = grad(init[0], jax.random.key(1)), grad(init[0], jax.random.key(2))
    assert not np.allclose(g1, g2)


@pytest.mark.slow  # the negative control of test_tracking_invariant_with_minibatches
def test_redrawing_the_old_gradient_breaks_the_invariant(key):
    """The test above can fail: a variant that re-draws ∇̃f(x) with a fresh mini-batch instead
    of reusing the stored one lets Σ y − Σ ∇̃f drift far beyond rounding."""
    pb = linear_regression(local_size=6, batch_size=2, heterogeneous=True)
    W = jnp.asarray(ring(5), jnp.float32)
    x = jax.random.normal(key, (5, 2))
    g = pb.potential.grad(x, jax.random.key(10))
    y = g
    for k in range(50):
        kx, kg, kold = jax.random.split(jax.random.fold_in(key, k), 3)
        x_new = W @ x - 0.02 * y + jnp.sqrt(0.04) * jax.random.normal(kx, x.shape)
        g_new = pb.potential.grad(x_new, kg)
        y = W @ y + g_new - pb.potential.grad(x, kold)  # the mistake
        x = x_new
    assert np.abs(np.sum(y, 0) - np.sum(g_new, 0)).max() > 1e-2


@pytest.mark.slow  # fast twin:
# tests/samplers/test_noise.py::test_a_shape_dependent_generator_gives_the_same_run_in_either_layout
# (8-chain run's chains 0-1 equal the 2-chain run, bit for bit)
def test_same_key_same_draws_however_batched(key):
    pb = linear_regression(batch_size=2)
    init = jax.random.normal(jax.random.key(1), (6, 5, 2))
    alg = dgsgld.DIGingSGLD(0.05)
    a = dgsgld.sample(alg, pb.potential, permuted_rings(5, 3), init, key, num_steps=20)
    b = dgsgld.sample(alg, pb.potential, permuted_rings(5, 3), init, key, num_steps=20)
    np.testing.assert_array_equal(a.positions, b.positions)
    # Chain c draws from fold_in(key, c), so running the first 3 chains alone gives the same.
    c = dgsgld.sample(alg, pb.potential, permuted_rings(5, 3), init[:3], key, num_steps=20)
    np.testing.assert_array_equal(a.positions[:3], c.positions)
    d = dgsgld.sample(alg, pb.potential, permuted_rings(5, 3), init, jax.random.key(9),
                      num_steps=20)
    assert not np.allclose(a.positions[:, -1], d.positions[:, -1])


@pytest.mark.parametrize("make", [
    dgsgld.DIGingSGLD,
    pytest.param(dgsgld.DESGLD, marks=pytest.mark.slow),  # same runner path as DIGing-SGLD
    pytest.param(dgsgld.EXTRASGLD, marks=pytest.mark.slow),
])
@pytest.mark.slow  # default run: tests/runner/test_checkpoint.py's chunked run equals one call,
# bit for bit
def test_continuing_from_state_is_bit_identical(make, key):
    pb = linear_regression(batch_size=3)
    init = jax.random.normal(jax.random.key(1), (4, 5, 2))
    alg, stack = make(0.05), permuted_rings(5, 3)
    whole = dgsgld.sample(alg, pb.potential, stack, init, key, num_steps=20)
    first = dgsgld.sample(alg, pb.potential, stack, init, key, num_steps=8)
    rest = dgsgld.sample(alg, pb.potential, stack, first.state, key, num_steps=12)
    np.testing.assert_array_equal(whole.positions[:, :9], first.positions)
    np.testing.assert_array_equal(whole.positions[:, 8:], rest.positions)


@pytest.mark.slow  # fast twin: test_thinning_trace_fn_and_ensemble_fn_in_one_run (2 programs, not
# 4)
def test_thinning_and_trace_fn(key):
    pb = linear_regression()
    init = jax.random.normal(key, (3, 5, 2))
    alg = dgsgld.DESGLD(0.05)
    full = dgsgld.sample(alg, pb.potential, ring(5), init, key, num_steps=12)
    thin = dgsgld.sample(alg, pb.potential, ring(5), init, key, num_steps=12,
                         output=dgsgld.Output(thin=4))
    assert thin.positions.shape == (3, 4, 5, 2)
    np.testing.assert_array_equal(full.positions[:, ::4], thin.positions)
    mean_only = dgsgld.sample(alg, pb.potential, ring(5), init, key, num_steps=12,
                              output=dgsgld.Output(trace_fn=lambda s: jnp.mean(s.position, 0)))
    assert mean_only.positions is None
    np.testing.assert_allclose(mean_only.values, full.positions.mean(2), rtol=1e-6, atol=1e-6)
    ens = dgsgld.sample(alg, pb.potential, ring(5), init, key, num_steps=12,
                        output=dgsgld.Output(ensemble_fn=lambda s: jnp.mean(s.position, 0)))
    np.testing.assert_allclose(ens.ensemble, full.positions.mean(0), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="multiple of `output.thin`"):
        dgsgld.sample(alg, pb.potential, ring(5), init, key, num_steps=10,
                      output=dgsgld.Output(thin=4))


def test_thinning_trace_fn_and_ensemble_fn_in_one_run(key):
    """Fast twin of test_thinning_and_trace_fn: one thinned run with a ``trace_fn`` and an
    ``ensemble_fn`` (2 compiled programs instead of 4) against the full trace: thinning keeps
    iterations 0, 4, 8, 12; the trace and ensemble functions see those iterations' states."""
    pb = linear_regression()
    init = jax.random.normal(key, (3, 5, 2))
    alg = dgsgld.DESGLD(0.05)
    full = dgsgld.sample(alg, pb.potential, ring(5), init, key, num_steps=12)
    thin = dgsgld.sample(alg, pb.potential, ring(5), init, key, num_steps=12,
                         output=dgsgld.Output(thin=4, positions=True,
                                              trace_fn=lambda s: jnp.mean(s.position, 0),
                                              ensemble_fn=lambda s: jnp.mean(s.position, 0)))
    assert thin.positions.shape == (3, 4, 5, 2)
    np.testing.assert_array_equal(full.positions[:, ::4], thin.positions)
    np.testing.assert_allclose(thin.values, full.positions[:, ::4].mean(2), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(thin.ensemble, full.positions[:, ::4].mean(0), rtol=1e-6,
                               atol=1e-6)
    with pytest.raises(ValueError, match="multiple of `output.thin`"):
        dgsgld.sample(alg, pb.potential, ring(5), init, key, num_steps=10,
                      output=dgsgld.Output(thin=4))


@pytest.mark.slow  # default run: tests/samplers/test_dula.py's optax schedule test
def test_optax_schedule_equals_constant(key):
    pb = linear_regression(batch_size=2)
    init = jax.random.normal(key, (3, 5, 2))
    a = dgsgld.sample(dgsgld.DIGingSGLD(0.03), pb.potential, ring(5), init, key, num_steps=10)
    b = dgsgld.sample(dgsgld.DIGingSGLD(optax.constant_schedule(0.03)), pb.potential, ring(5),
                      init, key, num_steps=10)
    np.testing.assert_allclose(a.positions, b.positions, rtol=1e-6, atol=1e-6)
    decay = optax.exponential_decay(0.03, transition_steps=1, decay_rate=0.5)
    c = dgsgld.sample(dgsgld.DIGingSGLD(decay), pb.potential, ring(5), init, key, num_steps=10)
    # The first step uses η₀ = 0.03 as the constant run does; later steps differ.
    np.testing.assert_allclose(a.positions[:, 1], c.positions[:, 1], rtol=1e-6, atol=1e-6)
    assert not np.allclose(a.positions[:, -1], c.positions[:, -1])


@pytest.mark.slow  # default run: tests/runner/test_runner_guarantees.py's dict parameters,
# test_potential.py
def test_pytree_parameters(key):
    """A dict of parameters gives the same gradients as the flat vector and samples run."""
    pb = linear_regression()
    Z, y = pb.Z, pb.y

    def ll(params, datum):
        z, t = datum
        return -0.5 * (z[:1] @ params["w"] + z[1] * params["b"] - t) ** 2

    pot = dgsgld.Potential(ll, lambda p: -0.5 * (p["w"] @ p["w"] + p["b"] ** 2),
                           (jnp.asarray(Z, jnp.float32), jnp.asarray(y, jnp.float32)))
    flat = jax.random.normal(key, (5, 2))
    tree = {"w": flat[:, :1], "b": flat[:, 1]}
    g_tree = pot.full_grad(tree)
    g_flat = pb.potential.full_grad(flat)
    np.testing.assert_allclose(g_tree["w"][:, 0], g_flat[:, 0], rtol=1e-5)
    np.testing.assert_allclose(g_tree["b"], g_flat[:, 1], rtol=1e-5)
    init = {"w": jnp.zeros((500, 5, 1)), "b": jnp.zeros((500, 5))}
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.01), pot, complete_graph(5), init, key,
                          num_steps=400)
    assert trace.positions["w"].shape == (500, 401, 5, 1)
    m = np.array([trace.state.position["w"][:, :, 0].mean(), trace.state.position["b"].mean()])
    # 500 chains × 5 agents (correlated within a chain: use the chain count), 5 SE.
    se = np.sqrt(np.diag(pb.cov) / 500)
    assert np.all(np.abs(m - pb.mean) <= 5 * se + 0.02)


@pytest.mark.slow  # fast twin:
# tests/tuning/test_design.py::test_learn_weights_recovers_two_node_optimum (a gradient through a
# run)
def test_gradient_through_sample_matches_finite_differences(key):
    """d/dη and d/d(data) of a scalar of the trace, in float64, against central differences."""
    with jax.enable_x64(True):
        pb = linear_regression(dtype=np.float64, batch_size=2)
        init = jax.random.normal(key, (4, 5, 2), dtype=jnp.float64)
        stack = jnp.asarray(permuted_rings(5, 3))

        def loss(eta, Z):
            pot = dgsgld.Potential(pb.potential.log_likelihood, pb.potential.log_prior,
                                   (Z, pb.potential.data[1]), batch_size=2)
            trace = dgsgld.sample(dgsgld.DIGingSGLD(eta), pot, stack, init, key, num_steps=15)
            return jnp.mean(trace.positions[:, -1] ** 2)

        Z = pb.potential.data[0]
        g_eta, g_z = jax.grad(loss, argnums=(0, 1))(0.05, Z)
        h = 1e-6
        fd_eta = (loss(0.05 + h, Z) - loss(0.05 - h, Z)) / (2 * h)
        np.testing.assert_allclose(g_eta, fd_eta, rtol=1e-5)
        bump = jnp.zeros_like(Z).at[1, 2, 0].set(h)
        fd_z = (loss(0.05, Z + bump) - loss(0.05, Z - bump)) / (2 * h)
        np.testing.assert_allclose(g_z[1, 2, 0], fd_z, rtol=1e-5, atol=1e-9)


def test_compiled_once_for_new_step_size_and_init(key):
    """The log-likelihood is traced on the first call only: new step sizes, initial points
    and keys of the same shapes reuse the compiled run."""
    calls = []

    def ll(theta, datum):
        calls.append(1)
        z, y = datum
        return -0.5 * (z @ theta - y) ** 2

    pb = linear_regression()
    pot = dgsgld.Potential(ll, None, pb.potential.data)
    init = jax.random.normal(key, (3, 5, 2))
    dgsgld.sample(dgsgld.DIGingSGLD(0.01), pot, ring(5), init, key, num_steps=5)
    n = len(calls)
    dgsgld.sample(dgsgld.DIGingSGLD(0.02), pot, ring(5), init + 1, jax.random.key(3), num_steps=5)
    # Only the pre-compile shape check (jax.eval_shape) traces again.
    assert len(calls) - n <= 1


@pytest.mark.slow  # fast twin:
# tests/runner/test_divergence.py::test_flag_is_set_per_step_size_under_vmap (a vmapped step-size
# grid through sample)
def test_vmap_over_step_sizes(key):
    """A grid of step sizes runs as one vmapped call and matches separate runs."""
    pb = linear_regression()
    init = jax.random.normal(key, (3, 5, 2))
    etas = jnp.array([0.01, 0.05])

    def final(eta):
        t = dgsgld.sample(dgsgld.DESGLD(eta), pb.potential, ring(5), init, key, num_steps=10,
                          on_divergence="flag")
        return t.state.position

    grid = jax.vmap(final)(etas)
    for i, eta in enumerate([0.01, 0.05]):
        np.testing.assert_allclose(grid[i], final(eta), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_diging_paper_problem_long_run(key):
    """Paper-size linear regression (N = 20, d = 6, time-varying), 2000 chains started at
    posterior draws, 2000 steps at η = 0.002: each agent's Monte Carlo W2 to the posterior
    equals the exact W2 of DIGing-SGLD's law at that step (``theory.exact``, which carries the
    O(η) discretisation bias: about 0.06 here, not 0).

    Tolerance: by the triangle inequality |W2(fit, π) − W2(law, π)| ≤ W2(fit, law), the error
    of a Gaussian fit to 2000 draws of the law, whose size is the Monte Carlo floor measured on
    2000 exact posterior draws (≈ 0.008, same dimension and scale); 3× that floor.
    """
    from dgsgld import theory

    rng = np.random.default_rng(0)
    Z = np.concatenate([rng.normal(size=(100, 5)), np.ones((100, 1))], 1)
    x = rng.normal(size=6) / np.sqrt(0.1)
    y = Z @ x + rng.normal(size=100)
    cov = np.linalg.inv(Z.T @ Z + 0.1 * np.eye(6))
    mean = cov @ Z.T @ y

    pot = dgsgld.Potential(log_likelihood, lambda t: -0.05 * t @ t,
                           (jnp.asarray(Z.reshape(20, 5, 6), jnp.float32),
                            jnp.asarray(y.reshape(20, 5), jnp.float32)))
    chol = np.linalg.cholesky(cov)
    draw = mean + np.asarray(jax.random.normal(key, (2000, 6))) @ chol.T
    init = jnp.asarray(np.repeat(draw[:, None], 20, 1), jnp.float32)
    schedule = permuted_rings(20, 50)
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.002), pot, schedule, init, key,
                          num_steps=2000,
                          output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
    x = np.asarray(trace.state.position, np.float64)
    w2 = np.array([dgsgld.evaluate.gaussian_w2_to_target(x[:, i], mean, cov) for i in range(20)])
    with jax.enable_x64(True):
        q = theory.exact.quadratic_from_potential(pot, np.zeros((20, 6)))
        q = q._replace(hessians=np.asarray(q.hessians, np.float64),
                       shifts=np.asarray(q.shifts, np.float64))
        moments = theory.exact.exact_moments(
            dgsgld.DIGingSGLD(0.002), q, np.asarray(schedule, np.float64), mean,
            np.kron(np.ones((20, 20)), cov), 2000)
        exact_w2 = np.asarray(theory.exact.exact_w2(moments, mean, cov))[-1]
    exact = np.asarray(jax.random.normal(jax.random.key(7), (2000, 6))) @ chol.T + mean
    floor = float(dgsgld.evaluate.gaussian_w2_to_target(exact, mean, cov))
    assert exact_w2.min() > 5 * floor            # the bias is real and resolved by this test
    np.testing.assert_array_less(np.abs(w2 - exact_w2), 3 * floor)


# ------------------------------------------------------------------ the runner's plain route


# Slow set: full batches and mini-batches (mini-batches change only the gradient, not the layout).
@pytest.mark.slow  # fast twin:
# tests/samplers/test_noise.py::test_a_shape_dependent_generator_gives_the_same_run_in_either_layout
# (chains-last and chains-first runs equal bit for bit),
# tests/samplers/test_step_inputs.py::test_runner_matches_a_python_loop_of_steps
@pytest.mark.parametrize("batch_size", [None, 3])
def test_chain_layout_changes_no_number(batch_size, monkeypatch, key):
    """The runner's one layout choice (chains last for small leaves, XLA:CPU) is only ``vmap``
    axes: the trace equals the chains-first run. Paper shape (200 chains > d = 6, so the
    choice applies). Differences can only be reordered float32 sums: a few ulps of |x| ~ 1."""
    from dgsgld.runner import loop as run_module

    potential = paper_size_potential(batch_size)
    init = jax.random.normal(jax.random.key(1), (200, 20, 6))

    def run():
        return dgsgld.sample(dgsgld.DIGingSGLD(0.01), potential, complete_graph(20), init, key,
                             3, output=dgsgld.Output(trace_fn=lambda s: s.grad, positions=True))

    trace = run()
    monkeypatch.setattr(run_module, "_chains_last", lambda: False)
    first = run()
    for a, b in zip(jax.tree.leaves(trace), jax.tree.leaves(first)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


# Slow set: mini-batches without replacement (the subset table) and with replacement.
@pytest.mark.slow  # fast twin:
# tests/samplers/test_step_inputs.py::test_runner_matches_a_python_loop_of_steps (the documented
# key scheme with mini-batches, step by step)
@pytest.mark.parametrize("replace", [False, True])
def test_gradient_in_the_loop_is_the_gradient_called_directly(replace):
    """``Potential.grad`` inside ``sample`` is the user-callable one with the same key: chain
    ``c``'s initial gradient uses ``split(fold_in(key, c))[0]``, its first step's gradient the
    second key of ``split(fold_in(split(fold_in(key, c))[1], 0))``. Mini-batches (b = 2 of 4)
    make a wrong key visible as an O(1) difference; rounding is float32 (rtol 1e-5)."""
    pb = linear_regression(batch_size=2, replace=replace)
    key = jax.random.PRNGKey(3)   # a legacy key: the runner converts it, the draws stay
    x0 = jax.random.normal(jax.random.key(1), (3, 5, 2))
    alg = dgsgld.DIGingSGLD(0.05)
    trace = dgsgld.sample(alg, pb.potential, ring(5), x0, key, 1,
                          output=dgsgld.Output(trace_fn=lambda s: s.grad, positions=True))
    for c in range(3):
        init_key, run_key = jax.random.split(jax.random.fold_in(key, c))
        np.testing.assert_allclose(trace.values[c, 0], pb.potential.grad(x0[c], init_key),
                                   rtol=1e-5, atol=1e-5)
        _, grad_key = jax.random.split(jax.random.fold_in(run_key, 0))
        np.testing.assert_allclose(
            trace.values[c, 1], pb.potential.grad(trace.positions[c, 1], grad_key),
            rtol=1e-5, atol=1e-5)


SAMPLER_CLASSES = [dgsgld.DIGingSGLD, dgsgld.DESGLD, dgsgld.EXTRASGLD, dgsgld.SGLD,
                   dgsgld.DIGingSGHMC, dgsgld.DESGHMC, dgsgld.DULA, dgsgld.PushDIGingSGLD,
                   dgsgld.PushSumSGLD]
# The second positional argument of the samplers that have one before the estimator.
SECOND = {dgsgld.DIGingSGHMC: "friction", dgsgld.DESGHMC: "friction", dgsgld.DULA: "consensus"}


@pytest.mark.parametrize("cls", SAMPLER_CLASSES, ids=lambda cls: cls.__name__)
def test_sampler_class_is_its_constructor(cls):
    for bad in [-1.0, 0.0, float("nan"), np.ones(2), lambda k: -1.0]:
        with pytest.raises(ValueError, match="step_size"):
            cls(bad)
    a, b = cls(0.1), cls(0.1)
    # Constants are array leaves (a new value reuses the compiled run): equal pytrees.
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert isinstance(a.step_size, jax.Array) and float(a.step_size) == pytest.approx(0.1)
    if cls is dgsgld.SGLD:
        with pytest.raises(TypeError):   # no estimator, and `normal` is keyword-only
            cls(0.1, dgsgld.gradients.svrg(3))
        return
    # The estimator is positional after the step size (and friction or consensus).
    est = dgsgld.gradients.svrg(3)
    middle = (0.5,) if cls in SECOND else ()
    built = cls(0.1, *middle, est)
    assert built.estimator is est
    if cls in SECOND:
        assert float(getattr(built, SECOND[cls])) == 0.5
        assert float(getattr(cls(0.1), SECOND[cls])) == 1.0   # the default
        with pytest.raises(ValueError, match=SECOND[cls]):
            cls(0.1, -1.0)
    with pytest.raises(ValueError, match="estimator"):
        cls(0.1, *middle, "svrg")
    with pytest.raises(TypeError):   # `channel` and `normal` are keyword-only
        cls(0.1, *middle, est, None)


@pytest.mark.slow  # default run: tests/networks/test_sparse.py's sparse and circulant traces
# equal dense
def test_every_mixing_form_gives_the_same_run(key):
    """A stack, a MixingStack, a networks.Schedule and a sparse schedule all reach the step as
    ``matrix_at(k) = W[k % P]``; one matrix is a stack of one."""
    from dgsgld import networks
    from dgsgld.networks import sparse
    from dgsgld.networks._mixing import MixingStack

    pb = linear_regression()
    stack = np.asarray(permuted_rings(5, 3), np.float32)
    x0 = jax.random.normal(key, (2, 5, 2))

    def run(mixing):
        return dgsgld.sample(dgsgld.DIGingSGLD(0.05), pb.potential, mixing, x0, key, 7).positions

    want = run(stack)
    for mixing in [MixingStack(stack), networks.Schedule(stack), sparse.from_dense(stack)]:
        np.testing.assert_allclose(run(mixing), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(run(stack[0]), run(stack[:1]))
    assert MixingStack(stack).period == 3 and MixingStack(stack).num_agents == 5
    np.testing.assert_array_equal(MixingStack(stack).matrix_at(jnp.int32(4)), stack[1])
    bad = stack.copy()
    bad[1, 0, 0] += 0.1
    with pytest.raises(ValueError, match="mixing"):
        run(bad)


def test_the_top_level_exports_every_sampler_of_the_registry():
    # The registry (dgsgld.samplers.ALL) is the one list of samplers: a sampler added there and
    # not exported at the top level (or exported under another name) fails here.
    from dgsgld import samplers

    for cls in samplers.ALL:
        assert getattr(dgsgld, cls.__name__) is cls and cls.__name__ in dgsgld.__all__
        assert samplers.by_name(cls.name) is cls
