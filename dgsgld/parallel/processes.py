"""Runs spread over several processes (hosts) on JAX's multi-controller runtime.

Every process runs the same script and calls :func:`initialize` (``jax.distributed``) first;
after that ``jax.devices()`` lists the devices of all processes and a mesh can span them. Two
placements (``docs/guide/scale.md``):

**Chains across processes.** Chains are independent: process ``p`` of ``P`` runs the contiguous
block :func:`chain_block` of them with :func:`dgsgld.sample`, passing ``chain_offset`` so that its
chain ``c`` draws as global chain ``offset + c`` (``fold_in(key, offset + c)``, the runner's chain
identity rule) with the same key on every process. Nothing is exchanged during the run;
:func:`gather` concatenates the blocks at the end. ``dgsgld.sample(..., placement=Processes())``
does all three, and computes ``ensemble_fn`` over all processes' chains.

**Agents across processes.** Process ``p`` holds only the data of its agents
(:func:`agent_block`, :func:`agent_potential`) and runs
``dgsgld.sample(..., placement=Agents(mesh))`` over a mesh of all devices: each step every device
receives the positions and trackers it mixes (the mixing product is the only communication: all
rows for a dense stack, only its agents' neighbours' rows for a sparse schedule) and
differentiates its own agents' potentials.

Failure: :func:`initialize` sets a heartbeat timeout; when a process dies, the coordination
service stops the others (within about that many seconds, or at once when process 0, which
runs it, died) instead of letting them wait in a collective; each prints one line naming the
process that died (:mod:`dgsgld.parallel._lost_peer`).

Checkpoints: :func:`dgsgld.sample_chunked` with ``placement=Processes()`` or
``sharding.Agents(mesh)`` and a ``path``: each process locks and writes its own
``path/process_<id>`` after every chunk, holding the whole run's state and kept outputs
(gathered; the data stay where they are), under a fingerprint of its own data. Restarted with
the same command, the processes compare how many chunks each committed; a process killed
between the others' commit and its own is one chunk behind and takes that chunk, bit for bit,
from the first process that has it. The resumed run is bit-identical to an uninterrupted one.

:func:`launch` starts ``P`` local processes for trying this on one machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ..model.potential import Potential
from ..runner import _npz as _npz
from ..runner import checkpoint as checkpoint
from ..runner.loop import _execute_here

__all__ = ["Processes", "agent_block", "agent_potential", "chain_block", "gather", "initialize",
           "launch", "load_process_state", "save_process_state"]

#: Environment variables read by :func:`initialize` when an argument is not given.
ENV = {"process_id": "DGSGLD_PROCESS_ID", "num_processes": "DGSGLD_NUM_PROCESSES",
       "coordinator": "DGSGLD_COORDINATOR"}


def initialize(process_id: int | None = None, num_processes: int | None = None,
               coordinator: str | None = None, *, heartbeat_timeout: int = 30,
               initialization_timeout: int = 120, one_line_errors: bool = True) -> None:
    """Join the run: ``jax.distributed.initialize`` with CPU collectives over gloo.

    Arguments not given come from ``DGSGLD_PROCESS_ID``, ``DGSGLD_NUM_PROCESSES`` and
    ``DGSGLD_COORDINATOR`` (``HOST:PORT``); when none is set either, JAX detects the cluster
    itself (SLURM, Open MPI, ...). Call before any other JAX operation.

    Args:
        process_id: this process, ``0 <= process_id < num_processes``.
        num_processes: ``P``.
        coordinator: ``HOST:PORT`` of process 0's coordination service, the same everywhere.
        heartbeat_timeout: seconds after which a silent process is declared dead and every
            other process is stopped with an error.
        initialization_timeout: seconds to wait for all processes to connect.
        one_line_errors: when another process dies, print one line naming it instead of the
            coordination service's log and C++ stack trace (:mod:`dgsgld.parallel._lost_peer`: this
            process's standard error passes through a small filter process). The process is
            still stopped by the coordination service's abort (exit status 134).
    """
    given = {"process_id": process_id, "num_processes": num_processes, "coordinator": coordinator}
    for name, value in given.items():
        if value is None and os.environ.get(ENV[name]):
            given[name] = os.environ[ENV[name]]
    pid, count, address = given["process_id"], given["num_processes"], given["coordinator"]
    if (pid is None) != (count is None) or (address is None and count is not None):
        raise ValueError("give `process_id`, `num_processes` and `coordinator` together (or "
                         f"none, for cluster auto-detection); got {given}.")
    if count is not None:
        pid, count = int(pid), int(count)
        if count < 1 or not 0 <= pid < count:
            raise ValueError(f"`process_id` must be in [0, num_processes); got {pid} of {count}.")
    # On CPU the cross-process collectives go through gloo (jax's CPU default; set explicitly).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if one_line_errors:
        _filter_stderr(-1 if pid is None else pid, -1 if count is None else count)
        sys.excepthook = _LostCollective(sys.excepthook, heartbeat_timeout + 10.0)
    jax.distributed.initialize(address, count, pid, heartbeat_timeout_seconds=heartbeat_timeout,
                               initialization_timeout=initialization_timeout)


_FILTERS: list = []  # the filter process, kept so that it is not reported as left running


def _filter_stderr(process_id: int, num_processes: int) -> None:
    """Route this process's standard error (file descriptor 2) through
    :mod:`dgsgld.parallel._lost_peer`: the coordination service's abort after another process died
    becomes one line naming it."""
    read, write = os.pipe()
    script = Path(__file__).with_name("_lost_peer.py")
    try:
        _FILTERS.append(subprocess.Popen(
            [sys.executable, str(script), str(process_id), str(num_processes)], stdin=read,
            stdout=2, stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True))
    except OSError:  # no interpreter to start (embedded Python): JAX's own output then
        os.close(write)
        return
    finally:
        os.close(read)
    sys.stderr.flush()
    os.dup2(write, 2)
    os.close(write)


@dataclass(frozen=True)
class _LostCollective:
    """``sys.excepthook``: a collective that failed because a peer's connection closed (the
    peer died) is not reported by its traceback. The coordination service names the dead
    process within the heartbeat timeout (and stops this one, see :func:`_filter_stderr`), so
    wait ``wait`` seconds for it; if it does not come, print one line with the collective's
    error."""

    previous: Callable
    wait: float

    def __call__(self, kind, error, traceback) -> None:
        text = str(error)
        # As XLA:CPU's gloo collectives word it (raised as JaxRuntimeError or ValueError).
        if not re.search(r"Gloo \w+ failed|Connection (closed|reset) by peer", text):
            return self.previous(kind, error, traceback)
        time.sleep(self.wait)
        first = " ".join(text.split())[:300]
        print(f"error: a collective of this jax.distributed run failed ({first}); another "
              "process probably died. Restart every process with the same command to resume "
              "from the last checkpoint the processes committed.", file=sys.stderr)


def _block(total: int, what: str) -> tuple[int, int]:
    count = jax.process_count()
    if total % count:
        raise ValueError(f"the number of {what} ({total}) must be a multiple of the number of "
                         f"processes ({count}).")
    size = total // count
    return jax.process_index() * size, size


def chain_block(num_chains: int) -> tuple[int, int]:
    """``(offset, size)``: this process's chains ``offset, ..., offset + size - 1``."""
    return _block(num_chains, "chains")


def agent_block(num_agents: int) -> tuple[int, int]:
    """``(first, size)``: this process's agents ``first, ..., first + size - 1`` (one device
    per process; with several, the process's devices take consecutive sub-blocks)."""
    return _block(num_agents, "agents")


def agent_potential(local: Potential, mesh: Mesh, axis_name: str | None = None) -> Potential:
    """The network's potential from this process's part: ``local`` holds only the data of
    :func:`agent_block`'s agents (leaves ``(N / P, n_local, ...)``).

    Its data become one global array split over ``axis_name`` of ``mesh``
    (``jax.make_array_from_process_local_data``; nothing is sent); the small per-agent tables
    (mask, mini-batch subsets) are gathered whole. Every process must call it with the same
    ``n_local`` and options. Pass the result to ``dgsgld.sample(..., placement=Agents(mesh))``.
    """
    if not isinstance(local, Potential):
        raise ValueError(f"`local` must be a dgsgld.Potential; got {type(local).__name__}.")
    axis = axis_name or mesh.axis_names[0]
    sharding = NamedSharding(mesh, PartitionSpec(axis))
    num_agents = local.num_agents * jax.process_count()
    data = jax.tree.map(
        lambda leaf: jax.make_array_from_process_local_data(
            sharding, np.asarray(leaf), (num_agents, *np.shape(leaf)[1:])),
        local.data)
    tables = {name: None if getattr(local, name) is None else
              multihost_utils.process_allgather(np.asarray(getattr(local, name)), tiled=True)
              for name in ("mask", "counts", "subsets", "num_subsets")}
    # A Potential whose static size is the whole network's while its data are distributed:
    # set field by field (the constructor would read the data to validate them; `local` did).
    fields = {name: getattr(local, name) for name in local.__dataclass_fields__}
    fields |= tables | {"data": data, "num_agents": num_agents}
    new = object.__new__(Potential)
    for name, value in fields.items():
        object.__setattr__(new, name, value)
    return new


def gather(tree):
    """Every leaf whole on every process: blocks of chains run per process are concatenated
    along the chain axis, global (agent-split) arrays assembled. A collective: every process
    must call it. E.g. ``gather(trace)`` gives the whole :class:`~dgsgld.Trace` (``ensemble``
    excepted: ``dgsgld.sample``'s is over the process's own chains;
    ``dgsgld.sample(..., placement=Processes())`` computes it over all)."""
    return multihost_utils.process_allgather(tree, tiled=True)


@dataclass(frozen=True)  # hashable by value: repeated calls reuse the compiled run
class _WithState:
    """``trace_fn`` that also keeps the whole state, for an ``ensemble_fn`` applied later."""

    trace_fn: Callable | None

    def __call__(self, state):
        return (None if self.trace_fn is None else self.trace_fn(state)), state


@dataclass(frozen=True)
class Processes:
    """Placement (``dgsgld.sample(..., placement=Processes())``): each process runs its
    :func:`chain_block` of the chains (as global chains ``chain_offset + offset + c``, the
    draws of a single-process run) and every process gets the whole trace (:func:`gather`).

    ``output.ensemble_fn`` sees all processes' chains, as in a single-process run: each process
    keeps its chains' whole states at the kept iterations (memory: the state of every chain at
    every kept iteration, on every process after gathering), and ``ensemble_fn`` is applied per
    kept iteration after the gather. Its results equal the single-process ``trace.ensemble`` up
    to the rounding of a separately compiled ``ensemble_fn``.
    """

    def execute(self, prep, every: int, token):
        offset, size = chain_block(prep.num_chains)
        def block(tree):
            return jax.tree.map(lambda leaf: leaf[offset:offset + size], tree)

        out = prep.output
        keep = out
        if out.ensemble_fn is not None:
            keep = out._replace(trace_fn=_WithState(out.trace_fn), ensemble_fn=None,
                                positions=out.stores_positions)
        mine = prep._replace(state=None if prep.state is None else block(prep.state),
                             positions=block(prep.positions), num_chains=size,
                             chain_offset=prep.chain_offset + offset, output=keep)
        trace = gather(_execute_here(mine, every, token))
        if out.ensemble_fn is None:
            return trace
        values, states = trace.values                            # states: leaves (C, K, ...)
        return trace._replace(values=values,
                              ensemble=jax.vmap(out.ensemble_fn, in_axes=1)(states))


# ---------------------------------------------------------------------------- checkpoints


def save_process_state(directory: str | Path, state) -> Path:
    """Write this process's part of a sampler state to ``directory/process_<id>.npz``.

    Leaves spread over processes (agent placement) keep this process's rows, host-local
    leaves (a block of chains) are written whole. Resume with :func:`load_process_state`
    and pass the state as ``init`` with the same key (and ``chain_offset``): the run continues
    as if uninterrupted. Written to a temporary name and renamed, so a kill leaves the old file; a
    symbolic link at the file's name is refused (:class:`dgsgld.runner.checkpoint.CheckpointError`),
    here and by :func:`load_process_state`: nothing is written or read through it.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays, meta = {}, []
    for i, leaf in enumerate(jax.tree.leaves(state)):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            local = multihost_utils.global_array_to_host_local_array(
                leaf, leaf.sharding.mesh, leaf.sharding.spec)
            meta.append({"global_shape": list(leaf.shape), "spec": [a for a in leaf.sharding.spec]})
            leaf = local
        else:
            meta.append(None)
        arrays[f"leaf/{i}"] = np.asarray(leaf)
    arrays["meta"] = np.asarray(json.dumps({"process": jax.process_index(),
                                            "processes": jax.process_count(), "leaves": meta}))
    path = directory / f"process_{jax.process_index():05d}.npz"
    _refuse_link(path)
    # A fresh temporary name (created exclusively, never through a link), then a rename: a
    # link put at the file's name is replaced, never written through.
    checkpoint._atomic_savez(str(path), arrays)
    return path


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise checkpoint.CheckpointError(
            f"{str(path)!r} is a symbolic link (to {os.readlink(path)!r}); process states are "
            "never read or written through links. Replace it with the file it stands for (or "
            "remove it).")


def load_process_state(directory: str | Path, like, mesh: Mesh | None = None):
    """Read what :func:`save_process_state` wrote for this process into the structure of
    ``like`` (any pytree shaped as the state, e.g. ``trace.state`` or its ``eval_shape``).
    Leaves that were spread over processes come back as global arrays on ``mesh``."""
    path = Path(directory) / f"process_{jax.process_index():05d}.npz"
    _refuse_link(path)
    try:
        fd = _npz.open_regular(str(path))
    except _npz.ArchiveError as err:  # made a link or a special file meanwhile
        raise checkpoint.CheckpointError(f"{str(path)!r} {err}.") from None
    with os.fdopen(fd, "rb") as file, np.load(file, allow_pickle=False) as found:
        meta = json.loads(str(found["meta"]))
        if meta["processes"] != jax.process_count():
            raise ValueError(f"{path} was written by a run of {meta['processes']} processes; "
                             f"this one has {jax.process_count()}.")
        leaves = [found[f"leaf/{i}"] for i in range(len(meta["leaves"]))]
    treedef = jax.tree.structure(like)
    if treedef.num_leaves != len(leaves):
        raise ValueError(f"{path} holds {len(leaves)} leaves; `like` has {treedef.num_leaves}.")
    out = []
    for leaf, info in zip(leaves, meta["leaves"]):
        if info is not None:
            if mesh is None:
                raise ValueError("give `mesh`: the state was split over processes.")
            leaf = multihost_utils.host_local_array_to_global_array(
                leaf, mesh, PartitionSpec(*info["spec"]))
        out.append(leaf)
    return jax.tree.unflatten(treedef, out)


# ------------------------------------------------------------------------------- launcher


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _loopback_unproxied(environ) -> dict:
    """``environ`` with ``127.0.0.1`` and ``localhost`` in ``no_proxy`` and ``NO_PROXY``."""
    env = dict(environ)
    for name in ("no_proxy", "NO_PROXY"):
        hosts = [h for h in env.get(name, "").split(",") if h.strip()]
        env[name] = ",".join(hosts + [h for h in ("127.0.0.1", "localhost") if h not in hosts])
    return env


def launch(num_processes: int, command: Sequence[str], *, timeout: float | None = None,
           poll: float = 0.1) -> int:
    """Run ``command`` as ``num_processes`` local processes of one run; return the exit code.

    Process ``i`` gets ``--process-id i --num-processes P --coordinator 127.0.0.1:PORT``
    appended (a free loopback port); loopback is added to their ``no_proxy`` (an HTTP proxy
    set for the package registries would otherwise carry the coordination service's gRPC
    connections, and ``jax.distributed.initialize`` would wait for them). When one exits
    non-zero, the others are stopped and its code is returned, with a message naming it on
    standard error; ``124`` after ``timeout`` seconds.
    """
    if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
        raise ValueError(f"`num_processes` must be a positive int; got {num_processes!r}.")
    if not command:
        raise ValueError("`command` is empty: give the program to run after `--`.")
    address = f"127.0.0.1:{free_port()}"
    env = _loopback_unproxied(os.environ)
    procs = [subprocess.Popen([*command, "--process-id", str(i), "--num-processes",
                               str(num_processes), "--coordinator", address], env=env)
             for i in range(num_processes)]
    start, code = time.monotonic(), 0
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                code = codes[failed[0]]
                print(f"launch: process {failed[0]} of {num_processes} exited with code {code}; "
                      "stopping the others.", file=sys.stderr)
                return code if code > 0 else 128 - code
            if all(c == 0 for c in codes):
                return 0
            if timeout is not None and time.monotonic() - start > timeout:
                print(f"launch: timed out after {timeout} s; stopping all processes.",
                      file=sys.stderr)
                return 124
            time.sleep(poll)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
