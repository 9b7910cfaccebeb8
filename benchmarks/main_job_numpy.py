"""The main job (``python -m dgsgld run``) as a plain NumPy script: the whole-process baseline.

Same work as :func:`experiments.quick_run` with its defaults: the Figure 2 linear
regression (n = 100, d = 5 + intercept, N = 20 agents, the same data from the same derived
seeds), the time-varying barbell (period 50, eq. (4.1) weights), 200 chains × 100 iterations
of DIGing-SGLD and DE-SGLD (η = 0.008) and centralized SGLD (η / N) from the same starts,
then the per-agent W2 of the chains' Gaussian fit and the exact-draw floor (64 replicates of
200 exact posterior draws). Imports NumPy only, as a NumPy user's script would; vectorized
with agents first (``(N, p, C)``: one matrix product per mixing).

Run: ``python benchmarks/main_job_numpy.py`` (``--plain`` is accepted and ignored).
"""

from __future__ import annotations

import time

import numpy as np

LAMBDA, NOISE_VAR, N_AGENTS, N_SAMPLES, DIM, PERIOD = 0.1, 1.0, 20, 100, 5, 50
TRIALS, STEPS, STEP = 200, 100, 0.008
FLOOR_REPLICATES = 64


def seeds(seed: int = 0) -> dict:
    names = ("data", "network", "init", "sampling", "reference")
    return dict(zip(names, (int(s) for s in np.random.SeedSequence(seed).generate_state(5))))


def problem(seed: int):
    rng = np.random.default_rng(seed)
    truth = rng.normal(size=DIM + 1) / np.sqrt(LAMBDA)
    z = np.concatenate([rng.normal(size=(N_SAMPLES, DIM)), np.ones((N_SAMPLES, 1))], axis=1)
    y = z @ truth + rng.normal(size=N_SAMPLES)
    cov = np.linalg.inv(z.T @ z / NOISE_VAR + LAMBDA * np.eye(DIM + 1))
    cov = 0.5 * (cov + cov.T)
    mean = cov @ (z.T @ y) / NOISE_VAR
    n_local = N_SAMPLES // N_AGENTS
    return z.reshape(N_AGENTS, n_local, DIM + 1), y.reshape(N_AGENTS, n_local), mean, cov


def barbell(seed: int, eps: float = 1e-6) -> np.ndarray:
    """``(P, N, N)`` Metropolis weights of two cliques and one random bridge per snapshot."""
    rng = np.random.default_rng(seed)
    n, half = N_AGENTS, (N_AGENTS + 1) // 2
    base = np.zeros((n, n), bool)
    base[:half, :half] = ~np.eye(half, dtype=bool)
    base[half:, half:] = ~np.eye(n - half, dtype=bool)
    left, right = rng.integers(0, half, size=PERIOD), rng.integers(half, n, size=PERIOD)
    adj = np.repeat(base[None], PERIOD, axis=0)
    adj[np.arange(PERIOD), left, right] = adj[np.arange(PERIOD), right, left] = True
    deg = adj.sum(-1).astype(float)
    w = np.where(adj, 1.0 / (np.maximum(deg[..., :, None], deg[..., None, :]) + eps), 0.0)
    w[:, np.arange(n), np.arange(n)] = 1.0 - w.sum(-1)
    return w.astype(np.float32)


def sample(name: str, z, y, w, init, rng) -> np.ndarray:
    """Final positions ``(C, N, p)`` (``(C, 1, p)`` for centralized SGLD)."""
    zt = np.swapaxes(z, 1, 2)                                  # (N, p, n_local)
    if name == "SGLD":
        eta = STEP / N_AGENTS
        zz, zy = np.einsum("nki,nkj->ij", z, z), np.einsum("nki,nk->i", z, y)
        x = np.ascontiguousarray(init.T)                       # (p, C)

        def grad(v):
            return (zz @ v - zy[:, None]) / NOISE_VAR + LAMBDA * v
    else:
        eta = STEP
        x = np.ascontiguousarray(np.transpose(init, (1, 2, 0)))   # (N, p, C)

        def grad(v):
            return zt @ (z @ v - y[:, :, None]) / NOISE_VAR + (LAMBDA / N_AGENTS) * v
    scale = np.float32(np.sqrt(2 * eta))
    mix = lambda m, v: (m @ v.reshape(N_AGENTS, -1)).reshape(v.shape)   # noqa: E731
    g = grad(x)
    tracker = g
    for k in range(STEPS):
        noise = rng.standard_normal(x.shape, dtype=np.float32)
        if name == "SGLD":
            x = x - eta * g + scale * noise
            g = grad(x)
        elif name == "DE-SGLD":
            x = mix(w[k % PERIOD], x) - eta * g + scale * noise
            g = grad(x)
        else:
            m = w[k % PERIOD]
            x = mix(m, x) - eta * tracker + scale * noise
            g_new = grad(x)
            tracker = mix(m, tracker) + g_new - g
            g = g_new
    return x.T[:, None, :] if name == "SGLD" else np.transpose(x, (2, 0, 1))


def w2(samples: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """Per-column W2 of the Gaussian fit of ``samples (C, M, p)`` over ``C`` to ``N(mean, cov)``."""
    def sqrtm(a):
        vals, vecs = np.linalg.eigh(a)
        return (vecs * np.sqrt(np.clip(vals, 0, None))[..., None, :]) @ np.swapaxes(vecs, -1, -2)

    m = samples.mean(0)
    c = samples - m
    s = np.einsum("cmi,cmj->mij", c, c) / (samples.shape[0] - 1)
    root = sqrtm(s)
    cross = sqrtm(root @ cov @ root)
    sq = ((m - mean) ** 2).sum(-1) + np.trace(s, axis1=1, axis2=2) + np.trace(cov)
    return np.sqrt(np.clip(sq - 2 * np.trace(cross, axis1=1, axis2=2), 0, None))


def main() -> None:
    start = time.perf_counter()
    s = seeds(0)
    z, y, mean, cov = problem(s["data"])
    z32, y32 = z.astype(np.float32), y.astype(np.float32)
    w = barbell(s["network"])
    rng = np.random.default_rng(s["init"])
    init_dec = rng.standard_normal((TRIALS, N_AGENTS, DIM + 1)).astype(np.float32)
    init_cen = rng.standard_normal((TRIALS, DIM + 1)).astype(np.float32)
    print(f"{'algorithm':<20} {'step':>9} {'W2 mean':>9} {'min':>9} {'max':>9}")
    for name in ("DIGing-SGLD", "DE-SGLD", "SGLD"):
        rng = np.random.default_rng(s["sampling"])            # the same noise for both
        init = init_cen if name == "SGLD" else init_dec
        d = w2(sample(name, z32, y32, w, init, rng).astype(np.float64), mean, cov)
        step = STEP / N_AGENTS if name == "SGLD" else STEP
        print(f"{name:<20} {step:>9.3g} {d.mean():>9.4f} {d.min():>9.4f} {d.max():>9.4f}")
    draws = np.random.default_rng(s["reference"]).multivariate_normal(
        mean, cov, size=(TRIALS, FLOOR_REPLICATES))
    print(f"{'exact draws':<20} {'':>9} {w2(draws, mean, cov).mean():>9.4f}")
    print(f"wall time {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
