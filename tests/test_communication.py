"""Communication channels: exact channels give today's draws bit for bit, exact byte counts, the
compressors' laws, CHOCO error feedback keeping the network sum, DIGing's tracking invariant
with and without it, and the front end's errors."""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _problems import complete_graph, linear_regression, permuted_rings, ring

import dgsgld
from dgsgld import communication as C
from dgsgld.networks import onthefly

N = 4


def _samplers():
    return {
        "de": dgsgld.DESGLD(0.05), "diging": dgsgld.DIGingSGLD(0.05),
        "extra": dgsgld.EXTRASGLD(0.05), "dula": dgsgld.DULA(0.02, 0.5),
        "de_sghmc": dgsgld.DESGHMC(0.1, 2.0), "diging_sghmc": dgsgld.DIGingSGHMC(0.1, 2.0),
    }


def _mixed_stack():
    """Snapshots with different out-degrees: a ring (2), the complete graph (3), one pair
    averaging with agents 2 and 3 alone (agents 0, 1: 1; agents 2, 3: 0)."""
    pair = np.eye(N)
    pair[:2, :2] = 0.5
    return np.stack([ring(N), complete_graph(N), pair])


_OUT_DEGREES = np.array([[2, 2, 2, 2], [3, 3, 3, 3], [1, 1, 0, 0]])


def _run(alg, problem, stack, steps, key):
    """``steps`` steps of ``alg.step`` (traced: call inside ``jax.jit``), snapshot ``k % P``."""
    x0 = jax.random.normal(jax.random.key(1), (N, 2))
    init_key, run_key = jax.random.split(key)
    state = alg.init(x0, problem.potential, init_key)
    stack = jnp.asarray(stack, jnp.float32)

    def body(state, k):
        state = alg.step(jax.random.fold_in(run_key, k), state, problem.potential,
                         stack[k % stack.shape[0]])
        return state, None

    return jax.lax.scan(body, state, jnp.arange(steps))[0]


def _with(alg, channel):
    return eqx.tree_at(lambda a: a.channel, alg, channel, is_leaf=lambda x: x is None)


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


def test_message_bytes_of_each_encoding():
    """d = 5 float32 entries: dense 20 B; top-k(0.4), k = 2: 2 (4 + 4) = 16 B; random-k(0.4):
    2 · 4 = 8 B; quantize(4): 5 (1 + 3) + 32 = 52 bits -> 7 B; sign: 5 + 32 = 37 bits -> 5 B;
    float64 doubles the dense size."""
    sizes = {C.identity(): 20, C.top_k(0.4): 16, C.random_k(0.4): 8, C.quantize(4): 7,
             C.sign(): 5}
    for compressor, size in sizes.items():
        assert C.Channel(compressor).message_bytes(5) == size, compressor
    assert C.Channel().message_bytes(5, jnp.float64) == 40
    assert C.Channel(C.top_k(1e-6)).message_bytes(5) == 8   # at least one entry


@jax.jit
def _compressed(v, key):
    """Every compressor on ``v`` in one program: Monte Carlo draws of random-k and quantize
    over ``M`` keys, and one draw of each of the others."""
    keys = jax.random.split(key, 40_000)
    draws = {name: jax.vmap(c.compress, (0, None))(keys, v)
             for name, c in (("random_k", C.random_k(0.4)), ("quantize", C.quantize(2)))}
    one = {"top_k": C.top_k(0.4).compress(key, v), "sign": C.sign().compress(key, v),
           "contract": C.random_k(0.4).contract(key, v)}
    return draws, one


V = np.asarray([1.5, -0.2, 0.7, -2.0, 0.05], np.float32)


def test_random_k_and_quantize_are_unbiased():
    """Monte Carlo over M = 40000 keys. random-k(0.4) of d = 5: each entry kept w.p. k/d and
    scaled d/k, so Var C_i = v_i² (d/k − 1); quantize(s = 2): Var C_i = (‖v‖/s)² p_i (1 − p_i)
    with p_i = frac(s |v_i| / ‖v‖). Each mean is within 5 of its standard errors of v_i
    (10 coordinates: by a union bound a false failure has probability < 1e-5). Every draw of
    random-k has k nonzeros equal to (d/k) v_i; every quantized entry lies on the grid
    ‖v‖ ℓ / s, ℓ ∈ {0, ..., s}, with v_i's sign."""
    draws, _ = _compressed(V, jax.random.key(7))
    vn, m, d, k = V.astype(np.float64), 40_000, 5, 2
    full = np.broadcast_to(vn, (m, d))
    x = np.asarray(draws["random_k"], np.float64)
    kept = x != 0
    assert (kept.sum(1) == k).all()
    np.testing.assert_allclose(x[kept], (full * d / k)[kept], rtol=1e-6)
    se = np.abs(vn) * np.sqrt(d / k - 1) / np.sqrt(m)
    assert (np.abs(x.mean(0) - vn) <= 5 * se).all(), (x.mean(0), vn, se)

    s, norm = 2, np.linalg.norm(vn)
    x = np.asarray(draws["quantize"], np.float64)
    level = np.abs(x) * s / norm
    np.testing.assert_allclose(level, np.round(level), atol=1e-5)
    assert level.max() <= s + 1e-5
    assert (np.sign(x[x != 0]) == np.sign(full[x != 0])).all()
    p = s * np.abs(vn) / norm % 1.0
    se = norm / s * np.sqrt(p * (1 - p)) / np.sqrt(m)
    assert (np.abs(x.mean(0) - vn) <= 5 * se + 1e-6).all(), (x.mean(0), vn, se)


def test_top_k_and_sign_exact():
    """top-k keeps the k entries of largest magnitude; sign is (‖v‖₁/d) sign(v); the
    contractive random-k keeps k entries unscaled."""
    _, one = _compressed(V, jax.random.key(7))
    np.testing.assert_array_equal(one["top_k"], [1.5, 0, 0, -2.0, 0])
    np.testing.assert_allclose(one["sign"], np.mean(np.abs(V)) * np.sign(V), rtol=1e-6)
    kept = np.asarray(one["contract"])
    assert (kept != 0).sum() == 2 and set(kept[kept != 0]) <= set(V)


def _top_k_three_ways(c, v):
    """``C(v)`` of ``v`` ``(m, d)`` by ``compress``, by ``expand(payload)`` and by
    ``lax.top_k``'s indices."""
    d = v.shape[1]
    index = jax.lax.top_k(jnp.abs(v), c.k(d))[1]
    return (jax.vmap(lambda x: c.compress(None, x))(v),
            jax.vmap(lambda x: c.expand(None, c.payload(None, x), d))(v),
            jax.vmap(lambda x, i: jnp.zeros_like(x).at[i].set(x[i]))(v, index))


def _top_k_inputs(rng, d):
    """Continuous values, integer values (many ties) and a row of zeros in float32; continuous
    values in float16."""
    ties = np.round(2 * rng.normal(size=(8, d)))
    return (np.concatenate([rng.normal(size=(8, d)), ties, np.zeros((1, d))]),
            rng.normal(size=(4, d)).astype(np.float16))


def _check_top_k_ways(fraction, v, ways):
    """``compress`` and the expanded payload equal ``lax.top_k``'s selection bit for bit."""
    for g in ways[:2]:
        np.testing.assert_array_equal(np.asarray(g).view(np.uint8),
                                      np.asarray(ways[2]).view(np.uint8),
                                      (v.shape[1], fraction, v.dtype))


def _check_random_k_keeps_its_largest_uniform_keys():
    c, d = C.random_k(0.3), 97
    keys = jax.random.split(jax.random.key(3), 16)
    kept, largest = jax.jit(lambda keys: (                    # one program, not op by op
        jax.vmap(lambda k: c.contract(k, jnp.ones(d)))(keys),
        jax.lax.top_k(jax.vmap(lambda k: jax.random.uniform(k, (d,)))(keys), c.k(d))[1]))(keys)
    kept = np.asarray(kept) != 0
    want = np.zeros((16, d), bool)
    np.put_along_axis(want, np.asarray(largest), True, axis=1)
    np.testing.assert_array_equal(kept, want)


@pytest.mark.slow  # fast twin: test_top_k_selection_in_one_program (three of the cases)
def test_top_k_selection_is_lax_top_k_ties_included():
    """The count-based selection keeps the set ``lax.top_k`` keeps, a tie at the k-th place
    going to the lower indices: on continuous values, on integer values (many ties), on all
    zeros and in float16, for k = 1, about d/3 and d; the index payload expands to
    ``compress`` bit for bit, and random-k keeps the k largest of its uniform keys."""
    rng = np.random.default_rng(0)
    for d in (1, 5, 97):
        for v in _top_k_inputs(rng, d):
            for fraction in (1e-6, 0.3, 1.0):
                got = jax.jit(_top_k_three_ways, static_argnums=0)(C.top_k(fraction),
                                                                   jnp.asarray(v))
                _check_top_k_ways(fraction, v, got)
    _check_random_k_keeps_its_largest_uniform_keys()


def test_top_k_selection_in_one_program():
    """test_top_k_selection_is_lax_top_k_ties_included on three of its cases, compiled as
    one program: d = 97 with continuous values, ties and zeros in float32 at k = 30 (ties at
    the k-th place), d = 5 in float16 at k = 1 and the tied float32 values at k = d; and
    random-k keeps the k largest of its uniform keys."""
    rng = np.random.default_rng(0)
    wide, _ = _top_k_inputs(rng, 97)
    tied, half = _top_k_inputs(rng, 5)
    cases = ((0.3, wide), (1e-6, half), (1.0, tied))
    got = jax.jit(lambda vs: [_top_k_three_ways(C.top_k(f), v)
                              for (f, _), v in zip(cases, vs)])([jnp.asarray(v)
                                                                for _, v in cases])
    for (fraction, v), ways in zip(cases, got):
        _check_top_k_ways(fraction, v, ways)
    _check_random_k_keeps_its_largest_uniform_keys()


#: The bit-packed compressors of test_packed_payloads_rebuild_compress_at_the_accounted_size.
_PACKED = {**{f"quantize({s})": C.quantize(s) for s in (1, 2, 4, 16)}, "sign": C.sign()}


@jax.jit
def _sent(keys, vs):
    """The sender's program: per message ``v`` of ``vs`` (``(d,)`` each) and compressor, the
    payloads for ``M`` keys (leaves ``(M, ...)``) and ``C(v)`` ``(M, d)``."""
    return [{name: (jax.vmap(c.payload, (0, None))(keys, v),
                    jax.vmap(c.compress, (0, None))(keys, v)) for name, c in _PACKED.items()}
            for v in vs]


@jax.jit
def _received(keys, payloads, vs):
    """The receiver's program: ``C(v)`` ``(M, d)`` rebuilt from :func:`_sent`'s payloads."""
    return [{name: jax.vmap(lambda k, p, c=c, d=v.shape[0]: c.expand(k, p, d))(keys, pay[name])
             for name, c in _PACKED.items()} for pay, v in zip(payloads, vs)]


# Fast twins: test_message_bytes_of_each_encoding, and the payload check of
# test_channels_under_agent_placement_make_the_single_device_draws.
@pytest.mark.slow
def test_packed_payloads_rebuild_compress_at_the_accounted_size():
    """Quantize and sign send packed bits: the payload rebuilt in another program is
    ``C(v)`` bit for bit, its bytes are ``Channel.message_bytes(d)``, and the law holds.

    Quantize over M = 4000 keys: every entry is ‖v‖ σ_i ξ_i / s with ξ_i ∈ {⌊r_i⌋, ⌊r_i⌋ + 1},
    r_i = s |v_i| / ‖v‖ (σ_i: v_i's sign), and its mean is v_i. Hoeffding: C_i ranges over an
    interval of width ‖v‖ / s, so P(|mean − v_i| > t) ≤ 2 exp(−2 M t² s² / ‖v‖²); over the
    4 · 129 entries tested a false failure has probability < 1e-6 for
    t = (‖v‖ / s) √(ln(2 · 516 / 1e-6) / (2M)) = 0.051 ‖v‖ / s. Rounding a float32 norm to a
    level adds at most 1e-6 ‖v‖. Sign: exactly (‖v‖₁ / d) (−1 for v_i < 0, else +1), so an
    exact zero (±0.0) is sent as +."""
    m = 4000
    keys = jax.random.split(jax.random.key(11), m)
    vs = [np.array(jax.random.normal(jax.random.key(d), (d,)), np.float32)
          for d in (1, 7, 8, 13, 100)]
    for v in vs[1:]:
        v[1:3] = [0.0, -0.0]
    sent = _sent(keys, vs)
    rebuilt = _received(keys, [{n: p for n, (p, _) in one.items()} for one in sent], vs)
    for v, out, back in zip(vs, sent, rebuilt):
        d = v.shape[0]
        for name, c in _PACKED.items():
            payload, q = out[name]
            np.testing.assert_array_equal(np.asarray(back[name]).view(np.uint32),
                                          np.asarray(q).view(np.uint32), err_msg=name)
            size = sum(leaf.nbytes for leaf in jax.tree.leaves(payload)) // m
            assert size == C.Channel(c).message_bytes(d), (name, d, size)
        vn, norm = v.astype(np.float64), float(np.linalg.norm(v.astype(np.float64)))
        sign = np.where(v < 0, -1.0, 1.0)
        np.testing.assert_allclose(out["sign"][1], np.broadcast_to(
            np.mean(np.abs(vn)) * sign, (m, d)), rtol=1e-6)
        for s in (1, 2, 4, 16):
            x = np.asarray(out[f"quantize({s})"][1], np.float64)
            level = x * sign / norm * s
            r = s * np.abs(vn) / norm
            assert np.all((np.abs(level - np.floor(r)) < 1e-5)
                          | (np.abs(level - np.floor(r) - 1) < 1e-5)), (d, s)
            t = norm / s * np.sqrt(np.log(2 * 516 / 1e-6) / (2 * m))
            assert np.all(np.abs(x.mean(0) - vn) <= t + 1e-6 * norm), (d, s)


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

    docs = pathlib.Path(__file__).resolve().parents[1] / "docs"
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


# -- when messages are sent: probabilistic rounds and links, event triggers -------------------


def _round_keys(key, steps):
    """The round keys :func:`C.send` draws from at the steps of :func:`_run`."""
    run_key = jax.random.split(key)[1]
    return [jax.random.fold_in(jax.random.fold_in(run_key, k), C._ROUND_TAG)
            for k in range(steps)]


def _same(a, b, err_msg=""):
    for u, v in zip(jax.tree.leaves(a._replace(channel=())),
                    jax.tree.leaves(b._replace(channel=()))):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v), err_msg=err_msg)


@pytest.mark.slow  # fast twins: test_links_and_stragglers_step_by_step, test_neutral_settings_...
def test_probabilistic_rounds_and_links(key):
    """DIGing-SGLD, 4 agents, 6 steps, one compiled program. (1) probability=1 (per link) is
    no channel bit for bit. (2) per_link=True, p = 0.5 on the complete graph equals no
    channel on the stack of the used matrices W'ₖ = drop_links(W, link_mask(round key of step
    k)) (recomputed here from the run's keys), each symmetric, nonnegative and doubly
    stochastic, with some of the 36 link draws up and some down; x and y go over the same
    links, and each agent's count is Σₖ out-degree(W'ₖ). (3) per round, p = 0.5: no channel
    on the stack (W or I at step k as the round's draw says), 3 messages per agent and
    message at each round only."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    alg, W, T = dgsgld.DIGingSGLD(0.05), complete_graph(N), 6
    keys = _round_keys(key, T)
    assert C.Channel(probability=1.0) == C.Channel()

    @jax.jit
    def runs(key):
        one = (_run(alg, problem, W[None], T, key),
               _run(_with(alg, C.Channel(probability=1.0, per_link=True)), problem, W[None],
                    T, key))
        used = jnp.stack([C.drop_links(jnp.asarray(W, jnp.float32), C.link_mask(k, N, 0.5))
                          for k in keys])
        talk = jnp.stack([jax.random.uniform(k) < 0.5 for k in keys])
        rounds = jnp.where(talk[:, None, None], jnp.asarray(W, jnp.float32), jnp.eye(N))
        refs = jax.vmap(lambda stack: _run(alg, problem, stack, T, key))(jnp.stack([used,
                                                                                   rounds]))
        link = _run(_with(alg, C.Channel(probability=0.5, per_link=True)), problem, W[None],
                    T, key)
        rnd = _run(_with(alg, C.Channel(probability=0.5)), problem, W[None], T, key)
        return one, used, talk, refs, link, rnd

    (base, one), used, talk, refs, link, rnd = runs(key)
    link_ref, rnd_ref = jax.tree.map(lambda a: a[0], refs), jax.tree.map(lambda a: a[1], refs)
    _same(base, one)
    for state in one.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), np.full(N, 3 * T))
    used = np.asarray(used, np.float64)
    np.testing.assert_allclose(used, used.transpose(0, 2, 1), atol=0)
    np.testing.assert_allclose(used.sum(2), 1.0, atol=1e-6)
    assert (used >= 0).all()
    up = (used != 0)[:, ~np.eye(N, dtype=bool)]
    assert 0 < up.sum() < up.size, up.sum()
    _close(link, link_ref)
    degrees = (used != 0).sum(1) - 1                      # out-degree of each W'ₖ, (T, N)
    for state in link.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), degrees.sum(0))
    talk = np.asarray(talk)
    assert 0 < talk.sum() < T, talk
    _close(rnd, rnd_ref)
    for state in rnd.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), np.full(N, 3 * talk.sum()))


def _close(a, b):
    """Equal up to float32 rounding (the reference is batched, which may sum differently)."""
    for u, v in zip(jax.tree.leaves(a._replace(channel=())),
                    jax.tree.leaves(b._replace(channel=()))):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-5, atol=1e-6)


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
    # tests/test_communication_agents.py::test_channels_under_agent_placement_make_the_...
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


@pytest.mark.slow  # fast twin: test_links_and_stragglers_step_by_step (W'ₖ exactly)
def test_link_drops_keep_diging_stationary_mean(key):
    """Per-link drops (p = 0.5, ring) and DIGing-SGLD with full batches on the Gaussian
    problem: the recursion is linear given the link masks, and W'ₖ is drawn independently of
    the state, so the means follow m_x⁺ = W̄ m_x − η m_y, m_y⁺ = W̄ m_y + H m_x⁺ − H m_x (b
    cancels) with W̄ = E[W'] symmetric doubly stochastic. At the fixed point m_y = W̄ m_y is a
    consensus 1 ⊗ c, summing the first equation over agents gives c = 0, so m_x = W̄ m_x is a
    consensus 1 ⊗ μ with Σ_i ∇f_i(μ) = Σ_i m_y,i = 0 (the tracking invariant in mean): μ is
    the posterior mean at any step size, for every agent and the network average.

    2000 chains from x⁽⁰⁾ = 0, 400 steps: the network average's mean mode contracts by
    1 − η λ_min(A)/N = 0.969 a step, so the start's bias is 0.969⁴⁰⁰ |μ| < 1e-5. Its
    standard error is estimated from the chains (≈ 0.5 / √2000 = 0.011, against |μ| = (0.73,
    0.16)); each coordinate is within 5 standard errors (2 coordinates: a false failure has
    probability < 2e-6). Weights dropped without moving them to the diagonal would pull the
    average towards 0 (W' substochastic) and fail."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    chains, steps = 2000, 400
    channel = C.Channel(probability=0.5, per_link=True)
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.05), problem.potential, ring(N),
                          jnp.zeros((chains, N, 2)), key, steps, channel=channel,
                          output=dgsgld.Output(thin=steps))
    average = np.asarray(trace.state.position, np.float64).mean(1)        # (chains, d)
    se = average.std(0, ddof=1) / np.sqrt(chains)
    assert (np.abs(average.mean(0) - problem.mean) <= 5 * se).all(), (average.mean(0),
                                                                      problem.mean, se)
    sent = np.asarray(C.messages_sent(trace.state), np.float64)          # (chains, N)
    # 2 messages a step over each of an agent's 2 ring links, each up w.p. 1/2: mean 2 a step.
    # The network sends 4 · Bin(4, 1/2) a step (variance 16), so the mean per agent and step
    # over 2000 · 400 such draws has standard error √(16 / 800000) / 4 = 0.0011; 5 of them.
    np.testing.assert_allclose(sent.mean() / steps, 2.0, atol=0.0056)


@pytest.mark.slow  # fast twin: test_links_and_stragglers_step_by_step
def test_round_draws_do_not_depend_on_chain_batching(key):
    """Chain 2 of a 3-chain run equals the 1-chain run at chain_offset=2, bit for bit and
    bytes included, with rounds and links drawn at random, an event trigger and stragglers."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    stack, init = permuted_rings(N, 3), jnp.zeros((3, N, 2))
    for channel in (C.Channel(probability=0.5, per_link=True), C.Channel(probability=0.3),
                    C.Channel(C.random_k(0.5), error_feedback=True, threshold=0.05),
                    C.Channel(C.top_k(0.5), error_feedback=True, activity=0.5)):
        alg = dgsgld.DIGingSGLD(0.05)
        all3 = dgsgld.sample(alg, problem.potential, stack, init, key, 6, channel=channel)
        one = dgsgld.sample(alg, problem.potential, stack, init[2:], key, 6, channel=channel,
                            chain_offset=2)
        np.testing.assert_array_equal(np.asarray(all3.positions[2:]), np.asarray(one.positions))
        np.testing.assert_array_equal(channel.bytes_sent(all3.state)[2:],
                                      channel.bytes_sent(one.state))


# -- stragglers -------------------------------------------------------------------------------

_PATTERN = np.array([[1, 1, 1, 1], [1, 0, 1, 1], [0, 1, 1, 0]], bool)


def _states(alg, problem, stack, steps, key):
    """Like :func:`_run`, returning ``(initial state, states after each step, step keys)``."""
    x0 = jax.random.normal(jax.random.key(1), (N, 2))
    init_key, run_key = jax.random.split(key)
    state = alg.init(x0, problem.potential, init_key)
    stack = jnp.asarray(stack, jnp.float32)
    keys = jax.vmap(lambda k: jax.random.fold_in(run_key, k))(jnp.arange(steps))

    def body(state, k):
        state = alg.step(keys[k], state, problem.potential, stack[k % stack.shape[0]])
        return state, state

    return state, jax.lax.scan(body, state, jnp.arange(steps))[1], keys


def test_links_and_stragglers_step_by_step(key):
    """DIGing-SGLD with mini-batches on the complete graph, links up w.p. 1/2 and the
    activity pattern (all, all but 1, only 1 and 2), 6 steps, one compiled program. The used
    matrices W'ₖ, recomputed from the run's keys (links dropped by link_mask(round key of
    step k) onto the diagonals, then the inactive agents' links, their rows e_i), are
    symmetric, nonnegative and doubly stochastic, with some of the 36 link draws up and some
    down. At every step: an inactive agent's x, y and gradient are kept exactly; every active
    agent's row equals (to float32 rounding: the reference is batched over steps) a step of
    DIGing-SGLD without channel from the same state and key over W'ₖ, so x and y go over the
    same links; an agent counts, per message at the steps it is active, its up links (to
    active and inactive neighbours); Σ y = Σ ∇̃f holds to rounding."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    alg, W, T = dgsgld.DIGingSGLD(0.05), jnp.asarray(complete_graph(N), jnp.float32), 6
    active = _PATTERN[np.arange(T) % 3]                                 # (T, N)
    channel = C.Channel(probability=0.5, per_link=True, activity=_PATTERN)
    rounds = _round_keys(key, T)

    @jax.jit
    def runs(key):
        first, states, keys = _states(_with(alg, channel), problem, W[None], T, key)
        before = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b[:-1]]), first, states)
        up = jnp.stack([C.drop_links(W, C.link_mask(r, N, 0.5)) for r in rounds])
        used = jax.vmap(C._without_inactive)(up, jnp.asarray(active))
        plain = jax.vmap(lambda k, s, w: alg.step(k, s._replace(channel=()), problem.potential,
                                                  w))(keys, before, used)
        return before, states, plain, up, used

    before, states, plain, up, used = runs(key)
    used = np.asarray(used, np.float64)
    np.testing.assert_allclose(used, used.transpose(0, 2, 1), atol=0)
    np.testing.assert_allclose(used.sum(2), 1.0, atol=1e-6)
    assert (used >= 0).all()
    links = (used != 0)[:, ~np.eye(N, dtype=bool)]
    assert 0 < links.sum() < links.size, links.sum()
    for name in ("position", "tracker", "grad"):
        old, new, ref = (np.asarray(getattr(s, name)) for s in (before, states, plain))
        np.testing.assert_array_equal(new[~active], old[~active], err_msg=name)
        np.testing.assert_allclose(new[active], ref[active], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    # An active agent sends to every neighbour its link is up to, inactive ones included
    # (they receive); an inactive one sends nothing.
    degrees = active * ((np.asarray(up) != 0).sum(2) - 1)
    for state in states.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), np.cumsum(degrees, 0))
    gap = np.abs(np.asarray(states.tracker).sum(1) - np.asarray(states.grad).sum(1)).max()
    assert gap < 1e-5 * np.abs(np.asarray(states.grad)).sum(), gap


@pytest.mark.slow  # fast twin: test_links_and_stragglers_step_by_step
def test_random_stragglers_every_sampler(key):
    """activity = 0.6 through ``sample`` for the six samplers: each agent's messages are 2
    ring links × the messages of its sampler at the steps it is active, with the activity
    drawn from the step keys (recomputed here: fold_in(chain key, k), :func:`C.active_agents`);
    the states stay finite."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    channel, T = C.Channel(activity=0.6), 8
    run_key = jax.random.split(dgsgld.runner.loop.chain_keys(dgsgld.runner.loop._random.fast_key(key), 1, 0)[0])[1]
    active = np.stack([np.asarray(C.active_agents(channel, jax.random.fold_in(run_key, k), k, N))
                       for k in range(T)])
    assert 0 < active.sum() < active.size
    for name, alg in _samplers().items():
        trace = dgsgld.sample(alg, problem.potential, ring(N), jnp.zeros((1, N, 2)), key, T,
                              channel=channel)
        per = 2 if name in ("diging", "diging_sghmc", "extra") else 1
        np.testing.assert_array_equal(np.asarray(C.messages_sent(trace.state))[0],
                                      per * 2 * active.sum(0), err_msg=name)
        assert np.isfinite(np.asarray(trace.positions)).all(), name


# -- randomized gossip --------------------------------------------------------------------------


def test_gossip_matrices_pick_uniform_links_and_stay_stochastic():
    """gossip_matrix over 4000 keys on the ring of 5 (5 links, every agent 2 neighbours):
    ``"edge"`` gives one pair of neighbours averaging (symmetric, doubly stochastic), each of
    the 5 links with probability 1/5; ``"matching"`` gives disjoint pairs of neighbours, each
    link matched when both ends propose it, probability (1/2)² = 1/4. On the directed ring
    (agent j sends to j + 1 and j + 2) ``"matching"`` has every agent push half its value to
    one of its 2 out-neighbours (column stochastic), each with probability 1/2, and ``"edge"``
    moves one of the 10 one-way links. Frequencies are binomial: with standard error
    √(p(1 − p)/4000) ≤ 0.0079 each, all within 5 of them (at most 15 counts per mode: a false
    failure has probability < 1e-5)."""
    n, draws = 5, 4000
    W = jnp.asarray(ring(n), jnp.float32)
    keys = jax.random.split(jax.random.key(7), draws)
    eye = np.eye(n, dtype=bool)
    neighbours = np.asarray(W != 0) & ~eye
    out = np.zeros((n, n), np.float32)                 # directed: j -> j + 1, j + 2
    for hop in (1, 2):
        out[(np.arange(n) + hop) % n, np.arange(n)] = 1 / 3
    out[np.diag_indices(n)] = 1 / 3
    directed_links = (out != 0) & ~eye
    modes = (("edge", 1 / 5), ("matching", 1 / 4))
    drawn = jax.jit(lambda keys: [                                  # one program, not op by op
        (jax.vmap(lambda k: C.gossip_matrix(k, W, mode))(keys),                 # noqa: B023
         jax.vmap(lambda k: C.gossip_matrix(k, out, mode, directed=True))(keys))  # noqa: B023
        for mode, _ in modes])(keys)
    for (mode, probability), (m, d) in zip(modes, drawn):
        m, d = np.asarray(m), np.asarray(d)
        np.testing.assert_array_equal(m, m.transpose(0, 2, 1))
        np.testing.assert_allclose(m.sum(1), 1.0, atol=0)
        picked = (m != 0) & ~eye
        assert not (picked & ~neighbours).any()
        assert (picked.sum(1) <= 1).all()                              # one partner at most
        if mode == "edge":
            assert (picked.sum((1, 2)) == 2).all()
        assert set(np.unique(m)) <= {0.0, 0.5, 1.0}
        freq = picked[:, neighbours].mean(0)
        assert np.all(np.abs(freq - probability) <= 5 * np.sqrt(probability * (1 - probability)
                                                                 / draws)), (mode, freq)
        np.testing.assert_allclose(d.sum(1), 1.0, atol=0)
        pushed = (d != 0) & ~eye
        assert not (pushed & ~directed_links).any()
        p_dir = 1 / 10 if mode == "edge" else 1 / 2
        if mode == "matching":
            assert (pushed.sum(1) == 1).all()                          # one push per agent
        else:
            assert (pushed.sum((1, 2)) == 1).all()
        freq = pushed[:, directed_links].mean(0)
        assert np.all(np.abs(freq - p_dir) <= 5 * np.sqrt(p_dir * (1 - p_dir) / draws)), freq


@pytest.mark.slow  # fast twin: test_gossip_matrices_pick_uniform_links_and_stay_stochastic (the
# matrices a round mixes with)
def test_gossip_rounds_step_by_step(key):
    """DIGing-SGLD with ``Channel(gossip="matching")`` on the complete graph of 4, 6 steps, one
    compiled program, equals (to float32 rounding: the programs differ) DIGing-SGLD without
    channel on the stack of the round matrices W'ₖ recomputed from the run's round keys; each
    agent counts one message per matched step and message; Σ y = Σ ∇̃f to rounding."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    alg, W, T = dgsgld.DIGingSGLD(0.05), jnp.asarray(complete_graph(N), jnp.float32), 6
    rounds = _round_keys(key, T)
    used = jnp.stack([C.gossip_matrix(jax.random.fold_in(r, C._GOSSIP_TAG), W, "matching")
                      for r in rounds])

    @jax.jit
    def runs(key):
        return (_run(_with(alg, C.Channel(gossip="matching")), problem, W[None], T, key),
                _run(alg, problem, used, T, key))

    gossip, plain = runs(key)
    for a, b in zip(jax.tree.leaves(gossip._replace(channel=())), jax.tree.leaves(plain)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    matched = ((np.asarray(used) != 0) & ~np.eye(N, dtype=bool)).sum(1)        # (T, N)
    assert 0 < matched.sum() < T * N
    for state in gossip.channel.values():
        np.testing.assert_array_equal(np.asarray(state.sent), matched.sum(0))
    gap = np.abs(np.asarray(gossip.tracker).sum(0) - np.asarray(gossip.grad).sum(0)).max()
    assert gap < 1e-5 * np.abs(np.asarray(gossip.grad)).sum(), gap


@pytest.mark.slow  # fast twin: test_gossip_matrices_pick_uniform_links_and_stay_stochastic
def test_gossip_keeps_diging_stationary_mean(key):
    """Randomized gossip (a random matching of the ring at each step) and DIGing-SGLD with full
    batches on the Gaussian problem: W'ₖ is drawn independently of the state and E[W'] is
    symmetric doubly stochastic, so the argument of
    test_link_drops_keep_diging_stationary_mean applies: every agent's mean is the posterior
    mean. 2000 chains, 600 steps from 0 (a quarter of the links carry a round, so mixing is
    slower than with drops: the average's mean mode still contracts by 0.969 a step); each
    agent's coordinates within 5 standard errors estimated from the chains (8 z-scores: a
    false failure has probability < 5e-6)."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2)
    chains, steps = 2000, 600
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.05), problem.potential, ring(N),
                          jnp.zeros((chains, N, 2)), key, steps,
                          channel=C.Channel(gossip="matching"), output=dgsgld.Output(thin=steps))
    x = np.asarray(trace.state.position, np.float64)
    se = x.std(0, ddof=1) / np.sqrt(chains)
    assert (np.abs(x.mean(0) - problem.mean) <= 5 * se).all(), (x.mean(0), problem.mean, se)


# -- the simulated clock ------------------------------------------------------------------------


@pytest.mark.parametrize("cells", [
    "one_program",
    # fast twin: the "one_program" cell; a trace_fn of the channel state through sample:
    # test_sample_channel_option_counts_bytes
    pytest.param("all", marks=pytest.mark.slow),
])
def test_clock_waits_for_the_slowest_agent_or_drops_it_at_the_deadline(cells, key):
    """DE-SGLD on the ring, 6 steps, one compiled program, compute times (1, 1, 1, 3) s with no
    jitter and 0.5 s latency a round. Waiting for everyone: 3.5 s a step; with rounds every 2
    steps only 3 of the 6 steps pay the latency (6 · 3 + 3 · 0.5 = 19.5 s). With a 2 s
    deadline agent 3 is never done in time: it takes no step and sends nothing (its position
    stays its start, exactly), each step lasts 2 + 0.5 s, and it counts no message.
    (``"all"``) ``elapsed_time`` traced per iteration through ``sample`` is 0, 3.5, 7, ..."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    alg, T = dgsgld.DESGLD(0.05), 6
    slow = C.Clock(compute=(1, 1, 1, 3), latency=0.5)
    channels = (C.Channel(clock=slow), C.Channel(every=2, clock=slow),
                C.Channel(clock=C.Clock(compute=(1, 1, 1, 3), latency=0.5, deadline=2.0)))

    @jax.jit
    def runs(key):
        return [_states(_with(alg, ch), problem, ring(N)[None], T, key) for ch in channels]

    (first, wait, _), (_, local, _), (_, cut, _) = runs(key)
    np.testing.assert_allclose(C.elapsed_time(wait), 3.5 * np.arange(1, T + 1), rtol=1e-6)
    assert float(C.elapsed_time(local)[-1]) == pytest.approx(19.5)
    np.testing.assert_allclose(C.elapsed_time(cut), 2.5 * np.arange(1, T + 1), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(cut.position)[:, 3],
                                  np.broadcast_to(np.asarray(first.position)[3], (T, 2)))
    assert (np.asarray(cut.position)[-1, :3] != np.asarray(first.position)[:3]).all()
    np.testing.assert_array_equal(np.asarray(cut.channel["position"].sent)[-1],
                                  [2 * T, 2 * T, 2 * T, 0])    # both ring links, as for
    # `activity`: an inactive agent still receives (public copies stay known), sends nothing
    if cells == "one_program":
        return
    trace = dgsgld.sample(alg, problem.potential, ring(N), jnp.zeros((2, N, 2)), key, 4,
                          channel=channels[0], output=dgsgld.Output(trace_fn=C.elapsed_time))
    np.testing.assert_allclose(np.asarray(trace.values), [[0, 3.5, 7, 10.5, 14]] * 2,
                               rtol=1e-6)


@pytest.mark.slow  # fast twin: test_clock_waits_for_the_slowest_agent_or_drops_it_at_the_deadline
def test_clock_compute_times_have_the_stated_law():
    """``t_i = c_i (1 − j + j E_i)``, ``E_i ~ Exp(1)``: over 20 000 steps the mean of each
    agent's time is ``c_i`` and its variance ``(j c_i)²`` within 5 standard errors (the
    sample mean's s.e. is ``j c_i / √n``; the sample variance's, for an exponential part,
    ``√8 (j c_i)² / √n`` from its fourth central moment 9σ⁴). A deadline makes exactly the
    agents with ``t_i > deadline`` inactive in :func:`C.active_agents`."""
    clock = C.Clock(compute=(1.0, 2.0, 4.0), jitter=0.5, deadline=3.0)
    keys = jax.random.split(jax.random.key(0), 20_000)
    channel = C.Channel(clock=clock)
    t, active = jax.jit(lambda keys: (                              # one program, not op by op
        jax.vmap(lambda k: clock.times(k, 3))(keys),
        jax.vmap(lambda k: C.active_agents(channel, k, 0, 3))(keys[:200])))(keys)
    t, active = np.asarray(t, np.float64), np.asarray(active)
    c, j, n = np.array([1.0, 2.0, 4.0]), 0.5, len(keys)
    assert (np.abs(t.mean(0) - c) <= 5 * j * c / np.sqrt(n)).all(), t.mean(0)
    assert (np.abs(t.var(0) - (j * c) ** 2) <= 5 * np.sqrt(8) * (j * c) ** 2 / np.sqrt(n)).all()
    assert (t >= (1 - j) * c).all()
    np.testing.assert_array_equal(active, t[:200] <= 3.0)
    with pytest.raises(ValueError, match="`jitter` must be a number in"):
        C.Clock(jitter=1.5)
    with pytest.raises(ValueError, match="`compute` must be a finite number of seconds > 0"):
        C.Clock(compute=(1.0, 0.0))
    with pytest.raises(ValueError, match="`deadline` must be a finite number of seconds > 0"):
        C.Clock(deadline=0)
    with pytest.raises(TypeError, match="`clock` must be None or a dgsgld.communication.Clock"):
        C.Channel(clock=2.0)
    with pytest.raises(ValueError, match="`compute` has 3 agents; the network has 4"):
        clock.times(keys[0], 4)
    with pytest.raises(ValueError, match="`state` has no simulated clock"):
        C.elapsed_time(dgsgld.DESGLD(0.1, channel=C.Channel()).init(
            jnp.zeros((N, 2)), linear_regression(num_agents=N).potential, keys[0]))


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


@pytest.mark.slow  # fast twin: test_gossip_matrices_pick_uniform_links_and_stay_stochastic
def test_gossip_outcomes_are_the_law_of_gossip_matrix():
    """:func:`C.gossip_outcomes` (what ``exact_moments`` enumerates) against
    :func:`C.gossip_matrix`, 4000 draws each, on the ring of 5 (``"edge"``, ``"matching"``)
    and the complete graph of 4 (``"matching"``): every draw is one of the outcomes, and each
    outcome's frequency is within 5 binomial standard errors ``√(π(1 − π)/4000)`` of its
    probability π (26 outcomes: a false failure has probability < 2e-5). Exact values: on the
    ring of 5 a link is matched iff both ends propose it, ``(1/2)² = 1/4``; on the complete
    graph of 4, ``(1/3)² = 1/9``; ``"edge"`` picks each link w.p. 1/5. A matching on the
    complete graph of 7 (``6⁷`` proposal profiles) is refused, naming ``mode``."""
    draws = 4000
    keys = jax.random.split(jax.random.key(5), draws)
    cases = ((ring(5), "edge", 1 / 5), (ring(5), "matching", 1 / 4),
             (complete_graph(4), "matching", 1 / 9))
    every_drawn = jax.jit(lambda keys: [                            # one program, not op by op
        jax.vmap(lambda k, W=W, mode=mode: C.gossip_matrix(k, jnp.asarray(W, jnp.float32),
                                                            mode))(keys)
        for W, mode, _ in cases])(keys)
    for (W, mode, link), drawn in zip(cases, every_drawn):
        matrices, probs = C.gossip_outcomes(np.asarray(W), mode)
        n = matrices.shape[-1]
        neighbours = (np.asarray(W) != 0) & ~np.eye(n, dtype=bool)
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(np.einsum("k,kij->ij", probs, matrices != 0)[neighbours],
                                   link, rtol=1e-12)
        drawn = np.asarray(drawn)
        which = (drawn[:, None] == matrices[None].astype(np.float32)).all((2, 3))   # (draws, K)
        assert (which.sum(1) == 1).all(), mode
        freq = which.mean(0)
        assert (np.abs(freq - probs) <= 5 * np.sqrt(probs * (1 - probs) / draws)).all(), (
            mode, freq, probs)
    with pytest.raises(ValueError, match="`mode`: a random matching is enumerated over its "
                                         "279936 proposal profiles"):
        C.gossip_outcomes(complete_graph(7), "matching")


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
