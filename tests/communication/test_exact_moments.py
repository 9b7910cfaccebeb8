"""Exact moments (:mod:`dgsgld.theory.exact`) of samplers run with channels against Monte Carlo:
random link drops, stragglers, random-k messages, intermittent rounds, gossip, random rounds
with feedback and deadlines, error feedback with random-k; and the channels it refuses, naming
the channel and why."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _channels import _PATTERN, N
from _problems import complete_graph, linear_regression, ring

import dgsgld
from dgsgld import communication as C

# -- exact moments under random link drops -------------------------------------------------------


def _data_z(x, mean, cov):
    """z-scores of the sample means and covariance entries of chains ``x (C, N, d)`` against
    ``mean (N, d)`` and ``cov (N, d, d)``, each in its own standard error estimated from the
    chains (the law is a mixture over link masks, not Gaussian: the covariance entries' s.e.
    is the sample s.d. of the centred products over √C)."""
    c = x.shape[0]
    z_mean = (x.mean(0) - mean) / (x.std(0, ddof=1) / np.sqrt(c))
    centred = x - x.mean(0)
    prods = centred[..., :, None] * centred[..., None, :]                 # (C, N, d, d)
    z_cov = (prods.mean(0) * c / (c - 1) - cov) / (prods.std(0, ddof=1) / np.sqrt(c))
    return z_mean, z_cov


# Fast twins: test_exact_moments_with_random_k_and_error_feedback_match_monte_carlo
# [diging], test_exact_moments_with_random_k_and_error_feedback_equal_the_mask_mixture,
# test_links_and_stragglers_step_by_step.
@pytest.mark.slow
def test_exact_moments_under_random_link_drops_match_monte_carlo(key):
    """DIGing-SGLD and DE-SGLD with full batches on the ring of 4, each link up w.p. 1/2 at
    every step, 15 steps from N(0, I), 6000 chains: the means and covariances of
    ``theory.exact_moments(..., channel=...)`` (module docstring of dgsgld.theory.exact)
    agree with the chains. 2 samplers × 4 agents × (2 means + 4 covariance entries) = 48
    z-scores, each within Φ⁻¹(1 − 10⁻³/96) = 3.9 (Bonferroni, family-wise α = 1e-3). The
    propagation without the masks' spread (the mean matrix W̄ alone) is rejected: its
    covariances are too small, by more than 3.9 standard errors somewhere."""
    from scipy.stats import norm

    from dgsgld.theory import exact
    from tests._moments import exact_quadratic

    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    channel, T, chains = C.Channel(probability=0.5, per_link=True), 15, 6000
    W = np.asarray(ring(N), np.float64)
    bound = norm.ppf(1 - 1e-3 / 96)
    init = jax.random.normal(jax.random.key(11), (chains, N, 2))
    for alg in (dgsgld.DIGingSGLD(0.1), dgsgld.DESGLD(0.1)):
        with jax.enable_x64(True):
            law = exact.exact_moments(alg, exact_quadratic(problem), W, np.zeros(2), np.eye(2),
                                      T, channel=channel)
            mean_only = exact.exact_moments(
                alg, exact_quadratic(problem), W - 0.5 * (W - np.diag(np.diag(W)))
                + 0.5 * np.diag(W.sum(1) - np.diag(W)), np.zeros(2), np.eye(2), T)
        trace = dgsgld.sample(alg, problem.potential, ring(N), init, key, T, channel=channel,
                              output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
        x = np.asarray(trace.state.position, np.float64)
        np.testing.assert_allclose(mean_only.mean[-1], law.mean[-1], rtol=1e-10, atol=1e-12)
        z_mean, z_cov = _data_z(x, np.asarray(law.mean[-1]), np.asarray(law.cov[-1]))
        assert np.abs(z_mean).max() <= bound and np.abs(z_cov).max() <= bound, (
            type(alg).__name__, z_mean, z_cov)
        _, z_cov_bar = _data_z(x, np.asarray(mean_only.mean[-1]), np.asarray(mean_only.cov[-1]))
        assert np.abs(z_cov_bar).max() > bound, type(alg).__name__
    with pytest.raises(ValueError, match="TopK messages are not linear in the message"):
        exact.exact_moments(dgsgld.DESGLD(0.1), exact_quadratic(problem), W, np.zeros(2),
                            np.eye(2), 2, channel=C.Channel(C.top_k(0.5)))
    with pytest.raises(ValueError, match="link drops are propagated alone, not with stragglers"):
        exact.exact_moments(dgsgld.DESGLD(0.1), exact_quadratic(problem), W, np.zeros(2),
                            np.eye(2), 2, channel=C.Channel(probability=0.5, per_link=True,
                                                            activity=0.5))
    with pytest.raises(ValueError, match="not for EXTRA-SGLD"):
        exact.exact_moments(dgsgld.EXTRASGLD(0.1), exact_quadratic(problem), W, np.zeros(2),
                            np.eye(2), 2, channel=channel)


# Fast twins: test_exact_moments_with_random_k_and_error_feedback_match_monte_carlo
# [diging], test_exact_moments_with_random_k_and_error_feedback_equal_the_mask_mixture,
# test_links_and_stragglers_step_by_step.
@pytest.mark.slow
@pytest.mark.parametrize("cells", ["diging", pytest.param("all", marks=pytest.mark.slow)])
def test_exact_moments_with_stragglers_match_monte_carlo(cells, key):
    """Stragglers in ``theory.exact_moments``: DIGing-SGLD (``"all"``: and DE-SGLD and
    EXTRA-SGLD) with full batches on the ring of 4, 12 steps from N(0, I), 6000 chains, with
    each agent active w.p. 0.6 (the 16 active sets enumerated) and (``"all"``) with the
    pattern of test_links_and_stragglers_step_by_step (one set per step). At most 3 samplers
    × 2 channels × 4 agents × 6 moments = 144 z-scores (standard errors from the chains, as
    in :func:`_data_z`), each within Φ⁻¹(1 − 10⁻³/288) = 4.5 (Bonferroni over 144, two-sided,
    α = 1e-3; conservative for fewer). The law without stragglers is rejected for each
    sampler with activity 0.6."""
    from scipy.stats import norm

    from dgsgld.theory import exact
    from tests._moments import exact_quadratic

    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    W, T, chains = np.asarray(ring(N), np.float64), 12, 6000
    bound = norm.ppf(1 - 1e-3 / 288)
    init = jax.random.normal(jax.random.key(11), (chains, N, 2))
    out = dgsgld.Output(positions=False, trace_fn=lambda s: ())
    algs = (dgsgld.DIGingSGLD(0.1), dgsgld.DESGLD(0.1), dgsgld.EXTRASGLD(0.1))
    channels = (C.Channel(activity=0.6), C.Channel(activity=_PATTERN))
    for alg in algs[:1] if cells == "diging" else algs:
        for channel in channels[:1] if cells == "diging" else channels:
            with jax.enable_x64(True):
                law = exact.exact_moments(alg, exact_quadratic(problem), W, np.zeros(2),
                                          np.eye(2), T, channel=channel)
            trace = dgsgld.sample(alg, problem.potential, ring(N), init, key, T,
                                  channel=channel, output=out)
            x = np.asarray(trace.state.position, np.float64)
            z_mean, z_cov = _data_z(x, np.asarray(law.mean[-1]), np.asarray(law.cov[-1]))
            assert np.abs(z_mean).max() <= bound and np.abs(z_cov).max() <= bound, (
                type(alg).__name__, channel.activity, z_mean, z_cov)
            if channel.activity == 0.6:
                with jax.enable_x64(True):
                    plain = exact.exact_moments(alg, exact_quadratic(problem), W, np.zeros(2),
                                                np.eye(2), T)
                z = _data_z(x, np.asarray(plain.mean[-1]), np.asarray(plain.cov[-1]))
                assert max(np.abs(z[0]).max(), np.abs(z[1]).max()) > bound, type(alg).__name__


def test_random_k_mask_covariance_is_the_stated_one():
    """The covariance ``Σ`` of one agent's scaled random-k mask that ``exact_moments`` uses
    (``d / k − 1`` on the diagonal, ``−(d − k) / (k (d − 1))`` off it) against 200 000 masks
    drawn by :class:`C.RandomK` itself (``compress`` of a vector of ones), d = 5, k = 2. Each
    entry's standard error is at most ``sd(m_r m_s) / √n ≤ (d/k)² / √n = 0.014``; the entries are
    within 5 of them (25 entries: a false failure has probability < 1e-5)."""
    from dgsgld.theory.exact import _random_k_covariance

    d, n = 5, 200_000
    masks = np.asarray(jax.jit(jax.vmap(lambda k: C.random_k(0.4).compress(k, jnp.ones(d))))(
        jax.random.split(jax.random.key(3), n)), np.float64)        # one program, not op by op
    assert (masks.sum(1) == d).all() and ((masks == 0) | (masks == d / 2)).all()
    expected = _random_k_covariance(0.4, d)
    assert expected[0, 0] == 1.5 and np.isclose(expected[0, 1], -3 / 8)
    np.testing.assert_allclose(np.cov(masks.T), expected, atol=5 * (d / 2) ** 2 / np.sqrt(n))


# Fast twins: test_exact_moments_with_random_k_and_error_feedback_match_monte_carlo
# [diging], test_exact_moments_with_random_k_and_error_feedback_equal_the_mask_mixture,
# test_links_and_stragglers_step_by_step.
@pytest.mark.slow
@pytest.mark.parametrize("cells", ["diging", pytest.param("all", marks=pytest.mark.slow)])
def test_exact_moments_with_random_k_messages_match_monte_carlo(cells, key):
    """Random-k messages (k = 2 of d = 3, scaled by 3/2, no error feedback) in
    ``theory.exact_moments`` (module docstring of dgsgld.theory.exact: the mean recursion is
    the exact one, the covariance gains each message's mask spread): DIGing-SGLD (``"all"``:
    and DE-SGLD, DIGing-SGHMC, D-ULA) with full batches on the ring of 4, 12 steps from
    N(0, I), 6000 chains. At most 4 samplers × 4 agents × (3 means + 9 covariance entries) =
    192 z-scores (standard errors from the chains, :func:`_data_z`), each within
    Φ⁻¹(1 − 10⁻³/384) = 4.6 (Bonferroni, two-sided, α = 1e-3). The law of exact messages is
    rejected for each sampler (the masks multiply the spread of the iterates). With fewer
    entries kept the law is heavy tailed (k = 1: covariances 20 times the exact messages'),
    and 6000 chains no longer estimate their own standard errors."""
    from scipy.stats import norm

    from dgsgld.theory import exact
    from tests._moments import exact_quadratic

    problem = linear_regression(num_agents=N, local_size=3, dim=3)
    W, T, chains, eta = np.asarray(ring(N), np.float64), 12, 6000, 0.05
    channel = C.Channel(C.random_k(2 / 3))
    bound = norm.ppf(1 - 1e-3 / 384)
    init = jax.random.normal(jax.random.key(11), (chains, N, 3))
    out = dgsgld.Output(positions=False, trace_fn=lambda s: ())
    algs = (dgsgld.DIGingSGLD(eta), dgsgld.DESGLD(eta),
            dgsgld.DIGingSGHMC(eta, friction=5.0), dgsgld.DULA(eta / N, consensus=0.5))
    for alg in algs[:1] if cells == "diging" else algs:
        with jax.enable_x64(True):
            law = exact.exact_moments(alg, exact_quadratic(problem), W, np.zeros(3), np.eye(3),
                                      T, channel=channel)
            plain = exact.exact_moments(alg, exact_quadratic(problem), W, np.zeros(3),
                                        np.eye(3), T)
        np.testing.assert_allclose(law.mean, plain.mean, rtol=1e-10, atol=1e-12)
        trace = dgsgld.sample(alg, problem.potential, ring(N), init, key, T, channel=channel,
                              output=out)
        x = np.asarray(trace.state.position, np.float64)
        z_mean, z_cov = _data_z(x, np.asarray(law.mean[-1]), np.asarray(law.cov[-1]))
        assert np.abs(z_mean).max() <= bound and np.abs(z_cov).max() <= bound, (
            type(alg).__name__, z_mean, z_cov)
        _, z_plain = _data_z(x, np.asarray(plain.mean[-1]), np.asarray(plain.cov[-1]))
        assert np.abs(z_plain).max() > bound, type(alg).__name__
    problem2 = exact_quadratic(problem)
    with pytest.raises(ValueError, match="random-k messages are propagated .* not for EXTRA-SGLD"):
        exact.exact_moments(dgsgld.EXTRASGLD(eta), problem2, W, np.zeros(3), np.eye(3), 2,
                            channel=channel)
    with pytest.raises(ValueError, match="random-k messages are propagated .* not for EXTRA-SGLD"):
        exact.exact_moments(dgsgld.EXTRASGLD(eta), problem2, W, np.zeros(3), np.eye(3), 2,
                            channel=C.Channel(C.random_k(2 / 3), error_feedback=True))


# -- exact moments under intermittent rounds, gossip, random rounds and deadlines ---------------


def _channel_z(alg, channel, problem, mixing, steps, key, *laws, chains=6000):
    """Chains of ``alg`` with ``channel`` against exact laws: ``chains`` chains, full batches,
    ``steps`` steps from N(0, I) (the same draws in every test); returns, for
    ``exact_moments(alg, ..., channel=channel)`` and then for each ``(mixing, channel)`` of
    ``laws`` (or an :class:`~dgsgld.theory.exact.ExactMoments` taken as it is), the largest
    |z-score| of the ``N (d + d²)`` means and covariance entries at the last step (standard
    errors from the chains, :func:`_data_z`)."""
    from dgsgld.theory import exact
    from tests._moments import exact_quadratic

    d = problem.Z.shape[-1]
    init = jax.random.normal(jax.random.key(11), (chains, N, d))
    trace = dgsgld.sample(alg, problem.potential, mixing, init, key, steps, channel=channel,
                          output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
    x = np.asarray(trace.state.position, np.float64)
    out = []
    for law in ((mixing, channel), *laws):
        if not isinstance(law, exact.ExactMoments):
            with jax.enable_x64(True):
                law = exact.exact_moments(alg, exact_quadratic(problem), law[0], np.zeros(d),
                                          np.eye(d), steps, channel=law[1])
        z_mean, z_cov = _data_z(x, np.asarray(law.mean[-1]), np.asarray(law.cov[-1]))
        out.append(max(np.abs(z_mean).max(), np.abs(z_cov).max()))
    return out


def _bound(num_runs, dim=2):
    """Bonferroni bound for ``num_runs`` runs of :func:`_channel_z` (``N (d + d²)`` z-scores
    each, two-sided, family-wise α = 1e-3)."""
    from tests._moments import bonferroni

    return bonferroni(num_runs * N * (dim + dim**2))


def _directed_ring():
    """Column-stochastic ring: agent j keeps half and pushes half to j + 1."""
    return 0.5 * (np.eye(N) + np.roll(np.eye(N), 1, axis=0))


# Fast twins: test_exact_moments_with_random_k_and_error_feedback_match_monte_carlo
# [diging], test_exact_moments_with_random_k_and_error_feedback_equal_the_mask_mixture,
# test_links_and_stragglers_step_by_step.
@pytest.mark.slow
@pytest.mark.parametrize("cells", ["diging", pytest.param("all", marks=pytest.mark.slow)])
def test_exact_moments_with_intermittent_rounds_match_monte_carlo(cells, key):
    """``Channel(every=3)``: between rounds (``k ≡ 0 mod 3``) every message, DIGing's tracker
    and the push-sum weights too, is mixed with ``I`` (``Channel._mix``'s ``talk``), so
    ``exact_moments`` with it is ``exact_moments`` over the schedule ``(W, I, I)``: equal to
    rounding for DIGing-SGLD and Push-DIGing-SGLD (on a directed ring; ``"all"``: every
    kind). Monte Carlo: DIGing-SGLD (``"all"``: and DE-SGLD, EXTRA-SGLD, D-ULA, DE-SGHMC,
    DIGing-SGHMC, Push-DIGing-SGLD, and DIGing-SGLD with every = 2 and link drops, DE-SGLD
    with every = 2 and stragglers) on the ring of 4, 13 steps, 6000 chains: every z-score
    within the Bonferroni bound over all of them (:func:`_bound`). The law of communicating
    at every step is rejected for DIGing-SGLD."""
    from dgsgld.theory import exact
    from tests._moments import exact_quadratic

    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    W, eta = np.asarray(ring(N), np.float64), 0.1
    channel = C.Channel(every=3)
    algs = [dgsgld.DIGingSGLD(eta), dgsgld.PushDIGingSGLD(eta)]
    if cells == "all":
        algs += [dgsgld.DESGLD(eta), dgsgld.EXTRASGLD(eta), dgsgld.DULA(eta / N, 0.5),
                 dgsgld.DESGHMC(eta, 2.0), dgsgld.DIGingSGHMC(eta, 2.0),
                 dgsgld.PushSumSGLD(eta)]
    for alg in algs:
        mixing = _directed_ring() if isinstance(
            alg, (dgsgld.PushDIGingSGLD, dgsgld.PushSumSGLD)) else W
        with jax.enable_x64(True):
            a = exact.exact_moments(alg, exact_quadratic(problem), mixing, np.zeros(2),
                                    np.eye(2), 7, channel=channel)
            b = exact.exact_moments(alg, exact_quadratic(problem),
                                    np.stack([mixing, np.eye(N), np.eye(N)]), np.zeros(2),
                                    np.eye(2), 7)
        np.testing.assert_allclose(a.cov, b.cov, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(a.mean, b.mean, rtol=1e-12, atol=1e-14)
    runs = [(dgsgld.DIGingSGLD(eta), channel, W)]
    if cells == "all":
        runs += [(alg, channel, W) for alg in algs[2:7]]
        runs += [(dgsgld.PushDIGingSGLD(eta), channel, _directed_ring()),
                 (dgsgld.DIGingSGLD(eta), C.Channel(every=2, probability=0.5, per_link=True), W),
                 (dgsgld.DESGLD(eta), C.Channel(every=2, activity=0.6), W)]
    bound = _bound(len(runs))
    for alg, ch, mixing in runs:
        laws = ((mixing, None),) if ch is channel and isinstance(alg, dgsgld.DIGingSGLD) else ()
        z, *rejected = _channel_z(alg, ch, problem, mixing, 13, key, *laws)
        assert z <= bound, (type(alg).__name__, ch, z)
        assert all(r > bound for r in rejected), (type(alg).__name__, rejected)


# Fast twins: test_exact_moments_with_random_k_and_error_feedback_match_monte_carlo
# [diging], test_exact_moments_with_random_k_and_error_feedback_equal_the_mask_mixture,
# test_links_and_stragglers_step_by_step.
@pytest.mark.slow
@pytest.mark.parametrize("cells", ["diging", pytest.param("all", marks=pytest.mark.slow)])
def test_exact_moments_with_gossip_match_monte_carlo(cells, key):
    """Randomized gossip in ``exact_moments``: given the step's gossip matrix ``G`` the step
    is linear, so the moments are the mixture over :func:`C.gossip_outcomes` (module
    docstring of dgsgld.theory.exact). DIGing-SGLD with ``gossip="edge"`` and
    ``"matching"`` (``"all"``: DE-SGLD, EXTRA-SGLD, D-ULA, DE-SGHMC, DIGing-SGHMC with a
    matching, DIGing-SGLD with a matching composed with random rounds, stragglers and every
    = 2, and with ``"edge"`` on the schedule (ring, complete graph)) on the ring of 4, 12
    steps, 6000 chains: every z-score within the Bonferroni bound (:func:`_bound`). Rejected
    for the fast cells: the law of exact mixing, and the law propagated with the mean matrix
    ``E[G]`` alone (the mean is the same, the covariances too small)."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    W, eta = np.asarray(ring(N), np.float64), 0.1

    def mean_matrix(mode):
        matrices, probs = C.gossip_outcomes(W, mode)
        return np.einsum("k,kij->ij", probs, matrices)

    runs = [(dgsgld.DIGingSGLD(eta), mode, W) for mode in ("edge", "matching")]
    if cells == "all":
        runs += [(alg, "matching", W) for alg in (
            dgsgld.DESGLD(eta), dgsgld.EXTRASGLD(eta), dgsgld.DULA(eta / N, 0.5),
            dgsgld.DESGHMC(eta, 2.0), dgsgld.DIGingSGHMC(eta, 2.0))]
        runs += [(dgsgld.DIGingSGLD(eta), C.Channel(gossip="matching", probability=0.7,
                                                    activity=0.8, every=2), W),
                 (dgsgld.DIGingSGLD(eta), "edge", np.stack([W, complete_graph(N)]))]
    bound = _bound(len(runs))
    for alg, mode, mixing in runs[:2]:
        z, plain, mean_only = _channel_z(alg, C.Channel(gossip=mode), problem, mixing, 12, key,
                                         (mixing, None), (mean_matrix(mode), None))
        assert z <= bound < min(plain, mean_only), (mode, z, plain, mean_only)
    for alg, mode, mixing in runs[2:]:
        channel = mode if isinstance(mode, C.Channel) else C.Channel(gossip=mode)
        (z,) = _channel_z(alg, channel, problem, mixing, 12, key)
        assert z <= bound, (type(alg).__name__, channel, z)


# Fast twins: test_exact_moments_with_random_k_and_error_feedback_match_monte_carlo
# [diging], test_exact_moments_with_random_k_and_error_feedback_equal_the_mask_mixture,
# test_links_and_stragglers_step_by_step.
@pytest.mark.slow
@pytest.mark.parametrize("cells", ["diging", pytest.param("all", marks=pytest.mark.slow)])
def test_exact_moments_with_random_rounds_feedback_and_deadlines_match_monte_carlo(cells, key):
    """The other channels whose step is linear given its randomness, in ``exact_moments``:
    rounds for all agents at once (``probability=0.5``: a mixture of ``W`` and ``I``), error
    feedback with exact messages (``x̂ = x`` after a round, so the step mixes with
    ``(1 − γ) I + γ W``, γ = 0.5), and a clock's deadline (compute times ``c = (1, 1, 1, 3)``
    with jitter 0.5 and deadline 2: agent ``i`` active w.p. ``1 − exp(−(2/c_i − 0.5)/0.5)``,
    0.95 and 0.28, the active sets enumerated). DIGing-SGLD with the deadline (``"all"``:
    every channel, and DE-SGLD, EXTRA-SGLD) on the ring of 4, 12 steps, 6000 chains: every
    z-score within the
    Bonferroni bound (:func:`_bound`), and the law of exact mixing rejected for each. An
    event trigger with threshold 0 sends whenever the message moved, so its neighbours mix
    the sent values themselves: the chains are those of exact messages to float32 rounding
    (the two programs may sum the mixing in different orders), and the exact moments the
    same bit for bit."""
    from dgsgld.theory import exact
    from tests._moments import exact_quadratic

    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    W, eta = np.asarray(ring(N), np.float64), 0.1
    deadline = C.Channel(clock=C.Clock(compute=(1, 1, 1, 3), jitter=0.5, deadline=2.0))
    # The fast cell: the deadline's mixture over active sets; "all" adds the other channels.
    channels = ((C.Channel(probability=0.5), C.Channel(error_feedback=True, consensus=0.5),
                 deadline) if cells == "all" else (deadline,))
    algs = (dgsgld.DIGingSGLD(eta),) + ((dgsgld.DESGLD(eta), dgsgld.EXTRASGLD(eta))
                                        if cells == "all" else ())
    bound = _bound(len(algs) * len(channels))
    for alg in algs:
        for channel in channels:
            z, plain = _channel_z(alg, channel, problem, W, 12, key, (W, None))
            assert z <= bound < plain, (type(alg).__name__, channel, z, plain)
    alg, init = dgsgld.DIGingSGLD(eta), jax.random.normal(jax.random.key(2), (50, N, 2))
    triggered, sent = (dgsgld.sample(alg, problem.potential, W, init, key, 5, channel=ch)
                       for ch in (C.Channel(threshold=0.0), C.Channel()))
    # A different order of the N = 4 terms of one mixing sum moves it by at most 3 ε·max|x|
    # (ε = 2⁻²³); two messages per step over 5 steps, each carried on by a contraction-free
    # bound of the step: 64 ε·max|x| leaves room, and a wrong message (the copy of a step
    # before) moves the draws by O(η) = 0.1.
    scale = float(np.max(np.abs(sent.positions)))
    np.testing.assert_allclose(triggered.positions, sent.positions, rtol=0,
                               atol=64 * np.finfo(np.float32).eps * scale)
    with jax.enable_x64(True):
        a, b = (exact.exact_moments(alg, exact_quadratic(problem), W, np.zeros(2), np.eye(2), 5,
                                    channel=ch) for ch in (C.Channel(threshold=0.0), None))
    np.testing.assert_array_equal(a.cov, b.cov)


def _feedback_mixture(kind, quadratic, W, eta, gamma, k, steps, every):
    """``(mean (N, d), cov (N, d, d))`` of ``x`` after ``steps`` steps of DE-SGLD or DIGing-SGLD
    (``kind``) with random-k messages (``k`` entries kept) and error feedback (``γ``), full
    batches from ``x⁽⁰⁾ ~ N(0, I)``, by averaging over every mask outcome of every step
    (float64 NumPy). The step is written from the samplers' equations (diging.py, de.py) and
    ``Channel._mix``: public copies ``û⁽⁰⁾ = 0``, ``û⁺ = û + D (u − û)`` with ``D`` a 0/1 mask
    of ``k`` of each agent's ``d`` entries, uniform and independent over agents and messages,
    ``mixed = u + γ (W − I) û⁺``; at a step that is no round (``every``) nothing changes
    but ``mixed = u``. Given the masks it is affine in ``(z, w)``; its matrices are read off
    by applying it to unit vectors, and ``E[z⁺ z⁺ᵀ]`` averages over the outcomes."""
    import itertools

    from scipy.linalg import block_diag

    A, b = np.asarray(quadratic.hessians), np.asarray(quadratic.shifts)
    num, d = b.shape
    n, sent = num * d, 2 if kind == "diging" else 1
    Wb, Ab, bb, eye = np.kron(W, np.eye(d)), block_diag(*A), b.reshape(n, 1), np.eye(n)

    def step(z, w, mask, talk):        # z (2 sent n, cols), w (n, cols), mask (sent, n)
        blocks = np.split(z, 2 * sent)
        s, hat = blocks[:sent], blocks[sent:]
        if talk:
            hat = [h + m[:, None] * (u - h) for u, h, m in zip(s, hat, mask)]
        mixed = [u + gamma * ((Wb if talk else eye) - eye) @ h for u, h in zip(s, hat)]
        x = s[0]
        if kind == "de":
            return np.concatenate([mixed[0] - eta * (Ab @ x - bb) + np.sqrt(2 * eta) * w, *hat])
        x_new = mixed[0] - eta * s[1] + np.sqrt(2 * eta) * w
        return np.concatenate([x_new, mixed[1] + Ab @ (x_new - x), *hat])

    size = 2 * sent * n
    subsets = [np.isin(np.arange(d), c).astype(float)
               for c in itertools.combinations(range(d), k)]
    outcomes = [np.concatenate(p).reshape(sent, n)
                for p in itertools.product(subsets, repeat=sent * num)]
    if kind == "diging":  # z⁽⁰⁾ = start x⁽⁰⁾ + offset: y⁽⁰⁾ = 𝐀x⁽⁰⁾ − 𝐛, copies 0
        start = np.concatenate([eye, Ab, np.zeros((2 * n, n))])
        offset = np.concatenate([np.zeros(n), -bb[:, 0], np.zeros(2 * n)])
    else:
        start, offset = np.concatenate([eye, np.zeros((n, n))]), np.zeros(size)
    m, E = offset, start @ start.T + np.outer(offset, offset)
    for t in range(steps):
        talk = t % every == 0
        c = step(np.zeros((size, 1)), np.zeros((n, 1)), outcomes[0], talk)[:, 0]
        G = step(np.zeros((size, n)), eye, outcomes[0], talk) - c[:, None]
        Ms = [step(np.eye(size), np.zeros((n, size)), o, talk) - c[:, None]
              for o in (outcomes if talk else outcomes[:1])]
        M = np.mean(Ms, axis=0)
        Mm = M @ m
        E = np.mean([Mo @ E @ Mo.T for Mo in Ms], axis=0) + np.outer(Mm, c) + np.outer(c, Mm) \
            + np.outer(c, c) + G @ G.T
        m = Mm + c
    cov = (E - np.outer(m, m))[:n, :n].reshape(num, d, num, d)
    return m[:n].reshape(num, d), np.einsum("iaib->iab", cov)


@pytest.mark.parametrize("cells", [
    "diging",
    pytest.param("all", marks=pytest.mark.slow),  # fast twin: the "diging" cell
])
def test_exact_moments_with_random_k_and_error_feedback_equal_the_mask_mixture(cells):
    """Random-k messages with error feedback in ``exact_moments`` (the public copies carried
    in the state, the masks' spread over ``s − ŝ``: module docstring of
    dgsgld.theory.exact) against :func:`_feedback_mixture`, which averages the step over
    every mask outcome: DIGing-SGLD with k = 1 of d = 2 (the 256 masks of x and y of 4
    agents) and (``"all"``) DE-SGLD with k = 2 of d = 3 and every = 2 (81 masks at a round),
    γ = 0.5, 6 steps on the ring of 4. Both are exact in float64: equal to 1e-10 relative.
    (``"all"``) With every entry kept (``random_k(1)``) the copies equal the messages after a
    round, and the moments are those of error feedback with exact messages to rounding."""
    from dgsgld.theory import exact
    from tests._moments import exact_quadratic

    W, eta, gamma, T = np.asarray(ring(N), np.float64), 0.1, 0.5, 6
    kinds = (("diging", 2, 1, 1), ("de", 3, 2, 2))[:1 if cells == "diging" else 2]
    quadratics = {d: exact_quadratic(linear_regression(num_agents=N, local_size=3, dim=d))
                  for _, d, _, _ in kinds}
    samplers = {"diging": dgsgld.DIGingSGLD(eta), "de": dgsgld.DESGLD(eta)}
    for kind, d, k, every in kinds:
        q = quadratics[d]
        channel = C.Channel(C.random_k(k / d), error_feedback=True, consensus=gamma,
                            every=every)
        with jax.enable_x64(True):
            law = exact.exact_moments(samplers[kind], q, W, np.zeros(d), np.eye(d), T,
                                      step_size=eta, channel=channel)
        mean, cov = _feedback_mixture(kind, q, W, eta, gamma, k, T, every)
        np.testing.assert_allclose(law.mean[-1], mean, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(law.cov[-1], cov, rtol=1e-10, atol=1e-12)
    if cells == "diging":
        return
    with jax.enable_x64(True):
        full, exact_messages = (
            exact.exact_moments(samplers["diging"], quadratics[2], W, np.zeros(2), np.eye(2), T,
                                step_size=eta,
                                channel=C.Channel(c, error_feedback=True, consensus=gamma))
            for c in (C.random_k(1.0), C.identity()))
    np.testing.assert_allclose(full.cov, exact_messages.cov, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(full.mean, exact_messages.mean, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cells", [
    "diging",
    pytest.param("all", marks=pytest.mark.slow),  # fast twin: the "diging" cell
])
def test_exact_moments_with_random_k_and_error_feedback_match_monte_carlo(cells, key,
                                                                         monkeypatch):
    """``Channel(random_k(0.5), error_feedback=True, consensus=0.5)`` (k = 1 of d = 2 kept
    unscaled, public copies from 0) in ``exact_moments``: DIGing-SGLD (``"all"``: and
    DE-SGLD, D-ULA, DE-SGHMC, DIGing-SGHMC, and DIGing-SGLD and DE-SGLD with every = 2) on
    the ring of 4, 10 steps, 6000 chains of ``dgsgld.sample``: every z-score within the
    Bonferroni bound (:func:`_bound`). Rejected for DIGing-SGLD, each propagated by the same
    recursion with another mask law (``_random_k_mask``): with the masks' mean ``(k/d) I``
    alone (the same means; without the masks' spread the covariances are too small), and
    with every entry sent (``D = I``: the copies equal the messages, their lag ignored; the
    law of error feedback with exact messages, by
    test_exact_moments_with_random_k_and_error_feedback_equal_the_mask_mixture)."""
    from dgsgld.theory import exact
    from tests._moments import exact_quadratic

    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    W, eta, T = np.asarray(ring(N), np.float64), 0.1, 10
    channel = C.Channel(C.random_k(0.5), error_feedback=True, consensus=0.5)
    runs = [(dgsgld.DIGingSGLD(eta), channel)]
    if cells == "all":
        runs += [(alg, channel) for alg in (
            dgsgld.DESGLD(eta), dgsgld.DULA(eta / N, 0.5), dgsgld.DESGHMC(eta, 2.0),
            dgsgld.DIGingSGHMC(eta, 2.0))]
        every = C.Channel(C.random_k(0.5), error_feedback=True, consensus=0.5, every=2)
        runs += [(dgsgld.DIGingSGLD(eta), every), (dgsgld.DESGLD(eta), every)]
    bound = _bound(len(runs))
    alg, wrong = runs[0][0], []
    for keep in (0.5, 1.0):
        with monkeypatch.context() as patch, jax.enable_x64(True):
            patch.setattr(exact, "_random_k_mask",
                          lambda f, d, keep=keep: (keep, np.zeros((d, d))))
            wrong.append(exact.exact_moments(alg, exact_quadratic(problem), W, np.zeros(2),
                                             np.eye(2), T, channel=channel))
    z, spreadless, copies = _channel_z(alg, channel, problem, W, T, key, *wrong)
    assert z <= bound < min(spreadless, copies), (z, spreadless, copies)
    for alg, ch in runs[1:]:
        (z,) = _channel_z(alg, ch, problem, W, T, key)
        assert z <= bound, (type(alg).__name__, ch, z)


def _channel_grid():
    """``(options, channel)`` for every :class:`C.Channel` built from one or two of its
    options (values below; pairs the constructor refuses are left out)."""
    options = [("compressor", C.top_k(0.5)), ("compressor", C.quantize(4)),
               ("compressor", C.sign()), ("compressor", C.random_k(0.5)),
               ("error_feedback", True), ("every", 2), ("probability", 0.5),
               ("per_link", True), ("threshold", 0.0), ("threshold", 0.1),
               ("threshold", {"tracker": 0.5}), ("activity", 0.5), ("activity", _PATTERN),
               ("gossip", "edge"), ("gossip", "matching"),
               ("clock", C.Clock(compute=(1, 1, 1, 3), deadline=2.0)),
               ("clock", C.Clock(latency=1.0))]
    grid = [dict([a]) for a in options] + [
        dict([a, b]) for i, a in enumerate(options) for b in options[i + 1:] if a[0] != b[0]]
    out = []
    for kwargs in grid:
        try:
            out.append((kwargs, C.Channel(**kwargs)))
        except ValueError:              # not a channel (e.g. gossip with error feedback)
            pass
    return out


def test_exact_moments_refuses_other_channels_naming_channel_and_why():
    """Every channel of a grid over :class:`C.Channel`'s options (each option alone and every
    pair the constructor accepts) and every kind is either propagated by ``exact_moments``
    or refused before anything is computed with a ``ValueError`` that starts with
    ``"`channel`"`` and says why, the channel quoted. Then each family of refusals with its
    reason: compressors that are not linear in the message (with error feedback too), event
    triggers that depend on the state, combinations and kinds not propagated, enumerations
    too large, patterns of the wrong size and gossip over a traced ``mixing``."""
    from dgsgld.theory import exact

    def hessians_only(num_agents, local_size=3):
        # Every call below is refused before anything is computed: the Hessians of
        # linear_regression with zero shifts (exact_quadratic would compile the gradient).
        hessians = linear_regression(num_agents=num_agents, local_size=local_size,
                                     dim=2).hessians
        return exact.Quadratic(np.asarray(hessians, np.float64), np.zeros((num_agents, 2)))

    problem = hessians_only(N)
    W = np.asarray(ring(N), np.float64)

    def refusal(channel, kind, quadratic=problem, mixing=W):
        try:
            exact._channel_law(channel, kind, N)
        except ValueError:
            with pytest.raises(ValueError) as error:
                exact.exact_moments(kind, quadratic, mixing, np.zeros(2), np.eye(2), 1,
                                    channel=channel)
            return str(error.value)
        return None

    every_sampler = [make(0.1) for make in dgsgld.samplers.ALL] + [
        dgsgld.PushDIGingSGLD(0.1, noise_rule="uniform"),
        dgsgld.PushSumSGLD(0.1, noise_rule="uniform")]
    refused = 0
    for kwargs, channel in _channel_grid():
        for kind in every_sampler:
            message = refusal(channel, kind)
            if message is not None:
                refused += 1
                assert message.startswith("`channel`: ") and message.endswith(
                    f"; got {channel!r}."), (kwargs, kind, message)
                why = message[len("`channel`: "):-len(f"; got {channel!r}.")]
                assert len(why.split()) >= 5, (kwargs, kind, message)     # a reason, not a tag
    assert refused > 100, refused
    de, diging = dgsgld.DESGLD(0.1), dgsgld.DIGingSGLD(0.1)
    reasons = [
        (C.Channel(C.top_k(0.5)), de, "TopK messages are not linear in the message"),
        (C.Channel(C.quantize(4)), diging, "Quantize messages are not linear"),
        (C.Channel(C.top_k(0.5), error_feedback=True), de,
         "TopK messages are not linear in the message"),
        (C.Channel(C.random_k(0.5), error_feedback=True, activity=0.5), diging,
         "random-k messages are propagated over a fixed matrix only, not with stragglers"),
        (C.Channel(threshold=0.1), de, "a function of the state, so the recursion is not "
                                       "linear"),
        (C.Channel(threshold={"tracker": 0.5}), diging, "a function of the state"),
        (C.Channel(probability=0.5, per_link=True, activity=0.5), de,
         "link drops are propagated alone, not with stragglers"),
        (C.Channel(C.random_k(0.5), gossip="edge"), diging,
         "random-k messages are propagated over a fixed matrix only, not with gossip"),
        (C.Channel(probability=0.5, per_link=True), dgsgld.EXTRASGLD(0.1),
         r"random link drops are propagated for the samplers whose messages are blocks of the "
         r"state before the step \(offset and noise free of W\), not for EXTRA-SGLD"),
        (C.Channel(gossip="edge"), dgsgld.PushSumSGLD(0.1), "only exact messages and every=τ "
                                                           "are propagated"),
        (C.Channel(), dgsgld.SGLD(0.1), "the centralized SGLD sends no messages"),
        (C.Channel(activity=np.ones((2, 3))), de, "`activity` pattern has 3 agents per "
                                                  "row; the quadratic has 4"),
    ]
    for channel, kind, why in reasons:
        message = refusal(channel, kind)
        assert message is not None and re.search(why, message), (channel, kind, message)
    with pytest.raises(ValueError, match="`channel` must be None or a dgsgld.communication"):
        exact.exact_moments(de, problem, W, np.zeros(2), np.eye(2), 1, channel="drop")
    many = hessians_only(13, 2)
    with pytest.raises(ValueError, match=r"`channel`: random stragglers enumerate the 2\^N "
                                         r"active sets; N = 13 > 12"):
        exact.exact_moments(de, many, np.full((13, 13), 1 / 13), np.zeros(2), np.eye(2), 1,
                            channel=C.Channel(activity=0.5))
    seven = hessians_only(7, 2)
    with pytest.raises(ValueError, match="`channel`: gossip='matching' is not enumerable "
                                         "here: `mode`: .* 279936 proposal profiles"):
        exact.exact_moments(de, seven, complete_graph(7), np.zeros(2), np.eye(2), 1,
                            channel=C.Channel(gossip="matching"))
    with pytest.raises(ValueError, match="`channel`: gossip's outcomes are enumerated from the "
                                         "links of `mixing`, which must then be concrete"):
        jax.jit(lambda m: exact.exact_moments(de, problem, m, np.zeros(2), np.eye(2), 1,
                                              channel=C.Channel(gossip="edge"))
                .mean)(W)


@pytest.mark.slow  # fast twins: test_exact_moments_refuses_other_channels_naming_channel_and_why
# (which channels are accepted) and the Monte Carlo tests above (their laws)
def test_exact_moments_propagates_every_accepted_channel():
    """Every channel of :func:`_channel_grid` that ``exact_moments`` accepts, for DE-SGLD,
    DIGing-SGLD, EXTRA-SGLD and Push-DIGing-SGLD (on the directed ring), runs and gives a
    law: over 4 steps from N(0, I) finite means, symmetric covariances with eigenvalues
    ``≥ −1e-10`` (float64), and at ``k = 1`` every agent's covariance at least ``2η I``: given
    the channel's draws an active agent's ``x⁽¹⁾`` has the step's noise ``√(2η) w``
    (independent of the rest) and a held one keeps ``x⁽⁰⁾`` (covariance ``I ≥ 2η I``), so by
    the law of total covariance so has the mixture (to ``1e-10``)."""
    from dgsgld.theory import exact
    from tests._moments import exact_quadratic

    problem = exact_quadratic(linear_regression(num_agents=N, local_size=3, dim=2))
    eta, propagated = 0.1, 0
    for _, channel in _channel_grid():
        for kind in (dgsgld.DESGLD(eta), dgsgld.DIGingSGLD(eta), dgsgld.EXTRASGLD(eta),
                     dgsgld.PushDIGingSGLD(eta)):
            try:
                exact._channel_law(channel, kind, N)
            except ValueError:
                continue
            directed = isinstance(kind, dgsgld.PushDIGingSGLD)
            mixing = _directed_ring() if directed else np.asarray(ring(N))
            with jax.enable_x64(True):
                law = exact.exact_moments(kind, problem, mixing, np.zeros(2), np.eye(2), 4,
                                          step_size=eta, channel=channel)
                cov = np.asarray(law.cov)
            propagated += 1
            assert np.isfinite(np.asarray(law.mean)).all(), (kind, channel)
            np.testing.assert_allclose(cov, np.swapaxes(cov, -1, -2), atol=1e-12)
            assert np.linalg.eigvalsh(cov).min() >= -1e-10, (kind, channel)
            assert np.linalg.eigvalsh(cov[1]).min() >= 2 * eta - 1e-10, (kind, channel)
    assert propagated > 100, propagated
