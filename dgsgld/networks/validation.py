"""Checks of Assumption 3.2 (i)–(ii) on a stack of mixing matrices, run on the host at set-up."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_mixing, is_concrete

__all__ = ["validate_schedule", "DEFAULT_TOL"]

#: Tolerance for symmetry and row/column sums; float32 storage of weights costs about 1e-7.
DEFAULT_TOL = 1e-5


def validate_schedule(
    stack: Any,
    adjacency: Any = None,
    *,
    tol: float = DEFAULT_TOL,
    off_graph_tol: float = 0.0,
    name: str = "schedule",
) -> None:
    """Check that every matrix of a schedule satisfies Assumption 3.2 (i) and (ii).

    Square ``(P, N, N)`` shape, finite, symmetric, nonnegative and doubly stochastic within ``tol``
    (via :func:`dgsgld._validation.check_mixing`); when the graphs are known, also zero weight off
    the graph: ``|W[p, i, j]| <= off_graph_tol`` (exactly 0 by default) for every ``i ≠ j`` that is
    not an edge of snapshot ``p``. Joint connectivity (iii) is a diagnostic, not a check: see
    :func:`dgsgld.networks.smallest_joint_connectivity_window`.

    Args:
        stack: ``(P, N, N)`` mixing matrices (an ``(N, N)`` matrix is one snapshot), any array type;
            a traced stack (inside ``jit``) is only shape-checked.
        adjacency: ``None``, or the graphs as a bool ``(P, N, N)`` or ``(N, N)`` array (shared by
            all snapshots); nonzero off-diagonal entries are edges.
        tol: absolute tolerance for symmetry, nonnegativity and row/column sums.
        off_graph_tol: largest weight tolerated on a non-edge.
        name: what to call the schedule in error messages.

    Raises:
        ValueError: naming the matrix index, the violated property and the worst entry, as
            ``"`<name>`[k] is not <property>: ..."`` with ``<property>`` one of ``finite``,
            ``symmetric``, ``nonnegative``, ``doubly stochastic``, ``zero off the graph``, then
            the worst entry ``(i, j)`` (or row/column) and its value; or, for a stack that is not
            ``(P, N, N)``, ``"`<name>` must be a (P, N, N) stack ..."``.
    """
    if getattr(stack, "ndim", None) == 2:
        stack = stack[None]
    check_mixing(stack, tol=tol, name=name)
    if adjacency is None or not is_concrete(stack):  # traced stacks are only shape-checked
        return
    w = np.asarray(stack)
    adj = np.asarray(adjacency) != 0
    if adj.ndim == 2:
        adj = np.broadcast_to(adj, w.shape)
    if adj.shape != w.shape:
        raise ValueError(
            f"`{name}`: adjacency has shape {adj.shape}, expected {w.shape} to match the matrices."
        )
    n = w.shape[-1]
    eye = np.eye(n, dtype=bool)
    for p in range(w.shape[0]):  # one matrix at a time keeps N = 1000 schedules cheap in memory
        off = np.where(adj[p] | eye, 0.0, np.abs(w[p].astype(np.float64)))
        flat = int(np.argmax(off))
        worst = off.flat[flat]
        if worst > off_graph_tol:
            i, j = divmod(flat, n)
            raise ValueError(
                f"`{name}`[{p}] is not zero off the graph (Assumption 3.2(i)): "
                f"W[{i}, {j}] = {float(w[p, i, j])!r} but ({i}, {j}) is not an edge "
                f"(tolerance {off_graph_tol:g})."
            )
