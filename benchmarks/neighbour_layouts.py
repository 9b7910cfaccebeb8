"""Neighbour-list mixing and the loop's layout: the routes to a faster run, measured.

``python -m benchmarks.neighbour_layouts [--agents 1000] [--rounds 7] [--out FILE.md]``;
``--crossover 200,300,400,500,700`` instead times dense, neighbour-list and edge-list runs as
shipped on rings of those sizes (9 rounds by default), the data ``sparse.CostModel`` is fitted to.

On XLA:CPU the runner keeps the chain axis last for dense and circulant mixing (their product
is a contraction) and first for :class:`dgsgld.networks.sparse.NeighborMixing` (a gather).
Chains first, the leaves are ``(C, N, d)`` with the short ``d = 6`` last, and a fused
noise-and-update loop over that shape runs several times slower than over one long axis; so the
runner passes the noise flat to chains-first steps and the step updates in that shape
(``dgsgld._util.tree.in_noise_shape``; the same numbers). This script times whole DIGing-SGLD runs
on a ring (200 chains, 20 iterations, d = 6), alternated round by round, of:

* ``dense``: the ``(N, N)`` stack (chains last);
* ``neighbours``: ``NeighborMixing`` as shipped (chains first, flat noise and updates);
* ``neighbours, shaped updates``: the same with the noise and the updates in the position's
  shape ``(N, d)``, as before the flat route;
* ``neighbours, batching rule``: the product under a ``jax.custom_batching.custom_vmap`` rule
  that folds the chains into the features (``(C, N, F) -> (N, F C)``, a row gather on wide
  rows), with the runner told to keep chains last (``chains_last``), shaped updates;
* ``dense, flat updates``: every leaf's update flattened in the chains-last loop too (JAX's
  ``reshape`` batching rule moves the chain axis first: why the runner flattens only
  chains-first leaves).

The last three are measurements, not options: none of them ships. Every variant's final
positions are compared with the dense run's (float32 summation order aside).
"""

from __future__ import annotations

import argparse
import contextlib
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld._util import tree as _tree
from dgsgld.networks import sparse

from . import problem
from .harness import compile_jax, round_ratio, time_rounds


def _fold_chains(product):
    """``product(params, x)`` (``x``: ``(N, F)``, rows mixed) whose ``vmap`` over ``x`` alone
    is ``product`` on the chains folded into the features: ``(C, N, F) -> (N, F C)``."""

    @jax.custom_batching.custom_vmap
    def folded(params, x):
        return product(params, x)

    @folded.def_vmap
    def rule(axis_size, in_batched, params, x):
        params_batched, x_batched = in_batched
        if any(jax.tree.leaves(params_batched)) or not x_batched:
            raise NotImplementedError("only the operand is batched in this measurement")
        moved = jnp.moveaxis(x, 0, -1)                                     # (N, F, C)
        out = product(params, moved.reshape(moved.shape[0], -1)).reshape(moved.shape)
        return jnp.moveaxis(out, -1, 0), True

    return folded


def _neighbour_product(params, x):
    neighbors, weights, diagonal = params
    return sparse.NeighborMixing(neighbors, weights, diagonal) @ x


_folded_product = _fold_chains(_neighbour_product)


class _FoldedNeighbors(sparse.NeighborMixing):
    """``NeighborMixing`` with the chains folded into the features under ``vmap``."""

    chains_last = True

    def __matmul__(self, x):
        return _folded_product((self.neighbors, self.weights, self.diagonal), x)


@contextlib.contextmanager
def _patched(name, value):
    """While tracing: ``dgsgld._util.tree.<name>`` replaced by ``value``."""
    original = getattr(_tree, name)
    setattr(_tree, name, value)
    try:
        yield
    finally:
        setattr(_tree, name, original)


def _shaped_updates():
    """The runner's noise left in the position's shape (so the updates are too)."""
    return _patched("flatten_where", lambda tree, flat: tree)


def _flat_updates():
    """Every Langevin update on flattened leaves, whatever the runner's layout."""
    update = _tree.langevin_update

    def flat(base, drift, noise, step_size):
        out = update(*(jax.tree.map(jnp.ravel, t) for t in (base, drift, noise)), step_size)
        return jax.tree.map(lambda o, b: o.reshape(b.shape), out, base)

    return _patched("langevin_update", flat)


def _final(alg, pot, mixing, init, key, *, steps):
    return dgsgld.sample(alg, pot, mixing, init, key, steps, output=dgsgld.Output(positions=False),
                         on_divergence="flag").state.position


def _ring(agents: int, chains: int):
    """``(ring problem, DIGing-SGLD, potential, zero init, key)`` of ``agents`` agents, d = 6."""
    prob = problem.make_problem(agents, 6, network="ring")
    return (prob, dgsgld.DIGingSGLD(problem.step_size(prob)), problem.potential(prob),
            jnp.zeros((chains, agents, 6)), jax.random.key(0))


def _markdown(caption: str, header: list[str], rows: list[list[str]]) -> str:
    lines = [caption, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def measure(agents: int = 1_000, rounds: int = 5, steps: int = 20, chains: int = 200) -> dict:
    prob, alg, pot, init, key = _ring(agents, chains)
    dense = jnp.asarray(prob.mixing)
    neighbours = sparse.from_dense(prob.mixing, format="neighbors")
    folded = sparse.SparseSchedule(_FoldedNeighbors(*(
        getattr(neighbours.snapshots, f) for f in ("neighbors", "weights", "diagonal"))))
    variants = {
        "dense": (dense, contextlib.nullcontext),
        "neighbours": (neighbours, contextlib.nullcontext),
        "neighbours, shaped updates": (neighbours, _shaped_updates),
        "neighbours, batching rule": (folded, _shaped_updates),
        "dense, flat updates": (dense, _flat_updates),
    }

    final = partial(_final, steps=steps)

    fns, compile_s, finals = {}, {}, {}
    for name, (mixing, context) in variants.items():
        jax.clear_caches()   # each variant traced afresh (the patches act at tracing only)
        with context():
            compiled, compile_s[name] = compile_jax(final, alg, pot, mixing, init, key)
        fns[name] = partial(compiled, alg, pot, mixing, init, key)
        finals[name] = np.asarray(fns[name]())
    timing = time_rounds(fns, rounds)
    rows = []
    for name in variants:
        rows.append({
            "variant": name,
            "wall_s": timing[name].median,
            "cpu_s": timing[name].cpu_median,
            "dense_over_this": round_ratio(timing["dense"], timing[name]),
            "compile_s": compile_s[name],
            "max_abs_diff_vs_dense": float(np.max(np.abs(finals[name] - finals["dense"]))),
        })
    return {"agents": agents, "chains": chains, "steps": steps, "rounds": rounds, "rows": rows,
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def crossover(sizes, rounds: int = 9, steps: int = 20, chains: int = 200) -> dict:
    """Dense against neighbour and edge lists as shipped, whole runs on rings of ``sizes``."""
    rows = []
    for n in sizes:
        prob, alg, pot, init, key = _ring(n, chains)
        fns = {}
        for name, mixing in (("dense", jnp.asarray(prob.mixing)),
                             ("neighbours", sparse.from_dense(prob.mixing, format="neighbors")),
                             ("edges", sparse.from_dense(prob.mixing, format="edges"))):
            compiled, _ = compile_jax(partial(_final, steps=steps), alg, pot, mixing, init, key)
            fns[name] = partial(compiled, alg, pot, mixing, init, key)
        timing = time_rounds(fns, rounds)
        rows.append({"agents": n, **{f"{k}_s": v.median for k, v in timing.items()},
                     "dense_over_neighbours": round_ratio(timing["dense"], timing["neighbours"]),
                     "dense_over_edges": round_ratio(timing["dense"], timing["edges"])})
    return {"chains": chains, "steps": steps, "rounds": rounds, "rows": rows,
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def crossover_table(result: dict) -> str:
    return _markdown(
        f"Rings, DIGing-SGLD, {result['chains']} chains × {result['steps']} iterations, d = 6; "
        f"{result['rounds']} alternated rounds, medians of wall time ({result['time']}).",
        ["ring N", "dense ms", "neighbours ms", "edges ms", "dense / neighbours", "dense / edges"],
        [[f"{r['agents']:,}", f"{1e3 * r['dense_s']:.1f}", f"{1e3 * r['neighbours_s']:.1f}",
          f"{1e3 * r['edges_s']:.1f}", f"{r['dense_over_neighbours']:.2f}×",
          f"{r['dense_over_edges']:.2f}×"] for r in result["rows"]])


def table(result: dict) -> str:
    return _markdown(
        f"Ring of {result['agents']} agents, DIGing-SGLD, {result['chains']} chains × "
        f"{result['steps']} iterations, d = 6; {result['rounds']} alternated rounds, medians "
        f"({result['time']}).",
        ["variant", "wall ms", "CPU ms", "dense / this", "compile s", "max abs diff vs dense"],
        [[r["variant"], f"{1e3 * r['wall_s']:.1f}", f"{1e3 * r['cpu_s']:.1f}",
          f"{r['dense_over_this']:.2f}×", f"{r['compile_s']:.2f}",
          f"{r['max_abs_diff_vs_dense']:.1e}"] for r in result["rows"]])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=None, help="7 (9 with --crossover)")
    parser.add_argument("--crossover", help="comma-separated ring sizes: dense against the "
                                            "gathering formats as shipped")
    parser.add_argument("--out", help="write the table to this Markdown file")
    args = parser.parse_args(argv)
    if args.crossover:
        sizes = [int(n) for n in args.crossover.split(",")]
        rounds = args.rounds or 9
        text = crossover_table(crossover(sizes, rounds))
        command = f"--crossover {args.crossover} --rounds {rounds}"
        title = "Neighbour and edge lists against dense: the crossover"
    else:
        rounds = args.rounds or 7
        text = table(measure(args.agents, rounds))
        command = f"--agents {args.agents} --rounds {rounds}"
        title = "Neighbour lists and the loop's layout"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# {title}\n\nCommand: `python -m benchmarks.neighbour_layouts {command} "
                    f"--out {args.out}`.\n\n{text}\n")


if __name__ == "__main__":
    main()
