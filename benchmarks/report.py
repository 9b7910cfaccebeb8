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
            "memory MB | strongest NumPy ms | plain NumPy ms | scan ms | floor ms (noise + mix) | "
            "strongest NumPy / toolkit | plain NumPy / toolkit | scan / toolkit | "
            "toolkit / floor |")
    lines = [head, "|" + "|".join("---" for _ in range(head.count("|") - 1)) + "|"]
    for r in rows:
        w, tk, fl, ra = r["workload"], r["toolkit"], r["floors"], r["ratios"]
        numpy = min((n["steady_s"] for n in r.get("numpy", [])), default=None)
        fast = r.get("numpy_fast", {}).get("steady_s")
        scan = r.get("scan", {}).get("steady_s")
        lines.append(
            f"| {w['name']} | {w['chains']:,} | {w['steps']:,} | {w['agents']:,} | {w['dim']:,} | "
            f"{w['batch'] or 'full'} | {w['algorithm']} | "
            f"{_ms(tk.get('sample_call_s', tk['steady_s']))}"
            f"{'†' if 'sample_call_s' in tk else ''} | "
            f"{tk['compile_s']:.2f} | {_rate(r['agent_steps_per_s'])} | "
            f"{_mb(tk['memory_bytes'])} | "
            f"{_ms(fast)} | {_ms(numpy)} | {_ms(scan)} | {_ms(fl['floor_s'])} "
            f"({_ms(fl['noise_s'])} + {_ms(fl['mixing_s'])}) | "
            f"{_x(ra.get('strongest_numpy_over_toolkit'))} | {_x(ra.get('numpy_over_toolkit'))} | "
            f"{_x(ra.get('scan_over_toolkit'))} | {_x(ra['toolkit_over_floor'])} |"
        )
    notes = [f"- {r['workload']['name']}: {r['workload']['note']}" for r in rows
             if r["workload"]["note"]]
    if any("sample_call_s" in r["toolkit"] for r in rows):
        notes.insert(0, "- †: the `dgsgld.sample(...)` call as a user makes it (host-side checks "
                        "included); other rows: the compiled run. The ratios use the same figure.")
    notes.insert(0, "- strongest NumPy: `benchmarks/numpy_fast.py` (one product for [x | y], "
                    "in-place updates, float32 SFC64 normals in blocks on every core, the subset "
                    "table for mini-batches); plain NumPy: `benchmarks/numpy_baseline.py`.")
    return "\n".join(lines + [""] + notes)


def _paired(p) -> str:
    if not p:
        return ""
    q1, q3 = p["ratio_quartiles"]
    text = (f" Head to head ({p['repeats']} alternated rounds of the user's call, the plain "
            f"NumPy and the strongest NumPy): {_ms(p['toolkit_s'])} ms against plain "
            f"{_ms(p['numpy_s'])} ms, plain NumPy / toolkit {p['ratio_median']:.2f}× (median of "
            f"the rounds; quartiles {q1:.2f}–{q3:.2f}×)")
    if "fast_ratio_median" in p:
        f1, f3 = p["fast_ratio_quartiles"]
        text += (f"; strongest NumPy {_ms(p['numpy_fast_s'])} ms, strongest NumPy / toolkit "
                 f"{p['fast_ratio_median']:.2f}× (quartiles {f1:.2f}–{f3:.2f}×; CPU time "
                 f"{p['fast_ratio_cpu_median']:.2f}×)")
    return text + "."


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
                   + f". Noise alone: JAX {_ms(fl['noise_s'])} ms (dgsgld.runner._random; "
                   f"jax.random.normal {_ms(fl.get('noise_jax_random_s'))} ms), "
                   f"NumPy {_ms(fl['noise_numpy_s'])} ms "
                   f"({fl['normals']:,} normals); mixing alone {_ms(fl['mixing_s'])} ms."
                   + _paired(r.get("paired")))
    return "\n\n".join(out)


def _toolkit_ms(row) -> str:
    return "refused" if row is None else _ms(row["steady_s"])


def prng_table(rows) -> str:
    lines = ["| PRNG | toolkit full ms | scan full ms | toolkit b=3 ms | scan b=3 ms | "
             "noise flat ms | noise (T,C,N,d) ms | same draws batched as alone |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['prng']} | {_toolkit_ms(r['toolkit_bNone'])} | "
            f"{_ms(r['scan_bNone']['steady_s'])} | "
            f"{_toolkit_ms(r['toolkit_b3'])} | {_ms(r['scan_b3']['steady_s'])} | "
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
    lines = ["| chains × iterations | positions of the trace MB | trace mode MB | "
             "streaming W2 MB | final state only MB |", "|---|---|---|---|---|"]
    extra = []
    for r in rows:
        if "stream_run" in r:
            s = r["stream_run"]
            extra.append(f"A real streaming run (per-agent W2 at every iteration) of "
                         f"{r['chains']:,} chains × {r['steps']:,} iterations: "
                         f"{_ms(s['steady_s'])} ms, compiled memory {_mb(s['memory_bytes'])} MB.")
            continue
        lines.append(f"| {r['chains']:,} × {r['steps']:,} | {_mb(r['trace_positions_bytes'])} | "
                     f"{_mb(r['trace_memory_bytes'])} | {_mb(r['stream_memory_bytes'])} | "
                     f"{_mb(r['final_memory_bytes'])} |")
    return "\n".join(lines + [""] + extra)


def sparse_table(rows) -> str:
    lines = ["| ring N | C × T | toolkit dense ms | toolkit circulant ms | toolkit neighbours ms "
             "| NumPy + scipy.sparse ms | NumPy dense ms | scipy / circulant | dense / circulant "
             "| dense / neighbours | `sparse.auto` picks "
             "| mixing alone: dense / circulant / neighbours ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cell = lambda k: "–" if k not in r else (  # noqa: E731
            f"{_ms(r[k]['wall_s'])} ({_ms(r[k]['cpu_s'])} CPU)")
        lines.append(
            f"| {r['agents']:,} | {r['chains']} × {r['steps']} | {cell('dense')} | "
            f"{cell('circulant')} | {cell('neighbors')} | {cell('numpy_scipy')} | "
            f"{cell('numpy_dense')} | {_x(r['scipy_over_circulant'])} (CPU "
            f"{_x(r['scipy_over_circulant_cpu'])}) | {_x(r['dense_over_circulant'])} (CPU "
            f"{_x(r['dense_over_circulant_cpu'])}) | {_neighbours_cell(r)} | {r['auto']} | "
            f"{_ms(r['mixing_dense_s'])} / "
            f"{_ms(r['mixing_circulant_s'])} / {_ms(r['mixing_neighbors_s'])} |")
    return "\n".join(lines + ["", "Alternated rounds, medians of wall time (CPU time of the "
                               "process in brackets); ratios are medians of per-round ratios, "
                               "> 1× means the circulant toolkit run is faster (dense / "
                               "neighbours: the neighbour-list run)."])


def _neighbours_cell(r) -> str:
    if "dense_over_neighbors" not in r:   # runs made before the column existed
        return "–"
    return f"{_x(r['dense_over_neighbors'])} (CPU {_x(r['dense_over_neighbors_cpu'])})"


#: Noise variants of ``noise_in_run`` that draw exact standard normals (the others are floors).
EXACT_NOISE = ("default", "fast_normal", "philox4x32 key", "ppnd7", "both_words", "rbg",
               "unsafe_rbg", "box_muller")


def fastest_exact_noise(section: dict) -> dict:
    """The fastest variant other than the default that draws exact normals with the same
    draws however chains are batched (by CPU time: the runs are single-threaded)."""
    rows = [r for r in section["variants"] if r["variant"] in EXACT_NOISE
            and r["variant"] != "default" and r["same_draws_batched"]]
    return min(rows, key=lambda r: r["cpu_s"])


def noise_table(section: dict) -> str:
    lines = ["| noise | what | toolkit ms (CPU ms) | strongest NumPy / toolkit (CPU) | "
             "default noise / this (CPU) | same draws however chains are batched |",
             "|---|---|---|---|---|---|"]
    rows = {r["variant"]: r for r in section["variants"]}
    for r in section["variants"]:
        lines.append(f"| {r['variant']} | {r['what']} | {_ms(r['wall_s'])} ({_ms(r['cpu_s'])}) | "
                     f"{_x(r['numpy_fast_over'])} ({_x(r['numpy_fast_over_cpu'])}) | "
                     f"{_x(r['default_over'])} ({_x(r['default_over_cpu'])}) | "
                     f"{'yes' if r['same_draws_batched'] else 'NO'} |")
    cpu = {k: r["cpu_s"] for k, r in rows.items()}
    # From the per-round ratios r (toolkit = NumPy / r): the run may take NumPy / 1.3.
    numpy_s = section["numpy_fast_s"]
    at = {k: numpy_s / r["numpy_fast_over"] for k, r in rows.items()}
    budget = numpy_s / 1.3
    spare = budget - at["none"]
    lines += ["", f"Strongest NumPy {_ms(section['numpy_fast_s'])} ms "
              f"(CPU {_ms(section['numpy_fast_cpu_s'])} ms: its noise threads use both cores). "
              f"{section['rounds']} alternated rounds of the `dgsgld.sample(...)` call of each "
              "variant and the strongest NumPy on the shared 2-core machine, medians; ratios are "
              "medians of per-round ratios (wall, CPU in brackets).",
              "",
              f"* Of the default run's CPU time the noise is "
              f"{1 - cpu['none'] / cpu['default']:.0%} "
              f"({_ms(cpu['default'] - cpu['none'])} ms: keys, words and transform) and the "
              f"normal transform alone {1 - cpu['uniform'] / cpu['default']:.0%} "
              f"({_ms(cpu['default'] - cpu['uniform'])} ms); the words and keys cost "
              f"{_ms(cpu['uniform'] - cpu['none'])} ms.",
              f"* ≥ 1.3× the strongest NumPy needs a run of at most {_ms(budget)} ms (wall; "
              f"run times here are the NumPy median over each variant's median ratio). "
              f"Without any noise the run takes {_ms(at['none'])} ms, which "
              + (f"leaves {_ms(spare)} ms for all {PAPER_NORMALS:,} normals "
                 f"({spare / PAPER_NORMALS * 1e9:.2f} ns each)" if spare > 0 else
                 f"is already {_ms(-spare)} ms over it: no noise can reach the target")
              + f"; in the run the normals cost {_ms(at['default'] - at['none'])} ms with "
              f"JAX's transform and {_ms(at['ppnd7'] - at['none'])} ms with PPND7. As "
              f"ratios: zero noise {_x(rows['none']['numpy_fast_over'])} the strongest NumPy, "
              f"the words with no transform {_x(rows['uniform']['numpy_fast_over'])}, `log u` "
              f"alone (the one transcendental of every exact transform) "
              f"{_x(rows['log']['numpy_fast_over'])}, PPND7 "
              f"{_x(rows['ppnd7']['numpy_fast_over'])}, JAX's normal "
              f"{_x(rows['default']['numpy_fast_over'])}."]
    return "\n".join(lines)


PAPER_NORMALS = 200 * 100 * 20 * 6


def targets_table(results: dict) -> str:
    """The speed targets against their baselines, from this run."""
    rows = []
    p = results.get("process")
    if p:
        rows.append(("main job, second run within 3× of the NumPy script (wall)",
                     _x(p["second_over_numpy_wall"]), p["second_over_numpy_wall"] <= 3))
        rows.append(("main job, first run within 8× of the NumPy script (wall)",
                     _x(p["first_over_numpy_wall"]), p["first_over_numpy_wall"] <= 8))
    for r in results.get("grid", []):
        if r["workload"]["name"] == "paper" and "paired" in r:
            v = r["paired"]["fast_ratio_median"]
            rows.append(("paper-size DIGing-SGLD ≥ 1.3× the strongest NumPy (head to head)",
                         _x(v), v >= 1.3))
    if "noise_in_run" in results:
        variants = {r["variant"]: r for r in results["noise_in_run"]["variants"]}
        fast = variants.get("fast_normal")
        if fast:
            v = fast["numpy_fast_over"]
            rows.append((f"the same with the fast-noise option (`normal=dgsgld.fast_normal`; "
                         f"{_x(fast['default_over'])} the default noise)", _x(v), v >= 1.3))
        best = fastest_exact_noise(results["noise_in_run"])
        if best is not fast:
            v = best["numpy_fast_over"]
            rows.append((f"the same with the fastest other exact noise ({best['variant']}, not "
                         f"shipped; {_x(best['default_over'])} the default noise)", _x(v),
                         v >= 1.3))
        floor = next(r for r in results["noise_in_run"]["variants"] if r["variant"] == "none")
        v = floor["numpy_fast_over"]
        rows.append(("the same with zero noise (the floor; not a sampler)", _x(v), v >= 1.3))
    for r in results.get("sparse", []):
        if r["agents"] == 1_000:
            v, d = r["scipy_over_circulant"], r["dense_over_circulant"]
            rows.append(("1 000-agent ring at least as fast as NumPy + scipy.sparse",
                         _x(v), v >= 1))
            rows.append(("1 000-agent ring faster than dense", _x(d), d > 1))
            rows.append(("`sparse.auto` picks the faster of dense and sparse at N = 1 000",
                         r["auto"], (r["auto"] != "dense") == (d > 1)))
            if "dense_over_neighbors" in r:
                n = r["dense_over_neighbors"]
                rows.append(("neighbour lists faster than dense at N = 1 000 (a ring stored "
                             "as neighbour lists)", _x(n), n > 1))
    lines = ["| target | measured | met |", "|---|---|---|"]
    lines += [f"| {t} | {m} | {'yes' if ok else 'NO'} |" for t, m, ok in rows]
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
        "clock; one call without warm-up for the largest workloads); compile time is "
        "`jax.jit(...).lower(...).compile()`; memory is XLA's "
        "`memory_analysis()` (arguments + outputs + temporaries) for JAX and tracemalloc's peak "
        "for NumPy. Ratios > 1× in the NumPy and scan columns mean the toolkit is faster.",
    ]
    parts += ["## Targets", targets_table(results)]
    if "process" in results:
        from .whole_process import process_table, reproduce_table

        parts += ["## The main job as a whole process", process_table(results["process"])]
        if results["process"].get("reproduce"):
            parts += ["### A figure's programs are reused too",
                      reproduce_table(results["process"])]
    if "grid" in results:
        parts += ["## Workloads", grid_table(results["grid"]), "### Paper size in detail",
                  paper_detail(results["grid"])]
    if "recompile" in results:
        r = results["recompile"]
        parts += ["## Recompilation", f"{r['what']} Compilations observed: {r['compilations']} "
                  f"(in {r['calls']} calls); with a new number of chains: "
                  f"{r['compilations_new_shape']} (first call "
                  f"{r['first_call_new_shape_s']:.2f} s)."]
    if "prng_options" in results:
        parts += ["## PRNG implementations (paper size)", prng_table(results["prng_options"])]
    if "profile" in results:
        names = list(next(iter(results["profile"].values())))
        lines = ["| part of the paper-size run (100 iterations, 200 chains) | "
                 + " | ".join(f"{p} ms" for p in results["profile"]) + " |",
                 "|---|" + "---|" * len(results["profile"])]
        for name in names:
            lines.append(f"| {name} | "
                         + " | ".join(_ms(v[name]) for v in results["profile"].values()) + " |")
        parts += ["## Where the time goes (paper size)", "\n".join(lines)]
    if "noise" in results:
        n = results["noise"]
        m, p = n["box_muller_moments"], n.get("ppnd7_moments")
        parts += ["## Fast noise? Normals from the same random words (paper size)",
                  f"{n['count']:,} normals in one call: the words {_ms(n['bits_s'])} ms (JAX's "
                  f"own threefry, XLA's rolled loop; the toolkit's written-out hash is one "
                  f"vectorized loop, see the next table); JAX's transform (`√2 erf⁻¹(2u − 1)`, "
                  f"what `jax.random.normal` does) {_ms(n['erf_inv_s'])} ms; Box–Muller "
                  f"{_ms(n['box_muller_s'])} ms (mean {m[0]:.4f}, variance {m[1]:.4f}, fourth "
                  f"moment {m[2]:.3f}; normal: 0, 1, 3)"
                  + ("" if p is None else
                     f"; PPND7 (Wichura's AS 241 inverse CDF) {_ms(n['ppnd7_s'])} ms (mean "
                     f"{p[0]:.4f}, variance {p[1]:.4f}, fourth moment {p[2]:.3f}). Largest error "
                     f"against the exact quantile over all 2²³ inputs: PPND7 "
                     f"{n['ppnd7_max_error']:.1e}, JAX's transform "
                     f"{n.get('erf_inv_max_error', float('nan')):.1e}")
                  + "."]
    if "noise_in_run" in results:
        parts += ["### The noise inside a paper-size run", noise_table(results["noise_in_run"])]
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
