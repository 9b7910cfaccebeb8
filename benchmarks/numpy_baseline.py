"""A straightforward vectorized NumPy DIGing-SGLD / DE-SGLD, the baseline of the benchmarks.

A Python loop over iterations; every chain and agent in one array; noise from NumPy's default
generator (PCG64 + ziggurat, the fastest normal generator NumPy offers). Two layouts:

* ``"agent"`` (default, the fast one): positions ``(N, d, C)``, so that mixing is ONE matrix
  product ``W @ x.reshape(N, d C)`` and the gradient ``N`` products ``(n_local, d) @ (d, C)``;
* ``"chain"``: positions ``(C, N, d)`` as one would first write it (``W @ x`` broadcasts over
  chains, i.e. ``C`` small products) — kept to show what the layout costs in NumPy.

NumPy's ``einsum`` is avoided: it does not call BLAS for these shapes and is ~30x slower.
"""

from __future__ import annotations

import numpy as np

from .problem import LAMBDA, Problem


def run(problem: Problem, num_chains: int, num_steps: int, step_size: float, *,
        batch_size: int | None = None, algorithm: str = "diging", layout: str = "agent",
        seed: int = 0, dtype=np.float32, sparse: bool = False) -> np.ndarray:
    """Final positions ``(C, N, d)`` after ``num_steps`` iterations from zero; with ``sparse``
    the mixing matrices are ``scipy.sparse`` CSR matrices (agent layout only)."""
    if algorithm not in ("diging", "de"):
        raise ValueError(f"`algorithm` must be 'diging' or 'de'; got {algorithm!r}.")
    if layout not in ("agent", "chain"):
        raise ValueError(f"`layout` must be 'agent' or 'chain'; got {layout!r}.")
    rng = np.random.default_rng(seed)
    z = problem.features.astype(dtype)                 # (N, n_local, d)
    y = problem.responses.astype(dtype)                # (N, n_local)
    w = problem.mixing.astype(dtype)                   # (P, N, N)
    if sparse:
        import scipy.sparse

        w = [scipy.sparse.csr_array(m) for m in w]
    n_agents, n_local, dim = z.shape
    eta, scale = dtype(step_size), dtype(np.sqrt(2 * step_size))
    prior = dtype(LAMBDA / n_agents)
    agent_major = layout == "agent"
    shape = (n_agents, dim, num_chains) if agent_major else (num_chains, n_agents, dim)
    zt = np.swapaxes(z, 1, 2)                          # (N, d, n_local)
    agents = np.arange(n_agents)

    def grad(x):
        if batch_size is None:
            if agent_major:                            # (N, n_local, d) @ (N, d, C)
                return zt @ (z @ x - y[:, :, None]) + prior * x
            resid = (z @ x[..., None])[..., 0] - y     # (C, N, n_local)
            return (zt @ resid[..., None])[..., 0] + prior * x
        # Mini-batch without replacement per agent and chain: the b smallest of uniforms.
        u = rng.random((n_agents, num_chains, n_local))
        idx = np.argpartition(u, batch_size - 1, axis=2)[..., :batch_size]   # (N, C, b)
        zb = z[agents[:, None, None], idx]             # (N, C, b, d)
        yb = y[agents[:, None, None], idx]             # (N, C, b)
        xc = np.swapaxes(x, 1, 2) if agent_major else np.swapaxes(x, 0, 1)   # views (N, C, d)
        resid = (zb @ xc[..., None])[..., 0] - yb
        g = dtype(n_local / batch_size) * (np.swapaxes(zb, 2, 3) @ resid[..., None])[..., 0]
        return (np.swapaxes(g, 1, 2) if agent_major else np.swapaxes(g, 0, 1)) + prior * x

    def mix(m, v):
        if agent_major:
            return (m @ v.reshape(n_agents, -1)).reshape(v.shape)
        return m @ v

    x = np.zeros(shape, dtype)
    g = grad(x)
    tracker = g
    for k in range(num_steps):
        m = w[k % len(w)]
        noise = rng.standard_normal(shape, dtype=dtype)
        if algorithm == "diging":
            x = mix(m, x) - eta * tracker + scale * noise
            g_new = grad(x)
            tracker = mix(m, tracker) + g_new - g
            g = g_new
        else:
            x = mix(m, x) - eta * grad(x) + scale * noise
    return np.moveaxis(x, 2, 0) if agent_major else x
