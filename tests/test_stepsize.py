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


# The paper's step sizes were tuned for W2 after 100 iterations (Fig. 2) or test accuracy
# (Fig. 3) on a grid (docs/figures/*.json). Within a factor 2: Figs. 2(a)-(c) and 3(a). Fig. 3(b)
# lands at 0.43x, where the accuracy on the paper's grid is the tuned one within its trial
# spread (checked below). Fig. 3(c) is left out: its accuracy keeps rising with η up to the
# tuned η = 1, where the agents' consensus error is about 10 (they do not sample the
# posterior); the proposal (about 0.0025) is ~400x smaller there (docs/your-own-model.md).
PAPER = [(fig, alg) for fig in ("fig2a", "fig2b", "fig2c", "fig3a", "fig3b")
         for alg in ("DIGing-SGLD", "DE-SGLD")]


def paper_proposal(fig, alg):
    from dgsgld.experiments import configs, figures

    config = configs.figure_config(fig)
    seeds = figures.derive_seeds(0)
    if fig.startswith("fig3"):
        problem = figures._logistic_problem(config, seeds["data"])
    else:
        problem = figures.linear_regression_problem(
            seeds["data"], num_samples=config.num_samples, dim=config.dim,
            num_agents=config.num_agents, prior_precision=config.prior_precision,
            noise_std=config.noise_std)
    schedule, pot, key, init, _ = figures._sampling_setup(config, problem, seeds)
    make = {"DIGing-SGLD": dgsgld.diging_sgld, "DE-SGLD": dgsgld.de_sgld}[alg]
    report = stepsize.propose_step_size(make, pot, schedule, jnp.asarray(init), key)
    path = Path(__file__).resolve().parent.parent / "docs" / "figures" / f"{fig}.json"
    return report, json.loads(path.read_text())["algorithms"][alg]


@pytest.mark.slow
@pytest.mark.parametrize("fig,alg", PAPER)
def test_proposal_against_the_papers_tuned_step(fig, alg):
    report, tuned = paper_proposal(fig, alg)
    ratio = report.step_size / tuned["step_size"]
    if fig != "fig3b":
        assert 0.5 <= ratio <= 2.0, (report.step_size, tuned["step_size"])
        return
    # Fig. 3(b): accuracy on the paper's tuning grid, interpolated in log η at the proposal,
    # within 2 trial standard deviations (200 trials) of the tuned accuracy.
    grid = tuned["tuning_grid"]
    at = np.interp(np.log(report.step_size), np.log(grid["step_sizes"]), grid["final"])
    assert at >= tuned["final_mean"] - 2 * tuned["final_std"], (ratio, at, tuned["final_mean"])


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
