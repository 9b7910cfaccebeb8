"""Adapted DIGing-SGLD rows on two small targets against their NUTS references: a reduced
check of the warm-up (1 seed, 8 chains, 4000 steps, ring; the warm-up in the first half).

``PYTHONPATH=. python benchmarks/references/adapted/small_targets_warmup.py OUT
[--options '{"preconditioner": "diagonal"}']`` writes ``OUT/leaderboard.{json,md}``; the
options are keywords for every ``dgsgld.warmup`` call of the adapted rows. The rows'
``sd_ratio_worst`` and ``mean_error_max`` are the worst sd ratio and the largest standardized
mean error over the target's compared quantities.
"""
import argparse
import dataclasses
import functools
import json
from pathlib import Path

import dgsgld.tuning
from experiments.bench import BenchSettings, bench_posteriors

p = argparse.ArgumentParser()
p.add_argument("out", type=Path)
p.add_argument("--options", default="{}", help="JSON keywords for dgsgld.warmup")
p.add_argument("--targets", nargs="+", default=["logistic_breast_cancer", "multinomial_wine"])
a = p.parse_args()
options = json.loads(a.options)
if options:  # the adapted rows call dgsgld.tuning.warmup with its defaults
    dgsgld.tuning.warmup = functools.partial(dgsgld.tuning.warmup, **options)
settings = dataclasses.replace(BenchSettings.full(), samplers=(), networks=("ring",),
                               adapted=("DIGing-SGLD",), sbc_targets=(), seeds=1,
                               targets=tuple(a.targets))
bench_posteriors(a.out, settings, seed=0)
