"""Distances (Gaussian and empirical W2, consensus error) against closed forms."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import linalg

from dgsgld import evaluate
from dgsgld.evaluate import empirical_w2


def random_spd(rng, d):
    a = rng.normal(size=(d, d))
    return a @ a.T + 0.1 * np.eye(d)


def w2_reference(m1, s1, m2, s2):
    r = linalg.sqrtm(s1)
    cross = linalg.sqrtm(r @ s2 @ r).real
    return np.sqrt(max(np.sum((m1 - m2) ** 2) + np.trace(s1) + np.trace(s2)
                       - 2 * np.trace(cross), 0))


def test_one_dimensional_closed_form():
    # W2² between N(a, s²) and N(b, t²) is (a − b)² + (s − t)².
    w = evaluate.gaussian_w2(jnp.array([1.0]), jnp.array([[4.0]]), jnp.array([-2.0]),
                             jnp.array([[1.0]]))
    np.testing.assert_allclose(w, np.sqrt(9 + 1), rtol=1e-6)


def test_commuting_covariances():
    # Diagonal covariances: W2² = ‖m1 − m2‖² + Σ (√a_i − √b_i)².
    a, b = np.array([1.0, 4.0, 9.0]), np.array([4.0, 1.0, 9.0])
    w = evaluate.gaussian_w2(jnp.zeros(3), jnp.diag(a), jnp.ones(3), jnp.diag(b))
    np.testing.assert_allclose(w, np.sqrt(3 + 1 + 1), rtol=1e-6)


def test_against_scipy_sqrtm_and_symmetry():
    rng = np.random.default_rng(0)
    with jax.enable_x64(True):
        for d in (2, 6):
            m1, m2 = rng.normal(size=d), rng.normal(size=d)
            s1, s2 = random_spd(rng, d), random_spd(rng, d)
            w12 = float(evaluate.gaussian_w2(m1, s1, m2, s2))
            w21 = float(evaluate.gaussian_w2(m2, s2, m1, s1))
            np.testing.assert_allclose(w12, w2_reference(m1, s1, m2, s2), rtol=1e-8)
            np.testing.assert_allclose(w12, w21, rtol=1e-8)
            assert float(evaluate.gaussian_w2(m1, s1, m1, s1)) < 1e-6


def test_rank_deficient_covariance_is_finite():
    # Fewer samples than dimensions: the empirical covariance is singular.
    s = np.zeros((3, 3))
    s[0, 0] = 1.0
    w = evaluate.gaussian_w2(jnp.zeros(3), jnp.asarray(s), jnp.zeros(3), jnp.eye(3))
    np.testing.assert_allclose(w, np.sqrt(0 + 2 * 1.0), rtol=1e-6)  # only two unit directions


def test_per_agent_w2_matches_loop():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 4, 3, 2)).astype(np.float32)  # chain, iteration, agent, dim
    mean, cov = np.array([0.5, -0.5]), np.array([[1.0, 0.3], [0.3, 2.0]])
    w = np.asarray(evaluate.per_agent_w2(jnp.asarray(x), mean, cov))
    assert w.shape == (4, 3)
    for t in range(4):
        for i in range(3):
            xs = x[:, t, i].astype(np.float64)
            ref = w2_reference(xs.mean(0), np.cov(xs.T), mean, cov)
            np.testing.assert_allclose(w[t, i], ref, rtol=1e-4)
    with pytest.raises(ValueError, match="positions"):
        evaluate.per_agent_w2(jnp.zeros((5, 2)), mean, cov)


def test_a_metric_on_a_stored_trace_is_one_compiled_program(caplog):
    # Host checks, then one jitted computation: op-by-op dispatch would compile each of its
    # dozens of operations as a program of its own. Shapes no other test uses, so that none
    # of these programs is compiled already in this worker.
    x = np.random.default_rng(2).normal(size=(7, 3, 2, 5)).astype(np.float32)
    mean, cov = np.zeros(5, np.float32), np.eye(5, dtype=np.float32)
    with caplog.at_level(logging.WARNING), jax.log_compiles():
        w = evaluate.per_agent_w2(x, mean, cov)
        e = evaluate.consensus_error(x)
    compiled = [r.getMessage().split()[1] for r in caplog.records
                if r.getMessage().startswith("Compiling")]
    assert compiled == ["jit(_w2_to_target)", "jit(_consensus_error)"], compiled
    assert w.shape == (3, 2) and e.shape == (7, 3)
    np.testing.assert_allclose(w[0, 0], w2_reference(x[:, 0, 0].mean(0), np.cov(x[:, 0, 0].T),
                                                     mean, cov), rtol=1e-4)


def test_consensus_error():
    x = jnp.array([[[0.0, 0.0], [2.0, 0.0]]])  # two agents at distance 2: each 1 from average
    np.testing.assert_allclose(evaluate.consensus_error(x), [1.0])
    # Two chains whose agents are 1 and 3 from their average: the ensemble's error is the root
    # mean square sqrt((1 + 9) / 2), not the mean 2; per iteration with a (C, T, N, d) trace.
    chains = jnp.stack([x[0], 3 * x[0]])                       # (2, 2, 2)
    np.testing.assert_allclose(evaluate.ensemble_consensus_error(chains), np.sqrt(5.0), rtol=1e-6)
    trace = jnp.stack([chains, 0 * chains], axis=1)            # (2, 2 iterations, 2, 2)
    np.testing.assert_allclose(evaluate.ensemble_consensus_error(trace), [np.sqrt(5.0), 0.0],
                               rtol=1e-6)
    with pytest.raises(ValueError, match="positions"):
        evaluate.ensemble_consensus_error(x[0])                 # no chain axis


# -- reliability: impossible covariances are refused, naming the argument -----


@pytest.mark.reliability
def test_non_psd_covariance_is_refused_naming_the_argument():
    from dgsgld.evaluate import gaussian_w2, gaussian_w2_to_target

    mean = jnp.zeros(2)
    good = jnp.eye(2)
    bad = jnp.array([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and -1
    # Before the check these gave a number (clipped square roots hide the negative direction;
    # gaussian_w2(mean, bad, mean, bad) was 0). Tolerance for d = 2, float32: 10 d eps = 2.4e-6.
    with pytest.raises(ValueError, match=r"`cov2` must be positive semidefinite; its smallest "
                                         r"eigenvalue is -1, below the tolerance -7.15256e-06 "
                                         r"\(-2.38419e-06 x max\(1, largest eigenvalue 3\)\)"):
        gaussian_w2(mean, good, mean, bad)
    with pytest.raises(ValueError, match="`cov1` must be positive semidefinite"):
        gaussian_w2(mean, bad, mean, good)
    batch = jnp.stack([good, good, bad])
    with pytest.raises(ValueError, match=r"`cov1` .* is -1 \(matrix \(2,\)\)"):
        gaussian_w2(jnp.zeros((3, 2)), batch, jnp.zeros((3, 2)), jnp.stack([good] * 3))
    with pytest.raises(ValueError, match="`cov` must be positive semidefinite"):
        gaussian_w2_to_target(jnp.ones((5, 2)), mean, bad)


@pytest.mark.reliability
def test_rounding_and_rank_deficiency_are_accepted():
    from dgsgld.evaluate import empirical_moments, gaussian_w2

    # 3 draws in 6 dimensions: a rank-2 float32 covariance whose zero eigenvalues come out as
    # rounding noise of either sign; within tolerance, so accepted.
    samples = jax.random.normal(jax.random.key(0), (3, 6)) * 1e3
    m, s = empirical_moments(samples)
    assert np.isfinite(float(gaussian_w2(m, s, m, s)))
    # Slightly negative within the stated tolerance: accepted.
    near = jnp.diag(jnp.array([1.0, -5e-7]))
    assert float(gaussian_w2(jnp.zeros(2), near, jnp.zeros(2), near)) < 1e-3


def test_accuracy_counts_matching_labels_per_leading_index():
    predicted = jnp.array([[0, 1, 2, 2], [2, 2, 2, 2]])
    labels = jnp.array([0, 1, 1, 2])
    # Row 0 gets points 0, 1, 3 right (3/4); row 1 only point 3 (1/4).
    np.testing.assert_allclose(np.asarray(evaluate.label_accuracy(predicted, labels)),
                               [0.75, 0.25])
    # The predictive and streamed accuracies are this one: arg-max of log-probabilities.
    log_probs = jnp.log(jax.nn.one_hot(predicted[0], 3) * 0.9 + 0.1 / 3)
    assert float(evaluate.accuracy(log_probs, labels)) == 0.75
    with pytest.raises(ValueError, match=r"`labels` must have shape \(4,\)"):
        evaluate.label_accuracy(predicted, labels[:3])


def _unordered_pairs(jaxpr, name: str) -> int:
    """Pairs of equations, at any nesting level of ``jaxpr``, that both contain primitive
    ``name`` while neither depends on the other's outputs (XLA may run such a pair at once)."""
    def has(eqn):
        return eqn.primitive.name == name or any(
            name in _primitives(sub) for sub in jax.extend.core.jaxprs_in_params(eqn.params))

    ancestors = []   # per equation: indices of the equations its inputs come from, transitively
    made_by = {}
    for i, eqn in enumerate(jaxpr.eqns):
        seen = set()
        for var in eqn.invars:
            j = made_by.get(var) if isinstance(var, jax.extend.core.Var) else None
            if j is not None:
                seen |= {j} | ancestors[j]
        ancestors.append(seen)
        for var in eqn.outvars:
            made_by[var] = i
    calls = [i for i, eqn in enumerate(jaxpr.eqns) if has(eqn)]
    pairs = sum(1 for a in calls for b in calls if a < b and a not in ancestors[b])
    for eqn in jaxpr.eqns:
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            pairs += _unordered_pairs(sub, name)
    return pairs


def _primitives(jaxpr) -> list[str]:
    """Names of every equation's primitive in ``jaxpr``, sub-jaxprs (jit, scan bodies) included."""
    names = []
    for eqn in jaxpr.eqns:
        names.append(eqn.primitive.name)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            names += _primitives(sub)
    return names


def test_no_two_eigh_calls_of_a_w2_program_can_run_at_once():
    """Two independent batched ``eigh`` calls in one program can deadlock XLA:CPU (each waits
    inside the intra-op pool for its own sub-batches; docs/known-issues.md): every W2 program
    makes one call, or calls each of which waits for the one before."""
    from _problems import linear_regression, ring

    import dgsgld
    from dgsgld import theory

    rng = np.random.default_rng(0)
    a = rng.normal(size=(7, 3, 4, 4))
    cov = jnp.asarray(a @ np.swapaxes(a, -1, -2) + np.eye(4), jnp.float32)
    mean = jnp.zeros((7, 3, 4))
    target_mean, target_cov = jnp.ones(4), 2.0 * jnp.eye(4)
    positions = jnp.asarray(rng.normal(size=(50, 5, 3, 4)), jnp.float32)
    pb = linear_regression(batch_size=2)
    d = pb.mean.shape[0]
    programs = {
        "gaussian_w2": lambda: evaluate.gaussian_w2(
            mean, cov, jnp.broadcast_to(target_mean, (7, 3, 4)), target_cov),
        "per_agent_w2": lambda: evaluate.per_agent_w2(positions, target_mean, target_cov),
        "exact_w2": lambda: theory.exact_w2(
            theory.ExactMoments(mean, cov, *[None] * 6),
            target_mean, target_cov),
        "sample with streamed W2": lambda: dgsgld.sample(
            dgsgld.DIGingSGLD(0.05), pb.potential, ring(5), jnp.zeros((8, 5, d)),
            jax.random.key(0), 3, on_divergence="flag",
            output=dgsgld.Output(ensemble_fn=evaluate.streamed_per_agent_w2(pb.mean, pb.cov))),
    }
    for name, run in programs.items():
        jaxpr = jax.make_jaxpr(run)().jaxpr
        found = _primitives(jaxpr)
        # A run records its initial state before its loop and every kept iteration inside it:
        # two calls, the loop's waiting for the first (an optimization barrier between them).
        assert found.count("eigh") == (2 if name.startswith("sample") else 1), name
        assert _unordered_pairs(jaxpr, "eigh") == 0, name


def test_empirical_w2_exact_cases():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 4))
    shift = np.array([0.3, -1.0, 2.0, 0.0])
    # A translate: the identity pairing is optimal, W2 = |shift| exactly (any permutation).
    assert empirical_w2(x, x[rng.permutation(200)] + shift, size=200) == pytest.approx(
        np.linalg.norm(shift), rel=1e-10)
    # One dimension: the optimal pairing matches order statistics.
    a, b = rng.normal(size=(300, 1)), rng.standard_t(3, size=(300, 1))
    want = np.sqrt(np.mean((np.sort(a[:, 0]) - np.sort(b[:, 0])) ** 2))
    assert empirical_w2(a, b, size=300) == pytest.approx(want, rel=1e-10)
    # Scales divide coordinates first.
    scale = np.array([2.0, 2.0, 2.0, 2.0])
    assert empirical_w2(x, x + shift, size=200, scale=scale) == pytest.approx(
        np.linalg.norm(shift) / 2, rel=1e-10)


def test_empirical_w2_of_gaussians():
    # y_i = mu + S x_i with S symmetric positive definite: x -> mu + S x is the gradient of a
    # convex function, so the pairing i -> i is cyclically monotone and hence optimal between
    # the empirical measures: W2^2 = mean_i |mu + (S - I) x_i|^2 exactly. For x ~ N(0, I) its
    # expectation is |mu|^2 + tr (S - I)^2, the closed-form W2^2 between N(0, I) and
    # N(mu, S^2) (dgsgld.evaluate.gaussian_w2); checked within 4 standard errors of the mean of
    # the m terms (p ~ 6e-5).
    from dgsgld.evaluate import gaussian_w2

    rng = np.random.default_rng(5)
    m, d = 300, 3
    a = rng.normal(size=(d, d))
    vals, vecs = np.linalg.eigh(a @ a.T / d + 0.2 * np.eye(d))
    s = vecs @ np.diag(np.sqrt(vals)) @ vecs.T
    mu = np.array([0.5, -0.3, 1.0])
    x = rng.normal(size=(m, d))
    y = mu + x @ s
    terms = np.sum((mu + x @ (s - np.eye(d))) ** 2, axis=1)
    got = empirical_w2(x, y[rng.permutation(m)], size=m)
    assert got == pytest.approx(np.sqrt(terms.mean()), rel=1e-10)
    exact = float(gaussian_w2(np.zeros(d), np.eye(d), mu, s @ s))
    assert exact**2 == pytest.approx(mu @ mu + np.trace((s - np.eye(d)) @ (s - np.eye(d))),
                                     rel=1e-4)
    assert abs(got**2 - exact**2) < 4 * terms.std(ddof=1) / np.sqrt(m)


@pytest.mark.reliability
def test_empirical_w2_refuses_bad_input():
    with pytest.raises(ValueError, match="`y` has 2 coordinates; expected 3"):
        empirical_w2(np.zeros((5, 3)), np.zeros((5, 2)))
    with pytest.raises(ValueError, match="`x` holds non-finite values"):
        empirical_w2(np.full((5, 3), np.nan), np.zeros((5, 3)))
