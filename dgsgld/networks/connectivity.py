"""Assumption 3.2 (iii): the graphs of a schedule are jointly connected (strongly, for a
directed schedule) over its period or a window. :func:`dgsgld.sample` runs
:func:`check_joint_connectivity` on every network."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ._mixing import _dense_snapshot, is_directed_network, num_agents_of
from ._util import on_the_fly_window
from .validation import sparse_entries

__all__ = ["check_joint_connectivity", "check_strong_connectivity"]


def _snapshot_edges(w: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)`` of the nonzero off-diagonal weights of one snapshot (any format)."""
    if hasattr(w, "neighbors"):  # dgsgld.networks.sparse.NeighborMixing
        nbr, wts = np.asarray(w.neighbors), np.asarray(w.weights)
        rows = np.broadcast_to(np.arange(nbr.shape[0])[:, None], nbr.shape)
        keep = wts != 0
        return rows[keep], nbr[keep]
    if hasattr(w, "senders"):  # dgsgld.networks.sparse.EdgeMixing
        keep = np.asarray(w.weights) != 0
        return np.asarray(w.receivers)[keep], np.asarray(w.senders)[keep]
    return np.nonzero(np.asarray(w))


def _components(num_agents: int, rows: np.ndarray, cols: np.ndarray) -> list[np.ndarray]:
    """Connected components (sorted agent indices, ordered by their smallest agent) of the
    undirected graph with these edges.

    Min-label propagation over the edges with one pointer jump per round (as the traced check
    in ``dgsgld._util.validation.connectivity_error_if``): each label stays an agent of its own
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
        return union | (_dense_snapshot(schedule, k) != 0), None

    n = num_agents_of(schedule)
    return jax.lax.scan(body, jnp.zeros((n, n), bool), jnp.arange(num))[0]


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

    A directed schedule (``network_kind == "column_stochastic"``, see
    :mod:`dgsgld.networks.directed`) must be jointly *strongly* connected instead
    (:func:`check_strong_connectivity`).

    Cost: one pass over the nonzero weights plus a few NumPy passes over the edges.

    Args:
        mixing: a ``(P, N, N)`` stack, an ``(N, N)`` matrix, a schedule with ``.matrices``, a
            :class:`dgsgld.networks.sparse.SparseSchedule` or an on-the-fly schedule. Concrete
            values.
        window: ``B``, or ``None`` (see above).
        name: what to call the schedule in the message.

    Raises:
        ValueError: naming the window of snapshots and the connected components found, as
            ``"`mixing` is not jointly connected: ... agents {0, 1} | {2, 3}"``.
    """
    if is_directed_network(mixing):  # one-way links
        return check_strong_connectivity(mixing, window, name=name)
    if window is not None and (isinstance(window, bool) or not isinstance(window, (int, np.integer))
                               or window < 1):
        raise ValueError(
            f"`connectivity_window` must be a positive integer or None; got {window!r}."
        )
    on_the_fly = (hasattr(mixing, "matrix_at") and not hasattr(mixing, "snapshots")
                  and not hasattr(mixing, "matrices"))
    if on_the_fly:
        period = getattr(mixing, "period", None)
        num = on_the_fly_window(mixing, window)
        import equinox as eqx

        # filter_jit: a schedule that is no pytree (any object with matrix_at) is static.
        union = np.array(eqx.filter_jit(union_adjacency)(mixing, num))
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
    if hasattr(mixing, "snapshots"):  # dgsgld.networks.sparse.SparseSchedule: read to the host once
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


def _strong_components(n: int, rows: np.ndarray, cols: np.ndarray
                       ) -> tuple[list[np.ndarray], int]:
    """Strongly connected components (sorted agents, ordered by smallest agent) of the directed
    graph on ``n`` agents with the links ``cols[e] → rows[e]`` (``W[i, j] ≠ 0``: ``j → i``),
    and the number of weak components."""
    import scipy.sparse
    from scipy.sparse.csgraph import connected_components

    # csgraph: entry (a, b) is the edge a → b.
    graph = scipy.sparse.csr_matrix((np.ones(rows.size, np.int8), (cols, rows)), shape=(n, n))
    weak, _ = connected_components(graph, directed=True, connection="weak")
    count, labels = connected_components(graph, directed=True, connection="strong")
    parts = [np.flatnonzero(labels == c) for c in range(count)]
    return sorted(parts, key=lambda p: int(p[0])), int(weak)


def check_strong_connectivity(mixing: Any, window: int | None = None, *,
                              name: str = "mixing") -> None:
    """Refuse a directed schedule whose union of graphs is not strongly connected.

    Without ``window`` the union over the whole period is checked; with ``window = B`` every one
    of the ``P`` cyclic windows of ``B`` consecutive snapshots must be strongly connected.

    Args:
        mixing: a :class:`DirectedSchedule`, anything with ``.matrices``, a ``(P, N, N)`` or
            ``(N, N)`` array, or a directed :class:`~dgsgld.networks.sparse.SparseSchedule`
            (its links read from its entries, nothing ``N × N`` formed); concrete.
        window: ``B`` or ``None``.
        name: what to call the schedule in the message.

    Raises:
        ValueError: ``"`mixing` is not jointly strongly connected: ..."`` naming the window, the
            strongly connected components and whether the graph is connected as an undirected
            one (then information flows only one way between some components).
    """
    if window is not None and (isinstance(window, bool) or not isinstance(window, (int, np.integer))
                               or window < 1):
        raise ValueError(
            f"`connectivity_window` must be a positive integer or None; got {window!r}."
        )
    if hasattr(mixing, "snapshots"):        # sparse: its stored nonzero entries
        period, n, snap, rows, cols, _, _ = sparse_entries(
            jax.tree.map(np.asarray, mixing.snapshots), name=name)
    else:
        stack = np.asarray(getattr(mixing, "matrices", mixing))
        if stack.ndim == 2:
            stack = stack[None]
        period, n = stack.shape[0], stack.shape[-1]
        snap, rows, cols = np.nonzero(stack)
    span = period if window is None else min(int(window), period)
    for s in ([0] if span == period else range(period)):
        inside = ((snap - s) % period) < span
        parts, weak = _strong_components(n, rows[inside], cols[inside])
        if len(parts) > 1:
            what = (f"all {period} snapshots of the period" if span == period
                    else f"the {span} snapshots {s}..{(s + span - 1) % period} (cyclic window "
                         f"B = {span})")
            how = ("it is connected as an undirected graph, but some links between these "
                   "components run one way only" if weak == 1
                   else f"it has {weak} components even as an undirected graph")
            raise ValueError(
                f"`{name}` is not jointly strongly connected: the union of the directed graphs "
                f"of {what} has {len(parts)} strongly connected components: "
                f"{format_components(parts)} ({how}; agents that never hear the others cannot "
                f"reach consensus with them)."
            )
