"""Potentials: the gradient estimator, uneven data, and input checks."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _problems import linear_regression, log_likelihood

import dgsgld
from dgsgld import gradients
from dgsgld.model import potential as potential_module


# Slow set: with and without replacement.
@pytest.mark.slow  # fast twin: test_uneven_data_with_mask (a mini-batch estimate's mean is the full
# gradient) and test_with_replacement_indices_stay_in_range_and_cover_the_data (with-replacement
# indices uniform)
@pytest.mark.parametrize("replace", [False, True])
def test_minibatch_estimator_is_unbiased(replace):
    """Mean of K estimates vs the exact gradient: each coordinate's estimate averages K i.i.d.
    draws, so |mean − exact| ≤ 5 · sd / √K fails with probability < 6e-7 per coordinate."""
    pb = linear_regression(local_size=6, batch_size=2, replace=replace, heterogeneous=True)
    x = jax.random.normal(jax.random.key(0), (5, 2))
    K = 4000
    # One jitted program for the K draws (op-by-op dispatch would compile each operation).
    draws = jax.jit(jax.vmap(lambda k: pb.potential.grad(x, k)))(
        jax.random.split(jax.random.key(1), K))
    draws = np.asarray(draws, np.float64)
    exact = np.asarray(pb.potential.full_grad(x))
    sd = draws.std(0)
    assert np.all(np.abs(draws.mean(0) - exact) <= 5 * sd / np.sqrt(K) + 1e-5)
    assert sd.min() > 0  # genuinely stochastic


def test_batch_of_everything_without_replacement_is_exact():
    pb = linear_regression(local_size=4, batch_size=4, replace=False)
    x = jax.random.normal(jax.random.key(0), (5, 2))
    np.testing.assert_allclose(pb.potential.grad(x, jax.random.key(3)),
                               pb.potential.full_grad(x), rtol=1e-5, atol=1e-6)


def test_gradient_matches_hand_derivation():
    # f_i(x) = ½‖Z_i x − y_i‖² + λ‖x‖²/(2N)  ⇒  ∇f_i = Z_iᵀ(Z_i x − y_i) + λ x / N.
    pb = linear_regression(prior_precision=2.0)
    x = np.random.default_rng(0).normal(size=(5, 2))
    expect = np.einsum("nki,nk->ni", pb.Z, np.einsum("nkj,nj->nk", pb.Z, x) - pb.y) + 2.0 * x / 5
    np.testing.assert_allclose(pb.potential.full_grad(jnp.asarray(x, jnp.float32)), expect,
                               rtol=1e-4, atol=1e-5)
    values = pb.potential.agent_values(jnp.asarray(x, jnp.float32))
    expect_v = 0.5 * np.sum((np.einsum("nkj,nj->nk", pb.Z, x) - pb.y) ** 2, 1) + np.sum(x**2, 1) / 5
    np.testing.assert_allclose(values, expect_v, rtol=1e-4)


def test_uneven_data_with_mask():
    """Agents with 3, 1 and 2 data: padding must not change gradients, and mini-batches are
    drawn from an agent's own data only (unbiased, checked as above)."""
    rng = np.random.default_rng(0)
    sizes = [3, 1, 2]
    agents = [(rng.normal(size=(n, 2)).astype(np.float32), rng.normal(size=n).astype(np.float32))
              for n in sizes]
    data, mask = dgsgld.pad_agent_data(agents)
    assert data[0].shape == (3, 3, 2) and mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    x = jnp.asarray(rng.normal(size=(3, 2)), jnp.float32)
    full = dgsgld.Potential(log_likelihood, None, data, mask=mask)
    for i, (z, y) in enumerate(agents):
        expect = z.T @ (z @ np.asarray(x[i]) - y)
        np.testing.assert_allclose(full.full_grad(x)[i], expect, rtol=1e-5, atol=1e-5)
    mini = dgsgld.Potential(log_likelihood, None, data, mask=mask, batch_size=1)
    K = 4000
    draws = np.asarray(jax.jit(jax.vmap(lambda k: mini.grad(x, k)))(
        jax.random.split(jax.random.key(2), K)))
    sd = draws.std(0)
    # + 1e-4: float32 rounding of 4000 summed draws (agent 1 has one datum, sd = 0).
    assert np.all(np.abs(draws.mean(0) - full.full_grad(x)) <= 5 * sd / np.sqrt(K) + 1e-4)
    np.testing.assert_allclose(draws[:, 1], np.broadcast_to(full.full_grad(x)[1], (K, 2)),
                               rtol=1e-5)


def test_gradient_oracle():
    pb = linear_regression()

    def oracle(params, agent_data, key):
        z, y = agent_data
        return z.T @ (z @ params - y) + 0.0 * jax.random.normal(key, params.shape)

    pot = dgsgld.Potential(None, None, pb.potential.data, gradient_fn=oracle)
    x = jax.random.normal(jax.random.key(0), (5, 2))
    no_prior = dgsgld.Potential(log_likelihood, None, pb.potential.data)
    np.testing.assert_allclose(pot.grad(x, jax.random.key(1)), no_prior.full_grad(x), rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=5), "between 1 and the smallest local data size \\(4\\)"),
        (dict(batch_size=2.0), "batch_size"),
        (dict(mask=np.ones((5, 3), bool)), "mask"),
        (dict(mask=np.array([[1, 0, 1, 1]] * 5, bool)), "ones followed by zeros"),
    ],
)
def test_bad_arguments(kwargs, match):
    pb = linear_regression()
    with pytest.raises(ValueError, match=match):
        dgsgld.Potential(log_likelihood, None, pb.potential.data, **kwargs)


def test_bad_data():
    with pytest.raises(ValueError, match="disagree"):
        dgsgld.Potential(log_likelihood, None, (jnp.ones((5, 4, 2)), jnp.ones((5, 3))))
    with pytest.raises(ValueError, match="num_agents, local_size"):
        dgsgld.Potential(log_likelihood, None, (jnp.ones((5,)),))
    with pytest.raises(ValueError, match="log_likelihood"):
        dgsgld.Potential(None, None, (jnp.ones((5, 4, 2)),))


# Default run: the table path; Floyd's path in the slow set (fast twin: Floyd's draw is uniform
# in test_floyd_draws_are_uniform_subsets_chi_squared[5-sizes1], b > n_i / 2 as here).
@pytest.mark.parametrize("tabulate", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_subsets_are_uniform_in_both_selection_paths(tabulate, monkeypatch):
    """Without replacement every b-subset of an agent's data is equally likely.

    n = 5, b = 3: 10 subsets, each with probability 1/10. K draws for each of 5 agents: the
    count of one subset is Binomial(K, 1/10), sd = sqrt(K 0.09); |count − K/10| ≤ 5 sd fails
    with probability < 6e-7 per subset. Both paths: the table of subsets (small data) and
    Floyd's draw (forced by an empty table budget; here b > n / 2, so chains of taken slots).
    """
    if not tabulate:
        monkeypatch.setattr(potential_module, "_MAX_SUBSET_ENTRIES", 0)
    pb = linear_regression(local_size=5, batch_size=3, replace=False)
    pot = pb.potential
    assert pot.tabulated is tabulate
    K = 20_000
    keys = jax.random.split(jax.random.key(7), K)
    if tabulate:
        idx = np.asarray(jax.vmap(pot.subset_indices)(keys))             # (K, N, b)
    else:
        agent_keys = jax.vmap(lambda k: jax.random.split(k, pot.num_agents))(keys)
        idx = np.asarray(jax.vmap(jax.vmap(lambda k: pot._batch(k, jnp.int32(5))))(agent_keys))
    assert idx.shape == (K, pot.num_agents, 3)
    assert np.all(np.sort(idx, -1)[..., 1:] > np.sort(idx, -1)[..., :-1])   # distinct
    codes = np.sum(2 ** np.sort(idx, -1), -1)                             # subset -> bitmask
    for agent in range(pot.num_agents):
        values, counts = np.unique(codes[:, agent], return_counts=True)
        assert len(values) == 10
        assert np.all(np.abs(counts - K / 10) <= 5 * np.sqrt(K * 0.09))


# Default run: b = 5 (chains of taken slots); b = 3 in the slow set.
@pytest.mark.parametrize("b, sizes", [pytest.param(3, (8, 7, 10), marks=pytest.mark.slow),
                                      (5, (8, 7, 6))])
def test_floyd_draws_are_uniform_subsets_chi_squared(b, sizes, monkeypatch):
    """Floyd's draw (:func:`dgsgld.model.potential.distinct_batch`) gives every b-subset the same
    probability, also for uneven agents (a mask; each agent draws among its own n_i data), for
    b small against n_i and for b > n_i / 2 (where taken slots chain).

    Table forced off. b = 3 on n_i = 8, 7, 10: C(n_i, 3) = 56, 35, 120 subsets; b = 5 on
    n_i = 8, 7, 6: 56, 21, 6. K = 12 000 draws per agent, under ``vmap`` as in a run.
    Pearson's statistic sum (O - E)^2 / E over each agent's subsets is asymptotically
    chi-squared with C(n_i, b) - 1 degrees of freedom (expected counts E = K / C >= 100, far
    above the usual >= 5); the agents are independent, so the sum over agents is chi-squared
    with the sum of their degrees of freedom (208, 80). Its critical value at p = 1e-4 (scipy's
    chi2.isf) bounds the false-alarm rate. Power: relative deviations delta of the subsets'
    probabilities add about K * mean(delta^2) per agent to the statistic; +-10 % on one
    agent's subsets adds 120, above the margins (290 - 208, 131 - 80; sd 20 and 13).
    """
    from scipy import stats

    monkeypatch.setattr(potential_module, "_MAX_SUBSET_ENTRIES", 0)
    rng = np.random.default_rng(3)
    agents = [(rng.normal(size=(n, 2)).astype(np.float32), rng.normal(size=n).astype(np.float32))
              for n in sizes]
    data, mask = dgsgld.pad_agent_data(agents)
    pot = dgsgld.Potential(log_likelihood, None, data, batch_size=b, mask=mask)
    assert not pot.tabulated
    np.testing.assert_array_equal(pot.counts, sizes)
    K = 12_000
    idx = np.asarray(jax.jit(jax.vmap(lambda k: gradients.batch_indices(pot, k)))(
        jax.random.split(jax.random.key(11), K)))                          # (K, N, b)
    assert np.all(np.sort(idx, -1)[..., 1:] > np.sort(idx, -1)[..., :-1])  # distinct
    statistic, dof = 0.0, 0
    for agent, n in enumerate(sizes):
        assert idx[:, agent].max() < n                                    # never padding
        codes = np.sum(2 ** idx[:, agent].astype(np.int64), -1)           # subset -> bitmask
        _, counts = np.unique(codes, return_counts=True)
        cells = len(list(itertools.combinations(range(n), b)))
        assert len(counts) == cells                                       # all occur
        statistic += np.sum((counts - K / cells) ** 2 / (K / cells))
        dof += cells - 1
    assert statistic <= stats.chi2.isf(1e-4, dof), (statistic, dof)


def _floyd_sequential(words, n, b):
    """Floyd's algorithm one slot at a time, on the draws ``words mod (n - b + j + 1)``."""
    taken = []
    for j, w in enumerate(words):
        top = n - b + j
        t = int(w) % (top + 1)
        taken.append(top if t in taken else t)
    return taken


# Default run: long chains (b close to n); the rest, b > 256 included, in the slow set (the sort
# path of b > 256: test_first_occurrences_marks_the_first_copy_of_each_value[300]).
@pytest.mark.parametrize("n, b", [pytest.param(5, 5, marks=pytest.mark.slow),
                                  pytest.param(9, 8, marks=pytest.mark.slow), (40, 32),
                                  pytest.param(100, 32, marks=pytest.mark.slow),
                                  pytest.param(10_000, 32, marks=pytest.mark.slow),
                                  pytest.param(700, 300, marks=pytest.mark.slow)])
def test_floyd_draw_is_the_sequential_algorithm(n, b):
    """The vectorized draw (all words at once, taken slots settled by passes over the links)
    returns exactly what Floyd's slot-by-slot algorithm returns on the same words, including
    long chains (b close to n) and the sorted repeats of b > 256."""
    keys = jax.random.split(jax.random.key(5), 200)
    draw = jax.jit(jax.vmap(lambda k: potential_module.distinct_batch(k, jnp.int32(n), b)))
    got = np.asarray(draw(keys))
    words = np.asarray(jax.vmap(lambda k: jax.random.bits(k, (b,)))(keys))
    for row, w in zip(got, words):
        assert row.tolist() == _floyd_sequential(w, n, b)


@pytest.mark.parametrize("b", [1, 7, 64, 256, 300])
def test_first_occurrences_marks_the_first_copy_of_each_value(b):
    """Both ways (shifted compares up to ``_COMPARE_MAX``, a sort above) agree with a scan."""
    idx = np.random.default_rng(b).integers(0, max(1, b // 2), size=b).astype(np.int32)
    seen, expected = set(), []
    for v in idx:
        expected.append(v not in seen)
        seen.add(int(v))
    np.testing.assert_array_equal(potential_module.first_occurrences(jnp.asarray(idx)),
                                  expected)


# Default run: both tabulated cases (Floyd's draw at n = 40, b = 32:
# test_floyd_draw_is_the_sequential_algorithm[40-32]); Floyd's three in the slow set.
@pytest.mark.parametrize("n, b, tabulated", [(5, 3, True), (20, 4, True),
                                             pytest.param(100, 32, False, marks=pytest.mark.slow),
                                             pytest.param(40, 32, False, marks=pytest.mark.slow),
                                             pytest.param(10**5, 32, False,
                                                          marks=pytest.mark.slow)])
def test_the_draw_without_replacement_is_chosen_from_the_sizes(n, b, tabulated):
    """The table when ``N · C(n, b) · b <= _MAX_SUBSET_ENTRIES`` (5 agents: C(20, 4) = 4845
    gives 96 900 entries), Floyd's draw otherwise: then ``batch_indices`` is
    ``distinct_batch`` on each agent's key."""
    assert (5 * math.comb(n, b) * b <= potential_module._MAX_SUBSET_ENTRIES) is tabulated
    data = (jnp.zeros((5, n, 2)), jnp.zeros((5, n)))
    pot = dgsgld.Potential(log_likelihood, None, data, batch_size=b)
    assert pot.tabulated is tabulated
    key = jax.random.key(2)
    idx = np.asarray(gradients.batch_indices(pot, key))
    if tabulated:
        np.testing.assert_array_equal(idx, pot.subset_indices(key))
    else:
        floyd = jax.vmap(lambda k: potential_module.distinct_batch(k, jnp.int32(n), b))
        np.testing.assert_array_equal(idx, floyd(jax.random.split(key, 5)))


def test_subset_table_respects_uneven_data():
    """Agents with 4, 2 and 3 data, b = 2: agent i only ever draws among its first n_i data,
    and all C(n_i, 2) subsets occur (6, 1, 3)."""
    rng = np.random.default_rng(1)
    agents = [(rng.normal(size=(n, 2)).astype(np.float32), rng.normal(size=n).astype(np.float32))
              for n in (4, 2, 3)]
    data, mask = dgsgld.pad_agent_data(agents)
    pot = dgsgld.Potential(lambda th, d: -0.5 * (d[0] @ th - d[1]) ** 2, None, data,
                           batch_size=2, mask=mask)
    assert pot.tabulated
    idx = np.asarray(jax.vmap(pot.subset_indices)(jax.random.split(jax.random.key(2), 3000)))
    for agent, (n, subsets) in enumerate([(4, 6), (2, 1), (3, 3)]):
        assert idx[:, agent].max() < n
        assert len({tuple(sorted(r)) for r in idx[:, agent]}) == subsets


def test_with_replacement_indices_stay_in_range_and_cover_the_data():
    pb = linear_regression(local_size=6, batch_size=4, replace=True)
    pot = pb.potential
    assert not pot.tabulated
    idx = np.asarray(jax.vmap(lambda k: pot._batch(k, jnp.int32(6)))(
        jax.random.split(jax.random.key(0), 3000)))
    assert idx.min() == 0 and idx.max() == 5
    # Each index has probability 1/6 per slot: 12 000 slots, sd = sqrt(12000 (1/6)(5/6)).
    counts = np.bincount(idx.ravel(), minlength=6)
    assert np.all(np.abs(counts - 2000) <= 5 * np.sqrt(12000 * 5 / 36))


# -- parameters as pytrees, called directly (the runner's convention: array leaves carry the
# agent axis, other leaves static) -------------------------------------------------------------

NP, DP, KP, LAM = 3, 2, 4, 0.6
_rng = np.random.default_rng(7)
ZP = _rng.normal(size=(NP, KP, DP)).astype(np.float32)
YP = _rng.normal(size=(NP, KP)).astype(np.float32)


def _sum_sq(tree):
    import equinox as eqx

    return sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(eqx.filter(tree, eqx.is_array)))


def _linear_hand(w, b):
    """f_i(w, b) = ½ Σ_j (z_jᵀw_i + b_i − y_j)² + λ(‖w_i‖² + b_i²)/(2N): residuals r_ij, then
    ∇_w f_i = Σ_j r_ij z_j + λ w_i / N, ∇_b f_i = Σ_j r_ij + λ b_i / N (float64)."""
    r = np.einsum("nkd,nd->nk", ZP, w) + b[:, None] - YP
    value = 0.5 * np.sum(r**2, 1) + LAM * (np.sum(w**2, 1) + b**2) / (2 * NP)
    return (np.einsum("nk,nkd->nd", r, ZP) + LAM * w / NP, r.sum(1) + LAM * b / NP, value)


def test_equinox_mlp_passed_directly_to_every_method():
    eqx = pytest.importorskip("equinox")
    # depth=0: m(z) = W z + b (identity final activation) with W (1, D), b (1,); the activation
    # functions are non-array, static leaves. Per-agent weights (N, 1, D) and biases (N, 1).
    mlp = eqx.nn.MLP(DP, "scalar", 4, 0, key=jax.random.key(0))
    w, b = _rng.normal(size=(NP, DP)), _rng.normal(size=NP)
    models = eqx.tree_at(lambda m: (m.layers[0].weight, m.layers[0].bias), mlp,
                         (jnp.asarray(w[:, None], jnp.float32),
                          jnp.asarray(b[:, None], jnp.float32)))
    pot = dgsgld.Potential(lambda m, d: -0.5 * (m(d[0]) - d[1]) ** 2,
                           lambda m: -0.5 * LAM * _sum_sq(m), (ZP, YP))
    gw, gb, value = _linear_hand(w, b)
    full = pot.full_grad(models)  # called eagerly; the others compiled (fewer compilations)
    assert callable(models.activation) and full.activation is None  # like eqx.filter_grad
    np.testing.assert_allclose(full.layers[0].weight[:, 0], gw, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(full.layers[0].bias[:, 0], gb, rtol=1e-4, atol=1e-5)
    stochastic = eqx.filter_jit(pot.grad)(models, jax.random.key(1))  # full batch: exact
    np.testing.assert_allclose(stochastic.layers[0].weight[:, 0], gw, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(eqx.filter_jit(pot.agent_values)(models), value, rtol=1e-5)
    # One point for every agent (agent 0's model): f = Σ_i f_i and its gradient.
    one = jax.tree.map(lambda a: a[0] if eqx.is_array(a) else a, models)
    gw0, gb0, value0 = _linear_hand(np.repeat(w[:1], NP, 0), np.repeat(b[:1], NP))
    np.testing.assert_allclose(eqx.filter_jit(pot.value)(one), value0.sum(), rtol=1e-5)
    pooled = eqx.filter_jit(pot.pooled_grad)(one, jax.random.key(2))
    np.testing.assert_allclose(pooled.layers[0].weight[0], gw0.sum(0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pooled.layers[0].bias[0], gb0.sum(), rtol=1e-4, atol=1e-5)
    bad = jax.tree.map(lambda a: a[:2] if eqx.is_array(a) else a, models)
    with pytest.raises(ValueError, match=r"`positions\.layers\[0\]\.weight` has shape \(2, 1, 2\)"):
        pot.full_grad(bad)


@pytest.mark.slow  # fast twin: tests/runner/test_runner_guarantees.py::
# test_dict_parameters_reach_the_linear_gaussian_posterior_mean
def test_dict_parameters_called_directly():
    pot = dgsgld.Potential(lambda p, d: -0.5 * (d[0] @ p["w"] + p["b"] - d[1]) ** 2,
                           lambda p: -0.5 * LAM * _sum_sq(p), (ZP, YP))
    w = _rng.normal(size=(NP, DP))
    b = _rng.normal(size=NP)
    gw, gb, value = _linear_hand(w, b)
    params = {"w": jnp.asarray(w, jnp.float32), "b": jnp.asarray(b, jnp.float32)}
    full = pot.full_grad(params)
    np.testing.assert_allclose(full["w"], gw, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(full["b"], gb, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pot.agent_values(params), value, rtol=1e-5)
    with pytest.raises(ValueError, match=r"`positions\['b'\]` has shape \(\)"):
        pot.grad({"w": params["w"], "b": jnp.float32(0.0)}, jax.random.key(0))


def test_scalar_parameter_called_directly():
    # f_i(x) = ½ Σ_j (x − y_j)² + λ x²/(2N)  ⇒  ∇f_i = Σ_j (x − y_j) + λ x / N.
    pot = dgsgld.Potential(lambda x, y: -0.5 * (x - y) ** 2, lambda x: -0.5 * LAM * x**2, YP)
    x = _rng.normal(size=NP)
    expect = np.sum(x[:, None] - YP, 1) + LAM * x / NP
    np.testing.assert_allclose(pot.full_grad(jnp.asarray(x, jnp.float32)), expect, rtol=1e-5)
    x0 = 0.3
    want = 0.5 * np.sum((x0 - YP) ** 2) + 0.5 * LAM * x0**2
    np.testing.assert_allclose(pot.value(jnp.float32(x0)), want, rtol=1e-5)
    np.testing.assert_allclose(pot.pooled_grad(jnp.float32(x0), jax.random.key(0)),
                               np.sum(x0 - YP) + LAM * x0, rtol=1e-5)
    with pytest.raises(ValueError, match="`params` has no array leaves"):
        pot.value(0.3)  # a Python float is static, as in equinox


# -- subsampled gradients (the warm-up's curvature_batch) ---------------------------------


def _subsample_problem():
    rng = np.random.default_rng(3)
    X = jnp.asarray(rng.normal(size=(3, 12, 2)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(3, 12)), jnp.float32)
    pot = dgsgld.Potential(lambda t, d: -0.5 * (d[0] @ t - d[1]) ** 2,
                           lambda t: -0.5 * t @ t, (X, y))
    x = jnp.asarray(rng.normal(size=(3, 2)), jnp.float32)
    return pot, x


def test_subsample_grad_with_every_datum_is_the_full_gradient():
    pot, x = _subsample_problem()
    idx = pot.subsample_indices(jax.random.key(0), 50)          # more than the 12 held
    assert idx.shape == (3, 12)
    np.testing.assert_allclose(pot.subsample_grad(x, idx), pot.full_grad(x), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.slow  # fast twin: test_subsample_grad_with_every_datum_is_the_full_gradient
def test_subsample_grad_is_unbiased():
    """1000 subsamples of 4 of 12 data per agent: the mean estimate within 4 standard errors
    (the estimates' own sd / √1000) of the full gradient, over 6 coordinates: a false alarm
    below 4e-4."""
    pot, x = _subsample_problem()
    keys = jax.random.split(jax.random.key(1), 1000)
    est = jax.vmap(lambda k: pot.subsample_grad(x, pot.subsample_indices(k, 4)))(keys)
    est = np.asarray(est, np.float64)
    se = est.std(axis=0) / np.sqrt(len(est))
    assert np.all(np.abs(est.mean(axis=0) - np.asarray(pot.full_grad(x))) <= 4 * se)
    # every draw holds 4 distinct data of each agent
    idx = np.asarray(pot.subsample_indices(keys[0], 4))
    assert all(len(set(row)) == 4 and row.max() < 12 for row in idx)


def test_subsample_size_must_be_positive():
    pot, _ = _subsample_problem()
    with pytest.raises(ValueError, match="size"):
        pot.subsample_indices(jax.random.key(0), 0)
