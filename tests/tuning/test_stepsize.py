"""Step-size proposal: exact curvature on a Gaussian model, the pilot's ranges, the warnings,
and (slow) the proposal against the paper's tuned step sizes."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld import evaluate, networks
from dgsgld import tuning as stepsize

N, D, n = 4, 2, 6
rng = np.random.default_rng(0)
Z = rng.standard_normal((N, n, D)).astype(np.float32)
Y = rng.standard_normal((N, n)).astype(np.float32)
PRIOR = 0.5


def log_likelihood(x, datum):
    z, y = datum
    return -0.5 * (z @ x - y) ** 2


def potential():
    return dgsgld.Potential(log_likelihood, lambda x: -0.5 * PRIOR * x @ x, (Z, Y))


def assert_explained(report):
    """The first sentence of ``explain()`` names the proposal and the criterion that chose it,
    in agreement with the report's own ranges: inside the accurate range it says so; outside
    it, it names the best-scoring accurate step and what the proposal gives up for its score."""
    first = report.explain().splitlines()[0]
    i = int(np.flatnonzero(report.step_sizes == report.step_size)[0])
    accurate = report.accurate
    assert first.startswith(f"Proposed step size {report.step_size:.4g} ")
    if report.score is None:
        assert accurate[i] and report.step_size == report.accurate_range[1]
        assert "the largest step of the accurate range" in first
    elif accurate[i]:
        assert f"({report.score[i]:.4g}), inside the accurate range" in first
    else:
        j = int(np.argmax(np.where(accurate, report.score, -np.inf)))
        assert "chosen by score_fn over the spread criterion" in first
        assert (f"mean score {report.score[i]:.4g} against {report.score[j]:.4g} at "
                f"{report.step_sizes[j]:.4g}") in first
        assert f"(pass {report.step_sizes[j]:.4g} for accurate samples)." in first
        above = report.step_size > report.step_sizes[j]
        # above the accurate range it names the bias given up: the exact law's where the
        # proposer solved it, else the pilot's spread
        biased = "spread is" in first or "exact stationary sd ratio" in first
        assert biased == above and ("not reached" in first) == (not above)


def _check_local_curvature():
    """The per-agent and pooled curvatures against the Hessians' eigenvalues; returns the
    pooled one."""
    # f_i(x) = ½ Σ_j (z_jᵀx − y_j)² + PRIOR ‖x‖² / (2N): Hessian Z_iᵀZ_i + PRIOR/N I, exactly.
    want = np.linalg.eigvalsh(np.einsum("inp,inq->ipq", Z, Z) + PRIOR / N * np.eye(D))[:, -1]
    got = stepsize.local_curvature(potential(), jnp.zeros((N, D)), jax.random.key(0))
    # Power iteration converges like (λ₂/λ₁)^(2k); 50 iterations on a 2x2 problem: float32.
    assert np.allclose(got, want, rtol=1e-4)
    # Pooled (centralized SGLD's): f = Σ_i f_i at one point, Hessian Σ_i Z_iᵀZ_i + PRIOR I.
    pooled = np.linalg.eigvalsh(np.einsum("inp,inq->pq", Z, Z) + PRIOR * np.eye(D))[-1]
    got = stepsize.local_curvature(potential(), jnp.zeros((1, D)), jax.random.key(0),
                                   pooled=True)
    assert got.shape == (1,) and np.allclose(got, pooled, rtol=1e-4)
    return pooled


def test_local_curvature_per_agent_and_pooled():
    # The curvature checks of the test below, without its pilot run of centralized SGLD.
    _check_local_curvature()


@pytest.mark.slow  # fast twin: test_local_curvature_per_agent_and_pooled (the curvatures; the
# proposer's pilot: test_proposal_lies_in_the_stable_range_and_warnings_fire_outside)
def test_local_curvature_is_the_largest_hessian_eigenvalue():
    pooled = _check_local_curvature()
    # The proposer takes it for a centralized sampler on the agents' potential (it measured
    # a (1, D) point against N agents before, and failed).
    init = jnp.asarray(rng.standard_normal((8, D)), jnp.float32)
    report = stepsize.propose_step_size(dgsgld.SGLD, potential(), None, init,
                                        jax.random.key(1), num_steps=20, num_step_sizes=3)
    np.testing.assert_allclose(report.step_sizes[-1], 3.0 / pooled, rtol=1e-4)


def test_proposal_lies_in_the_stable_range_and_warnings_fire_outside():
    init = jnp.asarray(rng.standard_normal((16, N, D)), jnp.float32)
    report = stepsize.propose_step_size(dgsgld.DIGingSGLD, potential(), networks.ring(N),
                                        init, jax.random.key(1), num_steps=100,
                                        num_step_sizes=9)
    low, high = report.accurate_range
    assert report.stable_range[0] <= low <= high == report.step_size <= report.stable_range[1]
    # The grid's top, 3/L, is beyond gradient descent's stability limit 2/L of the stiffest
    # agent on this full-batch Gaussian model, so the pilot must flag it.
    assert not report.stable[-1]
    assert np.all(report.spread[report.stable] > 0)
    # The accurate range comes from the exact stationary law on the model's quadratic at
    # curvature_at (the model is Gaussian: that quadratic is the model): within the
    # tolerances at the proposal, not at the next grid step, which would otherwise have been
    # proposed. Checked against dgsgld.theory directly (float32 Hessians: 1e-3).
    # The law is taken where the pilot's chains ended (law_step); the model is Gaussian, so
    # the Hessians there are the model's and the averaged linearization is the model itself.
    assert report.law_step == report.step_sizes[np.flatnonzero(report.stable)[-2]]
    i = int(np.flatnonzero(report.step_sizes == report.step_size)[0])
    assert report.law == "exact" and report.accurate[i]
    assert i + 1 == len(report.step_sizes) or not report.accurate[i + 1]
    A = np.einsum("inp,inq->ipq", Z, Z).astype(np.float64) + PRIOR / N * np.eye(D)
    b = np.einsum("inp,in->ip", Z, Y).astype(np.float64)
    quadratic = dgsgld.theory.Quadratic(A, b)
    law = dgsgld.theory.stationary_moments(dgsgld.DIGingSGLD(report.step_size), quadratic,
                                           networks.ring(N))
    mu, sigma = quadratic.target()
    m = law.mean[0].mean(0)
    cov = np.mean(law.cov[0] + np.einsum("ia,ib->iab", law.mean[0], law.mean[0]), 0) \
        - np.outer(m, m)
    Li = np.linalg.inv(np.linalg.cholesky(sigma))
    ratio = np.exp(np.max(np.abs(0.5 * np.log(np.linalg.eigvalsh(Li @ cov @ Li.T)))))
    np.testing.assert_allclose(report.stationary_sd_ratio[i], ratio, rtol=1e-3)
    np.testing.assert_allclose(report.stationary_mean_error[i], np.linalg.norm(Li @ (m - mu)),
                               atol=1e-3)
    # The predicted error: bias of the worst sd and mean squared, plus 1.5 τ / draws with the
    # law's slowest contraction (τ = (1 + ρ)/(1 − ρ)) and 16 chains x 2 000 sampling steps.
    rho = float(law.spectral_radius)
    np.testing.assert_allclose(report.spectral_radius[i], rho, rtol=1e-5)
    want = (ratio - 1) ** 2 + float(np.linalg.norm(Li @ (m - mu))) ** 2 \
        + 1.5 * (1 + rho) / (1 - rho) / (16 * 2000)
    np.testing.assert_allclose(report.predicted_error[i] ** 2, want, rtol=1e-2, atol=1e-6)
    assert_explained(report)
    assert stepsize.check_step_size(report.step_size, report)
    with pytest.warns(RuntimeWarning, match="above the stable range"):
        assert not stepsize.check_step_size(2 * report.stable_range[1], report)
    if report.accurate_range[1] < report.stable_range[1]:
        with pytest.warns(RuntimeWarning, match="largest accurate step"):
            stepsize.check_step_size(report.stable_range[1], report)


def test_the_proposal_says_when_its_slowest_direction_will_not_mix():
    # Pooled precision diag(400, 1): the largest accurate step (stationary sd ratio within
    # 1.1) is set by the stiff direction, where the flat one relaxes at η/N per step (the
    # network average of N agents). Chains start 20 posterior sds out along the flat
    # direction. The proposal for a run of T steps is accurate, and its explanation says that
    # the flat direction will not mix in the run, which the draws confirm: after 2T steps
    # (T kept) the flat mean is still many sds out, while the stiff direction's sd ratio is
    # the law's.
    a = np.array([[[100.0, 0.25]]] * N, np.float32)                     # (N, 1, 2)
    m = np.array([[[0.1, 1.0]], [[-0.1, -1.0]], [[0.05, 2.0]], [[-0.05, -2.0]]], np.float32)
    pot = dgsgld.Potential(lambda x, d: -0.5 * jnp.sum(d[0] * (x - d[1]) ** 2),
                           lambda x: 0.0 * jnp.sum(x), (a, m))
    mean = (a[:, 0] * m[:, 0]).sum(0) / a[:, 0].sum(0)
    sd = 1.0 / np.sqrt(a[:, 0].sum(0))                                  # (0.05, 1)
    C, T = 16, 2000
    init = jnp.broadcast_to(jnp.asarray(mean + np.array([0.0, 20.0]) * sd, jnp.float32),
                            (C, N, 2))
    report = stepsize.propose_step_size(dgsgld.DIGingSGLD, pot, networks.ring(N), init,
                                        jax.random.key(0), sampling_steps=T)
    assert_explained(report)
    assert report.step_size == report.accurate_range[1]
    first = report.explain().splitlines()[0]
    assert "its slowest direction decorrelates in about" in first
    assert "mostly Monte Carlo error" in first
    trace = dgsgld.sample(dgsgld.DIGingSGLD(report.step_size), pot, networks.ring(N), init,
                          jax.random.key(1), 2 * T)
    x = np.asarray(trace.positions)[:, T:].reshape(-1, 2)
    z = np.abs(x.mean(0) - mean) / sd
    # The flat mean's error is a deterministic relaxation from 20 sds (e^{-ηt/N} over the kept
    # half); its Monte Carlo error is ~0.3 sd, far below the margin.
    assert z[1] > 5.0, z
    # The stiff direction relaxes in ~10 steps: an ESS of ~3 000 over 16 chains x T and a
    # standard error of 1/√(2 ESS) ~ 0.013 on the sd ratio; 0.07 is 5 of them.
    i = int(np.flatnonzero(report.step_sizes == report.step_size)[0])
    assert abs(x[:, 0].std() / sd[0] - report.stationary_sd_ratio[i]) < 0.07


def test_curvature_is_measured_at_the_pooled_mode():
    # A logistic regression curves most at zero (σ'(0) = 1/4 is the largest slope): with
    # at_mode the proposer measures each agent's curvature at the pooled potential's mode,
    # reached by Newton steps from the start; here the mode is found independently by Newton
    # on Potential.value (autodiff, float64 arithmetic), and local_curvature there (the same
    # power iteration, another key: float32 estimates agreeing to 1e-3) is what the report
    # holds. By default it holds the start's, larger.
    z = rng.standard_normal((N, 25, D)).astype(np.float32)
    labels = (z @ np.array([3.0, -2.0]) + rng.logistic(size=(N, 25)) > 0).astype(np.float32)

    def ll(x, datum):
        zz, y = datum
        return y * jax.nn.log_sigmoid(zz @ x) + (1 - y) * jax.nn.log_sigmoid(-(zz @ x))

    pot = dgsgld.Potential(ll, lambda x: -0.05 * x @ x, (z, labels))
    init = jnp.zeros((4, N, D))
    args = (dgsgld.DIGingSGLD, pot, networks.ring(N), init, jax.random.key(0))
    kw = {"num_steps": 20, "num_step_sizes": 4}
    report = stepsize.propose_step_size(*args, **kw, at_mode=True)
    value = jax.jit(lambda x: pot.value(x))
    grad, hess = jax.jit(jax.grad(value)), jax.jit(jax.hessian(value))
    mode = np.zeros(D)
    for _ in range(20):
        x = jnp.asarray(mode, jnp.float32)
        mode = mode - np.linalg.solve(np.asarray(hess(x), np.float64),
                                      np.asarray(grad(x), np.float64))
    at_mode = stepsize.local_curvature(pot, jnp.broadcast_to(jnp.asarray(mode, jnp.float32),
                                                             (N, D)), jax.random.key(9))
    assert report.mode_steps >= 1 and "at the pooled potential's mode" in report.explain()
    np.testing.assert_allclose(report.curvature, at_mode, rtol=1e-3)
    start = stepsize.propose_step_size(*args, **kw)
    assert start.mode_steps == 0
    assert np.all(start.curvature > 1.5 * report.curvature)
    # By default the exact law is taken where the pilot's chains went, which curves less than
    # the start: its accurate steps reach at least as far as with the law at the start.
    at_start = stepsize.propose_step_size(*args, **kw, curvature_at=jnp.zeros((N, D)))
    assert start.law_step is not None and at_start.law_step is None
    assert start.step_size >= at_start.step_size
    assert np.all(start.stationary_sd_ratio[:3] <= at_start.stationary_sd_ratio[:3] + 1e-6)


@pytest.mark.parametrize("dim, law", [
    # fast twin of the dense law's case: test_a_proposal_held_down_by_mini_batch_noise_...
    # (plain and SVRG errors in the exact law)
    pytest.param(D, "exact", marks=pytest.mark.slow),
    (70, "modal")])
def test_the_law_takes_a_control_variates_gradient_error(dim, law):
    # A linear regression whose data's features vary in scale (a datum's gradient difference
    # z zᵀ (x − a) varies with the datum, so SVRG's control variate errs), the law taken at
    # one point: the curvature is the same for every estimator, only the gradient error
    # differs. Exact gradients carry none; SVRG's error around anchors as far as the noise
    # moves an agent in the anchor's age (10 steps) is positive; plain mini-batches' at the
    # centre, where a datum's residual enters, is far larger. Every grid step's stationary sd ratio (a deterministic law of the same
    # quadratics: no Monte Carlo error) is ordered the same way, strictly where the step
    # exceeds a hundredth of the largest: its bias grows like ηκ/2 in the noise ratio κ. At
    # d = 70 (N d above the dense law's size) the law is the scalar mode's, with κ.
    r = np.random.default_rng(3)
    z = (r.normal(size=(N, 40, dim)) * r.uniform(0.3, 3.0, size=(N, 40, 1))).astype(np.float32)
    y = (z @ np.tile([1.0, -1.0], dim // 2) + r.normal(size=(N, 40))).astype(np.float32)
    prior = lambda x: -0.5 * x @ x  # noqa: E731
    at = jnp.broadcast_to(jnp.asarray(np.tile([1.0, -1.0], dim // 2), jnp.float32), (N, dim))
    init = jnp.asarray(r.normal(size=(4, N, dim)), jnp.float32)
    ratios, proposals = {}, {}
    for name, batch, make in (
            ("exact", None, dgsgld.DIGingSGLD),
            ("svrg", 2, lambda h: dgsgld.DIGingSGLD(h, estimator=dgsgld.gradients.svrg(20))),
            ("plain", 2, dgsgld.DIGingSGLD)):
        pot = dgsgld.Potential(log_likelihood, prior, (z, y), batch_size=batch)
        report = stepsize.propose_step_size(make, pot, networks.ring(N), init,
                                            jax.random.key(0), num_steps=20,
                                            num_step_sizes=6, curvature_at=at)
        assert report.law == law
        ratios[name] = (report.step_sizes, report.stationary_sd_ratio)
        proposals[name] = report.step_size
        assert (report.gradient_noise > 0) == (name != "exact")
    grid = ratios["exact"][0]
    for name in ratios:
        np.testing.assert_array_equal(ratios[name][0], grid)
    exact, svrg, plain = (ratios[k][1] for k in ("exact", "svrg", "plain"))
    finite = np.isfinite(plain)
    large = finite & (grid > grid[finite].max() / 100)
    assert large.sum() >= 2
    assert np.all(svrg[finite] >= exact[finite] - 1e-9)
    assert np.all(svrg[large] > exact[large] + 1e-6), (svrg, exact)
    assert np.all(plain[large] > svrg[large]), (plain, svrg)
    # The accurate steps follow the laws: the proposals are ordered the same way.
    assert proposals["plain"] <= proposals["svrg"] <= proposals["exact"]


def test_a_proposal_held_down_by_mini_batch_noise_names_the_control_variate():
    # Mini-batches of 1 of 4000 data per agent, residuals of sd 3: the gradient error along a
    # direction has variance about n · 9 · λ per unit curvature λ: κ of about 3e4. The
    # network average is SGLD at step h = η/N with that error, whose stationary variance is
    # (1 + h κ λ_tot / 2) times the posterior's: 4 times at the grid's smallest step, so no
    # step is accurate, and the report says why and what lowers it. SVRG (refreshed every 10
    # steps) errs by the anchor's distance only: about 0.3 times the curvature at a step 25
    # times larger, inside the accurate range.
    r = np.random.default_rng(0)
    z = r.normal(size=(N, 4000, D)).astype(np.float32)
    y = (z @ np.array([1.0, -1.0]) + 3 * r.normal(size=(N, 4000))).astype(np.float32)
    pot = dgsgld.Potential(log_likelihood, lambda x: -0.5 * x @ x, (z, y), batch_size=1)
    init = jnp.asarray(r.normal(size=(4, N, D)), jnp.float32)
    at = jnp.broadcast_to(jnp.asarray([1.0, -1.0], jnp.float32), (N, D))
    plain, svrg = (stepsize.propose_step_size(make, pot, networks.ring(N), init,
                                              jax.random.key(0), num_steps=20,
                                              num_step_sizes=6, curvature_at=at)
                   for make in (dgsgld.DIGingSGLD, lambda h: dgsgld.DIGingSGLD(
                       h, estimator=dgsgld.gradients.svrg(10))))
    assert not plain.accurate.any() and plain.gradient_noise > 1e4
    assert plain.stationary_sd_ratio[0] > 2.0
    text = plain.explain()
    assert "no step is accurate" in text and "estimator=gradients.svrg(m)" in text
    assert svrg.accurate.any() and 0 < svrg.gradient_noise < 1
    assert svrg.step_size > 10 * plain.step_size
    assert "estimator=gradients.svrg(m)" not in svrg.explain()


def test_the_noise_reach_of_a_control_variates_anchor():
    # The Langevin noise injected k steps back has been mixed k times: on the complete graph
    # (W = 11ᵀ/N) a mixed step's noise keeps 1/N of its variance in each agent, so a steps
    # of noise reach 1 + (a − 1)/N (a fractional last step counts in part); without mixing
    # (centralized, or a schedule with no stored matrices) they reach a.
    from dgsgld.tuning.adaptation import _noise_reach
    assert _noise_reach(networks.complete(4), 10) == pytest.approx(1 + 9 / 4)
    assert _noise_reach(networks.complete(4), 2.5) == pytest.approx(1 + 1 / 4 + 0.5 / 4)
    assert _noise_reach(None, 10) == 10.0
    ring = _noise_reach(networks.ring(4), 10)
    assert 1 + 9 / 4 < ring < 10
    # On a flat potential DIGing-SGLD's tracker stays 0 and chains started in consensus move by
    # their noise alone: after 10 steps every agent's displacement has variance 2η · reach
    # per coordinate on the ring. From 2 000 chains x 2 coordinates a variance's relative
    # standard error is √(2 / 4000) ≈ 2.2 %; 10 % is over four of them for each of 4 agents.
    eta = 0.01
    flat = dgsgld.Potential(lambda x, datum: 0.0 * jnp.sum(x * datum), None,
                            jnp.ones((N, 1, D)))
    end = dgsgld.sample(dgsgld.DIGingSGLD(eta), flat, networks.ring(N), jnp.zeros((2000, N, D)),
                        jax.random.key(0), 10).state.position
    var = np.mean(np.asarray(end, np.float64) ** 2, axis=(0, 2))          # (N,)
    np.testing.assert_allclose(var, 2 * eta * ring, rtol=0.1)


def test_bad_arguments():
    init = jnp.zeros((2, N, D))
    with pytest.raises(ValueError, match="at least 4 chains"):
        stepsize.propose_step_size(dgsgld.DIGingSGLD, potential(), networks.ring(N), init,
                                   jax.random.key(0))
    with pytest.raises(ValueError, match="`num_steps` must be an even integer"):
        stepsize.propose_step_size(dgsgld.DIGingSGLD, potential(), networks.ring(N),
                                   jnp.zeros((4, N, D)), jax.random.key(0), num_steps=3)
    with pytest.raises(ValueError, match="`spread_tolerance`"):
        stepsize.propose_step_size(dgsgld.DIGingSGLD, potential(), networks.ring(N),
                                   jnp.zeros((4, N, D)), jax.random.key(0), spread_tolerance=1)
    with pytest.raises(ValueError, match="`at_mode`"):
        stepsize.propose_step_size(dgsgld.DIGingSGLD, potential(), networks.ring(N),
                                   jnp.zeros((4, N, D)), jax.random.key(0), at_mode=1)
    with pytest.raises(ValueError, match="`sampling_steps` must be a positive integer"):
        stepsize.propose_step_size(dgsgld.DIGingSGLD, potential(), networks.ring(N),
                                   jnp.zeros((4, N, D)), jax.random.key(0), sampling_steps=0)


@pytest.mark.slow  # fast twins: tests/tuning/test_tuning.py::test_every_grid_point_and_split_is_a_plain_
# run_with_the_same_draws (the grid runner's score_fn of plain runs, same draws), test_explanation_
# says_which_criterion_chose_the_step_and_what_it_gives_up (a score's choice, explained)
def test_score_is_the_users_criterion_on_the_pilots_final_samples():
    # The pilot's score at a grid step is score_fn of the positions a plain dgsgld.sample run
    # at that step reaches after num_steps iterations with the pilot's key (the second half of
    # split(key)) and chains: same key, same draws. Checked at the proposal, which must be the
    # stable grid step with the best mean score.
    init = jnp.asarray(rng.standard_normal((8, N, D)), jnp.float32)
    key = jax.random.key(3)
    target = jnp.asarray([[[0.3, -0.2]]], jnp.float32)  # (1, 1, D)
    score = lambda x: -jnp.mean(jnp.sum((x - target) ** 2, -1), -1)
    report = stepsize.propose_step_size(dgsgld.DIGingSGLD, potential(), networks.ring(N), init,
                                        key, num_steps=40, num_step_sizes=7, score_fn=score)
    i = int(np.argmax(np.where(report.stable, report.score, -np.inf)))
    assert report.step_size == report.step_sizes[i]
    trace = dgsgld.sample(dgsgld.DIGingSGLD(jnp.float32(report.step_size)), potential(),
                          networks.ring(N), init, jax.random.split(key)[1], 40)
    per_chain = np.asarray(score(trace.state.position))
    np.testing.assert_allclose(report.score[i], per_chain.mean(), rtol=1e-4)
    np.testing.assert_allclose(report.score_se[i], per_chain.std(ddof=1) / np.sqrt(8),
                               rtol=1e-3)
    # The consensus column is the package's one aggregate over chains, the root mean square
    # (evaluate.ensemble_consensus_error), not the smaller mean over chains (Jensen).
    final = trace.state.position
    np.testing.assert_allclose(report.consensus[i], evaluate.ensemble_consensus_error(final),
                               rtol=1e-4)
    mean = float(np.mean(evaluate.consensus_error(final)))
    assert report.consensus[i] > (1 + 1e-3) * mean
    assert "score" in report.explain()
    assert_explained(report)
    with pytest.raises(ValueError, match=r"shape \(8,\) for the pilot's 8 chains; got \(8, 4\)"):
        stepsize.propose_step_size(dgsgld.DIGingSGLD, potential(), networks.ring(N), init,
                                   key, score_fn=lambda x: x[..., 0])


def _report(score, inflation, consensus, pick):
    """A report on a 5-point grid, all stable, with the given per-step columns, as
    propose_step_size builds it; ``pick``: the index of the proposal."""
    grid = np.geomspace(1e-3, 1e-1, 5)
    inflation = np.asarray(inflation, float)
    accurate = np.flatnonzero(inflation <= 1.5)
    if not accurate.size:  # as the proposer does: the least inflated step alone
        accurate = np.array([np.argmin(inflation)])
    return stepsize.StepSizeReport(
        step_size=float(grid[pick]), stable_range=(grid[0], grid[-1]),
        accurate_range=(grid[accurate[0]], grid[accurate[-1]]), step_sizes=grid,
        spread=np.ones(5), inflation=inflation, consensus=np.asarray(consensus, float),
        stable=np.ones(5, bool), curvature=np.array([10.0]), spectral_gap=0.5,
        spread_tolerance=1.5, num_steps=100, num_chains=8,
        score=None if score is None else np.asarray(score, float))


def test_explanation_says_which_criterion_chose_the_step_and_what_it_gives_up():
    # Score and spread criterion disagree: the accurate steps are 1-3, the best score at step
    # 4 (above them; step 2 scores best among the accurate ones) or at step 0 (below them).
    inflation, consensus = [2.0, 1.2, 1.0, 1.4, 3.0], [0.1, 0.2, 0.4, 0.6, 0.92]
    above = _report([0.1, 0.5, 0.7, 0.6, 0.8], inflation, consensus, pick=4)
    first = above.explain().splitlines()[0]
    assert first == (
        "Proposed step size 0.1 (η·L = 1): chosen by score_fn over the spread criterion: mean "
        "score 0.8 against 0.7 at 0.01, the best-scoring step of the accurate range "
        "[0.003162, 0.03162]; what it gives up: at the proposal the worst agent's spread is "
        "3x its smallest (tolerance 1.5) and the consensus error 0.92 (0.4 there): the agents' "
        "samples are biased, less faithful to the posterior (pass 0.01 for accurate samples).")
    below = _report([0.9, 0.5, 0.7, 0.6, 0.1], inflation, consensus, pick=0)
    assert "at the proposal the chains had not reached their spread in 100 iterations" in \
        below.explain().splitlines()[0]
    # Agreeing criteria, the spread criterion alone, and no accurate step at all.
    inside = _report([0.1, 0.5, 0.9, 0.6, 0.8], inflation, consensus, pick=2)
    plain = _report(None, inflation, consensus, pick=3)
    for report in (above, below, inside, plain):
        assert_explained(report)
    assert "Accurate (every agent's spread <= 1.5 x its smallest): [0.003162, 0.03162]." in \
        plain.explain()
    # A law of one scalar mode (large models) says what it cannot see; the dense law does not.
    law = {"stationary_sd_ratio": np.full(5, 1.05), "stationary_mean_error": np.zeros(5),
           "tol_sd": 0.1, "tol_mean": 0.1}
    modal = plain._replace(**law, law="modal", step_size=plain.step_sizes[-2])
    assert "does not see how slowly the flattest directions mix" in modal.explain()
    assert "flattest" not in modal._replace(law="exact").explain()
    none = _report(None, [2.0, 1.8, 1.6, 1.9, 3.0], consensus, pick=2)
    assert none.explain().splitlines()[0].endswith(
        "no step is accurate; the one whose worst agent's spread is least inflated.")
    assert "1.5 x its smallest): none; the closest is 0.01, where the worst agent's spread is " \
        "1.6x its smallest." in none.explain()


@pytest.mark.slow  # fast twin: test_explanation_says_which_criterion_chose_the_step_and_...
def test_a_score_preferring_unconverged_chains_is_explained_by_its_mixing():
    # Chains start N(0, 1), wider than the posterior: at the grid's smallest step they barely
    # move in 40 iterations, so a score rewarding spread-out samples is best there. The exact
    # law calls that step accurate (its stationary bias is the smallest), so the explanation
    # must name the cost instead: its relaxation time leaves the sampling run mostly Monte
    # Carlo error, against the largest accurate step's smaller predicted error.
    init = jnp.asarray(np.random.default_rng(0).standard_normal((8, N, D)), jnp.float32)
    report = stepsize.propose_step_size(
        dgsgld.DIGingSGLD, potential(), networks.ring(N), init, jax.random.key(3),
        num_steps=40, num_step_sizes=7, score_fn=lambda x: jnp.mean(jnp.abs(x), axis=(1, 2)))
    assert report.step_size == report.step_sizes[0] and report.accurate[0]
    k = int(np.flatnonzero(report.accurate)[-1])
    assert k > 0 and report.predicted_error[0] > 2 * report.predicted_error[k]
    first = report.explain().splitlines()[0]
    assert "mostly Monte Carlo error" in first
    assert (f"(the largest accurate step {report.step_sizes[k]:.4g} predicts "
            f"{report.predicted_error[k]:.3g} sd)") in first
    assert_explained(report)
    assert stepsize.check_step_size(report.step_size, report)  # inside the range: no warning


@pytest.mark.slow  # default run: the stable-range proposal and the score's explanation (above)
def test_grid_continues_upwards_while_the_best_score_is_at_its_stable_top():
    # Logistic regression with a flat prior: every datum's gradient is bounded by |z| = 1, so
    # nothing overflows, and the drift η∇ (up to η n per agent and step) makes the samples'
    # norm grow with η. A score rewarding the norm is best at the top of every stable grid: the
    # grid is continued twice (_MAX_EXTENSIONS), by num_step_sizes points at its spacing each
    # time. The chains travel ~10 η in the 20 steps: past the divergence bound 1e8 x max(1,
    # max|x⁰|) (|x⁰| ~ 1) for η above ~1e7, inside the last extension, where the pilot counts
    # them diverged, as dgsgld.sample does.
    own = np.random.default_rng(11)
    z = np.where(own.standard_normal((N, n, 1)) > 0, 1.0, -1.0).astype(np.float32)
    y = (own.uniform(size=(N, n)) < 0.5).astype(np.float32)
    pot = dgsgld.Potential(lambda x, d: d[1] * (d[0] @ x) - jax.nn.softplus(d[0] @ x),
                           None, (z, y))
    init = jnp.asarray(own.standard_normal((16, N, 1)), jnp.float32)
    report = stepsize.propose_step_size(dgsgld.DIGingSGLD, pot, networks.ring(N), init,
                                        jax.random.key(4), num_steps=20, num_step_sizes=4,
                                        score_fn=lambda x: jnp.mean(jnp.abs(x)))
    lmax = report.curvature.max()
    ratio = 3000.0 ** (1 / 3)  # 4 points over [1e-3, 3] / L
    np.testing.assert_allclose(report.step_sizes * lmax, 1e-3 * ratio ** np.arange(12),
                               rtol=1e-4)
    assert report.score_se is None  # a scalar score
    k = int(report.stable.sum())
    assert report.stable[:k].all() and 8 < k < 12, report.stable  # cut in the last extension
    assert report.step_size == report.step_sizes[k - 1]  # the best score at the stable top
    # The pilot's verdict is sample's with its defaults: the proposal runs, the next step raises.
    run = lambda eta: dgsgld.sample(dgsgld.DIGingSGLD(float(eta)), pot,
                                    networks.ring(N), init, jax.random.key(5), 20)
    assert not np.asarray(run(report.step_size).diverged).any()
    with pytest.raises(dgsgld.DivergenceError, match="divergence_threshold = 1e"):
        run(report.step_sizes[k])


# The paper's step sizes were tuned for W2 after 100 iterations (Fig. 2) or test accuracy
# (Fig. 3) on a grid (docs/figures/*.json). The proposer gets the same criterion as a
# score_fn, after a pilot as long as the figure's runs: Fig. 2 minus the W2 of the agents'
# Gaussian fits to the exact posterior, Fig. 3 the accuracy of a validation split (never the
# test set) (experiments.proposals; table in docs/results/step-sizes.md).
PAPER = [(fig, alg) for fig in ("fig2a", "fig2b", "fig2c", "fig3a", "fig3b", "fig3c")
         for alg in ("DIGing-SGLD", "DE-SGLD")]


@pytest.mark.slow
@pytest.mark.parametrize("fig,alg", PAPER)
def test_proposal_against_the_papers_tuned_step(fig, alg):
    from experiments import proposals

    report = proposals.paper_case(fig, alg)
    tuned = json.loads((Path(__file__).resolve().parents[2] / "docs" / "figures" /
                        f"{fig}.json").read_text())["algorithms"][alg]
    assert 0.5 <= report.step_size / tuned["step_size"] <= 2.0, (report.step_size, tuned)


@pytest.mark.slow  # fast twins: test_local_curvature_per_agent_and_pooled (the curvature),
# tests/evaluate/test_diagnostics.py::test_statistics_of_an_equinox_mlp_skip_its_non_array_leaves
# (an equinox model's static leaves skipped)
def test_curvature_of_an_equinox_model_with_static_leaves():
    eqx = pytest.importorskip("equinox")
    # depth=0: y = final_activation(W x + b) with the identity, so the model is linear in
    # (W, b) and the Hessian of f_i is Σ_j (z_j, 1)(z_j, 1)ᵀ + PRIOR/N I exactly; the MLP's
    # activation functions are non-array (static) leaves.
    mlp = eqx.nn.MLP(D, "scalar", 4, 0, key=jax.random.key(0))
    pot = dgsgld.Potential(
        lambda m, d: -0.5 * (m(d[0]) - d[1]) ** 2,
        lambda m: -0.5 * PRIOR * sum(jnp.sum(w**2) for w in
                                     jax.tree.leaves(eqx.filter(m, eqx.is_array))),
        (Z, Y))
    position = jax.tree.map(lambda a: jnp.broadcast_to(a, (N, *a.shape))
                            if eqx.is_array(a) else a, mlp)
    z1 = np.concatenate([Z, np.ones((N, n, 1), np.float32)], axis=-1)
    want = np.linalg.eigvalsh(np.einsum("inp,inq->ipq", z1, z1) + PRIOR / N * np.eye(D + 1))
    got = stepsize.local_curvature(pot, position, jax.random.key(1))
    assert np.allclose(got, want[:, -1], rtol=1e-3)
