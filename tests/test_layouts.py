"""The runner's chains-last layout: compiles for small odd shapes, and changes no numbers.

``dgsgld.sample`` keeps the chain axis last inside its loop for leaves shorter than the number
of chains (see ``run._chain_axis_rule``). XLA:CPU once aborted the whole process while compiling a
3-chain, d = 2 run in that layout (a transposed product layout its small-dot emitter rejects),
so a grid of small shapes is compiled here in a subprocess, where an abort fails one test
instead of killing the session.
"""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import run as run_module

SCRIPT = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np, dgsgld
    for C, N, d, b, alg, tree in CASES:
        Z = jnp.asarray(np.random.default_rng(0).normal(size=(N, 4, d)), jnp.float32)
        Y = jnp.ones((N, 4))
        if tree:
            ll = lambda th, dt: -0.5 * (dt[0] @ th["w"] + th["b"][0] - dt[1]) ** 2
            lp = lambda th: -0.5 * (th["w"] @ th["w"])
            init = {"w": jnp.ones((C, N, d)), "b": jnp.zeros((C, N, 1))}
        else:
            ll = lambda th, dt: -0.5 * (dt[0] @ th - dt[1]) ** 2
            lp = lambda th: -0.5 * th @ th
            init = jnp.ones((C, N, d))
        pot = dgsgld.Potential(ll, lp, (Z, Y), batch_size=b)
        W = jnp.full((N, N), 1.0 / N)
        if alg == "sgld":
            init, W = jax.tree.map(lambda a: a[:, 0], init), None
        trace = dgsgld.sample(getattr(dgsgld, alg)(0.01), pot, W, init, jax.random.key(1), 4,
                              trace_fn=lambda s: jax.tree.map(jnp.sum, s.position),
                              store_positions=True)
        assert all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(trace.positions))
    print("compiled", len(CASES))
    """
)

CASES = [
    (C, N, d, b, alg, tree)
    for (C, N, d) in [(3, 5, 2), (3, 20, 2), (2, 3, 1), (5, 2, 3), (7, 5, 3)]
    for (b, alg, tree) in [(None, "diging_sgld", 0), (2, "diging_sgld", 1), (None, "de_sgld", 1),
                           (2, "extra_sgld", 0), (2, "sgld", 1)]
]


def test_small_odd_shapes_compile_in_the_chains_last_layout():
    code = f"CASES = {CASES!r}\n" + SCRIPT
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"compiled {len(CASES)}" in out.stdout


def test_layout_rule():
    state = {"short": jnp.zeros((200, 20, 6)), "long": jnp.zeros((200, 20, 1000)),
             "count": jnp.zeros((200,), jnp.int32)}
    rule = run_module._chain_axis_rule(None, 200)
    assert jax.tree.map(lambda a: rule(a.shape[1:]), state) == {"short": -1, "long": 0, "count": 0}


def test_layout_changes_no_numbers(monkeypatch, key):
    """Chains last and chains first give the same trace up to float32 rounding.

    The two layouts compile to different programs, so XLA may contract different multiply-adds
    into FMAs: agreement to a few ulps over 30 steps, not bit for bit.
    """
    Z = jax.random.normal(key, (5, 4, 2))
    pot = dgsgld.Potential(lambda th, dt: -0.5 * (dt[0] @ th - dt[1]) ** 2,
                           lambda th: -0.05 * th @ th, (Z, Z[..., 0]), batch_size=2)
    W = jnp.full((5, 5), 0.2)
    init = jax.random.normal(key, (8, 5, 2))
    args = (dgsgld.diging_sgld(0.02), pot, W, init, jax.random.key(4), 30)
    last = dgsgld.sample(*args)
    assert run_module._chain_axis_rule(W, 8)(last.state.position.shape[1:]) == -1
    monkeypatch.setattr(run_module, "_chain_axis_rule", lambda stack, n: lambda shape: 0)
    first = dgsgld.sample(*args)
    np.testing.assert_allclose(last.positions, first.positions, rtol=1e-5, atol=1e-5)
