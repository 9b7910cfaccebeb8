"""Real data past the paper: Bayesian models across agents with label-skewed data.

Two tasks on data bundled with scikit-learn (no download):

* **digits** (1 797 8x8 images, 10 classes): a Bayesian MLP ``eqx.nn.MLP`` 64-64-10 (one hidden
  layer of 64 ReLU units; 4 810 parameters) with prior ``N(0, σ² I)``, ``σ = 1``, and a softmax
  likelihood; scored by test accuracy, NLL of the posterior predictive, 15-bin ECE, Brier score
  and the AUROC of predictive entropy for telling the test images from out-of-distribution ones:
  the same test images with their 64 pixels permuted by one fixed permutation (seed stated in
  the output);
* **diabetes** (442 x 10, regression): a Bayesian linear model ``y ~ N(w·x + b, σ²)`` with priors
  ``w, b ~ N(0, 1)``, ``log σ ~ N(0, 1)`` on the standardized target; scored by test RMSE and the
  NLL of the Gaussian-mixture predictive (both in the target's original units).

Protocol (both tasks): features standardized with the training statistics; an 80/20 stratified
train/test split, then 20 % of train held out as a validation split for tuning (strata: the
class, or the target's quintile); the remaining training data split across ``N = 10`` agents
IID, and with Dirichlet label skew ``α = 0.5`` and ``α = 0.1`` (for the regression target the
"labels" are its quintiles, :func:`dgsgld.model.data.quantile_bins`). Methods: DIGing-SGLD and DE-SGLD
on the time-varying barbell (:func:`dgsgld.networks.barbell`) and on a static ring; centralized
SGLD on the pooled data (one agent holding all of it) as the reference; and a deterministic
baseline: each agent alone fits a MAP estimate with Adam (``optax``), scored alone and as an
ensemble of the ``N`` agents (mean of their predictive probabilities).

Tuning and runs: for each method and network ONE compiled call runs every step size of a grid
× every split × every chain × every agent × every iteration (``vmap`` over splits and step
sizes around :func:`dgsgld.sample`); the first half of the iterations is burn-in; the step size
of each (method, network, split) is the grid point with the lowest validation NLL (network
average of the agents' own predictives), and the test scores reported are that run's. The
predictive of an agent averages the probabilities of its own samples: every chain at every kept
iteration after burn-in. "network" scores pool every agent's samples. The MAP baseline picks its
number of Adam steps (a checkpoint) by the same validation NLL.

    python -m experiments reproduce digits --out DIR [--small]
"""

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from dgsgld import evaluate, networks
from dgsgld.model import data as dd
from dgsgld.model.potential import Potential, stack_potentials
from dgsgld.runner.loop import Output
from dgsgld.samplers import DESGLD, SGLD, DIGingSGLD
from dgsgld.tuning import grid_run

__all__ = ["BenchmarkConfig", "DIGITS", "DIGITS_SMALL", "DIABETES", "DIABETES_SMALL",
           "digits_benchmark", "diabetes_benchmark", "reproduce_digits", "results_table"]


class BenchmarkConfig(NamedTuple):
    """Sizes of one benchmark run (defaults: the documented ``reproduce digits`` size).

    ``grid`` is the decentralized step-size grid ``(low, high, num)``, log-spaced, and
    ``sgld_grid`` centralized SGLD's (its step on the pooled potential moves like the network
    average of a decentralized sampler with a step ``num_agents`` times larger, see
    :mod:`dgsgld.samplers.sgld`; its pooled mini-batch of ``num_agents * batch_size`` is less
    noisy, so its grid reaches higher).
    ``batch_size=None`` means full local batches.
    """

    num_agents: int = 10
    alphas: tuple = (0.5, 0.1)
    num_chains: int = 2
    num_steps: int = 1000
    thin: int = 50
    batch_size: int | None = 16
    grid: tuple = (3e-4, 3e-3, 3)
    sgld_grid: tuple = (1e-4, 1e-3, 3)
    map_steps: int = 400
    map_every: int = 40
    learning_rate: float = 3e-3
    barbell_period: int = 50
    seed: int = 0


DIGITS = BenchmarkConfig()
DIGITS_SMALL = BenchmarkConfig(num_steps=200, thin=50, grid=(1e-3, 3e-3, 2),
                               sgld_grid=(1e-4, 3e-4, 2), map_steps=80, map_every=40)
DIABETES = BenchmarkConfig(num_chains=8, num_steps=2000, thin=100, batch_size=None,
                           grid=(2.5e-4, 2e-3, 4), sgld_grid=(2.5e-5, 2e-4, 4), map_steps=400,
                           map_every=40, learning_rate=1e-2)
DIABETES_SMALL = DIABETES._replace(num_chains=4, num_steps=400, grid=(5e-4, 1e-3, 2),
                                   sgld_grid=(5e-5, 1e-4, 2),
                                   map_steps=80)


# ----------------------------------------------------------------------------- tasks


class Task(NamedTuple):
    """A model and its data: what the shared protocol needs."""

    name: str
    init: Callable  # key -> params pytree
    log_likelihood: Callable  # (params, (x, y)) -> scalar
    log_prior: Callable  # params -> scalar
    outputs: Callable  # (params, x (P, F)) -> per-point output pytree (classes: log-probs)
    train: tuple  # (x, y) pooled training data (validation removed)
    val: tuple
    test: tuple
    strata: np.ndarray  # labels used by the splitters (classes or target quintiles)
    extra: dict  # task facts recorded in the output

    def potential(self, split: dd.AgentSplit, batch_size: int | None) -> Potential:
        """The agents' potentials on ``split`` (padding rows masked out), with mini-batches
        of ``batch_size`` (``None``: full local batches)."""
        return Potential(self.log_likelihood, self.log_prior, split.data, batch_size,
                         mask=split.mask)


def _standardize(train_x, *others):
    mean, std = train_x.mean(axis=0), train_x.std(axis=0)
    std = np.where(std > 0, std, 1.0)  # constant pixels stay zero
    return [((x - mean) / std).astype(np.float32) for x in (train_x, *others)]


def _sklearn(module: str):
    """A scikit-learn module, or a ValueError saying how to install it."""
    import importlib

    try:
        return importlib.import_module(f"sklearn.{module}")
    except ImportError as err:
        raise ValueError(
            "the digits/diabetes benchmarks load data bundled with scikit-learn; install it "
            "with `pip install 'dgsgld[examples]'`."
        ) from err


def _three_way(x, y, strata, seed):
    train_test_split = _sklearn("model_selection").train_test_split

    x_tr, x_te, y_tr, y_te, s_tr, _ = train_test_split(
        x, y, strata, test_size=0.2, stratify=strata, random_state=seed)
    x_tr, x_va, y_tr, y_va, s_tr, _ = train_test_split(
        x_tr, y_tr, s_tr, test_size=0.2, stratify=s_tr, random_state=seed + 1)
    return (x_tr, y_tr, s_tr), (x_va, y_va), (x_te, y_te)


def digits_task(seed: int = 0, prior_std: float = 1.0, width: int = 64) -> Task:
    """The digits MLP task; the OOD set is the test images with permuted pixels."""
    x, y = _sklearn("datasets").load_digits(return_X_y=True)
    (x_tr, y_tr, _), (x_va, y_va), (x_te, y_te) = _three_way(x, y, y, seed)
    x_tr, x_va, x_te = _standardize(x_tr, x_va, x_te)
    ood_seed = seed + 2
    x_ood = x_te[:, np.random.default_rng(ood_seed).permutation(x_te.shape[1])]
    make = lambda key: eqx.nn.MLP(64, 10, width, 1, key=key)  # noqa: E731
    static = eqx.partition(make(jax.random.key(0)), eqx.is_inexact_array)[1]

    def init(key):
        return eqx.filter(make(key), eqx.is_inexact_array)

    def log_probs(params, x):
        return jax.nn.log_softmax(jax.vmap(eqx.combine(params, static))(x), axis=-1)

    def log_likelihood(params, datum):
        x, label = datum
        return jax.nn.log_softmax(eqx.combine(params, static)(x))[label]

    def log_prior(params):
        return -0.5 * sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(params)) / prior_std**2

    i32 = lambda a: np.asarray(a, np.int32)  # noqa: E731
    extra = {"ood": {"x": x_ood, "what": "test images, pixels permuted", "seed": ood_seed},
             "model": f"eqx.nn.MLP 64-{width}-10, ReLU", "prior_std": prior_std,
             "num_params": int(sum(leaf.size for leaf in jax.tree.leaves(init(jax.random.key(0)))))}
    return Task("digits", init, log_likelihood, log_prior, log_probs, (x_tr, i32(y_tr)),
                (x_va, i32(y_va)), (x_te, i32(y_te)), i32(y_tr), extra)


def diabetes_task(seed: int = 0) -> Task:
    """Bayesian linear regression on the standardized diabetes target, ``log σ`` sampled."""
    x, y = _sklearn("datasets").load_diabetes(return_X_y=True)
    strata = dd.quantile_bins(y, 5)
    (x_tr, y_tr, s_tr), (x_va, y_va), (x_te, y_te) = _three_way(x, y, strata, seed)
    x_tr, x_va, x_te = _standardize(x_tr, x_va, x_te)
    y_mean, y_std = float(y_tr.mean()), float(y_tr.std())
    scale = lambda t: ((t - y_mean) / y_std).astype(np.float32)  # noqa: E731

    def init(key):
        return {"w": 0.1 * jax.random.normal(key, (10,)), "b": jnp.zeros(()),
                "log_sigma": jnp.zeros(())}

    def outputs(params, x):  # per-point predictive mean and std (standardized units)
        return x @ params["w"] + params["b"], jnp.exp(params["log_sigma"]) * jnp.ones(x.shape[0])

    def log_likelihood(params, datum):
        x, t = datum
        z = (t - x @ params["w"] - params["b"]) * jnp.exp(-params["log_sigma"])
        return -0.5 * z**2 - params["log_sigma"]

    def log_prior(params):
        return -0.5 * sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(params))

    extra = {"y_mean": y_mean, "y_std": y_std,
             "model": "Bayesian linear regression, w, b, log sigma ~ N(0, 1)"}
    return Task("diabetes", init, log_likelihood, log_prior, outputs, (x_tr, scale(y_tr)),
                (x_va, scale(y_va)), (x_te, scale(y_te)), s_tr, extra)


# ----------------------------------------------------------------------------- splits


def make_splits(task: Task, config: BenchmarkConfig) -> dict[str, dd.AgentSplit]:
    """IID and Dirichlet splits of the training data, padded to one common local size."""
    n, min_size = config.num_agents, config.batch_size or 1
    seeds = {"iid": config.seed + 10}
    seeds.update({f"dirichlet({a})": config.seed + 11 + i for i, a in enumerate(config.alphas)})

    def build(local_size=None):
        out = {"iid": dd.split_iid(task.train, n, seed=seeds["iid"], local_size=local_size)}
        for a in config.alphas:
            name = f"dirichlet({a})"
            out[name] = dd.split_dirichlet(task.train, task.strata, n, a, seed=seeds[name],
                                           min_size=min_size, local_size=local_size)
        return out

    first = build()
    return build(max(int(s.mask.shape[1]) for s in first.values()))


def _stack(trees):
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees)


# ----------------------------------------------------------------------------- sampling


def _eval_points(task: Task) -> np.ndarray:
    parts = [task.val[0], task.test[0]]
    if "ood" in task.extra:
        parts.append(task.extra["ood"]["x"])
    return np.concatenate(parts)


def _ensemble_fn(task: Task, decentralized: bool):
    """``ensemble_fn`` for :func:`dgsgld.sample`: every agent's outputs on the evaluation points.

    Classification: the log of the chains' mean probability, ``(N, P, K)``; regression: each
    chain's predictive mean and std, ``(C, N, P)`` each (the mixture is formed afterwards).
    """
    points = jnp.asarray(_eval_points(task))
    classify = task.name == "digits"

    def fn(states):
        out = lambda p: task.outputs(p, points)  # noqa: E731
        values = jax.vmap(jax.vmap(out) if decentralized else out)(states.position)
        if not decentralized:
            values = jax.tree.map(lambda v: v[:, None], values)  # a single "agent"
        if classify:
            return evaluate.log_predictive(values, axis=0)
        return values

    return fn


def _map_baseline(task: Task, potentials, init, config: BenchmarkConfig):
    """Each agent alone: Adam on ``-(local log-likelihood + log prior)`` (its own MAP), full
    local batches; outputs on the evaluation points every ``map_every`` steps.

    Returns outputs with leaves ``(S, checkpoints, N, ...)``.
    """
    points = jnp.asarray(_eval_points(task))
    optimizer = optax.adam(config.learning_rate)

    def loss(params, agent_data, weights):
        ll = jax.vmap(task.log_likelihood, (None, 0))(params, agent_data)
        return -(jnp.sum(weights * ll) + task.log_prior(params))

    def agent(params, agent_data, weights):
        def step(carry, _):
            params, state = carry
            grads = jax.grad(loss)(params, agent_data, weights)
            updates, state = optimizer.update(grads, state, params)
            return (optax.apply_updates(params, updates), state), None

        def block(carry, _):
            carry = jax.lax.scan(step, carry, None, length=config.map_every)[0]
            return carry, task.outputs(carry[0], points)

        _, outs = jax.lax.scan(block, (params, optimizer.init(params)), None,
                               length=config.map_steps // config.map_every)
        return outs

    @eqx.filter_jit
    def run(potentials, init):
        def one_split(pot):
            weights = pot.mask.astype(jnp.float32)
            outs = jax.vmap(agent)(init, pot.data, weights)  # (N, checkpoints, ...)
            return jax.tree.map(lambda v: jnp.moveaxis(v, 0, 1), outs)

        return jax.vmap(one_split)(potentials)

    return run(potentials, init)


# ----------------------------------------------------------------------------- scoring


def _classification_scores(log_pred, labels, ood_log_pred=None) -> dict:
    """Scores of one log predictive ``(P, K)`` (arrays; vmap-able over agents)."""
    out = {
        "accuracy": evaluate.accuracy(log_pred, labels),
        "nll": evaluate.nll(log_pred, labels),
        "ece": evaluate.ece(log_pred, labels),
        "brier": evaluate.brier(log_pred, labels),
    }
    if ood_log_pred is not None:
        out["ood_auroc"] = evaluate.auroc(evaluate.entropy(log_pred),
                                          evaluate.entropy(ood_log_pred))
    return out


def _regression_scores(means, stds, targets) -> dict:
    """RMSE and mixture NLL (standardized units) of samples ``(S, P)``; vmap-able."""
    return {"rmse": evaluate.rmse(means, targets),
            "nll": evaluate.gaussian_nll(means, stds, targets)}


@jax.jit
def _all_scores(outs, targets, ood):
    """Per-agent (leading axis) and pooled scores, in one compiled call.

    Classes: ``outs (N, P, K)`` log predictives, ``ood (N, P', K)`` or ``None``; regression:
    ``outs = (means, stds)`` leaves ``(N, S, P)``.
    """
    if isinstance(outs, tuple):
        agents = jax.vmap(_regression_scores, (0, 0, None))(*outs, targets)
        flat = [v.reshape(-1, v.shape[-1]) for v in outs]
        return agents, _regression_scores(*flat, targets)
    agents = jax.vmap(_classification_scores, (0, None, None if ood is None else 0))(
        outs, targets, ood)
    pool = lambda lp: None if lp is None else evaluate.log_predictive(lp, axis=0)  # noqa: E731
    return agents, _classification_scores(pool(outs), targets, pool(ood))


def _original_units(scores: dict, task: Task) -> dict:
    """Regression scores from the standardized target back to its original units."""
    y_std = task.extra["y_std"]
    return dict(scores, rmse=scores["rmse"] * y_std, nll=scores["nll"] + math.log(y_std))


class _Scorer:
    """Scores agents' predictives on validation / test / OOD slices of the evaluation points."""

    def __init__(self, task: Task):
        self.task = task
        nv, nt = len(task.val[1]), len(task.test[1])
        self.slices = {"val": slice(0, nv), "test": slice(nv, nv + nt),
                       "ood": slice(nv + nt, None)}
        self.classify = task.name == "digits"

    def agent_outputs(self, outs, which: str):
        """Per agent: log predictive ``(N, P, K)`` (classes) or ``(means, stds)`` ``(N, S, P)``."""
        sl = self.slices[which]
        if self.classify:
            return outs[..., sl, :]
        return tuple(v[..., sl] for v in outs)

    def score(self, outs, which="test") -> dict:
        """Scores for agent-level ``outs`` (classes: ``(N, P, K)`` log predictive; regression:
        ``(means, stds)`` with leaves ``(N, S, P)``): per agent, agent mean, network pooled."""
        task = self.task
        targets = task.val[1] if which == "val" else task.test[1]
        ood = None
        if self.classify and which == "test":
            ood = jnp.asarray(self.agent_outputs(outs, "ood"))
        per_agent, pooled = jax.tree.map(
            np.asarray, _all_scores(jax.tree.map(jnp.asarray, self.agent_outputs(outs, which)),
                                    jnp.asarray(targets), ood))
        if not self.classify:
            per_agent, pooled = (_original_units(d, task) for d in (per_agent, pooled))
        pooled = {k: float(v) for k, v in pooled.items()}
        agents = [{k: float(v[i]) for k, v in per_agent.items()}
                  for i in range(len(per_agent["nll"]))]
        mean = {k: float(np.mean([a[k] for a in agents])) for k in agents[0]}
        worst = {k: float(max(a[k] for a in agents) if k != "accuracy"
                          else min(a[k] for a in agents)) for k in agents[0]}
        return {"agents": agents, "agent_mean": mean, "agent_worst": worst, "network": pooled}


def _post_burn_in(ensemble, classify: bool, burn: int):
    """Agent-level outputs from the kept iterations ``burn..`` of one grid run.

    Classes: ``ensemble (K, N, P, C)`` log chain-means -> ``(N, P, C)``; regression: leaves
    ``(K, C, N, P)`` -> ``(N, K' C, P)``.
    """
    if classify:
        return np.asarray(evaluate.log_predictive(ensemble[burn:], axis=0))
    return tuple(np.moveaxis(np.asarray(v[burn:]).reshape(-1, *v.shape[2:]), 1, 0)
                 for v in ensemble)


def _curves(ensemble, scorer: _Scorer, iterations) -> dict:
    """Agent-mean test accuracy and NLL (digits) or RMSE and NLL (diabetes) against iterations:
    at kept iteration ``k`` the predictive of the kept iterations ``k // 2 .. k`` (the first half
    discarded as burn-in, as for the final scores, which are the last point)."""
    task = scorer.task
    classify = scorer.classify
    rows = []
    for k in range(len(iterations)):
        window = jax.tree.map(lambda v: v[k // 2 : k + 1], ensemble)  # noqa: B023
        outs = _post_burn_in(window, classify, 0)
        per_agent, _ = _all_scores(jax.tree.map(jnp.asarray, scorer.agent_outputs(outs, "test")),
                                   jnp.asarray(task.test[1]), None)
        if not classify:
            per_agent = _original_units(per_agent, task)
        rows.append({key: float(np.mean(v)) for key, v in per_agent.items()})
    first = "accuracy" if classify else "rmse"
    return {"iteration": [int(i) for i in iterations], first: [r[first] for r in rows],
            "nll": [r["nll"] for r in rows]}


# ----------------------------------------------------------------------------- benchmark


def run_benchmark(task: Task, config: BenchmarkConfig, logger=print) -> dict:
    """Run every method on every split; returns the JSON-ready result dictionary."""
    log = logger or (lambda *a: None)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    n = config.num_agents
    splits = make_splits(task, config)
    split_names = list(splits)
    potentials = stack_potentials([task.potential(s, config.batch_size)
                                   for s in splits.values()])
    pooled = Potential(task.log_likelihood, task.log_prior,
                       jax.tree.map(lambda a: jnp.asarray(a)[None], task.train),
                       None if config.batch_size is None else n * config.batch_size)
    pooled = _stack([pooled])
    # Every method and grid point runs with the same run key and starting points (common
    # random numbers, as in dgsgld.tuning), so differences between them are not masked
    # by Monte Carlo noise of different draws.
    init_key, run_key = jax.random.split(jax.random.key(config.seed))
    chains = jax.vmap(task.init)(jax.random.split(init_key, config.num_chains))
    # Every agent of a chain starts from the same network (a consensus start).
    init_net = jax.tree.map(lambda a: jnp.repeat(a[:, None], n, axis=1), chains)
    grid, sgld_grid = (np.geomspace(*g[:2], int(g[2])).astype(np.float32)
                       for g in (config.grid, config.sgld_grid))
    nets = {"barbell": networks.barbell(n, config.barbell_period, seed=config.seed + 20),
            "ring": networks.ring(n)}
    num_kept = config.num_steps // config.thin + 1
    burn = num_kept // 2  # kept iterations before num_steps / 2 are burn-in
    iterations = np.arange(num_kept) * config.thin
    scorer = _Scorer(task)
    classify = scorer.classify

    methods = [(f"{make.name} ({net})", make, nets[net], init_net, potentials, grid)
               for make in (DIGingSGLD, DESGLD) for net in nets]
    methods.append((f"{SGLD.name} (centralized)", SGLD, None, chains, pooled, sgld_grid))

    results = {s: {} for s in split_names}
    tuning, curves, calibration, timings = {}, {s: {} for s in split_names}, {}, {}
    for label, make, mixing, init, pots, etas in methods:
        t0, c0 = time.perf_counter(), time.process_time()
        # every split (outer axis) x step size x chain x agent x kept iteration, in one call
        ens, _, diverged = grid_run(
            make, etas, pots, mixing, init, run_key, config.num_steps, stacked=True,
            output=Output(thin=config.thin, ensemble_fn=_ensemble_fn(task, make is not SGLD)))
        ens = jax.tree.map(np.asarray, ens)
        diverged = np.asarray(diverged)
        timings[label] = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
        log(f"{label}: {timings[label]['wall_s']:.1f} s wall, {timings[label]['cpu_s']:.1f} s CPU")
        for si, split in enumerate(split_names):
            row = si if jax.tree.leaves(ens)[0].shape[0] > 1 else 0
            val_nll = []
            for g in range(len(etas)):
                one = jax.tree.map(lambda v: v[row, g], ens)  # noqa: B023
                outs = _post_burn_in(one, classify, burn)
                finite = all(np.all(np.isfinite(v)) for v in jax.tree.leaves(outs))
                val_nll.append(scorer.score(outs, "val")["agent_mean"]["nll"]
                               if finite and not diverged[row, g] else math.inf)
            best = int(np.argmin(val_nll))
            tuning[f"{label} / {split}"] = {"grid": [float(e) for e in etas],
                                            "val_nll": val_nll, "step_size": float(etas[best])}
            if not math.isfinite(val_nll[best]):
                log(f"{label} diverged at every step size of {etas} on {split}")
                results[split][label] = None
                continue
            one = jax.tree.map(lambda v: v[row, best], ens)  # noqa: B023
            outs = _post_burn_in(one, classify, burn)
            results[split][label] = scorer.score(outs, "test")
            curves[split][label] = _curves(one, scorer, iterations)
            if classify:
                lp = np.asarray(evaluate.log_predictive(
                    scorer.agent_outputs(outs, "test"), axis=0))
                c, a, f = evaluate.calibration_curve(lp, task.test[1])
                calibration.setdefault(split, {})[label] = {
                    "count": np.asarray(c).tolist(), "accuracy": np.asarray(a).tolist(),
                    "confidence": np.asarray(f).tolist()}

    # Deterministic baseline: every agent alone (and the ensemble of the N agents).
    t0, c0 = time.perf_counter(), time.process_time()
    map_outs = jax.tree.map(np.asarray, _map_baseline(task, potentials, _first_chain(init_net),
                                                      config))
    timings["MAP"] = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    log(f"MAP baseline: {timings['MAP']['wall_s']:.1f} s wall")
    checkpoints = config.map_every * np.arange(1, config.map_steps // config.map_every + 1)
    for si, split in enumerate(split_names):
        per_ckpt = []
        for k in range(len(checkpoints)):
            one = jax.tree.map(lambda v: v[si, k], map_outs)  # noqa: B023
            per_ckpt.append(one if classify else tuple(v[:, None] for v in one))
        val = [scorer.score(o, "val")["agent_mean"]["nll"] for o in per_ckpt]
        best = int(np.nanargmin(val))
        alone = scorer.score(per_ckpt[best], "test")
        results[split]["MAP, each agent alone"] = alone
        results[split]["MAP, ensemble of agents"] = {"network": alone["network"]}
        tuning[f"MAP / {split}"] = {"checkpoints": checkpoints.tolist(), "val_nll": val,
                                    "adam_steps": int(checkpoints[best])}

    return {
        "task": task.name,
        "config": config._asdict(),
        "protocol": {
            "train/val/test": [len(task.train[1]), len(task.val[1]), len(task.test[1])],
            "burn_in_iterations": int(iterations[burn]),
            "kept_iterations": iterations.tolist(),
            "networks": {k: v.name for k, v in nets.items()},
            **{k: v for k, v in task.extra.items() if k != "ood"},
            **({"ood": {k: v for k, v in task.extra["ood"].items() if k != "x"}}
               if "ood" in task.extra else {}),
        },
        "splits": {name: {"sizes": s.sizes.tolist(), "seed": s.seed, "draws": s.draws,
                          "label_entropy": _label_entropy(s, task.strata)}
                   for name, s in splits.items()},
        "tuning": tuning,
        "results": results,
        "curves": curves,
        "calibration": calibration,
        "timings": {**timings, "total_wall_s": time.perf_counter() - wall0,
                    "total_cpu_s": time.process_time() - cpu0},
    }


def _first_chain(init_net):
    """Chain 0's per-agent starting points, leaves ``(N, ...)`` (the MAP baseline's start)."""
    return jax.tree.map(lambda a: a[0], init_net)


def _label_entropy(split: dd.AgentSplit, strata: np.ndarray) -> float:
    """Mean over agents of the entropy (nats) of the agent's label (stratum) distribution."""
    k = int(strata.max()) + 1
    values = []
    for idx in split.indices:
        p = np.bincount(strata[idx], minlength=k) / len(idx)
        values.append(float(-np.sum(p[p > 0] * np.log(p[p > 0]))))
    return float(np.mean(values))


def digits_benchmark(config: BenchmarkConfig = DIGITS, logger=print) -> dict:
    """The digits BNN benchmark (see the module docstring)."""
    return run_benchmark(digits_task(config.seed), config, logger)


def diabetes_benchmark(config: BenchmarkConfig = DIABETES, logger=print) -> dict:
    """The diabetes Bayesian linear regression benchmark (see the module docstring)."""
    return run_benchmark(diabetes_task(config.seed), config, logger)


# ----------------------------------------------------------------------------- output


def results_table(result: dict) -> str:
    """Markdown table: per split and method, the agent mean (worst agent) of each test score."""
    classify = result["task"] == "digits"
    keys = (("accuracy", "nll", "ece", "brier", "ood_auroc") if classify else ("rmse", "nll"))
    names = {"accuracy": "accuracy", "nll": "NLL", "ece": "ECE", "brier": "Brier",
             "ood_auroc": "OOD AUROC", "rmse": "RMSE"}
    head = "| split | method | " + " | ".join(names[k] for k in keys) + " |"
    lines = [head, "|" + "---|" * (len(keys) + 2)]
    for split, methods in result["results"].items():
        for label, scores in methods.items():
            if scores is None:
                cells = ["diverged"] * len(keys)
            elif "agent_mean" in scores:
                cells = [f"{scores['agent_mean'][k]:.3f} ({scores['agent_worst'][k]:.3f})"
                         for k in keys]
            else:
                cells = [f"{scores['network'][k]:.3f}" for k in keys]
            lines.append(f"| {split} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_results(result: dict, path: Path) -> Path:
    """Test accuracy (or RMSE) and NLL against iterations per method and split; for digits
    also the reliability diagrams (pooled over agents)."""
    from dgsgld.evaluate.plots import pyplot

    plt = pyplot(headless=True)

    classify = result["task"] == "digits"
    splits = list(result["curves"])
    rows = 3 if classify else 2
    fig, axes = plt.subplots(rows, len(splits), figsize=(4.2 * len(splits), 3.2 * rows),
                             squeeze=False)
    first = "accuracy" if classify else "rmse"
    for j, split in enumerate(splits):
        for label, c in result["curves"][split].items():
            axes[0, j].plot(c["iteration"], c[first], label=label)
            axes[1, j].plot(c["iteration"], c["nll"], label=label)
        axes[0, j].set_title(split)
        axes[0, j].set_ylabel(f"test {first} (agent mean)\nsamples from iterations k/2..k",
                              fontsize=8)
        axes[1, j].set_ylabel("test NLL (agent mean)")
        axes[1, j].set_xlabel("iteration")
        if not classify:
            axes[0, j].set_yscale("log")
        axes[1, j].set_yscale("log")
        if classify:
            ax = axes[2, j]
            ax.plot([0, 1], [0, 1], "k:", lw=1)
            for label, c in result["calibration"][split].items():
                cnt = np.asarray(c["count"])
                keep = cnt >= 5  # bins of fewer test points are noise
                ax.plot(np.asarray(c["confidence"])[keep], np.asarray(c["accuracy"])[keep],
                        "o-", ms=3, label=label)
            ax.set_xlabel("confidence (15 bins, those with >= 5 points)")
            ax.set_ylabel("accuracy")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _jsonable(obj: Any):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def reproduce_digits(out: str | Path, *, small: bool = False, tasks=("digits", "diabetes"),
                     seed: int = 0, num_chains: int | None = None, plot: bool = True,
                     logger=print) -> dict[str, dict]:
    """Run the benchmarks and write ``TASK.json``, ``TASK.md`` and ``TASK.png`` into ``out``.

    Args:
        out: output directory (created if missing).
        small: the reduced size the tests run (:data:`DIGITS_SMALL`, :data:`DIABETES_SMALL`).
        tasks: any of ``"digits"``, ``"diabetes"``.
        seed: master seed (data splits, OOD permutation, networks, chains derive from it).
        num_chains: chains per run (default: the configuration's).
        plot: write the PNG figure.
        logger: ``print``-like progress callback, or ``None``.
    """
    runners = {"digits": (digits_benchmark, DIGITS_SMALL if small else DIGITS),
               "diabetes": (diabetes_benchmark, DIABETES_SMALL if small else DIABETES)}
    for name in tasks:
        if name not in runners:
            raise ValueError(f"`tasks` must name 'digits' or 'diabetes'; got {name!r}.")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for name in tasks:
        run, config = runners[name]
        config = config._replace(seed=seed, num_chains=num_chains or config.num_chains)
        result = run(config, logger)
        (out / f"{name}.json").write_text(json.dumps(_jsonable(result), indent=1))
        (out / f"{name}.md").write_text(results_table(result) + "\n")
        if plot:
            plot_results(result, out / f"{name}.png")
        if logger:
            t = result["timings"]
            logger(f"{name}: {t['total_wall_s']:.0f} s wall, {t['total_cpu_s']:.0f} s CPU; "
                   f"wrote {name}.json, {name}.md" + (f", {name}.png" if plot else "")
                   + f" to {out}")
        results[name] = result
    return results
