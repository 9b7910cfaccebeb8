"""The channel: exact channels give today's draws bit for bit, exact byte counts (public copies
to every agent that ever listens), CHOCO error feedback keeping the network sum, DIGing's
tracking invariant with and without it, event triggers, copies of public copies, and the front
end's errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _channels import N, _run, _same, _samplers, _with
from _problems import complete_graph, linear_regression, permuted_rings, ring

import dgsgld
from dgsgld import communication as C
from dgsgld.networks import onthefly


def _mixed_stack():
    """Snapshots with different out-degrees: a ring (2), the complete graph (3), one pair
    averaging with agents 2 and 3 alone (agents 0, 1: 1; agents 2, 3: 0)."""
    pair = np.eye(N)
    pair[:2, :2] = 0.5
    return np.stack([ring(N), complete_graph(N), pair])


_OUT_DEGREES = np.array([[2, 2, 2, 2], [3, 3, 3, 3], [1, 1, 0, 0]])


def _check_exact(name, plain, counted):
    """``counted`` (run with Channel()) equals ``plain`` (no channel) leaf for leaf, bit for
    bit, and counted Σ_k out-degree(W⁽ᵏ⁾) per message over the 4 steps of :func:`_run`."""
    assert plain.channel == ()
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(counted._replace(channel=()))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)
    assert set(counted.channel) == ({"position", "tracker"} if "diging" in name else
                                    {"position", "next_position"} if name == "extra" else
                                    {"position"})
    for state in counted.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), _OUT_DEGREES[[0, 1, 2, 0]].sum(0))


@pytest.mark.slow  # fast twin: test_diging_exact_channel_and_tracking_invariant
def test_exact_channel_equals_no_channel_for_every_sampler(key):
    """Channel() (identity, no error feedback) mixes with the same ``W @ x`` as a sampler
    without channel, for the 6 samplers that take a channel (:func:`_check_exact`)."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    stack = _mixed_stack()

    @jax.jit
    def both(key):
        return {name: (_run(alg, problem, stack, 4, key),
                       _run(_with(alg, C.Channel()), problem, stack, 4, key))
                for name, alg in _samplers().items()}

    for name, (plain, counted) in both(key).items():
        _check_exact(name, plain, counted)


def test_diging_exact_channel_and_tracking_invariant(key):
    """DIGing-SGLD (x and y sent), one compiled program. (1) :func:`_check_exact` on the
    mixed stack with mini-batches. (2) Heterogeneous agents, ring, 60 steps, top-k(0.5) of
    d = 2 (one entry of two): with CHOCO error feedback Σ_i y_i − Σ_i ∇̃f_i(x_i) stays at
    float32 rounding (relative 1e-5, as with exact mixing); without it the compressor's bias
    breaks the invariant by orders of magnitude more (relative > 1e-2). (3) Channel(every=3)
    on the static ring is no channel on the stack (ring, I, I) (local steps at k ≢ 0 mod 3) to
    float32 rounding, and counts 2 messages per agent at k = 0, 3 of 5 steps only."""
    batched = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    hetero = linear_regression(num_agents=N, local_size=3, dim=2, heterogeneous=True)
    alg = dgsgld.DIGingSGLD(0.02)

    @jax.jit
    def runs(key):
        exact = (_run(alg, batched, _mixed_stack(), 4, key),
                 _run(_with(alg, C.Channel()), batched, _mixed_stack(), 4, key))
        gaps = []
        for ef in (True, False):
            channel = C.Channel(C.top_k(0.5), error_feedback=ef, consensus=0.5)
            state = _run(_with(alg, channel), hetero, ring(N)[None], 60, key)
            scale = jnp.abs(state.grad).sum()
            gaps.append(jnp.abs(state.tracker.sum(0) - state.grad.sum(0)).max() / scale)
        eye = np.eye(N)
        local = (_run(alg, batched, np.stack([ring(N), eye, eye]), 5, key),
                 _run(_with(alg, C.Channel(every=3)), batched, ring(N)[None], 5, key))
        return exact, gaps, local

    exact, gaps, (plain, local) = runs(key)
    # Two programs with the same arithmetic up to where XLA may fuse the mixing product into
    # the addition after it (the channel selects between mixed and unmixed first): bitwise
    # equal on JAX 0.10, one float32 ulp apart in places on JAX 0.12. The bound: at most one
    # ulp (2^-24 |x|) of every mixing per step, not amplified by a stochastic W and a contracting
    # step (η = 0.02), over 5 steps with |x| < 2: 5 * 2 * 6e-8 = 6e-7 < 1e-6.
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(local._replace(channel=()))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)
    for state in local.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), np.full(N, 2 * 2))
    _check_exact("diging", *exact)
    gap = [float(g) for g in gaps]
    assert gap[0] < 1e-5, gap
    assert gap[1] > 1e-2, gap


def test_sample_channel_option_counts_bytes(key):
    """``sample(channel=Channel())``: the streamed total and the per-iteration trace of
    messages are exact: under DIGing-SGLD agent j sends 2 messages (x, y) per step to each
    out-neighbour of that step's snapshot, 8 bytes each (d = 2 float32 entries)."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    stack, init = _mixed_stack(), jnp.zeros((2, N, 2))
    out = dgsgld.Output(trace_fn=C.messages_sent)
    channel = C.Channel()
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.05), problem.potential, stack, init, key, 5,
                          output=out, channel=channel)
    per_step = 2 * _OUT_DEGREES[np.arange(5) % 3]                      # (5, N) messages
    expected = np.concatenate([np.zeros((1, N), int), np.cumsum(per_step, 0)])
    np.testing.assert_array_equal(np.asarray(trace.values), np.broadcast_to(expected, (2, 6, N)))
    np.testing.assert_array_equal(channel.bytes_sent(trace.state), 8 * expected[-1][None]
                                  .repeat(2, 0))


def _pairs(*pairs):
    """The matrix where each pair ``(i, j)`` averages and every other agent keeps its value."""
    w = np.eye(N)
    for i, j in pairs:
        w[np.ix_([i, j], [i, j])] = 0.5
    return w


@pytest.mark.slow  # fast twin: test_sample_channel_option_counts_bytes
def test_public_copies_are_sent_to_every_agent_that_ever_listens(key):
    """On a time-varying network every agent that ever listens to ``j`` keeps a copy of
    ``x̂_j``, so each update of a public copy (error feedback, an event trigger) is sent to all
    of them: pairs {0, 1}, {2, 3} then {1, 2} give listeners (1, 2, 2, 1), while a message
    without public copies goes to the snapshot's out-neighbours ((1, 1, 1, 1), then
    (0, 1, 1, 0)). Under DIGing-SGLD 2 messages a step, over 5 steps. (An event trigger's
    copies are counted by the same rule, ``Channel._public``.)"""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    stack = np.stack([_pairs((0, 1), (2, 3)), _pairs((1, 2))])
    union = np.array([1, 2, 2, 1])
    assert C.listener_counts(stack) == tuple(union)
    snapshots = np.array([[1, 1, 1, 1], [0, 1, 1, 0]])[np.arange(5) % 2].sum(0)
    for channel, per_agent in ((C.Channel(C.top_k(0.5), error_feedback=True), 5 * union),
                               (C.Channel(C.top_k(0.5)), snapshots)):
        trace = dgsgld.sample(dgsgld.DIGingSGLD(0.05), problem.potential, stack,
                              jnp.zeros((2, N, 2)), key, 5, channel=channel)
        np.testing.assert_array_equal(np.asarray(C.messages_sent(trace.state)),
                                      np.broadcast_to(2 * per_agent, (2, N)))
    # A schedule that never repeats may put any agent next to any other.
    endless = onthefly.link_failures_on_the_fly(complete_graph(N) > 0, 0.5)
    assert C.listener_counts(endless) == (N - 1,) * N
    with pytest.raises(ValueError, match="`listeners` must be None or one count"):
        C.Channel(listeners=[1, -1, 2, 2])
    with pytest.raises(ValueError, match="`copy_slots` must be an int >= 0"):
        C.Channel(copy_slots=-1)
    with pytest.raises(ValueError, match="`listeners` has 3 counts for a network of 4"):
        dgsgld.sample(dgsgld.DIGingSGLD(0.05), problem.potential, stack, jnp.zeros((1, N, 2)),
                      key, 1, channel=C.Channel(error_feedback=True, listeners=[1, 2, 2]))


@pytest.mark.slow  # fast twins: test_diging_exact_channel_..., test_sample_channel_option_...
def test_sample_channel_bit_for_bit_every_sampler_and_chain_identity(key):
    """Through ``sample``, every sampler: Channel() equals no channel bit for bit; with a
    random compressor chain c of a 3-chain run equals the 1-chain run at chain_offset=c."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    stack, init = permuted_rings(N, 3), jnp.zeros((3, N, 2))
    for name, alg in _samplers().items():
        a = dgsgld.sample(alg, problem.potential, stack, init, key, 6)
        b = dgsgld.sample(alg, problem.potential, stack, init, key, 6, channel=C.Channel())
        np.testing.assert_array_equal(np.asarray(a.positions), np.asarray(b.positions), name)
        channel = C.Channel(C.random_k(0.5), error_feedback=True, consensus=0.5)
        all3 = dgsgld.sample(alg, problem.potential, stack, init, key, 6, channel=channel)
        one = dgsgld.sample(alg, problem.potential, stack, init[2:], key, 6, channel=channel,
                            chain_offset=2)
        np.testing.assert_array_equal(np.asarray(all3.positions[2:]), np.asarray(one.positions))


@pytest.mark.slow  # fast twin: test_diging_exact_channel_and_tracking_invariant (EF sum)
def test_channel_mix_sums():
    """On a random message over the ring: without error feedback the network sum moves by
    exactly Σ_j (1 − W_jj)(q_j − x_j) (top-k); with CHOCO error feedback it is kept
    (random-k, sign), and identity with γ = 1 is W x up to rounding."""
    W = jnp.asarray(ring(N), jnp.float32)
    x = jax.random.normal(jax.random.key(2), (N, 3))
    key = jax.random.key(3)
    tol = 1e-5 * float(jnp.abs(x).sum())
    kept = (C.random_k(0.34), C.sign(), C.identity())

    @jax.jit
    def mixes(x):
        plain = C.Channel(C.top_k(0.34))
        q = jax.vmap(C.top_k(0.34).compress)(jax.random.split(key, N), x)
        ef = [C.Channel(c, error_feedback=True, consensus=0.5 if c != C.identity() else 1.0)
              for c in kept]
        return (plain.mix(key, plain.init(x), W, x)[0], q,
                [channel.mix(key, channel.init(x), W, x) for channel in ef])

    mixed, q, ef = mixes(x)
    moved = ((1 - jnp.diagonal(W))[:, None] * (q - x)).sum(0)
    np.testing.assert_allclose(mixed.sum(0) - x.sum(0), moved, atol=tol)
    assert float(jnp.abs(moved).max()) > 100 * tol
    for compressor, (mixed, _) in zip(kept, ef):
        np.testing.assert_allclose(mixed.sum(0), x.sum(0), atol=tol, err_msg=str(compressor))
    mixed, state = ef[-1]
    np.testing.assert_allclose(mixed, W @ x, atol=1e-6)
    np.testing.assert_allclose(state.public, x, atol=1e-6)


@pytest.mark.reliability
def test_channel_errors(key):
    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    W, init = ring(N), jnp.zeros((1, N, 2))
    with pytest.raises(TypeError, match="`channel` must be None or a dgsgld.communication"):
        dgsgld.sample(dgsgld.DIGingSGLD(0.1), problem.potential, W, init, key, 2,
                      channel="top_k")
    with pytest.raises(ValueError, match="`channel` must be None for SGLD"):
        dgsgld.sample(dgsgld.SGLD(0.1), problem.potential, None, init[:, 0], key, 2,
                      channel=C.Channel())
    with pytest.raises(ValueError, match="`channel` differs from the channel"):
        dgsgld.sample(dgsgld.DIGingSGLD(0.1, channel=C.Channel(C.sign())), problem.potential,
                      W, init, key, 2, channel=C.Channel())
    with pytest.raises(ValueError, match="`fraction` must be a number in"):
        C.top_k(0.0)
    with pytest.raises(ValueError, match="`levels` must be an integer >= 1"):
        C.quantize(0)
    with pytest.raises(ValueError, match=r"`levels` must be an integer >= 1 and <= 2\*\*24"):
        C.quantize(2**24 + 1)
    with pytest.raises(ValueError, match="`consensus` must be a number in"):
        C.Channel(error_feedback=True, consensus=1.5)
    with pytest.raises(ValueError, match="`every`"):
        C.Channel(every=0)
    with pytest.raises(TypeError, match="`compressor` must be"):
        C.Channel("sign")
    with pytest.raises(ValueError, match="`state` has no channel state"):
        C.messages_sent(dgsgld.DIGingState(init[0], init[0], init[0], jnp.zeros((), int)))


@pytest.mark.slow  # fast twin: test_sample_channel_option_counts_bytes
def test_guide_example_runs():
    """docs/guide/communication.md's example prints 100 steps x 2 messages x 2 links x 8 B."""
    import contextlib
    import io
    import pathlib
    import re

    docs = pathlib.Path(__file__).resolve().parents[2] / "docs"
    text = (docs / "guide" / "communication.md").read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "communication.md", "exec"), {})
    assert out.getvalue().split() == ["[[3200", "3200", "3200", "3200]", "[3200", "3200",
                                      "3200", "3200]]"]


@pytest.mark.slow  # fast twin: test_sample_channel_option_counts_bytes
def test_chunked_run_with_error_feedback_equals_one_run(key, tmp_path):
    """The channel state (public copies, counters) is carried through checkpointed chunks:
    ``sample_chunked`` in chunks of 2 equals one run bit for bit, bytes included; resuming the
    checkpoint with another compressor is refused, naming it."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    channel = C.Channel(C.random_k(0.5), error_feedback=True, consensus=0.5)
    alg, init = dgsgld.DIGingSGLD(0.05, channel=channel), jnp.zeros((2, N, 2))
    one = dgsgld.sample(alg, problem.potential, ring(N), init, key, 6)
    chunked = dgsgld.sample_chunked(alg, problem.potential, ring(N), init, key, 6,
                                    chunk_size=2, path=tmp_path)
    np.testing.assert_array_equal(np.asarray(one.positions), np.asarray(chunked.positions))
    np.testing.assert_array_equal(channel.bytes_sent(chunked.state), np.full((2, N), 96))
    # Rounds, event trigger and stragglers: the channel state (copies, `heard`) carries too.
    busy = C.Channel(C.random_k(0.5), error_feedback=True, consensus=0.5, probability=0.8,
                     threshold=0.05, activity=0.7)
    alg_busy = dgsgld.DIGingSGLD(0.05, channel=busy)
    one = dgsgld.sample(alg_busy, problem.potential, ring(N), init, key, 6)
    chunked = dgsgld.sample_chunked(alg_busy, problem.potential, ring(N), init, key, 6,
                                    chunk_size=2, path=tmp_path / "busy")
    np.testing.assert_array_equal(np.asarray(one.positions), np.asarray(chunked.positions))
    np.testing.assert_array_equal(busy.bytes_sent(one.state), busy.bytes_sent(chunked.state))
    other = dgsgld.DIGingSGLD(0.05, channel=C.Channel(C.sign(), error_feedback=True,
                                                      consensus=0.5))
    with pytest.raises(ValueError, match="`algorithm.channel.compressor` differs"):
        dgsgld.sample_chunked(other, problem.potential, ring(N), init, key, 6, chunk_size=2,
                              path=tmp_path)


@pytest.mark.slow  # fast twin: test_diging_exact_channel_and_tracking_invariant (Channel() is
# today's mixing)
def test_neutral_settings_are_always_on_mixing(key):
    """DIGing-SGLD with mini-batches on the mixed stack, one compiled program: threshold = 0
    with an all-ones activity pattern is no channel bit for bit (and counts Channel()'s
    messages: a message that moved is sent); with top-k and CHOCO error feedback, threshold
    = 0, an all-ones pattern and probability = 1 are the same channel without them, bit for
    bit, bytes included. probability = 1 per link returns W⁽ᵏ⁾ itself (the run with it is
    in test_probabilistic_rounds_and_links)."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    alg, ones = dgsgld.DIGingSGLD(0.05), np.ones((1, N))
    W = jnp.asarray(ring(N), jnp.float32)
    assert C.Channel(probability=1.0, per_link=True).round(key, W, 3) == (None, W)
    assert C.Channel(probability=1.0, activity=1.0) == C.Channel()
    ef = {"error_feedback": True, "consensus": 0.5}

    @jax.jit
    def runs(key):
        def run(channel):
            return _run(_with(alg, channel), problem, _mixed_stack(), 4, key)

        return ((run(None), run(C.Channel(threshold=0.0, activity=ones))),
                (run(C.Channel(C.top_k(0.5), **ef)),
                 run(C.Channel(C.top_k(0.5), threshold=0.0, activity=ones, probability=1.0,
                               **ef))))

    (plain, event), (always, both) = runs(key)
    _check_exact("diging", plain, event)
    _same(always, both)
    for name in always.channel:
        np.testing.assert_array_equal(np.asarray(always.channel[name].sent),
                                      np.asarray(both.channel[name].sent))


def test_event_trigger_silent_after_first_round(key):
    """A huge threshold: every agent sends at the first round only (2 ring links per
    message), its neighbours keep x⁽⁰⁾ and y⁽⁰⁾ as its copies, and the state still moves
    from x⁽⁰⁾ (local steps mixing with the stale copies). Per message: the same threshold
    given for both messages by name is the same run bit for bit; a huge threshold for the
    position only leaves the tracker sent at every step (2 links × 5 steps) with no public
    copy or first-round flag of its own."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    silent = _with(dgsgld.DIGingSGLD(0.05), C.Channel(threshold=1e30))
    named = _with(dgsgld.DIGingSGLD(0.05),
                  C.Channel(threshold={"position": 1e30, "tracker": 1e30}))
    position_only = _with(dgsgld.DIGingSGLD(0.05), C.Channel(threshold={"position": 1e30}))

    @jax.jit
    def runs(key):
        first = silent.init(jax.random.normal(jax.random.key(1), (N, 2)), problem.potential,
                            jax.random.split(key)[0])
        return first, [_run(alg, problem, ring(N)[None], 5, key)
                       for alg in (silent, named, position_only)]

    first, (last, by_name, one) = runs(key)
    for name, message in (("position", first.position), ("tracker", first.tracker)):
        state = last.channel[name]
        np.testing.assert_array_equal(np.asarray(state.sent), np.full(N, 2))
        np.testing.assert_array_equal(np.asarray(state.public), np.asarray(message))
        assert np.asarray(state.heard).all()
    moved = np.abs(np.asarray(last.position) - np.asarray(first.position))
    assert np.isfinite(moved).all() and (moved.max(1) > 1e-3).all(), moved
    for a, b in zip(jax.tree.leaves(last), jax.tree.leaves(by_name)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(one.channel["position"].sent), np.full(N, 2))
    np.testing.assert_array_equal(np.asarray(one.channel["tracker"].sent), np.full(N, 10))
    assert one.channel["tracker"].public == () and one.channel["tracker"].heard == ()
    assert C.Channel(threshold={"position": 0.1}).threshold_of("tracker") is None


@pytest.mark.parametrize("cells", [
    "slots",
    # fast twin: the "slots" cell; the single-device run of this channel and schedule, whose
    # state (no copies) an Agents run refuses to continue from, and the copies under Agents:
    # tests/communication/test_agents.py::test_channels_under_agent_placement_make_the_...
    pytest.param("all", marks=pytest.mark.slow),
])
def test_copies_of_public_copies_only_under_agent_placement(cells, key):
    """Copies of public copies (``ChannelState.copies``) are kept only where a neighbour
    exchange needs them, placement ``Agents`` over a sparse schedule: (``"all"``) on one
    device, and with chains split over devices, the state holds none and the draws are one
    device's. The period's union sets how many (``rows.copy_slots``): on 4 agents the 3
    permuted rings put every agent next to all 3 others over the period (2 per snapshot)."""
    from dgsgld.networks import sparse
    from dgsgld.parallel import rows as rows

    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    schedule = sparse.from_dense(permuted_rings(N, 3), format="neighbors")
    assert rows.copy_slots(schedule) == 3 == N - 1
    channel = C.Channel(C.top_k(0.5), error_feedback=True)
    configured = dgsgld.Agents().configure(dgsgld.DIGingSGLD(0.05, channel=channel), schedule)
    assert configured.channel.copy_slots == 3
    if cells == "slots":
        return
    init = jax.random.normal(jax.random.key(1), (2, N, 2))
    runs = [dgsgld.sample(dgsgld.DIGingSGLD(0.05), problem.potential, schedule, init, key, 4,
                          channel=channel, placement=placement)
            for placement in (None, dgsgld.Chains())]
    for trace in runs:
        assert trace.state.channel["position"].copies == ()
    np.testing.assert_array_equal(np.asarray(runs[0].positions), np.asarray(runs[1].positions))


@pytest.mark.slow  # fast twin: test_event_trigger_silent_after_first_round
def test_thresholds_by_message_run_through_sample(key):
    """A per-message threshold survives the copies ``sample`` makes of the channel (its
    ``listeners`` set with ``dataclasses.replace``, which passes the converted pairs back to
    the converter): on the ring a huge position threshold sends the position at the first
    round only (2 links), the tracker at every step (2 links × 3 steps)."""
    import dataclasses

    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    channel = C.Channel(threshold={"position": 1e30})
    again = dataclasses.replace(channel, listeners=(2,) * N)
    assert again.threshold == channel.threshold == (("position", 1e30),)
    init = jax.random.normal(jax.random.key(1), (2, N, 2))
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.05), problem.potential, ring(N)[None], init,
                          key, 3, channel=channel)
    np.testing.assert_array_equal(np.asarray(trace.state.channel["position"].sent),
                                  np.full((2, N), 2))
    np.testing.assert_array_equal(np.asarray(trace.state.channel["tracker"].sent),
                                  np.full((2, N), 6))


def test_event_trigger_mixes_with_last_received_copies():
    """Channel(threshold=1) on the ring: the first round sends everyone's x⁽⁰⁾ (W x⁽⁰⁾, 2
    messages each); then only agent 0, moved by 2 (> 1), sends, the others moved by 0.1 are
    mixed from their stale copies: mixed_i = W_ii x_i + Σ_{j≠i} W_ij x̂_j, x̂ = (x¹₀, x⁰₁, x⁰₂,
    x⁰₃)."""
    W = jnp.asarray(ring(N), jnp.float32)
    channel = C.Channel(threshold=1.0)
    x0 = jax.random.normal(jax.random.key(2), (N, 2))
    x1 = x0 + jnp.asarray([[2.0, 0.0], [0.1, 0.0], [0.1, 0.0], [0.0, -0.1]])

    @jax.jit
    def two(key):
        first = channel.mix(key, channel.init(x0), W, x0)
        return first, channel.mix(key, first[1], W, x1, 1)

    (mixed, state), (mixed1, state1) = two(jax.random.key(3))
    np.testing.assert_allclose(mixed, W @ x0, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(state.sent, np.full(N, 2))
    mixed, state = mixed1, state1
    copies = x0.at[0].set(x1[0])
    diag = jnp.diagonal(W)[:, None]
    np.testing.assert_allclose(mixed, diag * x1 + (W - jnp.diag(jnp.diagonal(W))) @ copies,
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(state.sent, [4, 2, 2, 2])
    np.testing.assert_array_equal(state.public, copies)


@pytest.mark.reliability
def test_round_and_trigger_errors():
    """Bad probabilities, thresholds and combinations get a ValueError naming the argument."""
    for bad in (0, 1.5, -0.1, True, "0.5"):
        with pytest.raises(ValueError, match=r"`probability` must be a number in \(0, 1\]"):
            C.Channel(probability=bad)
    for bad in (-1.0, float("inf"), float("nan"), "1"):
        with pytest.raises(ValueError, match="`threshold` must be None, a finite number >= 0, "
                                             "or a dict of them by message name"):
            C.Channel(threshold=bad)
    with pytest.raises(ValueError, match=r"`threshold` must be None, a finite number"):
        C.Channel(threshold={"tracker": -1.0})
    with pytest.raises(ValueError, match=r"`threshold` names unknown messages \['y'\]; the "
                                         r"messages are \['next_position', 'position', "
                                         r"'tracker'\]"):
        C.Channel(threshold={"y": 0.1})
    with pytest.raises(ValueError, match="`gossip` must be None, 'edge' or 'matching'"):
        C.Channel(gossip="pairs")
    for kw in ({"error_feedback": True}, {"threshold": 0.1}):
        with pytest.raises(ValueError, match="`gossip` cannot be combined with error feedback"):
            C.Channel(gossip="edge", **kw)
    for kw in ({"error_feedback": True}, {"threshold": 0.1}):
        with pytest.raises(ValueError, match="`per_link` drops cannot be combined"):
            C.Channel(probability=0.5, per_link=True, **kw)
    for bad in (0, 1.5, True, "all", [1, 0, 1], [[1, 2]], np.zeros((0, 4))):
        with pytest.raises(ValueError, match=r"`activity` must be a number in \(0, 1\] or a"):
            C.Channel(activity=bad)
    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    with pytest.raises(ValueError, match="`activity` pattern has 3 agents per row; the "
                                         "network has 4"):
        dgsgld.sample(dgsgld.DESGLD(0.1), problem.potential, ring(N), jnp.zeros((1, N, 2)),
                      jax.random.key(0), 2, channel=C.Channel(activity=[[1, 0, 1]]))
