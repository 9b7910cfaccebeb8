"""Long runs in chunks, saved to disk after each chunk, resumable after a kill.

:func:`sample_chunked` is a loop over :func:`dgsgld.sample`, ``chunk_size`` iterations at a
time, each chunk starting from the previous one's final state, and a :class:`CheckpointDir`
that saves every chunk. Step ``k`` of a chain draws from a key folded with ``k``, the state's
own counter, so a chunked run, and a run resumed after a kill, are bit-identical to one
uninterrupted call with the same key.

A checkpoint is a contract. It records a *fingerprint* of everything that determines the numbers
(:mod:`dgsgld._fingerprint`: the sampler's class and fields, the potential's functions, data,
batch size, mask and prior, the mixing, ``init``, the key, the number of chains, ``num_steps``,
``chunk_size``, every option passed to :func:`dgsgld.sample`, the Python, JAX and dgsgld
versions, and the shapes of the state and of the outputs). A resume whose fingerprint differs is
refused with an error naming the first field that differs. Before anything is returned the files
are cross-checked: counts in the metadata, chunk lengths, the state's ``count`` and the divergence
record must agree, and every array's declared shape and dtype must be the expected one before it
is read (so a damaged or hostile file cannot make the reader allocate more than its own size).

On-disk format (version 2): a directory of NumPy ``.npz`` archives (uncompressed zip files
readable with ``numpy.load(..., allow_pickle=False)``; nothing is pickled):

``path/state.npz``
    the commit record, rewritten after every chunk: ``meta`` (a 0-d unicode array holding a JSON
    object: ``format``, ``version``, ``fingerprint`` (a list of ``[field, description]``),
    ``fingerprint_sha256``, ``run`` (``num_steps``, ``chunk_size``, ``thin``, ``num_chains``,
    ``first_count``, ``stop``, ``count_leaf``), ``specs`` (shape and dtype of every state leaf
    and of one kept row of every output leaf), ``steps_done``, ``chunks_done`` and ``stopped``),
    ``state/<i>`` (leaf ``i`` of the sampler state, leaves ``(num_chains, ...)``),
    ``divergence/iteration`` and ``divergence/agent`` (``(num_chains,)`` int32, ``-1`` if none).
``path/chunk_<j>.npz`` (``j`` = 00000, 00001, ...)
    the kept outputs of chunk ``j``: ``positions/<i>``, ``values/<i>`` (leaves ``(num_chains,
    kept, ...)``), ``ensemble/<i>`` (leaves ``(kept, ...)``) and ``meta`` (JSON: ``chunk``,
    ``first_step``, ``last_step``, ``kept``, ``run`` = the fingerprint's SHA-256). Chunk 0 holds
    iterations ``0, thin, ..., chunk_size``; chunk ``j > 0`` starts at ``j * chunk_size + thin``.
``path/.lock``
    held with ``fcntl.flock`` by the one process writing the directory (its pid inside).

Every file is written to a temporary file in the directory (``.tmp-*``), ``fsync``-ed and moved
into place with ``os.replace``; the chunk file is committed before ``state.npz``, so a kill at any
point leaves either the previous commit or the new one. Chunk files beyond ``chunks_done`` and
temporary files are left-overs of an interrupted write: they are ignored, and removed or
overwritten only by the writer holding the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import json
import os
import sys
import tempfile
import zipfile
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from . import _validation
from . import run as _run
from . import progress as _progress
from ._fingerprint import describe
from .run import Divergence, Trace, _report_divergence
from .run import sample as _sample

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: exclusive creation of the lock file instead
    fcntl = None

__all__ = ["sample_chunked", "read_checkpoint", "CheckpointDir", "CheckpointError", "FORMAT",
           "FORMAT_VERSION"]

FORMAT = "dgsgld-checkpoint"
FORMAT_VERSION = 2
_STATE = "state.npz"
_LOCK = ".lock"
_TMP_PREFIX = ".tmp-"
#: Output groups and the axis of kept iterations in each.
_GROUPS = {"positions": 1, "values": 1, "ensemble": 0}
#: Largest ``meta`` entry read (bytes); real ones are a few kB.
_MAX_META_BYTES = 1 << 22


class CheckpointError(ValueError):
    """A checkpoint directory that cannot be used as asked; the message names the file."""


class Checkpoint(NamedTuple):
    """A checkpoint as read and cross-checked by :meth:`CheckpointDir.load`.

    Attributes:
        meta: the commit record's metadata (see the module docstring).
        state: the sampler state's leaves, each ``(num_chains, ...)``.
        divergence: the :class:`dgsgld.Divergence` record.
        chunks: per committed chunk, ``{"positions"|"values"|"ensemble": [leaves] or None}``.
    """

    meta: dict
    state: list
    divergence: Divergence
    chunks: list


# -- reading .npz archives without trusting them --------------------------------------------------


def _spec(shape, dtype) -> list:
    return [[int(n) for n in shape], np.dtype(dtype).str]


def _read_npz(file: str, expected: dict[str, list | None], partial: bool = False) -> dict:
    """The members of ``file``; ``expected`` maps each name to its ``[shape, dtype]``.

    The archive must hold exactly these members (``partial``: at least these).
    A ``None`` spec is a JSON ``meta`` entry (returned parsed). Every member's header is read and
    compared with its spec, and its declared size with the header, before its data is read.
    """

    def fail(what: str) -> CheckpointError:
        return CheckpointError(
            f"Checkpoint file {file!r} {what}; it was not written by this version of "
            "sample_chunked or was damaged outside it. Delete the checkpoint directory (or pass "
            "another `path`) to start over."
        )

    try:
        archive = zipfile.ZipFile(file)
    except FileNotFoundError:
        raise CheckpointError(f"Checkpoint file {file!r} is missing.") from None
    except (OSError, zipfile.BadZipFile, ValueError) as err:
        raise fail(f"is unreadable ({type(err).__name__}: {err})") from err
    out = {}
    with archive:
        members = {info.filename: info for info in archive.infolist()}
        names = {name[: -len(".npy")] for name in members if name.endswith(".npy")}
        if len(names) != len(members) or not (
            set(expected) <= names if partial else set(expected) == names
        ):
            missing, extra = sorted(set(expected) - names), sorted(set(members) - {
                n + ".npy" for n in expected})
            raise fail(f"holds {len(members)} entries; missing {missing[:10]}, unexpected "
                       f"{extra[:10]}")
        for name, spec in expected.items():
            info = members[name + ".npy"]
            if info.compress_type != zipfile.ZIP_STORED:
                raise fail(f"has a compressed entry `{name}`")
            try:
                with archive.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, fortran, dtype = read_header(f)
                    if dtype.hasobject:
                        raise fail(f"has an entry `{name}` of object dtype")
                    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                    if info.file_size != f.tell() + nbytes:
                        raise fail(f"has an entry `{name}` whose size ({info.file_size} bytes) "
                                   f"disagrees with its header ({shape}, {dtype})")
                    if spec is None:
                        if shape != () or dtype.kind != "U" or nbytes > _MAX_META_BYTES:
                            raise fail(f"has a `{name}` entry of shape {shape} and dtype {dtype}, "
                                       "not a JSON string")
                    elif [list(shape), dtype.str] != spec:
                        raise fail(f"has an entry `{name}` of shape {shape} and dtype {dtype}; "
                                   f"expected {tuple(spec[0])} and {np.dtype(spec[1])}")
                    buffer = bytearray(nbytes)
                    if f.readinto(buffer) != nbytes:
                        raise fail(f"has a truncated entry `{name}`")
            except CheckpointError:
                raise
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
                raise fail(
                    f"has an unreadable entry `{name}` ({type(err).__name__}: {err})"
                ) from err
            array = np.frombuffer(buffer, dtype).reshape(shape, order="F" if fortran else "C")
            if spec is None:
                try:
                    array = json.loads(str(array[()]))
                except json.JSONDecodeError as err:
                    raise fail(f"has `{name}` that is not valid JSON ({err})") from err
                if not isinstance(array, dict):
                    raise fail(f"has `{name}` that is not a JSON object")
            out[name] = array
    return out


def _get(meta: dict, name: str, kind: type, file: str, minimum: int | None = 0):
    """``meta[name]``, checked to be a ``kind`` (ints: ``>= minimum``); else a named error."""
    value = meta.get(name)
    ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
    if ok and kind is int and minimum is not None:
        ok = value >= minimum
    if not ok:
        what = {int: f"an integer >= {minimum}", bool: "true or false", list: "a list",
                dict: "an object", str: "a string"}[kind]
        raise CheckpointError(
            f"Checkpoint file {file!r}: metadata `{name}` is {value!r}; expected {what}. The file "
            "was edited or damaged outside sample_chunked; delete the directory to start over."
        )
    return value


# -- writing ---------------------------------------------------------------------------------------


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


def _json(value) -> np.ndarray:
    return np.array(json.dumps(value))


# -- the directory ---------------------------------------------------------------------------------


def _digest(fingerprint: list) -> str:
    return hashlib.sha256(json.dumps(fingerprint).encode()).hexdigest()


def _chunk_steps(run: dict, j: int) -> int:
    """Iterations in chunk ``j`` (``<= 0`` past the end)."""
    return min(run["chunk_size"], run["num_steps"] - j * run["chunk_size"])


def _chunk_kept(run: dict, j: int) -> int:
    """Kept rows stored for chunk ``j``: chunk 0 also holds iteration 0."""
    return _chunk_steps(run, j) // run["thin"] + (j == 0)


def _layout_fields(run: dict, specs: dict) -> list:
    """The fingerprint's fields that ``meta["run"]`` and ``meta["specs"]`` must reproduce."""
    return [[name, repr(run[name])] for name in ("num_chains", "num_steps", "chunk_size", "thin",
                                                 "first_count", "stop", "count_leaf")] + [
        [f"shapes.{group}", json.dumps(specs[group])] for group in ("state", *_GROUPS)
    ]


class CheckpointDir:
    """A checkpoint directory: its metadata, a cross-checked read, a lock and a chunk writer.

    Example:
        >>> ckpt = CheckpointDir("runs/diging")  # doctest: +SKIP
        >>> ckpt.meta["steps_done"], ckpt.load().state  # doctest: +SKIP
        >>> with ckpt.lock():  # doctest: +SKIP
        ...     ckpt.save_chunk(meta, j, outputs, state, divergence)
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._lock_fd: int | None = None

    def __repr__(self) -> str:
        return f"CheckpointDir({self.path!r})"

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def _chunk_file(self, j: int) -> str:
        return self._file(f"chunk_{j:05d}.npz")

    def exists(self) -> bool:
        """Whether the directory holds a committed checkpoint (``state.npz``)."""
        return os.path.exists(self._file(_STATE))

    @property
    def meta(self) -> dict:
        """The commit record's metadata, with its format and version checked."""
        file = self._file(_STATE)
        if not os.path.exists(file):
            raise CheckpointError(f"{self.path!r} holds no checkpoint ({file!r} is missing).")
        meta = _read_npz(file, {"meta": None}, partial=True)["meta"]
        if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
            raise CheckpointError(
                f"Checkpoint file {file!r} has format {meta.get('format')!r} version "
                f"{meta.get('version')!r}; this dgsgld reads {FORMAT!r} version {FORMAT_VERSION}. "
                "Finish that run with the dgsgld that wrote it, or pass another `path` to start a "
                "new run."
            )
        return meta

    @contextlib.contextmanager
    def lock(self):
        """Hold the directory (created if missing) for one writer; a second one fails at once.

        While held, left-over temporary files of interrupted writes are removed.
        """
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise CheckpointError(f"Checkpoint `path` {self.path!r} is a file, not a directory.")
        try:
            os.makedirs(self.path, exist_ok=True)
            lock_file = self._file(_LOCK)
            flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if fcntl is None else 0)
            fd = os.open(lock_file, flags, 0o644)
        except FileExistsError:  # pragma: no cover - non-POSIX fallback
            raise self._busy(lock_file) from None
        except OSError as err:
            raise CheckpointError(
                f"Cannot write the checkpoint directory {self.path!r}: {err.strerror or err}."
            ) from err
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise self._busy(lock_file) from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            self._lock_fd = fd
            for name in os.listdir(self.path):
                if name.startswith(_TMP_PREFIX):  # left by an interrupted write
                    os.unlink(self._file(name))
            yield self
        finally:
            self._lock_fd = None
            if fcntl is None:  # pragma: no cover
                os.unlink(lock_file)
            os.close(fd)  # releases the flock

    def _busy(self, lock_file: str) -> CheckpointError:
        try:
            with open(lock_file) as f:
                holder = f.read().strip() or "unknown"
        except OSError:
            holder = "unknown"
        return CheckpointError(
            f"Checkpoint directory {self.path!r} is in use by another writer (process {holder}, "
            f"holding {lock_file!r}). Wait for it to finish, or pass another `path`."
        )

    def load(self, fingerprint: list | None = None) -> Checkpoint:
        """Read the committed checkpoint, cross-checking every file before returning.

        Args:
            fingerprint: this run's fingerprint; when given, a checkpoint of a different run is
                refused with an error naming the first field that differs.

        Raises:
            CheckpointError: naming the file and what is wrong.
        """
        file = self._file(_STATE)
        meta = self.meta
        saved = _get(meta, "fingerprint", list, file)
        if not all(isinstance(f, list) and len(f) == 2 and all(isinstance(s, str) for s in f)
                   for f in saved):
            raise CheckpointError(f"Checkpoint file {file!r}: metadata `fingerprint` is malformed.")
        if fingerprint is not None:
            _compare(saved, fingerprint, self.path)
        digest = _digest(saved)
        if meta.get("fingerprint_sha256") != digest:
            raise CheckpointError(
                f"Checkpoint file {file!r}: metadata `fingerprint_sha256` does not match its "
                "`fingerprint`; the file was edited outside sample_chunked."
            )
        run = _get(meta, "run", dict, file)
        specs = _get(meta, "specs", dict, file)
        for name in ("num_chains", "num_steps", "chunk_size", "thin"):
            _get(run, name, int, file, minimum=1)
        _get(run, "first_count", int, file)
        _get(run, "count_leaf", int, file)
        _get(run, "stop", bool, file)
        for group in ("state", *_GROUPS):
            if specs.get(group) is not None:
                _get(specs, group, list, file)
        # The run's layout is part of the fingerprint; the numbers used below must be the same.
        layout = dict(_layout_fields(run, specs))
        for name, value in layout.items():
            if dict(saved).get(name) != value:
                raise CheckpointError(
                    f"Checkpoint file {file!r}: metadata `{name}` ({value}) disagrees with the "
                    f"fingerprint ({dict(saved).get(name)}); the file was edited outside "
                    "sample_chunked."
                )
        steps_done = _get(meta, "steps_done", int, file)
        chunks_done = _get(meta, "chunks_done", int, file, minimum=1)
        stopped = _get(meta, "stopped", bool, file)
        num_chunks = -(-run["num_steps"] // run["chunk_size"])
        want_steps = sum(_chunk_steps(run, j) for j in range(min(chunks_done, num_chunks)))
        if chunks_done > num_chunks or steps_done != want_steps:
            raise CheckpointError(
                f"Checkpoint file {file!r}: `steps_done` = {steps_done} and `chunks_done` = "
                f"{chunks_done} disagree ({min(chunks_done, num_chunks)} chunks of "
                f"{run['chunk_size']} iterations of a {run['num_steps']}-iteration run make "
                f"{want_steps}); the file was edited or damaged outside sample_chunked."
            )
        c = run["num_chains"]
        expected = {"meta": None, "divergence/iteration": _spec((c,), np.int32),
                    "divergence/agent": _spec((c,), np.int32)}
        try:
            expected.update(
                {f"state/{i}": [list(s[0]), s[1]] for i, s in enumerate(specs["state"])}
            )
        except (TypeError, IndexError, KeyError):
            raise CheckpointError(
                f"Checkpoint file {file!r}: metadata `specs` is malformed."
            ) from None
        record = _read_npz(file, expected)
        if record["meta"] != meta:  # replaced between the two reads by a writer's commit
            raise CheckpointError(f"Checkpoint file {file!r} changed while it was read; retry.")
        state = [record[f"state/{i}"] for i in range(len(specs["state"]))]
        divergence = Divergence(record["divergence/iteration"], record["divergence/agent"])
        _check_state(file, run, state, divergence, steps_done, stopped)
        chunks, first = [], run["first_count"]
        for j in range(chunks_done):
            chunks.append(self._load_chunk(j, run, specs, first, digest))
            first += _chunk_steps(run, j)
        return Checkpoint(meta, state, divergence, chunks)

    def _load_chunk(self, j: int, run: dict, specs: dict, first: int, digest: str) -> dict:
        file, kept = self._chunk_file(j), _chunk_kept(run, j)
        if not os.path.exists(file):
            raise CheckpointError(
                f"Checkpoint file {file!r} is missing, but {self._file(_STATE)!r} records it as "
                "committed; the directory was changed outside sample_chunked. Restore the file, or "
                "delete the directory to start over."
            )
        expected = {"meta": None}
        for group, axis in _GROUPS.items():
            for i, (shape, dtype) in enumerate(specs[group] or []):
                shape = list(shape)
                expected[f"{group}/{i}"] = [shape[:axis] + [kept] + shape[axis:], dtype]
        archive = _read_npz(file, expected)
        meta = archive["meta"]
        want = {"chunk": j, "first_step": first, "last_step": first + _chunk_steps(run, j),
                "kept": kept, "run": digest}
        for name, value in want.items():
            if meta.get(name) != value:
                raise CheckpointError(
                    f"Checkpoint file {file!r}: metadata `{name}` is {meta.get(name)!r}, expected "
                    f"{value!r}"
                    + (" (the chunk belongs to another run)" if name == "run" else "")
                    + "; the directory was changed outside sample_chunked."
                )
        return {group: None if specs[group] is None else
                [archive[f"{group}/{i}"] for i in range(len(specs[group]))] for group in _GROUPS}

    def save_chunk(self, meta: dict, j: int, outputs: dict, state, divergence: Divergence) -> None:
        """Commit chunk ``j``: its kept ``outputs`` (group -> pytree or None), then the record.

        ``meta`` holds the run's fields (``fingerprint``, ``run``, ``specs``, ``steps_done``,
        ``stopped``); the directory must be held with :meth:`lock`.
        """
        if self._lock_fd is None:
            raise RuntimeError(f"{self!r}.save_chunk needs the directory held with .lock().")
        run = meta["run"]
        first = run["first_count"] + sum(_chunk_steps(run, i) for i in range(j))
        digest = _digest(meta["fingerprint"])
        arrays = {"meta": _json({"chunk": j, "first_step": first,
                                 "last_step": first + _chunk_steps(run, j),
                                 "kept": _chunk_kept(run, j), "run": digest})}
        for group, tree in outputs.items():
            for i, leaf in enumerate(jax.tree.leaves(tree)):
                arrays[f"{group}/{i}"] = np.asarray(leaf)
        _atomic_savez(self._chunk_file(j), arrays)
        record = {"meta": _json({"format": FORMAT, "version": FORMAT_VERSION, **meta,
                                 "fingerprint_sha256": digest, "chunks_done": j + 1})}
        for i, leaf in enumerate(jax.tree.leaves(state)):
            record[f"state/{i}"] = np.asarray(leaf)
        record["divergence/iteration"] = np.asarray(divergence.iteration)
        record["divergence/agent"] = np.asarray(divergence.agent)
        _atomic_savez(self._file(_STATE), record)


def _check_state(file, run, state, divergence, steps_done, stopped) -> None:
    """The state's ``count``, the divergence record and ``stopped`` agree with the counts."""

    def fail(what: str) -> CheckpointError:
        return CheckpointError(f"Checkpoint file {file!r}: {what}; the file was edited or damaged "
                               "outside sample_chunked.")

    if not 0 <= run["count_leaf"] < len(state):
        raise fail("metadata `run.count_leaf` is out of range")
    count = np.asarray(state[run["count_leaf"]]).astype(np.int64)
    end = run["first_count"] + steps_done
    iteration = np.asarray(divergence.iteration).astype(np.int64)
    agent = np.asarray(divergence.agent).astype(np.int64)
    if np.any((iteration != -1) & ((iteration <= run["first_count"]) | (iteration > end))):
        raise fail(f"a divergence iteration lies outside the {steps_done} iterations run "
                   f"({iteration.tolist()})")
    if np.any((iteration == -1) != (agent == -1)) or np.any(agent < -1):
        raise fail(f"the divergence record is inconsistent (iterations {iteration.tolist()}, "
                   f"agents {agent.tolist()})")
    if stopped != (run["stop"] and bool(np.any(iteration >= 0))):
        raise fail(f"metadata `stopped` is {stopped} but the divergence record shows "
                   f"{int(np.sum(iteration >= 0))} diverged chains (stop on divergence: "
                   f"{run['stop']})")
    if stopped:
        frozen_at = iteration[iteration >= 0].min()
        ok = np.all(count == count.reshape(-1)[0]) and frozen_at <= count.min() <= end
    else:
        ok = np.all(count == end)
    if not ok:
        raise fail(f"the state's `count` {count.tolist()} disagrees with the "
                   f"{steps_done} iterations recorded as done (from {run['first_count']})")


def _compare(saved: list, current: list, path: str) -> None:
    """Raise naming the first field where two fingerprints differ."""
    old, new = dict(saved), dict(current)
    fields = [f for f, _ in current] + [f for f, _ in saved if f not in new]
    differ = [f for f in fields if old.get(f) != new.get(f)]
    if differ:
        field, more = differ[0], ", ".join(f"`{f}`" for f in differ[1:6])
        raise CheckpointError(
            f"`{field}` differs from the checkpoint in {path}: "
            f"{old.get(field, '<absent>')} (checkpoint) vs {new.get(field, '<absent>')} "
            f"(this call){f'; also differ: {more}' if more else ''}. Resume with the same "
            "arguments, or pass another `path` (or delete it) to start a new run."
        )


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """The contents of a checkpoint directory, cross-checked, without a sampler.

    Returns:
        ``{"meta": dict, "state": [leaves], "divergence": Divergence, "chunks": [dict]}`` where
        each chunk dict maps ``"positions"``/``"values"``/``"ensemble"`` to a list of leaves or
        ``None``.
    """
    return CheckpointDir(path).load()._asdict()


# -- the run ---------------------------------------------------------------------------------------


def _sample_options(on_divergence: str, options: dict) -> tuple[bool, dict]:
    """``(stop, keyword arguments of dgsgld.sample)``: every chunk is sampled with divergences
    flagged (reported here, once for the whole run) and, for ``"stop"``, frozen."""
    accepted = inspect.signature(_run.sample).parameters
    allowed = {name for name, p in accepted.items() if p.kind is p.KEYWORD_ONLY} - {
        "progress", "on_divergence"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(
            f"`sample_chunked` got unknown option(s) {unknown}; the options it passes on to "
            f"dgsgld.sample are {sorted(allowed)}."
        )
    stop = on_divergence == "stop"
    return stop, dict(options, on_divergence="stop" if stop else "flag")


def _fingerprint(algorithm, potential, mixing, init, key, options, layout) -> list:
    """Every field that determines the numbers, in the order they are compared."""
    params = inspect.signature(_run.sample).parameters
    fields = [("python", sys.version.split()[0].rsplit(".", 1)[0]), ("jax", jax.__version__),
              ("dgsgld", _version())]
    fields += describe(algorithm, "algorithm") + describe(potential, "potential")
    fields += describe(mixing, "mixing") + describe(init, "init") + describe(key, "key")
    for name, param in params.items():
        if param.kind is param.KEYWORD_ONLY and name not in ("progress", "on_divergence"):
            value = options.get(name, param.default)
            if name == "output":  # the burn-in is dropped at the end, not in the chunks
                value = value._replace(burn_in=0)
            fields += describe(value, name)
    return [list(f) for f in fields] + layout


def _row_specs(tree, axis: int):
    if tree is None:
        return None
    return [_spec(s.shape[:axis] + s.shape[axis + 1:], s.dtype) for s in jax.tree.leaves(tree)]


def _concat(parts: list, axis: int):
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=axis), *parts)


def _rows(tree, start: int | None, count: int | None, axis: int):
    """Kept rows from ``start`` to the end, or (``start=None``) the last row ``count`` times."""

    def one(x):
        if start is not None:
            return jax.lax.slice_in_dim(x, start, x.shape[axis], axis=axis)
        last = jax.lax.slice_in_dim(x, x.shape[axis] - 1, x.shape[axis], axis=axis)
        return jnp.repeat(last, count, axis=axis)

    return jax.tree.map(one, tree)


def _plan(algorithm, potential, mixing, init, key, num_steps, chunk_size, options, stop,
          sample_options):
    """``(shapes, meta)``: the shapes of a ``thin``-step call (a Trace of ShapeDtypeStructs) and
    the checkpoint's metadata for this run, fingerprint included."""
    thin = options.get("output", _run.Output()).thin
    # From `sample` itself (validating its arguments) without running it: a finished checkpoint
    # is read back with no compilation.
    shapes = jax.eval_shape(
        lambda: _sample(algorithm, potential, mixing, init, key, thin, **sample_options)
    )
    kept = {jnp.shape(x)[axis] for g, axis in _GROUPS.items()
            for x in jax.tree.leaves(getattr(shapes, g))}
    if kept - {2}:  # e.g. an option that drops early iterations: chunks cannot be spliced
        raise ValueError(
            f"sample_chunked cannot split this run: with options {sorted(options)}, "
            f"dgsgld.sample keeps {sorted(kept)} iterations of a {thin}-step call, not 2."
        )
    state_paths = jax.tree_util.tree_flatten_with_path(shapes.state)[0]
    if not all(isinstance(s, jax.ShapeDtypeStruct) for _, s in state_paths):
        raise ValueError("sample_chunked saves array states only; `init` has non-array leaves.")
    run = {
        "num_chains": int(shapes.divergence.iteration.shape[0]), "num_steps": num_steps,
        "chunk_size": chunk_size, "thin": thin,
        "first_count": int(np.asarray(init.count).reshape(-1)[0]) if hasattr(init, "count") else 0,
        "stop": stop,
        "count_leaf": [jax.tree_util.keystr(p) for p, _ in state_paths].index(".count"),
    }
    specs = {"state": [_spec(s.shape, s.dtype) for _, s in state_paths],
             **{g: _row_specs(getattr(shapes, g), axis) for g, axis in _GROUPS.items()}}
    fingerprint = _fingerprint(algorithm, potential, mixing, init, key, options,
                               _layout_fields(run, specs))
    return shapes, {"fingerprint": fingerprint, "run": run, "specs": specs, "steps_done": 0,
                    "stopped": False}


def _restore(saved: Checkpoint, shapes):
    """``(state, divergence, parts)`` of a loaded checkpoint, as pytrees shaped like ``shapes``."""

    def tree(template, leaves):
        if template is None:
            return None
        return jax.tree.unflatten(jax.tree.structure(template), [jnp.asarray(x) for x in leaves])

    parts = [{g: tree(getattr(shapes, g), chunk[g]) for g in _GROUPS} for chunk in saved.chunks]
    divergence = Divergence(*(jnp.asarray(x) for x in saved.divergence))
    return tree(shapes.state, saved.state), divergence, parts


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
    on_divergence: str = "raise",
    progress: bool | str = False,
    on_chunk: Callable[[int, int], None] | None = None,
    **options,
) -> Trace:
    """:func:`dgsgld.sample` in chunks of ``chunk_size`` iterations, checkpointed to ``path``.

    Args:
        algorithm, potential, mixing, init, key, num_steps: as for :func:`dgsgld.sample`.
        chunk_size: iterations per chunk; a positive multiple of ``thin``. ``num_steps`` need
            not be a multiple of it (the last chunk is shorter).
        path: a directory (created if missing) for the checkpoint; see the module docstring.
            When it holds a checkpoint of the same run, the run resumes after its last committed
            chunk; a checkpoint of a different run is refused with an error naming the first
            field that differs, and a damaged one with an error naming the file. While the call
            runs, a second writer of the same directory is refused. ``None``: no saving.
        on_divergence: ``"raise"`` (when a chunk diverges, before it is saved), ``"warn"`` (once
            at the end), ``"flag"`` (only ``trace.divergence``) or ``"stop"`` (flag, and freeze
            every chain once one diverges).
        progress: a bar updated after each chunk (see :mod:`dgsgld.progress`).
        on_chunk: optional ``(steps_done, num_steps) -> None`` called after each chunk is saved.
        **options: passed to every :func:`dgsgld.sample` call (``output``, ``chain_offset``,
            ...) and recorded in the fingerprint.

    Returns:
        A :class:`dgsgld.Trace` equal, bit for bit, to one ``dgsgld.sample`` call with the same
        arguments.

    Example:
        >>> trace = sample_chunked(alg, potential, mixing, init, key, 100_000,  # doctest: +SKIP
        ...                        chunk_size=10_000, output=dgsgld.Output(thin=10),
        ...                        path="runs/diging")
    """
    num_steps = _validation.check_positive_int(num_steps, name="num_steps")
    chunk_size = _validation.check_positive_int(chunk_size, name="chunk_size")
    output = _run._check_output(options.get("output", _run.Output()), num_steps)
    thin = output.thin
    if chunk_size % thin:
        raise ValueError(
            f"`chunk_size` ({chunk_size}) must be a multiple of `output.thin` ({thin}), so that "
            "kept "
            "iterations fall on the same steps as in one uninterrupted call."
        )
    if on_divergence not in ("raise", "warn", "flag", "stop"):
        raise ValueError(
            f"`on_divergence` must be 'raise', 'warn', 'flag' or 'stop'; got {on_divergence!r}."
        )
    _validation.check_callable(on_chunk, name="on_chunk")
    stop, sample_options = _sample_options(on_divergence, options)
    # The burn-in is dropped from the whole run's outputs at the end (the chunks keep it).
    burn_in = output.burn_in
    sample_options["output"] = output._replace(burn_in=0)

    shapes, meta = _plan(algorithm, potential, mixing, init, key, num_steps, chunk_size,
                         options, stop, sample_options)
    run, num_chains = meta["run"], meta["run"]["num_chains"]
    state = init
    divergence = Divergence(jnp.full((num_chains,), -1, jnp.int32),
                            jnp.full((num_chains,), -1, jnp.int32))
    parts: list[dict] = []
    ckpt = None if path is None else CheckpointDir(path)
    with contextlib.ExitStack() as stack:
        if ckpt is not None:
            stack.enter_context(ckpt.lock())
            if ckpt.exists():
                saved = ckpt.load(meta["fingerprint"])
                state, divergence, parts = _restore(saved, shapes)
                meta.update(steps_done=saved.meta["steps_done"], stopped=saved.meta["stopped"])
        bar = (_progress.ProgressBar(num_steps, initial=meta["steps_done"])
               if _progress.wants_progress(progress) else None)
        if bar is not None:
            stack.callback(bar.close)
        while meta["steps_done"] < num_steps:
            j = len(parts)
            steps = _chunk_steps(run, j)
            if meta["stopped"]:
                # Every chain is frozen: one uninterrupted call records the frozen state at every
                # remaining kept iteration, so repeat the last record.
                last = parts[-1]
                part = {g: _rows(last[g], None, steps // thin, axis) for g, axis in _GROUPS.items()}
            else:
                trace = _sample(algorithm, potential, mixing, state, key, steps, **sample_options)
                start = 1 if j else 0  # iteration 0 of this call is the previous chunk's last
                part = {g: _rows(getattr(trace, g), start, None, axis)
                        for g, axis in _GROUPS.items()}
                new = (trace.divergence.iteration >= 0) & (divergence.iteration < 0)
                divergence = Divergence(
                    jnp.where(new, trace.divergence.iteration, divergence.iteration),
                    jnp.where(new, trace.divergence.agent, divergence.agent),
                )
                if on_divergence == "raise" and bool(jnp.any(new)):
                    _report_divergence(divergence, "raise")
                state = trace.state
                meta["stopped"] = stop and bool(jnp.any(divergence.iteration >= 0))
            parts.append(part)
            meta["steps_done"] += steps
            if ckpt is not None:
                ckpt.save_chunk(meta, j, part, state, divergence)
            if bar is not None:
                bar.update_to(meta["steps_done"])
            if on_chunk is not None:
                on_chunk(meta["steps_done"], num_steps)

    if on_divergence in ("raise", "warn"):  # also a checkpoint written with "flag"
        _report_divergence(divergence, on_divergence)
    outputs = (_concat([p[g] for p in parts], axis) for g, axis in _GROUPS.items())
    return Trace(*(_rows(out, burn_in // thin, None, axis) if burn_in else out
                   for out, axis in zip(outputs, _GROUPS.values())), state, divergence)


def _version() -> str:
    from . import __version__

    return __version__
