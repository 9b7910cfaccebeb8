"""Where the time of a paper-size run goes: the toolkit's compiled run taken apart.

Each row is a compiled ``lax.scan`` over the run's 100 iterations doing one part of a
DIGing-SGLD step for all 200 chains, batched by a plain ``vmap`` over chains inside the scan body
(chains first; the engine's own loop keeps them last, see ``dgsgld.runner.loop._chain_axis_rule``),
with the same keys (``fold_in`` per chain and step, then ``split``). Comparing the parts with the
whole says which one to optimise; the one-shot noise row is the floor of the noise (all normals of
the run in one call).

``python -m benchmarks.profile [--prng philox4x32]``
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp

import dgsgld
from dgsgld.runner import _random as _random

from . import problem
from .harness import compile_jax, time_calls


def parts(key, chains=200, steps=100, agents=20, dim=6, batch=None, repeats=7) -> dict:
    prob = problem.make_problem(agents, dim)
    pot = problem.potential(prob, batch)
    stack = jnp.asarray(prob.mixing)
    x0 = jnp.zeros((chains, agents, dim))
    run_keys = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(chains))

    def scan(body):
        def run(x0, run_keys, stack):
            def one(x, k):
                keys = jax.vmap(jax.random.fold_in, (0, None))(run_keys, k)
                noise_keys, grad_keys = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)
                return body(x, k, noise_keys, grad_keys, stack), None
            return jax.lax.scan(one, x0, jnp.arange(steps))[0]
        return run

    def noise(shape_flat, normal=jax.random.normal):
        def draw(k):
            if shape_flat:
                return normal(k, (agents * dim,)).reshape(agents, dim)
            return normal(k, (agents, dim))
        return lambda x, k, nk, gk, w: x + jax.vmap(draw)(nk)

    variants = {
        "keys only (fold_in + split per chain and step)":
            lambda x, k, nk, gk, w: x + jax.random.key_data(nk)[:, :1, None].astype(x.dtype) * 0,
        "noise in the loop, drawn in shape (N, d)": noise(False),
        "noise in the loop, drawn flat (N d,) with jax.random": noise(True),
        "noise in the loop, drawn in shape with dgsgld.runner._random (chains first)":
            noise(False, lambda k, shape: jax.random.normal(_random.fast_key(k), shape)),
        "mixing in the loop (W x and W y)":
            lambda x, k, nk, gk, w: 0.5 * (jax.vmap(lambda v: w[k % w.shape[0]] @ v)(x)
                                            + jax.vmap(lambda v: w[k % w.shape[0]] @ v)(x)),
        "gradient in the loop (Potential.grad)":
            lambda x, k, nk, gk, w: x - 1e-3 * jax.vmap(pot.grad)(x, gk),
    }
    out = {}
    for name, body in variants.items():
        compiled, _ = compile_jax(scan(body), x0, run_keys, stack)
        out[name] = time_calls(lambda: compiled(x0, run_keys, stack), repeats).median
    count = chains * steps * agents * dim
    one_shot, _ = compile_jax(lambda k: jax.random.normal(k, (count,)), key)
    out["noise in one call (floor)"] = time_calls(lambda: one_shot(key), repeats).median
    alg = dgsgld.DIGingSGLD(problem.step_size(prob))

    def whole(alg, pot, stack, x0, key):
        return dgsgld.sample(alg, pot, stack, x0, key, steps,
                             output=dgsgld.Output(positions=False),
                             on_divergence="flag").state.position

    compiled, _ = compile_jax(whole, alg, pot, stack, x0, key)
    out["whole toolkit run (compiled)"] = time_calls(
        lambda: compiled(alg, pot, stack, x0, key), repeats).median
    out["whole toolkit run, dgsgld.sample call"] = time_calls(
        lambda: whole(alg, pot, stack, x0, key), repeats).median
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile")
    parser.add_argument("--prng", default=None)
    parser.add_argument("--batch", type=int, default=None)
    args = parser.parse_args(argv)
    key = jax.random.key(0) if args.prng is None else jax.random.key(0, impl=args.prng)
    res = parts(key, batch=args.batch)
    for name, t in res.items():
        print(f"{t * 1e3:9.1f} ms  {name}")
    return res


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in main().items()}, indent=1))
