"""Checks run on the host before anything is compiled, with errors that say what is wrong.

Every check names the argument, what was expected and what was found, so a bad input fails at
once rather than as a NaN thousands of iterations later.
"""

import math

import jax
import numpy as np

#: Absolute tolerance on row/column sums and symmetry of mixing matrices. Float32 rounding of a
#: row of N weights summing to one is about N * 6e-8, far below this for any practical N.
MIXING_TOL = 1e-5


def is_concrete(x) -> bool:
    """True when ``x`` holds values now (not a tracer inside ``jit``/``grad``/``vmap``)."""
    return not isinstance(x, jax.core.Tracer)


def check_mixing(stack, *, tol: float = MIXING_TOL, name: str = "mixing") -> None:
    """Check a ``(P, N, N)`` stack of mixing matrices against Assumption 3.2 (i)–(ii).

    Each matrix must be finite, square, symmetric, nonnegative and doubly stochastic within
    ``tol``. Traced stacks (inside ``jit``) are only shape-checked.

    Raises:
        ValueError: naming the matrix index, the property violated and the worst entry.
    """
    shape = getattr(stack, "shape", None)
    if shape is None or len(shape) != 3 or shape[1] != shape[2]:
        raise ValueError(f"`{name}` must be a (P, N, N) stack of square matrices; got shape {shape}.")
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"`{name}` must hold at least one matrix with N >= 1; got shape {shape}.")
    if not is_concrete(stack):
        return
    w = np.asarray(stack, dtype=np.float64)

    def fail(prop: str, values: np.ndarray, what: str) -> None:
        k, i, j = np.unravel_index(int(np.argmax(values)), values.shape)
        raise ValueError(
            f"`{name}`[{k}] is not {prop}: {what} at entry ({i}, {j}) "
            f"(value {w[k, i, j]!r}, tolerance {tol:g})."
        )

    bad = ~np.isfinite(w)
    if bad.any():
        fail("finite", bad.astype(float), "non-finite weight")
    asym = np.abs(w - np.swapaxes(w, 1, 2))
    if asym.max() > tol:
        k, i, j = np.unravel_index(int(np.argmax(asym)), asym.shape)
        raise ValueError(
            f"`{name}`[{k}] is not symmetric: W[{i}, {j}] = {w[k, i, j]!r} but "
            f"W[{j}, {i}] = {w[k, j, i]!r} (tolerance {tol:g})."
        )
    if w.min() < -tol:
        fail("nonnegative", -w, "negative weight")
    row_err = np.abs(w.sum(axis=2) - 1.0)
    if row_err.max() > tol:
        k, i = np.unravel_index(int(np.argmax(row_err)), row_err.shape)
        raise ValueError(
            f"`{name}`[{k}] is not doubly stochastic: row {i} sums to {w[k, i].sum()!r}, "
            f"expected 1 (tolerance {tol:g})."
        )
    col_err = np.abs(w.sum(axis=1) - 1.0)
    if col_err.max() > tol:
        k, j = np.unravel_index(int(np.argmax(col_err)), col_err.shape)
        raise ValueError(
            f"`{name}`[{k}] is not doubly stochastic: column {j} sums to {w[k, :, j].sum()!r}, "
            f"expected 1 (tolerance {tol:g})."
        )


def check_step_size(step_size, *, name: str = "step_size") -> None:
    """A constant step size must be a finite positive scalar; schedules are checked at 0."""
    value = step_size(0) if callable(step_size) else step_size
    if not is_concrete(value):
        return
    arr = np.asarray(value)
    if arr.ndim != 0:
        raise ValueError(f"`{name}` must be a scalar; got an array of shape {arr.shape}.")
    v = float(arr)
    if not math.isfinite(v) or v <= 0:
        what = "schedule value at count 0" if callable(step_size) else "value"
        raise ValueError(f"`{name}` must be positive and finite; got {what} {v!r}.")


def check_positive_int(value, *, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer; got {value!r}.")
    return int(value)
