"""Preconditioned samplers (``preconditioner=M``) and their exact laws.

Tolerances. Algebraic identities (``S Sᵀ = M``, a step against its recursion) hold to rounding:
float64, a handful of products of O(1) matrices, so ``1e-10``. The Monte Carlo tests compare
``C`` independent chains with the exact law (quadratic potential, full batches): each sample
mean and each sample covariance entry in standard errors estimated from the chains themselves
(of the mean, and of the mean of the centred products; valid for the mixture law of a random
channel too), all ``m`` z-scores of a test within ``Φ⁻¹(1 − α/(2m))``, ``α = 1e-3`` family-wise
(Bonferroni). With ``C = 2000`` the z-scores are close to normal (the estimated standard error
of a covariance entry is off by ``O(1/√C)``, a few percent).
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import dgsgld
from dgsgld import samplers
from dgsgld import theory as th
from dgsgld.networks import directed
from dgsgld.samplers import (
    DensePreconditioner,
    DiagonalPreconditioner,
    LowRankPreconditioner,
)
from tests._moments import INIT_COV, INIT_MEAN, exact_quadratic
from tests._problems import linear_regression, permuted_rings, ring

#: A non-trivial dense M for d = 2: eigenvalues 0.47 and 1.83, eigenvectors off the axes.
M2 = np.array([[1.5, 0.6], [0.6, 0.8]])


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def _make(cls, eta, **kw):
    """``cls`` at step ``η`` with its second parameter away from the default."""
    if cls is dgsgld.DULA:
        return cls(eta, 0.6, **kw)
    if cls in (dgsgld.DESGHMC, dgsgld.DIGingSGHMC):
        return cls(eta, 1.5, **kw)
    return cls(eta, **kw)


def _network(algorithm, n=4, seed=4):
    """The sampler's own kind of network: a directed (column-stochastic, not doubly
    stochastic) schedule for the push-sum samplers, permuted rings for the others."""
    if not algorithm.decentralized:
        return None
    if th.recursions.is_directed(algorithm):
        return directed.one_way_link_failures(np.ones((n, n)) - np.eye(n), 0.5, period=3,
                                              seed=seed, dtype=jnp.float64)
    return permuted_rings(n, 3, seed=seed)


# ---------------------------------------------------------------- the representations


def test_square_roots_and_products_match_the_dense_matrices(x64):
    # Parameters {"a": (2,), "b": (3, 2)}: d = 8, flattened in ravel_pytree's order.
    rng = np.random.default_rng(0)
    tree = {"a": jnp.asarray(rng.normal(size=2)), "b": jnp.asarray(rng.normal(size=(3, 2)))}
    flat, unravel = ravel_pytree(tree)
    X = rng.normal(size=(8, 8))
    U = rng.normal(size=(8, 3))
    U[:, 2] = 0.0  # a zero direction: eigenvalue 0 of VᵀV
    diag = rng.uniform(0.5, 2.0, size=8)
    pres = {
        "dense": DensePreconditioner(X @ X.T + np.eye(8)),
        "diagonal flat": DiagonalPreconditioner(diag),
        "diagonal tree": DiagonalPreconditioner(jax.tree.map(jnp.asarray, unravel(diag))),
        "low rank": LowRankPreconditioner(diag, U),
    }
    expected_M = {"dense": X @ X.T + np.eye(8), "diagonal flat": np.diag(diag),
                  "diagonal tree": np.diag(diag), "low rank": np.diag(diag) + U @ U.T}
    for name, pre in pres.items():
        M, S = (np.asarray(a) for a in pre.dense(np))
        np.testing.assert_allclose(M, expected_M[name], rtol=1e-12, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(S @ S.T, M, rtol=1e-12, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(ravel_pytree(pre.apply(tree))[0], M @ flat, rtol=1e-12,
                                   err_msg=name)
        np.testing.assert_allclose(ravel_pytree(pre.noise(tree))[0], S @ flat, rtol=1e-12,
                                   err_msg=name)
        # Leaves raveled to (size,) (the runner's flat noise): the same numbers.
        flat_tree = jax.tree.map(jnp.ravel, tree)
        np.testing.assert_allclose(ravel_pytree(pre.noise(flat_tree))[0], S @ flat,
                                   rtol=1e-12, err_msg=name)
    assert np.allclose(np.asarray(pres["dense"].root), np.tril(pres["dense"].root))  # Cholesky


@pytest.mark.reliability
def test_bad_preconditioners_are_refused_naming_the_argument():
    cases = [
        (lambda: DensePreconditioner(np.array([[1.0, 0.5], [0.0, 1.0]])), "must be symmetric"),
        (lambda: DensePreconditioner(np.array([[1.0, 2.0], [2.0, 1.0]])),
         "positive definite; its smallest eigenvalue is -1"),
        (lambda: DensePreconditioner(np.ones((2, 3))), r"square \(d, d\); got shape \(2, 3\)"),
        (lambda: DensePreconditioner(np.array([[np.nan]])), "non-finite"),
        (lambda: DiagonalPreconditioner(np.array([1.0, 0.0])), "must be positive"),
        (lambda: DiagonalPreconditioner("big"), r"\(d,\) array or a pytree of arrays"),
        (lambda: LowRankPreconditioner(np.ones(3), np.ones((2, 1))),
         r"\(d, k\) with d = 3 .* got shape \(2, 1\)"),
        (lambda: LowRankPreconditioner(-np.ones(2), np.ones((2, 1))), "must be positive"),
        (lambda: dgsgld.DIGingSGLD(0.1, preconditioner=np.eye(2)),
         "must be None or a dgsgld.samplers Preconditioner"),
    ]
    for make, why in cases:
        with pytest.raises(ValueError, match=r"`preconditioner`.*" + why):
            make()


@pytest.mark.reliability
def test_mismatched_shapes_are_refused_naming_preconditioner_and_shapes():
    prob = linear_regression(num_agents=4, local_size=3, dim=2)
    init = jnp.zeros((2, 4, 2))
    cases = [
        (DensePreconditioner(np.eye(3)), (r"a \(3, 3\) matrix for parameters of 2 entries "
                                          r"\(one agent's leaves shaped \[\(2,\)\]\)")),
        (DiagonalPreconditioner(np.ones(3)), r"a \(3,\) diagonal for parameters of 2 entries"),
        (DiagonalPreconditioner({"w": np.ones((2, 1))}),
         (r"a diagonal with leaves shaped \[\(2, 1\)\] for parameters whose leaves are shaped "
          r"\[\(2,\)\]")),
        (LowRankPreconditioner(np.ones(5), np.ones((5, 1))),
         "a rank-1 plus diagonal matrix of size d = 5 for parameters of 2 entries"),
    ]
    for pre, why in cases:
        for make in (dgsgld.DIGingSGLD, dgsgld.SGLD):
            x = init if make is dgsgld.DIGingSGLD else init[:, 0]
            with pytest.raises(ValueError, match=r"`preconditioner`: " + why):
                dgsgld.sample(make(0.05, preconditioner=pre), prob.potential,
                              ring(4) if make is dgsgld.DIGingSGLD else None, x,
                              jax.random.key(0), 2)


# ---------------------------------------------------------------- the step is its recursion


def _blocks_flat(state, blocks):
    return np.concatenate([np.asarray(getattr(state, name), np.float64).ravel()
                           for name in blocks])


def test_each_step_is_its_exact_recursion(x64):
    """Every sampler of :data:`dgsgld.samplers.ALL`, without and with the dense ``M2``: one
    engine step from a random state with a given noise ``w`` equals ``M s + c + G w`` of its
    registered recursion (no Monte Carlo error: full batches make the step deterministic
    given ``w``). The state's auxiliary blocks (tracker, dual, velocity) and the push-sum
    weights are random, not their initial values, so every column of ``M`` is exercised; ``W``
    is a permuted ring, or for the push-sum samplers a column-stochastic matrix that is not
    doubly stochastic. The noise passed flat (the runner's layout) gives the same step."""
    prob = linear_regression(num_agents=4, local_size=3, dim=2, heterogeneous=True,
                             dtype=np.float64)
    q = exact_quadratic(prob)
    rng = np.random.default_rng(1)
    key = jax.random.key(5)
    C = directed.out_degree_weights(
        np.array([[0, 1, 1, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0]], bool))
    for cls in samplers.ALL:
        for pre in (None, DensePreconditioner(M2)):
            algo = _make(cls, 0.07, preconditioner=pre)
            law = th.recursion_of(algo)
            directed_ = th.recursions.is_directed(algo)
            W = C if directed_ else permuted_rings(4, 2, seed=3)[1] if algo.decentralized \
                else None
            shape = (4, 2) if algo.decentralized else (2,)
            state = algo.init(jnp.asarray(rng.normal(size=shape)), prob.potential, key)
            for name in law.blocks[1:]:  # any tracker, dual, velocity: the step is affine in them
                state = state._replace(**{name: jnp.asarray(rng.normal(size=shape))})
            weight = None
            if directed_:
                weight = rng.uniform(0.5, 1.5, size=4)
                state = state._replace(weight=jnp.asarray(weight[:, None]))
            w = rng.normal(size=shape)
            rec = th.linear_recursion(algo, q, W, weight=weight, xp=np)
            mixing = None if W is None else jnp.asarray(W)
            new = _blocks_flat(algo.step(key, state, prob.potential, mixing, jnp.asarray(w)),
                               law.blocks)
            expected = (rec.matrix @ _blocks_flat(state, law.blocks) + rec.offset
                        + rec.noise @ w.ravel())
            np.testing.assert_allclose(new, expected, rtol=1e-10, atol=1e-10,
                                       err_msg=f"{cls.name}, {pre}")
            flat = algo.step(key, state, prob.potential, mixing, jnp.asarray(w.ravel()))
            np.testing.assert_allclose(_blocks_flat(flat, law.blocks), new, rtol=1e-13,
                                       atol=1e-13, err_msg=f"{cls.name}, {pre}")


# ---------------------------------------------------------------- exact laws with M


def _z_scores(x, mean, cov):
    """z-scores of the sample means and covariance entries (upper triangle) of chains
    ``x (C, ..., d)`` against ``(mean, cov)``, in the chains' own standard errors (of the
    sample mean, and of the mean of the centred products): valid for any law with four
    moments, the mixtures of a random channel too."""
    c = x.shape[0]
    z_mean = (x.mean(0) - mean) / (x.std(0, ddof=1) / np.sqrt(c))
    centred = x - x.mean(0)
    prods = centred[..., :, None] * centred[..., None, :]
    z_cov = (prods.mean(0) * c / (c - 1) - cov) / (prods.std(0, ddof=1) / np.sqrt(c))
    iu = np.triu_indices(x.shape[-1])
    return np.concatenate([z_mean.ravel(), z_cov[..., iu[0], iu[1]].ravel()])


#: The default cell: DIGing-SGLD with SVRG (batches of all local data: the exact gradient) and
#: random link drops (a mixture law).
_CELLS = {dgsgld.DIGingSGLD: ("svrg", True)}


@pytest.mark.parametrize("cls", [
    pytest.param(cls, marks=() if cls in _CELLS else pytest.mark.slow, id=cls.name)
    # fast twins of the slow cells: test_each_step_is_its_exact_recursion (every sampler's
    # step is its recursion with M) and the default cell (the law's propagation with M)
    for cls in samplers.ALL])
def test_exact_law_with_a_dense_preconditioner_matches_monte_carlo(cls, x64):
    """Every sampler with the dense ``M2`` on its own kind of network (directed, not doubly
    stochastic, for the push-sum samplers): 2000 chains of 8 steps from ``N(m₀, S₀)`` against
    the exact law at ``k = 1, 4, 8``, every agent's means and covariance entries, z-scores in
    the chains' own standard errors (:func:`_z_scores`) within the Bonferroni bound for
    ``α = 1e-3``. The default cell adds a control variate (whose gradient is exact here) and
    ``Channel(probability=0.5, per_link=True)``."""
    from scipy.stats import norm

    from dgsgld import communication as C

    estimator, drops = _CELLS.get(cls, (None, False))
    # A control variate needs mini-batches: batches of all 4 local data, drawn without
    # replacement, give the full gradient up to the order of its sum.
    prob = linear_regression(num_agents=4, local_size=4, dim=2, heterogeneous=True,
                             batch_size=None if estimator is None else 4, dtype=np.float64)
    est = None if estimator is None else getattr(dgsgld.gradients, estimator)()
    algo = _make(cls, 0.05, preconditioner=DensePreconditioner(M2), estimator=est) \
        if cls is not dgsgld.SGLD else cls(0.05, preconditioner=DensePreconditioner(M2))
    channel = C.Channel(probability=0.5, per_link=True) if drops else None
    mixing, num_steps, check_at = _network(algo), 8, (1, 4, 8)
    shape = (2000, 4, 2) if algo.decentralized else (2000, 2)
    draws = np.random.default_rng(1).normal(size=shape)
    init = jnp.asarray(INIT_MEAN + draws @ np.linalg.cholesky(INIT_COV).T)
    options = {} if channel is None else {"channel": channel}
    trace = dgsgld.sample(algo, prob.potential, mixing, init, jax.random.key(2), num_steps,
                          **options)
    law = th.exact_moments(algo, exact_quadratic(prob), mixing, INIT_MEAN, INIT_COV, num_steps,
                           channel=channel)
    positions = np.asarray(trace.positions)
    z = np.concatenate([_z_scores(positions[:, k], np.asarray(law.mean[k]),
                                  np.asarray(law.cov[k])) for k in check_at])
    assert np.abs(z).max() <= norm.ppf(1 - 1e-3 / (2 * z.size)), np.abs(z).max()


def test_preconditioned_ula_has_the_closed_form_stationary_law(x64):
    """Centralized SGLD with ``M = S Sᵀ``: in ``y = S⁻¹x`` it is ULA on ``Ã = SᵀAS``, so its
    stationary law is ``N(A⁻¹b, S (Ã (I − ηÃ/2))⁻¹ Sᵀ)``; the exact recursion reaches it (ρ⁵⁰⁰
    below 1e-12) and the stationary solver gives it, float64."""
    rng = np.random.default_rng(0)
    A = np.stack([a @ a.T + 0.5 * np.eye(2) for a in rng.normal(size=(3, 2, 2))])
    q = th.Quadratic(A, rng.normal(size=(3, 2)))
    eta = 0.03
    algo = dgsgld.SGLD(eta, preconditioner=DensePreconditioner(M2))
    S = np.linalg.cholesky(M2)
    At = S.T @ A.sum(0) @ S
    closed = S @ np.linalg.inv(At @ (np.eye(2) - eta * At / 2)) @ S.T
    st = th.stationary_moments(algo, q, None)
    np.testing.assert_allclose(st.cov[0], closed, rtol=1e-10)
    np.testing.assert_allclose(st.mean[0], q.minimizer(), rtol=1e-10)
    out = th.exact_moments(algo, q, None, np.zeros(2), np.eye(2), 500)
    np.testing.assert_allclose(out.cov[-1], closed, rtol=1e-8)


def test_network_average_with_preconditioner_tends_to_the_posterior(x64):
    """DIGing-SGLD with a dense ``M``: the network average moves like preconditioned ULA on
    ``f`` at step ``η/N`` (the tracker keeps ``Σ y = Σ ∇f_i``), so its stationary law tends to
    the posterior as ``η → 0`` with a W2 of order ``η`` (every source of bias, the
    discretisation and the agents' disagreement, is ``O(η)``): the log-log slope over
    ``η ∈ [2.5e-4, 2e-3]`` lies in the declared band [0.9, 1.1] and the W2 at the smallest step
    is below 1% of the posterior's scale. The same with an ``M`` far from ``I`` (condition
    number 100), whose bias is larger but has the same order."""
    prob = linear_regression(num_agents=5, local_size=4, dim=2, heterogeneous=True,
                             dtype=np.float64)
    q = th.Quadratic(np.asarray(prob.hessians, np.float64),
                     np.einsum("nki,nk->ni", prob.Z, prob.y))
    mean, cov = q.target()
    steps = np.array([2.5e-4, 5e-4, 1e-3, 2e-3])
    scale = np.sqrt(np.trace(cov))
    for M in (M2, np.array([[10.0, 0.0], [0.0, 0.1]])):
        algo = dgsgld.DIGingSGLD(1.0, preconditioner=DensePreconditioner(M))
        w2 = []
        for eta in steps:
            st = th.stationary_moments(algo, q, ring(5), step_size=eta)
            assert st.spectral_radius < 1
            with jax.enable_x64(True):
                w2.append(float(dgsgld.evaluate.gaussian_w2(
                    st.average_mean[0], st.average_cov[0], mean, cov)))
        slope, _ = th.loglog_slope(steps, np.array(w2))
        assert 0.9 <= slope <= 1.1, (M, slope, w2)
        assert w2[0] < 0.01 * scale, (M, w2)


# ---------------------------------------------------------------- with the rest of the toolkit


def test_tracker_sum_is_kept_with_saga():
    """``M`` acts on the step, not on the tracker: ``Σ_i y_i = Σ_i ∇̃f_i(x_i)`` at every
    iteration, here with SAGA's mini-batches. Float32: each step rounds the sum at
    ``~N u |y|``, so after 15 steps ``|Σ(y − g)| ≤ 15 · 4 · 2⁻²⁴ · 4 max|y| · 10`` (safety 10);
    a tracker that absorbed ``M`` would miss by ``|(M − I) Σ g| = O(1)``."""
    prob = linear_regression(num_agents=4, local_size=6, dim=2, batch_size=2, heterogeneous=True)

    def gap(state):
        return (jnp.max(jnp.abs(jnp.sum(state.tracker - state.grad, axis=0))),
                jnp.max(jnp.abs(state.tracker)))

    algo = dgsgld.DIGingSGLD(0.05, dgsgld.gradients.saga(), preconditioner=LowRankPreconditioner(
        np.array([0.5, 2.0]), np.array([[1.0], [-0.5]])))
    trace = dgsgld.sample(algo, prob.potential, permuted_rings(4, 3), jnp.zeros((2, 4, 2)),
                          jax.random.key(0), 15, output=dgsgld.Output(trace_fn=gap))
    err, scale = (np.asarray(v) for v in trace.values)
    assert np.all(err <= 15 * 4 * 2**-24 * 4 * scale * 10), err.max()


class _Model(eqx.Module):
    """Parameters as an ``eqx.Module``: array leaves of two shapes and a function leaf, which
    the runner keeps static."""

    weight: jax.Array      # (2, 2)
    bias: jax.Array        # (2,)
    activation: object

    def __call__(self, z):
        return jnp.sum(self.activation(self.weight @ z + self.bias))


def _model_log_likelihood(model, datum):
    z, y = datum
    return -0.5 * (model(z) - y) ** 2


def _model_log_prior(model):
    return -0.5 * (jnp.sum(model.weight**2) + jnp.sum(model.bias**2))


@functools.cache
def _model_problem():
    """``(potential, init (2 chains, 3 agents), m (6,), unravel, static)`` of :class:`_Model`,
    the same objects for the tests below, so that they share compiled runs."""
    model = _Model(jnp.eye(2), jnp.zeros(2), jnp.tanh)
    arrays, static = eqx.partition(model, eqx.is_array)
    _, unravel = ravel_pytree(arrays)
    rng = np.random.default_rng(2)
    data = (jnp.asarray(rng.normal(size=(3, 4, 2)), jnp.float32),
            jnp.asarray(rng.normal(size=(3, 4)), jnp.float32))
    potential = dgsgld.Potential(_model_log_likelihood, _model_log_prior, data)
    init = jax.tree.map(lambda x: jnp.broadcast_to(x, (2, 3, *x.shape)) if eqx.is_array(x)
                        else x, model)
    m = rng.uniform(0.5, 2.0, size=6).astype(np.float32)
    return potential, init, m, unravel, static


def _flat_positions(trace):
    return np.asarray(ravel_pytree(eqx.filter(trace.positions, eqx.is_array))[0])


@pytest.mark.slow  # fast twin: tests/tuning/test_warmup.py::
# test_pytree_parameters_with_a_diagonal_preconditioner (a pytree diagonal M in a run)
def test_grid_run_with_a_pytree_diagonal_equals_each_dense_run():
    """``tuning.grid_run`` vmaps the sampler over step sizes, here on ``eqx.Module``
    parameters with ``M = diag(m)`` given as a pytree shaped like the model; each grid point
    equals ``dgsgld.sample`` with the same ``M`` as a dense matrix on ``ravel_pytree``'s
    order (float32 rounding: Cholesky of a diagonal is its square root, the products add exact
    zeros). So the vmapped preconditioner, the runner's static leaves and the two
    representations' orders agree."""
    potential, init, m, unravel, static = _model_problem()
    tree = DiagonalPreconditioner(eqx.combine(unravel(jnp.asarray(m)), static))
    steps = np.array([0.02, 0.05], np.float32)
    grid = dgsgld.tuning.grid_run(lambda eta: dgsgld.DIGingSGLD(eta, preconditioner=tree),
                                  steps, potential, ring(3), init, jax.random.key(1), 5,
                                  score_fn=lambda t: eqx.filter(t.state.position, eqx.is_array))
    for i, eta in enumerate(steps):
        one = dgsgld.sample(dgsgld.DIGingSGLD(eta, preconditioner=DensePreconditioner(
            np.diag(m))), potential, ring(3), init, jax.random.key(1), 5)
        got = jax.tree.map(functools.partial(lambda a, i: a[i], i=i), grid.score)
        np.testing.assert_allclose(ravel_pytree(got)[0],
                                   ravel_pytree(eqx.filter(one.state.position, eqx.is_array))[0],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # fast twin:
# tests/runner/test_reliability_checkpoint.py::test_resume_with_other_settings_is_refused
def test_checkpoint_resume_needs_the_same_preconditioner(tmp_path):
    """A chunked run with a preconditioner equals one call bit for bit, a different ``M``
    moves the chains, and a resume with it is refused naming the field, as a changed step
    size is."""
    from dgsgld.runner.checkpoint import sample_chunked

    potential, init, m, _, _ = _model_problem()

    def algo(diagonal):
        return dgsgld.DIGingSGLD(np.float32(0.05), preconditioner=DensePreconditioner(
            np.diag(diagonal)))

    whole = dgsgld.sample(algo(m), potential, ring(3), init, jax.random.key(1), 5)
    chunked = sample_chunked(algo(m), potential, ring(3), init, jax.random.key(1), 5,
                             chunk_size=3, path=tmp_path / "run")
    np.testing.assert_array_equal(_flat_positions(chunked), _flat_positions(whole))
    other = dgsgld.sample(algo(2 * m), potential, ring(3), init, jax.random.key(1), 5)
    assert np.abs(_flat_positions(other) - _flat_positions(whole)).max() > 1e-2
    with pytest.raises(ValueError, match=r"`algorithm\.preconditioner\.matrix` differs from "
                                         r"the checkpoint"):
        sample_chunked(algo(2 * m), potential, ring(3), init, jax.random.key(1), 5,
                       chunk_size=3, path=tmp_path / "run")


# ---------------------------------------------------------------- the registries


def test_sampler_registry_and_every_sampler_has_an_exact_law():
    names = [cls.name for cls in samplers.ALL]
    assert names == ["DIGing-SGLD", "DE-SGLD", "EXTRA-SGLD", "DIGing-SGHMC", "DE-SGHMC",
                     "D-ULA", "SGLD", "Push-DIGing-SGLD", "Push-Sum-SGLD"]
    for cls in samplers.ALL:
        assert samplers.by_name(cls.name) is cls
        assert th.recursion_of(_make(cls, 0.1)).blocks[0] == "position"
    with pytest.raises(ValueError, match=r"`name` must be one of \['DIGing-SGLD'"):
        samplers.by_name("diging")


def test_a_user_sampler_gets_an_exact_law_by_registering_its_recursion(x64):
    """A sampler of one's own: DE-SGLD whose drift is halved (``x⁺ = W x − (η/2) ∇F +
    √(2η) w``). Unregistered, ``exact_moments`` refuses it naming ``algorithm``; registered,
    its law is DE-SGLD's with a half-step drift and the full noise, and its engine step is
    that recursion."""

    class HalfDrift(dgsgld.DESGLD):
        name = "half-drift DE-SGLD"

        def step(self, key, state, potential, mixing_matrix, noise=None):
            grad = jax.tree.map(lambda g: 0.5 * g, state.grad)
            return super().step(key, state._replace(grad=grad), potential, mixing_matrix, noise)

    prob = linear_regression(num_agents=4, local_size=3, dim=2, dtype=np.float64)
    q = exact_quadratic(prob)
    algo = HalfDrift(0.1)
    # A subclass inherits its base's recursion until it registers its own.
    assert th.recursion_of(algo) is th.recursion_of(dgsgld.DESGLD(0.1))

    class Unknown(dgsgld.samplers.SamplingAlgorithm):
        name = "unknown"

    with pytest.raises(TypeError, match="`algorithm` must be a sampler with a registered exact "
                                        "recursion .* got Unknown"):
        th.exact_moments(Unknown(0.1), q, ring(4), np.zeros(2), np.eye(2), 2)

    @th.register_recursion(HalfDrift)
    def _half(algorithm, quadratic, mixing_matrix, step_size, *, count, weight, xp):
        de = th.linear_recursion(dgsgld.DESGLD(step_size), quadratic, mixing_matrix, xp=xp)
        half = th.linear_recursion(dgsgld.DESGLD(step_size / 2), quadratic, mixing_matrix, xp=xp)
        return th.LinearRecursion(half.matrix, half.offset, de.noise)

    rec = th.linear_recursion(algo, q, ring(4), xp=np)
    x = np.random.default_rng(0).normal(size=(4, 2))
    w = np.random.default_rng(1).normal(size=(4, 2))
    state = algo.init(jnp.asarray(x), prob.potential, jax.random.key(0))
    new = algo.step(jax.random.key(0), state, prob.potential, jnp.asarray(ring(4)), jnp.asarray(w))
    np.testing.assert_allclose(np.asarray(new.position).ravel(),
                               rec.matrix @ x.ravel() + rec.offset + rec.noise @ w.ravel(),
                               rtol=1e-10, atol=1e-10)
    out = th.exact_moments(algo, q, ring(4), np.zeros(2), np.eye(2), 3)
    assert out.cov.shape == (4, 4, 2, 2)
    with pytest.raises(ValueError, match="`blocks` must start with 'position'"):
        th.register_recursion(HalfDrift, blocks=("tracker",))
