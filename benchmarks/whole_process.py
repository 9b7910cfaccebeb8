"""Whole-process time of the main job: ``python -m dgsgld run`` against the same job in NumPy.

Commands, alternated round by round (so that load on a shared machine hits all alike), medians
over rounds of wall time, CPU time (user + system of the process and its threads) and peak
memory:

* ``first``: ``python -m dgsgld run`` with an empty compile cache (a first run);
* ``second``: the same with the cache the first runs filled (every later run);
* ``numpy``: ``python benchmarks/main_job_numpy.py`` (the same job, NumPy only);
* ``reproduce``: ``python -m dgsgld reproduce fig2a`` (step-size grids and gradient tuning
  of three samplers) with an empty cache and with the cache its first run filled, alternated,
  to show that its programs (networks checked on the host, ``dgsgld.checked_network``) are
  stored and loaded too;
* floors: ``import_jax`` (``python -c "import jax; jax.numpy.zeros(1)..."``: the interpreter,
  the import, the CPU client and one tiny compiled op, the floor of any process that computes
  with JAX), ``import_dgsgld`` (``python -c "import dgsgld"``) and ``interpreter``
  (``python -c pass``).

Each round also runs the job once more per cache state in an instrumented process
(:func:`stages`, the same work as ``python -m dgsgld run``) that splits it into stages: the
imports one by one, then JAX's own compile events (``jax._src.monitoring`` time spans) inside
the run: tracing, lowering to StableHLO, and XLA compilation or, from a filled cache, the
executable's load; the rest of the run is execution and host work (data, network, checks,
printing). Interpreter start and exit is that process's wall time less its measured stages.

Every command runs with Python's bytecode cache on (``PYTHONDONTWRITEBYTECODE`` removed,
``PYTHONPYCACHEPREFIX`` in a temporary directory that one warm-up run of each command fills),
as for an installed package: where the environment turns it off, each process would otherwise
compile dgsgld's sources anew (about 0.1 s), while NumPy's and JAX's come precompiled.

Run: ``python -m benchmarks.whole_process [--rounds 5] [--out benchmarks/process.json]``
(writes the JSON and, next to it, a Markdown table); the suite runs :func:`measure` as its
``process`` section. Ratios are medians of the per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Only the standard library at the top: the instrumented child (:func:`stages`) runs this module
# and times every import itself.

ROOT = Path(__file__).resolve().parents[1]

_TIME = "/usr/bin/time"

#: Floors as ``python -c`` programs: what any run of the command pays before its own work.
FLOORS = {
    "import_jax": "import jax; jax.numpy.zeros(1).block_until_ready()",
    "import_dgsgld": "import dgsgld",
    "interpreter": "pass",
}

#: JAX's compile events (``jax._src.dispatch``), in the order a program goes through them.
_EVENTS = {
    "tracing": "/jax/core/compile/jaxpr_trace_duration",
    "lowering": "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "compile_or_load": "/jax/core/compile/backend_compile_duration",
}

#: Optional dependencies whose import :func:`stages` reports (loaded or not by the command).
_WATCHED = ("networkx", "optax", "scipy", "matplotlib", "equinox", "jaxtyping")


def _timed(argv: list[str], env: dict) -> dict:
    """Wall and CPU seconds and peak resident MiB of one child process.

    The peak comes from ``/usr/bin/time`` when present: a child forked from this (large)
    process would otherwise report this process's resident memory as its own peak.
    """
    wrapped = os.path.exists(_TIME)
    if wrapped:
        argv = [_TIME, "-f", "MAXRSS_KB=%M", *argv]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)      # rusage includes the waited-for child
    wall = time.perf_counter() - start
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv} failed: {err[-2000:]}")
    peak = usage.ru_maxrss
    if wrapped:
        peak = int(err.rsplit("MAXRSS_KB=", 1)[1].split()[0])
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "memory_mib": peak / 1024,
            "output": out}


# -- the instrumented run (a child process) ---------------------------------------------------


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def _length(spans) -> float:
    return sum(hi - lo for lo, hi in spans)


def _minus(spans, cut) -> list[tuple[float, float]]:
    """``spans`` less every interval of ``cut`` (both unions of disjoint intervals)."""
    out = []
    for lo, hi in spans:
        pieces = [(lo, hi)]
        for c_lo, c_hi in cut:
            pieces = [p for a, b in pieces
                      for p in ((a, min(b, c_lo)), (max(a, c_hi), b)) if p[1] > p[0]]
        out += pieces
    return out


def stages(argv: list[str] | None = None) -> dict:
    """Run ``python -m dgsgld run`` (``argv``: its options) in this process, timing each stage.

    Call it first thing in a fresh interpreter (``python -m benchmarks.whole_process
    --stages FILE``): the imports are timed in the order the command needs them, each stage
    beyond the ones before. Returns seconds per stage, the number of compiled programs and
    cache hits, and which of :data:`_WATCHED` the command imported.
    """
    marks = [("start", time.time())]

    def mark(name):
        marks.append((name, time.time()))

    import numpy  # noqa: F401

    mark("import numpy")
    import jax

    mark("import jax")
    jax.numpy.zeros(1).block_until_ready()
    mark("CPU client, first op")
    import equinox  # noqa: F401

    mark("import equinox")
    import dgsgld  # noqa: F401

    mark("import dgsgld")
    from dgsgld import __main__ as command

    command.build_parser()  # what main does before importing the run's modules
    import experiments  # noqa: F401  (what `run` imports: dgsgld.__main__._run)

    mark("import the run's modules")
    from jax._src import monitoring

    spans = {name: [] for name in _EVENTS}
    counts = {"programs": 0, "cache_hits": 0}
    names = {event: name for name, event in _EVENTS.items()}

    def on_span(event, start, end, **_):
        if event in names:
            spans[names[event]].append((start, end))
            counts["programs"] += event == _EVENTS["compile_or_load"]

    def on_event(event, **_):
        counts["cache_hits"] += event == "/jax/compilation_cache/cache_hits"

    monitoring.register_event_time_span_listener(on_span)
    monitoring.register_event_listener(on_event)
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet
        try:
            code = command.main(["run", *(argv or [])])
        finally:
            sys.stdout = stdout
    if code != 0:
        raise RuntimeError(f"python -m dgsgld run exited with {code}")
    mark("run")
    out = {name: b - a for (_, a), (name, b) in zip(marks[:-1], marks[1:])}
    # Nested events (a jit traced while lowering, a cache read inside compilation) count once,
    # for the innermost stage in this order: compile/load, lowering, tracing.
    compiled = _union(spans["compile_or_load"])
    lowered = _minus(_union(spans["lowering"]), compiled)
    traced = _minus(_minus(_union(spans["tracing"]), compiled), lowered)
    run = out.pop("run")
    out["tracing"] = _length(traced)
    out["lowering"] = _length(lowered)
    out["compile_or_load"] = _length(compiled)
    out["execution and host work"] = run - out["tracing"] - out["lowering"] - out[
        "compile_or_load"]
    return {"stages_s": out, "total_s": marks[-1][1] - marks[0][1], **counts,
            "imported": [m for m in _WATCHED if m in sys.modules]}


# -- the measurement ------------------------------------------------------------------------------


def _median(xs) -> float:
    return float(statistics.median(xs))


def _breakdown(runs: list[dict], walls: list[float]) -> dict:
    """Median seconds per stage over rounds; ``interpreter start and exit`` is each process's
    wall time less its in-process total."""
    names = ["interpreter start and exit", *runs[0]["stages_s"]]
    per_round = [{"interpreter start and exit": w - r["total_s"], **r["stages_s"]}
                 for r, w in zip(runs, walls)]
    return {"stages_s": {n: _median([p[n] for p in per_round]) for n in names},
            "wall_s": _median(walls), "programs": runs[-1]["programs"],
            "cache_hits": runs[-1]["cache_hits"], "imported": runs[-1]["imported"]}


def _entries(directory: Path) -> int:
    return sum(1 for p in directory.rglob("*") if p.is_file()) if directory.exists() else 0


def reproduce_reuse(env: dict, tmp: Path, rounds: int, figure: str = "fig2a") -> dict:
    """``python -m dgsgld reproduce FIGURE`` with an empty and with a filled cache, alternated:
    medians of wall and CPU time, and the cache entries the first run wrote and the second
    added (0: every program loaded)."""
    out_dir = tmp / "figures"
    job = [sys.executable, "-m", "dgsgld", "reproduce", figure, "--out", str(out_dir)]
    first, second, written, added = [], [], [], []
    for r in range(rounds):
        cache = tmp / f"reproduce{r}"
        first.append(_timed(job, dict(env, DGSGLD_CACHE_DIR=str(cache))))
        written.append(_entries(cache))
        second.append(_timed(job, dict(env, DGSGLD_CACHE_DIR=str(cache))))
        added.append(_entries(cache) - written[-1])
    res = {"figure": figure, "rounds": rounds, "entries_written": written[-1],
           "entries_added_by_second": max(added)}
    for name, rs in (("first", first), ("second", second)):
        res[name] = {k: _median([x[k] for x in rs]) for k in ("wall_s", "cpu_s")}
    res["first_over_second_wall"] = _median([a["wall_s"] / b["wall_s"]
                                             for a, b in zip(first, second)])
    return res


def measure(rounds: int = 5, reproduce_rounds: int = 1) -> dict:
    """Alternated rounds of the commands; medians, per-round ratios and the stage breakdown;
    then :func:`reproduce_reuse` (``reproduce_rounds`` rounds, 0 to skip)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("DGSGLD_NO_CACHE", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    job = [sys.executable, "-m", "dgsgld", "run"]
    numpy_job = [sys.executable, str(ROOT / "benchmarks" / "main_job_numpy.py")]
    floors = {name: [sys.executable, "-c", code] for name, code in FLOORS.items()}
    runs = {"first": [], "second": [], "numpy": [], **{name: [] for name in floors}}
    parts = {"first": ([], []), "second": ([], [])}
    with tempfile.TemporaryDirectory() as tmp:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "bytecode")
        warm = dict(env, DGSGLD_CACHE_DIR=str(Path(tmp) / "warm"))
        _timed(job, warm)                                 # fill the warm cache once
        for argv in (numpy_job, *floors.values()):        # and the bytecode cache
            _timed(argv, env)
        for r in range(rounds):
            cold = dict(env, DGSGLD_CACHE_DIR=str(Path(tmp) / f"cold{r}"))
            runs["first"].append(_timed(job, cold))
            runs["second"].append(_timed(job, warm))
            runs["numpy"].append(_timed(numpy_job, env))
            for name, argv in floors.items():
                runs[name].append(_timed(argv, env))
            for which, cache in (("first", dict(env, DGSGLD_CACHE_DIR=str(Path(tmp) /
                                                                          f"staged{r}"))),
                                 ("second", warm)):
                report = Path(tmp) / "stages.json"
                wall = _timed([sys.executable, "-m", "benchmarks.whole_process", "--stages",
                               str(report)], cache)["wall_s"]
                parts[which][0].append(json.loads(report.read_text()))
                parts[which][1].append(wall)
    out = {"rounds": rounds}
    for name, rs in runs.items():
        out[name] = {k: _median([x[k] for x in rs]) for k in ("wall_s", "cpu_s", "memory_mib")}
    for name in ("first", "second", *floors):
        for k in ("wall_s", "cpu_s"):
            ratios = [a[k] / b[k] for a, b in zip(runs[name], runs["numpy"])]
            out[f"{name}_over_numpy_{k[:-2]}"] = _median(ratios)
    for name in ("first", "second"):
        ratios = [a["wall_s"] / b["wall_s"] for a, b in zip(runs[name], runs["import_jax"])]
        out[f"{name}_over_import_jax_wall"] = _median(ratios)
    out["breakdown"] = {which: _breakdown(*parts[which]) for which in parts}
    if reproduce_rounds:
        with tempfile.TemporaryDirectory() as tmp:
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "bytecode")
            out["reproduce"] = reproduce_reuse(env, Path(tmp), reproduce_rounds)
    out["toolkit_output"] = runs["second"][-1]["output"]
    out["numpy_output"] = runs["numpy"][-1]["output"]
    return out


# -- reporting ------------------------------------------------------------------------------------

_LABELS = {
    "first": "`python -m dgsgld run`, first (empty cache)",
    "second": "`python -m dgsgld run`, second (cache filled)",
    "numpy": "`python benchmarks/main_job_numpy.py`",
    "import_jax": "`python -c \"import jax; jax.numpy.zeros(1)\"` (JAX's floor)",
    "import_dgsgld": "`python -c \"import dgsgld\"`",
    "interpreter": "`python -c pass`",
}


def breakdown_table(res: dict) -> str:
    """Markdown: seconds per stage of a first and a second run (medians over rounds)."""
    b = res["breakdown"]
    lines = ["| stage | first run s | second run s |", "|---|---|---|"]
    for name in b["first"]["stages_s"]:
        lines.append(f"| {name} | {b['first']['stages_s'][name]:.3f} | "
                     f"{b['second']['stages_s'][name]:.3f} |")
    lines.append(f"| **whole process** | {b['first']['wall_s']:.2f} | "
                 f"{b['second']['wall_s']:.2f} |")
    return "\n".join(lines + [
        "", f"Compiled programs per run: {b['first']['programs']} (cache hits: first run "
        f"{b['first']['cache_hits']}, second run {b['second']['cache_hits']}). Modules the "
        f"command imported: {', '.join(b['second']['imported']) or 'none of'} (of "
        f"{', '.join(_WATCHED)}). Stages of one instrumented process per round and cache state "
        "(`benchmarks.whole_process.stages`), medians; tracing, lowering and compile/load are "
        "JAX's own compile events, execution and host work is the rest of the run."])


def process_table(res: dict) -> str:
    lines = ["| command | wall s | CPU s | peak memory MiB | wall / NumPy script | CPU / NumPy |",
             "|---|---|---|---|---|---|"]
    for key, label in _LABELS.items():
        if key not in res:
            continue
        r = res[key]
        ratio = ("1×", "1×") if key == "numpy" else (f"{res[f'{key}_over_numpy_wall']:.2f}×",
                                                    f"{res[f'{key}_over_numpy_cpu']:.2f}×")
        lines.append(f"| {label} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['memory_mib']:.0f} | "
                     f"{ratio[0]} | {ratio[1]} |")
    return "\n".join(lines + ["", f"{res['rounds']} alternated rounds, medians; ratios are "
                               "medians of per-round ratios."])


def reproduce_table(res: dict) -> str:
    """Markdown: ``reproduce FIGURE`` with an empty and a filled cache (``measure``'s
    ``reproduce`` entry); empty when it was skipped."""
    r = res.get("reproduce")
    if not r:
        return ""
    return "\n".join([
        f"| `python -m dgsgld reproduce {r['figure']}` | wall s | CPU s |", "|---|---|---|",
        f"| first (empty cache) | {r['first']['wall_s']:.1f} | {r['first']['cpu_s']:.1f} |",
        f"| second (cache filled) | {r['second']['wall_s']:.1f} | {r['second']['cpu_s']:.1f} |",
        "", f"First / second {r['first_over_second_wall']:.2f}× (wall, median of {r['rounds']} "
        f"alternated round(s)). The first run stored {r['entries_written']} cache entries, the "
        f"second added {r['entries_added_by_second']}."])


def markdown(res: dict) -> str:
    targets = [("second run within 3× of the NumPy script (wall)", "second", 3),
               ("first run within 8× of the NumPy script (wall)", "first", 8)]
    lines = ["| target | measured | met |", "|---|---|---|"]
    for what, key, limit in targets:
        v = res[f"{key}_over_numpy_wall"]
        lines.append(f"| main job, {what} | {v:.2f}× | {'yes' if v <= limit else 'NO'} |")
    floor = res["import_jax_over_numpy_wall"]
    return "\n\n".join([
        "# The main job as a whole process",
        f"{res.get('time', '')}; {os.cpu_count()} CPUs. Command: `python -m "
        f"benchmarks.whole_process --rounds {res['rounds']} --out benchmarks/process.json`.",
        "\n".join(lines),
        f"JAX's own floor (interpreter, `import jax`, CPU client, one tiny op) is {floor:.2f}× "
        f"the NumPy script; a second run is {res['second_over_import_jax_wall']:.2f}× and a "
        f"first run {res['first_over_import_jax_wall']:.2f}× that floor.",
        process_table(res), "## Where the time goes", breakdown_table(res),
        *(["## A figure's programs are reused too", reproduce_table(res)]
          if res.get("reproduce") else [])])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.whole_process",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reproduce-rounds", type=int, default=1,
                        help="rounds of `reproduce fig2a` with an empty and a filled cache "
                        "(0: skip)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON result file (and its Markdown next to it, .md)")
    parser.add_argument("--stages", type=Path, default=None, metavar="FILE",
                        help=argparse.SUPPRESS)  # the instrumented child: write stages() to FILE
    args = parser.parse_args(argv)
    if args.stages is not None:
        args.stages.write_text(json.dumps(stages()))
        return {}
    res = {"time": time.strftime("%Y-%m-%d %H:%M:%S"),
           **measure(args.rounds, args.reproduce_rounds)}
    for name in ("first", "second", "numpy", *FLOORS):
        r = res[name]
        print(f"{name:>13}: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU, "
              f"{r['memory_mib']:.0f} MiB")
    print(f"first / numpy {res['first_over_numpy_wall']:.1f}x wall "
          f"({res['first_over_numpy_cpu']:.1f}x CPU); second / numpy "
          f"{res['second_over_numpy_wall']:.1f}x wall ({res['second_over_numpy_cpu']:.1f}x CPU); "
          f"import jax / numpy {res['import_jax_over_numpy_wall']:.1f}x wall")
    print(breakdown_table(res))
    if res.get("reproduce"):
        print(reproduce_table(res))
    if args.out is not None:
        args.out.write_text(json.dumps(res, indent=1))
        args.out.with_suffix(".md").write_text(markdown(res) + "\n")
    return res


if __name__ == "__main__":
    main()
