"""The simplest hand-written JAX DIGing-SGLD / DE-SGLD: ``vmap`` over chains of a ``lax.scan``
over iterations, the gradient of the paper's linear regression written out by hand.

Keys follow the same scheme as ``dgsgld.sample`` (chain ``c`` uses ``fold_in(key, c)``; step
``k`` uses ``fold_in(run_key, k)``), so both draw with the same PRNG and the same amount of
key arithmetic per step; only the structure of the code differs.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from .problem import LAMBDA


@partial(jax.jit, static_argnames=("num_steps", "batch_size", "algorithm"))
def run(features, responses, mixing, init, key, step_size, num_steps: int, *,
        batch_size: int | None = None, algorithm: str = "diging"):
    """Final positions ``(C, N, d)``; ``init`` is ``(C, N, d)``, ``mixing`` ``(P, N, N)``."""
    n_agents, n_local, _ = features.shape
    prior = LAMBDA / n_agents
    scale = jnp.sqrt(2.0 * step_size)

    def grad(x, key):
        if batch_size is None:
            resid = jnp.einsum("nkd,nd->nk", features, x) - responses
            return jnp.einsum("nkd,nk->nd", features, resid) + prior * x
        keys = jax.random.split(key, n_agents)
        idx = jax.vmap(lambda k: jax.random.choice(k, n_local, (batch_size,), replace=False))(keys)
        z = jnp.take_along_axis(features, idx[:, :, None], axis=1)
        y = jnp.take_along_axis(responses, idx, axis=1)
        resid = jnp.einsum("nkd,nd->nk", z, x) - y
        return (n_local / batch_size) * jnp.einsum("nkd,nk->nd", z, resid) + prior * x

    def chain(chain_key, x0):
        init_key, run_key = jax.random.split(chain_key)
        g0 = grad(x0, init_key)

        def step(carry, k):
            x, y, g = carry
            noise_key, grad_key = jax.random.split(jax.random.fold_in(run_key, k))
            w = mixing[k % mixing.shape[0]]
            noise = jax.random.normal(noise_key, x.shape, x.dtype)
            if algorithm == "de":
                x = w @ x - step_size * grad(x, grad_key) + scale * noise
                return (x, y, g), None
            x_new = w @ x - step_size * y + scale * noise
            g_new = grad(x_new, grad_key)
            return (x_new, w @ y + g_new - g, g_new), None

        (x, _, _), _ = jax.lax.scan(step, (x0, g0, g0), jnp.arange(num_steps))
        return x

    chain_keys = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(init.shape[0]))
    return jax.vmap(chain)(chain_keys, init)
