"""``dgsgld._layout.keep_chain_axis``: an identity in value, gradient and batching semantics,
whose only effect is where the sampling loop's chain axis sits (and so XLA's memory layouts)."""

import contextlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld import _layout
from dgsgld._layout import chain_layout, keep_chain_axis
from _problems import paper_size_loop_hlo

LAST = lambda shape: -1  # noqa: E731
FIRST = lambda shape: 0  # noqa: E731


def _x(*shape):
    return jnp.asarray(np.random.default_rng(0).normal(size=shape), jnp.float32)


def _primitive_names(jaxpr):
    return [eqn.primitive.name for eqn in jaxpr.jaxpr.eqns]


def test_chain_axis_rule():
    # Chains last when the per-chain leaf is nonscalar and shorter than the number of chains.
    assert _layout.chain_axis((20, 6), 200) == -1
    assert _layout.chain_axis((6,), 200) == -1
    assert _layout.chain_axis((20, 1000), 200) == 0
    assert _layout.chain_axis((20, 200), 200) == 0
    assert _layout.chain_axis((), 200) == 0


@pytest.mark.parametrize("in_axis", [0, 1, 2])
@pytest.mark.parametrize("active", [False, True])
def test_identity_under_vmap_jit_and_grad(in_axis, active):
    x, y = _x(4, 5, 7), _x(4, 5, 7)
    f = lambda a, b: jnp.sin(keep_chain_axis(a)) * b  # noqa: E731
    expect = jax.vmap(lambda a, b: jnp.sin(a) * b, (in_axis, in_axis), in_axis)(x, y)
    with chain_layout(x.shape[in_axis], LAST) if active else contextlib.nullcontext():
        got = jax.jit(jax.vmap(f, (in_axis, in_axis), in_axis))(x, y)
        grad = jax.grad(lambda a: jnp.sum(jax.vmap(f, (in_axis, in_axis))(a, y)))(x)
        tangent = jax.jvp(lambda a: jax.vmap(f, (in_axis, in_axis), in_axis)(a, y), (x,), (y,))[1]
    np.testing.assert_array_equal(np.asarray(got), np.asarray(expect))
    np.testing.assert_allclose(np.asarray(grad), np.asarray(jnp.cos(x) * y), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tangent), np.asarray(jnp.cos(x) * y * y), rtol=1e-6)
    # Unbatched and eager: the identity.
    np.testing.assert_array_equal(np.asarray(keep_chain_axis(x)), np.asarray(x))


def _transpose_before_keep(jaxpr) -> bool:
    names = _primitive_names(jaxpr)
    keep = names.index("dgsgld_keep_chain_axis")
    return "transpose" in names[:keep]


def test_batching_moves_only_the_chain_axis_and_only_inside_the_context():
    x = _x(20, 9, 6)  # mapped axis 1 (9 "chains"), per-chain shape (20, 6)

    def jaxpr():
        # A new function each time: JAX caches traces by function.
        return jax.make_jaxpr(
            jax.vmap(lambda a: keep_chain_axis(a) * 2.0, in_axes=1, out_axes=-1)
        )(x)

    # Outside a sampling loop: nothing moves before the identity.
    assert not _transpose_before_keep(jaxpr())
    with chain_layout(9, LAST):
        # The chain axis goes last before the identity, and no transpose is left after it.
        inside = jaxpr()
        assert _transpose_before_keep(inside)
        names = _primitive_names(inside)
        assert "transpose" not in names[names.index("dgsgld_keep_chain_axis"):]
    with chain_layout(9, FIRST):
        assert _transpose_before_keep(jaxpr())
    with chain_layout(8, LAST):  # an axis of another size (e.g. a user's vmap) is left alone
        assert not _transpose_before_keep(jaxpr())


def test_sample_is_unchanged_by_the_layout_hint(monkeypatch):
    # The same run with keep_chain_axis made a plain identity (no batching rule effect):
    # every draw and every number of the trace must agree to the last bit.
    ll = lambda th, d: -0.5 * (d[0] @ th - d[1]) ** 2  # noqa: E731
    Z, y = _x(4, 5, 3), _x(4, 5)
    pot = dgsgld.Potential(ll, lambda th: -0.5 * th @ th, (Z, y))
    W = jnp.full((4, 4), 0.25)
    init = _x(16, 4, 3)
    run = lambda: dgsgld.sample(  # noqa: E731
        dgsgld.diging_sgld(0.01), pot, W, init, jax.random.key(3), 20
    ).positions
    with_hint = np.asarray(run())
    monkeypatch.setattr(_layout, "chain_layout", lambda *a: contextlib.nullcontext())
    jax.clear_caches()
    without = np.asarray(run())
    jax.clear_caches()
    np.testing.assert_array_equal(with_hint, without)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU layout decision")
def test_paper_size_loop_state_keeps_row_major_layouts():
    # The purpose of the hint: at paper size (200 chains, 20 agents, d = 6) every array the
    # DIGing-SGLD loop carries stays in plain row-major layout. Without it XLA stored the
    # tracker chains-major ({1,0,2}) and the kept gradient as {1,2,0}, and transposed them
    # in every iteration (see benchmarks/results.md).
    hlo = paper_size_loop_hlo()
    # The loop bodies' parameter tuples: what the while loops carry from step to step.
    tuples = [line for line in hlo.splitlines()
              if re.search(r"^\s*%\S+ = \(.*\) parameter\(0\)", line)]
    carried = [layout for line in tuples
               for layout in re.findall(r"f32\[20,6,200\]\{([0-9,]+)\}", line)]
    assert len(carried) >= 3, "position, tracker and gradient should be carried chains-last"
    assert set(carried) == {"2,1,0"}, sorted(set(carried))
