"""A process that dies in a multi-process run: the survivors stop with one line naming it, and
the run restarted with the same command resumes from the processes' checkpoints, bit for bit.

The runs are ``examples/multi_process.py --checkpoint DIR`` (agents placed across the
processes, and once chains) over two local processes (``jax.distributed`` on XLA:CPU, gloo
collectives): 4 chains, 20 agents, 20 steps in chunks of 5, each process committing its own
``DIR/process_<id>`` after every chunk. One of
them is killed (SIGKILL) at a chosen point; the resumed result must equal the uninterrupted
two-process run exactly (the draws of step ``k`` come from the key folded with ``k``, and a
chunk runs the same compiled step, so nothing may differ, not even rounding).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dgsgld.parallel import _lost_peer as _lost_peer
from dgsgld.parallel import processes as distributed
from dgsgld.runner.checkpoint import CheckpointError, read_checkpoint

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "multi_process.py"
RUN = ["--chains", "4", "--steps", "20", "--chunk-size", "5", "--heartbeat-timeout", "5"]
#: Heartbeat timeout 5 s: a survivor stopped later than this (compilation included) hangs.
SURVIVOR_BOUND = 60.0

# The example with a process that kills itself (SIGKILL) just before or just after it commits
# chunk ``j``: ``python -c DIE victim j before|after -- <example arguments>``.
DIE = f"""
import os, signal, sys
victim, chunk, when = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
args = sys.argv[sys.argv.index("--") + 1:]
me = int(args[args.index("--process-id") + 1])
sys.path.insert(0, {str(EXAMPLE.parent)!r})
import multi_process
from dgsgld.runner import checkpoint as checkpoint
real = checkpoint.CheckpointDir.save_chunk
def save_chunk(self, meta, j, *rest):
    if (me, j, when) == (victim, chunk, "before"):
        os.kill(os.getpid(), signal.SIGKILL)
    real(self, meta, j, *rest)
    if (me, j, when) == (victim, chunk, "after"):
        os.kill(os.getpid(), signal.SIGKILL)
checkpoint.CheckpointDir.save_chunk = save_chunk
sys.exit(multi_process.main(args))
"""


def _env():
    # Local processes only: no proxy (one set for the package registries would carry the
    # coordination service's loopback gRPC connections).
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    return dict(env, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT), DGSGLD_PROGRESS="0")


def _launch(args, timeout=240):
    """The example over two processes through ``python -m dgsgld launch``; must succeed."""
    cmd = [sys.executable, "-m", "dgsgld", "launch", "--processes", "2", "--timeout",
           str(timeout), "--", sys.executable, str(EXAMPLE), *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, check=False,
                          timeout=timeout + 30)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _positions(path) -> np.ndarray:
    with np.load(path) as f:
        return f["positions"]


def _chunks(directory: Path) -> list:
    """Committed chunks per process directory (0 where nothing was committed)."""
    out = []
    for i in range(2):
        sub = directory / f"process_{i:05d}"
        out.append(read_checkpoint(sub)["meta"]["chunks_done"]
                   if (sub / "state.npz").exists() else 0)
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """``placement -> `` final positions ``(4, 20, 6)`` of the uninterrupted two-process
    chunked run (each computed once)."""
    found = {}

    def get(placement):
        if placement not in found:
            base = tmp_path_factory.mktemp(f"uninterrupted-{placement}")
            _launch(["--placement", placement, *RUN, "--checkpoint", str(base / "ckpt"),
                     "--out", str(base / "u.npz")])
            assert _chunks(base / "ckpt") == [4, 4]
            found[placement] = _positions(base / "u.npz")
        return found[placement]

    return get


def _interrupted(tmp_path, placement, victim, die=None):
    """Start both processes, let ``victim`` die (``die = (chunk, "before"|"after")``: it kills
    itself around that commit; ``None``: killed from outside just after joining, in the first
    chunk), and return the survivor's ``(returncode, stderr, seconds after the death)``."""
    address = f"127.0.0.1:{distributed.free_port()}"
    procs = []
    for i in range(2):
        args = ["--placement", placement, *RUN, "--checkpoint", str(tmp_path / "ckpt"),
                "--out", str(tmp_path / "x.npz"),
                "--process-id", str(i), "--num-processes", "2", "--coordinator", address]
        cmd = ([sys.executable, str(EXAMPLE), *args] if die is None else
               [sys.executable, "-c", DIE, str(victim), str(die[0]), die[1], "--", *args])
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    survivor = procs[1 - victim]
    try:
        for i, p in enumerate(procs):
            assert p.stdout.readline().strip() == f"process {i} of 2 joined"
        if die is None:
            procs[victim].send_signal(signal.SIGKILL)
        assert procs[victim].wait(timeout=240) == -signal.SIGKILL
        died = time.monotonic()
        _, err = survivor.communicate(timeout=SURVIVOR_BOUND)
        seconds = time.monotonic() - died
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return survivor.returncode, err, seconds


@pytest.mark.slow  # default run: the filter and the link refusal below, in one process
@pytest.mark.reliability
@pytest.mark.parametrize("placement,victim,die,committed", [
    ("agents", 1, None, [[0, 0]]),          # killed while the first chunk compiles and runs
    ("agents", 1, (1, "after"), [[2, 2]]),  # just after its second commit, in the third chunk
    # The coordinator (process 0), after its third commit: process 1 is stopped at once,
    # before or after its own third commit.
    ("agents", 0, (2, "after"), [[3, 3], [3, 2]]),
    ("agents", 1, (1, "before"), [[2, 1]]),  # between the two processes' commits of chunk 1
    ("chains", 1, (1, "before"), [[2, 1]]),  # placement=distributed.Processes()
])
def test_a_killed_process_is_named_and_the_restarted_run_resumes_bit_for_bit(
        uninterrupted, tmp_path, placement, victim, die, committed):
    code, err, seconds = _interrupted(tmp_path, placement, victim, die)
    survivor = 1 - victim
    assert code != 0
    assert seconds < SURVIVOR_BOUND
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("[Gloo]")]
    assert lines == [_lost_peer.message(
        "stopped sending heartbeats):\n1\n" if victim == 1 else
        "Failed to send RPC to coordination service.", survivor, 2)], err[-3000:]
    assert f"process {victim} of 2 of this jax.distributed run died" in lines[0]
    # Where the kill landed: what each process had committed.
    assert _chunks(tmp_path / "ckpt") in committed
    # The same command again: both resume (the one behind takes the chunk it missed) and finish.
    _launch(["--placement", placement, *RUN, "--checkpoint", str(tmp_path / "ckpt"),
             "--out", str(tmp_path / "r.npz")])
    assert _chunks(tmp_path / "ckpt") == [4, 4]
    resumed = _positions(tmp_path / "r.npz")
    assert resumed.shape == (4, 20, 6) and np.abs(resumed).max() > 0.1   # a real, moving run
    np.testing.assert_array_equal(resumed, uninterrupted(placement))


# -- default selection: the same pieces in one process ---------------------------------------

# What the coordination service printed, measured: process 0 when process 1 was killed (it
# runs the service), and process 1 when process 0 was killed.
HEARTBEATS = """\
E1202 01:27:20.694689   28066 coordination_service.cc:1549] [185] Use error polling to \
propagate the following error to all tasks: UNAVAILABLE: The following tasks are unhealthy \
(stopped sending heartbeats):
1
The tasks have crashed. Check the task logs for an earlier error.
E1202 01:27:20.695858   28078 coordination_service_agent.cc:289] Polled an error from \
coordination service (this can be an error from this or another task).
F1202 01:27:20.696174   28078 client.h:80] Terminating process because the JAX distributed \
service detected fatal errors. absl::Status: UNAVAILABLE: The following tasks are unhealthy \
(stopped sending heartbeats):
1
The tasks have crashed.
*** Check failure stack trace: ***
    @     0x7f5991840634  absl::lts_20260107::log_internal::LogMessage::SendToLog()
    @     0x7f5998ea71f5  (unknown)
"""
LEADER = """\
W1202 01:28:43.069827   29346 preemption_sync_manager.cc:147] Failed to retrieve preemption \
notice from coordination service: UNAVAILABLE: Socket closed
F1202 01:28:43.069942   29346 client.h:80] Terminating process because the JAX distributed \
service detected fatal errors. absl::Status: UNAVAILABLE: Failed to send RPC to coordination \
service. Either the leader task was preempted/died/restarted unexpectedly.
*** Check failure stack trace: ***
    @     0x7f5991840634  absl::lts_20260107::log_internal::LogMessage::SendToLog()
"""


def _filtered(text: str, me: int) -> str:
    script = Path(_lost_peer.__file__)
    proc = subprocess.run([sys.executable, str(script), str(me), "2"], input=text, check=False,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.reliability
def test_the_coordination_service_abort_becomes_one_line_naming_the_dead_process():
    # Ordinary lines pass through unchanged; the service's log and stack trace are replaced.
    out = _filtered("before\n" + HEARTBEATS, 0).splitlines()
    assert out[0] == "before" and len(out) == 2
    assert out[1].startswith("error: process 1 of 2 of this jax.distributed run died (it "
                             "stopped sending heartbeats); process 0 of 2 was stopped")
    out = _filtered(LEADER, 1).splitlines()
    assert len(out) == 1 and out[0].startswith(
        "error: process 0 of 2 of this jax.distributed run died (the coordination service it "
        "ran is unreachable); process 1 of 2 was stopped")
    # A coordination log line not followed by the fatal error is forwarded as it was.
    warning = LEADER.splitlines()[0] + "\nafter\n"
    assert _filtered(warning, 1) == warning


@pytest.mark.reliability
def test_a_collective_cut_by_a_dead_peer_is_one_line_not_a_traceback(capsys):
    seen = []
    hook = distributed._LostCollective(lambda *exc: seen.append(exc[1]), wait=0.0)
    cut = ValueError("UNKNOWN: Gloo AllGather failed: [external/gloo/gloo/transport/tcp/"
                     "pair.cc:547] Connection closed by peer [127.0.0.1]:19098")
    hook(ValueError, cut, None)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        "error: a collective of this jax.distributed run failed (UNKNOWN: Gloo AllGather "
        "failed: ") and "another process probably died" in err[0]
    assert not seen
    other = ValueError("`num_steps` must be positive")   # anything else: the usual traceback
    hook(ValueError, other, None)
    assert seen == [other] and capsys.readouterr().err == ""


@pytest.mark.reliability
def test_process_states_are_never_written_or_read_through_a_link(tmp_path):
    import jax.numpy as jnp

    state = {"x": jnp.arange(6.0).reshape(2, 3)}
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "process_00000.npz").symlink_to(target)
    with pytest.raises(CheckpointError, match="process_00000.npz' is a symbolic link"):
        distributed.save_process_state(tmp_path / "s", state)
    with pytest.raises(CheckpointError, match="is a symbolic link"):
        distributed.load_process_state(tmp_path / "s", state)
    assert target.read_text() == "keep me"
    # The temporary file is a fresh name: a link left at the old fixed name is not written.
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / ".tmp-process_00000.npz").symlink_to(target)
    path = distributed.save_process_state(tmp_path / "t", state)
    assert target.read_text() == "keep me"
    np.testing.assert_array_equal(distributed.load_process_state(tmp_path / "t", state)["x"],
                                  state["x"])
    assert path.name == "process_00000.npz" and not path.is_symlink()


@pytest.mark.reliability
def test_each_process_checkpoints_to_its_own_directory_never_through_a_link(tmp_path,
                                                                             monkeypatch):
    import jax

    from dgsgld.runner import checkpoint as checkpoint

    assert checkpoint._own_directory(tmp_path) == str(tmp_path)      # one process: `path`
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    assert checkpoint._own_directory(tmp_path) == str(tmp_path / "process_00001")
    assert not checkpoint._spans_processes(None)                     # each process on its own
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "process_00001").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CheckpointError, match="process_00001' is a symbolic link"):
        checkpoint._own_directory(tmp_path)
    # The bytes of a chunk taken from another process come through exactly (-0.0 included).
    x = np.array([-0.0, 1.5, np.nan], np.float32)
    back = checkpoint._bits(checkpoint._bits({"x": x}), {"x": x})["x"]
    assert back.tobytes() == x.tobytes() and back.dtype == x.dtype
