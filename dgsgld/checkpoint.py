"""Long runs in chunks, saved to disk after each chunk, resumable after a kill.

:func:`sample_chunked` runs :func:`dgsgld.sample` ``chunk_size`` iterations at a time, passing
each chunk's final state back as the next chunk's ``init``. Step ``k`` of chain ``c`` draws from
``fold_in(fold_in(key, c) → run key, k)`` with ``k`` the state's own counter, so a chunked run,
and a run resumed from its checkpoint after a kill, are bit-identical to one uninterrupted call
with the same key.

On-disk format (version 1): a directory ``path`` holding NumPy ``.npz`` archives (zip files
readable with ``numpy.load(..., allow_pickle=False)``; nothing is pickled):

``path/state.npz``
    the commit record, rewritten after every chunk:

    * ``meta``: a 0-d unicode array holding a JSON object: ``format`` (``"dgsgld-checkpoint"``),
      ``version`` (1), ``algorithm`` (sampler class name), ``num_steps``, ``chunk_size``,
      ``thin``, ``num_chains``, ``key`` (the key's data as a list of ints), ``init_sha256``
      (hash of the initial positions or state), ``store_positions``, ``has_values``,
      ``has_ensemble``, ``stop_on_divergence``, ``state_leaves`` (shape and dtype of every state
      leaf), ``steps_done`` (iterations completed), ``chunks_done``, ``stopped`` (true when a
      divergence stopped the run early) and ``dgsgld_version``;
    * ``state/<i>``: leaf ``i`` of the sampler state (``jax.tree.leaves`` order; the structure
      comes from the sampler, so no Python objects are stored), leaves ``(num_chains, ...)``;
    * ``divergence/iteration``, ``divergence/agent``: ``(num_chains,)`` int32, ``-1`` if none.

``path/chunk_<j>.npz`` (``j`` = 00000, 00001, ...)
    the kept outputs of chunk ``j``: ``positions/<i>``, ``values/<i>`` (leaves
    ``(num_chains, kept, ...)``) and ``ensemble/<i>`` (leaves ``(kept, ...)``), plus ``meta``
    (JSON: ``chunk``, ``first_step``, ``last_step``). Chunk 0 holds iterations ``0, thin, ...,
    chunk_size``; chunk ``j > 0`` starts at ``j * chunk_size + thin`` (its first iteration is the
    previous chunk's last).

Every file is written atomically: to a temporary file in the same directory (``.tmp-*``),
flushed and ``fsync``-ed, then moved over the old name with ``os.replace``, and the directory
is ``fsync``-ed. The chunk file is committed before ``state.npz``, so a kill at any point
leaves either the previous commit or the new one; a chunk file beyond ``chunks_done`` and
stray temporary files are ignored and overwritten on resume.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _validation
from . import progress as _progress
from .run import Divergence, Trace, _is_state, _report_divergence, chain_keys
from .run import sample as _sample

__all__ = ["sample_chunked", "read_checkpoint", "FORMAT", "FORMAT_VERSION"]

FORMAT = "dgsgld-checkpoint"
FORMAT_VERSION = 1
_STATE = "state.npz"
_TMP_PREFIX = ".tmp-"


# -- files -----------------------------------------------------------------------------------


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _write_file(fileobj, payload: bytes) -> None:
    """Write ``payload`` to an open file (a seam for tests that interrupt a write)."""
    fileobj.write(payload)


def _atomic_savez(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write an ``.npz`` to ``path`` atomically: temp file in the same directory, fsync, rename."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=".npz", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            _write_file(f, buffer.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def _load_npz(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except Exception as err:  # noqa: BLE001 - re-raised with the file named
        raise ValueError(
            f"Checkpoint file {path!r} is unreadable ({type(err).__name__}: {err}); it was not "
            "written by sample_chunked or was damaged outside it. Delete the directory to start "
            "over."
        ) from err


def _chunk_path(path: str, j: int) -> str:
    return os.path.join(path, f"chunk_{j:05d}.npz")


def read_checkpoint(path: str) -> dict[str, Any]:
    """The raw contents of a checkpoint directory, without a sampler.

    Returns:
        ``{"meta": dict, "state": [leaves], "divergence": Divergence, "chunks": [dict]}`` where
        each chunk dict maps ``"positions"``/``"values"``/``"ensemble"`` to its list of leaves.
    """
    record = _load_npz(os.path.join(path, _STATE))
    if "meta" not in record:
        raise ValueError(f"Checkpoint file {os.path.join(path, _STATE)!r} has no `meta` entry.")
    meta = json.loads(str(record["meta"]))
    if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"Checkpoint {path!r} has format {meta.get('format')!r} version "
            f"{meta.get('version')!r}; expected {FORMAT!r} version {FORMAT_VERSION}."
        )
    state = [record[f"state/{i}"] for i in range(len(meta["state_leaves"]))]
    divergence = Divergence(record["divergence/iteration"], record["divergence/agent"])
    chunks = []
    for j in range(meta["chunks_done"]):
        archive = _load_npz(_chunk_path(path, j))

        def leaves(group):
            names = [k for k in archive if k.startswith(group + "/")]
            return [archive[k] for k in sorted(names, key=lambda k: int(k.split("/")[1]))]

        chunks.append({group: leaves(group) for group in ("positions", "values", "ensemble")})
    return {"meta": meta, "state": state, "divergence": divergence, "chunks": chunks}


# -- metadata ----------------------------------------------------------------------------------


def _key_data(key) -> list[int]:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return np.asarray(key).astype(np.int64).ravel().tolist()


def _tree_sha256(tree) -> str:
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        arr = np.ascontiguousarray(np.asarray(leaf))
        digest.update(f"{arr.dtype.str}{arr.shape}".encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def _leaf_specs(tree) -> list[list]:
    return [[list(np.shape(x)), str(jnp.result_type(x))] for x in jax.tree.leaves(tree)]


#: Metadata that must agree between the checkpoint and the call resuming it.
_MUST_MATCH = (
    "algorithm", "num_steps", "chunk_size", "thin", "num_chains", "key", "init_sha256",
    "store_positions", "has_values", "has_ensemble", "stop_on_divergence", "state_leaves",
)


def _check_meta(found: dict, expected: dict, path: str) -> None:
    for field in _MUST_MATCH:
        if found.get(field) != expected[field]:
            raise ValueError(
                f"Checkpoint {path!r} does not belong to this run: its `{field}` is "
                f"{found.get(field)!r} but this call has {expected[field]!r}. Resume with the "
                "same arguments, or use another `path` (or delete it) to start a new run."
            )


# -- the run ----------------------------------------------------------------------------------


def _concat(parts: list, axis: int):
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=axis), *parts)


def _drop_first(tree, axis: int):
    return jax.tree.map(lambda x: jax.lax.slice_in_dim(x, 1, x.shape[axis], axis=axis), tree)


def _repeat_last(tree, count: int, axis: int):
    def one(x):
        last = jax.lax.slice_in_dim(x, x.shape[axis] - 1, x.shape[axis], axis=axis)
        return jnp.repeat(last, count, axis=axis)

    return jax.tree.map(one, tree)


def sample_chunked(
    algorithm,
    potential,
    mixing,
    init,
    key,
    num_steps: int,
    *,
    chunk_size: int,
    path: str | os.PathLike | None = None,
    thin: int = 1,
    trace_fn: Callable | None = None,
    ensemble_fn: Callable | None = None,
    store_positions: bool | None = None,
    on_divergence: str = "raise",
    stop_on_divergence: bool = False,
    progress: bool | str = False,
    on_chunk: Callable[[int, int], None] | None = None,
) -> Trace:
    """:func:`dgsgld.sample` in chunks of ``chunk_size`` iterations, checkpointed to ``path``.

    The arguments are those of :func:`dgsgld.sample`, plus:

    Args:
        chunk_size: iterations per chunk; a positive multiple of ``thin``. ``num_steps`` need
            not be a multiple of it (the last chunk is shorter).
        path: a directory (created if missing) for the checkpoint; see the module docstring for
            the format. When it already holds a checkpoint of the same run (same sampler type,
            key, ``num_steps``, ``chunk_size``, ``thin``, initial positions, outputs), the run
            resumes after its last completed chunk; a checkpoint of a different run is an error
            naming the field that differs. ``None`` runs in chunks without saving.
        progress: a bar updated after each chunk (see :mod:`dgsgld.progress`); off by default.
        on_chunk: optional ``(steps_done, num_steps) -> None`` called after each chunk is saved.

    Returns:
        A :class:`dgsgld.Trace` equal, bit for bit, to ``dgsgld.sample`` with the same
        arguments: positions ``(num_chains, num_steps // thin + 1, N, ...)``, values, ensemble,
        final state and divergence. ``on_divergence="raise"`` raises when a chunk diverges,
        before that chunk is saved; ``"warn"`` warns once at the end.

    Example:
        >>> trace = sample_chunked(alg, potential, mixing, init, key, 100_000,  # doctest: +SKIP
        ...                        chunk_size=10_000, thin=10, path="runs/diging")
    """
    num_steps = _validation.check_positive_int(num_steps, name="num_steps")
    thin = _validation.check_positive_int(thin, name="thin")
    chunk_size = _validation.check_positive_int(chunk_size, name="chunk_size")
    if num_steps % thin:
        raise ValueError(f"`num_steps` ({num_steps}) must be a multiple of `thin` ({thin}).")
    if chunk_size % thin:
        raise ValueError(
            f"`chunk_size` ({chunk_size}) must be a multiple of `thin` ({thin}), so that kept "
            "iterations fall on the same steps as in one uninterrupted call."
        )
    if on_divergence not in ("raise", "warn", "flag"):
        raise ValueError(
            f"`on_divergence` must be 'raise', 'warn' or 'flag'; got {on_divergence!r}."
        )
    _validation.check_key(key)
    _validation.check_callable(trace_fn, name="trace_fn")
    _validation.check_callable(ensemble_fn, name="ensemble_fn")
    _validation.check_callable(on_chunk, name="on_chunk")
    if store_positions is None:
        store_positions = trace_fn is None and ensemble_fn is None
    store_positions = bool(store_positions)
    resume_from_state = _is_state(init)
    positions = init.position if resume_from_state else init
    leaves = jax.tree.leaves(positions)
    if not leaves or jnp.ndim(leaves[0]) < 1:
        raise ValueError(
            "`init` must be a pytree of arrays with a leading chain axis; got "
            f"{jax.tree.map(jnp.shape, positions)}."
        )
    num_chains = int(jnp.shape(leaves[0])[0])

    # The structure of the state and of the kept outputs, without running anything: a finished
    # checkpoint is read back with no compilation of the sampler.
    if resume_from_state:
        state_template = init
    else:
        state_template = jax.eval_shape(
            jax.vmap(algorithm.init, (0, None, 0)), positions, potential,
            chain_keys(key, num_chains),
        )
    values_template = (
        None if trace_fn is None else jax.eval_shape(jax.vmap(trace_fn), state_template)
    )
    ensemble_template = None if ensemble_fn is None else jax.eval_shape(ensemble_fn, state_template)
    templates = {
        "positions": positions if store_positions else None,
        "values": values_template,
        "ensemble": ensemble_template,
    }
    meta = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "algorithm": type(algorithm).__name__,
        "num_steps": num_steps,
        "chunk_size": chunk_size,
        "thin": thin,
        "num_chains": num_chains,
        "key": _key_data(key),
        "init_sha256": _tree_sha256(init),
        "store_positions": store_positions,
        "has_values": trace_fn is not None,
        "has_ensemble": ensemble_fn is not None,
        "stop_on_divergence": bool(stop_on_divergence),
        "state_leaves": _leaf_specs(state_template),
    }

    state = init
    first_count = int(np.asarray(init.count).reshape(-1)[0]) if resume_from_state else 0
    divergence = Divergence(
        jnp.full((num_chains,), -1, jnp.int32), jnp.full((num_chains,), -1, jnp.int32)
    )
    parts: list[dict] = []
    steps_done, stopped = 0, False
    if path is not None:
        path = os.fspath(path)
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(path):
            if name.startswith(_TMP_PREFIX):  # left by a write that was interrupted
                os.unlink(os.path.join(path, name))
        if os.path.exists(os.path.join(path, _STATE)):
            saved = read_checkpoint(path)
            _check_meta(saved["meta"], meta, path)
            treedef = jax.tree.structure(state_template)
            state = jax.tree.unflatten(treedef, [jnp.asarray(x) for x in saved["state"]])
            divergence = Divergence(*(jnp.asarray(x) for x in saved["divergence"]))
            steps_done, stopped = saved["meta"]["steps_done"], saved["meta"]["stopped"]
            for chunk in saved["chunks"]:
                parts.append({
                    group: None if templates[group] is None else jax.tree.unflatten(
                        jax.tree.structure(templates[group]), [jnp.asarray(x) for x in chunk[group]]
                    )
                    for group in templates
                })

    def save(chunk_index: int, part: dict, first: int, last: int) -> None:
        if path is None:
            return
        arrays = {"meta": np.array(json.dumps({"chunk": chunk_index, "first_step": first,
                                               "last_step": last}))}
        for group, tree in part.items():
            for i, leaf in enumerate(jax.tree.leaves(tree)):
                arrays[f"{group}/{i}"] = np.asarray(leaf)
        _atomic_savez(_chunk_path(path, chunk_index), arrays)
        record = {"meta": np.array(json.dumps({
            **meta, "steps_done": last, "chunks_done": chunk_index + 1, "stopped": stopped,
            "dgsgld_version": _version(),
        }))}
        for i, leaf in enumerate(jax.tree.leaves(state)):
            record[f"state/{i}"] = np.asarray(leaf)
        record["divergence/iteration"] = np.asarray(divergence.iteration)
        record["divergence/agent"] = np.asarray(divergence.agent)
        _atomic_savez(os.path.join(path, _STATE), record)

    show = _progress.wants_progress(progress)
    bar = _progress.ProgressBar(num_steps, initial=steps_done) if show else None
    try:
        while steps_done < num_steps:
            chunk_index = len(parts)
            if stopped:
                # A divergence froze every chain: one uninterrupted call would record the frozen
                # state at every remaining kept iteration, so repeat the last record.
                remaining = (num_steps - steps_done) // thin
                last = parts[-1]
                part = {
                    "positions": _repeat_last(last["positions"], remaining, axis=1),
                    "values": _repeat_last(last["values"], remaining, axis=1),
                    "ensemble": _repeat_last(last["ensemble"], remaining, axis=0),
                }
                steps = num_steps - steps_done
            else:
                steps = min(chunk_size, num_steps - steps_done)
                trace = _sample(
                    algorithm, potential, mixing, state, key, steps, thin=thin,
                    trace_fn=trace_fn, ensemble_fn=ensemble_fn, store_positions=store_positions,
                    on_divergence="flag", stop_on_divergence=stop_on_divergence,
                )
                part = {"positions": trace.positions, "values": trace.values,
                        "ensemble": trace.ensemble}
                if chunk_index:  # iteration 0 of this call is the previous chunk's last one
                    part = {
                        "positions": _drop_first(part["positions"], axis=1),
                        "values": _drop_first(part["values"], axis=1),
                        "ensemble": _drop_first(part["ensemble"], axis=0),
                    }
                new = (trace.divergence.iteration >= 0) & (divergence.iteration < 0)
                divergence = Divergence(
                    jnp.where(new, trace.divergence.iteration, divergence.iteration),
                    jnp.where(new, trace.divergence.agent, divergence.agent),
                )
                if on_divergence == "raise" and bool(jnp.any(new)):
                    _report_divergence(divergence, "raise")
                state = trace.state
                stopped = bool(stop_on_divergence) and bool(jnp.any(divergence.iteration >= 0))
            parts.append(part)
            steps_done += steps
            save(chunk_index, part, first_count + steps_done - steps, first_count + steps_done)
            if bar is not None:
                bar.update_to(steps_done)
            if on_chunk is not None:
                on_chunk(steps_done, num_steps)
    finally:
        if bar is not None:
            bar.close()

    if on_divergence != "flag":  # also a checkpoint written by a run with "flag"
        _report_divergence(divergence, on_divergence)
    return Trace(
        _concat([p["positions"] for p in parts], axis=1),
        _concat([p["values"] for p in parts], axis=1),
        _concat([p["ensemble"] for p in parts], axis=0),
        state,
        divergence,
    )


def _version() -> str:
    from . import __version__

    return __version__

