"""The full leaderboard's DIGing-SGLD (adapted) rows alone: full settings, no plain rows, no SBC."""
import dataclasses, sys
from pathlib import Path
from experiments.bench import BenchSettings, bench_posteriors
settings = dataclasses.replace(BenchSettings.full(), samplers=(), adapted=("DIGing-SGLD",),
                               sbc_targets=())
bench_posteriors(Path(sys.argv[1]), settings, seed=0)
