"""Time per step against the local data size: ``python -m benchmarks.datasize [--quick]``.

At a fixed mini-batch size ``b`` a stochastic-gradient step should cost the same whatever the
agents' data sizes ``n_i``; only the full batch (and SVRG's refreshes, ``n_i / m`` per step)
grow with them. Sections (``--sections``, comma-separated):

* ``datasize`` — DIGing-SGLD, Bayesian logistic regression (d = 10), 4 agents on a ring,
  8 chains, b = 32, ``n_i`` from 10² up: default mini-batches (without replacement),
  ``replace=True``, ``svrg(update_every=100)``, ``saga()`` and the full batch, alternated
  within each ``n_i``; the estimator state's bytes per chain and agent, and the compiled run's
  memory (XLA's arguments + outputs + temporaries).
* ``draws`` — the mini-batch draw alone (``scan`` of ``--steps`` steps of a ``vmap`` over
  32 chain-agents, b = 32): with replacement, Floyd's draw without (the toolkit's), and two
  exact draws it replaced, written here as references: redrawing repeats in a ``while_loop``
  until none is left, and the b smallest of n_i uniforms (``top_k``).
* ``growth`` — each estimator (full batch excepted) at n_i = 10³ and 10⁵ in alternation: the
  per-step ratio, free of the load's drift between the ``datasize`` rows; and the floor: the
  step's b-row gathers from the same data alone, whose growth is the memory system's.
* ``central`` — centralized SGLD (``dgsgld.SGLD``, with replacement) against blackjax's
  ``sgld`` (``vmap`` over chains, ``scan`` over steps, ``jax.random.randint`` mini-batches) on
  the same data, alternated: 100 chains, d = 10, b = 32.
* ``bnn`` — a Bayesian MLP (64-64-10, tanh, softmax likelihood), DIGing-SGLD on a ring of 10
  agents, b = 32, 20 chains, against the same step written with PyTorch (``torch.func``'s
  ``vmap`` of ``grad``, eager and ``torch.compile``) and NumPy (hand-written backward pass).

Method (as :mod:`benchmarks.harness`): each toolkit run is compiled ahead of time and resumed
from its own last state (the state is donated, so SAGA's table is updated in place and no
call pays an initialisation), ``--steps`` steps per call; contenders of one row are called in
alternation, one call each per round; times are medians and ratios medians of per-round
ratios. Peers that are not installed (the optional extra ``bench``: blackjax, torch) are
skipped with a note. Writes ``--out`` (JSON) and its Markdown tables beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import dgsgld
from dgsgld import gradients
from dgsgld.model.potential import distinct_batch, first_occurrences

from .harness import round_ratio, time_rounds

DIM, AGENTS, CHAINS, BATCH, PERIOD = 10, 4, 8, 32, 100


# ----------------------------------------------------------------------- logistic regression


def log_likelihood(x, datum):
    z, s = datum
    return -jnp.logaddexp(0.0, -s * (z @ x))


def log_prior(x):
    return -0.5 * x @ x


def logistic_data(num_agents: int, local_size: int, dim: int = DIM, seed: int = 0):
    """Host arrays ``(features (N, n, d), labels ±1 (N, n))`` from a random truth."""
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=dim) / np.sqrt(dim)
    z = rng.standard_normal((num_agents, local_size, dim), dtype=np.float32)
    p = 1.0 / (1.0 + np.exp(-(z @ truth)))
    s = np.where(rng.random((num_agents, local_size)) < p, 1.0, -1.0).astype(np.float32)
    return z, s


def _resumable(alg, steps: int):
    """``run(pot, mixing, state, key) -> state``: ``steps`` more steps from a sampler state
    (donated: the loop updates it in place)."""

    def run(alg, pot, mixing, state, key):
        return dgsgld.sample(alg, pot, mixing, state, key, steps,
                             output=dgsgld.Output(positions=False), on_divergence="flag").state

    return jax.jit(run, donate_argnums=3)


def _memory(compiled) -> int | None:
    try:
        m = compiled.memory_analysis()
        return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
                   - getattr(m, "alias_size_in_bytes", 0))
    except Exception:  # noqa: BLE001 - not every backend reports it
        return None


class Chained:
    """A compiled run called on its own last state: ``call()`` runs ``steps`` more steps."""

    def __init__(self, alg, pot, mixing, init, key, steps):
        self.args = (alg, pot, mixing)
        self.key = key
        keys = jax.random.split(key, jax.tree.leaves(init)[0].shape[0])
        self.state = jax.jit(jax.vmap(alg.init, (0, None, 0)))(init, pot, keys)
        jitted = _resumable(alg, steps)
        t0 = time.perf_counter()
        self.compiled = jitted.lower(*self.args, self.state, key).compile()
        self.compile_s = time.perf_counter() - t0
        self.memory = _memory(self.compiled)
        est = getattr(self.state, "estimator", ())
        self.state_bytes = sum(leaf.nbytes for leaf in jax.tree.leaves(est))

    def __call__(self):
        self.state = self.compiled(*self.args, self.state, self.key)
        return self.state.position


def _variants(n: int, full_max: int):
    out = {
        "default": (dict(batch_size=BATCH), None),
        "replace=True": (dict(batch_size=BATCH, replace=True), None),
        f"svrg(update_every={PERIOD})": (dict(batch_size=BATCH), gradients.svrg(PERIOD)),
        "saga": (dict(batch_size=BATCH), gradients.saga()),
    }
    if n <= full_max:
        out["full batch"] = (dict(), None)
    return out


def datasize_section(sizes, steps: int, rounds: int, full_max: int, saga_max: int) -> dict:
    key = jax.random.key(0)
    mixing = dgsgld.checked_network(dgsgld.networks.ring(AGENTS))
    init = jnp.zeros((CHAINS, AGENTS, DIM), jnp.float32)
    rows = []
    for n in sizes:
        z, s = logistic_data(AGENTS, n)
        data = (jnp.asarray(z), jnp.asarray(s))
        eta = 0.5 / (AGENTS * n)
        runs, counts = {}, {}
        for name, (kw, est) in _variants(n, full_max).items():
            if name == "saga" and n > saga_max:
                continue
            # The full batch's steps cost n_i: fewer of them (per-step times, ratios per step).
            counts[name] = steps if kw else max(10, min(steps, steps * 10_000 // n))
            pot = dgsgld.Potential(log_likelihood, log_prior, data, **kw)
            runs[name] = Chained(dgsgld.DIGingSGLD(eta, estimator=est), pot, mixing, init,
                                 key, counts[name])
        times = time_rounds(runs, rounds)
        per_step = {k: t.median / counts[k] for k, t in times.items()}
        base = times["replace=True"]
        ratios = {k: round_ratio(t, base) * steps / counts[k] for k, t in times.items()}
        rows.append({
            "n_i": n, "steps": steps, "per_step_us": {k: 1e6 * v for k, v in per_step.items()},
            "over_replace": ratios,
            "state_bytes_per_chain_agent": {k: r.state_bytes / (CHAINS * AGENTS)
                                            for k, r in runs.items()},
            "compiled_memory_bytes": {k: r.memory for k, r in runs.items()},
            "compile_s": {k: r.compile_s for k, r in runs.items()},
        })
        print(f"n_i={n}: " + ", ".join(f"{k} {1e6 * v:.0f} us" for k, v in per_step.items()),
              flush=True)
        del runs, times
    return {"rows": rows}


def growth_section(small: int, large: int, steps: int, rounds: int) -> dict:
    """Each estimator at ``n_i = small`` and ``n_i = large`` called in alternation (the load of
    a shared machine drifts between the ``datasize`` section's rows): per-step ratio."""
    key = jax.random.key(0)
    mixing = dgsgld.checked_network(dgsgld.networks.ring(AGENTS))
    init = jnp.zeros((CHAINS, AGENTS, DIM), jnp.float32)
    pots = {}
    for n in (small, large):
        z, s = logistic_data(AGENTS, n)
        pots[n] = (jnp.asarray(z), jnp.asarray(s))
    rows = []
    for name, (kw, est) in _variants(large, 0).items():
        runs = {n: Chained(dgsgld.DIGingSGLD(0.5 / (AGENTS * n), estimator=est),
                           dgsgld.Potential(log_likelihood, log_prior, pots[n], **kw), mixing,
                           init, key, steps) for n in (small, large)}
        times = time_rounds(runs, rounds)
        rows.append({"estimator": name, "small_us": 1e6 * times[small].median / steps,
                     "large_us": 1e6 * times[large].median / steps,
                     "large_over_small": round_ratio(times[large], times[small])})
        print(f"growth {rows[-1]}", flush=True)
        del runs, times
    # The floor: the same count of b-row gathers from the same data, nothing else.
    runs = {n: _GatherFloor(pots[n], key, steps) for n in (small, large)}
    times = time_rounds(runs, rounds)
    rows.append({"estimator": GATHER_FLOOR, "small_us": 1e6 * times[small].median / steps,
                 "large_us": 1e6 * times[large].median / steps,
                 "large_over_small": round_ratio(times[large], times[small])})
    print(f"growth {rows[-1]}", flush=True)
    return {"small": small, "large": large, "rows": rows}


GATHER_FLOOR = "floor: draw b indices and gather their rows"


class _GatherFloor:
    """What any mini-batch step must do, alone: per step, each of the ``CHAINS × AGENTS``
    chain-agents draws ``b`` indices (with replacement) and reads those rows of its agent's
    data; the rows' sum is carried so that nothing is optimised away. Its growth with ``n_i``
    is the memory system's (rows out of cache), not the toolkit's."""

    def __init__(self, data, key, steps):
        z, s = data                                              # (N, n, d), (N, n)
        n = z.shape[1]

        def run(key, z, s):
            def one(acc, k):
                words = jax.random.bits(k, (CHAINS, AGENTS, BATCH))
                idx = (words % jnp.uint32(n)).astype(jnp.int32)      # as replace=True draws
                gather = jax.vmap(lambda zz, ss, j: jnp.sum(zz[j] * ss[j, None], 0))
                return acc + jax.vmap(gather, (None, None, 0))(z, s, idx), None

            return jax.lax.scan(one, jnp.zeros((CHAINS, AGENTS, z.shape[-1]), z.dtype),
                                jax.random.split(key, steps))[0]

        self.call = jax.jit(run).lower(key, z, s).compile()
        self.args = (key, z, s)

    def __call__(self):
        return self.call(*self.args)


# -------------------------------------------------------------------------- the draws alone


def _draw_with_replacement(key, count, b):
    return (jax.random.bits(key, (b,)) % count.astype(jnp.uint32)).astype(jnp.int32)


def _draw_redrawing_repeats(key, count, b):
    """Exact uniform b-subset: redraw every repeat (fresh words) until none is left."""
    width = count.astype(jnp.uint32)

    def draw(r):
        return (jax.random.bits(jax.random.fold_in(key, r), (b,)) % width).astype(jnp.int32)

    def redraw(carry):
        idx, keep, r = carry
        idx = jnp.where(keep, idx, draw(r))
        return idx, first_occurrences(idx), r + 1

    idx = draw(0)
    return jax.lax.while_loop(lambda c: ~jnp.all(c[1]), redraw,
                              (idx, first_occurrences(idx), jnp.int32(1)))[0]


def _draw_top_k(key, count, b, local_size):
    """Exact uniform b-subset: the b smallest of local_size uniforms (the valid ones)."""
    u = jax.random.uniform(key, (local_size,))
    u = jnp.where(jnp.arange(local_size) < count, u, 2.0)
    return jax.lax.top_k(-u, b)[1]


def draws_section(sizes, steps: int, rounds: int, members: int = AGENTS * CHAINS) -> dict:
    rows = []
    for n in sizes:
        draws = {"replace=True": _draw_with_replacement, "floyd (default)": distinct_batch,
                 "redraw repeats": _draw_redrawing_repeats,
                 "top_k": partial(_draw_top_k, local_size=n)}
        if n > 10_000:  # O(n_i) per draw: seconds per call
            del draws["top_k"]
        fns = {}
        for name, draw in draws.items():
            def body(acc, key, draw=draw):
                idx = jax.vmap(lambda k: draw(k, jnp.int32(n), BATCH))(
                    jax.random.split(key, members))
                return acc + jnp.sum(idx), None

            run = jax.jit(lambda key, body=body: jax.lax.scan(
                body, jnp.int32(0), jax.random.split(key, steps))[0])
            compiled = run.lower(jax.random.key(0)).compile()
            fns[name] = partial(compiled, jax.random.key(n))
        times = time_rounds(fns, rounds)
        base = times["replace=True"]
        rows.append({"n_i": n, "per_step_us": {k: 1e6 * t.median / steps
                                               for k, t in times.items()},
                     "over_replace": {k: round_ratio(t, base) for k, t in times.items()}})
        print(f"draws {rows[-1]}", flush=True)
    return {"members": members, "rows": rows}


# --------------------------------------------------------------------- centralized vs blackjax


def blackjax_run(blackjax, data, b: int, eta: float, steps: int):
    """``run(key, init (C, d)) -> positions``: blackjax's SGLD, vmapped over chains."""
    z, s = data
    n = z.shape[0]
    grad_fn = blackjax.sgmcmc.gradients.grad_estimator(log_prior, log_likelihood, n)
    sgld = blackjax.sgld(grad_fn)

    def one_chain(key, x0):
        def body(x, k):
            k_batch, k_step = jax.random.split(k)
            idx = jax.random.randint(k_batch, (b,), 0, n)
            return sgld.step(k_step, x, (z[idx], s[idx]), eta), None

        return jax.lax.scan(body, sgld.init(x0), jax.random.split(key, steps))[0]

    return jax.jit(lambda key, x0: jax.vmap(one_chain)(jax.random.split(key, x0.shape[0]), x0))


def central_section(sizes, steps: int, rounds: int, chains: int = 100) -> dict:
    try:
        import blackjax
    except ImportError:
        return {"skipped": "blackjax is not installed (pip install dgsgld[bench])"}
    key = jax.random.key(1)
    init = jnp.zeros((chains, DIM), jnp.float32)
    rows = []
    for n in sizes:
        z, s = logistic_data(1, n, seed=1)
        data = (jnp.asarray(z), jnp.asarray(s))
        eta = 0.5 / n
        pot = dgsgld.Potential(log_likelihood, log_prior, data, BATCH, replace=True)
        tool = Chained(dgsgld.SGLD(eta), pot, None, init, key, steps)
        bj = blackjax_run(blackjax, (data[0][0], data[1][0]), BATCH, eta, steps)
        bj_c = bj.lower(key, init).compile()
        holder = {"x": init}

        def bj_call():
            holder["x"] = bj_c(key, holder["x"])
            return holder["x"]

        times = time_rounds({"dgsgld": tool, "blackjax": bj_call}, rounds)
        rows.append({"n": n, "steps": steps, "chains": chains,
                     "dgsgld_us": 1e6 * times["dgsgld"].median / steps,
                     "blackjax_us": 1e6 * times["blackjax"].median / steps,
                     "blackjax_over_dgsgld": round_ratio(times["blackjax"], times["dgsgld"])})
        print(f"central n={n}: {rows[-1]}", flush=True)
    return {"rows": rows, "blackjax": blackjax.__version__}


# ----------------------------------------------------------------------------------- the BNN

BNN_IN, BNN_HIDDEN, BNN_OUT = 64, 64, 10


def bnn_data(num_agents: int, local_size: int, seed: int = 2):
    """Inputs ``(N, n, 64)`` and labels ``(N, n)`` of a random teacher MLP."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num_agents, local_size, BNN_IN), dtype=np.float32)
    w1 = rng.normal(size=(BNN_IN, BNN_HIDDEN)) / np.sqrt(BNN_IN)
    w2 = rng.normal(size=(BNN_HIDDEN, BNN_OUT)) / np.sqrt(BNN_HIDDEN) * 3
    logits = np.tanh(x @ w1) @ w2
    y = np.argmax(logits + rng.gumbel(size=logits.shape), -1).astype(np.int32)
    return x, y


def bnn_log_likelihood(params, datum):
    x, y = datum
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    return logits[y] - jax.nn.logsumexp(logits)


def bnn_log_prior(params):
    return -0.5 * sum(jnp.sum(p**2) for p in jax.tree.leaves(params))


def bnn_init(chains: int, agents: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    shapes = {"w1": (BNN_IN, BNN_HIDDEN), "b1": (BNN_HIDDEN,), "w2": (BNN_HIDDEN, BNN_OUT),
              "b2": (BNN_OUT,)}
    return {k: (0.1 * rng.standard_normal((chains, agents, *s))).astype(np.float32)
            for k, s in shapes.items()}


class TorchDIGing:
    """The same DIGing-SGLD step in PyTorch: parameters ``(C·N, ·)`` per leaf, ``torch.func``
    ``vmap`` of ``grad`` over chain-agents, mini-batches with replacement (``randint``)."""

    def __init__(self, torch, data, init, w, eta, b, compile_step: bool):
        self.torch = torch
        from torch.func import grad, vmap

        x, y = data
        self.N, self.n = x.shape[:2]
        self.C = init["w1"].shape[0]
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y).long()
        self.w = torch.from_numpy(np.asarray(w, np.float32))
        self.eta, self.b = eta, b
        names = ("w1", "b1", "w2", "b2")
        self.names = names
        pos = {k: torch.from_numpy(init[k].reshape(self.C * self.N, *init[k].shape[2:]).copy())
               for k in names}
        scale = float(self.n) / b

        def loss(p, xb, yb):
            h = torch.tanh(xb @ p["w1"] + p["b1"])
            logits = h @ p["w2"] + p["b2"]
            ll = logits.gather(1, yb[:, None])[:, 0] - torch.logsumexp(logits, 1)
            prior = 0.5 * sum((v**2).sum() for v in p.values()) / self.N
            return -scale * ll.sum() + prior

        self.grads = vmap(grad(loss))
        agent = torch.arange(self.C * self.N) % self.N
        self.agent = agent

        def gradient(p, gen_idx):
            xb = self.x[agent[:, None], gen_idx]
            yb = self.y[agent[:, None], gen_idx]
            return self.grads(p, xb, yb)

        def mix(t):
            shaped = t.reshape(self.C, self.N, -1)
            return torch.einsum("ij,cjk->cik", self.w, shaped).reshape(t.shape)

        def step(p, yt, g, idx, noise):
            new_p = {k: mix(p[k]) - eta * yt[k] + (2 * eta) ** 0.5 * noise[k] for k in names}
            new_g = gradient(new_p, idx)
            new_y = {k: mix(yt[k]) + new_g[k] - g[k] for k in names}
            return new_p, new_y, new_g

        self.step = torch.compile(step) if compile_step else step
        self.gradient = gradient
        idx0 = torch.randint(0, self.n, (self.C * self.N, b))
        g0 = gradient(pos, idx0)
        self.state = (pos, g0, g0)

    def run(self, steps: int):
        torch = self.torch
        with torch.no_grad():
            p, yt, g = self.state
            for _ in range(steps):
                idx = torch.randint(0, self.n, (self.C * self.N, self.b))
                noise = {k: torch.randn_like(p[k]) for k in self.names}
                p, yt, g = self.step(p, yt, g, idx, noise)
            self.state = (p, yt, g)
        return p["w1"]


class NumpyDIGing:
    """The same step in NumPy with a hand-written backward pass (float32, ``SFC64`` normals,
    mini-batches with replacement)."""

    def __init__(self, data, init, w, eta, b, seed=0):
        x, y = data
        self.N, self.n = x.shape[:2]
        self.C = init["w1"].shape[0]
        self.x, self.y, self.w = x, y, np.asarray(w, np.float32)
        self.eta, self.b = np.float32(eta), b
        self.rng = np.random.Generator(np.random.SFC64(seed))
        self.p = {k: v.copy() for k, v in init.items()}
        g = self.gradient(self.p)
        self.yt, self.g = {k: v.copy() for k, v in g.items()}, g

    def gradient(self, p):
        C, N, b = self.C, self.N, self.b
        idx = self.rng.integers(0, self.n, (C, N, b))
        xb = self.x[np.arange(N)[None, :, None], idx]                  # (C, N, b, 64)
        yb = self.y[np.arange(N)[None, :, None], idx]
        h = np.tanh(xb @ p["w1"] + p["b1"][:, :, None])                # (C, N, b, H)
        logits = h @ p["w2"] + p["b2"][:, :, None]
        logits -= logits.max(-1, keepdims=True)
        prob = np.exp(logits)
        prob /= prob.sum(-1, keepdims=True)
        np.put_along_axis(prob, yb[..., None], np.take_along_axis(prob, yb[..., None], -1) - 1, -1)
        d_logits = prob * np.float32(self.n / b)                       # d(-scaled ll)/d logits
        gw2 = np.swapaxes(h, -1, -2) @ d_logits
        gb2 = d_logits.sum(-2)
        dh = (d_logits @ np.swapaxes(p["w2"], -1, -2)) * (1 - h * h)
        gw1 = np.swapaxes(xb, -1, -2) @ dh
        gb1 = dh.sum(-2)
        g = {"w1": gw1, "b1": gb1, "w2": gw2, "b2": gb2}
        return {k: g[k] + p[k] / N for k in g}

    def mix(self, a):
        return np.einsum("ij,cj...->ci...", self.w, a, optimize=True)

    def run(self, steps: int):
        s = np.sqrt(2 * self.eta, dtype=np.float32)
        for _ in range(steps):
            p = {k: self.mix(v) - self.eta * self.yt[k]
                 + s * self.rng.standard_normal(v.shape, dtype=np.float32)
                 for k, v in self.p.items()}
            g = self.gradient(p)
            self.yt = {k: self.mix(self.yt[k]) + g[k] - self.g[k] for k in p}
            self.p, self.g = p, g
        return self.p["w1"]


def bnn_section(steps: int, rounds: int, chains: int = 20, agents: int = 10,
                local_size: int = 1000, torch_compile: bool = True,
                torch_threads: int | None = None) -> dict:
    x, y = bnn_data(agents, local_size)
    init = bnn_init(chains, agents)
    w = np.asarray(dgsgld.networks.ring(agents).matrices[0])
    eta = 1e-5
    mixing = dgsgld.checked_network(dgsgld.networks.ring(agents))
    data = (jnp.asarray(x), jnp.asarray(y))
    key = jax.random.key(4)
    init_j = {k: jnp.asarray(v) for k, v in init.items()}
    fns, notes = {}, []
    for name, kw in (("dgsgld default", {}), ("dgsgld replace=True", {"replace": True})):
        pot = dgsgld.Potential(bnn_log_likelihood, bnn_log_prior, data, BATCH, **kw)
        fns[name] = Chained(dgsgld.DIGingSGLD(eta), pot, mixing, init_j, key, steps)
    np_run = NumpyDIGing((x, y), init, w, eta, BATCH)
    fns["numpy"] = partial(np_run.run, steps)
    torch_version = None
    try:
        import torch

        torch.set_num_threads(torch_threads or os.cpu_count() or 2)
        notes.append(f"torch threads: {torch.get_num_threads()}")
        torch_version = torch.__version__
        eager = TorchDIGing(torch, (x, y), init, w, eta, BATCH, compile_step=False)
        fns["torch eager"] = partial(eager.run, steps)
        if torch_compile:
            try:
                t0 = time.perf_counter()
                comp = TorchDIGing(torch, (x, y), init, w, eta, BATCH, compile_step=True)
                comp.run(2)
                notes.append(f"torch.compile: first calls {time.perf_counter() - t0:.1f} s")
                fns["torch.compile"] = partial(comp.run, steps)
            except Exception as err:  # noqa: BLE001 - reported, not fatal
                notes.append(f"torch.compile failed: {type(err).__name__}: {str(err)[:200]}")
    except ImportError:
        notes.append("torch is not installed (pip install dgsgld[bench]): no PyTorch rows")
    times = time_rounds(fns, rounds)
    base = "dgsgld default"
    rows = [{"contender": k, "per_step_ms": 1e3 * t.median / steps,
             "per_step_cpu_ms": 1e3 * t.cpu_median / steps,
             "over_dgsgld_default": round_ratio(t, times[base])} for k, t in times.items()]
    for r in rows:
        print(f"bnn {r}", flush=True)
    return {"rows": rows, "notes": notes, "torch": torch_version, "chains": chains,
            "agents": agents, "local_size": local_size, "steps": steps,
            "params_per_agent": sum(int(np.prod(v.shape[2:])) for v in init.values())}


# ------------------------------------------------------------------------------- the report


def _fmt(v, digits=0):
    return "–" if v is None else f"{v:,.{digits}f}"


def _started(section: dict) -> str:
    """The line that says when a section started and the load average then."""
    at = section.get("load")
    return "" if not at else f"Started {at['started']}, load average {at['load']}.\n"


def markdown(result: dict) -> str:
    out = [f"# Time per step against the local data size\n\n{result['when']}; {result['machine']}"
           f"; load average at start {result['load']}. Method: `benchmarks/datasize.py`'s "
           "docstring.\n"]
    ds = result.get("datasize")
    if ds:
        names = list(ds["rows"][0]["per_step_us"])
        for r in ds["rows"]:
            names += [k for k in r["per_step_us"] if k not in names]
        out.append(f"## DIGing-SGLD, {AGENTS} agents on a ring, d = {DIM}, {CHAINS} chains, "
                   f"b = {BATCH}: µs per step\n")
        out.append(_started(ds))
        out.append("| n_i | " + " | ".join(names) + " | default / replace | SVRG / "
                   "((b + n_i/m)/b × replace) |")
        out.append("|---" * (len(names) + 3) + "|")
        for r in ds["rows"]:
            cells = [_fmt(r["per_step_us"].get(k)) for k in names]
            svrg = f"svrg(update_every={PERIOD})"
            bound = (BATCH + r["n_i"] / PERIOD) / BATCH
            sv = r["over_replace"].get(svrg)
            out.append(f"| {r['n_i']:,} | " + " | ".join(cells)
                       + f" | {r['over_replace']['default']:.2f}× | "
                       + ("–" if sv is None else f"{sv / bound:.2f}×") + " |")
        first = {k: v for k, v in ds["rows"][0]["state_bytes_per_chain_agent"].items()}
        out.append("\n### Memory\n")
        out.append("| n_i | " + " | ".join(f"{k}: state B / chain-agent" for k in names)
                   + " | " + " | ".join(f"{k}: compiled MB" for k in names) + " |")
        out.append("|---" * (2 * len(names) + 1) + "|")
        for r in ds["rows"]:
            sb = [_fmt(r["state_bytes_per_chain_agent"].get(k)) for k in names]
            mem = [("–" if r["compiled_memory_bytes"].get(k) is None
                    else f"{r['compiled_memory_bytes'][k] / 2**20:,.1f}") for k in names]
            out.append(f"| {r['n_i']:,} | " + " | ".join(sb + mem) + " |")
        del first
    dr = result.get("draws")
    if dr:
        names = list(dr["rows"][0]["per_step_us"])
        cell = lambda r, k: ("–" if k not in r["per_step_us"] else  # noqa: E731
                             f"{r['per_step_us'][k]:.1f} ({r['over_replace'][k]:.2f}×)")
        out.append(f"\n## The mini-batch draw alone: {dr['members']} chain-agents, b = {BATCH}, "
                   "µs per step (ratio to replace=True)\n")
        out.append(_started(dr))
        out.append("| n_i | " + " | ".join(names) + " |")
        out.append("|---" * (len(names) + 1) + "|")
        for r in dr["rows"]:
            out.append(f"| {r['n_i']:,} | " + " | ".join(cell(r, k) for k in names) + " |")
    g = result.get("growth")
    if g:
        out.append(f"\n## n_i = {g['large']:,} against n_i = {g['small']:,}, alternated\n")
        out.append(_started(g))
        out.append(f"| estimator | µs per step at {g['small']:,} | µs per step at {g['large']:,} "
                   "| ratio (median of rounds) |")
        out.append("|---|---|---|---|")
        for r in g["rows"]:
            out.append(f"| {r['estimator']} | {r['small_us']:.0f} | {r['large_us']:.0f} | "
                       f"{r['large_over_small']:.2f}× |")
    c = result.get("central")
    if c:
        out.append("\n## Centralized SGLD against blackjax (with replacement), µs per step\n")
        out.append(_started(c))
        if "skipped" in c:
            out.append(f"Skipped: {c['skipped']}.")
        else:
            out.append(f"blackjax {c['blackjax']}; {c['rows'][0]['chains']} chains, d = {DIM}, "
                       f"b = {BATCH}.\n")
            out.append("| n | dgsgld µs | blackjax µs | blackjax / dgsgld |")
            out.append("|---|---|---|---|")
            for r in c["rows"]:
                out.append(f"| {r['n']:,} | {r['dgsgld_us']:.0f} | {r['blackjax_us']:.0f} | "
                           f"{r['blackjax_over_dgsgld']:.2f}× |")
    b = result.get("bnn")
    if b:
        out.append(f"\n## BNN: MLP {BNN_IN}-{BNN_HIDDEN}-{BNN_OUT} ({b['params_per_agent']} "
                   f"parameters), DIGing-SGLD, {b['agents']} agents on a ring, {b['chains']} "
                   f"chains, b = {BATCH}, n_i = {b['local_size']}\n")
        out.append(_started(b))
        out.append("| contender | ms per step | CPU ms per step | this / dgsgld default |")
        out.append("|---|---|---|---|")
        for r in b["rows"]:
            out.append(f"| {r['contender']} | {r['per_step_ms']:.2f} | "
                       f"{r['per_step_cpu_ms']:.2f} | {r['over_dgsgld_default']:.2f}× |")
        for note in b["notes"]:
            out.append(f"\n* {note}")
        if b["torch"]:
            out.append(f"\n* torch {b['torch']}; PyTorch and NumPy draw mini-batches with "
                       "replacement.")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n_i up to 10^4, 2 rounds")
    ap.add_argument("--sizes", default="100,1000,10000,100000,1000000")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--full-max", type=int, default=100_000,
                    help="largest n_i of the full-batch column")
    ap.add_argument("--saga-max", type=int, default=1_000_000)
    ap.add_argument("--sections", default="datasize,draws,growth,central,bnn")
    ap.add_argument("--draw-sizes", default="33,64,100,1000,100000",
                    help="n_i of the draws section")
    ap.add_argument("--bnn-steps", type=int, default=20)
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="PyTorch's intra-op threads (default: every CPU)")
    ap.add_argument("--out", default="benchmarks/datasize.json")
    ap.add_argument("--update", action="store_true",
                    help="keep the other sections of an existing --out")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.quick:
        sizes, args.rounds = [s for s in sizes if s <= 10_000], 2
    sections = args.sections.split(",")
    result = {"when": time.strftime("%Y-%m-%d %H:%M:%S"),
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
                         f"{jax.default_backend()} backend, jax {jax.__version__}",
              "load": " ".join(f"{v:.1f}" for v in os.getloadavg()), "args": vars(args)}
    out = Path(args.out)
    if args.update and out.exists():
        result = {**json.loads(out.read_text()), **result}
    t0 = time.perf_counter()

    def save():
        out.write_text(json.dumps(result, indent=1))
        out.with_suffix(".md").write_text(markdown(result))

    def stamp():
        return {"started": time.strftime("%H:%M:%S"),
                "load": " ".join(f"{v:.1f}" for v in os.getloadavg())}

    if "datasize" in sections:
        started = stamp()
        result["datasize"] = datasize_section(sizes, args.steps, args.rounds, args.full_max,
                                              args.saga_max)
        result["datasize"]["load"] = started
        save()
    if "draws" in sections:
        started = stamp()
        result["draws"] = draws_section([int(s) for s in args.draw_sizes.split(",")],
                                        args.steps, max(args.rounds, 5))
        result["draws"]["load"] = started
        save()
    if "growth" in sections:
        started = stamp()
        result["growth"] = growth_section(1_000, 100_000, args.steps, args.rounds)
        result["growth"]["load"] = started
        save()
    if "central" in sections:
        started = stamp()
        result["central"] = central_section(sizes, args.steps, args.rounds)
        result["central"]["load"] = started
        save()
    if "bnn" in sections:
        started = stamp()
        result["bnn"] = bnn_section(args.bnn_steps, args.rounds,
                                    torch_compile=not args.no_torch_compile,
                                    torch_threads=args.torch_threads)
        result["bnn"]["load"] = started
    result["total_s"] = time.perf_counter() - t0
    save()
    print(markdown(result))


if __name__ == "__main__":
    main()
