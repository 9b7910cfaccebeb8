"""Potentials: the gradient estimator, uneven data, and input checks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld import potential as potential_module
from _problems import linear_regression, log_likelihood


@pytest.mark.parametrize("replace", [False, True])
def test_minibatch_estimator_is_unbiased(replace):
    """Mean of K estimates vs the exact gradient: each coordinate's estimate averages K i.i.d.
    draws, so |mean − exact| ≤ 5 · sd / √K fails with probability < 6e-7 per coordinate."""
    pb = linear_regression(local_size=6, batch_size=2, replace=replace, heterogeneous=True)
    x = jax.random.normal(jax.random.key(0), (5, 2))
    K = 4000
    draws = jax.vmap(lambda k: pb.potential.grad(x, k))(jax.random.split(jax.random.key(1), K))
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
    draws = np.asarray(jax.vmap(lambda k: mini.grad(x, k))(jax.random.split(jax.random.key(2), K)))
    sd = draws.std(0)
    # + 1e-4: float32 rounding of 4000 summed draws (agent 1 has one datum, sd = 0).
    assert np.all(np.abs(draws.mean(0) - full.full_grad(x)) <= 5 * sd / np.sqrt(K) + 1e-4)
    np.testing.assert_allclose(draws[:, 1], np.broadcast_to(full.full_grad(x)[1], (K, 2)), rtol=1e-5)


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


@pytest.mark.parametrize("tabulate", [True, False])
def test_subsets_are_uniform_in_both_selection_paths(tabulate, monkeypatch):
    """Without replacement every b-subset of an agent's data is equally likely.

    n = 5, b = 3: 10 subsets, each with probability 1/10. K draws for each of 5 agents: the
    count of one subset is Binomial(K, 1/10), sd = sqrt(K 0.09); |count − K/10| ≤ 5 sd fails
    with probability < 6e-7 per subset. Both paths: the table of subsets (small data) and the
    b smallest of n uniforms (forced by an empty table budget).
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
