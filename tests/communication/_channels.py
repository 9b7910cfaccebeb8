"""Helpers shared by the channel tests: the samplers that take a channel, a traced run of
steps, a sampler given a channel, the round keys of a run's steps, states equal bit for bit, an
activity pattern and the states after each step."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import communication as C

N = 4


def _samplers():
    return {
        "de": dgsgld.DESGLD(0.05), "diging": dgsgld.DIGingSGLD(0.05),
        "extra": dgsgld.EXTRASGLD(0.05), "dula": dgsgld.DULA(0.02, 0.5),
        "de_sghmc": dgsgld.DESGHMC(0.1, 2.0), "diging_sghmc": dgsgld.DIGingSGHMC(0.1, 2.0),
    }


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


def _round_keys(key, steps):
    """The round keys :func:`C.send` draws from at the steps of :func:`_run`."""
    run_key = jax.random.split(key)[1]
    return [jax.random.fold_in(jax.random.fold_in(run_key, k), C.channel._ROUND_TAG)
            for k in range(steps)]


def _same(a, b, err_msg=""):
    for u, v in zip(jax.tree.leaves(a._replace(channel=())),
                    jax.tree.leaves(b._replace(channel=()))):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v), err_msg=err_msg)


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
