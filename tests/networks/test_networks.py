"""Tests of dgsgld.networks: weight rules, schedule generators, validation, diagnostics, drawing."""

import cProfile
import gc
import os
import pstats
import tracemalloc
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import jaxlib
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dgsgld import networks as nw

FAST = settings(deadline=None, max_examples=25)
EPS = 1e-6


# ---------------------------------------------------------------- helpers


def assert_mixing(w, adj=None, tol=1e-5):
    """Assumption 3.2 (i)-(ii) on a (P, N, N) stack, checked independently of the package."""
    w = np.asarray(w, dtype=np.float64)
    assert w.ndim == 3 and w.shape[1] == w.shape[2]
    np.testing.assert_allclose(w, np.swapaxes(w, 1, 2), atol=tol)
    assert w.min() >= 0.0
    np.testing.assert_allclose(w.sum(axis=2), 1.0, atol=tol)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, atol=tol)
    if adj is not None:
        adj = np.asarray(adj)
        off = ~adj & ~np.eye(w.shape[-1], dtype=bool)
        assert np.all(w[off] == 0.0)
        assert np.all(w[adj] > 0.0)


def random_adjacency(draw_bits, n):
    adj = np.zeros((n, n), dtype=bool)
    iu, ju = np.triu_indices(n, k=1)
    bits = np.asarray(draw_bits, dtype=bool)[: iu.size]
    adj[iu[bits], ju[bits]] = adj[ju[bits], iu[bits]] = True
    return adj


@st.composite
def graphs(draw, min_n=1, max_n=12):
    n = draw(st.integers(min_n, max_n))
    bits = draw(st.lists(st.booleans(), min_size=n * (n - 1) // 2, max_size=n * (n - 1) // 2))
    return random_adjacency(bits, n)


def brute_delta(w, window):
    """δ(k) by explicit products W^(k) W^(k-1) ... W^(k-B+1) (cyclic), then an SVD."""
    p, n, _ = w.shape
    out = []
    for k in range(p):
        m = np.eye(n)
        for j in range(window):
            m = m @ w[(k - j) % p]
        out.append(np.linalg.svd(m - np.ones((n, n)) / n, compute_uv=False)[0])
    return np.array(out)


# ---------------------------------------------------------------- weights, eq. (4.1)


@pytest.mark.parametrize("eps", [1e-6, 0.1])
def test_metropolis_path_hand_values(eps):
    # path 0 - 1 - 2: degrees 1, 2, 1, so both edges get 1/(2 + eps)
    w = nw.metropolis_weights(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]]), eps=eps)
    e = 1.0 / (2.0 + eps)
    expected = np.array([[1 - e, e, 0.0], [e, 1 - 2 * e, e], [0.0, e, 1 - e]])
    np.testing.assert_allclose(w, expected, rtol=0, atol=1e-15)


def test_metropolis_star_and_isolated_agent_hand_values():
    # star centre 0 with leaves 1, 2, 3 (degrees 3, 1, 1, 1) and an isolated agent 4
    g = nx.star_graph(3)
    g.add_node(4)
    w = nw.metropolis_weights(g, eps=EPS)
    e = 1.0 / (3.0 + EPS)
    assert w[0, 1] == w[1, 0] == w[0, 3] == pytest.approx(e, abs=1e-15)
    assert w[0, 0] == pytest.approx(1 - 3 * e, abs=1e-15)
    assert w[0, 0] > 0  # eps keeps the diagonal positive: 1 - 3/(3 + eps) ≈ eps / 3
    assert w[1, 1] == pytest.approx(1 - e, abs=1e-15)
    assert w[1, 2] == 0.0 and w[4, 4] == 1.0 and np.all(w[4, :4] == 0.0)


def test_metropolis_clique_diagonal_is_tiny_but_positive():
    w = nw.metropolis_weights(nx.complete_graph(10), eps=EPS)
    np.testing.assert_allclose(w[0, 1:], 1.0 / (9 + EPS), atol=1e-15)
    assert 0 < w[0, 0] == pytest.approx(EPS / (9 + EPS), rel=1e-6)


def test_metropolis_hastings_and_max_degree_hand_values():
    star = nx.star_graph(3)  # degrees 3, 1, 1, 1
    mh = nw.metropolis_hastings_weights(star)
    np.testing.assert_allclose(mh[0], [0.25, 0.25, 0.25, 0.25], atol=1e-15)
    np.testing.assert_allclose(np.diag(mh), [0.25, 0.75, 0.75, 0.75], atol=1e-15)
    path = nx.path_graph(4)  # degrees 1, 2, 2, 1; d_max = 2, every edge gets 1/3
    md = nw.max_degree_weights(path)
    expected = np.array(
        [
            [2 / 3, 1 / 3, 0, 0],
            [1 / 3, 1 / 3, 1 / 3, 0],
            [0, 1 / 3, 1 / 3, 1 / 3],
            [0, 0, 1 / 3, 2 / 3],
        ]
    )
    np.testing.assert_allclose(md, expected, atol=1e-15)
    # MH on the path: edges (0,1) and (2,3) see max degree 2, edge (1,2) too: same matrix here
    np.testing.assert_allclose(nw.metropolis_hastings_weights(path), expected, atol=1e-15)


def test_weights_accept_numpy_jax_networkx_and_stacks():
    g = nx.cycle_graph(5)
    a = nx.to_numpy_array(g)
    ref = nw.metropolis_weights(a)
    np.testing.assert_array_equal(nw.metropolis_weights(g), ref)
    np.testing.assert_array_equal(nw.metropolis_weights(jnp.asarray(a)), ref)
    stack = np.stack([a, nx.to_numpy_array(nx.path_graph(5))])
    both = nw.metropolis_weights(stack)
    np.testing.assert_array_equal(both[0], ref)
    np.testing.assert_array_equal(both[1], nw.metropolis_weights(nx.path_graph(5)))
    # integer-labelled graph inserted out of order still maps label i to row i
    shuffled = nx.Graph([(3, 0), (0, 1), (1, 2)])  # nodes inserted as 3, 0, 1, 2
    ordered = nx.Graph([(0, 1), (1, 2), (0, 3)])
    np.testing.assert_array_equal(nw.metropolis_weights(shuffled), nw.metropolis_weights(ordered))


def test_weights_ignore_self_loops_and_reject_directed_graphs():
    a = np.array([[1, 1], [1, 1]])
    np.testing.assert_allclose(nw.metropolis_weights(a, eps=0.0), [[0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="not symmetric"):
        nw.metropolis_weights(np.array([[0, 1], [0, 0]]))
    with pytest.raises(ValueError, match="directed"):
        nw.metropolis_weights(nx.DiGraph([(0, 1)]))


@FAST
@given(graphs(), st.sampled_from(["metropolis", "metropolis_hastings", "max_degree"]))
def test_every_rule_is_symmetric_doubly_stochastic_and_respects_the_graph(adj, rule):
    w = {
        "metropolis": lambda a: nw.metropolis_weights(a, eps=EPS),
        "metropolis_hastings": nw.metropolis_hastings_weights,
        "max_degree": nw.max_degree_weights,
    }[rule](adj)
    assert_mixing(w[None], adj[None], tol=1e-12)
    assert np.all(np.diag(w) > 0)


# ---------------------------------------------------------------- the paper's barbell


@pytest.mark.parametrize("n", [2, 3, 10, 11, 20])
def test_barbell_is_two_cliques_plus_one_bridge(n):
    s = nw.barbell(n, period=50, seed=3)
    adj = np.asarray(s.adjacency)
    half = (n + 1) // 2
    left, right = np.arange(half), np.arange(half, n)
    bridges = set()
    for a in adj:
        np.testing.assert_array_equal(a[np.ix_(left, left)], ~np.eye(half, dtype=bool))
        np.testing.assert_array_equal(a[np.ix_(right, right)], ~np.eye(n - half, dtype=bool))
        cross = np.argwhere(a[np.ix_(left, right)])
        assert len(cross) == 1  # exactly one bridge, endpoints in different halves by construction
        i, j = cross[0]
        bridges.add((int(left[i]), int(right[j])))
    assert_mixing(s.matrices, s.adjacency)
    if n >= 4:
        assert len(bridges) > 1  # the snapshots vary


def test_barbell_bridge_endpoints_cover_both_cliques():
    adj = np.asarray(nw.barbell(10, period=400, seed=0).adjacency)
    cross = adj[:, :5, 5:]
    assert np.all(cross.any(axis=(0, 2)))  # every left agent is a bridge end at some step
    assert np.all(cross.any(axis=(0, 1)))  # and every right agent


def test_barbell_weights_are_eq_41():
    s = nw.barbell(20, seed=1, dtype=jnp.float32)
    w = np.asarray(s.matrices[0], dtype=np.float64)
    adj = np.asarray(s.adjacency[0])
    np.testing.assert_allclose(w, nw.metropolis_weights(adj, eps=EPS), atol=1e-7)
    assert s.period == 50 and s.num_agents == 20 and s.matrices.dtype == jnp.float32


def test_generators_are_reproducible_from_seed_or_key():
    a, b = nw.barbell(12, seed=7), nw.barbell(12, seed=7)
    np.testing.assert_array_equal(a.matrices, b.matrices)
    assert not np.array_equal(a.adjacency, nw.barbell(12, seed=8).adjacency)
    k1 = nw.lollipop(12, seed=jax.random.key(5))
    k2 = nw.lollipop(12, seed=jax.random.key(5))
    np.testing.assert_array_equal(k1.adjacency, k2.adjacency)
    assert not np.array_equal(k1.adjacency, nw.lollipop(12, seed=jax.random.key(6)).adjacency)
    old = nw.barbell(12, seed=jax.random.PRNGKey(5))
    np.testing.assert_array_equal(
        old.adjacency, nw.barbell(12, seed=jax.random.PRNGKey(5)).adjacency
    )


# ---------------------------------------------------------------- the paper's lollipop


def lollipop_parts(a):
    """(m, r, links) read off one snapshot: agents 0..m-1 clique, m..N-1 path, links -> m."""
    n = a.shape[0]
    m = max(k for k in range(1, n + 1) if np.array_equal(a[:k, :k], ~np.eye(k, dtype=bool)))
    links = np.flatnonzero(a[m, :m])
    return m, n - m, links


@pytest.mark.parametrize(
    ("n", "lengths", "s"), [(20, (3, 4), 3), (8, (3, 4), 3), (12, (1, 6), 5), (6, (2, 2), 1)]
)
def test_lollipop_structure(n, lengths, s):
    sched = nw.lollipop(n, period=60, seed=11, branch_lengths=lengths, num_links=s)
    seen = set()
    for a in np.asarray(sched.adjacency):
        m, r, links = lollipop_parts(a)
        seen.add(r)
        assert lengths[0] <= r <= lengths[1]
        assert len(links) == s  # exactly s distinct clique agents joined to the terminal node m
        expected = np.zeros_like(a)
        expected[:m, :m] = ~np.eye(m, dtype=bool)
        path = np.arange(m, n - 1)
        expected[path, path + 1] = expected[path + 1, path] = True
        expected[links, m] = expected[m, links] = True
        np.testing.assert_array_equal(a, expected)  # nothing else: a clique of the rest, a path
    assert seen == set(range(lengths[0], lengths[1] + 1))
    assert_mixing(sched.matrices, sched.adjacency)


def test_lollipop_rejects_impossible_parameters():
    with pytest.raises(ValueError, match="num_links"):
        nw.lollipop(6, branch_lengths=(3, 4), num_links=3)
    with pytest.raises(ValueError, match="branch_lengths"):
        nw.lollipop(20, branch_lengths=(4, 3))


# ---------------------------------------------------------------- every generator, many seeds


GENERATORS = {
    "barbell": lambda n, seed: nw.barbell(n, period=7, seed=seed),
    "lollipop": lambda n, seed: nw.lollipop(max(n, 7), period=7, seed=seed),
    "link_failures": lambda n, seed: nw.link_failures(
        nx.complete_graph(n), 0.4, period=7, seed=seed
    ),
    "link_failures_eq41": lambda n, seed: nw.link_failures(
        nx.cycle_graph(n), 0.2, period=7, seed=seed, weights="metropolis"
    ),
    "erdos_renyi": lambda n, seed: nw.erdos_renyi(n, 0.5, seed=seed),
    "random_regular": lambda n, seed: nw.random_regular(n + (n % 2), 3, seed=seed),
    "ring": lambda n, seed: nw.ring(n),
    "star": lambda n, seed: nw.star(n),
    "complete": lambda n, seed: nw.complete(n),
    "grid": lambda n, seed: nw.grid(2, n // 2, periodic=bool(seed % 2)),
    "one_peer": lambda n, seed: nw.one_peer_exponential(2 ** (1 + n % 4)),
}


@FAST
@given(st.sampled_from(sorted(GENERATORS)), st.integers(4, 16), st.integers(0, 2**31 - 1))
def test_every_generator_gives_valid_matrices(name, n, seed):
    s = GENERATORS[name](n, seed)
    assert isinstance(s, nw.Schedule)
    assert s.matrices.shape == (s.period, s.num_agents, s.num_agents)
    assert_mixing(s.matrices, s.adjacency)


# ---------------------------------------------------------------- static graphs


def test_static_graphs_values():
    np.testing.assert_allclose(nw.complete(5).matrices[0], np.full((5, 5), 0.2), atol=1e-7)
    ring = np.asarray(nw.ring(5).matrices[0])
    np.testing.assert_allclose(ring[0], [1 / 3, 1 / 3, 0, 0, 1 / 3], atol=1e-7)
    np.testing.assert_allclose(nw.ring(2).matrices[0], [[0.5, 0.5], [0.5, 0.5]])
    np.testing.assert_allclose(nw.ring(1).matrices[0], [[1.0]])
    star = nw.star(5)
    assert np.asarray(star.adjacency[0]).sum() == 8 and np.asarray(star.adjacency[0, 0]).sum() == 4
    g = nw.grid(3, 4)
    deg = np.asarray(g.adjacency[0]).sum(axis=1)
    assert g.num_agents == 12 and deg.min() == 2 and deg.max() == 4 and deg.sum() == 2 * 17
    assert np.asarray(nw.grid(3, 4, periodic=True).adjacency[0]).sum(axis=1).tolist() == [4] * 12
    rr = nw.random_regular(20, 3, seed=2)
    assert set(np.asarray(rr.adjacency[0]).sum(axis=1).tolist()) == {3}
    assert nx.is_connected(rr.graph(0))
    er = nw.erdos_renyi(30, 0.08, seed=4)
    assert nx.is_connected(er.graph(0))
    np.testing.assert_array_equal(er.adjacency, nw.erdos_renyi(30, 0.08, seed=4).adjacency)
    assert all(s.period == 1 for s in (rr, er, g, star))


def test_from_graph_and_from_graphs():
    s = nw.from_graph(nx.path_graph(4), weights="metropolis", eps=EPS)
    np.testing.assert_allclose(s.matrices[0], nw.metropolis_weights(nx.path_graph(4)), atol=1e-7)
    gs = [nx.path_graph(5), nx.cycle_graph(5), nx.star_graph(4)]
    t = nw.from_graphs(gs, weights="max_degree")
    assert t.period == 3
    for k, g in enumerate(gs):
        np.testing.assert_allclose(t.matrix_at(k + 3), nw.max_degree_weights(g), atol=1e-7)
    custom = nw.from_graphs(gs, weights=lambda a: nw.metropolis_weights(a, eps=0.5))
    np.testing.assert_allclose(custom.matrices[1], nw.metropolis_weights(gs[1], eps=0.5), atol=1e-7)
    with pytest.raises(ValueError, match="same N"):
        nw.from_graphs([nx.path_graph(3), nx.path_graph(4)])
    with pytest.raises(ValueError, match="unknown weight rule"):
        nw.from_graphs(gs, weights="uniform")


# ---------------------------------------------------------------- link failures and one-peer graphs


def test_link_failures_edge_down_rate_matches_p():
    base = nx.complete_graph(20)  # 190 edges
    p, period = 0.3, 200
    s = nw.link_failures(base, p, period=period, seed=0)
    adj = np.asarray(s.adjacency)
    iu, ju = np.triu_indices(20, k=1)
    down = 1.0 - adj[:, iu, ju].mean()
    se = np.sqrt(p * (1 - p) / (period * iu.size))
    assert abs(down - p) < 5 * se
    ring_base = nx.to_numpy_array(nx.cycle_graph(12)) != 0
    r = np.asarray(nw.link_failures(ring_base, 0.5, period=50, seed=1).adjacency)
    assert not np.any(r & ~ring_base)  # only edges of the base graph ever appear
    assert any(not nx.is_connected(nx.from_numpy_array(a.astype(int))) for a in r)
    np.testing.assert_array_equal(
        nw.link_failures(ring_base, 0.0, period=3).adjacency[2], ring_base
    )
    np.testing.assert_allclose(
        nw.link_failures(ring_base, 1.0, period=3).matrices, np.eye(12)[None].repeat(3, 0)
    )


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_one_peer_exponential_matches_its_definition(n):
    s = nw.one_peer_exponential(n)
    levels = int(np.log2(n))
    assert s.period == levels
    for k in range(2 * levels):  # also past one period: matrices[k % P] uses tau = k mod log2 N
        hop = 2 ** (k % levels)
        shift = np.roll(np.eye(n), hop, axis=1)  # shift[i, (i + hop) % n] = 1
        if 2 * hop == n:
            expected = (np.eye(n) + shift) / 2
        else:
            expected = (np.eye(n) + shift + shift.T) / 3
        np.testing.assert_allclose(s.matrix_at(k), expected, atol=1e-7)
    assert (
        nw.smallest_joint_connectivity_window(s) == levels
    )  # one window of log2 N snapshots connects all


def test_one_peer_exponential_rejects_bad_sizes():
    with pytest.raises(ValueError, match="power of two"):
        nw.one_peer_exponential(12)
    with pytest.raises(ValueError, match="multiple of log2"):
        nw.one_peer_exponential(8, period=4)
    assert nw.one_peer_exponential(8, period=6).period == 6


# ---------------------------------------------------------------- validation


def valid_stack():
    return np.asarray(nw.barbell(6, period=3, seed=0).matrices, dtype=np.float64).copy()


def test_bad_matrices_are_rejected_with_index_property_and_worst_entry():
    w = valid_stack()
    asym = w.copy()
    asym[2, 0, 1] += 0.01
    asym[2, 0, 0] -= 0.01
    with pytest.raises(ValueError, match=r"\[2\] is not symmetric: W\[0, 1\]"):
        nw.from_matrices(asym)
    neg = np.array([[[-0.2, 1.2], [1.2, -0.2]]])
    with pytest.raises(ValueError, match=r"\[0\] is not nonnegative.*entry \(0, 0\)"):
        nw.from_matrices(neg)
    sub = w.copy()
    sub[1] *= 0.9
    with pytest.raises(ValueError, match=r"\[1\] is not doubly stochastic: row \d+ sums to"):
        nw.from_matrices(sub)
    nan = w.copy()
    nan[2, 3, 4] = np.nan
    with pytest.raises(ValueError, match=r"\[2\] is not finite.*entry \(3, 4\)"):
        nw.from_matrices(nan)
    with pytest.raises(ValueError, match=r"must be a \(P, N, N\) stack"):
        nw.from_matrices(np.ones((2, 3, 4)) / 4)
    averaging = np.full((2, 3, 3), 1 / 3)
    path = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=bool)
    adj = np.stack([~np.eye(3, dtype=bool), path])
    with pytest.raises(ValueError, match=r"`mine`\[1\] is not zero off the graph.*W\[0, 2\]"):
        nw.from_matrices(averaging, adjacency=adj, name="mine")
    with pytest.raises(ValueError, match="adjacency has shape"):
        nw.validate_schedule(averaging, np.ones((3, 4, 4), dtype=bool))


def test_validation_tolerance_and_accepted_inputs():
    w = valid_stack()
    w[0, 1, 2] += 1e-7  # inside the default tolerance
    w[0, 2, 1] += 1e-7
    assert nw.from_matrices(w).period == 3
    with pytest.raises(ValueError, match=r"\[0\] is not symmetric"):
        nw.validate_schedule(w + np.triu(np.full((6, 6), 1e-7), 1), tol=1e-9)
    one = nw.from_matrices(jnp.full((4, 4), 0.25))
    assert one.matrices.shape == (1, 4, 4)
    nw.validate_schedule(nw.barbell(8).matrices, nw.barbell(8).adjacency)


# ---------------------------------------------------------------- the Schedule object


def test_schedule_is_a_pytree_and_jittable():
    s = nw.barbell(8, period=5, seed=0)
    leaves = jax.tree_util.tree_leaves(s)
    assert len(leaves) == 2 and s.name.startswith("barbell")
    f = jax.jit(lambda sched, k: sched.matrix_at(k))
    for k in (0, 4, 5, 13):
        np.testing.assert_array_equal(f(s, k), s.matrices[k % 5])
    # rebuilt inside jit (traced matrices): validation is skipped, not crashed
    g = jax.jit(lambda m: nw.Schedule(m, name="traced").matrix_at(1))
    np.testing.assert_array_equal(g(s.matrices), s.matrices[1])
    doubled = jax.tree_util.tree_map(lambda x: x, s)
    assert isinstance(doubled, nw.Schedule) and eqx.tree_equal(doubled, s)


def test_schedule_graph_and_as_schedule():
    s = nw.lollipop(10, period=4, seed=2)
    g = s.graph(5)
    assert g.number_of_edges() == int(np.asarray(s.adjacency[1]).sum()) // 2
    assert nw.as_schedule(s) is s
    raw = nw.as_schedule(np.asarray(s.matrices))
    assert raw.adjacency is None and raw.graph(1).number_of_edges() == g.number_of_edges()


def test_schedule_gives_the_runner_its_matrices():
    """The runner's one mixing protocol: ``matrix_at(k) = matrices[k % P]``."""
    s = nw.barbell(6, period=4)
    for k in [0, 3, 4, 9]:
        np.testing.assert_array_equal(s.matrix_at(k), s.matrices[k % 4])


# ---------------------------------------------------------------- diagnostics


@FAST
@given(
    st.integers(2, 7),
    st.integers(1, 5),
    st.integers(1, 7),
    st.integers(0, 2**31 - 1),
)
def test_delta_matches_brute_force_products(n, period, window, seed):
    rng = np.random.default_rng(seed)
    adj = np.stack([random_adjacency(rng.random(n * (n - 1) // 2) < 0.4, n) for _ in range(period)])
    w = nw.metropolis_hastings_weights(adj)
    d = nw.delta(w, window)
    np.testing.assert_allclose(d.per_k, brute_delta(w, window), atol=1e-10)
    assert d.sup == pytest.approx(brute_delta(w, window).max(), abs=1e-10)
    # smallest window by brute force over B = 1..2P
    expected = next(
        (b for b in range(1, 2 * period + 1) if brute_delta(w, b).max() < 1 - 1e-9), None
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert nw.smallest_joint_connectivity_window(w) == expected


def test_delta_window_alignment_and_spectral_gap():
    # three different graphs on 4 agents; per_k[k] must be the window ending at k, wrapping around
    s = nw.from_graphs([nx.path_graph(4), nx.star_graph(3), nx.cycle_graph(4)])
    w = np.asarray(s.matrices, dtype=np.float64)
    j = np.ones((4, 4)) / 4
    by_hand = np.linalg.svd(w[0] @ w[2] - j, compute_uv=False)[0]  # window B = 2 ending at k = 0
    assert nw.delta(s, 2).per_k[0] == pytest.approx(by_hand, abs=1e-12)
    gap = nw.spectral_gap(s)
    for k in range(3):
        lam = np.sort(np.abs(np.linalg.eigvalsh(w[k])))[::-1]
        assert gap[k] == pytest.approx(1 - lam[1], abs=1e-9)  # connected: 1 - second largest |λ|
    assert nw.spectral_gap(nw.complete(5))[0] == pytest.approx(1.0, abs=1e-6)
    assert nw.spectral_gap(nw.link_failures(nx.path_graph(4), 1.0, period=1))[0] == pytest.approx(
        0.0, abs=1e-12
    )
    with pytest.raises(ValueError, match="window"):
        nw.delta(s, 0)


def test_joint_connectivity_of_alternating_halves():
    # snapshots link {0,1} then {1,2}: each is disconnected, any two consecutive ones connect all
    swap = np.array(
        [
            [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]],
            [[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.5, 0.5]],
        ]
    )
    assert nw.delta(swap, 1).sup == pytest.approx(1.0, abs=1e-12)
    assert nw.delta(swap, 2).sup == pytest.approx(0.5, abs=1e-12)
    assert nw.smallest_joint_connectivity_window(swap) == 2


def test_no_joint_connectivity_is_reported_clearly():
    second = nx.empty_graph(4)
    second.add_edge(0, 1)
    halves = nw.from_graphs([nx.Graph([(0, 1), (2, 3)]), second])
    with pytest.warns(UserWarning, match="union of all 2 graphs .* 2 connected components"):
        assert nw.smallest_joint_connectivity_window(halves) is None
    one_peer = nw.one_peer_exponential(16)  # needs B = 4
    with pytest.warns(UserWarning, match=r"no window B <= 2 gives"):
        assert nw.smallest_joint_connectivity_window(one_peer, max_window=2) is None


def test_paper_schedules_every_snapshot_connected():
    for s in (nw.barbell(20), nw.lollipop(20)):
        assert np.all(nw.spectral_gap(s) > 1e-3)
        assert nw.smallest_joint_connectivity_window(s) == 1
        deltas = [nw.delta(s, b).sup for b in (1, 5, 10)]
        assert 1 > deltas[0] > deltas[1] > deltas[2] > 0


# ---------------------------------------------------------------- drawing and speed


def test_draw_snapshot_draws_every_edge():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = nw.barbell(10, period=3)
    ax = nw.draw_snapshot(s, k=4)
    edges = ax.collections[-1] if len(ax.collections) > 1 else None
    assert (
        edges is not None
        and len(edges.get_segments()) == int(np.asarray(s.adjacency[1]).sum()) // 2
    )
    assert "k = 4" in ax.get_title()
    nw.draw_snapshot(np.asarray(s.matrices), k=0, layout="circular", ax=ax)
    plt.close("all")


def test_draw_snapshot_places_agents_at_given_positions():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graph = nx.random_geometric_graph(8, 0.6, seed=2)
    pos = nx.get_node_attributes(graph, "pos")
    schedule = nw.from_graph(graph)
    ax = nw.draw_snapshot(schedule, pos=pos)
    nodes = ax.collections[0]  # draw_networkx draws the nodes first
    np.testing.assert_allclose(nodes.get_offsets(), np.array([pos[i] for i in range(8)]))
    # An (N, 2) array works the same, and the edges join those positions.
    ax = nw.draw_snapshot(schedule, pos=np.array([pos[i] for i in range(8)]), ax=plt.figure().gca())
    ends = {tuple(np.round(p, 6)) for seg in ax.collections[-1].get_segments() for p in seg}
    assert ends <= {tuple(np.round(pos[i], 6)) for i in range(8)}
    plt.close("all")


@pytest.mark.reliability
def test_draw_snapshot_refuses_positions_of_the_wrong_agents():
    pytest.importorskip("matplotlib").use("Agg")
    import matplotlib.pyplot as plt

    schedule = nw.from_graph(nx.cycle_graph(4))
    with pytest.raises(ValueError, match=r"`pos` has no position for agents \[3\]"):
        nw.draw_snapshot(schedule, pos={0: (0, 0), 1: (1, 0), 2: (1, 1)})
    with pytest.raises(ValueError, match=r"`pos` must give \(x, y\) for each of the 4 agents"):
        nw.draw_snapshot(schedule, pos=np.zeros((4, 3)))
    plt.close("all")


def _generation_cost(gen, n, period):
    """``(Python function calls, peak traced host bytes, bytes of the schedule returned)`` of
    one ``gen(n, period)`` (NumPy's buffers are traced by tracemalloc): calls of Python
    functions outside JAX, the package's and the libraries' it calls (NumPy, networkx)."""
    # Warm-up at these very arguments: first calls import and fill caches (networkx's backend
    # lookup, JAX's per-shape caches). The garbage collector runs callbacks (JAX registers one)
    # at times set by earlier allocations: off, so that the count is the generator's own.
    gen(n, period=period, seed=0)
    profile = cProfile.Profile()
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        profile.enable()
        try:
            schedule = gen(n, period=period, seed=0)
        finally:
            profile.disable()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        gc.enable()
    assert schedule.matrices.shape == (period, n, n)
    kept = np.asarray(schedule.matrices).nbytes + np.asarray(schedule.adjacency).nbytes
    own = sum(stat[1] for (file, _, _), stat in pstats.Stats(profile).stats.items()
              if file != "~" and not file.startswith(JAX_SOURCE))
    return own, peak, kept


#: Where JAX's Python lives: its calls are not counted (they take other paths while its caches
#: for a new shape fill), nor are built-ins (called from everywhere, JAX included).
JAX_SOURCE = tuple(os.path.dirname(m.__file__) + os.sep for m in (jax, jaxlib))


@pytest.mark.slow  # a cost check; the schedules' values are tested fast
def test_generation_work_in_python_does_not_grow_with_the_agents():
    # The speed guarantee of the generators and their checks: every per-agent and per-edge
    # operation is a NumPy array operation, so the Python-level work (function calls) depends
    # on the period only and the time is the O(P N²) array work (timed by
    # benchmarks/networks_generation.py, not here).
    for gen in (nw.barbell, nw.lollipop):
        calls = [_generation_cost(gen, n, 5)[0] for n in (20, 60)]
        assert calls[0] == calls[1], (gen.__name__, calls)


@pytest.mark.slow  # fast twin (the values):
# test_every_rule_is_symmetric_doubly_stochastic_and_respects_the_graph
@pytest.mark.parametrize("gen", [nw.barbell, nw.lollipop])
def test_generation_for_a_thousand_agents_is_array_work_in_bounded_memory(gen):
    # N = 1000, P = 50: the schedule is P N² (4 + 1) bytes (float32 weights, bool graphs), 250 MB.
    # The checks go snapshot by snapshot (float64 temporaries O(N²)), so generating it holds at
    # most one more schedule's worth of host memory (a whole-stack float64 check held ~6).
    calls_small = _generation_cost(gen, 100, 50)[0]
    calls, peak, kept = _generation_cost(gen, 1000, 50)
    assert calls == calls_small
    assert peak <= 2 * kept, (peak, kept)


def test_components_equal_networkx_on_random_graphs_and_cut_paths():
    # The host-side connectivity check's components (plain NumPy label propagation) are
    # networkx's, ordered by smallest agent, on sparse random graphs and on paths cut at
    # random places (long diameters: many propagation rounds).
    from dgsgld.networks.connectivity import _components

    rng = np.random.default_rng(0)
    for t in range(60):
        n = int(rng.integers(1, 60))
        g = nx.gnp_random_graph(n, float(rng.uniform(0, 0.12)), seed=t)
        if t % 3 == 0:
            g = nx.path_graph(n)
            g.remove_edges_from([(i, i + 1) for i in range(0, n - 1, int(rng.integers(2, 9)))])
        edges = np.array(g.edges(), dtype=int).reshape(-1, 2)
        got = [sorted(map(int, c)) for c in _components(n, edges[:, 0], edges[:, 1])]
        assert got == sorted((sorted(c) for c in nx.connected_components(g)), key=lambda c: c[0])
