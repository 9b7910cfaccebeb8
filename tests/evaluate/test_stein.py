"""The kernel Stein discrepancy (dgsgld.evaluate.stein): one IMQ Stein kernel, used by the KSD of
stored draws and by the streamed KSD, against closed forms."""

from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from dgsgld import evaluate
from dgsgld.evaluate import ksd, stein_scores
from dgsgld.posteriors import get_target
from dgsgld.posteriors.targets import exact_gaussian_posterior


def test_gaussian_anchor_score_is_the_closed_form():
    # grad log N(x; m, S) = -S^{-1} (x - m); from the agents' gradients summed.
    pytest.importorskip("sklearn")
    target = get_target("gaussian_linear")
    mean, cov = exact_gaussian_posterior(target)
    x = np.asarray(target.init(jax.random.key(2), 3), np.float64) * 10
    want = -(x - mean) @ np.linalg.inv(cov)
    got = np.asarray(stein_scores(target.potential(4, "skew"), x))
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-3)


def _ksd_replicates(mean, num, m, d, unbiased, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(num):
        x = rng.normal(size=(m, d)) + mean
        value = ksd(x, -x, unbiased=unbiased)  # scores of N(0, I): -x
        out.append(value if unbiased else value**2)
    return np.array(out)


def test_ksd_of_the_target_itself_has_its_exact_expectation():
    # x_i ~ N(0, I_d) = pi: E[V-statistic KSD^2] = E k_pi(x, x) / m = 2d / m exactly (module
    # doc). 60 replicates: the mean is within 4 standard errors (p ~ 6e-5).
    m, d = 100, 3
    v = _ksd_replicates(0.0, 60, m, d, unbiased=False)
    assert abs(v.mean() - 2 * d / m) < 4 * v.std(ddof=1) / np.sqrt(v.size)


def test_ksd_of_a_shifted_gaussian_matches_quadrature():
    # Q = N(mu, 1) against pi = N(0, 1): the population KSD^2 = E_{x,y~Q} k_pi(x, y), by
    # 2-D Gauss-Hermite quadrature (the integrand is smooth: error far below 1e-6); the
    # unbiased U-statistic has this expectation, checked within 4 standard errors.
    mu, beta = 1.0, -0.5
    t, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    x, y = np.meshgrid(t + mu, t + mu, indexing="ij")
    r = x - y
    u = 1 + r**2
    k = (x * y * u**beta + 2 * beta * u ** (beta - 1) * (-y + x) * r
         - 2 * beta * u ** (beta - 1) - 4 * beta * (beta - 1) * u ** (beta - 2) * r**2)
    exact = float(w @ k @ w)
    u_stats = _ksd_replicates(mu, 40, 100, 1, unbiased=True, seed=3)
    assert abs(u_stats.mean() - exact) < 4 * u_stats.std(ddof=1) / np.sqrt(u_stats.size)
    # and the null's U-statistic averages to zero, far below the shifted one.
    null = _ksd_replicates(0.0, 40, 100, 1, unbiased=True, seed=4)
    assert abs(null.mean()) < 4 * null.std(ddof=1) / np.sqrt(null.size)
    assert exact > 10 * null.std(ddof=1)


@pytest.mark.slow  # fast twins: test_gaussian_anchor_score_is_the_closed_form (stein_scores
# from the agents' gradients), tests/evaluate/test_streaming.py::test_streamed_ksd_equals_the_
# ksd_of_the_stored_draws (the streamed KSD is the KSD of the stored draws)
def test_streamed_ksd_from_the_agents_gradients_equals_the_ksd_of_the_stored_draws():
    # dgsgld.evaluate.streamed_ksd with the score of stein_scores (minus the sum of the agents' own
    # full gradients, each agent on its own data) streams, per agent and kept iteration, the
    # V-statistic that evaluate.ksd gives from the stored draws of the C = 8 chains. The two
    # differ only by rounding: the streamed KSD^2 is a float32 sum of C^2 = 64 kernel terms
    # (the stored one sums the same float32 scores in float64), dominated by the positive
    # s(x).s(y) u^beta term (scores of order 100 here), so its relative error is at most about
    # 64 x 6e-8 = 4e-6, half that on the root: rtol 1e-5.
    pytest.importorskip("sklearn")
    import dgsgld
    from dgsgld import evaluate, networks

    target = get_target("gaussian_linear")
    potential = target.potential(4, "skew")
    score = lambda x: stein_scores(potential, x[None])[0]
    init = jnp.broadcast_to(target.init(jax.random.key(0), 8)[:, None], (8, 4, target.dim))
    trace = dgsgld.sample(dgsgld.DIGingSGLD(2e-3), potential, networks.ring(4), init,
                          jax.random.key(1), 20,
                          output=dgsgld.Output(thin=10, positions=True,
                                               ensemble_fn=evaluate.streamed_ksd(score)))
    x = np.asarray(trace.positions)                                    # (C, T', N, d)
    streamed = np.sqrt(np.asarray(trace.ensemble.total) / 64)         # (T', N)
    want = np.array([[ksd(x[:, t, i], stein_scores(potential, x[:, t, i]))
                      for i in range(4)] for t in range(x.shape[1])])
    np.testing.assert_allclose(streamed, want, rtol=1e-5)
    assert np.all(want > 0)


def test_the_one_stein_kernel_against_closed_forms_stored_and_streamed():
    # pi = N(0, 1), score s(x) = -x, default kernel (c = 1, beta = -1/2), d = 1. Each of 2R
    # "agents" holds C draws (one per chain) from q = N(mu_i, 1): mu = 0 for the first R
    # (q = pi), mu = MU for the others; streamed_ksd gives every agent's V-statistic
    # V_i = sum_{a,b} k_pi(x_a, x_b) / C^2 in one call, from the kernel ksd uses.
    #
    # Closed forms. On the diagonal r = 0, u = 1: k_pi(x, x) = s(x)^2 - 2 beta d = x^2 + 1, so
    # E k_pi(x, x) = mu^2 + 2. Off the diagonal, E k_pi(x, y) is the population KSD^2 =
    # E_{x,y~q}[(s_pi(x) - s_q(x)) (s_pi(y) - s_q(y)) k(x, y)] (Liu, Lee and Jordan, 2016,
    # Thm 3.6) with s_pi - s_q = -mu: mu^2 E (1 + (x - y)^2)^{-1/2}, x - y ~ N(0, 2). With
    # 2z^2 = sinh^2 t that expectation is e^{1/8} K_0(1/8) / (2 sqrt(pi)) = 0.70576 (K_0 the
    # modified Bessel function). Hence E V = ((C - 1)/C) KSD^2 + (mu^2 + 2)/C: 2/C for the
    # target itself.
    #
    # Tolerance: the R agents of each group are independent replicates; their mean V is within
    # 4 standard errors (sample sd / sqrt(R); R = 200, so the mean is close to normal) of E V
    # (p ~ 6e-5 per group).
    C, R, MU = 40, 200, 1.0
    rng = np.random.default_rng(0)
    shift = np.where(np.arange(2 * R) < R, 0.0, MU)                  # (2R,)
    x = (rng.normal(size=(C, 2 * R, 1)) + shift[None, :, None]).astype(np.float32)
    sums = evaluate.streamed_ksd(lambda p: -p)(SimpleNamespace(position=jnp.asarray(x)))
    assert int(sums.num_pairs) == C * C
    v = np.asarray(sums.total, np.float64) / C**2                    # (2R,)
    ksd2 = MU**2 * np.exp(1 / 8) * special.k0(1 / 8) / (2 * np.sqrt(np.pi))
    for group, mu, want in ((v[:R], 0.0, 2 / C),
                            (v[R:], MU, (C - 1) / C * ksd2 + (MU**2 + 2) / C)):
        se = group.std(ddof=1) / np.sqrt(R)
        assert abs(group.mean() - want) < 4 * se, (mu, group.mean(), want, se)
    # The shifted sample is told apart: its KSD^2 is far beyond the null's spread.
    assert v[R:].mean() - v[:R].mean() > 10 * np.hypot(v[:R].std(ddof=1), v[R:].std(ddof=1)) \
        / np.sqrt(R)
    # The KSD of the stored draws is the same kernel: equal up to float32 rounding of a sum of
    # C^2 = 1600 terms of magnitude ~1 (relative error well below 1e-4 on V ~ 0.05 .. 0.7).
    stored = np.array([ksd(x[:, i], -x[:, i]) ** 2 for i in (0, 1, R, R + 1)])
    np.testing.assert_allclose(stored, v[[0, 1, R, R + 1]], rtol=1e-4)


@pytest.mark.reliability
def test_ksd_refuses_bad_input():
    with pytest.raises(ValueError, match="`scores` must have the shape"):
        ksd(np.zeros((5, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="`beta` must lie in"):
        ksd(np.zeros((5, 3)), np.zeros((5, 3)), beta=-1.5)
