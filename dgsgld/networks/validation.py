"""Checks of Assumption 3.2 (i)–(ii) on mixing matrices, run on the host at set-up: every matrix
finite, nonnegative, symmetric and doubly stochastic (:func:`validate_schedule`; column-stochastic
for a directed schedule). Joint connectivity, (iii), is :mod:`dgsgld.networks.connectivity`'s."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._util import validation as _validation
from .._util.validation import check_mixing, is_concrete
from ._mixing import _dense_snapshot, num_agents_of, stochastic_sums
from ._util import on_the_fly_window

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
    sums: str = "both",
) -> None:
    """Check that every matrix of a schedule satisfies Assumption 3.2 (i) and (ii).

    Square ``(P, N, N)`` shape, finite, symmetric, nonnegative and doubly stochastic within ``tol``
    (via :func:`dgsgld._util.validation.check_mixing`); when the graphs are known, also zero weight
    off the graph: ``|W[p, i, j]| <= off_graph_tol`` (exactly 0 by default) for every ``i ≠ j`` that
    is not an edge of snapshot ``p``. Joint connectivity (iii) is checked by
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
        sums: ``"both"`` (symmetric, doubly stochastic), or ``"columns"`` / ``"rows"`` for a
            directed network (that axis sums to 1, no symmetry): see
            :func:`dgsgld._util.validation.check_mixing`.

    Raises:
        ValueError: naming the matrix index, the violated property and the worst entry, as
            ``"`<name>`[k] is not <property>: ..."`` with ``<property>`` one of ``finite``,
            ``symmetric``, ``nonnegative``, ``doubly stochastic`` (``column stochastic``,
            ``row stochastic``), ``zero off the graph``, then
            the worst entry ``(i, j)`` (or row/column) and its value; or, for a stack that is not
            ``(P, N, N)``, ``"`<name>` must be a (P, N, N) stack ..."``.
    """
    if getattr(stack, "ndim", None) == 2:
        stack = stack[None]
    check_mixing(stack, tol=tol, name=name, sums=sums)
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
                f"`{name}`[{p}] is not zero off the graph: W[{i}, {j}] = {float(w[p, i, j])!r} "
                f"but agent {j} does not send to agent {i} (tolerance {off_graph_tol:g})."
            )


# -- Assumption 3.2 (i)-(ii) on every other network form ---------------------------------------


def _fail_entry(name: str, p: int, what: str) -> ValueError:
    return ValueError(f"`{name}`[{p}] {what}")


def _as_stacked(leaf, lead: int) -> np.ndarray:
    """``leaf`` as a host array with a leading snapshot axis (``lead`` axes per snapshot)."""
    arr = np.asarray(leaf)
    return arr[None] if arr.ndim == lead else arr


def _check_indices(field: str, idx: np.ndarray, n: int, name: str, stacked: bool) -> None:
    if not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"`{name}`.{field} must hold integer agent indices; got dtype {idx.dtype}.")
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        at = tuple(int(a) for a in np.unravel_index(int(np.argmax(bad)), idx.shape))
        shown = at if stacked else at[1:]  # the index as the caller's array has it
        raise ValueError(
            f"`{name}`.{field}[{', '.join(map(str, shown))}] = {int(idx[at])} is not an agent: "
            f"indices must lie in [0, {n}) ({n} agents)."
        )


def _shape_error(name: str, fields: dict, expect: str) -> ValueError:
    shapes = ", ".join(f"{k} {tuple(np.shape(v))}" for k, v in fields.items())
    return ValueError(f"`{name}` has inconsistent shapes ({shapes}); expected {expect}.")


def sparse_entries(snapshots: Any, *, name: str = "mixing"):
    """The stored off-diagonal entries of sparse snapshots, after the checks of their structure.

    Works on :class:`dgsgld.networks.sparse.NeighborMixing`,
    :class:`~dgsgld.networks.sparse.EdgeMixing` and
    :class:`~dgsgld.networks.sparse.CirculantMixing`, one snapshot (leaves ``(N, ...)``) or a stack
    (leaves ``(P, N, ...)``), concrete. Structure: integer indices in ``[0, N)``; every
    off-diagonal entry stored once (the product adds repeats); list entries of an agent to itself
    only as padding (weight 0: self-weights live in ``diagonal``); sorted ``receivers`` (the
    edge product sums sorted segments); distinct circulant shifts in ``1..N-1`` and one
    self-weight per circulant snapshot (its product uses ``diagonal[0]`` for every agent).

    Returns:
        ``(P, N, snapshot, row, col, weight, diagonal)``: ``(nnz,)`` arrays of the nonzero
        off-diagonal entries (unique) and the ``(P, N)`` diagonal, float64 weights. ``O(nnz)``
        memory: nothing ``N × N`` is formed.

    Raises:
        ValueError / TypeError: naming the field, the snapshot and the entry at fault.
    """
    diag = np.asarray(snapshots.diagonal)
    if diag.ndim not in (1, 2):
        raise ValueError(f"`{name}`.diagonal must be (N,) or (P, N); got shape {diag.shape}.")
    stacked = diag.ndim == 2
    diag = diag if stacked else diag[None]
    period, n = diag.shape
    if hasattr(snapshots, "shifts"):  # circulant: offsets s, W[i, (i + s) mod N] = w_s
        shifts = snapshots.shifts
        ok = all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and 1 <= s < n
                 for s in shifts)
        if not ok or len(set(shifts)) != len(shifts):
            raise ValueError(f"`{name}`.shifts must be distinct integer offsets in 1..{n - 1} "
                             f"({n} agents); got {shifts}.")
        wts = _as_stacked(snapshots.weights, 1)
        if wts.shape != (period, len(shifts)):
            raise _shape_error(name, {"weights": wts, "diagonal": diag},
                               f"weights (P, {len(shifts)}) (one per shift), diagonal (P, N)")
        uneven = diag != diag[:, :1]
        if uneven.any():
            p, i = np.unravel_index(int(np.argmax(uneven)), uneven.shape)
            raise _fail_entry(name, p, f"is not circulant: diagonal[{i}] = {diag[p, i].item()!r} "
                              f"but diagonal[0] = {diag[p, 0].item()!r} (a circulant product "
                              "uses one self-weight for every agent).")
        s = np.asarray(shifts, np.int64)
        snap = np.repeat(np.arange(period), n * len(s))
        row = np.tile(np.repeat(np.arange(n), len(s)), period)
        col = (row + np.tile(s, n * period)) % n
        weight = np.repeat(wts[:, None, :], n, axis=1).reshape(-1)
    else:
        if hasattr(snapshots, "neighbors"):
            nbr, wts = _as_stacked(snapshots.neighbors, 2), _as_stacked(snapshots.weights, 2)
            if nbr.shape != wts.shape or nbr.shape[:2] != (period, n):
                raise _shape_error(name, {"neighbors": nbr, "weights": wts, "diagonal": diag},
                                   "neighbors and weights (P, N, K), diagonal (P, N)")
            _check_indices("neighbors", nbr, n, name, stacked)
            snap = np.repeat(np.arange(period), n * nbr.shape[2])
            row = np.tile(np.repeat(np.arange(n), nbr.shape[2]), period)
            col, weight, where = nbr.reshape(-1), wts.reshape(-1), "neighbour lists"
        else:
            rec, snd = _as_stacked(snapshots.receivers, 1), _as_stacked(snapshots.senders, 1)
            wts = _as_stacked(snapshots.weights, 1)
            if not (rec.shape == snd.shape == wts.shape) or rec.shape[0] != period:
                raise _shape_error(name, {"receivers": rec, "senders": snd, "weights": wts,
                                          "diagonal": diag},
                                   "receivers, senders and weights (P, E), diagonal (P, N)")
            _check_indices("receivers", rec, n, name, stacked)
            _check_indices("senders", snd, n, name, stacked)
            down = np.diff(rec.astype(np.int64), axis=1) < 0
            if down.any():
                p, e = np.unravel_index(int(np.argmax(down)), down.shape)
                where_p = f"[{p}]" if stacked else ""
                raise ValueError(
                    f"`{name}`.receivers{where_p} must be sorted (the product sums sorted "
                    "segments): "
                    f"entry {e + 1} is {int(rec[p, e + 1])} after {int(rec[p, e])}.")
            snap = np.repeat(np.arange(period), rec.shape[1])
            row, col, weight, where = rec.reshape(-1), snd.reshape(-1), wts.reshape(-1), "edge list"
        weight = weight.astype(np.float64)
        loops = (row == col) & (weight != 0)
        if loops.any():
            e = int(np.argmax(loops))
            raise _fail_entry(name, int(snap[e]), (
                f"stores the self-weight W[{int(row[e])}, {int(row[e])}] = "
                f"{float(weight[e])!r} in its "
                f"{where}; self-weights belong in `diagonal` (an entry of an agent to itself is "
                "padding, weight 0)."))
    weight = weight.astype(np.float64)
    keep = (weight != 0) & (row != col)
    snap, weight = snap[keep], weight[keep]
    row, col = row[keep].astype(np.int64), col[keep].astype(np.int64)
    key = (snap * n + row) * n + col
    order = np.argsort(key, kind="stable")
    snap, row, col, weight, key = snap[order], row[order], col[order], weight[order], key[order]
    repeat = np.flatnonzero(key[1:] == key[:-1])
    if repeat.size:
        e = int(repeat[0])
        count = int(np.sum(key == key[e]))
        raise _fail_entry(name, int(snap[e]), (
            f"stores the entry W[{int(row[e])}, {int(col[e])}] {count} times (a duplicate edge; "
            "the product adds them all): store each entry once."))
    return period, n, snap, row, col, weight, diag.astype(np.float64)


def validate_sparse(snapshots: Any, *, tol: float = DEFAULT_TOL, name: str = "mixing",
                    sums: str = "both") -> None:
    """Assumption 3.2 (i)–(ii) on sparse snapshots, with the messages of a dense stack.

    The structure is checked by :func:`sparse_entries`; then the matrices must be finite,
    symmetric, nonnegative and doubly stochastic within ``tol`` (``sums="both"``; a directed
    network's, ``"columns"``: nonnegative and column stochastic, no symmetry), and a violation
    is reported exactly as :func:`dgsgld._util.validation.check_mixing` reports it for the dense
    stack (same property order, same worst entry, same text). ``O(nnz log nnz)`` time,
    ``O(nnz + P N)`` memory: a 10 000-agent schedule is never densified. Traced leaves are not
    checked here (:func:`dgsgld.sample` checks a traced schedule inside the computation).
    """
    _validation.check_sums(sums)
    if not all(is_concrete(leaf) for leaf in _leaves(snapshots)):
        return
    period, n, snap, row, col, weight, diag = sparse_entries(snapshots, name=name)
    # Every nonzero entry, the diagonal included, sorted row-major as a dense argmax scans them.
    ds, di = np.divmod(np.arange(period * n), n)
    dv = diag.reshape(-1)
    dk = np.flatnonzero(dv != 0)
    s = np.concatenate([snap, ds[dk]])
    i = np.concatenate([row, di[dk]])
    j = np.concatenate([col, di[dk]])
    v = np.concatenate([weight, dv[dk]])
    key = (s * n + i) * n + j
    order = np.argsort(key, kind="stable")
    s, i, j, v, key = s[order], i[order], j[order], v[order], key[order]

    def value(p, a, b) -> float:
        at = np.searchsorted(key, (p * n + a) * n + b)
        return float(v[at]) if at < key.size and key[at] == (p * n + a) * n + b else 0.0

    def fail(prop: str, e: int, what: str) -> None:
        raise ValueError(_validation.entry_message(name, int(s[e]), prop, what, int(i[e]),
                                                   int(j[e]), float(v[e]), tol))

    bad = ~np.isfinite(v)
    if bad.any():
        fail("finite", int(np.argmax(bad)), "non-finite weight")
    if key.size and sums == "both":
        tkey = (s * n + j) * n + i
        at = np.minimum(np.searchsorted(key, tkey), key.size - 1)
        vt = np.where(key[at] == tkey, v[at], 0.0)
        asym = np.abs(v - vt)
        if asym.max() > tol:
            worst = np.flatnonzero(asym == asym.max())
            first = int(np.min(np.minimum(key[worst], tkey[worst])))
            p, rest = divmod(first, n * n)
            a, b = divmod(rest, n)
            raise ValueError(_validation.asymmetry_message(name, p, a, b, value(p, a, b),
                                                           value(p, b, a), tol))
    if key.size and v.min() < -tol:
        fail("nonnegative", int(np.argmin(v)), "negative weight")
    index = {2: i, 1: j}
    for axis in _validation.STOCHASTIC_AXES[sums]:   # in a dense stack's order
        total = np.bincount(s * n + index[axis], weights=v, minlength=period * n)
        err = np.abs(total - 1.0)
        if err.max() > tol:
            p, a = divmod(int(np.argmax(err)), n)
            raise ValueError(_validation.sum_message(name, p, axis, a, float(total[p * n + a]),
                                                     tol, sums))


def _leaves(tree: Any) -> list:
    import jax

    return jax.tree.leaves(tree)


def _snapshot_faults(schedule: Any, num: int, tol: float):
    """``(num,)`` bool, in one ``lax.scan``: snapshots ``0..num-1`` that fail Assumption 3.2
    (i)–(ii) (the predicates of :func:`dgsgld._util.validation.check_mixing`)."""
    import jax
    import jax.numpy as jnp

    def body(_, k):
        w = _dense_snapshot(schedule, k)
        # |x| <= tol is False for NaN: a non-finite matrix counts as faulty.
        ok = (jnp.all(jnp.isfinite(w)) & (jnp.max(jnp.abs(w - w.T)) <= tol) & (jnp.min(w) >= -tol)
              & (jnp.max(jnp.abs(jnp.sum(w, axis=1) - 1)) <= tol)
              & (jnp.max(jnp.abs(jnp.sum(w, axis=0) - 1)) <= tol))
        return None, ~ok

    return jax.lax.scan(body, None, jnp.arange(num))[1]


def check_generated(schedule: Any, window: int | None = None, *, tol: float = DEFAULT_TOL,
                    name: str = "mixing") -> None:
    """Assumption 3.2 (i)–(ii) on the first snapshots of a schedule generated on the fly
    (``matrix_at`` without a stored stack; any object, an ``eqx.Module`` or not).

    Snapshots ``0..num-1`` (``num`` from :func:`on_the_fly_window`) are checked in one compiled
    pass; the first faulty one is formed on the host and reported exactly as
    :func:`dgsgld._util.validation.check_mixing` reports a dense stack
    (``"`mixing`[k] is not ..."``).
    """
    import equinox as eqx

    num_agents_of(schedule)
    num = on_the_fly_window(schedule, window)
    faults = np.asarray(eqx.filter_jit(_snapshot_faults)(schedule, num, tol))
    if faults.any():
        k = int(np.argmax(faults))
        w = np.asarray(eqx.filter_jit(_dense_snapshot)(schedule, k), np.float64)
        check_mixing(w[None], tol=tol, name=name, first=k)
        # Passed on the host: only rounding separated it from the compiled predicate; the
        # host check of the others decides.
        for k in np.flatnonzero(faults)[1:]:
            w = np.asarray(eqx.filter_jit(_dense_snapshot)(schedule, int(k)), np.float64)
            check_mixing(w[None], tol=tol, name=name, first=int(k))


def check_values(mixing: Any, window: int | None = None, *, tol: float = DEFAULT_TOL,
                 name: str = "mixing") -> None:
    """Assumption 3.2 (i)–(ii) on any concrete network form :func:`dgsgld.sample` accepts,
    with one message format: a dense stack (``matrices``, or an array) through
    :func:`dgsgld._util.validation.check_mixing`, sparse snapshots through :func:`validate_sparse`,
    a schedule generated on the fly through :func:`check_generated`."""
    sums = stochastic_sums(mixing)  # directed: column stochastic, not symmetric
    if hasattr(mixing, "snapshots"):
        validate_sparse(mixing.snapshots, tol=tol, name=name, sums=sums)
    elif hasattr(mixing, "matrices") or not hasattr(mixing, "matrix_at"):
        stack = getattr(mixing, "matrices", mixing)
        validate_schedule(stack, tol=tol, name=name, sums=sums)
    else:
        check_generated(mixing, window, tol=tol, name=name)
