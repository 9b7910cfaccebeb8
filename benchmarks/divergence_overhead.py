"""Overhead of the divergence check, old (non-finite only) vs new (the bound of
``dgsgld.evaluate._divergence``), in one process: a paper-size run (200 chains x 20 agents x d = 6 x
100 steps, DIGing-SGLD on a ring), alternated rounds, wall and CPU medians.

    PYTHONPATH=$PWD python benchmarks/divergence_overhead.py [rounds]
"""
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import networks
from dgsgld.evaluate import _divergence as _divergence

C, N, D, STEPS, NLOC = 200, 20, 6, 100, 5
rng = np.random.default_rng(0)
X = rng.normal(size=(N, NLOC, D)).astype(np.float32)
Y = (X @ np.ones(D) + rng.normal(size=(N, NLOC))).astype(np.float32)
def ll(theta, datum):
    x, y = datum
    return -0.5 * (y - x @ theta) ** 2
pot = dgsgld.Potential(ll, lambda t: -0.5 * jnp.sum(t ** 2), (jnp.asarray(X), jnp.asarray(Y)))
mixing = dgsgld.checked_network(networks.ring(N))
init = jnp.asarray(rng.normal(size=(C, N, D)).astype(np.float32))
alg = dgsgld.DIGingSGLD(0.01)
key = jax.random.key(0)

new_bad, new_ref = _divergence.first_bad_agent, _divergence.reference

def old_bad(position, scale, threshold, decentralized):   # main's _first_bad_agent
    if decentralized:
        per_agent = [~jnp.all(jnp.isfinite(leaf.reshape(leaf.shape[0], -1)), axis=1)
                     for leaf in jax.tree.leaves(position)]
        bad = jnp.any(jnp.stack(per_agent), axis=0)
        return jnp.any(bad), jnp.argmax(bad).astype(jnp.int32)
    raise NotImplementedError

def old_ref(position):
    return jnp.ones((), jnp.float32)

def use(which):
    _divergence.first_bad_agent, _divergence.reference = (
        (old_bad, old_ref) if which == "old" else (new_bad, new_ref))
    jax.clear_caches()
    run = lambda: dgsgld.sample(alg, pot, mixing, init, key, STEPS,
                                output=dgsgld.Output(positions=False), on_divergence="flag")
    jax.block_until_ready(run().state.position)     # compile
    return run

times = {"old": [], "new": []}
cpu = {"old": [], "new": []}
for rnd in range(int(sys.argv[1]) if len(sys.argv) > 1 else 4):
    for which in ("old", "new") if rnd % 2 == 0 else ("new", "old"):
        run = use(which)
        for _ in range(5):
            t0, c0 = time.perf_counter(), time.process_time()
            jax.block_until_ready(run().state.position)
            times[which].append(time.perf_counter() - t0)
            cpu[which].append(time.process_time() - c0)
for k, v in times.items():
    print(k, f"median {1e3 * statistics.median(v):.1f} ms  (n={len(v)}, "
             f"min {1e3 * min(v):.1f}, max {1e3 * max(v):.1f})")
for k, v in cpu.items():
    print(k, f"CPU median {1e3 * statistics.median(v):.1f} ms  min {1e3 * min(v):.1f}")
print("CPU overhead",
      f"{100 * (statistics.median(cpu['new']) / statistics.median(cpu['old']) - 1):+.1f} %")
print("overhead",
      f"{100 * (statistics.median(times['new']) / statistics.median(times['old']) - 1):+.1f} %")
