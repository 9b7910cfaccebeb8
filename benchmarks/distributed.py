"""Communication per step and wall times of ``examples/multi_process.py`` over 1, 2 and 4 local
processes (``python -m dgsgld launch``), for ``docs/results/scale.md``.

Bytes: each process reports the bytes it wrote (``wchar`` of ``/proc/self/io``, which counts
gloo's socket writes) after a run of ``S`` steps; ``(bytes(300) - bytes(100)) / 200`` is what a
process sends per step (start-up, compilation and the final gather cancel). Predicted: the agent
placement mixes two quantities per DIGing-SGLD step, each ``C F`` float32 numbers per row sent;
a dense stack all-gathers ``N - N / P`` rows, a sparse schedule sends the rows of its
:func:`dgsgld.parallel.rows.exchange_plan`. With a channel (``--channels``: the example's
``--channel`` over a sparse schedule) each row sent is the channel's message,
``Channel.message_bytes(F)`` bytes (top-k: values and int32 indices; random-k: values;
quantize and sign: bit-packed codes and one norm or scale). Push-DIGing-SGLD on the one-way
ring (``--network directed_ring``, sparse: each process receives its upstream neighbour's row
only) sends its push-sum weight, one float32 per row, beside the mass.

Times: the example's ``--repeat 4`` (median of the 2nd-4th runs: compiled) and the whole launch.

    python -m benchmarks.distributed --out benchmarks/distributed.json   # ~15 min on 2 cores
    python -m benchmarks.distributed --channels --skip-bytes --skip-times  # channels only
"""

import argparse
import json
import os
import re
import runpy
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "multi_process.py"

#: (name, network, chains, agents) of the measured problems.
PROBLEMS = [("paper", "barbell", 200, 20), ("paper-ring", "ring", 200, 20),
            ("large-ring", "ring", 20, 1000)]


def worker() -> None:
    """Run the example in this process, then print its process id and bytes written."""
    argv = sys.argv[sys.argv.index("--worker") + 1:]
    sys.argv = [str(EXAMPLE), *argv]
    try:
        runpy.run_path(str(EXAMPLE), run_name="__main__")
    except SystemExit:
        pass
    with open("/proc/self/io") as f:
        io = dict(line.split(": ") for line in f.read().splitlines())
    # One write: the processes share the launcher's standard output.
    sys.stdout.write(f"\nIO {argv[argv.index('--process-id') + 1]} {int(io['wchar'])}\n")
    sys.stdout.flush()


def _launch(processes: int, args: list[str]) -> tuple[str, float]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), DGSGLD_PROGRESS="0")
    cmd = [sys.executable, "-m", "dgsgld", "launch", "--processes", str(processes), "--timeout",
           "900", "--", sys.executable, "-m", "benchmarks.distributed", "--worker", *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1000)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return proc.stdout, time.perf_counter() - start


#: (channel, its option) of the channel rows: over the paper-size ring, sparse, 2 processes
#: (option "network": another network of the example).
CHANNELS = [("exact", {}), ("top_k", {"fraction": 0.25}), ("random_k", {"fraction": 0.5}),
            ("quantize", {"levels": 4}), ("sign", {}),
            ("top_k", {"fraction": 0.25, "error_feedback": True}),
            ("top_k", {"fraction": 0.25, "gossip": "matching"}),
            ("top_k", {"fraction": 0.25, "network": "directed_ring"})]


def _args(network, chains, agents, mixing, steps, out, repeat=1, channel="none", fraction=1.0,
          levels=4, error_feedback=False, gossip="none"):
    return ["--placement", "agents", "--network", network, "--chains", str(chains), "--agents",
            str(agents), "--mixing", mixing, "--steps", str(steps), "--repeat", str(repeat),
            "--out", str(out), "--channel", channel, "--fraction", str(fraction),
            "--levels", str(levels), "--gossip", gossip] + (
                ["--error-feedback"] if error_feedback else [])


def predicted_bytes(network, chains, agents, mixing, processes, dim=6, quantities=2,
                    channel="none", **option) -> int:
    """Bytes one process sends per step (see the module docstring); ``option``: the
    channel's ``fraction`` or ``levels``."""
    example = _example()
    a = example.parse(_args(network, chains, agents, mixing, 1, "x", channel=channel, **option))
    if mixing == "dense":
        rows = agents - agents // processes
    else:
        from dgsgld.parallel.rows import exchange_plan

        plan = exchange_plan(example.setup(a)[1], processes, copies=a.error_feedback)
        # With public copies the updates travel over the exchange of the period's union.
        rows = (plan.copies if a.error_feedback else plan).rows_received
    row = dim * 4 if channel == "none" else example.channel(a).message_bytes(dim)
    weight = 4 if network == "directed_ring" else 0      # push-sum's v beside its mass
    return chains * rows * (quantities * row + weight)


def _example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("multi_process", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def bytes_per_process(network, chains, agents, mixing, processes, tmp,
                      **channel) -> list[float]:
    """Bytes each process writes per step, in process order (see the module docstring)."""
    written = {}
    for steps in (100, 300):
        out, _ = _launch(processes, _args(network, chains, agents, mixing, steps, tmp / "x.npz",
                                          **channel))
        found = sorted((int(p), int(b)) for p, b in re.findall(r"^IO (\d+) (\d+)$", out, re.M))
        written[steps] = [b for _, b in found]
    return [(b - a) / 200 for a, b in zip(written[100], written[300])]


def measure_bytes(network, chains, agents, mixing, processes, tmp, **channel) -> float:
    """Bytes one process writes per step, the mean over processes."""
    per = bytes_per_process(network, chains, agents, mixing, processes, tmp, **channel)
    return float(sum(per) / len(per))


def measure_time(network, chains, agents, mixing, processes, tmp) -> tuple[float, float]:
    import numpy as np

    out = tmp / f"t{processes}.npz"
    _, whole = _launch(processes, _args(network, chains, agents, mixing, 100, out, repeat=4))
    with np.load(out) as f:
        return float(f["seconds"]), whole


def main(argv=None) -> None:
    if "--worker" in sys.argv:
        return worker()
    p = argparse.ArgumentParser(prog="python -m benchmarks.distributed")
    p.add_argument("--out", default="benchmarks/distributed.json")
    p.add_argument("--rounds", type=int, default=1, help="time rounds (1, 2, 4 alternated)")
    p.add_argument("--skip-bytes", action="store_true")
    p.add_argument("--skip-times", action="store_true")
    p.add_argument("--channels", action="store_true",
                   help="also measure the channel rows (CHANNELS)")
    args = p.parse_args(argv)
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    path = Path(args.out)
    result = json.loads(path.read_text()) if path.exists() else {}
    result["load_average"] = os.getloadavg()
    if not args.skip_bytes:
        rows = []
        for name, network, chains, agents in PROBLEMS:
            for processes in (2, 4):
                for mixing in ("dense", "sparse"):
                    pred = predicted_bytes(network, chains, agents, mixing, processes)
                    got = measure_bytes(network, chains, agents, mixing, processes, tmp)
                    rows.append(dict(problem=name, network=network, chains=chains,
                                     agents=agents, processes=processes, mixing=mixing,
                                     predicted=pred, measured=got))
                    print(rows[-1], flush=True)
        result["bytes"] = rows
    if args.channels:
        rows = []
        for channel, option in CHANNELS:
            option = dict(option)
            cell = dict(network=option.pop("network", "ring"), chains=200, agents=20,
                        processes=2, mixing="sparse")
            pred = predicted_bytes(**cell, channel=channel, **option)
            got = measure_bytes(**cell, tmp=tmp, channel=channel, **option)
            rows.append(dict(cell, channel=channel, **option, predicted=pred, measured=got))
            print(rows[-1], flush=True)
        result["channel_bytes"] = rows
    if not args.skip_times:
        times = {}
        for _ in range(args.rounds):
            for name, network, chains, agents in PROBLEMS:
                for mixing in ("dense", "sparse"):
                    for processes in (1, 2, 4):
                        cell = times.setdefault(f"{name}/{mixing}/{processes}", [])
                        cell.append(measure_time(network, chains, agents, mixing, processes, tmp))
                        print(name, mixing, processes, cell[-1], flush=True)
        result["times"] = times
    path.write_text(json.dumps(result, indent=1))
    path.with_suffix(".md").write_text(report(result))


def report(result) -> str:
    import numpy as np

    lines = ["Written by `python -m benchmarks.distributed` (load average at start: "
             + ", ".join(f"{x:.1f}" for x in result.get("load_average", ())) + ")."]
    if result.get("bytes"):
        lines += ["", "| problem | N | C | processes | mixing | predicted B/step | "
                  "measured B/step |", "|---|---|---|---|---|---|---|"]
    for r in result.get("bytes", []):
        lines.append(f"| {r['network']} | {r['agents']} | {r['chains']} | {r['processes']} | "
                     f"{r['mixing']} | {r['predicted']:,} | {r['measured']:,.0f} |"
                     .replace(",", " "))
    if result.get("channel_bytes"):
        lines += ["", "| channel | N | C | processes | mixing | predicted B/step | "
                  "measured B/step |", "|---|---|---|---|---|---|---|"]
        for r in result["channel_bytes"]:
            option = [r[k] for k in ("fraction", "levels") if k in r]
            name = f"{r['channel']}({option[0]})" if option else r["channel"]
            if r.get("error_feedback"):
                name += " with error feedback"
            if r.get("gossip", "none") != "none":
                name += f" with gossip ({r['gossip']})"
            if r["network"] != "ring":
                name += f" by Push-DIGing-SGLD on the {r['network'].replace('_', ' ')}"
            lines.append(f"| {name} | {r['agents']} | {r['chains']} | {r['processes']} | "
                         f"{r['mixing']} | {r['predicted']:,} | {r['measured']:,.0f} |"
                         .replace(",", " "))
    if not result.get("times"):
        return "\n".join(lines) + "\n"
    lines += ["", "| problem | N | C | mixing | 1 process | 2 processes | 4 processes |",
              "|---|---|---|---|---|---|---|"]
    for name, network, chains, agents in PROBLEMS:
        for mixing in ("dense", "sparse"):
            cells = []
            for processes in (1, 2, 4):
                got = result.get("times", {}).get(f"{name}/{mixing}/{processes}")
                if not got:
                    cells.append("—")
                    continue
                run, whole = np.median(np.asarray(got), axis=0)
                cells.append(f"{run:.2f} s ({whole:.0f} s)")
            lines.append(f"| {network} | {agents} | {chains} | {mixing} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
