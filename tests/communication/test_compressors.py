"""Compressors: the bytes of each encoding, the unbiased compressors' laws, top-k and sign
exactly, top-k's and random-k's selection (ties included), and the packed payloads that rebuild
each compressed message at the accounted size."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dgsgld import communication as C


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


@pytest.mark.slow  # fast twin: test_top_k_selection_is_lax_top_k_ties_included
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
