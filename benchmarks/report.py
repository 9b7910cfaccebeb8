"""Markdown tables from a results dictionary of :mod:`benchmarks.run`.

``python -m benchmarks.report benchmarks/results.json`` prints them again from a JSON file.
"""

from __future__ import annotations

import json
import sys


def _ms(s) -> str:
    return "–" if s is None else f"{s * 1e3:,.1f}"


def _mb(b) -> str:
    return "–" if b is None else f"{b / 2**20:,.1f}"


def _x(r) -> str:
    return "–" if r is None else f"{r:.2f}×"


def _rate(r) -> str:
    return f"{r / 1e6:,.1f} M" if r >= 1e5 else f"{r / 1e3:,.0f} k"


def grid_table(rows) -> str:
    head = ("| workload | C | T | N | d | b | alg | toolkit ms | compile s | agent-steps/s | "
            "memory MB | NumPy ms | scan ms | floor ms (noise + mix) | NumPy / toolkit | "
            "scan / toolkit | toolkit / floor |")
    lines = [head, "|" + "|".join("---" for _ in range(head.count("|") - 1)) + "|"]
    for r in rows:
        w, tk, fl, ra = r["workload"], r["toolkit"], r["floors"], r["ratios"]
        numpy = min((n["steady_s"] for n in r.get("numpy", [])), default=None)
        scan = r.get("scan", {}).get("steady_s")
        lines.append(
            f"| {w['name']} | {w['chains']:,} | {w['steps']:,} | {w['agents']:,} | {w['dim']:,} | "
            f"{w['batch'] or 'full'} | {w['algorithm']} | "
            f"{_ms(tk.get('sample_call_s', tk['steady_s']))}{'†' if 'sample_call_s' in tk else ''} | "
            f"{tk['compile_s']:.2f} | {_rate(r['agent_steps_per_s'])} | {_mb(tk['memory_bytes'])} | "
            f"{_ms(numpy)} | {_ms(scan)} | {_ms(fl['floor_s'])} ({_ms(fl['noise_s'])} + "
            f"{_ms(fl['mixing_s'])}) | {_x(ra.get('numpy_over_toolkit'))} | "
            f"{_x(ra.get('scan_over_toolkit'))} | {_x(ra['toolkit_over_floor'])} |"
        )
    notes = [f"- {r['workload']['name']}: {r['workload']['note']}" for r in rows if r["workload"]["note"]]
    if any("sample_call_s" in r["toolkit"] for r in rows):
        notes.insert(0, "- †: the `dgsgld.sample(...)` call as a user makes it (host-side checks "
                        "included); other rows: the compiled run. The ratios use the same figure.")
    return "\n".join(lines + ([""] + notes if notes else []))


def _paired(p) -> str:
    if not p:
        return ""
    q1, q3 = p["ratio_quartiles"]
    return (f" Head to head ({p['repeats']} alternated pairs of the user's call and NumPy "
            f"agent-major): {_ms(p['toolkit_s'])} ms against {_ms(p['numpy_s'])} ms, NumPy / "
            f"toolkit {p['ratio_median']:.2f}× (median of the pairs; quartiles "
            f"{q1:.2f}–{q3:.2f}×).")


def paper_detail(rows) -> str:
    out = []
    for r in rows:
        if r["workload"]["axis"] != "paper":
            continue
        tk, fl = r["toolkit"], r["floors"]
        w = r["workload"]
        out.append(f"**{w['name']}** (b = {w['batch'] or 'full'}, {w['algorithm']}): compiled run "
                   f"{_ms(tk['steady_s'])} ms (CPU time {_ms(tk['steady_cpu_s'])} ms, fastest "
                   f"{_ms(tk['steady_min_s'])} ms); `dgsgld.sample(...)` as called by a user "
                   f"{_ms(tk.get('sample_call_s'))} ms (host-side checks included); compile "
                   f"{tk['compile_s']:.2f} s. Hand-written scan {_ms(r['scan']['steady_s'])} ms "
                   f"(compile {r['scan']['compile_s']:.2f} s). NumPy "
                   + ", ".join(f"{n['layout']}-major {_ms(n['steady_s'])} ms" for n in r["numpy"])
                   + f". Noise alone: JAX {_ms(fl['noise_s'])} ms (dgsgld._random; "
                   f"jax.random.normal {_ms(fl.get('noise_jax_random_s'))} ms), "
                   f"NumPy {_ms(fl['noise_numpy_s'])} ms "
                   f"({fl['normals']:,} normals); mixing alone {_ms(fl['mixing_s'])} ms."
                   + _paired(r.get("paired")))
    return "\n\n".join(out)


def prng_table(rows) -> str:
    lines = ["| PRNG | toolkit full ms | scan full ms | toolkit b=3 ms | scan b=3 ms | "
             "noise flat ms | noise (T,C,N,d) ms | same draws batched as alone |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['prng']} | {_ms(r['toolkit_bNone']['steady_s'])} | {_ms(r['scan_bNone']['steady_s'])} | "
            f"{_ms(r['toolkit_b3']['steady_s'])} | {_ms(r['scan_b3']['steady_s'])} | "
            f"{_ms(r['noise_flat_s'])} | {_ms(r['noise_shaped_s'])} | "
            f"{'yes' if r['chain_invariant'] else 'NO'} |")
    return "\n".join(lines)


def dtype_table(rows) -> str:
    lines = ["| dtype | toolkit ms | NumPy ms | toolkit memory MB |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['dtype']} | {_ms(r['toolkit']['steady_s'])} | "
                     f"{_ms(r['numpy']['steady_s'])} | {_mb(r['toolkit']['memory_bytes'])} |")
    return "\n".join(lines)


def memory_table(rows) -> str:
    lines = ["| chains × iterations | positions of the trace MB | trace mode MB | streaming W2 MB | "
             "final state only MB |", "|---|---|---|---|---|"]
    extra = []
    for r in rows:
        if "stream_run" in r:
            s = r["stream_run"]
            extra.append(f"A real streaming run (per-agent W2 at every iteration) of {r['chains']:,} "
                         f"chains × {r['steps']:,} iterations: {_ms(s['steady_s'])} ms, compiled "
                         f"memory {_mb(s['memory_bytes'])} MB.")
            continue
        lines.append(f"| {r['chains']:,} × {r['steps']:,} | {_mb(r['trace_positions_bytes'])} | "
                     f"{_mb(r['trace_memory_bytes'])} | {_mb(r['stream_memory_bytes'])} | "
                     f"{_mb(r['final_memory_bytes'])} |")
    return "\n".join(lines + [""] + extra)


def sparse_table(rows) -> str:
    lines = ["| ring N | C × T | edges | dense toolkit ms | sparse toolkit ms | dense mixing ms | "
             "sparse mixing ms | dense memory MB | sparse memory MB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['agents']:,} | {r['chains']} × {r['steps']} | {r['edges']:,} | "
                     f"{_ms(r['dense']['steady_s'])} | {_ms(r['sparse']['steady_s'])} | "
                     f"{_ms(r['mixing_dense_s'])} | {_ms(r['mixing_sparse_s'])} | "
                     f"{_mb(r['dense']['memory_bytes'])} | {_mb(r['sparse']['memory_bytes'])} |")
    return "\n".join(lines)


def markdown(results: dict) -> str:
    env = results["environment"]
    parts = [
        "# dgsgld benchmarks",
        f"{env['time']}; JAX {env['jax']} on {env['backend']} ({', '.join(env['devices'])}), "
        f"{env['cpu_count']} CPUs, load average at start {env['load_average_start']}; NumPy "
        f"{env['numpy']}; PRNG of the grid: {results['prng']}"
        + (" (quick grid)" if results.get("quick") else "") + ".",
        "Times are medians of repeated calls of the compiled run after a warm-up call (wall "
        "clock; one call without warm-up for the largest workloads); compile time is `jax.jit(...).lower(...).compile()`; memory is XLA's "
        "`memory_analysis()` (arguments + outputs + temporaries) for JAX and tracemalloc's peak "
        "for NumPy. Ratios > 1× in the NumPy and scan columns mean the toolkit is faster.",
    ]
    if "grid" in results:
        parts += ["## Workloads", grid_table(results["grid"]), "### Paper size in detail",
                  paper_detail(results["grid"])]
    if "recompile" in results:
        r = results["recompile"]
        parts += ["## Recompilation", f"{r['what']} Compilations observed: {r['compilations']} "
                  f"(in {r['calls']} calls); with a new number of chains: "
                  f"{r['compilations_new_shape']} (first call {r['first_call_new_shape_s']:.2f} s)."]
    if "prng_options" in results:
        parts += ["## PRNG implementations (paper size)", prng_table(results["prng_options"])]
    if "profile" in results:
        names = list(next(iter(results["profile"].values())))
        lines = ["| part of the paper-size run (100 iterations, 200 chains) | "
                 + " | ".join(f"{p} ms" for p in results["profile"]) + " |",
                 "|---|" + "---|" * len(results["profile"])]
        for name in names:
            lines.append(f"| {name} | " + " | ".join(_ms(v[name]) for v in results["profile"].values()) + " |")
        parts += ["## Where the time goes (paper size)", "\n".join(lines)]
    if "dtypes" in results:
        parts += ["## float32 against float64 (paper size)", dtype_table(results["dtypes"])]
    if "memory" in results:
        parts += ["## Memory: trace against streaming", memory_table(results["memory"])]
    if "sparse" in results:
        parts += ["## Dense against sparse mixing", sparse_table(results["sparse"])]
    parts.append(f"Total benchmark time: {results['total_s']:.0f} s.")
    return "\n\n".join(parts) + "\n"


if __name__ == "__main__":
    print(markdown(json.loads(open(sys.argv[1]).read())))
