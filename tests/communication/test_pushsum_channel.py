"""Communication channels for the push-sum samplers on directed networks: exact channels give
the channel-free draws bit for bit, one-way link drops and stragglers keep the used matrices
column stochastic (push-sum weights summing to N, the tracker summing to the gradients), the
weights travel exact beside compressed masses, bytes include them, and the stationary mean
under random one-way drops is the posterior mean."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _problems import linear_regression

import dgsgld
from dgsgld import communication as C
from dgsgld import networks as nets

N = 4


def _dense_digraph():
    """A column-stochastic ``(N, N)`` matrix with every one-way link present and uneven
    columns (agent j keeps ``(j + 1) / (N + 3)``, spreads the rest unevenly), rows not
    summing to 1: the push-sum weights move away from 1."""
    rng = np.random.default_rng(0)
    c = rng.uniform(0.2, 1.0, (N, N))
    c[np.diag_indices(N)] = 0.0
    c = c / c.sum(0) * (1 - (np.arange(N) + 1) / (N + 3))
    c[np.diag_indices(N)] = (np.arange(N) + 1) / (N + 3)
    return c.astype(np.float32)


def _with(alg, channel):
    return eqx.tree_at(lambda a: a.channel, alg, channel, is_leaf=lambda x: x is None)


def _states(alg, problem, matrix, steps, key):
    """``steps`` steps of ``alg.step`` over the static ``matrix`` (traced: call inside
    ``jax.jit``): ``(state before each step, state after each step, step keys)``."""
    x0 = jax.random.normal(jax.random.key(1), (N, 2))
    init_key, run_key = jax.random.split(key)
    state = alg.init(x0, problem.potential, init_key)
    keys = jax.vmap(lambda k: jax.random.fold_in(run_key, k))(jnp.arange(steps))

    def body(state, k):
        new = alg.step(keys[k], state, problem.potential, matrix)
        return new, (state, new)

    return *jax.lax.scan(body, state, jnp.arange(steps))[1], keys


_PATTERN = np.array([[1, 1, 1, 1], [1, 0, 1, 1], [0, 1, 1, 0]], bool)


@pytest.mark.parametrize("cells", [
    "push_diging",
    pytest.param("all", marks=pytest.mark.slow),  # fast twin: the "push_diging" cell
])
def test_exact_channel_is_no_channel_and_bytes_include_the_weights(cells, key):
    """Through ``sample`` on a directed schedule (one-way failures of a ring: uneven weights),
    ``Channel()`` gives the channel-free draws bit for bit for Push-DIGing-SGLD (``"all"``:
    and push-sum SGLD). Each agent sends per step, to each out-neighbour of that snapshot, the
    mass with its weight (4 d + 4 bytes, float32) and, for Push-DIGing-SGLD, the tracker (4 d
    bytes)."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    ring = np.asarray(nets.ring(N).adjacency[0])
    schedule = nets.one_way_link_failures(ring, 0.3, period=5, seed=0)
    init, T = jnp.zeros((3, N, 2)), 5
    adj = np.asarray(schedule.adjacency)
    out_degree = (adj & ~np.eye(N, dtype=bool)).sum(1)[np.arange(T) % 5].sum(0)   # (N,)
    assert np.ptp(np.asarray(nets.directed.push_sum_weights(schedule, T))) > 0.05
    samplers = ((dgsgld.PushDIGingSGLD, 2), (dgsgld.PushSumSGLD, 1))
    for make, messages in samplers[:1] if cells == "push_diging" else samplers:
        plain = dgsgld.sample(make(0.05), problem.potential, schedule, init, key, T)
        channel = C.Channel()
        exact = dgsgld.sample(make(0.05), problem.potential, schedule, init, key, T,
                              channel=channel)
        for a, b in zip(jax.tree.leaves(plain.state),
                        jax.tree.leaves(exact.state._replace(channel=()))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(np.asarray(plain.positions), np.asarray(exact.positions))
        sent = np.asarray(C.messages_sent(exact.state))
        np.testing.assert_array_equal(sent, np.broadcast_to(messages * out_degree, (3, N)))
        np.testing.assert_array_equal(channel.bytes_sent(exact.state),
                                      np.broadcast_to(out_degree * (messages * 8 + 4), (3, N)))


@pytest.mark.slow  # fast twins: test_exact_channel_is_no_channel_and_bytes_include_the_weights,
# tests/communication/test_links.py::test_links_and_stragglers_step_by_step
def test_one_way_drops_and_stragglers_step_by_step(key):
    """Both push-sum samplers with mini-batches on a dense directed matrix C, each one-way link
    up w.p. 1/2 and the activity pattern (all, all but 1, only 1 and 2), 6 steps, one compiled
    program. The used matrices C'ₖ, recomputed from the run's keys (one-way links dropped by
    link_mask(round key, directed) with their weight left on the sender's diagonal, then the
    inactive agents cut off), are nonnegative and column stochastic, with links up one way
    and down the other. At every step an inactive agent's whole state (position, weight,
    gradient, tracker) is kept exactly; every active agent's row equals (to float32 rounding:
    the reference is batched over steps) a step without channel over C'ₖ from the same state
    and key, so the mass, the weight and the tracker go over the same links; Σ v = N and
    Σ y = Σ ∇̃f to rounding; an agent counts, per message at the steps it is active, its
    up out-links."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    c, T = jnp.asarray(_dense_digraph()), 6
    active = _PATTERN[np.arange(T) % 3]                                           # (T, N)
    channel = C.Channel(probability=0.5, per_link=True, activity=_PATTERN)
    samplers = {"push_diging": dgsgld.PushDIGingSGLD(0.05),
                "push_sum": dgsgld.PushSumSGLD(0.05)}

    @jax.jit
    def runs(key):
        out = {}
        for name, alg in samplers.items():
            step = alg.step
            before, after, keys = _states(_with(alg, channel), problem, c, T, key)
            rounds = jax.vmap(lambda k: jax.random.fold_in(k, C.channel._ROUND_TAG))(keys)
            up = jax.vmap(lambda r: C.link_mask(r, N, 0.5, directed=True))(rounds)
            dropped = jax.vmap(lambda u: C.drop_links(c, u, keep="columns"))(up)
            used = jax.vmap(lambda m, a: C.without_inactive(m, a, keep="columns"))(
                dropped, jnp.asarray(active))
            plain = jax.vmap(lambda k, s, w, step=step: step(k, s._replace(channel=()),
                                                             problem.potential, w))(
                keys, before, used)
            out[name] = before, after, plain, up, used
        return out

    for name, (before, after, plain, up, used) in runs(key).items():
        up, used = np.asarray(up), np.asarray(used, np.float64)
        assert (used >= 0).all()
        np.testing.assert_allclose(used.sum(1), 1.0, atol=1e-6)            # column stochastic
        assert (up != up.transpose(0, 2, 1)).any()                          # one-way drops
        links = up[:, ~np.eye(N, dtype=bool)]
        assert 0 < links.sum() < links.size
        fields = ("position", "weight", "grad") + (("tracker",) if name == "push_diging" else ())
        for field in fields:
            old, new, ref = (np.asarray(getattr(s, field)) for s in (before, after, plain))
            np.testing.assert_array_equal(new[~active], old[~active], err_msg=field)
            np.testing.assert_allclose(new[active], ref[active], rtol=1e-5, atol=1e-6,
                                       err_msg=(name, field))
        np.testing.assert_allclose(np.asarray(after.weight).sum((1, 2)), N, rtol=1e-6)
        if name == "push_diging":
            gap = np.abs(np.asarray(after.tracker).sum(1) - np.asarray(after.grad).sum(1))
            assert gap.max() < 1e-5 * np.abs(np.asarray(after.grad)).sum(), gap.max()
        # An active agent sends to each out-neighbour its one-way link is up to, inactive
        # ones included (they hold what they are sent back: nothing is pushed to them, the
        # weight stays with the sender, but the message is on the wire); inactive: nothing.
        degrees = active * ((up & ~np.eye(N, dtype=bool)[None]).sum(1))
        for state in after.channel.values():
            np.testing.assert_array_equal(np.asarray(state.sent)[-1], degrees.sum(0))


# Fast twins: tests/communication/test_channel.py::test_diging_exact_channel_and_tracking_invariant
# (CHOCO error feedback keeps DIGing's tracker sum under top-k, and breaks without it);
# test_exact_channel_is_no_channel_and_bytes_include_the_weights (the weights travel exact
# beside the masses, their 4 bytes counted).
@pytest.mark.slow
def test_error_feedback_keeps_the_weights_and_the_tracker_sum(key):
    """Push-DIGing-SGLD, heterogeneous agents, the directed barbell, 60 steps, top-k(0.5) of
    d = 2: with CHOCO error feedback on the masses (the weights exact beside them) Σ_i v_i = N
    and Σ_i y_i − Σ_i ∇̃f_i(x_i) stay at float32 rounding (relative 1e-5, as with exact
    mixing: 1ᵀ(C − I) = 0); without it the compressor breaks the tracking invariant by
    orders of magnitude more (relative > 1e-2). The weights are the channel-free run's bit
    for bit: a channel never compresses them."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, heterogeneous=True)
    schedule = nets.directed_barbell(N, period=4, seed=0)
    init = jax.random.normal(jax.random.key(1), (2, N, 2))
    plain = dgsgld.sample(dgsgld.PushDIGingSGLD(0.02), problem.potential, schedule, init,
                          key, 60)
    gaps = []
    for ef in (True, False):
        channel = C.Channel(C.top_k(0.5), error_feedback=ef, consensus=0.5)
        st = dgsgld.sample(dgsgld.PushDIGingSGLD(0.02), problem.potential, schedule, init,
                           key, 60, channel=channel).state
        np.testing.assert_array_equal(np.asarray(st.weight), np.asarray(plain.state.weight))
        scale = np.abs(np.asarray(st.grad)).sum()
        gaps.append(np.abs(np.asarray(st.tracker).sum(1) - np.asarray(st.grad).sum(1)).max()
                    / scale)
    assert gaps[0] < 1e-5, gaps
    assert gaps[1] > 1e-2, gaps


@pytest.mark.slow  # fast twin: test_exact_channel_is_no_channel_and_bytes_include_the_weights
def test_same_draws_however_chains_are_batched_chunked_or_placed(key, tmp_path):
    """With a random compressor, error feedback, random one-way drops and stragglers, chain 2
    of a 3-chain run is the 1-chain run at ``chain_offset=2``, a checkpointed run in chunks
    of 2 steps is the single call, and ``placement=Chains`` on the one device is the default
    placement, bit for bit and bytes included, for both push-sum samplers.

    Except the batch comparison with the random compressor, error feedback and stragglers:
    the 3-chain run's positions and state are an ulp apart from the 1-chain run's in a few
    entries (docs/known-issues.md: 11 of 56 positions for Push-DIGing-SGLD, 5 for
    Push-Sum-SGLD, with or without the test run's XLA flag), while the draws and the bytes
    agree.
    Bound: an ulp (1.2e-7 relative) per read-out, |x| < 3, over 6 steps stays below 1e-5;
    one differing draw moves a position by ~sqrt(2 eta) = 0.3."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    schedule = nets.directed_barbell(N, period=4, seed=0)
    init, T = jnp.zeros((3, N, 2)), 6
    channel = C.Channel(C.random_k(0.5), error_feedback=True, consensus=0.5, activity=0.7)
    drops = C.Channel(probability=0.6, per_link=True)
    for make in (dgsgld.PushDIGingSGLD, dgsgld.PushSumSGLD):
        for ch in (channel, drops):
            alg = make(0.05, channel=ch)
            all3 = dgsgld.sample(alg, problem.potential, schedule, init, key, T)
            one = dgsgld.sample(alg, problem.potential, schedule, init[2:], key, T,
                                chain_offset=2)
            assert np.abs(np.asarray(one.positions)).max() < 3
            for a, b in zip(jax.tree.leaves((all3.positions, all3.state)),
                            jax.tree.leaves((one.positions, one.state))):
                np.testing.assert_allclose(np.asarray(a)[2:], np.asarray(b), rtol=0,
                                           atol=0 if ch is drops else 1e-5)
            np.testing.assert_array_equal(ch.bytes_sent(all3.state)[2:],
                                          ch.bytes_sent(one.state))
            path = tmp_path / f"{make.__name__}_{ch.per_link}"
            chunked = dgsgld.sample_chunked(alg, problem.potential, schedule, init, key, T,
                                            chunk_size=2, path=path)
            placed = dgsgld.sample(alg, problem.potential, schedule, init, key, T,
                                   placement=dgsgld.Chains())
            for other in (chunked, placed):
                np.testing.assert_array_equal(np.asarray(all3.positions),
                                              np.asarray(other.positions))
                np.testing.assert_array_equal(ch.bytes_sent(all3.state),
                                              ch.bytes_sent(other.state))


@pytest.mark.slow  # fast twin: test_exact_channel_is_no_channel_and_bytes_include_the_weights
def test_local_steps_leave_masses_and_weights_unmixed(key):
    """``Channel(every=3)`` on a static digraph is no channel on the stack (C, I, I): between
    rounds neither the mass nor the weight is mixed. Two programs that mix or select first may
    fuse differently: at most one ulp of every mixing per step (2⁻²⁴ |x|), not amplified by a
    column-stochastic C and a contracting step (η = 0.02), over 5 steps with |x| < 3:
    5 · 2 · 3 · 6e-8 < 2e-6."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    c = _dense_digraph()
    eye = np.eye(N, dtype=np.float32)
    init = jax.random.normal(jax.random.key(1), (2, N, 2))
    for make in (dgsgld.PushDIGingSGLD, dgsgld.PushSumSGLD):
        ref = dgsgld.sample(make(0.02), problem.potential, np.stack([c, eye, eye]), init, key,
                            5, allow_disconnected=True)
        local = dgsgld.sample(make(0.02), problem.potential, c[None], init, key, 5,
                              channel=C.Channel(every=3))
        np.testing.assert_allclose(np.asarray(local.positions), np.asarray(ref.positions),
                                   rtol=0, atol=2e-6)
        np.testing.assert_allclose(np.asarray(local.state.weight),
                                   np.asarray(ref.state.weight), rtol=0, atol=2e-6)


@pytest.mark.slow  # fast twin: test_exact_channel_is_no_channel_and_bytes_include_the_weights
def test_one_way_drops_keep_push_diging_stationary_mean(key):
    """Each one-way link of the dense digraph up w.p. 1/2 at every step, Push-DIGing-SGLD with
    full batches on the Gaussian problem. Given the realized matrices C'ₖ (drawn independently
    of the state) the weights v⁽ᵏ⁾ are deterministic and the recursion is linear in (u, y),
    so E[x⁽ᵏ⁾ | C'] is the noise-free Push-DIGing iterate, which converges to the minimizer of
    Σ_i f_i (the posterior mean μ) on every jointly strongly connected sequence; averaging
    over the sequences, E[x_i⁽ᵏ⁾] → μ for every agent. Weight dropped onto the receiver's
    diagonal instead (rows kept, columns not) would break Σ v = N and the exactness of the
    average.

    2000 chains from x⁽⁰⁾ = 0, 400 steps at η = 0.05. The standard error of each agent's mean
    is estimated from the chains (about 0.5 / √2000 = 0.011, against |μ| = (0.73, 0.16));
    each of the 2 coordinates of the 4 agents is within 5 standard errors (8 z-scores: a false
    failure has probability < 5e-6). (On the sparser directed barbell the same drops make the
    weights heavy-tailed, min v 0.0045 over these chains, and some chains blow up at this
    step: docs/results/directed.md.)"""
    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    chains, steps = 2000, 400
    channel = C.Channel(probability=0.5, per_link=True)
    trace = dgsgld.sample(dgsgld.PushDIGingSGLD(0.05), problem.potential,
                          _dense_digraph()[None], jnp.zeros((chains, N, 2)), key, steps,
                          channel=channel, output=dgsgld.Output(thin=steps))
    x = np.asarray(trace.state.position, np.float64)                      # (chains, N, d)
    se = x.std(0, ddof=1) / np.sqrt(chains)
    assert (np.abs(x.mean(0) - problem.mean) <= 5 * se).all(), (x.mean(0), problem.mean, se)
    np.testing.assert_allclose(np.asarray(trace.state.weight).sum((1, 2)), N, rtol=1e-5)


#: The channels of the exchange-rows test: stragglers, one-way drops and gossip alone in the
#: default run; their compositions, edge gossip and a clock's deadline slow (same code paths).
EXCHANGE_CHANNELS = [
    C.Channel(activity=0.6), C.Channel(probability=0.6, per_link=True),
    C.Channel(gossip="matching"),
    *(pytest.param(c, marks=pytest.mark.slow) for c in (
        C.Channel(gossip="edge", activity=0.6),
        C.Channel(probability=0.7, per_link=True, activity=0.6),
        C.Channel(gossip="matching", probability=0.7, per_link=True),
        C.Channel(clock=C.Clock((1.0,) * 7 + (3.0,), deadline=2.0))))]


@pytest.mark.parametrize("channel", EXCHANGE_CHANNELS, ids=[
    "stragglers", "drops", "gossip", "edge_gossip_stragglers", "drops_stragglers",
    "gossip_drops", "clock"])
def test_a_directed_snapshots_exchange_rows_are_rewritten_as_its_dense_matrix(key, channel):
    # Over a neighbour exchange a device rewrites its rows of a directed snapshot from draws
    # made for all agents: dropped one-way links and stragglers keep each dropped weight in
    # its sender's column (from the weights each agent gives out, HaloRows.sent), gossip
    # pushes half to the partner, and their compositions (gossip, then stragglers) give the
    # dense rule's matrix. One device on a mesh of one holds all rows, so the used matrix is
    # compared whole: equal up to float32 rounding of a diagonal summed over an agent's L
    # out-links instead of its N entries (weights ≤ 1, a few ulps: bound 1e-6), while one
    # differing draw moves an entry by a weight ≥ 1/9. The out-degrees (bytes) are equal.
    from jax.sharding import PartitionSpec as P

    from dgsgld.networks import sparse
    from dgsgld.parallel import rows as rows

    n = 8
    schedule = sparse.from_dense(
        nets.one_way_link_failures(np.ones((n, n)) - np.eye(n), 0.5, period=3, seed=4),
        format="edges")
    plan = rows.exchange_plan(schedule, 1, support=True)
    mesh = jax.make_mesh((1,), ("agents",))
    def used(channel, halo, step_key, k):
        active = C.active_agents(channel, step_key, k, n)
        _, matrix, degrees = channel.plan(jax.random.fold_in(step_key, 1), halo, k, active,
                                          directed=True)
        if isinstance(matrix, rows.HaloRows):
            own, agents = matrix.agents()
            matrix = (jnp.zeros((n, n), matrix.weights.dtype)
                      .at[own[:, None], agents].add(matrix.weights) + jnp.diag(matrix.diagonal))
        return matrix, degrees

    @jax.jit
    def both(step_key, k):
        halo = jax.shard_map(lambda pl: used(channel, pl.rows(k, "agents", 1), step_key, k),
                             mesh=mesh, in_specs=(jax.tree.map(lambda _: P(), plan),),
                             out_specs=(P("agents"), P("agents")))(plan)
        return halo, used(channel, schedule.matrix_at(k).todense(), step_key, k)

    for k in range(12):
        halo, dense = both(jax.random.fold_in(key, k), jnp.int32(k))
        np.testing.assert_allclose(halo[0], dense[0], rtol=0, atol=1e-6,
                                   err_msg=f"{channel} at {k}")
        np.testing.assert_array_equal(halo[1], dense[1])
        np.testing.assert_allclose(np.asarray(halo[0]).sum(0), 1.0, atol=1e-6)
