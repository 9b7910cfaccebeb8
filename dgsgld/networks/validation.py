"""Checks of Assumption 3.2 on mixing matrices, run on the host at set-up: (i)–(ii) on every
matrix (:func:`validate_schedule`) and (iii), joint connectivity of the graphs over the period or
a window (:func:`check_joint_connectivity`, which :func:`dgsgld.sample` runs on every network)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import check_mixing, is_concrete

__all__ = ["validate_schedule", "check_joint_connectivity", "DEFAULT_TOL"]

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
    not an edge of snapshot ``p``. Joint connectivity (iii) is checked by
    :func:`check_joint_connectivity`; the window it gives ``δ < 1`` is a diagnostic, see
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


# -- Assumption 3.2 (iii): joint connectivity --------------------------------------------------

#: Snapshots of a schedule generated on the fly whose union is checked when no window is given.
DEFAULT_CONNECTIVITY_WINDOW = 100


def _snapshot_edges(w: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)`` of the nonzero off-diagonal weights of one snapshot (any format)."""
    if hasattr(w, "neighbors"):  # dgsgld.sparse.NeighborMixing
        nbr, wts = np.asarray(w.neighbors), np.asarray(w.weights)
        rows = np.broadcast_to(np.arange(nbr.shape[0])[:, None], nbr.shape)
        keep = wts != 0
        return rows[keep], nbr[keep]
    if hasattr(w, "senders"):  # dgsgld.sparse.EdgeMixing
        keep = np.asarray(w.weights) != 0
        return np.asarray(w.receivers)[keep], np.asarray(w.senders)[keep]
    return np.nonzero(np.asarray(w))


def _components(num_agents: int, rows: np.ndarray, cols: np.ndarray) -> list[np.ndarray]:
    """Connected components (sorted agent indices, ordered by their smallest agent) of the
    undirected graph with these edges.

    Min-label propagation over the edges with one pointer jump per round (as the traced check
    in ``dgsgld._validation.connectivity_error_if``): each label stays an agent of its own
    component, so the fixed point is each component's smallest agent; about ``log₂`` of the
    diameter rounds on rings and paths. Plain NumPy: the run's checks need no SciPy import.
    """
    labels = np.arange(num_agents)
    while True:
        new = labels.copy()
        np.minimum.at(new, rows, labels[cols])
        np.minimum.at(new, cols, labels[rows])
        new = new[new]
        if np.array_equal(new, labels):
            break
        labels = new
    _, labels = np.unique(labels, return_inverse=True)  # 0, 1, ... by smallest agent
    count = int(labels.max()) + 1 if num_agents else 0
    order = np.argsort(labels, kind="stable")
    return np.split(order, np.cumsum(np.bincount(labels, minlength=count))[:-1])


def format_components(parts: list[np.ndarray], max_parts: int = 6, max_agents: int = 12) -> str:
    """``"agents {0, 1} | {2, 3}"``, shortened for large networks."""

    def one(p: np.ndarray) -> str:
        shown = ", ".join(str(int(i)) for i in p[:max_agents])
        return "{" + shown + (f", ... ({len(p)} agents)" if len(p) > max_agents else "") + "}"

    text = " | ".join(one(p) for p in parts[:max_parts])
    more = f" | ... ({len(parts) - max_parts} more components)" if len(parts) > max_parts else ""
    return f"agents {text}{more}"


def union_adjacency(schedule: Any, num: int):
    """Boolean ``(N, N)`` union of the graphs of ``W⁽⁰⁾, …, W⁽ⁿᵘᵐ⁻¹⁾`` (with the diagonal) of a
    schedule object with ``matrix_at``, in one ``lax.scan`` (``N²`` memory, unlike
    ``materialize(num)``); traceable, so it also serves checks inside a user's ``jit``."""
    import jax
    import jax.numpy as jnp

    def body(union, k):
        w = schedule.matrix_at(k)
        dense = w.todense() if hasattr(w, "todense") else w
        return union | (dense != 0), None

    n = schedule.num_agents
    return jax.lax.scan(body, jnp.zeros((n, n), bool), jnp.arange(num))[0]


def on_the_fly_window(schedule: Any, window: int | None) -> int:
    """Snapshots of an on-the-fly schedule checked: ``window`` (default
    :data:`DEFAULT_CONNECTIVITY_WINDOW`), at most the period."""
    num = int(window or DEFAULT_CONNECTIVITY_WINDOW)
    period = getattr(schedule, "period", None)
    return num if period is None else min(num, int(period))


def check_joint_connectivity(mixing: Any, window: int | None = None, *,
                             name: str = "mixing") -> None:
    """Refuse a schedule whose graphs are never jointly connected (Assumption 3.2 (iii)).

    The graph of a snapshot links ``i ≠ j`` when ``W[i, j] ≠ 0``. Without ``window``, the union
    of the graphs over the whole period must be connected (otherwise no window ``B`` can give
    ``δ < 1``, and agents in different components never exchange information). With an integer
    ``window = B``, the union over each of the ``P`` cyclic windows of ``B`` consecutive
    snapshots must be connected (``B``-joint connectivity, a stronger check).

    Schedules generated on the fly (``matrix_at`` without a finite stack) are checked over their
    first ``window`` snapshots (default :data:`DEFAULT_CONNECTIVITY_WINDOW`, or the period when
    shorter). A connected union proves joint connectivity; a disconnected one over a window
    shorter than the period may be a false alarm, which the message says.

    Cost: one pass over the nonzero weights plus a few NumPy passes over the edges.

    Args:
        mixing: a ``(P, N, N)`` stack, an ``(N, N)`` matrix, a schedule with ``.matrices``, a
            :class:`dgsgld.sparse.SparseSchedule` or an on-the-fly schedule. Concrete values.
        window: ``B``, or ``None`` (see above).
        name: what to call the schedule in the message.

    Raises:
        ValueError: naming the window of snapshots and the connected components found, as
            ``"`mixing` is not jointly connected: ... agents {0, 1} | {2, 3}"``.
    """
    if window is not None and (isinstance(window, bool) or not isinstance(window, (int, np.integer))
                               or window < 1):
        raise ValueError(
            f"`connectivity_window` must be a positive integer or None; got {window!r}."
        )
    on_the_fly = (hasattr(mixing, "matrix_at") and not hasattr(mixing, "snapshots")
                  and not hasattr(mixing, "matrices"))
    if on_the_fly:
        import jax

        period = getattr(mixing, "period", None)
        num = on_the_fly_window(mixing, window)
        union = np.array(jax.jit(union_adjacency, static_argnums=1)(mixing, num))
        np.fill_diagonal(union, False)
        parts = _components(union.shape[0], *np.nonzero(union))
        if len(parts) > 1:
            scope = ("the whole period" if period is not None and num == period
                     else "a window set by `connectivity_window`; a longer one may connect")
            raise ValueError(
                f"`{name}` is not jointly connected: the union of the graphs of snapshots "
                f"0..{num - 1} ({scope}) has {len(parts)} connected components: "
                f"{format_components(parts)}."
            )
        return
    if hasattr(mixing, "snapshots"):  # dgsgld.sparse.SparseSchedule: read to the host once
        import jax

        host = jax.tree.map(np.asarray, mixing.snapshots)
        period, n = mixing.period, mixing.num_agents
        edges = [_snapshot_edges(jax.tree.map(lambda a, p=p: a[p], host)) for p in range(period)]
    else:
        stack = np.asarray(getattr(mixing, "matrices", mixing))
        if stack.ndim == 2:
            stack = stack[None]
        period, n = stack.shape[0], stack.shape[-1]
        if window is None or window >= period:  # the period's union: one pass over the stack
            edges = [np.nonzero(np.any(stack != 0, axis=0))]
        else:
            edges = [_snapshot_edges(w) for w in stack]
    span = period if window is None else min(int(window), period)
    starts = [0] if span == period else range(period)
    for s in starts:
        picked = [edges[(s + b) % len(edges)] for b in range(min(span, len(edges)))]
        rows = np.concatenate([r for r, _ in picked])
        cols = np.concatenate([c for _, c in picked])
        off = rows != cols
        parts = _components(n, rows[off], cols[off])
        if len(parts) > 1:
            last = (s + span - 1) % period
            what = (f"all {period} snapshots of the period" if span == period
                    else f"the {span} snapshots {s}..{last} (cyclic window B = {span})")
            raise ValueError(
                f"`{name}` is not jointly connected: the union of the graphs of {what} has "
                f"{len(parts)} connected components: {format_components(parts)}."
            )
