"""The personalization experiment: shared and agent-private parameters.

``python -m experiments reproduce personalized --out DIR [--small]`` writes
``personalized.json`` and ``personalized.md``. Two parts:

1. **Hierarchical regression** (:func:`dgsgld.posteriors.targets.hierarchical_regression`: 8
   groups of 6-69 data, per-group intercept and slope under a shared hyperprior; stored NUTS
   reference of the pooled model). Each agent holds one group; its ``(a_g, b_g)`` are private
   (:func:`~dgsgld.posteriors.targets.hierarchical_private_potential`), the 5 hyperparameters
   shared. Every sampler of :data:`dgsgld.samplers.ALL` runs with full local batches (a ring
   of 8; the push-sum samplers on the directed one-peer exponential graph; centralized SGLD
   holds all private values itself), and, as the baseline, DIGing-SGLD on the fully shared
   flat model (every agent holds all 21 parameters). Scores against the reference, draws of
   every chain after burn-in: for the shared coordinates (their network average,
   :func:`dgsgld.evaluate.network_average`) and for each agent's own ``(a_g, b_g)`` (its own
   copy in the all-shared run), the standardized mean error ``|mean − m_ref| / sd_ref``
   (worst coordinate), the sd ratio farthest from 1 and the Monte Carlo standard error of a
   mean, ``1/√ESS`` in sds; bytes each agent sends per step
   (:class:`dgsgld.communication.Channel`, float32). The rows ``<sampler> (adapted)``
   (:data:`ADAPTED`) let :func:`dgsgld.warmup` choose the step and a block-diagonal
   preconditioner (its private block from the agents' private curvatures) in the burn-in's
   steps, then sample the rest of the same budget from the warmed-up state; their bytes per
   step are the sampling run's, the warm-up's own are given apart (``warmup_bytes``).
2. **Digits BNN** (:mod:`experiments.digits`' task: MLP 64-64-10, prior N(0, 1), 10 agents,
   IID and Dirichlet label skew 0.5 and 0.1), DIGing-SGLD with mini-batches of 16 on a ring:
   the fully shared model; a private output layer per agent; a private hidden layer per agent
   under a shared output layer (the second variant: with one hidden layer, the last hidden
   layer is the whole body); each agent alone (every leaf private: nothing sent); and
   centralized SGLD on the pooled data. The prior N(0, I) of the private leaves is each
   agent's own (``log_agent_prior``), that of the shared leaves is split over the agents. Each
   agent is scored on test data drawn from its own label distribution
   (:data:`TEST_DRAWS` test images resampled with class probabilities its training labels';
   centralized SGLD's one model is scored on every agent's draw): accuracy, NLL and 15-bin
   ECE of the agent's posterior predictive (mean of its samples' probabilities), averaged
   over agents; bytes per agent and step. Step sizes are fixed (the middle of the digits
   benchmark's grids), not tuned per method.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from dgsgld import evaluate
from dgsgld import networks as nets
from dgsgld.communication import Channel
from dgsgld.model import data as dd
from dgsgld.model.potential import Potential
from dgsgld.networks import directed
from dgsgld.posteriors import references
from dgsgld.posteriors.targets import get_target, hierarchical_private_potential
from dgsgld.runner.loop import Output, sample
from dgsgld.tuning.adaptation import warmup
from dgsgld.samplers import (
    DESGHMC,
    DESGLD,
    DULA,
    EXTRASGLD,
    SGLD,
    DIGingSGHMC,
    DIGingSGLD,
    PushDIGingSGLD,
    PushSumSGLD,
)

from . import digits as _digits

__all__ = ["ADAPTED", "DIGITS_SIZES", "HIERARCHICAL_SIZES", "TEST_DRAWS", "digits_personalized",
           "hierarchical_scores", "personalized_experiment", "table"]

#: ``(num_chains, num_steps, thin)`` of the hierarchical part, full and ``--small``.
HIERARCHICAL_SIZES = {"full": (32, 40_000, 20), "small": (8, 6_000, 10)}
#: ``(num_chains, num_steps, thin)`` of the digits part, full and ``--small``.
DIGITS_SIZES = {"full": (2, 3_000, 30), "small": (2, 600, 20)}
#: Test images drawn per agent from its own label distribution.
TEST_DRAWS = 2000

#: Step sizes of the hierarchical part (full local batches; the largest local curvature is
#: about ``n_g / σ² ≈ 280``): the decentralized samplers at ``η``; D-ULA at ``α = η / N``
#: (its agents step at ``Nα``) with consensus weight 0.5 (at 1 it is DE-SGLD at ``Nα``); the
#: SGHMC samplers at ``h = √η`` with friction ``0.5 / h`` (at ``1 / h`` the velocity forgets
#: itself each step and they are the SGLD samplers at ``h²``); centralized SGLD at ``η / 2``.
ETA = 1e-3


#: Samplers of the hierarchical part that also run after the decentralized warm-up.
ADAPTED = ("DIGing-SGLD", "DE-SGLD", "DIGing-SGHMC")


def _ring(n: int) -> np.ndarray:
    return np.asarray(nets.ring(n).matrices[0], np.float64)


def _hierarchical_samplers(num_agents: int) -> dict:
    h = float(np.sqrt(ETA))
    return {
        "DIGing-SGLD": DIGingSGLD(ETA), "DE-SGLD": DESGLD(ETA), "EXTRA-SGLD": EXTRASGLD(ETA),
        "DIGing-SGHMC": DIGingSGHMC(h, 0.5 / h), "DE-SGHMC": DESGHMC(h, 0.5 / h),
        "D-ULA": DULA(ETA / num_agents, 0.5), "SGLD": SGLD(ETA / 2),
        "Push-DIGing-SGLD": PushDIGingSGLD(ETA), "Push-Sum-SGLD": PushSumSGLD(ETA),
    }


def _moment_scores(draws: np.ndarray, ref: references.Reference, cols) -> dict:
    """Worst standardized mean error and sd ratio (farthest from 1) of ``draws (C, K, k)``
    (chains, kept draws) against the reference coordinates ``cols``, and the Monte Carlo
    standard error of a mean in posterior sds, ``1 / √ESS`` (smallest bulk ESS over
    ``cols``): mean errors within ~3 of it are noise."""
    mean, sd = ref.mean[cols], ref.sd[cols]
    flat = draws.reshape(-1, draws.shape[-1])
    err = np.abs(flat.mean(0) - mean) / sd
    ratio = flat.std(0, ddof=1) / sd
    ess = float(np.min(np.asarray(evaluate.ess(draws))))
    return {"mean_error": float(err.max()),
            "sd_ratio": float(ratio[np.argmax(np.abs(np.log(ratio)))]),
            "mcse": float(1.0 / np.sqrt(ess))}


def _worst(rows: list[dict]) -> dict:
    return {"mean_error": max(r["mean_error"] for r in rows),
            "sd_ratio": max((r["sd_ratio"] for r in rows), key=lambda v: abs(np.log(v))),
            "mcse": max(r["mcse"] for r in rows)}


def _shared_and_private(positions, pot, ref, own, decentralized: bool = True) -> dict:
    """A hierarchical run's scores: the shared hyperparameters (the network average of a
    decentralized run) and each agent's own ``(a_g, b_g)`` (columns ``own[i]``), worst agent."""
    shared = np.asarray(evaluate.network_average(positions, potential=pot)["shared"]
                        if decentralized else positions["shared"], np.float64)
    local = np.asarray(positions["local"], np.float64)                 # (C, K, N, 2)
    private = [_moment_scores(local[:, :, i], ref, list(cols)) for i, cols in enumerate(own)]
    return {"shared": _moment_scores(shared, ref, list(range(5))), "private": _worst(private)}


def hierarchical_scores(small: bool = False, seed: int = 0, logger=print) -> dict:
    """Part 1 (module docstring): ``{sampler: {"shared": ..., "private": ..., "bytes": ...}}``."""
    target = get_target("hierarchical_regression")
    ref = references.load_reference(target.name, fingerprint=target.fingerprint)
    num_chains, num_steps, thin = HIERARCHICAL_SIZES["small" if small else "full"]
    pot, groups = hierarchical_private_potential(target)
    n, num_groups = pot.num_agents, len(groups)
    own = [(5 + g, 5 + num_groups + g) for g in groups]          # agent i's (a_g, b_g) columns
    key = jax.random.key(seed)
    rng = np.random.default_rng(seed)
    output = Output(thin=thin, burn_in=num_steps // 2)
    out = {}
    ring = _ring(n)
    push = directed.directed_one_peer_exponential(n)
    for name, alg in _hierarchical_samplers(n).items():
        start = time.perf_counter()
        lead = (num_chains, n) if alg.decentralized else (num_chains,)
        init = {"shared": jnp.asarray(0.1 * rng.normal(size=(*lead, 5)), jnp.float32),
                "local": jnp.asarray(0.1 * rng.normal(size=(num_chains, n, 2)), jnp.float32)}
        network = None if not alg.decentralized else (
            push if getattr(alg, "network_kind", None) == "column_stochastic" else ring)
        channel = Channel() if alg.decentralized else None
        trace = sample(alg, pot, network, init, key, num_steps, output=output, channel=channel)
        sent = (None if channel is None else
                float(np.mean(channel.bytes_sent(trace.state, pot)) / num_steps))
        out[name] = {**_shared_and_private(trace.positions, pot, ref, own, alg.decentralized),
                     "bytes_per_step": sent, "seconds": round(time.perf_counter() - start, 1)}
        if logger:
            logger(f"hierarchical {name}: {out[name]}")
    # Baseline: every parameter shared (the flat model on the same one-group-per-agent split).
    start = time.perf_counter()
    flat = target.potential(n, "skew")
    alg = DIGingSGLD(ETA)
    init = jnp.asarray(0.1 * rng.normal(size=(num_chains, n, target.dim)), jnp.float32)
    channel = Channel()
    trace = sample(alg, flat, ring, init, key, num_steps, output=output, channel=channel)
    x = np.asarray(trace.positions, np.float64)                          # (C, K, N, 21)
    private = [_moment_scores(x[:, :, i][..., list(own[i])], ref, list(own[i]))
               for i in range(n)]
    out["DIGing-SGLD, all shared"] = {
        "shared": _moment_scores(x[..., :5].mean(2), ref, list(range(5))),
        "private": _worst(private),
        "bytes_per_step": float(np.mean(channel.bytes_sent(trace.state)) / num_steps),
        "seconds": round(time.perf_counter() - start, 1)}
    if logger:
        logger(f"hierarchical all shared: {out['DIGing-SGLD, all shared']}")
    for name in ADAPTED:  # the warm-up inside the burn-in's steps, then the rest of the budget
        start = time.perf_counter()
        # an instance with a counting channel: the warmed-up state carries its byte count
        template = eqx.tree_at(lambda a: a.channel, _hierarchical_samplers(n)[name], Channel(),
                               is_leaf=lambda v: v is None)
        init = {"shared": jnp.asarray(0.1 * rng.normal(size=(num_chains, n, 5)), jnp.float32),
                "local": jnp.asarray(0.1 * rng.normal(size=(num_chains, n, 2)), jnp.float32)}
        half = num_steps // 2
        alg, state, report = warmup(template, pot, ring, init, jax.random.fold_in(key, 1), half,
                                    sampling_steps=num_steps - half)
        before = np.asarray(alg.channel.bytes_sent(state, pot))
        trace = sample(alg, pot, ring, state, key, num_steps - half, output=Output(thin=thin))
        out[f"{name} (adapted)"] = {
            **_shared_and_private(trace.positions, pot, ref, own),
            "bytes_per_step": float(np.mean(np.asarray(alg.channel.bytes_sent(trace.state, pot))
                                            - before) / (num_steps - half)),
            "warmup_bytes": int(report.bytes_sent), "step_size": report.step_size,
            "parameter": report.parameter, "verdict": report.verdict,
            "seconds": round(time.perf_counter() - start, 1)}
        if logger:
            logger(f"hierarchical {name} (adapted): {out[f'{name} (adapted)']}")
    return {"sizes": {"chains": num_chains, "steps": num_steps, "thin": thin,
                      "burn_in": num_steps // 2}, "step_size": ETA, "scores": out,
            "reference": json.loads(ref.settings)}


# ----------------------------------------------------------------------------- digits


def _own_test_sets(task, split: dd.AgentSplit, seed: int) -> np.ndarray:
    """``(N, TEST_DRAWS)`` test indices per agent, drawn with replacement so that the labels
    follow the agent's training label proportions."""
    labels = np.asarray(task.test[1])
    train = np.asarray(task.train[1])
    rng = np.random.default_rng(seed)
    out = []
    for idx in split.indices:
        prop = np.bincount(train[np.asarray(idx)], minlength=10) / len(idx)
        per = np.bincount(labels, minlength=10)
        weights = prop[labels] / per[labels]
        out.append(rng.choice(labels.size, TEST_DRAWS, p=weights / weights.sum()))
    return np.stack(out)


def _scores(log_pred, labels) -> dict:
    return {"accuracy": float(evaluate.accuracy(log_pred, labels)),
            "nll": float(evaluate.nll(log_pred, labels)),
            "ece": float(evaluate.ece(log_pred, labels))}


def _head_mask(params, which: str):
    """Private-leaf mask of the MLP's parameters: its output layer (``"output"``) or its
    hidden layer (``"hidden"``); ``"none"``/``"all"``: none/every leaf."""
    def layer_mask(k):
        return jax.tree.map(lambda _: which in ("all",) or (
            which == "output" and k == len(params.layers) - 1) or (which == "hidden" and k == 0),
            params.layers[k])

    return eqx.tree_at(lambda p: p.layers, jax.tree.map(lambda _: False, params),
                       tuple(layer_mask(k) for k in range(len(params.layers))))


def _split_prior(mask, prior_std: float):
    """``(log p(φ), log p(θ_i))`` of the N(0, prior_std² I) prior split by the private
    ``mask``: the shared leaves' term (split over the agents by the potential) and each agent's
    private leaves' term (its own, undivided)."""
    flags = jax.tree.leaves(mask)

    def term(params, private: bool):
        leaves = jax.tree.leaves(params)
        return -0.5 * sum((jnp.sum(leaf**2) for leaf, f in zip(leaves, flags) if f == private),
                          jnp.zeros(())) / prior_std**2

    return (lambda params: term(params, False)), (lambda params: term(params, True))


def digits_personalized(small: bool = False, seed: int = 0, logger=print) -> dict:
    """Part 2 (module docstring): ``{split: {method: scores}}``."""
    task = _digits.digits_task(seed)
    config = _digits.DIGITS_SMALL if small else _digits.DIGITS
    config = config._replace(seed=seed)
    splits = _digits.make_splits(task, config)
    num_chains, num_steps, thin = DIGITS_SIZES["small" if small else "full"]
    n, b = config.num_agents, config.batch_size
    eta, eta_sgld = 1e-3, 1e-4      # the middles of the digits benchmark's grids
    template = task.init(jax.random.key(0))
    keys = jax.random.split(jax.random.key(seed + 1), num_chains * n).reshape(num_chains, n)
    init = jax.vmap(jax.vmap(task.init))(keys)
    test_x = jnp.asarray(task.test[0])
    test_y = np.asarray(task.test[1])
    output = Output(thin=thin, burn_in=num_steps // 2)
    mixing = _ring(n)
    methods = {"shared": ("none", mixing), "private output layer": ("output", mixing),
               "private hidden layer": ("hidden", mixing), "each agent alone": ("all", mixing)}
    result = {}
    for split_name, split in splits.items():
        own = _own_test_sets(task, split, seed + 3)
        rows = {}
        for name, (which, W) in methods.items():
            start = time.perf_counter()
            mask = _head_mask(template, which)
            shared_prior, agent_prior = _split_prior(mask, prior_std=task.extra["prior_std"])
            pot = Potential(task.log_likelihood, shared_prior, split.data, b, mask=split.mask,
                            private=None if which == "none" else mask,
                            log_agent_prior=None if which == "none" else agent_prior)
            channel = Channel()
            trace = sample(DIGingSGLD(eta), pot, W, init, jax.random.key(seed + 2), num_steps,
                           output=output, channel=channel)
            # (C, K, N, test, 10) -> each agent's predictive on the test images
            log_probs = jax.vmap(jax.vmap(jax.vmap(lambda p: task.outputs(p, test_x))))(
                trace.positions)
            agent_pred = evaluate.log_predictive(
                jnp.moveaxis(log_probs, 2, 0).reshape(n, -1, *log_probs.shape[-2:]), axis=1)
            per_agent = [_scores(agent_pred[i][own[i]], test_y[own[i]]) for i in range(n)]
            rows[name] = {k: float(np.mean([r[k] for r in per_agent])) for k in per_agent[0]}
            rows[name]["worst_agent_accuracy"] = float(min(r["accuracy"] for r in per_agent))
            rows[name]["bytes_per_step"] = float(np.mean(channel.bytes_sent(trace.state, pot))
                                                 / num_steps)
            rows[name]["seconds"] = round(time.perf_counter() - start, 1)
            if logger:
                logger(f"digits {split_name} {name}: {rows[name]}")
        # Centralized SGLD on the pooled training data: one model for every agent's test draw.
        start = time.perf_counter()
        x_tr, y_tr = task.train
        pooled = Potential(task.log_likelihood, task.log_prior,
                           (jnp.asarray(x_tr)[None], jnp.asarray(y_tr)[None]), n * b)
        trace = sample(SGLD(eta_sgld), pooled, None, jax.tree.map(lambda v: v[:, 0], init),
                       jax.random.key(seed + 2), num_steps, output=output)
        log_probs = jax.vmap(jax.vmap(lambda p: task.outputs(p, test_x)))(trace.positions)
        pred = evaluate.log_predictive(log_probs.reshape(-1, *log_probs.shape[-2:]), axis=0)
        per_agent = [_scores(pred[own[i]], test_y[own[i]]) for i in range(n)]
        rows["centralized pooled"] = {k: float(np.mean([r[k] for r in per_agent]))
                                      for k in per_agent[0]}
        rows["centralized pooled"]["worst_agent_accuracy"] = float(
            min(r["accuracy"] for r in per_agent))
        rows["centralized pooled"]["bytes_per_step"] = None
        rows["centralized pooled"]["seconds"] = round(time.perf_counter() - start, 1)
        if logger:
            logger(f"digits {split_name} centralized: {rows['centralized pooled']}")
        result[split_name] = rows
    return {"sizes": {"chains": num_chains, "steps": num_steps, "thin": thin,
                      "burn_in": num_steps // 2, "batch_size": b, "agents": n},
            "step_size": {"DIGing-SGLD": eta, "SGLD": eta_sgld}, "test_draws": TEST_DRAWS,
            "splits": result}


# ----------------------------------------------------------------------------- output


def table(result: dict) -> str:
    """Markdown tables of both parts."""
    lines = []
    h = result.get("hierarchical")
    if h is not None:
        s = h["sizes"]
        lines += ["## Hierarchical regression (8 agents, one group each)", "",
                  (f"{s['chains']} chains x {s['steps']} steps (burn-in {s['burn_in']}, thin "
                   f"{s['thin']}), full local batches, against the stored NUTS reference. "
                   "Shared: the network average of the 5 hyperparameters; private: each "
                   "agent's own (a_g, b_g), worst agent. Mean err: worst |mean - m_ref| / "
                   "sd_ref; MCSE: its Monte Carlo standard error 1/sqrt(ESS) (errors within "
                   "~3 MCSE are noise); sd ratio: farthest from 1. Rows '(adapted)': "
                   "dgsgld.warmup in the burn-in's steps, then the rest from its state."), "",
                  ("| sampler | shared mean err (MCSE) | shared sd ratio | private mean err "
                   "(MCSE) | private sd ratio | bytes / agent / step |"),
                  "|---|---:|---:|---:|---:|---:|"]
        for name, r in h["scores"].items():
            sent = "—" if r["bytes_per_step"] is None else f"{r['bytes_per_step']:.0f}"
            lines.append(f"| {name} | {r['shared']['mean_error']:.3f} "
                         f"({r['shared']['mcse']:.3f}) | {r['shared']['sd_ratio']:.3f} | "
                         f"{r['private']['mean_error']:.3f} ({r['private']['mcse']:.3f}) | "
                         f"{r['private']['sd_ratio']:.3f} | {sent} |")
        lines.append("")
    d = result.get("digits")
    if d is not None:
        s = d["sizes"]
        lines += ["## Digits BNN, each agent on test data of its own label distribution", "",
                  (f"{s['agents']} agents, DIGing-SGLD on a ring (η = "
                   f"{d['step_size']['DIGing-SGLD']}), mini-batches of {s['batch_size']}, "
                   f"{s['chains']} chains x {s['steps']} steps (burn-in {s['burn_in']}); "
                   f"centralized SGLD at η = {d['step_size']['SGLD']}. Means over agents."), ""]
        for split, rows in d["splits"].items():
            lines += [f"### {split}", "",
                      "| method | accuracy | worst agent | NLL | ECE | bytes / agent / step |",
                      "|---|---:|---:|---:|---:|---:|"]
            for name, r in rows.items():
                sent = "—" if r["bytes_per_step"] is None else f"{r['bytes_per_step']:.0f}"
                lines.append(f"| {name} | {r['accuracy']:.3f} | {r['worst_agent_accuracy']:.3f}"
                             f" | {r['nll']:.3f} | {r['ece']:.3f} | {sent} |")
            lines.append("")
    return "\n".join(lines)


def personalized_experiment(out, *, small: bool = False, seed: int = 0, logger=print,
                            parts=("hierarchical", "digits")) -> dict:
    """Run the parts, write ``personalized.json`` and ``personalized.md`` to ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"small": small, "seed": seed}
    if "hierarchical" in parts:
        result["hierarchical"] = hierarchical_scores(small, seed, logger)
    if "digits" in parts:
        result["digits"] = digits_personalized(small, seed, logger)
    (out / "personalized.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "personalized.md").write_text(table(result) + "\n")
    return result
