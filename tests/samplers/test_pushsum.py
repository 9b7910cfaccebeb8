"""Directed networks and the push-sum samplers: schedules, checks, invariants, exact laws.

Monte Carlo tolerances (the exact-law tests): on a quadratic potential with full batches each
iterate is exactly Gaussian given the deterministic push-sum weights, so with ``C`` independent
chains the sample mean of a coordinate has s.d. ``√(S_aa / C)`` and a sample covariance entry
``√((S_aa S_bb + S_ab²)/(C − 1))`` (Wishart). With ``m`` z-scores in a test we require
``|z| ≤ Φ⁻¹(1 − α/(2m))``, ``α = 1e-3`` family-wise (Bonferroni).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import optax
import pytest

import dgsgld
from dgsgld import networks as nets
from dgsgld import theory as th
from dgsgld.networks import directed
from tests._moments import assert_exact_law
from tests._problems import linear_regression

# -------------------------------------------------------------------- schedules


def test_out_degree_weights_follow_the_digraph_convention():
    g = nx.gnp_random_graph(6, 0.4, seed=3, directed=True)
    w = directed.out_degree_weights(g)
    out_deg = np.array([g.out_degree(j) for j in range(6)])
    np.testing.assert_allclose(w.sum(axis=0), 1.0, atol=1e-15)  # column j: what j sends
    for j, i in g.edges:  # networkx edge (j, i): j sends to i, so W[i, j] > 0
        assert w[i, j] == pytest.approx(1.0 / (1 + out_deg[j]))
    off = (w != 0) & ~np.eye(6, dtype=bool)
    assert {(int(j), int(i)) for i, j in zip(*np.nonzero(off))} == set(g.edges)
    assert set(nets.from_digraph(g).graph(0).edges) == set(g.edges)


def test_directed_one_peer_exponential_averages_exactly_in_log2_n_steps():
    s = nets.directed_one_peer_exponential(8)
    w = np.asarray(s.matrices, np.float64)
    assert s.period == 3
    for k in range(3):
        np.testing.assert_array_equal(w[k].sum(0), 1.0)
        np.testing.assert_array_equal(w[k].sum(1), 1.0)  # also row stochastic: v ≡ 1
        assert np.allclose(w[k], w[k].T) == (2**k == 4)  # hop N/2 is its own inverse
        assert w[k][(np.arange(8) + 2**k) % 8, np.arange(8)].tolist() == [0.5] * 8
    np.testing.assert_array_equal(w[2] @ w[1] @ w[0], np.full((8, 8), 1 / 8))


def test_one_way_link_failures_drop_directions_independently():
    base = np.asarray(nets.ring(6).adjacency[0])
    s = directed.one_way_link_failures(base, 0.5, period=20, seed=1)
    adj = np.asarray(s.adjacency)
    assert not (adj & ~base[None]).any()                           # only links of the base
    assert (adj != np.swapaxes(adj, 1, 2)).any()                   # some fail one way only
    np.testing.assert_allclose(np.asarray(s.matrices).sum(1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(
        np.asarray(directed.one_way_link_failures(base, 0.0, period=2).adjacency),
        np.broadcast_to(base, (2, 6, 6)))


def test_directed_barbell_is_strongly_connected_only_over_the_period():
    s = nets.directed_barbell(6, period=4, seed=0)
    adj = np.asarray(s.adjacency)
    bridges = adj[:, 3:, :3].sum(axis=(1, 2)), adj[:, :3, 3:].sum(axis=(1, 2))
    assert bridges[0].tolist() == [1, 0, 1, 0] and bridges[1].tolist() == [0, 1, 0, 1]
    nets.check_strong_connectivity(s)
    with pytest.raises(ValueError, match=r"cyclic window B = 1\) has 2 strongly connected "
                                         r"components: agents \{0, 1, 2\} \| \{3, 4, 5\}"):
        nets.check_strong_connectivity(s, window=1)
    lolli = nets.directed_lollipop(8, period=5, seed=2)
    nets.check_strong_connectivity(lolli, window=1)  # every snapshot strongly connected


def test_directed_delta_is_the_papers_delta_on_symmetric_schedules_and_contracts():
    sym = nets.barbell(6, period=4, seed=1)
    np.testing.assert_allclose(directed.directed_delta(sym, 3).per_k, nets.delta(sym, 3).per_k,
                               atol=1e-6)
    s = nets.directed_barbell(6, period=4, seed=0)
    assert directed.directed_delta(s, 1).sup > directed.directed_delta(s, 8).sup
    assert directed.directed_delta(s, 8).sup < 1.0
    v = nets.push_sum_weights(s, 12)  # float32 weights: each column sums to 1 within ~6e-8
    np.testing.assert_allclose(v.sum(axis=1), 6.0, rtol=12 * 6 * 2**-24)


@pytest.mark.reliability
def test_bad_directed_matrices_are_refused_naming_the_entry():
    good = directed.out_degree_weights(nx.DiGraph([(0, 1), (1, 2), (2, 0)]))
    for bad, msg in [
        (good * np.array([1.0, 1.0, 0.5]), r"`schedule`\[0\] is not column stochastic: column 2"),
        (np.where(np.eye(3, dtype=bool), good, -good), r"is not nonnegative"),
        (np.where(np.eye(3, dtype=bool), np.nan, good), r"is not finite: .* entry \(0, 0\)"),
    ]:
        with pytest.raises(ValueError, match=msg):
            nets.DirectedSchedule(bad, name="schedule")
    with pytest.raises(ValueError, match=r"is not zero off the graph: W\[0, 2\] = 0.5 but agent 2 "
                                         r"does not send to agent 0"):
        nets.DirectedSchedule(good, np.zeros((3, 3)), name="schedule")


@pytest.mark.reliability
def test_weakly_connected_network_is_refused_with_components_named(key):
    prob = linear_regression(num_agents=4, local_size=2, dim=2)
    adj = np.zeros((4, 4), bool)
    adj[1, 0] = adj[0, 1] = adj[2, 3] = adj[3, 2] = adj[2, 0] = True  # 0 → 2 only
    with pytest.raises(ValueError, match=r"not jointly strongly connected: .* agents \{0, 1\} \| "
                                         r"\{2, 3\} \(it is connected as an undirected graph"):
        dgsgld.sample(dgsgld.PushSumSGLD(0.1), prob.potential, nets.from_digraph(adj),
                      jnp.zeros((2, 4, 2)), key, 2)


@pytest.mark.reliability
def test_symmetric_samplers_refuse_directed_networks(key):
    prob = linear_regression(num_agents=4, local_size=2, dim=2)
    s = nets.directed_barbell(4, period=2)
    init = jnp.zeros((2, 4, 2))
    for make in (dgsgld.DIGingSGLD, dgsgld.DESGLD):
        with pytest.raises(ValueError, match=r"directed \(column-stochastic\) network, but "
                                             r".* Use a push-sum sampler, dgsgld.PushDIGingSGLD"):
            dgsgld.sample(make(0.1), prob.potential, s, init, key, 2)
        with pytest.raises(ValueError, match=r"is not symmetric: .* needs a push-sum sampler, "
                                             r"dgsgld.PushDIGingSGLD or dgsgld.PushSumSGLD"):
            dgsgld.sample(make(0.1), prob.potential, np.asarray(s.matrices), init, key, 2)
    with pytest.raises(ValueError, match="`noise_rule` must be 'mass' or 'uniform'"):
        dgsgld.PushDIGingSGLD(0.1, noise_rule="rows")


_DIRECTED = {"barbell": lambda: directed.directed_barbell(8, period=4, seed=1, dtype=jnp.float64),
             "one_peer": lambda: directed.directed_one_peer_exponential(8, dtype=jnp.float64)}


# Slow; fast twin: tests/communication/test_pushsum_channel.py::
# test_a_directed_snapshots_exchange_rows_are_rewritten_as_its_dense_matrix
@pytest.mark.parametrize("network, fmt", [
    pytest.param(n, f, marks=pytest.mark.slow)
    for n, f in [("barbell", "neighbors"), ("barbell", "edges"), ("one_peer", "auto"),
                 ("one_peer", "edges")]])
def test_sparse_directed_networks_run_push_sum_as_their_dense_stack(network, fmt, key):
    # from_dense of a DirectedSchedule keeps every weight (W[i, j]: j → i) and its kind; the
    # push-sum samplers then make the dense run's draws: positions agree to float64 rounding
    # of a product's summation order (a few ulps of |x| ≈ 3 per step over 10 steps, bound
    # 1e-12), where one differing draw would move them by √(2η) ≈ 0.3.
    with jax.enable_x64(True):
        prob = linear_regression(num_agents=8, local_size=3, dim=2, dtype=np.float64)
        init = jnp.asarray(np.random.default_rng(1).normal(size=(3, 8, 2)))
        channel = dgsgld.communication.Channel(dgsgld.communication.top_k(0.5),
                                               error_feedback=True, consensus=0.5)
        dense = _DIRECTED[network]()
        s = nets.sparse.from_dense(dense, format=fmt)
        assert s.network_kind == directed.COLUMN_STOCHASTIC and directed.is_directed_network(s)
        np.testing.assert_array_equal(np.asarray(s.todense()), np.asarray(dense.matrices))
        for make, ch in ((dgsgld.PushDIGingSGLD, None), (dgsgld.PushSumSGLD, channel),
                         (dgsgld.PushDIGingSGLD, channel)):
            ref = dgsgld.sample(make(0.05), prob.potential, dense, init, key, 10, channel=ch)
            got = dgsgld.sample(make(0.05), prob.potential, s, init, key, 10, channel=ch)
            assert float(jnp.abs(ref.positions).max()) > 0.5
            np.testing.assert_allclose(got.positions, ref.positions, rtol=0, atol=1e-12)
            if ch is not None:
                np.testing.assert_array_equal(ch.bytes_sent(got.state), ch.bytes_sent(ref.state))
        with pytest.raises(ValueError, match=r"directed \(column-stochastic\) network, but "
                                             r"DIGingSGLD needs symmetric"):
            dgsgld.sample(dgsgld.DIGingSGLD(0.05), prob.potential, s, init, key, 2)


@pytest.mark.reliability
def test_sparse_directed_networks_are_checked_as_directed(key):
    # Column sums, not symmetry; strong connectivity from the stored entries; the same
    # checks inside the computation when the snapshots are traced. sparse.auto keeps the kind.
    prob = linear_regression(num_agents=4, local_size=2, dim=2)
    init = jnp.zeros((2, 4, 2))
    ring = directed.out_degree_weights(nx.DiGraph([(0, 1), (1, 2), (2, 3), (3, 0)]))
    s = nets.sparse.from_dense(nets.DirectedSchedule(ring), format="neighbors")
    snap = s.snapshots
    with pytest.raises(ValueError, match=r"`mixing`\[0\] is not column stochastic: column 0 "
                                         r"\(what agent 0 sends out\) sums to 0.75"):
        nets.sparse.NeighborMixing(snap.neighbors, snap.weights.at[:, 1].multiply(0.5),
                                   snap.diagonal, network_kind=directed.COLUMN_STOCHASTIC)
    with pytest.raises(ValueError, match="`network_kind` must be None or 'column_stochastic'"):
        nets.sparse.NeighborMixing(snap.neighbors, snap.weights, snap.diagonal,
                                   network_kind="rows")
    with pytest.raises(ValueError, match="is not symmetric"):     # a directed one, undeclared
        nets.sparse.NeighborMixing(snap.neighbors, snap.weights, snap.diagonal)
    adj = np.zeros((4, 4), bool)
    adj[1, 0] = adj[0, 1] = adj[2, 3] = adj[3, 2] = adj[2, 0] = True  # 0 → 2 only
    weak = nets.sparse.from_dense(nets.from_digraph(adj), format="edges")
    with pytest.raises(ValueError, match=r"not jointly strongly connected: .* agents \{0, 1\} \| "
                                         r"\{2, 3\} \(it is connected as an undirected graph"):
        dgsgld.sample(dgsgld.PushSumSGLD(0.1), prob.potential, weak, init, key, 2)
    run = jax.jit(lambda net: dgsgld.sample(dgsgld.PushSumSGLD(0.1), prob.potential, net,
                                            init, key, 2).positions)
    assert np.all(np.isfinite(np.asarray(run(s))))               # columns, not symmetry
    bad = eqx.tree_at(lambda t: t.snapshots.diagonal, s, s.snapshots.diagonal * 0.5)
    with pytest.raises(Exception, match="not column stochastic"):
        jax.block_until_ready(run(bad))
    large = nets.sparse.auto(directed.directed_one_peer_exponential(512))
    assert large.network_kind == directed.COLUMN_STOCHASTIC


# -------------------------------------------------------------------- samplers


def _dyadic_ring(n=4):
    """Weights 1/2, 1/4, 1/4: every row sum is exactly 1 in floating point, so ``v ≡ 1``."""
    return 0.5 * np.eye(n) + 0.25 * (np.roll(np.eye(n), 1, 1) + np.roll(np.eye(n), -1, 1))


@pytest.mark.slow  # fast twin: test_push_recursion_reduces_to_diging_and_adapt_then_combine_de (the
# reduction, exactly) with test_exact_moments_match_monte_carlo[PushDIGingSGLD] (the engine is that
# recursion); tracker sum: test_tracker_sum_equals_the_gradient_sum_with_every_estimator[minibatch]
def test_push_diging_equals_diging_on_doubly_stochastic_schedules(key):
    prob = linear_regression(num_agents=4, local_size=4, dim=2, batch_size=2, heterogeneous=True)
    init = jax.random.normal(jax.random.key(1), (3, 4, 2))
    nets_ = {"dyadic": _dyadic_ring()[None],
             "mh": np.asarray(nets.random_regular(4, 2, seed=1).matrices)}
    out = {(name, net): dgsgld.sample(make(0.05), prob.potential, w, init, key, 20)
           for name, make in (("push", dgsgld.PushDIGingSGLD), ("diging", dgsgld.DIGingSGLD))
           for net, w in nets_.items()}   # arrays of one shape: one program per sampler
    # Dyadic weights: v ≡ 1 exactly, and every operation of the step is DIGing-SGLD's, times or
    # over 1 (equal bit for bit step by step outside jit: test_..._bit_for_bit_step). Compiled,
    # XLA may fuse (contract) the two programs' updates differently: ≤ 2 ulp per step of the
    # position, so ≤ 20 · 2 · 2⁻²⁴ · max|x| after 20 steps, times (1 + ηL)²⁰ ≲ 7 for the growth.
    # Metropolis weights: rows sum to 1 only to rounding, |v⁽ᵏ⁾ − 1| ≤ k N u (u = 2⁻²⁴), and
    # every update is off by that relative amount: bound 7 · 20 · N u · max|x|.
    for net, per_step in (("dyadic", 2), ("mh", 4)):
        a = np.asarray(out["push", net].positions)
        b = np.asarray(out["diging", net].positions)
        assert np.max(np.abs(a - b)) <= 7 * 20 * per_step * 2**-24 * np.max(np.abs(b)), net
    np.testing.assert_array_equal(out["push", "dyadic"].state.weight, 1.0)
    # Σ_i y_i = Σ_i ∇̃f_i(x_i) with mini-batches (eq. 3.5 reuse), float32: ≤ 20 N u · N max|y|.
    st = out["push", "mh"].state
    gap = np.abs(np.asarray(jnp.sum(st.tracker - st.grad, axis=1)))
    assert np.max(gap) <= 20 * 4 * 2**-24 * 4 * np.max(np.abs(np.asarray(st.tracker))) * 10
    assert np.max(np.abs(out["push", "mh"].state.weight - 1)) <= 20 * 4 * 2**-24


@pytest.mark.slow  # fast twin: test_push_recursion_reduces_to_diging_and_adapt_then_combine_de (the
# same reduction in the exact recursion)
def test_push_diging_equals_diging_bit_for_bit_step(key):
    prob = linear_regression(num_agents=4, local_size=4, dim=2, batch_size=2, heterogeneous=True)
    W = jnp.asarray(_dyadic_ring(), jnp.float32)
    x = jax.random.normal(jax.random.key(1), (4, 2))
    a, b = dgsgld.PushDIGingSGLD(0.05), dgsgld.DIGingSGLD(0.05)
    sa, sb = a.init(x, prob.potential, key), b.init(x, prob.potential, key)
    for k in range(3):
        sa = a.step(jax.random.fold_in(key, k), sa, prob.potential, W)
        sb = b.step(jax.random.fold_in(key, k), sb, prob.potential, W)
        np.testing.assert_array_equal(sa.position, sb.position)
        np.testing.assert_array_equal(sa.tracker, sb.tracker)


@pytest.mark.slow  # fast twin: test_exact_moments_match_monte_carlo[PushSumSGLD] (its law)
def test_push_sum_sgld_on_doubly_stochastic_is_adapt_then_combine_de_sgld(key):
    prob = linear_regression(num_agents=4, local_size=4, dim=2)
    W = jnp.asarray(_dyadic_ring(), jnp.float32)
    algo = dgsgld.PushSumSGLD(0.05)
    x = jax.random.normal(jax.random.key(1), (4, 2))
    state = algo.init(x, prob.potential, key)
    w = algo.noise(key, x)
    new = algo.step(key, state, prob.potential, W, w)
    expected = W @ (x - 0.05 * prob.potential.grad(x, key) + jnp.sqrt(2 * 0.05) * w)
    np.testing.assert_allclose(new.position, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(new.weight, 1.0)


# Default run: plain mini-batches; SVRG and SAGA (fast twin: [minibatch]) in the slow set.
@pytest.mark.parametrize("estimator", ["minibatch", pytest.param("svrg", marks=pytest.mark.slow),
                                       pytest.param("saga", marks=pytest.mark.slow)])
def test_tracker_sum_equals_the_gradient_sum_with_every_estimator(estimator, key):
    # Σ_i y_i = Σ_i ∇̃f_i(x_i) at every iteration (eq. 3.5 reuse of the stochastic gradient):
    # column-stochastic mixing preserves Σ y and each step adds Σ(g⁺ − g). Float32: each step
    # rounds the sum at ~N u |y|, so after 15 steps |Σ(y − g)| ≤ 15 · 4 · 2⁻²⁴ · (4 max|y|) · 10
    # (safety 10) — a re-drawn gradient instead would miss by the mini-batch noise, O(1).
    prob = linear_regression(num_agents=4, local_size=6, dim=2, batch_size=2, heterogeneous=True)
    est = {"minibatch": dgsgld.gradients.minibatch(), "svrg": dgsgld.gradients.svrg(4),
           "saga": dgsgld.gradients.saga()}[estimator]
    s = nets.one_way_link_failures(np.asarray(nets.ring(4).adjacency[0]), 0.3, period=5, seed=0)

    def gap(state):
        return jnp.max(jnp.abs(jnp.sum(state.tracker - state.grad, axis=0))), jnp.max(
            jnp.abs(state.tracker))

    trace = dgsgld.sample(dgsgld.PushDIGingSGLD(0.05, est), prob.potential, s,
                          jnp.zeros((2, 4, 2)), key, 15, output=dgsgld.Output(trace_fn=gap))
    err, scale = (np.asarray(v) for v in trace.values)
    assert np.all(err <= 15 * 4 * 2**-24 * 4 * scale * 10), err.max()


@pytest.mark.slow  # fast twin: none needed beyond SamplingAlgorithm's schedule tests
def test_decaying_step_schedule_is_used(key):
    prob = linear_regression(num_agents=4, local_size=2, dim=2)
    sched = optax.polynomial_schedule(0.1, 0.01, power=1.0, transition_steps=10)
    algo = dgsgld.PushSumSGLD(sched)
    state = algo.init(jnp.zeros((4, 2)), prob.potential, key)
    W = nets.directed_barbell(4, period=2).matrices[0]
    for k in range(3):
        # step k of the schedule is the step of the constant sched(k) from the same state
        constant = dgsgld.PushSumSGLD(float(sched(k))).step(key, state, prob.potential, W)
        state = algo.step(key, state, prob.potential, W)
        np.testing.assert_allclose(state.position, constant.position, rtol=1e-6, atol=1e-7)
        assert not np.allclose(sched(k), sched(k + 1))


# -------------------------------------------------------------------- exact laws

NUM_CHAINS = 4000
NUM_STEPS = 12
CHECK_AT = (1, 4, NUM_STEPS)


@pytest.mark.parametrize("make", [
    dgsgld.PushDIGingSGLD, dgsgld.PushSumSGLD,
    pytest.param(lambda eta: dgsgld.PushDIGingSGLD(eta, noise_rule="uniform"),
                 marks=pytest.mark.slow),
    pytest.param(lambda eta: dgsgld.PushSumSGLD(eta, noise_rule="uniform"), marks=pytest.mark.slow),
])
def test_exact_moments_match_monte_carlo(make):
    with jax.enable_x64(True):
        prob = linear_regression(num_agents=4, local_size=4, dim=2, heterogeneous=True,
                                 dtype=np.float64)
        s = directed.one_way_link_failures(np.ones((4, 4)) - np.eye(4), 0.5, period=3, seed=4,
                                           dtype=jnp.float64)
        assert_exact_law(make(0.08), prob, s, NUM_CHAINS, NUM_STEPS, CHECK_AT)


@pytest.mark.slow  # fast twin: test_exact_moments_match_monte_carlo
def test_exact_law_reduces_to_diging_and_tends_to_the_stationary_law():
    with jax.enable_x64(True):
        prob = linear_regression(num_agents=4, local_size=3, dim=2, heterogeneous=True,
                                 dtype=np.float64)
        q = th.quadratic_from_potential(prob.potential, jnp.zeros((4, 2)))
        W = np.asarray(nets.metropolis_hastings_weights(np.ones((4, 4)) - np.eye(4)))
        a = th.exact_moments(dgsgld.PushDIGingSGLD(0.05), q, W, np.zeros(2), np.eye(2), 5)
        b = th.exact_moments(dgsgld.DIGingSGLD(0.05), q, W, np.zeros(2), np.eye(2), 5)
        np.testing.assert_allclose(a.cov, b.cov, atol=1e-14)
        s = nets.directed_barbell(4, period=4, seed=0, dtype=jnp.float64)
        for algo in (dgsgld.PushDIGingSGLD(0.05), dgsgld.PushSumSGLD(0.05)):
            run = th.exact_moments(algo, q, s, np.zeros(2), np.eye(2), 800)
            st = th.stationary_moments(algo, q, s)
            np.testing.assert_allclose(run.cov[-1], st.cov[0], atol=1e-9)
            np.testing.assert_allclose(run.mean[-1], st.mean[0], atol=1e-9)


@pytest.mark.slow  # fast twin: test_push_recursion_reduces_to_diging_and_adapt_then_combine_de (the
# mass rule's noise keeps the average exact ULA noise)
def test_mass_noise_beats_uniform_noise_where_weights_are_uneven():
    # The derivation in dgsgld.samplers.pushsum: s_i² = 2η v_i keeps the average exact and
    # gives the lightest agents the least noise; with v far from 1 (one-way failures at 0.6,
    # min v ≈ 0.2) the worst agent's stationary W2 is far smaller than with √(2η).
    with jax.enable_x64(True):
        prob = linear_regression(num_agents=8, local_size=3, dim=2, heterogeneous=True,
                                 dtype=np.float64)
        q = th.quadratic_from_potential(prob.potential, jnp.zeros((8, 2)))
    s = directed.one_way_link_failures(np.asarray(nets.ring(8).adjacency[0]), 0.6, period=6,
                                       seed=2)
    for make in (dgsgld.PushDIGingSGLD, dgsgld.PushSumSGLD):
        worst = {}
        for rule in ("mass", "uniform"):
            st = th.stationary_moments(make(0.02, noise_rule=rule), q, np.asarray(s.matrices))
            with jax.enable_x64(True):
                worst[rule] = float(np.max(th.exact_w2(st, *q.target())))
        assert worst["mass"] < 0.7 * worst["uniform"], worst


def test_push_recursion_reduces_to_diging_and_adapt_then_combine_de():
    # v ≡ 1 (a doubly stochastic C): the push-sum recursions are DIGing-SGLD's and
    # M = C(I − η𝐀), c = ηC𝐛, G = √(2η) C (DE-SGLD adapt-then-combine); NumPy, float64.
    rng = np.random.default_rng(0)
    A = np.stack([a @ a.T + np.eye(2) for a in rng.normal(size=(3, 2, 2))])
    q = th.Quadratic(A, rng.normal(size=(3, 2)))
    C = np.full((3, 3), 1 / 3)
    eta = 0.1
    push = th.linear_recursion(dgsgld.PushDIGingSGLD(eta), q, C, step_size=eta, weight=np.ones(3),
                               xp=np)
    ref = th.linear_recursion(dgsgld.DIGingSGLD(eta), q, C, step_size=eta, xp=np)
    np.testing.assert_array_equal(C @ np.ones(3), np.ones(3))
    for a, b in zip(push, ref):
        np.testing.assert_allclose(a, b, atol=1e-15)
    rec = th.linear_recursion(dgsgld.PushSumSGLD(eta), q, C, step_size=eta, weight=np.ones(3),
                              xp=np)
    Cb = np.kron(C, np.eye(2))
    Ab = np.zeros((6, 6))
    for i in range(3):
        Ab[2 * i:2 * i + 2, 2 * i:2 * i + 2] = A[i]
    np.testing.assert_allclose(rec.matrix, Cb @ (np.eye(6) - eta * Ab), atol=1e-15)
    np.testing.assert_allclose(rec.offset, eta * Cb @ q.shifts.reshape(6), atol=1e-15)
    np.testing.assert_allclose(rec.noise, np.sqrt(2 * eta) * Cb, atol=1e-15)
    # Uneven weights: Σ of the x-block's noise, weighted by v⁺ (the mass Σ u), has variance
    # 2ηN per coordinate under the "mass" rule (the average is exact ULA noise).
    adj = np.asarray(nets.directed_barbell(4, period=2).adjacency[0])
    q4 = th.Quadratic(np.stack([np.eye(2)] * 4), np.zeros((4, 2)))
    v = np.array([1.3, 0.9, 0.8, 1.0])
    C4 = directed.out_degree_weights(adj)
    for make in (dgsgld.PushDIGingSGLD, dgsgld.PushSumSGLD):
        rec = th.linear_recursion(make(eta), q4, C4, step_size=eta, weight=v, xp=np)
        v_next = C4 @ v
        mass_noise = np.kron(v_next[None, :], np.eye(2)) @ rec.noise[:8]
        np.testing.assert_allclose(mass_noise @ mass_noise.T, 2 * eta * 4 * np.eye(2), rtol=1e-12)


@pytest.mark.slow  # fast twin: test_exact_moments_match_monte_carlo (runs chains-last layout)
@pytest.mark.parametrize("make", [dgsgld.PushDIGingSGLD, dgsgld.PushSumSGLD])
def test_same_draws_however_batched_and_continued(make, key):
    # Chains 3-5 run alone draw what they draw in an 8-chain run. The numbers agree to
    # rounding, not bit for bit: the runner's chains-last W @ x rounds differently for
    # different numbers of chains (DIGing-SGLD too, on these shapes, by ~2e-7): ≤ 4 ulp per
    # step over 12 steps. A continued run is the same program: bit for bit.
    prob = linear_regression(num_agents=4, local_size=4, dim=2, batch_size=2)
    s = nets.directed_barbell(4, period=4, seed=1)
    init = jax.random.normal(jax.random.key(1), (8, 4, 2))
    alg = make(0.05)
    whole = dgsgld.sample(alg, prob.potential, s, init, key, 12)
    part = dgsgld.sample(alg, prob.potential, s, init[3:6], key, 12, chain_offset=3)
    ref = np.asarray(whole.positions[3:6])
    assert np.max(np.abs(ref - np.asarray(part.positions))) <= 12 * 4 * 2**-24 * np.abs(ref).max()
    first = dgsgld.sample(alg, prob.potential, s, init, key, 5)
    rest = dgsgld.sample(alg, prob.potential, s, first.state, key, 7)
    np.testing.assert_array_equal(whole.positions[:, 5:], rest.positions)


def test_directed_tables_rank_by_the_mean_over_agents():
    from experiments import directed as exp

    # Two seeds x two agents. Means over agents: a (2, 2), b (1, 3); W2 is a loss (b wins seed
    # 0, a seed 1), accuracy a gain (a wins seed 0, b seed 1). The worst agent is the largest
    # W2 (a: 3, 2) and the smallest accuracy (a: 1, 2; b: 0, 3).
    a, b = [[1.0, 3.0], [2.0, 2.0]], [[0.0, 2.0], [3.0, 3.0]]
    steps = {"a": [0.1, 0.3], "b": [0.2, 0.2]}
    w2 = {"net": {m: {"w2": v, "step_size": steps[m], "stationary_w2": [[1.0, 0.5]] * 2}
                  for m, v in (("a", a), ("b", b))}}
    rows = exp.directed_table(w2).splitlines()[2:]
    assert rows == ["| net | a | 2.0000 ± 0.0000 | 2.5000 ± 0.5000 | 0.2 | 1/2 | 0.7500 |",
                    "| net | b | 2.0000 ± 1.0000 | 2.5000 ± 0.5000 | 0.2 | 1/2 | 0.7500 |"]
    acc = {"net": {m: {"accuracy": v, "step_size": steps[m]} for m, v in (("a", a), ("b", b))}}
    rows = exp.logistic_table(acc).splitlines()[2:]
    assert rows == ["| net | a | 2.0000 ± 0.0000 | 1.5000 ± 0.5000 | 0.2 | 1/2 |",
                    "| net | b | 2.0000 ± 1.0000 | 1.5000 ± 1.5000 | 0.2 | 1/2 |"]
    b_wins = {"net": {"a": acc["net"]["a"], "b": {"accuracy": [[3.0, 3.0]] * 2,
                                                    "step_size": [0.2, 0.2]}}}
    assert exp.logistic_table(b_wins).splitlines()[2:][1].endswith("| 0.2 | 2/2 |")


@pytest.mark.slow  # the experiment's parts: test_exact_moments_match_monte_carlo, the schedules
def test_directed_experiment_small_run(tmp_path):
    from dgsgld.posteriors.problems import linear_regression_problem, split_potentials
    from experiments import directed as exp

    # The sorted split deals the same data out differently: same posterior.
    problem = linear_regression_problem(0, num_samples=40, num_agents=8)
    with jax.enable_x64(True):
        targets = [th.quadratic_from_potential(p, jnp.zeros((8, problem.dim))).target()
                   for p in split_potentials(problem).values()]
    for a, b in zip(*targets):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    record = exp.directed_experiment(tmp_path, small=True, num_seeds=1, logger=None)
    assert all((tmp_path / f"directed.{ext}").exists() for ext in ("json", "md", "png"))
    assert len(record["results"]) == 2 * 4 and len(record["logistic"]) == 4
    # Two tables: header + rows of 8 (network, split) x 3 methods; a blank line and a title;
    # header + rows of 4 networks x 3 methods.
    assert record["table"].count("\n") == (2 + 2 * 4 * 3) + 3 + (2 + 4 * 3)
    for methods in record["results"].values():
        for r in methods.values():
            assert np.all(np.isfinite(r["w2"])) and np.all(np.isfinite(r["stationary_w2"]))
    # The tuned samplers learn: every agent's test accuracy (16 chains x 90 test points) beats
    # always predicting the majority class of seed 0's test set (50/90) by 0.1; the tuned runs
    # reach ~0.85-0.9, the true parameter 0.91.
    for methods in record["logistic"].values():
        assert set(methods) == set(exp.METHODS)
        for r in methods.values():
            acc = np.asarray(r["accuracy"])
            assert acc.shape == (1, 8) and np.all(acc <= 1) and np.all(acc > 50 / 90 + 0.1)


SHARDED = """
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np
import dgsgld
from dgsgld.parallel import devices as sharding
from dgsgld import networks as nets
sys.path.insert(0, "tests")
from _problems import linear_regression
key = jax.random.key(3)
prob = linear_regression(num_agents=8, dim=2, batch_size=2, dtype=np.float64)
mixing = nets.directed_barbell(8, period=4, seed=0, dtype=jnp.float64)
init = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8, 2)))
out = {}
for make in (dgsgld.PushDIGingSGLD, dgsgld.PushSumSGLD):
    alg = make(0.05)
    ref = dgsgld.sample(alg, prob.potential, mixing, init, key, 20)
    chains = dgsgld.sample(alg, prob.potential, np.asarray(mixing.matrices), init, key, 20,
                           placement=dgsgld.Chains())
    agents = dgsgld.sample(alg, prob.potential, mixing, init, key, 20, placement=dgsgld.Agents())
    out[make.__name__] = [float(jnp.abs(chains.positions - ref.positions).max()),
                          float(jnp.abs(agents.positions - ref.positions).max()),
                          float(jnp.abs(ref.positions).max())]
try:
    dgsgld.sample(dgsgld.DIGingSGLD(0.05), prob.potential, mixing, init, key, 2,
                  placement=dgsgld.Chains())
except ValueError as err:
    out["refused"] = str(err)
print("RESULT" + json.dumps(out))
"""


@pytest.mark.slow  # sharded runs: the same step and network checks as dgsgld.sample
def test_sharded_runs_equal_the_single_device_run():
    # Four CPU devices exist only when XLA is told so before JAX starts: a subprocess. Same
    # draws, so the runs differ only by float64 rounding of products over other blocks: a
    # single differing draw would move positions by ~√(2η) = 0.3; bound 1e-10.
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ,
               XLA_FLAGS=os.environ["XLA_FLAGS"] + " --xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", SHARDED], cwd=Path(__file__).parents[2],
                          env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines()
                          if ln.startswith("RESULT"))[len("RESULT"):])
    for name in ("PushDIGingSGLD", "PushSumSGLD"):
        chains, agents, scale = out[name]
        assert scale > 0.1 and chains < 1e-10 * scale and agents < 1e-10 * scale, out
    assert "Use a push-sum sampler" in out["refused"]
