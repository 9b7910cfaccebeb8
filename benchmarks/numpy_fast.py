"""The strongest NumPy DIGing-SGLD / DE-SGLD we could reasonably write: the suite's main baseline.

Against :mod:`benchmarks.numpy_baseline` (the plain vectorized loop, kept as a second column):

* agents first, ``x`` and the tracker ``y`` side by side in one ``(N, 2, d, C)`` buffer, so that
  DIGing-SGLD mixes ``[x | y]`` with ONE product ``W @ [x | y]`` per step;
* every update in place into preallocated buffers (``out=``), no temporaries in the loop;
* float32 normals from NumPy's fastest generator (``SFC64`` + ziggurat,
  ``standard_normal(dtype=float32, out=...)``), drawn ``block`` steps at a time on as many
  threads as there are cores (one generator per thread; NumPy releases the GIL while filling)
  and scaled by ``√(2η)`` there;
* mini-batches by the toolkit's subset-table trick: the ``C(n_local, b)`` subsets of an agent's
  samples listed once as rows of 0 / ``n_local/b`` weights, one integer drawn per agent and
  chain (no ``argpartition`` of uniforms), the weights applied to the full residual.

Same problem, same update rules, same data layout on return: final positions ``(C, N, d)``.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .problem import LAMBDA, Problem


class _Normals:
    """``(block, *shape)`` float32 normals times ``scale``, filled by one thread per core."""

    def __init__(self, shape: tuple[int, ...], block: int, scale: float, seed: int,
                 threads: int | None = None):
        self.threads = threads or os.cpu_count() or 1
        self.buffer = np.empty((block, *shape), np.float32)
        flat = self.buffer.reshape(-1)
        edges = np.linspace(0, flat.size, self.threads + 1).astype(int)
        self.parts = [flat[a:b] for a, b in zip(edges[:-1], edges[1:])]
        seqs = np.random.SeedSequence(seed).spawn(self.threads)
        self.rngs = [np.random.Generator(np.random.SFC64(s)) for s in seqs]
        self.scale = np.float32(scale)
        self.pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None

    def _fill(self, i: int) -> None:
        self.rngs[i].standard_normal(dtype=np.float32, out=self.parts[i])
        self.parts[i] *= self.scale

    def fill(self) -> np.ndarray:
        if self.pool is None:
            self._fill(0)
        else:
            list(self.pool.map(self._fill, range(self.threads)))
        return self.buffer

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()


def run(problem: Problem, num_chains: int, num_steps: int, step_size: float, *,
        batch_size: int | None = None, algorithm: str = "diging", seed: int = 0,
        block: int = 10, threads: int | None = None) -> np.ndarray:
    """Final positions ``(C, N, d)`` after ``num_steps`` iterations from zero (float32)."""
    if algorithm not in ("diging", "de"):
        raise ValueError(f"`algorithm` must be 'diging' or 'de'; got {algorithm!r}.")
    f32 = np.float32
    z = np.ascontiguousarray(problem.features, f32)          # (N, n_local, d)
    yv = np.ascontiguousarray(problem.responses, f32)        # (N, n_local)
    w = np.ascontiguousarray(problem.mixing, f32)            # (P, N, N)
    n, n_local, d = z.shape
    c = num_chains
    eta, prior = f32(step_size), f32(LAMBDA / n)
    zt = np.ascontiguousarray(np.swapaxes(z, 1, 2))          # (N, d, n_local)
    diging = algorithm == "diging"
    parts = 2 if diging else 1
    state = np.zeros((n, parts, d, c), f32)                  # [x | y] per agent row
    mixed = np.empty_like(state)
    grad, grad_new, tmp = (np.empty((n, d, c), f32) for _ in range(3))
    resid = np.empty((n, n_local, c), f32)
    rng = np.random.default_rng(seed)
    if batch_size is not None:
        # Row s of the table: weight n_local / b on the samples of the s-th b-subset, else 0.
        subsets = itertools.combinations(range(n_local), batch_size)
        table = np.array([np.isin(np.arange(n_local), sub) for sub in subsets], f32)
        table *= f32(n_local / batch_size)                            # (S, n_local)
        table_t = np.ascontiguousarray(table.T)                       # (n_local, S)
        rows = np.arange(n_local)[None, :, None]

    def gradient(x: np.ndarray, out: np.ndarray) -> None:
        """``out ← ∇f_i(x_i)`` for ``x`` of shape ``(N, d, C)``."""
        np.matmul(z, x, out=resid)
        np.subtract(resid, yv[:, :, None], out=resid)
        if batch_size is not None:           # residuals of the samples outside the subset: 0
            pick = rng.integers(0, table.shape[0], size=(n, 1, c))      # one word per agent, chain
            np.multiply(resid, table_t[rows, pick], out=resid)             # (N, n_local, C)
        np.matmul(zt, resid, out=out)
        np.multiply(x, prior, out=tmp)
        out += tmp

    normals = _Normals((n, d, c), min(block, num_steps), float(np.sqrt(2 * step_size)), seed + 1,
                       threads)
    try:
        x = state[:, 0]
        gradient(x, grad)
        if diging:
            state[:, 1] = grad                                   # y⁽⁰⁾ = ∇f(x⁽⁰⁾)
        for k in range(num_steps):
            j = k % normals.buffer.shape[0]
            if j == 0:
                noise = normals.fill()
            np.matmul(w[k % w.shape[0]], state.reshape(n, -1), out=mixed.reshape(n, -1))
            x_new = mixed[:, 0]
            np.multiply(state[:, 1] if diging else grad, eta, out=tmp)   # η y or η ∇f(x)
            x_new -= tmp
            x_new += noise[j]
            gradient(x_new, grad_new)
            if diging:
                y_new = mixed[:, 1]
                y_new += grad_new
                y_new -= grad
            state, mixed = mixed, state
            grad, grad_new = grad_new, grad
    finally:
        normals.close()
    return np.ascontiguousarray(np.moveaxis(state[:, 0], 2, 0))
