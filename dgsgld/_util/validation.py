"""Checks run on the host before anything is compiled, with errors that say what is wrong.

Every check names the argument, what was expected and what was found, so a bad input fails at
once rather than as a NaN thousands of iterations later.
"""

import math
import os

import jax
import numpy as np

#: Absolute tolerance on row/column sums and symmetry of mixing matrices. Float32 rounding of a
#: row of N weights summing to one is about N * 6e-8, far below this for any practical N.
MIXING_TOL = 1e-5


def is_concrete(x) -> bool:
    """True when ``x`` holds values now (not a tracer inside ``jit``/``grad``/``vmap``)."""
    return not isinstance(x, jax.core.Tracer)


def is_concrete_tree(tree) -> bool:
    """True when every leaf of ``tree`` is :func:`is_concrete`."""
    return all(is_concrete(leaf) for leaf in jax.tree.leaves(tree))


def asymmetry_message(name: str, k: int, i: int, j: int, wij: float, wji: float,
                      tol: float) -> str:
    """The one message for a mixing matrix that is not symmetric, whatever its storage."""
    return (f"`{name}`[{k}] is not symmetric: W[{i}, {j}] = {wij!r} but W[{j}, {i}] = {wji!r} "
            f"(tolerance {tol:g}). A directed network (one-way links, column-stochastic "
            "weights) needs a push-sum sampler, dgsgld.PushDIGingSGLD or "
            "dgsgld.PushSumSGLD (see dgsgld.networks.directed).")


#: ``sums`` of :func:`check_mixing`: the axes of ``(P, N, N)`` that must sum to 1, in the
#: order checked (axis 2 sums a row, axis 1 a column).
STOCHASTIC_AXES = {"both": (2, 1), "rows": (2,), "columns": (1,)}


def check_sums(sums: str) -> None:
    """Refuse a ``sums`` that is not a key of :data:`STOCHASTIC_AXES`, naming it."""
    if sums not in STOCHASTIC_AXES:
        raise ValueError(f"`sums` must be one of {tuple(STOCHASTIC_AXES)}; got {sums!r}.")


def entry_message(name: str, k: int, prop: str, what: str, i: int, j: int, value: float,
                  tol: float) -> str:
    """The one message for a weight that breaks ``prop`` (``finite``, ``nonnegative``)."""
    return (f"`{name}`[{k}] is not {prop}: {what} at entry ({i}, {j}) "
            f"(value {value!r}, tolerance {tol:g}).")


def sum_message(name: str, k: int, axis: int, index: int, total: float, tol: float,
                sums: str = "both") -> str:
    """The one message for a row (``axis`` 2) or column (``axis`` 1) not summing to 1."""
    label = "row" if axis == 2 else "column"
    prop = "doubly stochastic" if sums == "both" else f"{label} stochastic"
    role = ("" if sums == "both" else f" (what agent {index} sends out)" if axis == 1
            else f" (the weights agent {index} puts on what it hears)")
    return (f"`{name}`[{k}] is not {prop}: {label} {index}{role} sums to {total!r}, "
            f"expected 1 (tolerance {tol:g}).")


def check_mixing(stack, *, tol: float = MIXING_TOL, name: str = "mixing", first: int = 0,
                 sums: str = "both") -> None:
    """Check a ``(P, N, N)`` stack of mixing matrices: finite, square, nonnegative and
    stochastic within ``tol``.

    ``sums="both"`` (Assumption 3.2 (i)–(ii)): symmetric and doubly stochastic. ``"columns"``
    (a directed network for push-sum) or ``"rows"``: that axis sums to 1, and no symmetry.
    Traced stacks (inside ``jit``) are only shape-checked. ``first``: the schedule index of
    ``stack[0]`` in messages (a slice of a longer schedule).

    Raises:
        ValueError: naming the matrix index, the property violated and the worst entry, row or
            column (properties in the order finite, symmetric, nonnegative, rows, columns).
    """
    check_sums(sums)
    shape = getattr(stack, "shape", None)
    if shape is None or len(shape) != 3 or shape[1] != shape[2]:
        raise ValueError(
            f"`{name}` must be a (P, N, N) stack of square matrices; got shape {shape}."
        )
    if shape[0] == 0 or shape[1] == 0:
        raise ValueError(f"`{name}` must hold at least one matrix with N >= 1; got shape {shape}.")
    if not is_concrete(stack):
        return
    host = np.asarray(stack)
    # Snapshot by snapshot in float64: the temporaries stay O(N²) whatever the period. Each
    # property's worst entry over the whole stack is the first snapshot's reaching the largest
    # per-snapshot worst (np.argmax's first occurrence, as over the flattened stack).
    stats = [_mixing_defects(host[k].astype(np.float64)) for k in range(shape[0])]

    def worst(prop: int) -> tuple[int, tuple[int, ...], float]:
        values = [s[prop][0] for s in stats]
        k = int(np.argmax(values))
        return k, stats[k][prop][1], float(values[k])

    def value(k: int, *index: int) -> float:
        return host[k][index].astype(np.float64).item()

    def fail(prop: str, k: int, i: int, j: int, what: str) -> None:
        raise ValueError(entry_message(name, k + first, prop, what, i, j, value(k, i, j), tol))

    k, (i, j), bad = worst(0)
    if bad:
        fail("finite", k, i, j, "non-finite weight")
    if sums == "both":
        k, (i, j), asym = worst(1)
        if asym > tol:
            raise ValueError(asymmetry_message(name, k + first, i, j, value(k, i, j),
                                               value(k, j, i), tol))
    k, (i, j), negative = worst(2)
    if negative > tol:
        fail("nonnegative", k, i, j, "negative weight")
    for axis in STOCHASTIC_AXES[sums]:
        k, (a,), err = worst(3 if axis == 2 else 4)
        if err > tol:
            line = host[k][a] if axis == 2 else host[k][:, a]
            raise ValueError(sum_message(name, k + first, axis, a,
                                         line.astype(np.float64).sum().item(), tol, sums))


def _mixing_defects(w: np.ndarray) -> list[tuple[float, tuple[int, ...]]]:
    """Of one ``(N, N)`` float64 matrix, ``(worst value, its index)`` of: non-finite (1 or 0),
    asymmetry ``|W - Wᵀ|``, negativity ``-W``, row and column sum errors (NaN where
    non-finite: those are reported first)."""
    def at(values):
        index = np.unravel_index(int(np.argmax(values)), values.shape)
        return float(values[index]), tuple(int(i) for i in index)

    return [at(~np.isfinite(w)), at(np.abs(w - w.T)), at(-w), at(np.abs(w.sum(axis=1) - 1.0)),
            at(np.abs(w.sum(axis=0) - 1.0))]


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


def available_memory() -> int | None:
    """Bytes of memory available now (``MemAvailable``, else free pages), or ``None``."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(nbytes: float) -> str:
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if nbytes < 1000 or unit == "TB":
            return f"{nbytes:.0f} {unit}" if unit == "bytes" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return ""  # pragma: no cover


def check_memory(nbytes: int, what: str, *, available: int | None = None) -> None:
    """Refuse, before allocating, ``nbytes`` that exceed the memory available now (``what``
    names the argument that sets the size)."""
    available = available_memory() if available is None else available
    if available is not None and nbytes > available:
        raise ValueError(
            f"{what} needs about {format_bytes(nbytes)} of memory but about "
            f"{format_bytes(available)} is available."
        )


# -- checks added for every public entry point ------------------------------------------------
#
# Dtype policy: positions (``init``) must be floating point, and the gradient the model returns
# for them must have the same dtype leaf by leaf (the compiled loop carries positions and
# gradients in one state, whose type may not change between iterations). Data may have any dtype
# (integer labels are common); mixing matrices and step sizes are cast to each position leaf's
# dtype inside the samplers.


def _leaf_name(name: str, path) -> str:
    """``init['w'][0]``-style name of a leaf, or just ``name`` for a bare array."""
    return name + jax.tree_util.keystr(path) if path else name


#: Key implementations whose draws under ``vmap`` depend on the batch (XLA's RngBitGenerator):
#: refused, since a chain's draws must not depend on how chains are batched or sharded.
_BATCH_DEPENDENT_IMPLS = ("rbg", "unsafe_rbg")


def check_key(key, *, name: str = "key") -> None:
    """``key`` must be a PRNG key: ``jax.random.key(seed)`` (typed, shape ``()``) or
    ``jax.random.PRNGKey(seed)`` (raw ``uint32`` of shape ``(2,)``), of an implementation whose
    draws do not depend on batching (not ``rbg``/``unsafe_rbg``)."""
    dtype = getattr(key, "dtype", None)
    shape = getattr(key, "shape", None)
    if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        if shape != ():
            raise ValueError(
                f"`{name}` must be a single PRNG key (shape ()); got a key array of shape {shape}."
            )
        impl = str(jax.random.key_impl(key))
        if impl in _BATCH_DEPENDENT_IMPLS:
            raise ValueError(
                f"`{name}` is a {impl!r} key: inside vmap JAX draws a whole batch of such keys "
                "from the first key, so a chain's draws would depend on which chains run beside "
                "it. Use jax.random.key(seed) (threefry2x32, the fastest here) or "
                "jax.random.key(seed, impl='philox4x32')."
            )
        return
    if dtype == np.uint32 and shape == (2,):
        return
    raise ValueError(
        f"`{name}` must be a PRNG key from jax.random.key(seed) or jax.random.PRNGKey(seed); "
        f"got {type(key).__name__}"
        + (f" of dtype {dtype} and shape {shape}." if dtype is not None else f" {key!r}.")
    )


def check_step_size_range(step_size, start: int, stop: int, *, name: str = "step_size") -> None:
    """A schedule must give a finite positive scalar at the first and last iteration it will run.

    ``start`` and ``stop - 1`` are the first and last counts (``stop > start``). Constants are
    checked by :func:`check_step_size`; this adds the end of a schedule (a decaying schedule that
    reaches zero or a negative value would otherwise stall or blow up silently).
    """
    check_step_size(step_size, name=name)
    if not callable(step_size):
        return
    for count in {int(start), int(stop) - 1}:
        value = step_size(np.int32(count))
        if not is_concrete(value):
            return
        arr = np.asarray(value)
        if arr.ndim != 0:
            raise ValueError(
                f"`{name}` schedule must return a scalar; got shape {arr.shape} at count {count}."
            )
        v = float(arr)
        if not math.isfinite(v) or v <= 0:
            raise ValueError(
                f"`{name}` must be positive and finite at every iteration; the schedule gives "
                f"{v!r} at count {count}."
            )


def _host_parts(leaf):
    """``[(offset, values)]``: the whole of ``leaf`` at offset 0, or, for a ``jax.Array`` split
    over processes, this process's distinct shards at their offsets in the global array."""
    if not isinstance(leaf, jax.Array) or leaf.is_fully_addressable:
        return [((0,) * np.ndim(leaf), np.asarray(leaf))]
    parts = {}
    for shard in leaf.addressable_shards:
        offset = tuple(s.start or 0 for s in shard.index)
        if offset not in parts:  # replicas of one block are checked once
            parts[offset] = np.asarray(shard.data)
    return sorted(parts.items())


def check_finite_tree(tree, *, name: str) -> None:
    """Every floating leaf of ``tree`` that holds values must be finite (of a leaf split over
    processes, each process checks its own part).

    Raises:
        ValueError: naming the leaf, the index of the first non-finite entry and its value.
    """
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if not is_concrete(leaf):
            continue
        parts = _host_parts(leaf)
        if not parts or not np.issubdtype(parts[0][1].dtype, np.inexact):
            continue
        parts = [(offset, arr, ~np.isfinite(arr)) for offset, arr in parts]
        count = sum(int(bad.sum()) for _, _, bad in parts)
        for offset, arr, bad in parts:
            if bad.any():
                local = np.unravel_index(int(np.argmax(bad)), arr.shape)
                index = tuple(int(o + i) for o, i in zip(offset, local))
                raise ValueError(
                    f"`{_leaf_name(name, path)}` must be finite; got {arr[local].item()!r} at "
                    f"index {index} ({count} non-finite entries)."
                )


def check_floating_tree(tree, *, name: str) -> None:
    """Every leaf must be floating point (positions, never integers or complex numbers)."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        dtype = jax.numpy.result_type(leaf)
        if not jax.numpy.issubdtype(dtype, jax.numpy.floating):
            raise ValueError(
                f"`{_leaf_name(name, path)}` must be floating point; got dtype {dtype}. "
                "Cast it, e.g. jnp.asarray(x, jnp.float32)."
            )


def check_leading_axis(tree, size: int, *, name: str, layout: str) -> None:
    """Every leaf of ``tree`` must have a leading axis of ``size`` (e.g. the agents)."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        shape = jax.numpy.shape(leaf)
        if not shape or shape[0] != size:
            raise ValueError(
                f"`{_leaf_name(name, path)}` has shape {shape}; array leaves must be {layout} "
                f"with a leading axis of {size}. Build per-agent parameters with jax.vmap / "
                "eqx.filter_vmap; non-array leaves (e.g. an eqx.nn.MLP's activation) are "
                "static and need no axes."
            )


def check_callable(fn, *, name: str, allow_none: bool = True) -> None:
    if fn is None and allow_none:
        return
    if not callable(fn):
        expected = "a callable or None" if allow_none else "a callable"
        raise ValueError(f"`{name}` must be {expected}; got {type(fn).__name__}.")


def check_gradient_matches(grad, params, *, name: str = "init") -> None:
    """The model's gradient must have the structure, shapes and dtypes of the parameters.

    ``grad`` and ``params`` are pytrees of ``jax.ShapeDtypeStruct`` (from ``jax.eval_shape``).
    """
    want, got = jax.tree.structure(params), jax.tree.structure(grad)
    if want != got:
        raise ValueError(
            f"The model's gradient has pytree structure {got}, but the parameters taken from "
            f"`{name}` have {want}: `{name}` must have the structure `log_likelihood` expects."
        )
    for (path, p), g in zip(jax.tree_util.tree_flatten_with_path(params)[0], jax.tree.leaves(grad)):
        if g.shape != p.shape:
            raise ValueError(
                f"The model's gradient for `{_leaf_name(name, path)}` has shape {g.shape}, "
                f"expected {p.shape} (the shape of one chain of `{name}`)."
            )
        if g.dtype != p.dtype:
            raise ValueError(
                f"The model's gradient for `{_leaf_name(name, path)}` has dtype {g.dtype}, but "
                f"`{name}` has {p.dtype}; use one floating dtype for `{name}` and the data "
                "(mixed precision would change the sampler state's type between iterations)."
            )


def check_scalar_output(fn, args, *, name: str, what: str) -> None:
    """``fn(*args)`` (traced abstractly) must return one real scalar; ``what`` describes args."""
    try:
        out = jax.eval_shape(fn, *args)
    except Exception as err:  # noqa: BLE001 - re-raised with context
        raise ValueError(f"`{name}` failed on {what}: {type(err).__name__}: {err}") from err
    leaves = jax.tree.leaves(out)
    if len(leaves) != 1 or leaves[0].shape != ():
        shapes = jax.tree.map(lambda s: s.shape, out)
        raise ValueError(f"`{name}` must return a scalar for {what}; got shape(s) {shapes}.")
    if not jax.numpy.issubdtype(leaves[0].dtype, jax.numpy.floating):
        raise ValueError(
            f"`{name}` must return a floating scalar for {what}; got dtype {leaves[0].dtype}."
        )


def check_resume_state(state, template, *, name: str = "init") -> None:
    """A state passed to continue a run must be what this sampler produces.

    ``template`` is ``jax.eval_shape`` of the sampler's ``init`` over all chains.
    """
    if type(state) is not type(template):
        raise ValueError(
            f"`{name}` is a {type(state).__name__} but this sampler's state is "
            f"{type(template).__name__}; continue a run with the same sampler type."
        )
    if jax.tree.structure(state) != jax.tree.structure(template):
        raise ValueError(
            f"`{name}` has pytree structure {jax.tree.structure(state)}, expected "
            f"{jax.tree.structure(template)}."
        )
    for (path, t), leaf in zip(
        jax.tree_util.tree_flatten_with_path(template)[0], jax.tree.leaves(state)
    ):
        shape, dtype = np.shape(leaf), jax.numpy.result_type(leaf)
        if shape != t.shape or dtype != t.dtype:
            raise ValueError(
                f"`{_leaf_name(name, path)}` has shape {shape} and dtype {dtype}, expected "
                f"{t.shape} and {t.dtype}."
            )
    count = state.count
    if is_concrete(count) and np.ndim(count) == 1 and np.unique(np.asarray(count)).size != 1:
        raise ValueError(
            f"`{name}.count` must be the same for every chain (one run's state); got "
            f"{np.asarray(count).tolist()}."
        )


#: Relative tolerance on a covariance's negative eigenvalues (times max(1, largest eigenvalue)).
PSD_RTOL = 1e-6


def check_gaussian(mean, cov, *, mean_name: str = "mean", cov_name: str = "cov") -> None:
    """``mean (..., d)`` and ``cov (..., d, d)``: matching ``d``; when concrete, finite,
    symmetric within a relative tolerance and positive semidefinite: every eigenvalue
    ``>= -tol * max(1, largest eigenvalue)`` with ``tol = max(PSD_RTOL, 10 d eps)`` (``eps``
    of the dtype: float32 rounding of an empirical covariance stays inside it)."""
    m_shape, c_shape = np.shape(mean), np.shape(cov)
    if len(m_shape) < 1:
        raise ValueError(f"`{mean_name}` must be (..., d); got a scalar.")
    d = m_shape[-1]
    if len(c_shape) < 2 or c_shape[-2:] != (d, d):
        raise ValueError(
            f"`{cov_name}` must be (..., {d}, {d}) to match `{mean_name}` of shape {m_shape}; "
            f"got shape {c_shape}."
        )
    check_finite_tree(mean, name=mean_name)
    check_finite_tree(cov, name=cov_name)
    if is_concrete(cov):
        c = np.asarray(cov, dtype=np.float64)
        scale = max(float(np.abs(c).max(initial=0.0)), 1e-30)
        asym = float(np.abs(c - np.swapaxes(c, -1, -2)).max(initial=0.0))
        if asym > 1e-4 * scale:
            raise ValueError(
                f"`{cov_name}` must be symmetric; largest |C - C^T| entry is {asym:g} "
                f"(entries up to {scale:g})."
            )
        if d == 0 or c.size == 0:
            return
        eps = np.finfo(np.asarray(cov).dtype).eps if np.asarray(cov).dtype.kind == "f" else 0.0
        tol = max(PSD_RTOL, 10 * d * eps)
        vals = np.linalg.eigvalsh(0.5 * (c + np.swapaxes(c, -1, -2)))
        bound = -tol * np.maximum(1.0, vals[..., -1])
        bad = vals[..., 0] < bound
        if np.any(bad):
            index = np.unravel_index(np.argmax(bad), bad.shape) if bad.ndim else ()
            at = f" (matrix {tuple(int(i) for i in index)})" if index else ""
            raise ValueError(
                f"`{cov_name}` must be positive semidefinite; its smallest eigenvalue is "
                f"{vals[index][0]:g}{at}, below the tolerance {bound[index]:g} "
                f"(-{tol:g} x max(1, largest eigenvalue {vals[index][-1]:g}))."
            )


def check_samples(samples, *, name: str, min_ndim: int, layout: str) -> None:
    """Arrays of draws: at least ``min_ndim`` axes (``layout`` describes them) and finite.

    A non-finite draw is reported with its index: it means a diverged run (see
    ``trace.divergence``), whose statistics would otherwise come out as a silent NaN.
    """
    shape = np.shape(samples)
    if len(shape) < min_ndim:
        raise ValueError(f"`{name}` must be {layout}; got shape {shape}.")
    if any(s == 0 for s in shape):
        raise ValueError(f"`{name}` must not be empty; got shape {shape}.")
    try:
        check_finite_tree(samples, name=name)
    except ValueError as err:
        raise ValueError(f"{err} Did the run diverge? See `trace.divergence`.") from None


# -- checks inside the computation, for values traced under a user's ``jit`` ------------------


def mixing_error_if(target, stack, *, tol: float = MIXING_TOL, name: str = "mixing",
                    sums: str = "both"):
    """``target`` with :func:`check_mixing`'s checks on a traced ``(P, N, N)`` ``stack`` attached
    by ``equinox.error_if``: they run inside the computation and raise when it executes.
    ``sums`` as :func:`check_mixing` (``"columns"``: a directed network, no symmetry).

    Under a user's ``jit`` the host cannot read the stack; attaching the checks to a value the
    run needs (e.g. the initial positions) keeps them from being skipped or optimized away.
    """
    import equinox as eqx
    import jax.numpy as jnp

    w = jnp.asarray(stack)
    limit = jnp.asarray(tol, w.dtype)
    check_sums(sums)
    prop = "doubly stochastic" if sums == "both" else f"{sums[:-1]} stochastic"
    checks = [(~jnp.all(jnp.isfinite(w)), "not finite")]
    if sums == "both":
        checks.append((jnp.max(jnp.abs(w - jnp.swapaxes(w, 1, 2))) > limit, "not symmetric"))
    checks.append((jnp.min(w) < -limit, "not nonnegative"))
    checks += [(jnp.max(jnp.abs(jnp.sum(w, axis=axis) - 1)) > limit,
                f"not {prop} (a {'row' if axis == 2 else 'column'} sum is not 1)")
               for axis in STOCHASTIC_AXES[sums]]
    for bad, what in checks:
        target = eqx.error_if(
            target, bad, f"`{name}` (traced under jit, checked inside the computation) is {what} "
                         f"within tolerance {tol:g}."
        )
    return target


def connectivity_error_if(target, adjacency, *, name: str = "mixing", what: str = "its period"):
    """``target`` with an ``equinox.error_if`` that fails when the graph of the boolean ``(N, N)``
    ``adjacency`` (a union of snapshots' graphs) is disconnected.

    Components by min-label propagation in a ``while_loop``, each round followed by one pointer
    jump (``labels[labels]``: a label is always an agent of the same component, at most its
    own index, so the fixed point is still each component's smallest agent): at most
    ``diameter`` rounds of ``O(N²)``, about ``log₂ diameter`` on rings and paths (10, not 500,
    for a 1 000-agent ring).
    """
    import equinox as eqx
    import jax.numpy as jnp

    n = adjacency.shape[-1]
    adj = adjacency | jnp.eye(n, dtype=bool)

    def spread(carry):
        labels, _ = carry
        new = jnp.min(jnp.where(adj, labels[None, :], n), axis=1)
        new = new[new]
        return new, jnp.any(new != labels)

    labels, _ = jax.lax.while_loop(lambda c: c[1], spread, (jnp.arange(n), jnp.asarray(True)))
    return eqx.error_if(
        target, jnp.any(labels != 0),
        f"`{name}` (traced under jit, checked inside the computation) is not jointly connected: "
        f"the union of its graphs over {what} is disconnected. Pass allow_disconnected=True "
        "to run anyway."
    )


def check_iteration_range(start: int, num_steps: int, *, name: str = "num_steps") -> None:
    """Iteration counts are int32 in the compiled loop: ``start + num_steps`` must fit."""
    limit = 2**31 - 1
    if num_steps > limit:
        raise ValueError(
            f"`{name}` must be at most 2**31 - 1 = {limit} (iteration counts are int32); got "
            f"{num_steps}."
        )
    if start + num_steps > limit:
        raise ValueError(
            f"`init` has run {start} iterations (`init.count`), and {name} = {num_steps} more "
            f"would pass 2**31 - 1 = {limit}, the largest iteration count (int32)."
        )


def check_burn_in(burn_in, num_steps: int, thin: int, name: str = "burn_in") -> int:
    """``0 <= burn_in <= num_steps`` and a multiple of ``thin`` (so a kept iteration starts)."""
    if isinstance(burn_in, bool) or not isinstance(burn_in, (int, np.integer)) or burn_in < 0:
        raise ValueError(f"`{name}` must be a nonnegative integer; got {burn_in!r}.")
    if burn_in > num_steps:
        raise ValueError(f"`{name}` ({burn_in}) must not exceed `num_steps` ({num_steps}).")
    if burn_in % thin:
        raise ValueError(f"`{name}` ({burn_in}) must be a multiple of `thin` ({thin}).")
    return int(burn_in)
