"""Step-size proposal: exact curvature on a Gaussian model, the pilot's ranges, the warnings,
and (slow) the proposal against the paper's tuned step sizes."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld import networks, stepsize

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


def test_local_curvature_is_the_largest_hessian_eigenvalue():
    # f_i(x) = ½ Σ_j (z_jᵀx − y_j)² + PRIOR ‖x‖² / (2N): Hessian Z_iᵀZ_i + PRIOR/N I, exactly.
    want = np.linalg.eigvalsh(np.einsum("inp,inq->ipq", Z, Z) + PRIOR / N * np.eye(D))[:, -1]
    got = stepsize.local_curvature(potential(), jnp.zeros((N, D)), jax.random.key(0))
    # Power iteration converges like (λ₂/λ₁)^(2k); 50 iterations on a 2x2 problem: float32.
    assert np.allclose(got, want, rtol=1e-4)


def test_proposal_lies_in_the_stable_range_and_warnings_fire_outside():
    init = jnp.asarray(rng.standard_normal((16, N, D)), jnp.float32)
    report = stepsize.propose_step_size(dgsgld.diging_sgld, potential(), networks.ring(N),
                                        init, jax.random.key(1), num_steps=100,
                                        num_step_sizes=9)
    low, high = report.accurate_range
    assert report.stable_range[0] <= low <= high == report.step_size <= report.stable_range[1]
    # The grid's top, 3/L, is beyond gradient descent's stability limit 2/L of the stiffest
    # agent on this full-batch Gaussian model, so the pilot must flag it.
    assert not report.stable[-1]
    assert np.all(report.spread[report.stable] > 0)
    assert "Proposed step size" in report.explain()
    assert stepsize.check_step_size(report.step_size, report)
    with pytest.warns(RuntimeWarning, match="above the stable range"):
        assert not stepsize.check_step_size(2 * report.stable_range[1], report)
    if report.accurate_range[1] < report.stable_range[1]:
        with pytest.warns(RuntimeWarning, match="largest accurate step"):
            stepsize.check_step_size(report.stable_range[1], report)


def test_bad_arguments():
    init = jnp.zeros((2, N, D))
    with pytest.raises(ValueError, match="at least 4 chains"):
        stepsize.propose_step_size(dgsgld.diging_sgld, potential(), networks.ring(N), init,
                                   jax.random.key(0))
    with pytest.raises(ValueError, match="`num_steps` must be an even integer"):
        stepsize.propose_step_size(dgsgld.diging_sgld, potential(), networks.ring(N),
                                   jnp.zeros((4, N, D)), jax.random.key(0), num_steps=3)
    with pytest.raises(ValueError, match="`spread_tolerance`"):
        stepsize.propose_step_size(dgsgld.diging_sgld, potential(), networks.ring(N),
                                   jnp.zeros((4, N, D)), jax.random.key(0), spread_tolerance=1)


def test_score_is_the_users_criterion_on_the_pilots_final_samples():
    # The pilot's score at a grid step is score_fn of the positions a plain dgsgld.sample run
    # at that step reaches after num_steps iterations with the pilot's key (the second half of
    # split(key)) and chains: same key, same draws. Checked at the proposal, which must be the
    # stable grid step with the best mean score.
    init = jnp.asarray(rng.standard_normal((8, N, D)), jnp.float32)
    key = jax.random.key(3)
    target = jnp.asarray([[[0.3, -0.2]]], jnp.float32)  # (1, 1, D)
    score = lambda x: -jnp.mean(jnp.sum((x - target) ** 2, -1), -1)  # noqa: E731  (C,)
    report = stepsize.propose_step_size(dgsgld.diging_sgld, potential(), networks.ring(N), init,
                                        key, num_steps=40, num_step_sizes=7, score_fn=score)
    i = int(np.argmax(np.where(report.stable, report.score, -np.inf)))
    assert report.step_size == report.step_sizes[i]
    trace = dgsgld.sample(dgsgld.diging_sgld(jnp.float32(report.step_size)), potential(),
                          networks.ring(N), init, jax.random.split(key)[1], 40)
    per_chain = np.asarray(score(trace.state.position))
    np.testing.assert_allclose(report.score[i], per_chain.mean(), rtol=1e-4)
    np.testing.assert_allclose(report.score_se[i], per_chain.std(ddof=1) / np.sqrt(8),
                               rtol=1e-3)
    assert "score" in report.explain()
    with pytest.raises(ValueError, match=r"shape \(8,\) for the pilot's 8 chains; got \(8, 4\)"):
        stepsize.propose_step_size(dgsgld.diging_sgld, potential(), networks.ring(N), init,
                                   key, score_fn=lambda x: x[..., 0])


@pytest.mark.slow  # default run: the user's score (above) and the stable-range proposal
def test_grid_continues_upwards_while_the_best_score_is_at_its_stable_top():
    # Logistic regression with a flat prior: every datum's gradient is bounded by |z| = 1, so
    # no step diverges, and the Langevin noise sqrt(2η) makes the samples' norm grow with η.
    # A score rewarding the norm is best at the top of every grid: the grid is continued twice
    # (_MAX_EXTENSIONS), by num_step_sizes points at its spacing each time.
    own = np.random.default_rng(11)
    z = np.where(own.standard_normal((N, n, 1)) > 0, 1.0, -1.0).astype(np.float32)
    y = (own.uniform(size=(N, n)) < 0.5).astype(np.float32)
    pot = dgsgld.Potential(lambda x, d: d[1] * (d[0] @ x) - jax.nn.softplus(d[0] @ x),
                           None, (z, y))
    init = jnp.asarray(own.standard_normal((16, N, 1)), jnp.float32)
    report = stepsize.propose_step_size(dgsgld.diging_sgld, pot, networks.ring(N), init,
                                        jax.random.key(4), num_steps=20, num_step_sizes=4,
                                        score_fn=lambda x: jnp.mean(jnp.abs(x)))
    lmax = report.curvature.max()
    ratio = 3000.0 ** (1 / 3)  # 4 points over [1e-3, 3] / L
    np.testing.assert_allclose(report.step_sizes * lmax, 1e-3 * ratio ** np.arange(12),
                               rtol=1e-4)
    assert report.score_se is None  # a scalar score
    assert report.stable.all() and report.step_size == report.step_sizes[-1]


# The paper's step sizes were tuned for W2 after 100 iterations (Fig. 2) or test accuracy
# (Fig. 3) on a grid (docs/figures/*.json). Fig. 2: the proposer's default spread criterion;
# Fig. 3: the accuracy of a validation split (never the test set) after a pilot as long as
# the figure's runs (dgsgld.experiments.proposals; table in docs/your-own-model.md).
PAPER = [(fig, alg) for fig in ("fig2a", "fig2b", "fig2c", "fig3a", "fig3b", "fig3c")
         for alg in ("DIGing-SGLD", "DE-SGLD")]


@pytest.mark.slow
@pytest.mark.parametrize("fig,alg", PAPER)
def test_proposal_against_the_papers_tuned_step(fig, alg):
    from dgsgld.experiments import proposals

    report = proposals.paper_case(fig, alg)
    tuned = json.loads((Path(__file__).resolve().parent.parent / "docs" / "figures" /
                        f"{fig}.json").read_text())["algorithms"][alg]
    assert 0.5 <= report.step_size / tuned["step_size"] <= 2.0, (report.step_size, tuned)


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
