"""Network design: the edge parametrization, gradients of the exact W2, learned and
fastest-mixing weights against hand-solved optima."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import dgsgld
from dgsgld import networks as nets
from dgsgld import tuning
from dgsgld.theory import exact


def _path(n):
    a = np.diag(np.ones(n - 1), 1)
    return a + a.T


def _two_snapshots():
    """N = 4: a path 0-1-2-3, then a triangle 0-1-2 with 3 hanging off 0 (different edges)."""
    first = _path(4)
    second = np.zeros((4, 4))
    for i, j in ((0, 1), (1, 2), (0, 2), (0, 3)):
        second[i, j] = second[j, i] = 1
    return np.stack([first, second])


@pytest.mark.parametrize("shared", [False, True])
def test_every_parametrized_matrix_is_valid(shared):
    adj = _two_snapshots()
    par = tuning.edge_parametrization(adj, shared=shared)
    assert par.shape == ((5,) if shared else (2, 5))  # union: 01 12 23 02 03
    rng = np.random.default_rng(0)
    for scale in (0.1, 3.0, 30.0):  # small weights, node sums far above 1 before scaling
        W = np.asarray(par.matrices(scale * rng.normal(size=par.shape)), np.float64)
        nets.validate_schedule(W, adj, tol=1e-6)
        assert np.all(np.diagonal(W, axis1=1, axis2=2) >= -1e-6)
    np.testing.assert_array_equal(par.adjacency, adj != 0)


def test_theta_from_reproduces_metropolis():
    adj = _two_snapshots()
    W = nets.metropolis_weights(adj)
    par = tuning.edge_parametrization(adj)
    np.testing.assert_allclose(np.asarray(par.matrices(par.theta_from(W))), W, atol=1e-6)


def _four_agent_quadratic(rng):
    """Random positive-definite 2-d quadratics of the four agents of :func:`_two_snapshots`."""
    roots = rng.normal(size=(4, 2, 2))
    return exact.Quadratic(roots @ np.swapaxes(roots, 1, 2) + 0.5 * np.eye(2),
                           rng.normal(size=(4, 2)))


def _central_differences(f, theta, par, h=1e-5):
    """Central differences of ``f`` in every ``θ`` entry a snapshot holds (0 elsewhere)."""
    fd = np.zeros(par.shape)
    for idx in zip(*np.nonzero(np.asarray(par.mask) != 0)):
        e = np.zeros(par.shape)
        e[idx] = h
        fd[idx] = (f(theta + e) - f(theta - e)) / (2 * h)
    return fd


@pytest.mark.slow  # fast twin: test_learn_weights_recovers_two_node_optimum (the exact W2's
# gradients through the moment recursion drive the learning to the hand-solved optimum)
def test_exact_w2_gradient_matches_finite_differences():
    # d/dθ and d/dη of the mean exact W2 at T through the moment recursion, against central
    # differences in float64: the truncation error is O(h²) ≈ 1e-10 times third derivatives of
    # order one, the rounding error ≈ 1e-16 / h = 1e-11; 1e-6 relative leaves a wide margin.
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        q = _four_agent_quadratic(rng)
        par = tuning.edge_parametrization(_two_snapshots())
        tm, tc = q.target()

        def objective(theta, log_eta):
            m = exact.exact_moments(dgsgld.DIGingSGLD(jnp.exp(log_eta)), q, par.matrices(theta),
                                    np.zeros(2), np.eye(2), 6)
            return jnp.mean(exact.exact_w2(exact.ExactMoments(*(a[-1] for a in m)), tm, tc))

        theta = jnp.asarray(rng.normal(size=par.shape) - 1.0)  # node sums below 1: smooth
        log_eta = jnp.log(0.05)
        # One compiled program for the gradient and the differences (compiling costs the most).
        value_and_grad = jax.jit(jax.value_and_grad(objective, argnums=(0, 1)))
        _, (g_theta, g_eta) = value_and_grad(theta, log_eta)

        def f(t, e):
            return value_and_grad(t, e)[0]

        h = 1e-5
        mask = np.asarray(par.mask) != 0
        fd = _central_differences(lambda t: f(t, log_eta), theta, par, h)
        np.testing.assert_allclose(np.asarray(g_theta), fd, rtol=1e-6, atol=1e-9)
        assert np.all(np.asarray(g_theta)[~mask] == 0)  # edges a snapshot lacks play no part
        fd_eta = (f(theta, log_eta + h) - f(theta, log_eta - h)) / (2 * h)
        np.testing.assert_allclose(float(g_eta), float(fd_eta), rtol=1e-6)


@pytest.mark.slow  # fast twin: test_learn_weights_recovers_two_node_optimum (the finite-difference
# check at one iteration: test_exact_w2_gradient_matches_finite_differences, slow)
def test_multi_iteration_objective_gradient_matches_finite_differences():
    # The objective learn_weights differentiates when `num_steps` is a sequence: the mean over
    # the iterations 3..6 of the mean-agent exact W2. Its value against each iteration's W2
    # from one recursion (float64: agreement to rounding), its gradient in θ against central
    # differences as in the single-iteration test: truncation O(h²) ≈ 1e-10 times third
    # derivatives of order one, rounding ≈ 1e-16 / h = 1e-11, so 1e-6 relative is a wide margin.
    from dgsgld.tuning.design import _exact_objective

    with jax.enable_x64(True):
        rng = np.random.default_rng(2)
        q = _four_agent_quadratic(rng)
        par = tuning.edge_parametrization(_two_snapshots())
        iterations = (3, 4, 5, 6)
        objective = _exact_objective(dgsgld.DIGingSGLD(0.05), [q], np.zeros(2), np.eye(2),
                                     iterations, "mean")
        theta = jnp.asarray(rng.normal(size=par.shape) - 1.0)  # node sums below 1: smooth
        eta = jnp.asarray(0.05)
        m = exact.exact_moments(dgsgld.DIGingSGLD(eta), q, par.matrices(theta), np.zeros(2),
                                np.eye(2), 6)
        per_iteration = np.asarray(exact.exact_w2(m, *q.target())).mean(axis=1)  # (7,)
        value_and_grad = jax.jit(jax.value_and_grad(lambda t: objective(par.matrices(t), eta)))
        value, grad = value_and_grad(theta)
        np.testing.assert_allclose(float(value), per_iteration[3:7].mean(), rtol=1e-12)
        assert not np.isclose(per_iteration[3], per_iteration[6], rtol=1e-3)  # a real average

        fd = _central_differences(lambda t: value_and_grad(t)[0], theta, par)
        np.testing.assert_allclose(np.asarray(grad), fd, rtol=1e-6, atol=1e-9)
        assert np.all(np.asarray(grad)[np.asarray(par.mask) == 0] == 0)


@pytest.mark.slow  # fast twin: test_learn_weights_recovers_two_node_optimum (the objective
# at one iteration); this one compiles six learn_weights programs
def test_learn_weights_single_iteration_sequence_is_the_single_iteration_objective():
    sched = nets.barbell(6, period=3, seed=2)
    rng = np.random.default_rng(3)
    z = rng.normal(size=(6, 4, 2))
    q = exact.Quadratic(np.swapaxes(z, 1, 2) @ z + 0.1 * np.eye(2), rng.normal(size=(6, 2)))
    args = (dgsgld.DIGingSGLD(0.05), q, sched, np.zeros(2), np.eye(2))
    kw = {"step_size": 0.05, "num_iterations": 3, "learning_rate": 0.1}
    single, rep = tuning.learn_weights(*args, 10, **kw)
    listed, rep_listed = tuning.learn_weights(*args, [10], **kw)
    np.testing.assert_array_equal(rep_listed.history, rep.history)
    np.testing.assert_array_equal(np.asarray(listed.matrices), np.asarray(single.matrices))
    # The last period as the objective: the mean of the per-iteration starting objectives.
    _, period = tuning.learn_weights(*args, range(8, 11), **{**kw, "num_iterations": 1})
    starts = [tuning.learn_weights(*args, t, **{**kw, "num_iterations": 1})[1].objective_before
              for t in (8, 9, 10)]
    assert period.objective_before == pytest.approx(np.mean(starts), rel=1e-5)  # float32


def test_learn_weights_recovers_two_node_optimum():
    # Two identical agents, d = 1, f_i(x) = x²/2 (a = 1, b = 0): the target is N(0, 1/2).
    # DE-SGLD, one step from x⁽⁰⁾ ~ N(0, s² I), s² = 4, with W = [[1 − w, w], [w, 1 − w]]:
    #   x_1⁽¹⁾ = (1 − w − η) x_1 + w x_2 + √(2η) ξ  ~  N(0, V),  V = s²((1 − w − η)² + w²) + 2η,
    # and W2 = √V − √(1/2) for both agents while V ≥ 1/2. ∂V/∂w = s²(4w − 2(1 − η)) = 0 gives
    # w* = (1 − η)/2: with η = 0.1 fixed, w* = 0.45 (V* = 2(0.9)² + 0.2 = 1.82 ≥ 1/2). With η
    # free too, V(w*(η), η) = 2(1 − η)² + 2η is least at η* = 1/2, so w* = 1/4 and V* = 3/2.
    q = exact.Quadratic(np.ones((2, 1, 1)), np.zeros((2, 1)))
    start = nets.max_degree_weights(np.array([[0, 1], [1, 0]]))  # w = 1/2
    sched, rep = tuning.learn_weights(dgsgld.DESGLD(0.1), q, start, np.zeros(1), 4.0 * np.eye(1), 1,
                                    step_size=0.1, num_iterations=300,
                                    optimizer=optax.adam(0.02))
    assert rep.weights.shape == (1, 1)
    assert abs(rep.weights[0, 0] - 0.45) < 2e-3
    assert abs(rep.objective_after - (np.sqrt(1.82) - np.sqrt(0.5))) < 1e-5
    assert rep.objective_before > rep.objective_after
    assert rep.step_size_after == pytest.approx(0.1, rel=1e-6)
    nets.validate_schedule(sched.matrices, sched.adjacency)


@pytest.mark.slow  # fast twin: test_learn_weights_recovers_two_node_optimum (weights only)
def test_learn_weights_and_step_recover_two_node_optimum():
    # The problem of the fast twin with η free: η* = 1/2, w* = 1/4, V* = 3/2 (derived there).
    q = exact.Quadratic(np.ones((2, 1, 1)), np.zeros((2, 1)))
    start = nets.max_degree_weights(np.array([[0, 1], [1, 0]]))
    _, joint = tuning.learn_weights(dgsgld.DESGLD(0.1), q, start, np.zeros(1), 4.0 * np.eye(1), 1,
                                  step_size=0.1, learn_step_size=True, num_iterations=300,
                                  optimizer=optax.adam(0.02))
    assert abs(joint.step_size_after - 0.5) < 1e-2
    assert abs(joint.weights[0, 0] - 0.25) < 1e-2
    assert abs(joint.objective_after - (np.sqrt(1.5) - np.sqrt(0.5))) < 1e-4


@pytest.mark.slow  # fast twins: the two-node optimum and the parametrization tests
def test_learned_schedule_is_valid_and_lowers_the_exact_w2():
    sched = nets.barbell(6, period=3, seed=2)
    rng = np.random.default_rng(3)
    z = rng.normal(size=(6, 4, 2))
    q = exact.Quadratic(np.swapaxes(z, 1, 2) @ z + 0.1 * np.eye(2), rng.normal(size=(6, 2)))
    out, rep = tuning.learn_weights(dgsgld.DIGingSGLD(0.05), q, sched, np.zeros(2), np.eye(2), 20,
                                  step_size=0.05, num_iterations=15, learning_rate=0.1)
    assert rep.objective_after < rep.objective_before
    nets.validate_schedule(out.matrices, np.asarray(sched.adjacency))
    nets.check_joint_connectivity(out)
    m = exact.exact_moments(dgsgld.DIGingSGLD(0.05), q, out.matrices, np.zeros(2), np.eye(2),
                            20)
    again = float(np.mean(exact.exact_w2(exact.ExactMoments(*(a[-1] for a in m)), *q.target())))
    assert again == pytest.approx(rep.objective_after, rel=1e-5)
    assert rep.spectral_gap_after.shape == (3,) and rep.history.shape == (15,)
    # Several quadratics: the objective is their mean (the same one twice: unchanged start).
    _, twice = tuning.learn_weights(dgsgld.DIGingSGLD(0.05), [q, q], sched, np.zeros(2), np.eye(2),
                                    20, step_size=0.05, num_iterations=1)
    assert twice.objective_before == pytest.approx(rep.objective_before, rel=1e-6)


def test_fastest_mixing_weights_reach_the_path_optimum():
    # Boyd, Diaconis & Xiao (2004): on the path P_n the fastest-mixing chain puts 1/2 on every
    # edge, with μ = cos(π/n). The start (max-degree, 1/3 per edge) has gap 0.089 at n = 6;
    # 300 subgradient steps of length 0.1/√k come within 2e-4 of the optimum (measured:
    # 1.7e-4; the method's error falls like the step, ∝ 1/√k, so 5e-4 is a safe bound).
    n = 6
    W = nets.fastest_mixing_weights(_path(n), num_iterations=300)
    nets.validate_schedule(W, _path(n))
    optimum = 1 - np.cos(np.pi / n)
    gap = float(nets.spectral_gap(W)[0])
    assert optimum - 5e-4 < gap <= optimum + 1e-12
    np.testing.assert_allclose(W[np.arange(n - 1), np.arange(1, n)], 0.5, atol=0.02)


@pytest.mark.slow  # fast twin: test_fastest_mixing_weights_reach_the_path_optimum
def test_fastest_mixing_beats_metropolis_on_a_barbell():
    sched = nets.barbell(8, period=2, seed=0)
    adj = np.asarray(sched.adjacency)
    W = nets.fastest_mixing_weights(adj, num_iterations=300)
    nets.validate_schedule(W, adj)
    assert np.all(nets.spectral_gap(W) > 1.2 * nets.spectral_gap(sched.matrices))
    rule = nets.barbell(8, period=2, seed=0, weights="fastest_mixing")  # as a weight rule
    assert np.all(nets.spectral_gap(rule) > nets.spectral_gap(sched.matrices))


def _two_identical_agents():
    """Two agents, one datum y = 0 each, f_i(x) = x²/2, flat prior (a = 1, b = 0)."""
    return dgsgld.Potential(lambda x, y: -0.5 * (x[0] - y) ** 2, None, jnp.zeros((2, 1)))


@pytest.mark.slow  # compiles dgsgld.sample under grad (~30 s); fast twin: the exact two-node test
def test_learn_weights_by_sampling_finds_the_two_node_optimum():
    # The set-up of test_learn_weights_recovers_two_node_optimum with the chains' variance at
    # T = 1 as criterion: V̂(w) = (c − w)² S₁₁ + w² S₂₂ + 2(c − w) w S₁₂ + (noise terms linear in
    # w), c = 1 − η, S the chains' second moments of x⁽⁰⁾ (4 I in law). Its minimizer is
    # w* = (1 − η)/2 = 0.45 up to the sampling error of S: with C = 4000 chains each S_ab
    # is off by about 4·√(2/C) ≈ 0.09 relative to 4, which moves w* by about 0.45·0.02 + the
    # cross terms, ≈ 0.02; 0.05 is the bound used.
    init = 2.0 * jax.random.normal(jax.random.key(0), (4000, 2, 1))

    def variance(x):
        return jnp.mean(jnp.var(x, axis=0))

    start = nets.max_degree_weights(np.array([[0, 1], [1, 0]]))
    sched, rep = tuning.learn_weights_by_sampling(
        dgsgld.DESGLD(0.1), _two_identical_agents(), start, init, jax.random.key(1), 1,
        variance, num_iterations=200, optimizer=optax.adam(0.02))
    assert abs(rep.weights[0, 0] - 0.45) < 0.05
    assert rep.objective_after < rep.objective_before
    nets.validate_schedule(sched.matrices, sched.adjacency)


@pytest.mark.reliability
def test_learn_weights_by_sampling_refuses_bad_input():
    W = np.full((2, 2), 0.5)
    args = (dgsgld.DESGLD(0.1), _two_identical_agents(), W, jnp.zeros((4, 2, 1)),
            jax.random.key(0), 1)
    with pytest.raises(ValueError, match="`resample_every` must be None or an integer >= 1"):
        tuning.learn_weights_by_sampling(*args, jnp.mean, resample_every=0)
    with pytest.raises(TypeError, match="`criterion` must be a function"):
        tuning.learn_weights_by_sampling(*args, 1.0)


@pytest.mark.reliability
def test_learn_weights_refuses_bad_input():
    q = exact.Quadratic(np.ones((2, 1, 1)), np.zeros((2, 1)))
    W = np.full((2, 2), 0.5)
    args = (q, W, np.zeros(1), np.eye(1), 1)
    with pytest.raises(ValueError, match="`reduce` must be one of"):
        tuning.learn_weights(dgsgld.DESGLD(0.1), *args, step_size=0.1, reduce="median")
    with pytest.raises(ValueError, match="no symmetric mixing weights"):
        tuning.learn_weights(dgsgld.PushSumSGLD(0.1), *args, step_size=0.1)
    with pytest.raises(ValueError, match="`step_size` must be one positive constant"):
        tuning.learn_weights(dgsgld.DESGLD(0.1), *args, step_size=-1.0)
    with pytest.raises(ValueError, match="`num_iterations` must be an integer >= 1"):
        tuning.learn_weights(dgsgld.DESGLD(0.1), *args, step_size=0.1, num_iterations=0)
    with pytest.raises(ValueError, match="`learning_rate` must be a positive number"):
        tuning.learn_weights(dgsgld.DESGLD(0.1), *args, step_size=0.1, learning_rate=0.0)
    for steps, why in (([], "empty"), ([2, 2], "not strictly increasing"),
                       ([3, 1], "not strictly increasing"), ([1, 2.5], "non-integer"),
                       (2.0, "got 2.0"), ([0, 1], "< 1"), (True, "got True")):
        with pytest.raises(ValueError, match=f"`num_steps` must be an integer >= 1 or a "
                                             f"non-empty, strictly increasing.*{why}"):
            tuning.learn_weights(dgsgld.DESGLD(0.1), *args[:4], steps, step_size=0.1)
    with pytest.raises(ValueError, match="no edges"):
        tuning.edge_parametrization(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="`theta` must have shape"):
        tuning.edge_parametrization(W).matrices(np.zeros(3))
    with pytest.raises(ValueError, match="num_iterations must be an integer"):
        nets.fastest_mixing_weights(W, num_iterations=0)


def test_laplace_quadratic_is_exact_for_linear_and_the_map_for_logistic():
    # Linear regression: the Laplace quadratics are the potential's own (one Newton step), so
    # their target is the closed-form posterior (float32 data: 1e-5 relative).
    import scipy.optimize

    from dgsgld.posteriors.problems import linear_regression_problem, logistic_regression_problem
    from experiments.design import laplace_quadratic

    lin = linear_regression_problem(0, num_samples=16, num_agents=4)
    q = laplace_quadratic(lin)
    mean, cov = q.target()
    np.testing.assert_allclose(mean, np.asarray(lin.posterior_mean), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cov, np.asarray(lin.posterior_cov), rtol=1e-5, atol=1e-6)
    # Logistic regression: the target mean is the MAP, found independently by SciPy's BFGS on
    # the NumPy negative log posterior (gradient tolerance 1e-10: the MAP to ~1e-8), and the
    # summed Hessian is Σ σ(1 − σ) z zᵀ + λ I there.
    log = logistic_regression_problem(0, num_samples=60, train_size=32, num_agents=4,
                                      partition="random")
    z = np.asarray(log.features, np.float64).reshape(-1, log.dim)
    y = np.asarray(log.targets, np.float64).ravel()
    lam = 0.1

    def neg_log_post(x):
        t = z @ x
        return np.sum(np.logaddexp(0, t) - y * t) + 0.5 * lam * x @ x

    def grad(x):
        return z.T @ (1 / (1 + np.exp(-(z @ x))) - y) + lam * x

    x_map = scipy.optimize.minimize(neg_log_post, np.zeros(log.dim), jac=grad, method="BFGS",
                                    options={"gtol": 1e-10}).x
    q = laplace_quadratic(log)
    mean, cov = q.target()
    np.testing.assert_allclose(mean, x_map, atol=1e-6)
    s = 1 / (1 + np.exp(-(z @ x_map)))
    hessian = (z * (s * (1 - s))[:, None]).T @ z + lam * np.eye(log.dim)
    np.testing.assert_allclose(np.asarray(q.hessians).sum(0), hessian, rtol=1e-6)


@pytest.mark.slow  # statistical; the bootstrap serves `reproduce design` only (slow:
# test_reproduce_design_small); fast twins of the W2 it resamples: tests/evaluate/test_distances.py
def test_sampled_w2_standard_error_matches_independent_repetitions():
    """The bootstrap over chains against the spread of the plug-in W2 over R independent runs
    of C chains: N = 2 independent agents with N(0, I₂) chains, target N(μ, I₂), |μ| = 1.
    To first order W2_i = |x̄_i − μ|, whose standard deviation is 1/√C, so the mean over the
    agents has standard error 1/√(CN)."""
    from dgsgld import evaluate
    from experiments import design as D

    C, N, p, R, K = 400, 2, 2, 2000, 20
    mu = np.array([1.0, 0.0])
    q = exact.Quadratic(np.broadcast_to(np.eye(p) / N, (N, p, p)), np.broadcast_to(mu / N, (N, p)))
    positions = np.random.default_rng(0).standard_normal((R, C, N, p))
    with jax.enable_x64(True):
        w2 = np.asarray(evaluate.gaussian_w2_to_target(positions, mu, np.eye(p), axis=1)).mean(1)
    truth = np.std(w2, ddof=1)
    truth_se = truth / np.sqrt(2 * (R - 1))        # standard error of a normal sample's sd
    boot = np.array([D._sampled_w2_se(positions[k], q, seed=k) for k in range(K)])
    boot_se = np.std(boot, ddof=1) / np.sqrt(K)    # of their mean over K independent runs
    # The two estimate the same number; 4 standard errors of their difference.
    assert abs(boot.mean() - truth) < 4 * np.hypot(boot_se, truth_se)
    # First order: 1/√(CN); the covariance term and the bias of the fit are O(1/C).
    assert abs(truth - 1 / np.sqrt(C * N)) < 4 * truth_se + 1 / C
    assert np.isnan(D._sampled_w2_se(np.full((C, N, p), np.inf), q))


@pytest.mark.slow  # about 2 min; fast twins: the learn_weights, fastest-mixing, Laplace tests
def test_reproduce_design_small(tmp_path):
    import json

    from _commands import main

    assert main(["reproduce", "design", "--small", "--quiet", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "design.json").read_text())
    assert (tmp_path / "design.md").read_text() == record["table"]
    figures = record["settings"]["figures"]
    assert figures == ["fig2a", "fig2b", "fig3a"]
    # header, rule, then 10 weight rows per figure (11 with learning by sampling in 2(b))
    assert len(record["table"].strip().splitlines()) == 2 + 10 * len(figures) + 1
    for figure in figures:
        rows = record["results"][figure]["DIGing-SGLD"]
        base = rows["Metropolis (eq. 4.1)"]
        assert rows["fastest mixing"]["spectral_gap"] > base["spectral_gap"]
        assert len(base["heldout_w2"]) == record["settings"]["heldout"]
        if figure == "fig2b":  # sampled: no stationary law; learned through dgsgld.sample
            assert base["stationary_w2"] is None and "learned by sampling" in rows
            # Monte Carlo standard errors of the sampled score: positive, far below the score.
            assert 0 < base["w2_se"] < 0.2 * base["w2"]
            assert len(base["heldout_w2_se"]) == len(base["heldout_w2"])
            assert f"{base['w2']:.4f} ± {base['w2_se']:.4f}" in record["table"]
            continue
        assert base["w2_se"] is None and base["heldout_w2_se"] is None
        for name in ("learned per snapshot", "learned per snapshot and η"):
            # Started at Metropolis, the best iterate is never worse on the training draw
            # (float32 learning, float64 scores: 1e-5 of rounding allowed).
            assert rows[name]["w2"] <= base["w2"] + 1e-5
        # Started at the better re-tuned baseline, learning on two draws: the training draw's
        # W2 may rise (the objective is the mean over both) but the step is the baseline's.
        (name,) = [n for n in rows if n.endswith("re-tuned η") and "training draws, from" in n]
        start = rows[name.split("from ")[1]]
        assert rows[name]["step_size"] == start["step_size"]
        if figure.startswith("fig3"):  # the paper's score, sampled: an accuracy in [0, 1]
            assert 0.5 < base["accuracy"] <= 1 and len(base["heldout_accuracy"]) == 2
