"""On-the-fly schedules: valid mixing matrices, the precomputed generators' law and weight rule.

Distribution tests compare counts of what each snapshot links (bridge endpoints, branch
lengths, surviving links) over many iterations with the exact law, or with the precomputed
generator's counts, by chi-square tests at level 1e-4: a correct generator fails one with
probability 1e-4 (fixed keys make each test deterministic), while a wrong law (say a bridge
endpoint never drawn, or p and 1 − p swapped) gives p-values below 1e-30 at these counts.
"""

import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest
from _problems import linear_regression
from scipy import stats

import dgsgld
from dgsgld import networks
from dgsgld._util import validation as _validation
from dgsgld.networks import onthefly, sparse, weights

ALPHA = 1e-4
K = 2_000   # iterations drawn per distribution test


def _adjacency(stack):
    n = stack.shape[-1]
    return (stack != 0) & ~np.eye(n, dtype=bool)


@pytest.mark.parametrize("schedule", [
    onthefly.barbell_on_the_fly(9, key=0),
    # The lollipop's law is tested below (branch lengths and links); its matrices in the slow set.
    pytest.param(onthefly.lollipop_on_the_fly(10, key=1), marks=pytest.mark.slow),
    # The dense link failures compile a generator of their own (~1 s); fast twins: the same
    # generator's neighbour lists below (the same weight rule) and
    # test_link_failures_keep_each_edge_with_probability_one_minus_p (dense snapshots' links).
    pytest.param(onthefly.link_failures_on_the_fly(nx.cycle_graph(8), 0.3, key=2, format="dense"),
                 marks=pytest.mark.slow),  # fast twins: see above
    onthefly.link_failures_on_the_fly(nx.cycle_graph(80), 0.3, key=2),          # neighbour lists
    onthefly.one_peer_exponential_on_the_fly(64),                                 # neighbour lists
], ids=["barbell", "lollipop", "link_failures", "link_failures_sparse", "one_peer_sparse"])
def test_every_matrix_is_symmetric_doubly_stochastic_with_the_generators_weight_rule(schedule):
    stack = schedule.materialize(30)
    _validation.check_mixing(stack, tol=1e-5)       # symmetric, nonnegative, rows/columns sum to 1
    # The weights are the precomputed generators' rule applied to the drawn graph.
    eps = getattr(schedule, "eps", 1.0)
    np.testing.assert_allclose(stack, weights.metropolis_weights(_adjacency(stack), eps), atol=2e-6)


@pytest.mark.slow  # fast twin:
# test_every_matrix_is_symmetric_doubly_stochastic_with_the_generators_weight_rule
def test_barbell_bridge_endpoints_are_uniform_like_the_precomputed_generator():
    n, half = 10, 5
    stack = onthefly.barbell_on_the_fly(n, key=3).materialize(K)
    adj = _adjacency(stack)
    bridges = np.argwhere(adj[:, :half, half:])            # (k, left, right - half)
    assert len(bridges) == K                                # exactly one bridge per snapshot
    clique = np.zeros((n, n), bool)
    clique[:half, :half] = clique[half:, half:] = True
    np.fill_diagonal(clique, False)
    assert (adj[:, clique]).all()                           # both cliques complete every time
    left = np.bincount(bridges[:, 1], minlength=half)
    right = np.bincount(bridges[:, 2], minlength=half)
    assert stats.chisquare(left).pvalue > ALPHA and stats.chisquare(right).pvalue > ALPHA
    # Same law as networks.barbell: a homogeneity test on the two generators' endpoint counts.
    pre = _adjacency(np.asarray(networks.barbell(n, period=K, seed=0).matrices))
    pre_left = np.bincount(np.argwhere(pre[:, :half, half:])[:, 1], minlength=half)
    assert stats.chi2_contingency(np.stack([left, pre_left])).pvalue > ALPHA


@pytest.mark.slow  # fast twin: test_link_failures_keep_each_edge_with_probability_one_minus_p (a
# generator's law)
def test_lollipop_branch_lengths_and_links_follow_the_papers_law():
    n, s = 10, 3
    stack = onthefly.lollipop_on_the_fly(n, key=4).materialize(K)
    adj = _adjacency(stack)
    deg = adj.sum(axis=2)
    # Clique agents have degree >= m - 1 >= 5; the terminal node m has s + 1 = 4, the rest of
    # the path at most 2: the first agent of degree <= s + 1 is m.
    lengths = n - np.argmax(deg <= s + 1, axis=1)
    terminal = n - lengths
    assert set(np.unique(lengths)) == {3, 4}
    assert stats.binomtest(int((lengths == 3).sum()), K, 0.5).pvalue > ALPHA
    links = adj[np.arange(K), terminal]                     # (K, n): neighbours of agent m
    clique_links = links & (np.arange(n)[None, :] < terminal[:, None])
    assert (clique_links.sum(axis=1) == s).all()            # s distinct clique agents each time
    # Given the clique size m, each clique agent is linked w.p. s/m: uniform counts within m.
    for m in (6, 7):
        counts = clique_links[terminal == m][:, :m].sum(axis=0)
        assert stats.chisquare(counts).pvalue > ALPHA


def test_link_failures_keep_each_edge_with_probability_one_minus_p():
    p, n = 0.3, 8
    base = nx.cycle_graph(n)
    stack = onthefly.link_failures_on_the_fly(base, p, key=5, format="dense").materialize(K)
    up = _adjacency(stack)[:, np.arange(n), (np.arange(n) + 1) % n]   # (K, n) ring edges
    assert not _adjacency(stack)[:, 0, 2:n - 1].any()                   # no edge off the base graph
    assert stats.binomtest(int(up.sum()), up.size, 1 - p).pvalue > ALPHA
    pre = _adjacency(np.asarray(networks.link_failures(base, p, period=K, seed=0).matrices))
    pre_up = pre[:, np.arange(n), (np.arange(n) + 1) % n]
    table = np.stack([up.sum(axis=0), pre_up.sum(axis=0)])
    assert stats.chi2_contingency(table).pvalue > ALPHA
    # Independent edges: two neighbouring edges are up together w.p. (1 - p)².
    both = (up[:, 0] & up[:, 1]).sum()
    assert stats.binomtest(int(both), K, (1 - p) ** 2).pvalue > ALPHA


@pytest.mark.parametrize("fmt", [
    # Each format compiles its generator; the neighbour lists' materialized snapshots are dense
    # matrices compared with the precomputed ones just the same.
    pytest.param("dense", marks=pytest.mark.slow),  # fast twin: [neighbors]
    "neighbors",
])
def test_one_peer_exponential_equals_the_precomputed_schedule(fmt):
    s = onthefly.one_peer_exponential_on_the_fly(16, format=fmt)
    pre = np.asarray(networks.one_peer_exponential(16, period=8).matrices)
    np.testing.assert_allclose(s.materialize(8), pre, atol=1e-7)
    assert isinstance(s.matrix_at(0), sparse.NeighborMixing) == (fmt == "neighbors")


# Two generators compiled (~2-3 s). Fast twin:
# test_sample_with_on_the_fly_schedule_equals_sample_with_its_materialized_stack (a period-6
# schedule over 12 steps gives the draws of its 6 snapshots repeated).
@pytest.mark.slow  # fast twin: see above
def test_period_repeats_and_no_period_does_not():
    periodic = onthefly.barbell_on_the_fly(12, key=6, period=5).materialize(15)
    np.testing.assert_array_equal(periodic[:5], periodic[5:10])
    free = onthefly.barbell_on_the_fly(12, key=6).materialize(40)
    assert len({m.tobytes() for m in free}) > 20           # 36 possible bridges: most differ


def test_sample_with_on_the_fly_schedule_equals_sample_with_its_materialized_stack():
    prob = linear_regression(num_agents=8, dim=2)
    schedule = onthefly.link_failures_on_the_fly(nx.cycle_graph(8), 0.3, key=7, period=6,
                                                 format="dense")
    init = jnp.asarray(np.random.default_rng(0).normal(size=(2, 8, 2)), jnp.float32)
    alg, key = dgsgld.DIGingSGLD(0.05), jax.random.key(8)
    fly = dgsgld.sample(alg, prob.potential, schedule, init, key, 12)
    stacked = dgsgld.sample(alg, prob.potential, schedule.materialize(6).astype(np.float32),
                            init, key, 12)
    np.testing.assert_allclose(fly.positions, stacked.positions, rtol=1e-6, atol=1e-6)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="power of two"):
        onthefly.one_peer_exponential_on_the_fly(12)
    with pytest.raises(ValueError, match="`p`"):
        onthefly.link_failures_on_the_fly(nx.cycle_graph(4), 1.5)
    with pytest.raises(ValueError, match="`key`"):
        onthefly.barbell_on_the_fly(4, key="seed")
    with pytest.raises(ValueError, match="`period`"):
        onthefly.barbell_on_the_fly(4, period=0)
    with pytest.raises(ValueError, match="num_links"):
        onthefly.lollipop_on_the_fly(5, num_links=3)
