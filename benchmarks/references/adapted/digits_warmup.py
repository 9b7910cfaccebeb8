"""The decentralized warm-up on the communication experiment's digits BNN, against its fixed step.

The problem is :func:`experiments.communication._digits_problem` at full size (``d = 4810``,
20 agents on the random 4-regular graph, Dirichlet(0.5) label skew, mini-batches of 16).
Both rows spend the same ``--steps`` sampler steps from the same starting points:

- **fixed**: DIGing-SGLD at the experiment's hand-picked step (``--fixed-step``, 0.001) for
  ``--steps`` steps, as the experiment's exact-messages row;
- **adapted**: ``dgsgld.warmup(DIGingSGLD, ..., preconditioner="diagonal")`` for
  ``--warm`` of the steps, then the adapted sampler for the rest.

Each is scored as the experiment scores its rows: the test NLL and accuracy of each agent's
posterior predictive (the mean of its chains' predictive probabilities at the last step),
averaged over agents, ± the delete-a-group jackknife standard error over chains.

``PYTHONPATH=. python benchmarks/references/adapted/digits_warmup.py --chains 8 --steps 400``;
``--options '{"curvature": "hutchinson"}'`` passes keywords to ``warmup``. The JSON goes to
``--out`` (default: ``digits_warmup.json`` next to this script).

Stored runs (32 chains, 2000 steps, ``--warm 0.5``): ``digits_warmup.json`` (the fixed step and
the warm-up with the stiffness cap at 0.5, the default before it became 1.5 for a diagonal
``M``), ``digits_warmup_tol1.5.json`` (``{"stiff_tol_sd": 1.5}``: today's default),
``digits_warmup_tol1.5_norestart.json`` (``{"stiff_tol_sd": 1.5, "restart": null}``) and
``digits_warmup_before.json`` (the warm-up before the prior floor); at 8 chains and 400 steps,
``digits_warmup_8x400_before.json`` (with the fixed step) and ``digits_warmup_8x400.json``.
"""

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

import dgsgld
from dgsgld import networks as nets
from dgsgld.runner.loop import Output, sample
from dgsgld.samplers import DIGingSGLD
from experiments import communication as comm_exp


def _final(trace):
    return jax.tree.map(lambda a: np.asarray(a[:, -1]), trace.positions)


def _scores(problem, trace, groups):
    if bool(np.asarray(trace.diverged).any()):
        return {"diverged": True}
    s = problem.score(_final(trace), groups)
    return {"diverged": False, "nll": s["nll"][0], "nll_se": s["nll"][1],
            "accuracy": s["accuracy"][0], "accuracy_se": s["accuracy"][1]}


def main():
    here = Path(__file__).parent
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chains", type=int, default=8)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--warm", type=float, default=0.5, help="fraction of the steps warming up")
    p.add_argument("--fixed-step", type=float, default=comm_exp.DIGITS["step_size"])
    p.add_argument("--no-fixed", action="store_true", help="skip the fixed-step row")
    p.add_argument("--options", default="{}", help="JSON keywords for dgsgld.warmup")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=here / "digits_warmup.json")
    a = p.parse_args()
    options = json.loads(a.options)

    cfg = comm_exp._config(False, a.seed, ("digits",), comm_exp.CONSENSUS)
    problem = comm_exp._digits_problem(cfg)
    mixing = nets.random_regular(cfg["num_agents"], cfg["degree"], a.seed)
    key = jax.random.key(a.seed)
    init = problem.init(jax.random.fold_in(key, 1), a.chains, cfg["num_agents"])
    groups = min(comm_exp.GROUPS, a.chains)
    result = {"config": {"chains": a.chains, "steps": a.steps, "warm": a.warm,
                         "fixed_step": a.fixed_step, "options": options, "seed": a.seed,
                         "problem": problem.name, "batch_size": cfg["digits"]["batch_size"]},
              "rows": []}

    def save():
        a.out.write_text(json.dumps(result, indent=1) + "\n")

    if not a.no_fixed:
        t0 = time.perf_counter()
        trace = sample(DIGingSGLD(a.fixed_step), problem.potential, mixing, init, key, a.steps,
                       output=Output(thin=a.steps), on_divergence="flag")
        row = {"row": "fixed", "step_size": a.fixed_step, "seconds": time.perf_counter() - t0,
               **_scores(problem, trace, groups)}
        result["rows"].append(row)
        save()
        print(row, flush=True)

    warm = round(a.warm * a.steps)
    k_warm, k_run = jax.random.split(jax.random.fold_in(key, 2))
    t0 = time.perf_counter()
    sampler, state, report = dgsgld.warmup(
        DIGingSGLD, problem.potential, mixing, init, k_warm, warm, preconditioner="diagonal",
        sampling_steps=a.steps - warm, log=lambda s: print(s, flush=True), **options)
    print(report.explain(), flush=True)
    t_warm = time.perf_counter() - t0
    trace = sample(sampler, problem.potential, mixing, state, k_run, a.steps - warm,
                   output=Output(thin=a.steps - warm), on_divergence="flag")
    M = np.asarray(sampler.preconditioner.diagonal, np.float64)
    row = {"row": "adapted", "warmup_steps": warm, "sampling_steps": a.steps - warm,
           "step_size": report.step_size, "seconds": time.perf_counter() - t0,
           "warmup_seconds": t_warm, **_scores(problem, trace, groups),
           "stiffest": report.stiffest, "capped": report.capped,
           "curvature_range": list(report.curvature_range), "rhat_max": report.rhat_max,
           "verdict": report.verdict, "M_quantiles": list(np.quantile(M, [0, .01, .5, .99, 1])),
           "windows": [w._asdict() for w in report.windows]}
    result["rows"].append(row)
    save()
    print({k: v for k, v in row.items() if k != "windows"}, flush=True)


if __name__ == "__main__":
    main()
