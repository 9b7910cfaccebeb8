"""The communication experiment: W2 to the exact posterior against bytes sent per agent.

``dgsgld reproduce communication --out DIR [--small]``. The paper's Bayesian linear regression
(§4.1: ``N = 20`` agents, ``d = 6``, full local batches) on a static random 4-regular graph
(four out-neighbours per agent, Metropolis–Hastings weights), in its i.i.d. split and the
same data sorted by response (heterogeneous agents). DIGing-SGLD against DE-SGLD, each with exact float32 messages
and with every compressor of :mod:`dgsgld.communication`, with and without CHOCO error
feedback (``consensus`` γ fixed, not tuned), and exact messages every ``τ`` = 2 and 5 steps
(local steps between). One step size for every row (not tuned either).

Metric: each agent's W2 between the Gaussian fit of its ``C`` chains at iteration ``T`` and the
exact posterior, averaged over agents (:func:`dgsgld.metrics.per_agent_w2`; its Monte Carlo
floor at ``C`` chains is the exact rows' value, roughly). Bytes: what each agent sent over the
``T`` steps (:meth:`dgsgld.communication.Channel.bytes_sent`), the same for every agent of a
regular graph. Rows and the configuration go to ``communication.json``, the table to
``communication.md``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

from .. import communication as comm
from .. import metrics
from .. import networks as nets
from ..run import Output, sample
from ..samplers import de_sgld, diging_sgld
from .problems import linear_regression_problem, split_potentials

__all__ = ["channels", "communication_experiment", "compressors"]


def compressors(small: bool) -> dict:
    """Label -> compressor for messages of ``d = 6`` entries: one ratio each with ``small``,
    three otherwise."""
    ks = (2,) if small else (1, 2, 3)         # of d = 6 entries
    levels = (4,) if small else (1, 4, 16)
    out = {"exact": comm.identity()}
    out |= {f"top_k(k={k})": comm.top_k(k / 6) for k in ks}
    out |= {f"random_k(k={k})": comm.random_k(k / 6) for k in ks}
    out |= {f"quantize({s})": comm.quantize(s) for s in levels}
    out["sign"] = comm.sign()
    return out


def channels(small: bool, consensus: float) -> list[tuple[str, comm.Channel]]:
    """``(label, channel)`` of every row: exact messages every step and every ``τ`` steps
    (local steps between), and each compressor without and with error feedback."""
    out = [("exact", comm.Channel())]
    out += [(f"exact, every {tau}", comm.Channel(every=tau)) for tau in (2, 5)]
    for label, compressor in compressors(small).items():
        if label != "exact":
            out += [(label, comm.Channel(compressor)),
                    (label, comm.Channel(compressor, error_feedback=True,
                                         consensus=consensus))]
    return out


def _config(small: bool, seed: int) -> dict:
    return {"num_agents": 20, "num_chains": 64 if small else 200,
            "num_steps": 4000 if small else 8000, "step_size": 0.001, "consensus": 0.3,
            "seed": seed}


def communication_experiment(out: str | Path, *, small: bool = False, seed: int = 0,
                             logger: Callable | None = print) -> list[dict]:
    """Run every row, write ``communication.json`` and ``communication.md`` into ``out``, and
    return the rows (dicts: split, method, compressor, error_feedback, bytes_per_agent,
    bytes_per_agent_step, w2 (``None`` where a chain diverged), diverged)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = _config(small, seed)
    problem = linear_regression_problem(seed, num_agents=cfg["num_agents"])
    mean, cov = problem.posterior_mean, problem.posterior_cov
    mixing = nets.random_regular(cfg["num_agents"], 4, seed)
    key = jax.random.key(seed)
    init = jax.random.normal(jax.random.fold_in(key, 1),
                             (cfg["num_chains"], cfg["num_agents"], problem.dim))
    steps = cfg["num_steps"]
    keep = Output(thin=steps, positions=True)
    rows, start = [], time.perf_counter()
    for split, potential in split_potentials(problem).items():
        for method, make in (("DIGing-SGLD", diging_sgld), ("DE-SGLD", de_sgld)):
            for label, channel in channels(small, cfg["consensus"]):
                ef = channel.error_feedback
                trace = sample(make(cfg["step_size"]), potential, mixing, init, key, steps,
                               output=keep, channel=channel, on_divergence="flag")
                sent = channel.bytes_sent(trace.state)        # (C, N), equal over chains
                diverged = bool(np.asarray(trace.diverged).any())
                w2 = (None if diverged else float(np.mean(np.asarray(
                    metrics.per_agent_w2(trace.positions[:, -1:], mean, cov)))))
                row = {"split": split, "method": method, "compressor": label,
                       "error_feedback": ef, "bytes_per_agent": float(sent.mean()),
                       "bytes_per_agent_step": float(sent.mean()) / steps, "w2": w2,
                       "diverged": diverged}
                rows.append(row)
                if logger is not None:
                    logger(f"{split:6s} {method:11s} {label:14s} EF={ef!s:5s} "
                           f"bytes/agent/step {row['bytes_per_agent_step']:7.1f}  "
                           f"W2 {_w2(w2)}")
    cfg["seconds"] = time.perf_counter() - start
    (out / "communication.json").write_text(json.dumps({"config": cfg, "rows": rows},
                                                       indent=1))
    (out / "communication.md").write_text(table(rows))
    return rows


def table(rows: list[dict]) -> str:
    """Markdown table: one line per split, compressor and error feedback; W2 per method."""
    lines = ["| split | compressor | EF | bytes/agent/step | W2 DIGing-SGLD | W2 DE-SGLD |",
             "|---|---|---|---:|---:|---:|"]
    index = {(r["split"], r["method"], r["compressor"], r["error_feedback"]): r for r in rows}
    seen = []
    for r in rows:
        k = (r["split"], r["compressor"], r["error_feedback"])
        if k in seen:
            continue
        seen.append(k)
        w2 = [_w2(index[(k[0], m, k[1], k[2])]["w2"]) if (k[0], m, k[1], k[2]) in index
              else "" for m in ("DIGing-SGLD", "DE-SGLD")]
        lines.append(f"| {k[0]} | {k[1]} | {'yes' if k[2] else 'no'} | "
                     f"{r['bytes_per_agent_step']:.1f} | {w2[0]} | {w2[1]} |")
    return "\n".join(lines) + "\n"


def _w2(w2) -> str:
    """``None`` (or NaN): the run diverged."""
    return "diverged" if w2 is None or np.isnan(w2) else f"{w2:.4f}"
