"""The large-data benchmark target ``logistic_large`` (n = 10⁶, d = 50), its NUTS reference and
the Laplace approximation (:func:`dgsgld.posteriors.laplace.laplace`).

The default run checks the generator on small ``n``, the Laplace approximation on targets with
a known answer, and the shipped reference against the target's Laplace approximation stored
in ``tests/posteriors/data/logistic_large_laplace.npz``. Building the 10⁶ data (about 4 s and
0.8 GB at peak) and everything that uses them is ``slow``, including the check that the stored Laplace
approximation is the data's (``python tests/posteriors/test_large_target.py`` rewrites it).
"""

import pathlib
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import chi2

from dgsgld.evaluate import stein_scores
from dgsgld.posteriors import get_target, load_reference
from dgsgld.posteriors.laplace import laplace as laplace_fit
from dgsgld.posteriors.targets import (
    LARGE_PREDICTIVE_INPUTS,
    exact_gaussian_posterior,
    large_logistic_data,
)

N, D, AGENTS = 1_000_000, 50, 16
STORED = pathlib.Path(__file__).with_name("data") / "logistic_large_laplace.npz"


@pytest.fixture(scope="module")
def target():
    return get_target("logistic_large")


@pytest.fixture(scope="module")
def reference():
    return load_reference("logistic_large")


def newton_laplace(z, y, start):
    """``(MAP, S = H⁻¹, δ)`` in float64 NumPy for the logistic regression with prior N(0, I):
    Newton's method on the log-posterior from ``start``, the inverse negative Hessian at the
    MAP and the first-order mean shift ``δ = ½ S ∇³log p[S]`` (the posterior mean is
    ``MAP + δ + O(n^-2)``)."""
    x = np.asarray(start, np.float64)
    for _ in range(10):
        s = expit(z @ x)
        w = s * (1 - s)
        g = z.T @ (y - s) - x
        h = (z.T * w) @ z + np.eye(len(x))
        step = np.linalg.solve(h, g)
        x = x + step
        if g @ step < 1e-20:  # Newton decrement² (squared distance in posterior sds)
            break
    else:
        raise AssertionError("Newton's method did not converge")
    s = expit(z @ x)
    cov = np.linalg.inv((z.T * (s * (1 - s))) @ z + np.eye(len(x)))
    # Third derivative of the log-likelihood: T_bcd = −Σ_i w'_i z_ib z_ic z_id with
    # w' = σ(1 − σ)(1 − 2σ); E[x − x̂]_a = ½ S_ab T_bcd S_cd = −½ S Σ_i w'_i (z_iᵀ S z_i) z_i.
    q = np.einsum("ij,jk,ik->i", z, cov, z, optimize=True)
    shift = -0.5 * cov @ (z.T @ (s * (1 - s) * (1 - 2 * s) * q))
    return x, cov, shift


@pytest.fixture(scope="module")
def stored():
    with np.load(STORED) as f:
        return f["mode"], f["cov"], f["shift"], str(f["fingerprint"])


def test_generator_is_deterministic_and_float32_exact():
    a, b = large_logistic_data(2000), large_logistic_data(2000)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    z = a[0]
    # Features are generated in float32: a float32 potential holds them exactly.
    np.testing.assert_array_equal(z.astype(np.float32).astype(np.float64), z)
    assert not np.array_equal(large_logistic_data(2000, seed=1)[0], z)


@pytest.mark.slow
def test_shapes_groups_and_the_generating_law(target):
    z, y = target.data
    assert target.dim == D and target.num_data == N and len(target.names) == D
    assert z.shape == (N, D) and y.shape == (N,) and z.dtype == y.dtype == np.float64
    np.testing.assert_array_equal(z[:, -1], 1.0)
    assert set(np.unique(y)) == {0.0, 1.0}
    # 16 equal quantile bins of the first feature; its coefficient is 1, so the bins' label
    # rates increase with the bin (differences ~0.03 against standard errors 0.002).
    assert np.array_equal(np.bincount(target.groups), np.full(AGENTS, N // AGENTS))
    rates = np.array([y[target.groups == g].mean() for g in range(AGENTS)])
    assert np.all(np.diff(rates) > 0)
    # Unit variances and AR(1) correlations 0.85^|j-k|: sample moments of 10⁶ Gaussian data
    # have standard errors ≤ sqrt(2 / n) = 0.0014 (variance) and ≤ (1 − ρ²) / sqrt(n) <=
    # 0.001 (correlation); 5 standard errors.
    f = z[:, :3]
    np.testing.assert_allclose(f.var(0), 1.0, atol=5 * 0.0014)
    c = np.corrcoef(f.T)
    np.testing.assert_allclose([c[0, 1], c[1, 2], c[0, 2]], [0.85, 0.85, 0.85**2], atol=0.005)
    # Labels are Bernoulli(σ(zᵀβ)): the label count matches Σ σ within 5 binomial sds.
    _, _, truth = large_logistic_data(10)
    p = expit(z @ truth)
    assert abs(y.sum() - p.sum()) < 5 * np.sqrt(np.sum(p * (1 - p)))


@pytest.mark.slow
def test_split_potentials_sum_to_the_pooled_gradient(target):
    # At a point 0.05 from the truth (~10 posterior sds) the pooled score of the log-density,
    # the 16 agents' float32 gradients summed (skew and iid), equals the closed form
    # Σ_i z_i (y_i − σ(z_iᵀx)) − x in float64. Float32 rounding of a sum of n terms is at
    # most ~ eps32 √n ≈ 6e-5 of Σ_i |terms| for sequential accumulation (less when blocked):
    # 1e-4 of it per coordinate. Leaving one agent's data out would break it.
    z, y = target.data
    rng = np.random.default_rng(0)
    _, _, truth = large_logistic_data(10)
    x = truth + 0.05 * rng.choice([-1.0, 1.0], D)
    terms = z * (y - expit(z @ x))[:, None]
    want = terms.sum(0) - x
    tol = 1e-4 * np.abs(terms).sum(0)
    one_agent = terms[target.groups == 0].sum(0)
    assert np.max(np.abs(one_agent) / tol) > 20  # the check is not vacuous
    got = np.asarray(target.score(jnp.asarray(x, jnp.float32)), np.float64)
    np.testing.assert_array_less(np.abs(got - want), tol)
    for split in ("skew", "iid"):
        potential = target.potential(AGENTS, split)
        assert potential.data[0].shape == (AGENTS, N // AGENTS, D)
        assert potential.data[0].dtype == jnp.float32
        got = np.asarray(stein_scores(potential, x[None].astype(np.float32))[0], np.float64)
        np.testing.assert_array_less(np.abs(got - want), tol)


@pytest.mark.slow
def test_predictive_is_evaluated_at_a_sample_of_inputs(target, reference):
    probs = np.asarray(target.mean_predictive(reference.draws[:3]))
    assert probs.shape == (LARGE_PREDICTIVE_INPUTS, 2)
    z = target.data[0][:LARGE_PREDICTIVE_INPUTS]
    want = expit(z @ reference.draws[:3].astype(np.float64).T).mean(1)
    np.testing.assert_allclose(probs[:, 1], want, atol=1e-5)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-6)


@pytest.mark.slow
def test_reference_and_stored_laplace_are_the_datas(target, reference, stored):
    # The shipped reference and the stored Laplace approximation were computed on these data,
    # and the stored approximation is Newton's method's on them (float64 NumPy, converged to
    # a decrement² < 1e-20: the MAP agrees to ~1e-9 sds; the covariance and the shift are
    # float64 sums of 10⁶ terms, relative rounding ~1e-12).
    assert reference.fingerprint == target.fingerprint == stored[3]
    mode, cov, shift = newton_laplace(*target.data, reference.mean)
    sd = np.sqrt(np.diag(cov))
    np.testing.assert_array_less(np.abs(stored[0] - mode), 1e-6 * sd)
    np.testing.assert_allclose(stored[1], cov, rtol=1e-8, atol=1e-8 * sd.max() ** 2)
    np.testing.assert_allclose(stored[2], shift, rtol=1e-6, atol=1e-6 * sd.max())
    # The library's Laplace approximation (jax autodiff, float64) is the same.
    fit = laplace_fit(target)
    np.testing.assert_array_less(np.abs(fit.mode - mode), 1e-5 * sd)
    np.testing.assert_allclose(fit.cov, cov, rtol=1e-6)


def test_reference_matches_the_target():
    reference = load_reference("logistic_large")
    assert reference.names == tuple(f"beta[{j}]" for j in range(D - 1)) + ("intercept",)
    assert reference.method == "nuts" and reference.draws.shape == (2000, D)


def test_reference_is_the_bernstein_von_mises_gaussian(reference, stored):
    mode, cov, shift, fingerprint = stored
    assert fingerprint == reference.fingerprint
    sd = np.sqrt(np.diag(cov))
    # At n = 10⁶ the posterior is Gaussian up to skew: its mean is MAP + δ (δ the third
    # derivative's O(n^-1/2)-sd shift, computed exactly in `newton_laplace`; here at most
    # 0.013 sd) with a remainder O(n^-1) sds, here d²/n = 0.0025 sd. The reference mean is
    # that of m = 4000 NUTS draws: every coordinate within 4.5 sd / sqrt(min(ess, m)) + the
    # remainder (50 coordinates: P(|N(0,1)| > 4.5) x 50 = 3e-4). The ESS is capped at m:
    # bulk ESS above the number of draws (antithetic chains) is an estimate too noisy to
    # shrink a tolerance with.
    assert np.max(np.abs(shift) / sd) < 0.2  # a near-Gaussian posterior
    m = 4000
    tol = 4.5 * reference.sd / np.sqrt(np.minimum(reference.ess_bulk, m)) + D**2 / N * sd
    np.testing.assert_array_less(np.abs(reference.mean - (mode + shift)), tol)
    # Jointly: m (mean − MAP − δ)ᵀ H (mean − MAP − δ) is χ²₅₀ for m independent draws of the
    # Laplace law; below its 0.9999 quantile (96.0) times 1.5, the slack for draws that are
    # less than independent in some direction (ESS >= m/1.5 there).
    delta = np.linalg.solve(np.linalg.cholesky(cov), reference.mean - mode - shift)
    assert m * delta @ delta < 1.5 * chi2.ppf(0.9999, D)
    # Its covariance is H⁻¹(MAP) up to O(n^-1) relative terms: sds within 4.5 mcse_sd plus
    # d²/n of the sd.
    np.testing.assert_array_less(np.abs(reference.sd - sd), 4.5 * reference.mcse_sd + D**2 / N * sd)
    # The whole covariance: the 2000 kept draws whitened by H⁻¹ = L Lᵀ have sample
    # covariance eigenvalues inside the Marchenko-Pastur support of m = 2000 independent
    # N(0, I_50) draws, (1 ± sqrt(d/m))² = [0.71, 1.34], widened by 0.1 for edge fluctuations
    # and the draws' residual autocorrelation.
    white = np.linalg.solve(np.linalg.cholesky(cov), (reference.draws - reference.mean).T)
    eig = np.linalg.eigvalsh(np.cov(white))
    edges = (1 - np.sqrt(D / 2000)) ** 2, (1 + np.sqrt(D / 2000)) ** 2
    assert edges[0] - 0.1 < eig.min() and eig.max() < edges[1] + 0.1


def test_laplace_of_a_gaussian_posterior_is_exact():
    # The linear-Gaussian anchor's posterior is Gaussian: its Laplace approximation is the
    # exact law (one Newton step from zero; float64 linear algebra, d = 6).
    target = get_target("gaussian_linear")
    fit = laplace_fit(target)
    mean, cov = exact_gaussian_posterior(target)
    np.testing.assert_allclose(fit.mode, mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fit.cov, cov, rtol=1e-9, atol=1e-14)
    np.testing.assert_allclose(fit.chol @ fit.chol.T, fit.cov, rtol=1e-12, atol=1e-15)
    assert fit.iterations <= 2 and fit.decrement < 1e-6


def test_laplace_of_the_logistic_target_is_newtons_closed_form():
    # logistic_breast_cancer (n = 569, d = 31): the library's damped Newton with autodiff
    # Hessians finds the MAP of the closed-form Newton iteration above, to its stopping rule
    # (decrement < 1e-6 sds).
    target = get_target("logistic_breast_cancer")
    fit = laplace_fit(target)
    mode, cov, _ = newton_laplace(*target.data, fit.mode + 0.1)
    sd = np.sqrt(np.diag(cov))
    np.testing.assert_array_less(np.abs(fit.mode - mode), 1e-5 * sd)
    np.testing.assert_allclose(fit.cov, cov, rtol=1e-6)


def _double_well(x, datum):
    return -((x[0] ** 2 - 1.0) ** 2 + 0.3 * x[0]) + 0.0 * datum[0]


def _ridge(x, datum):  # flat along x[1]: no mode
    return -(x[0] - 1.0) ** 2 + 0.0 * datum[0]


def _toy(log_likelihood, dim):
    from dgsgld.posteriors.targets import Target

    return Target("toy", "test", log_likelihood, _flat_prior, (np.zeros(1),),
                  tuple(f"x{j}" for j in range(dim)), np.zeros(1, np.int64), "-")


def _flat_prior(x):
    return 0.0 * x[0]


def test_laplace_leaves_a_saddle_for_the_mode():
    # −log p = (x² − 1)² + 0.3 x: at the start x = 0 the curvature is −4, and plain Newton
    # would step uphill to the local maximum near 0.075. The search must reach the minimum
    # near −1.04 instead: f'(x) = 4x³ − 4x + 0.3 = 0 there and cov = 1 / f''(x̂) = 1/(12x̂² − 4).
    fit = laplace_fit(_toy(_double_well, 1))
    roots = np.roots([4.0, 0.0, -4.0, 0.3]).real
    mode = roots.min()
    np.testing.assert_allclose(fit.mode, [mode], rtol=1e-9)
    np.testing.assert_allclose(fit.cov, [[1.0 / (12 * mode**2 - 4)]], rtol=1e-7)


def test_laplace_refuses_bad_arguments():
    target = get_target("gaussian_linear")
    with pytest.raises(ValueError, match="`tol` must be positive"):
        laplace_fit(target, tol=0.0)
    with pytest.raises(ValueError, match="`max_iterations` must be a positive int"):
        laplace_fit(target, max_iterations=0)
    with pytest.raises(RuntimeError, match="did not converge in 1 iterations"):
        laplace_fit(get_target("logistic_breast_cancer"), max_iterations=1)
    with pytest.raises(RuntimeError, match="not positive definite .*: no mode"):
        laplace_fit(_toy(_ridge, 2))


def _write_stored():  # pragma: no cover - run by hand when the data or the reference change
    target = get_target("logistic_large")
    mode, cov, shift = newton_laplace(*target.data, load_reference("logistic_large").mean)
    STORED.parent.mkdir(exist_ok=True)
    np.savez(STORED, mode=mode, cov=cov, shift=shift, fingerprint=target.fingerprint)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_write_stored())
