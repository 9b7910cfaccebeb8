"""Simulation-based calibration at the warm-up's adapted settings against the fixed-step cells.

``PYTHONPATH=. python benchmarks/references/adapted/sbc_adapted.py [OUT_DIR [TARGET ...]]``
writes ``sbc_adapted.json`` (every cell of :func:`experiments.bench.sbc_cells`: p-values per
agent and coordinate, ranks, steps, wall times) and ``sbc_adapted.md`` (the bench's SBC table)
to ``OUT_DIR`` (default: this folder), after every target; with ``TARGET`` names, only those
run and their cells replace theirs in an existing ``sbc_adapted.json`` (a target's cells do not
depend on the others: each is its own ``sbc_cells`` call with the same key). Per target:
the plain cells (``h_s = 0.1 / curvature_s``) and the adapted ones (a warm-up of
``sbc_warmup_steps`` per data set, :func:`dgsgld.tuning.adapted_sbc`) of DIGing-SGLD and
DE-SGLD, ring of 4, split ``"skew"``, ``sbc_draws`` = 7 draws and ``sbc_steps`` = 500 sampling
steps per data set; 40 data sets on the Gaussian and Poisson targets, 20 on the logistic one
(its warm-up solves the exact stationary law of 124 coordinates per window: about a minute per
data set on two loaded cores), DIGing-SGLD alone there.
"""

import dataclasses
import json
import sys
import time
from pathlib import Path

import jax

from dgsgld.posteriors import sbc
from experiments.bench import BenchSettings, markdown, sbc_cells

#: (target, data sets, samplers with plain and adapted cells).
PLAN = (("gaussian_linear", 40, ("DIGing-SGLD", "DE-SGLD")),
        ("poisson_linnerud", 40, ("DIGing-SGLD", "DE-SGLD")),
        ("logistic_breast_cancer", 20, ("DIGing-SGLD",)))


def main(out: Path, targets=None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "sbc_adapted.json"
    base = dataclasses.replace(BenchSettings.small(), targets=(), sbc_draws=7, sbc_steps=500,
                               sbc_warmup_steps=500, sbc_adapted_targets=sbc.SIMULATED)
    done = json.loads(path.read_text()) if targets and path.exists() else {"targets": {}}
    for name, datasets, samplers in PLAN:
        if targets and name not in targets:
            continue
        settings = dataclasses.replace(base, sbc_targets=(name,), sbc_datasets=datasets,
                                       sbc_samplers=samplers, sbc_adapted=samplers)
        t0 = time.perf_counter()
        cells = sbc_cells(settings, jax.random.key(0), seed=0)
        done["targets"][name] = {
            "settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__},
            "wall_s": time.perf_counter() - t0, "cells": cells}
        write(out, done)


def write(out: Path, done: dict) -> None:
    """``out/sbc_adapted.json`` and ``out/sbc_adapted.md`` from ``{"targets": {name: {"settings",
    "wall_s", "cells"}}}``, the targets in :data:`PLAN`'s order."""
    order = [t for t, _, _ in PLAN if t in done["targets"]]
    done = {"targets": {t: done["targets"][t] for t in order}}
    (out / "sbc_adapted.json").write_text(json.dumps(done) + "\n")
    first = done["targets"][order[0]]
    table = markdown({"settings": first["settings"], "wall_s": 0.0, "rows": [],
                      "sbc": [c for t in order for c in done["targets"][t]["cells"]]})
    (out / "sbc_adapted.md").write_text(table[table.index("Simulation-based"):])


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent,
         sys.argv[2:])
