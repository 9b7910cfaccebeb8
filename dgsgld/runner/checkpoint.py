"""Long runs in chunks, saved to disk after each chunk, resumable after a kill.

:func:`sample_chunked` is a loop over :func:`dgsgld.sample`, ``chunk_size`` iterations at a
time, each chunk starting from the previous one's final state, and a :class:`CheckpointDir`
that saves every chunk. Step ``k`` of a chain draws from a key folded with ``k``, the state's
own counter, so a chunked run, and a run resumed after a kill, are bit-identical to one
uninterrupted call with the same key.

A checkpoint is a contract. It records a *fingerprint* of everything that determines the numbers
(:mod:`dgsgld.runner._fingerprint`: the sampler's class and fields, the potential's functions, data,
batch size, mask and prior, the mixing, ``init``, the key, the number of chains, ``num_steps``,
``chunk_size``, every option passed to :func:`dgsgld.sample`, the Python, JAX and dgsgld
versions, the shapes of the state and of the outputs, and ``program``: a hash of the traced
program of the run's first chunk, so that a model whose code changed anywhere, or that reads a
changed value, is refused; see :mod:`dgsgld.runner._fingerprint` for what it can and cannot see). A
resume whose fingerprint differs is refused with an error naming the first field that differs
(fields that describe code name what changed; only the program decides). Before anything is
returned the files are cross-checked: counts in the metadata, chunk lengths, the state's
``count`` and the divergence record must agree, every array's declared shape and dtype must be
the expected one before it is read (so a damaged or hostile file cannot make the reader
allocate more than its own size), and every entry must have the SHA-256 recorded when it was
written. Nothing in the directory is opened through a link: a directory holding a symbolic
link, or one of the names below that is not a regular file, is refused.

On-disk format (version 4; version 3 held the same entries with the state's leaves in an older
field order): a directory of NumPy ``.npz`` archives (uncompressed zip files readable with
``numpy.load(..., allow_pickle=False)``; nothing is pickled):

``path/state.npz``
    the commit record, rewritten after every chunk: ``meta`` (a 0-d unicode array holding a JSON
    object: ``format``, ``version``, ``fingerprint`` (a list of ``[field, description]``),
    ``fingerprint_sha256``, ``run`` (``num_steps``, ``chunk_size``, ``thin``, ``num_chains``,
    ``first_count``, ``stop``, ``count_leaf``), ``specs`` (shape and dtype of every state leaf
    and of one kept row of every output leaf), ``steps_done``, ``chunks_done``, ``stopped`` and
    ``sha256``: per entry of the file, the SHA-256 of its dtype, shape and bytes (for ``meta``:
    of its other keys' sorted JSON)),
    ``state/<i>`` (leaf ``i`` of the sampler state, leaves ``(num_chains, ...)``),
    ``divergence/iteration`` and ``divergence/agent`` (``(num_chains,)`` int32, ``-1`` if none).
``path/chunk_<j>.npz`` (``j`` = 00000, 00001, ...)
    the kept outputs of chunk ``j``: ``positions/<i>``, ``values/<i>`` (leaves ``(num_chains,
    kept, ...)``), ``ensemble/<i>`` (leaves ``(kept, ...)``) and ``meta`` (JSON: ``chunk``,
    ``first_step``, ``last_step``, ``kept``, ``run`` = the fingerprint's SHA-256, ``sha256`` as
    above). Chunk 0 holds
    iterations ``0, thin, ..., chunk_size``; chunk ``j > 0`` starts at ``j * chunk_size + thin``.
``path/.lock``
    held with ``fcntl.flock`` by the one process writing the directory (its pid inside).

In a run of several processes each process writes this layout in its own ``path/process_<id>``.

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
import stat
import sys
import tempfile
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._util import validation as _validation
from . import _npz as _npz
from . import _random as _random
from . import loop as _run
from . import progress as _progress
from ._fingerprint import code_fields, describe, program
from .loop import Divergence, Trace, _report_divergence

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: exclusive creation of the lock file instead
    fcntl = None

__all__ = ["sample_chunked", "read_checkpoint", "CheckpointDir", "CheckpointError", "FORMAT",
           "FORMAT_VERSION"]

FORMAT = "dgsgld-checkpoint"
FORMAT_VERSION = 4
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

    def check(spec):
        def wrong(shape, dtype):
            if spec is None:
                if shape != () or dtype.kind != "U" or dtype.itemsize > _MAX_META_BYTES:
                    return f"of shape {shape} and dtype {dtype}, not a JSON string"
            elif [list(shape), dtype.str] != spec:
                return (f"of shape {shape} and dtype {dtype}; expected {tuple(spec[0])} and "
                        f"{np.dtype(spec[1])}")
            return None

        return wrong

    if not os.path.lexists(file):
        raise CheckpointError(f"Checkpoint file {file!r} is missing.")
    out = {}
    try:
        with _npz.Archive(file) as archive:
            archive.check_names(expected, partial)
            for name, spec in expected.items():
                out[name] = archive.read(name, check(spec))
    except _npz.ArchiveError as err:
        raise fail(str(err)) from None
    except OSError as err:
        raise fail(f"is unreadable ({type(err).__name__}: {err})") from err
    for name, spec in expected.items():
        if spec is None:
            try:
                out[name] = json.loads(str(out[name][()]))
            except json.JSONDecodeError as err:
                raise fail(f"has `{name}` that is not valid JSON ({err})") from err
            if not isinstance(out[name], dict):
                raise fail(f"has `{name}` that is not a JSON object")
    return out


def _meta_digest(meta: dict) -> str:
    return hashlib.sha256(json.dumps({k: v for k, v in meta.items() if k != "sha256"},
                                     sort_keys=True).encode()).hexdigest()


def _sealed(meta: dict, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A file's members: ``arrays`` and ``meta``, with the SHA-256 of every one recorded in
    ``meta["sha256"]`` (``"meta"``: of the rest of ``meta``)."""
    sha = {"meta": _meta_digest(meta), **{name: _npz.digest(a) for name, a in arrays.items()}}
    return {"meta": _json({**meta, "sha256": sha}), **arrays}


def _check_sealed(file: str, contents: dict) -> None:
    """Every member of a file read by :func:`_read_npz` has the digest it was written with."""
    meta = contents["meta"]
    sha = meta.get("sha256")
    if not isinstance(sha, dict) or set(sha) != set(contents):
        raise CheckpointError(
            f"Checkpoint file {file!r}: metadata `sha256` does not list its {len(contents)} "
            "entries; the file was edited or damaged outside sample_chunked. Delete the "
            "directory to start over."
        )
    found = {"meta": _meta_digest(meta),
             **{name: _npz.digest(a) for name, a in contents.items() if name != "meta"}}
    bad = [name for name in sorted(found) if found[name] != sha[name]]
    if bad:
        raise CheckpointError(
            f"Checkpoint file {file!r}: the contents of {', '.join(f'`{n}`' for n in bad[:5])} "
            f"differ from what sample_chunked wrote (SHA-256 {found[bad[0]][:16]}..., recorded "
            f"{str(sha[bad[0]])[:16]}...); the file was edited or damaged outside it. Restore "
            "it, or delete the directory to start over."
        )


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
        return os.path.lexists(self._file(_STATE))

    @property
    def meta(self) -> dict:
        """The commit record's metadata, with its format and version checked."""
        file = self._file(_STATE)
        if not os.path.lexists(file):
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

    def _check_members(self) -> None:
        """Refuse a directory holding a symbolic link, or one of this format's names that is
        not a regular file: nothing inside a checkpoint directory is followed or written
        through (a linked lock file would be truncated, a FIFO would block a reader)."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return
        except OSError as err:
            raise CheckpointError(
                f"Cannot read the checkpoint directory {self.path!r}: {err.strerror or err}."
            ) from err
        for name in sorted(names):
            try:
                mode = os.lstat(self._file(name)).st_mode
            except FileNotFoundError:  # removed meanwhile (a writer's temporary file)
                continue
            ours = (name in (_STATE, _LOCK) or name.startswith(_TMP_PREFIX)
                    or (name.startswith("chunk_") and name.endswith(".npz")))
            if stat.S_ISLNK(mode):
                what = f"a symbolic link `{name}` (to {os.readlink(self._file(name))!r})"
            elif ours and not stat.S_ISREG(mode):
                what = f"`{name}`, which is not a regular file"
            else:
                continue
            raise CheckpointError(
                f"Checkpoint directory {self.path!r} holds {what}; sample_chunked never "
                "follows links or writes through them in a checkpoint directory. Replace it "
                "with the file it stands for (or remove it), or pass another `path`."
            )

    @contextlib.contextmanager
    def lock(self):
        """Hold the directory (created if missing) for one writer; a second one fails at once.

        While held, left-over temporary files of interrupted writes are removed. A directory
        holding a symbolic link, or a lock file with other names, is refused.
        """
        if os.path.lexists(self.path) and not os.path.isdir(self.path):
            raise CheckpointError(f"Checkpoint `path` {self.path!r} is a file, not a directory.")
        lock_file = self._file(_LOCK)
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as err:
            raise CheckpointError(
                f"Cannot write the checkpoint directory {self.path!r}: {err.strerror or err}."
            ) from err
        self._check_members()
        try:
            flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if fcntl is None else 0)
            fd = _npz.open_regular(lock_file, flags, 0o644, one_name=True)
        except _npz.ArchiveError as err:
            raise CheckpointError(
                f"Checkpoint lock file {lock_file!r} {err}: it is not written. Remove it "
                "(sample_chunked creates its own), or pass another `path`."
            ) from None
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
            self._check_members()  # as held: no link put in place before the lock was taken
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
            fd = _npz.open_regular(lock_file)
            with os.fdopen(fd) as f:
                holder = f.read(32).strip() or "unknown"
        except (OSError, ValueError):
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
        self._check_members()
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
        # Last, so that an edit that breaks a cross-check is named by it.
        _check_sealed(file, record)
        return Checkpoint(meta, state, divergence, chunks)

    def _load_chunk(self, j: int, run: dict, specs: dict, first: int, digest: str) -> dict:
        file, kept = self._chunk_file(j), _chunk_kept(run, j)
        if not os.path.lexists(file):
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
        _check_sealed(file, archive)
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
        arrays = {}
        for group, tree in outputs.items():
            for i, leaf in enumerate(jax.tree.leaves(tree)):
                arrays[f"{group}/{i}"] = np.asarray(leaf)
        _atomic_savez(self._chunk_file(j), _sealed(
            {"chunk": j, "first_step": first, "last_step": first + _chunk_steps(run, j),
             "kept": _chunk_kept(run, j), "run": digest}, arrays))
        record = {f"state/{i}": np.asarray(leaf) for i, leaf in enumerate(jax.tree.leaves(state))}
        record["divergence/iteration"] = np.asarray(divergence.iteration)
        record["divergence/agent"] = np.asarray(divergence.agent)
        _atomic_savez(self._file(_STATE), _sealed(
            {"format": FORMAT, "version": FORMAT_VERSION, **meta, "fingerprint_sha256": digest,
             "chunks_done": j + 1}, record))


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
    """Raise naming the first field where two fingerprints differ.

    Fields that describe code (names, bytecode) alone do not refuse a resume: only when the
    traced program differs too; then they name what changed.
    """
    old, new = dict(saved), dict(current)
    fields = [f for f, _ in current] + [f for f, _ in saved if f not in new]
    differ = [f for f in fields if old.get(f) != new.get(f)]
    code = code_fields(saved) | code_fields(current)
    binding = [f for f in differ if f not in code]
    if binding:
        field, more = differ[0], ", ".join(f"`{f}`" for f in differ[1:6])
        hint = ""
        if binding[0] == "program" and field == "program":
            hint = (" What the run computes changed, while every argument the checkpoint names "
                    "is the same: code that the model's functions, `output` functions or "
                    "schedules call (in another module, or several calls deep), a class's "
                    "`__call__`, or a module-level value read when they run.")
        elif binding[0] == "program" and field.endswith(".<program>"):
            hint = (f" What `{field[:-len('.<program>')]}` computes changed while its name and "
                    "bytecode are the same: code it calls (in another module, or several calls "
                    "deep) or a module-level value it reads when it runs.")
        elif binding[0] == "program" and field in code:
            hint = " What the run computes changed."
        raise CheckpointError(
            f"`{field}` differs from the checkpoint in {path}: "
            f"{old.get(field, '<absent>')} (checkpoint) vs {new.get(field, '<absent>')} "
            f"(this call){f'; also differ: {more}' if more else ''}.{hint} Resume with the "
            "same arguments and code, or pass another `path` (or delete it) to start a new run."
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


def _sample_options(options: dict) -> dict:
    """``options`` checked to be keyword options of :func:`dgsgld.sample` that a chunked run
    passes on (it handles ``progress`` and ``on_divergence`` itself)."""
    accepted = inspect.signature(_run.sample).parameters
    allowed = {name for name, p in accepted.items() if p.kind is p.KEYWORD_ONLY} - {
        "progress", "on_divergence"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(
            f"`sample_chunked` got unknown option(s) {unknown}; the options it passes on to "
            f"dgsgld.sample are {sorted(allowed)}."
        )
    return options


def _fingerprint(algorithm, potential, mixing, init, key, options, layout, run) -> list:
    """Every field that determines the numbers, in the order they are compared.

    ``run(key)`` is the run's first chunk (a ``dgsgld.sample`` call), traced for the
    ``program`` field; ``key`` as ``sample`` draws from it, so that a legacy ``PRNGKey(s)``
    and ``key(s)``, which give the same draws, give the same fingerprint.
    """
    params = inspect.signature(_run.sample).parameters
    if not jax.dtypes.issubdtype(jnp.result_type(key), jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(jnp.asarray(key), impl="threefry2x32")
    fields = [("python", sys.version.split()[0].rsplit(".", 1)[0]), ("jax", jax.__version__),
              ("dgsgld", _version())]
    fields += describe(algorithm, "algorithm") + describe(potential, "potential")
    fields += _model_programs(potential, init.position if _run._is_state(init) else init,
                              algorithm.decentralized)
    fields += describe(mixing, "mixing") + describe(init, "init") + describe(key, "key")
    for name, param in params.items():
        if param.kind is param.KEYWORD_ONLY and name not in ("progress", "on_divergence"):
            value = options.get(name, param.default)
            if name == "output":  # the burn-in is dropped at the end, not in the chunks
                value = value._replace(burn_in=0)
            fields += describe(value, name)
    fields.append(("program", program(run, _random.fast_key(key))))  # the key: a field above
    return [list(f) for f in fields] + layout


def _model_programs(potential, positions, decentralized: bool) -> list:
    """``potential.<function>.<program>`` fields: what ``log_likelihood``, ``log_prior`` and
    ``gradient_fn`` compute on one agent's parameters and data. They name which function's
    computation changed; the whole run's ``program`` vouches for it."""
    skip = 2 if decentralized else 1
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x)[skip:], jnp.result_type(x)),
                          positions)
    datum, agent = (jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x)[k:],
                                                                jnp.result_type(x)),
                                 potential.data) for k in (2, 1))
    key = jax.ShapeDtypeStruct((), jax.random.key(0, impl=_random.IMPL).dtype)
    calls = {"log_likelihood": (params, datum), "log_prior": (params,),
             "gradient_fn": (params, agent, key)}
    fields = []
    for name, args in calls.items():
        fn = getattr(potential, name)
        if fn is not None:
            try:
                text = program(fn, *args)
            except Exception as err:  # noqa: BLE001 - a description only; `program` decides
                text = f"program not traced ({type(err).__name__})"
            fields.append((f"potential.{name}.<program>", text))
    return fields


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


def _plan(prep: _run.Prepared, mixing, key, chunk_size, options, stop):
    """``(shapes, meta)``: the shapes of a ``thin``-step call (a Trace of ShapeDtypeStructs) and
    the checkpoint's metadata for this run, fingerprint included."""
    thin = prep.output.thin
    # The core's loop traced, not run: a finished checkpoint is read back with no compilation.
    shapes = jax.eval_shape(lambda: _run._execute_here(prep._replace(num_steps=thin)))
    state_paths = jax.tree_util.tree_flatten_with_path(shapes.state)[0]
    run = {
        "num_chains": prep.num_chains, "num_steps": prep.num_steps,
        "chunk_size": chunk_size, "thin": thin,
        "first_count": (0 if prep.state is None
                        else int(np.asarray(prep.state.count).reshape(-1)[0])),
        "stop": stop,
        "count_leaf": [jax.tree_util.keystr(p) for p, _ in state_paths].index(".count"),
    }
    specs = {"state": [_spec(s.shape, s.dtype) for _, s in state_paths],
             **{g: _row_specs(getattr(shapes, g), axis) for g, axis in _GROUPS.items()}}
    init = prep.positions if prep.state is None else prep.state
    fingerprint = _fingerprint(
        prep.algorithm, prep.potential, mixing, init, key, options, _layout_fields(run, specs),
        lambda k: _run._execute_here(prep._replace(num_steps=thin, key=k)))
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
            In a run of several processes (``jax.distributed``) each process uses its own
            ``path/process_<id>``; with a ``placement`` over several processes' devices
            (``distributed.Processes()``, ``sharding.Agents(mesh)``) every process's directory
            holds the whole run's state and outputs, and on resume a process one chunk behind
            the others takes that chunk from them (module docstring of
            :mod:`dgsgld.parallel.processes`).
        on_divergence: ``"raise"`` (when a chunk diverges, before it is saved), ``"warn"`` (once
            at the end), ``"flag"`` (only ``trace.divergence``) or ``"stop"`` (flag, and freeze
            every chain once one diverges).
        progress: a bar updated after each chunk (see :mod:`dgsgld.runner.progress`).
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
    chunk_size = _validation.check_positive_int(chunk_size, name="chunk_size")
    _validation.check_callable(on_chunk, name="on_chunk")
    options = _sample_options(options)
    placement = options.pop("placement", None)
    _run._check_placement(placement)
    # The front end of dgsgld.sample, once for the whole run: every chunk is executed with
    # divergences flagged (reported here, once) and, for "stop", frozen.
    stop = _run._check_on_divergence(on_divergence) == "stop"
    prep = _run._prepare(algorithm, potential, mixing, init, key, num_steps,
                         on_divergence="stop" if stop else "flag", placement=placement,
                         **options)
    thin, num_steps = prep.output.thin, prep.num_steps
    if chunk_size % thin:
        raise ValueError(
            f"`chunk_size` ({chunk_size}) must be a multiple of `output.thin` ({thin}), so that "
            "kept iterations fall on the same steps as in one uninterrupted call."
        )
    # The burn-in is dropped from the whole run's outputs at the end (the chunks keep it).
    burn_in = prep.output.burn_in
    prep = prep._replace(output=prep.output._replace(burn_in=0))
    shapes, meta = _plan(prep, mixing, key, chunk_size, options, stop)
    run, num_chains = meta["run"], meta["run"]["num_chains"]
    state = prep.state
    divergence = Divergence(jnp.full((num_chains,), -1, jnp.int32),
                            jnp.full((num_chains,), -1, jnp.int32))
    parts: list[dict] = []
    ckpt = None if path is None else CheckpointDir(_own_directory(path))
    with contextlib.ExitStack() as stack:
        if ckpt is not None:
            stack.enter_context(ckpt.lock())
            if ckpt.exists():
                saved = ckpt.load(meta["fingerprint"])
                state, divergence, parts = _restore(saved, shapes)
                meta.update(steps_done=saved.meta["steps_done"], stopped=saved.meta["stopped"])
            if _spans_processes(placement):
                state, divergence, parts = _agree(ckpt, meta, shapes, state, divergence, parts)
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
                trace = _whole(_run._execute(prep._replace(state=state, num_steps=steps),
                                             placement))
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
    trace = Trace(*(_rows(out, burn_in // thin, None, axis) if burn_in else out
                    for out, axis in zip(outputs, _GROUPS.values())), state, divergence)
    return _run._with_static(trace, prep.static)


# -- runs over several processes ------------------------------------------------------------------


def _own_directory(path) -> str:
    """The checkpoint directory of this process: ``path`` itself, or in a run over several
    processes (``jax.distributed``) ``path/process_<id>``, one per process, each locked and
    written by its own process (on its own disk or a shared one)."""
    if jax.process_count() == 1:
        return os.fspath(path)
    own = os.path.join(os.fspath(path), f"process_{jax.process_index():05d}")
    if os.path.islink(own):
        raise CheckpointError(
            f"Checkpoint directory {own!r} is a symbolic link (to {os.readlink(own)!r}); "
            "sample_chunked never follows links in a checkpoint directory. Replace it with the "
            "directory it stands for, or pass another `path`."
        )
    return own


def _spans_processes(placement) -> bool:
    """Whether ``placement`` runs over several processes' devices (then every process calls
    the run, and may take part in a collective)."""
    if placement is None or jax.process_count() == 1:
        return False
    mesh = getattr(placement, "mesh", None)
    if mesh is None:  # distributed.Processes(), or a default mesh over every device
        return True
    return any(d.process_index != jax.process_index() for d in mesh.devices.flat)


def _whole(tree):
    """Leaves spread over processes (agents placed across them) gathered whole on every
    process, so that each process's checkpoint holds the run's whole state and outputs.
    A collective: every process calls it with the same tree."""
    from jax.experimental import multihost_utils

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return multihost_utils.process_allgather(x, tiled=True)
        return x

    return jax.tree.map(one, tree)


def _bits(tree, dtypes=None):
    """Leaves as their bytes (``dtypes=None``), or back: a broadcast sums zeros onto the
    source's values, which would turn a ``-0.0`` into ``0.0``; bytes come through unchanged."""
    if dtypes is None:
        return jax.tree.map(lambda x: np.ascontiguousarray(np.asarray(x)).view(np.uint8), tree)
    return jax.tree.map(lambda b, d: np.asarray(b).view(d.dtype).reshape(d.shape), tree, dtypes)


def _agree(ckpt: CheckpointDir, meta: dict, shapes, state, divergence, parts: list):
    """A multi-process resume: every process continues after the same chunk.

    Each process commits chunk ``j`` after the run has computed it (a collective), so a process
    killed between the others' commit and its own is one chunk behind; every process's files
    hold the whole state and outputs, so it takes that chunk's from the first process that
    committed it and commits it itself. A collective: every process calls it.
    """
    from jax.experimental import multihost_utils

    done = np.asarray(multihost_utils.process_allgather(np.int32(len(parts)))).reshape(-1)
    low, high = int(done.min()), int(done.max())
    if low == high:
        return state, divergence, parts
    if high - low > 1:
        raise CheckpointError(
            f"The processes' checkpoints under {os.path.dirname(ckpt.path)!r} hold "
            f"{done.tolist()} chunks (by process); a run's processes differ by at most one. "
            "They are not of one run: delete the directory to start over."
        )
    j, run, specs = high - 1, meta["run"], meta["specs"]
    template = {
        "state": [np.zeros(s.shape, s.dtype) for s in jax.tree.leaves(shapes.state)],
        "divergence": [np.zeros((run["num_chains"],), np.int32)] * 2,
        "stopped": np.int32(0),
        "part": {g: None if specs[g] is None else
                 [np.zeros(sh[:axis] + [_chunk_kept(run, j)] + sh[axis:], d)
                  for sh, d in specs[g]] for g, axis in _GROUPS.items()},
    }
    ahead = len(parts) == high
    mine = template
    if ahead:
        mine = {"state": jax.tree.leaves(state), "divergence": list(divergence),
                "stopped": np.int32(meta["stopped"]),
                "part": {g: None if parts[j][g] is None else jax.tree.leaves(parts[j][g])
                         for g in _GROUPS}}
    source = int(np.argmax(done))
    got = _bits(multihost_utils.broadcast_one_to_all(
        _bits(mine), is_source=jax.process_index() == source), template)
    if ahead:
        return state, divergence, parts
    state = jax.tree.unflatten(jax.tree.structure(shapes.state),
                               [jnp.asarray(x) for x in got["state"]])
    divergence = Divergence(*(jnp.asarray(x) for x in got["divergence"]))
    part = {g: None if got["part"][g] is None else jax.tree.unflatten(
        jax.tree.structure(getattr(shapes, g)), [jnp.asarray(x) for x in got["part"][g]])
        for g in _GROUPS}
    parts = [*parts, part]
    meta.update(steps_done=meta["steps_done"] + _chunk_steps(run, j),
                stopped=bool(got["stopped"]))
    ckpt.save_chunk(meta, j, part, state, divergence)
    return state, divergence, parts


def _version() -> str:
    from .._version import __version__

    return __version__
