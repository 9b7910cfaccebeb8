"""The benchmark suite: ``python -m benchmarks.run [--quick] [--out benchmarks/results.json]``.

Times DIGing-SGLD (and DE-SGLD for one row) on the paper's Bayesian linear regression with
``dgsgld.sample`` against, in the same process, the strongest NumPy loop we could write
(:mod:`benchmarks.numpy_fast`, the ratios' baseline), the plain vectorized NumPy loop
(:mod:`benchmarks.numpy_baseline`, a second column), the simplest hand-written ``lax.scan`` +
``vmap`` (:mod:`benchmarks.scan_baseline`) and the hardware floors (:mod:`benchmarks.floors`).
Workloads vary one axis at a time from the paper size (200 chains × 100 iterations × 20 agents
× d = 6). Further sections: the main job as a whole process against a NumPy script
(:mod:`benchmarks.whole_process`), rings with dense, circulant and neighbour-list mixing against
NumPy + ``scipy.sparse``, the noise (normal transforms alone, and noise variants inside the
paper-size run), PRNGs, a profile,
float64, memory. Writes a JSON file and a markdown file next to it (``results.md``) that opens
with the speed targets checked against their baselines. Methods: :mod:`benchmarks.harness`;
notebook: ``benchmarks/README.md``.

Options: ``--prng`` (the key implementation of every toolkit/scan row; default JAX's default,
``threefry2x32``), ``--only NAME[,NAME]`` (workloads whose name starts with one of these),
``--skip-baselines``, ``--sections``, ``--pairs``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld.runner._random import fast_key
from dgsgld.runner.loop import chain_keys

from . import floors, numpy_baseline, numpy_fast, problem, scan_baseline
from .harness import (
    CompileCounter,
    compile_jax,
    jax_memory,
    numpy_peak_memory,
    round_ratio,
    time_calls,
    time_rounds,
    x64,
)


@dataclass(frozen=True)
class Workload:
    name: str
    axis: str
    chains: int = 200
    steps: int = 100
    agents: int = 20
    dim: int = 6
    batch: int | None = None
    algorithm: str = "diging"
    repeats: int = 5
    period: int = problem.PERIOD
    note: str = ""
    numpy_layouts: tuple[str, ...] = ("agent",)


PAPER = Workload("paper", "paper", repeats=7, numpy_layouts=("agent", "chain"))


def full_grid() -> list[Workload]:
    return [
        PAPER,
        replace(PAPER, name="paper_b3", batch=3),
        replace(PAPER, name="paper_de", algorithm="de"),
        Workload("chains_2000", "chains", chains=2_000, repeats=3),
        Workload("chains_20000", "chains", chains=20_000, repeats=1),
        Workload("agents_200", "agents", agents=200, repeats=3),
        Workload("agents_2000", "agents", agents=2_000, steps=20, period=5, repeats=1,
                 note="20 iterations and a period-5 schedule: the dense (P, N, N) stack and "
                      "the O(N² C d) products per step would take minutes at 100 iterations"),
        Workload("dim_100", "dimension", dim=100, repeats=3),
        Workload("dim_1000", "dimension", dim=1_000, repeats=1),
        Workload("iters_10000", "iterations", steps=10_000, repeats=1),
    ]


def quick_grid() -> list[Workload]:
    return [
        replace(PAPER, repeats=5),
        replace(PAPER, name="paper_b3", batch=3, repeats=3),
        Workload("chains_2000", "chains", chains=2_000, repeats=2),
        Workload("agents_200", "agents", agents=200, steps=20, repeats=2),
        Workload("dim_100", "dimension", dim=100, steps=20, repeats=2),
        Workload("iters_1000", "iterations", steps=1_000, repeats=2),
    ]


# ------------------------------------------------------------------------------- the toolkit


def _toolkit_fn(algorithm, mode: str, steps: int, ensemble_fn=None):
    """``f(alg, potential, mixing, init, key) -> array``: one ``dgsgld.sample`` call."""

    def f(alg, pot, mixing, init, key):
        if mode == "final":
            return dgsgld.sample(alg, pot, mixing, init, key, steps,
                                 output=dgsgld.Output(positions=False),
                                 on_divergence="flag").state.position
        if mode == "trace":
            return dgsgld.sample(alg, pot, mixing, init, key, steps,
                                 on_divergence="flag").positions
        return dgsgld.sample(alg, pot, mixing, init, key, steps,
                             output=dgsgld.Output(ensemble_fn=ensemble_fn),
                             on_divergence="flag").ensemble

    return f


def _make_algorithm(name: str, eta: float):
    return dgsgld.DIGingSGLD(eta) if name == "diging" else dgsgld.DESGLD(eta)


def bench_toolkit(w: Workload, prob, key, dtype=jnp.float32, mode: str = "final",
                  ensemble_fn=None, repeats: int | None = None, user_path: bool = False) -> dict:
    """The compiled run (``steady_s``); with ``user_path`` also ``dgsgld.sample`` as a user calls
    it (``sample_call_s``: the compiled run plus the host-side checks of every call)."""
    eta = problem.step_size(prob)
    alg = _make_algorithm(w.algorithm, eta)
    pot = problem.potential(prob, w.batch, dtype)
    mixing = jnp.asarray(prob.mixing, dtype)
    init = jnp.zeros((w.chains, w.agents, w.dim), dtype)
    f = _toolkit_fn(alg, mode, w.steps, ensemble_fn)
    compiled, compile_s = compile_jax(f, alg, pot, mixing, init, key)
    reps = repeats or w.repeats
    t = time_calls(lambda: compiled(alg, pot, mixing, init, key), reps, warmup=int(reps > 1))
    out = {
        "compile_s": compile_s,
        "steady_s": t.median,
        "steady_cpu_s": t.cpu_median,
        "steady_min_s": t.minimum,
        "memory_bytes": jax_memory(compiled),
    }
    if user_path:
        t_user = time_calls(lambda: f(alg, pot, mixing, init, key), reps)
        out |= {"sample_call_s": t_user.median, "sample_call_cpu_s": t_user.cpu_median}
    return out


def bench_scan(w: Workload, prob, key, dtype=jnp.float32) -> dict:
    eta = problem.step_size(prob)
    args = (jnp.asarray(prob.features, dtype), jnp.asarray(prob.responses, dtype),
            jnp.asarray(prob.mixing, dtype), jnp.zeros((w.chains, w.agents, w.dim), dtype),
            key, jnp.asarray(eta, dtype))
    f = partial(scan_baseline.run, num_steps=w.steps, batch_size=w.batch, algorithm=w.algorithm)
    compiled, compile_s = compile_jax(f, *args)
    t = time_calls(lambda: compiled(*args), w.repeats, warmup=int(w.repeats > 1))
    return {"compile_s": compile_s, "steady_s": t.median, "steady_cpu_s": t.cpu_median,
            "steady_min_s": t.minimum, "memory_bytes": jax_memory(compiled)}


def bench_numpy(w: Workload, prob, layout: str, dtype=np.float32) -> dict:
    eta = problem.step_size(prob)
    run = partial(numpy_baseline.run, prob, w.chains, batch_size=w.batch,
                  algorithm=w.algorithm, layout=layout, dtype=dtype)
    t = time_calls(lambda: run(w.steps, eta), w.repeats, warmup=0)
    # Memory does not grow with the iterations (a loop): measure it on a few of them.
    mem = numpy_peak_memory(lambda: run(min(w.steps, 3), eta))
    return {"layout": layout, "steady_s": t.median, "steady_cpu_s": t.cpu_median,
            "steady_min_s": t.minimum, "memory_bytes": mem}


def bench_numpy_fast(w: Workload, prob) -> dict:
    eta = problem.step_size(prob)
    run = partial(numpy_fast.run, prob, w.chains, batch_size=w.batch, algorithm=w.algorithm)
    t = time_calls(lambda: run(w.steps, eta), w.repeats, warmup=1)
    mem = numpy_peak_memory(lambda: run(min(w.steps, 3), eta))
    return {"steady_s": t.median, "steady_cpu_s": t.cpu_median, "steady_min_s": t.minimum,
            "memory_bytes": mem}


def bench_paired(w: Workload, prob, key, repeats: int = 21) -> dict:
    """The user's ``dgsgld.sample`` call, the strongest NumPy and the plain NumPy, alternated."""
    eta = problem.step_size(prob)
    alg = _make_algorithm(w.algorithm, eta)
    pot = problem.potential(prob, w.batch)
    mixing = jnp.asarray(prob.mixing, jnp.float32)
    init = jnp.zeros((w.chains, w.agents, w.dim), jnp.float32)
    f = _toolkit_fn(alg, "final", w.steps)
    common = dict(batch_size=w.batch, algorithm=w.algorithm)
    t = time_rounds({
        "toolkit": lambda: f(alg, pot, mixing, init, key),
        "numpy": partial(numpy_baseline.run, prob, w.chains, w.steps, eta, **common),
        "numpy_fast": partial(numpy_fast.run, prob, w.chains, w.steps, eta, **common),
    }, repeats)
    out = {"repeats": repeats, "toolkit_s": t["toolkit"].median, "numpy_s": t["numpy"].median,
           "numpy_fast_s": t["numpy_fast"].median,
           "toolkit_cpu_s": t["toolkit"].cpu_median, "numpy_fast_cpu_s": t["numpy_fast"].cpu_median,
           "ratio_median": round_ratio(t["numpy"], t["toolkit"]),
           "fast_ratio_median": round_ratio(t["numpy_fast"], t["toolkit"]),
           "fast_ratio_cpu_median": round_ratio(t["numpy_fast"], t["toolkit"], cpu=True)}
    ratios = [b / a for a, b in zip(t["toolkit"].wall, t["numpy_fast"].wall)]
    out["fast_ratio_quartiles"] = [float(q) for q in np.percentile(ratios, [25, 75])]
    ratios = [b / a for a, b in zip(t["toolkit"].wall, t["numpy"].wall)]
    out["ratio_quartiles"] = [float(q) for q in np.percentile(ratios, [25, 75])]
    return out


def bench_floors(w: Workload, prob, key, dtype=jnp.float32) -> dict:
    count = w.steps * w.chains * w.agents * w.dim
    reps = max(1, w.repeats)
    noise = floors.noise(key, count, reps, dtype)
    np_noise = floors.numpy_noise(count, reps, np.dtype(dtype).type)
    jax_noise = floors.jax_random_noise(key, count, reps, dtype) if count <= 10**7 else None
    stack = jnp.asarray(prob.mixing, dtype)
    products = 2 if w.algorithm == "diging" else 1   # W x and W y per step, or W x only
    mixing = floors.mixing(stack, w.chains, w.dim, w.steps, reps, products)
    return {
        "noise_s": noise[0].median,
        "noise_numpy_s": np_noise.median,
        "noise_jax_random_s": None if jax_noise is None else jax_noise.median,
        "mixing_s": mixing[0].median,
        "floor_s": noise[0].median + mixing[0].median,
        "normals": count,
    }


def bench_workload(w: Workload, key, baselines: bool = True, pairs: int = 21) -> dict:
    print(f"[{time.strftime('%H:%M:%S')}] {w.name}: C={w.chains} T={w.steps} N={w.agents} "
          f"d={w.dim} b={w.batch} {w.algorithm}", flush=True)
    prob = problem.make_problem(w.agents, w.dim, period=w.period)
    out = {"workload": w.__dict__ | {"numpy_layouts": list(w.numpy_layouts)}}
    out["toolkit"] = bench_toolkit(w, prob, key, user_path=w.axis == "paper")
    if baselines:
        out["scan"] = bench_scan(w, prob, key)
        out["numpy"] = [bench_numpy(w, prob, layout) for layout in w.numpy_layouts]
        out["numpy_fast"] = bench_numpy_fast(w, prob)
    out["floors"] = bench_floors(w, prob, key)
    if baselines and w.axis == "paper":
        out["paired"] = bench_paired(w, prob, key, pairs)
    steps = w.chains * w.steps * w.agents
    # Paper-size ratios use the call a user makes (host-side checks included).
    tk = out["toolkit"].get("sample_call_s", out["toolkit"]["steady_s"])
    out["agent_steps_per_s"] = steps / tk
    ratios = {"toolkit_over_floor": tk / out["floors"]["floor_s"]}
    if baselines:
        best_np = min(r["steady_s"] for r in out["numpy"])
        ratios["numpy_over_toolkit"] = best_np / tk
        ratios["strongest_numpy_over_toolkit"] = out["numpy_fast"]["steady_s"] / tk
        ratios["scan_over_toolkit"] = out["scan"]["steady_s"] / tk
    out["ratios"] = ratios
    print(f"    toolkit {tk * 1e3:9.1f} ms (compile {out['toolkit']['compile_s']:.2f} s) | floor "
          f"{out['floors']['floor_s'] * 1e3:.1f} ms"
          + (f" | scan {out['scan']['steady_s'] * 1e3:.1f} ms | numpy "
             f"{min(r['steady_s'] for r in out['numpy']) * 1e3:.1f} ms | strongest numpy "
             f"{out['numpy_fast']['steady_s'] * 1e3:.1f} ms" if baselines else ""),
          flush=True)
    return out


# ------------------------------------------------------------------------ special sections


def recompile_check(key) -> dict:
    """Repeated ``dgsgld.sample`` calls with the same shapes must not compile again."""
    w = PAPER
    prob = problem.make_problem(w.agents, w.dim)
    other = problem.make_problem(w.agents, w.dim, seed=1)
    eta = problem.step_size(prob)
    mixing = jnp.asarray(prob.mixing)
    init = jnp.zeros((w.chains, w.agents, w.dim))

    def call(alg, pot, init):
        return dgsgld.sample(alg, pot, mixing, init, key, w.steps).positions

    pot = problem.potential(prob)
    # Everything the calls need is built first: building arrays compiles small XLA programs too.
    alg, alg_new_eta = dgsgld.DIGingSGLD(eta), dgsgld.DIGingSGLD(0.5 * eta)
    pot_new_data, init_new = problem.potential(other), jax.block_until_ready(init + 1.0)
    jax.block_until_ready(call(alg, pot, init))
    with CompileCounter() as counter:
        for _ in range(3):
            jax.block_until_ready(call(alg, pot, init))
        jax.block_until_ready(call(alg_new_eta, pot, init))
        jax.block_until_ready(call(alg, pot_new_data, init))
        jax.block_until_ready(call(alg, pot, init_new))
    fresh = jax.block_until_ready(jnp.zeros((w.chains + 1, w.agents, w.dim)))
    t0 = time.perf_counter()
    with CompileCounter() as new_shape:
        jax.block_until_ready(call(alg, pot, fresh))
    first = time.perf_counter() - t0
    return {
        "calls": 6,
        "compilations": counter.count,
        "compilations_new_shape": new_shape.count,
        "first_call_new_shape_s": first,
        "what": "3 identical calls, a new step size, new data of the same shapes, new initial "
                "positions: no compilation expected; then one call with a new number of chains.",
    }


def prng_section(keys: dict[str, object], reps: int) -> list[dict]:
    """Paper size with each PRNG implementation: toolkit, hand-written scan, noise floor."""
    out = []
    prob = problem.make_problem()
    w = replace(PAPER, repeats=reps)
    count = w.steps * w.chains * w.agents * w.dim
    for name, key in keys.items():
        print(f"[{time.strftime('%H:%M:%S')}] prng {name}", flush=True)
        row = {"prng": name}
        for b in (None, 3):
            ww = replace(w, batch=b)
            # dgsgld.sample refuses keys whose draws depend on batching (rbg, unsafe_rbg).
            refused = str(jax.random.key_impl(key)) in ("rbg", "unsafe_rbg")
            row[f"toolkit_b{b}"] = None if refused else bench_toolkit(ww, prob, key)
            row[f"scan_b{b}"] = bench_scan(ww, prob, key)
        row["noise_flat_s"] = floors.noise(key, count, reps)[0].median
        row["noise_shaped_s"] = floors.noise_shaped(
            key, (w.steps, w.chains, w.agents, w.dim), reps).median
        row["chain_invariant"] = chain_invariance(key)
        out.append(row)
    return out


def chain_invariance(key) -> bool:
    """Whether a key draws the same numbers inside ``vmap`` (as the runner batches chains) as
    alone. Counter-based generators do; for ``rbg``/``unsafe_rbg`` JAX's batching rule of
    ``rng_bit_generator`` draws the whole batch from the FIRST key, so a chain's draws depend
    on which chains are batched (or sharded) with it."""
    keys = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(4))
    batched = jax.vmap(lambda k: jax.random.normal(k, (5,)))(keys)
    alone = jnp.stack([jax.random.normal(keys[c], (5,)) for c in range(4)])
    return bool(jnp.array_equal(batched, alone))


def noise_section(key, rounds: int) -> dict:
    """The noise of a paper-size DIGing-SGLD run taken apart inside ``dgsgld.sample``: the
    shipped option ``normal=dgsgld.fast_normal`` (a table inverse CDF of the same words), other
    key implementations and other transforms of the same words (:data:`floors.NOISE_TRANSFORMS`,
    with the floors: ``log u`` alone, the words alone, no noise), each the call a user makes, in
    alternated rounds with the strongest NumPy; per-round ratio medians with quartiles; and
    whether each variant draws the same noise for a chain however the chains are batched
    (chains 6-7 of 8 against 2 chains from offset 6, keys derived as the runner derives them:
    comparing whole runs would also compare the rounding of two layouts of the mixing
    product)."""
    w = PAPER
    prob = problem.make_problem(w.agents, w.dim)
    eta = problem.step_size(prob)
    pot = problem.potential(prob)
    mixing = jnp.asarray(prob.mixing, jnp.float32)
    init = jnp.zeros((w.chains, w.agents, w.dim), jnp.float32)
    variants = {"default": (dgsgld.DIGingSGLD(eta), key,
                            floors.NOISE_TRANSFORMS["erf_inv"][0] + " with the default key")}
    variants["fast_normal"] = (dgsgld.DIGingSGLD(eta, normal=dgsgld.fast_normal), key,
                               floors.FAST_NORMAL_WHAT)
    variants["philox4x32 key"] = (dgsgld.DIGingSGLD(eta), jax.random.key(0, impl="philox4x32"),
                                  "jax.random.normal with `jax.random.key(0, impl='philox4x32')`")
    for name, (what, _) in floors.NOISE_TRANSFORMS.items():
        if name != "erf_inv":
            variants[name] = (floors.NoiseVariant(eta, transform=name), key, what)
    f = _toolkit_fn(None, "final", w.steps)
    fns = {name: partial(f, alg, pot, mixing, init, k) for name, (alg, k, _) in variants.items()}
    fns["numpy_fast"] = partial(numpy_fast.run, prob, w.chains, w.steps, eta, batch_size=None,
                                algorithm="diging")
    print(f"[{time.strftime('%H:%M:%S')}] noise inside the run ({rounds} rounds)", flush=True)
    t = time_rounds(fns, rounds)

    def quartiles(num, den, cpu=False):
        a, b = (num.cpu, den.cpu) if cpu else (num.wall, den.wall)
        return [float(q) for q in np.percentile([x / y for x, y in zip(a, b)], [25, 75])]

    def draws(alg, k, num_chains, offset):
        # The noise of step 0 as the runner draws it: chain keys, run key, fold_in, vmap.
        keys = jax.vmap(jax.random.split)(chain_keys(fast_key(k), num_chains, offset))[:, 1]
        keys = jax.vmap(jax.random.fold_in, (0, None))(keys, 0)
        return jax.vmap(alg.noise, (0, None))(keys, init[0])

    rows = []
    for name, (alg, k, what) in variants.items():
        batched, alone = draws(alg, k, 8, 0)[6:], draws(alg, k, 2, 6)
        rows.append({"variant": name, "what": what, "wall_s": t[name].median,
                     "cpu_s": t[name].cpu_median,
                     "numpy_fast_over": round_ratio(t["numpy_fast"], t[name]),
                     "numpy_fast_over_quartiles": quartiles(t["numpy_fast"], t[name]),
                     "numpy_fast_over_cpu": round_ratio(t["numpy_fast"], t[name], cpu=True),
                     "default_over": round_ratio(t["default"], t[name]),
                     "default_over_quartiles": quartiles(t["default"], t[name]),
                     "default_over_cpu": round_ratio(t["default"], t[name], cpu=True),
                     "default_over_cpu_quartiles": quartiles(t["default"], t[name], cpu=True),
                     "same_draws_batched": bool(jnp.array_equal(batched, alone))})
        print(f"    {name}: strongest NumPy / this {rows[-1]['numpy_fast_over']:.2f}x "
              f"(quartiles {rows[-1]['numpy_fast_over_quartiles'][0]:.2f}-"
              f"{rows[-1]['numpy_fast_over_quartiles'][1]:.2f}), default / this "
              f"{rows[-1]['default_over']:.2f}x (CPU {rows[-1]['default_over_cpu']:.2f}x)",
              flush=True)
    return {"rounds": rounds, "numpy_fast_s": t["numpy_fast"].median,
            "numpy_fast_cpu_s": t["numpy_fast"].cpu_median, "variants": rows}


def dtype_section(reps: int) -> list[dict]:
    """float32 against float64 at paper size (toolkit and NumPy)."""
    rows = []
    prob = problem.make_problem()
    w = replace(PAPER, repeats=reps)
    for name in ("float32", "float64"):
        print(f"[{time.strftime('%H:%M:%S')}] dtype {name}", flush=True)
        if name == "float64":
            with x64():
                key = jax.random.key(0)
                row = {"dtype": name, "toolkit": bench_toolkit(w, prob, key, jnp.float64),
                       "numpy": bench_numpy(w, prob, "agent", np.float64)}
        else:
            key = jax.random.key(0)
            row = {"dtype": name, "toolkit": bench_toolkit(w, prob, key, jnp.float32),
                   "numpy": bench_numpy(w, prob, "agent", np.float32)}
        rows.append(row)
    return rows


def memory_section(key, quick: bool) -> list[dict]:
    """Compiled memory of trace mode against streaming per-agent W2 (compiled, not run), and
    one streaming run for real."""
    from dgsgld import evaluate

    rows = []
    sizes = [(200, 100), (20_000, 10_000)] if not quick else [(200, 100), (2_000, 1_000)]
    for chains, steps in sizes:
        w = Workload(f"mem_{chains}x{steps}", "memory", chains=chains, steps=steps)
        prob = problem.make_problem(w.agents, w.dim)
        w2 = evaluate.streamed_per_agent_w2(prob.post_mean, prob.post_cov)
        alg = dgsgld.DIGingSGLD(problem.step_size(prob))
        pot = problem.potential(prob)
        mixing = jnp.asarray(prob.mixing)
        init = jax.ShapeDtypeStruct((chains, w.agents, w.dim), jnp.float32)
        row = {"chains": chains, "steps": steps}
        for mode in ("trace", "stream", "final"):
            f = _toolkit_fn(alg, mode, steps, w2)
            t0 = time.perf_counter()
            compiled = jax.jit(f).lower(alg, pot, mixing, init, key).compile()
            row[f"{mode}_memory_bytes"] = jax_memory(compiled)
            row[f"{mode}_compile_s"] = time.perf_counter() - t0
        row["trace_positions_bytes"] = chains * (steps + 1) * w.agents * w.dim * 4
        rows.append(row)
    # A real streaming run at the large chain count: W2 of every agent at every iteration.
    chains, steps = (20_000, 100) if not quick else (2_000, 100)
    w = Workload("stream_run", "memory", chains=chains, steps=steps, repeats=1)
    prob = problem.make_problem()
    w2 = evaluate.streamed_per_agent_w2(prob.post_mean, prob.post_cov)
    print(f"[{time.strftime('%H:%M:%S')}] streaming run {chains}x{steps}", flush=True)
    res = bench_toolkit(w, prob, key, mode="stream", ensemble_fn=w2)
    rows.append({"chains": chains, "steps": steps, "stream_run": res})
    return rows


def sparse_section(key, quick: bool, rounds: int = 3) -> list[dict]:
    """Rings (circulant, |E| = N ≪ N²): the toolkit with dense, circulant and neighbour-list
    mixing and with ``sparse.auto``'s choice, against NumPy + ``scipy.sparse`` and dense NumPy,
    20 DIGing-SGLD iterations of 200 chains, alternated rounds (wall and CPU medians)."""
    from dgsgld.networks import sparse

    rows = []
    for n in ((1_000,) if quick else (200, 1_000, 2_000)):
        w = Workload(f"ring_{n}", "sparse", agents=n, steps=20, period=1)
        prob = problem.make_problem(n, w.dim, network="ring")
        print(f"[{time.strftime('%H:%M:%S')}] sparse ring N={n}", flush=True)
        eta = problem.step_size(prob)
        alg = dgsgld.DIGingSGLD(eta)
        pot = problem.potential(prob)
        init = jnp.zeros((w.chains, w.agents, w.dim))
        f = _toolkit_fn(alg, "final", w.steps)
        chosen = sparse.auto(prob.mixing)
        mixings = {"dense": jnp.asarray(prob.mixing),
                   "circulant": sparse.from_dense(prob.mixing, format="circulant"),
                   "neighbors": sparse.from_dense(prob.mixing, format="neighbors")}
        fns, row = {}, {"agents": n, "steps": w.steps, "chains": w.chains,
                        "auto": type(chosen.snapshots).__name__
                        if isinstance(chosen, sparse.SparseSchedule) else "dense"}
        for name, m in mixings.items():
            compiled, compile_s = compile_jax(f, alg, pot, m, init, key)
            fns[name] = partial(compiled, alg, pot, m, init, key)
            row[f"{name}_compile_s"] = compile_s
            row[f"{name}_memory_bytes"] = jax_memory(compiled)
        fns["numpy_scipy"] = partial(numpy_baseline.run, prob, w.chains, w.steps, eta, sparse=True)
        if n <= 1_000:
            fns["numpy_dense"] = partial(numpy_baseline.run, prob, w.chains, w.steps, eta)
        t = time_rounds(fns, rounds)
        for name, timing in t.items():
            row[name] = {"wall_s": timing.median, "cpu_s": timing.cpu_median}
        row["scipy_over_circulant"] = round_ratio(t["numpy_scipy"], t["circulant"])
        row["scipy_over_circulant_cpu"] = round_ratio(t["numpy_scipy"], t["circulant"], cpu=True)
        row["dense_over_circulant"] = round_ratio(t["dense"], t["circulant"])
        row["dense_over_circulant_cpu"] = round_ratio(t["dense"], t["circulant"], cpu=True)
        row["dense_over_neighbors"] = round_ratio(t["dense"], t["neighbors"])
        row["dense_over_neighbors_cpu"] = round_ratio(t["dense"], t["neighbors"], cpu=True)
        row["mixing_dense_s"] = floors.mixing(mixings["dense"], w.chains, w.dim, w.steps,
                                              1)[0].median
        row["mixing_circulant_s"] = floors.mixing(mixings["circulant"], w.chains, w.dim, w.steps,
                                                  3)[0].median
        row["mixing_neighbors_s"] = floors.mixing(mixings["neighbors"], w.chains, w.dim, w.steps,
                                                  3)[0].median
        rows.append(row)
    return rows


def process_section(rounds: int) -> dict:
    """Whole-process times of ``python -m dgsgld run`` (first and second) and the NumPy script."""
    from . import whole_process

    print(f"[{time.strftime('%H:%M:%S')}] whole process ({rounds} rounds)", flush=True)
    return whole_process.measure(rounds)


def environment() -> dict:
    return {
        "jax": jax.__version__,
        "numpy": np.__version__,
        "dgsgld": dgsgld.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "cpu_count": os.cpu_count(),
        "load_average_start": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "prng_default": jax.config.jax_default_prng_impl,
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small grid (about a minute)")
    parser.add_argument("--out", default="benchmarks/results.json", help="JSON result file")
    parser.add_argument("--md", default=None, help="markdown tables (default: next to --out)")
    parser.add_argument("--prng", default=None, help="key implementation (default: JAX default)")
    parser.add_argument("--only", default=None, help="comma-separated workload name prefixes")
    parser.add_argument("--skip-baselines", action="store_true")
    parser.add_argument("--pairs", type=int, default=21,
                        help="alternated toolkit/NumPy pairs of the paper-size head to head")
    parser.add_argument("--sections",
                        default="process,grid,recompile,prng,profile,noise,dtype,memory,sparse",
                        help="comma-separated sections to run")
    args = parser.parse_args(argv)
    sections = set(args.sections.split(","))
    key = jax.random.key(0) if args.prng is None else jax.random.key(0, impl=args.prng)
    grid = quick_grid() if args.quick else full_grid()
    if args.only:
        prefixes = tuple(args.only.split(","))
        grid = [w for w in grid if w.name.startswith(prefixes)]
    results = {"environment": environment(), "quick": args.quick, "prng": args.prng or "default"}
    t_start = time.perf_counter()
    if "process" in sections:
        results["process"] = process_section(3 if args.quick else 5)
    if "grid" in sections:
        results["grid"] = [bench_workload(w, key, not args.skip_baselines, args.pairs)
                           for w in grid]
    if "recompile" in sections:
        results["recompile"] = recompile_check(key)
        print(f"    recompile check: {results['recompile']}", flush=True)
    reps = 3 if args.quick else 5
    if "prng" in sections:
        impls = ["threefry2x32", "philox4x32", "philox2x32", "rbg", "unsafe_rbg"]
        results["prng_options"] = prng_section({n: jax.random.key(0, impl=n) for n in impls}, reps)
    if "profile" in sections:
        from . import profile

        print(f"[{time.strftime('%H:%M:%S')}] profile", flush=True)
        results["profile"] = {
            f"{name}{', b=3' if b else ''}": profile.parts(jax.random.key(0, impl=name),
                                                           batch=b, repeats=reps)
            for name, b in (("threefry2x32", None), ("philox4x32", None), ("threefry2x32", 3))
        }
    if "noise" in sections:
        print(f"[{time.strftime('%H:%M:%S')}] noise transforms", flush=True)
        count = PAPER.steps * PAPER.chains * PAPER.agents * PAPER.dim
        results["noise"] = floors.normal_transforms(key, count, reps)
        results["noise_in_run"] = noise_section(key, args.pairs)
    if "memory" in sections:
        results["memory"] = memory_section(key, args.quick)
    if "sparse" in sections:
        results["sparse"] = sparse_section(key, args.quick)
    if "dtype" in sections:  # last: it toggles float64
        results["dtypes"] = dtype_section(reps)
    results["total_s"] = time.perf_counter() - t_start
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    md_path = Path(args.md) if args.md else out.with_suffix(".md")
    from .report import markdown

    md_path.write_text(markdown(results))
    print(f"wrote {out} and {md_path} in {results['total_s']:.0f} s", flush=True)
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
