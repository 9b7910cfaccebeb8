"""Runs over several local processes (``jax.distributed`` on CPU, gloo collectives) equal the
single-process run, and a process that dies stops the others with an error instead of a hang.

Every run is ``examples/multi_process.py`` (the paper's Fig. 2(a) problem, 20 agents, d = 6)
on a few chains, started by ``dgsgld.parallel.processes.launch``; and a simulated SLURM job.

Tolerances: the processes make the same draws as the single-process run (chain identity rule),
so positions differ only by rounding: chains across processes run a block of the chains, whose
batched products may round differently from the whole batch's (here 4 vs 8 chains differ by
~1e-6; 100 vs 200 chains were bit-identical); agents across processes compute ``W @ x`` as row
blocks times gathered rows (dense) or neighbours' rows (sparse schedules) instead of one
product, and per-device gradients compile to differently vectorised code. Float32 rounding
(~6e-8 relative) per step, amplified over 20 steps of a contracting map, stays below 1e-4 times
the positions' scale (measured: ~5e-6 at 100 steps; with top-k, random-k and quantize(4)
payloads over the sparse ring, 4.8e-7, 7.6e-6 and 1.4e-6 at scales 6, 66 and 7, 20 steps); one
differing draw would move a position by about sqrt(2 η) = 0.13.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dgsgld import Output
from dgsgld.parallel import processes as distributed

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = [sys.executable, str(ROOT / "examples" / "multi_process.py")]
SMALL = ["--chains", "8", "--steps", "20"]


def _env():
    # Local processes only: no proxy (one set for the package registries would carry the
    # coordination service's loopback gRPC connections).
    # No PYTHONPATH: the example needs the installed package only, as it does for a user.
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy") and k != "PYTHONPATH"}
    return dict(env, JAX_PLATFORMS="cpu", DGSGLD_PROGRESS="0")


def _run(args, processes=None, timeout=240):
    """The example in one process, or in ``processes`` through ``python -m dgsgld launch``."""
    cmd = [*EXAMPLE, *args] if processes is None else [
        sys.executable, "-m", "dgsgld", "launch", "--processes", str(processes),
        "--timeout", str(timeout), "--", *EXAMPLE, *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=timeout + 30)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _positions(path) -> np.ndarray:
    with np.load(path) as f:
        return f["positions"]


def _module(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _example():
    return _module(Path(EXAMPLE[1]))


def _reference(*extra, ensemble_fn=None, whole=False):
    """The single-process run: dgsgld.sample on all chains, in this process (final positions,
    or the trace with ``ensemble_fn`` or ``whole``)."""
    import dgsgld

    example = _example()
    args = example.parse(["--out", "unused", *SMALL, *extra])
    problem, mixing, init, key, algorithm = example.setup(args)
    trace = dgsgld.sample(algorithm, problem.potential(args.batch_size), mixing, init, key,
                          args.steps, output=Output(positions=False, ensemble_fn=ensemble_fn))
    return trace if ensemble_fn is not None or whole else np.asarray(trace.state.position)


@pytest.fixture(scope="module")
def reference():
    """Final positions ``(8, 20, 6)`` and ``ensemble`` (the example's ``spread``)."""
    trace = _reference(ensemble_fn=_example().spread)
    return np.asarray(trace.state.position), np.asarray(trace.ensemble)


def _close(x, ref):
    assert x.shape == ref.shape == (8, 20, 6)
    scale = np.abs(ref).max()
    assert scale > 0.1                                   # a real, moving run
    return np.abs(x - ref).max() < 1e-4 * max(1.0, scale)


@pytest.mark.slow  # default run: the SLURM job's collective over 2 processes, sample_chains in one
def test_chains_across_two_processes_equal_single_process_run(reference, tmp_path):
    # With ensemble_fn (chains' mean and variance per agent) over all 8 chains, 4 per process:
    # gathered states, then ensemble_fn per kept iteration. Positions agree to rounding, so do
    # their means and variances (the same scale-relative bound).
    _run(["--placement", "chains", "--ensemble", "--out", str(tmp_path / "c.npz"), *SMALL],
         processes=2)
    with np.load(tmp_path / "c.npz") as f:
        got, ensemble = f["positions"], f["ensemble"]
    assert _close(got, reference[0])
    want = reference[1]
    assert ensemble.shape == want.shape == (21, 2, 20, 6)  # kept iterations 0..20, mean and var
    assert np.abs(want[:, 1]).min() > 0                  # chains differ: a real variance
    assert np.abs(ensemble - want).max() < 1e-4 * max(1.0, np.abs(want).max())


@pytest.mark.slow  # default run: agents over 4 devices in one process
# (tests/parallel/test_sharding.py)
def test_agents_across_two_processes_equal_single_process_run(reference, tmp_path):
    _run(["--placement", "agents", "--out", str(tmp_path / "a.npz"), *SMALL], processes=2)
    assert _close(_positions(tmp_path / "a.npz"), reference[0])


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["chains", "agents"])
def test_two_processes_saved_and_resumed_equal_single_process_run(reference, tmp_path,
                                                                   placement):
    # 10 steps, each process saves its part of the state, then 10 more from them.
    half = ["--placement", placement, "--chains", "8", "--steps", "10"]
    _run([*half, "--out", str(tmp_path / "a.npz"), "--save-state", str(tmp_path / "s")],
         processes=2)
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [
        "process_00000.npz", "process_00001.npz"]
    with np.load(tmp_path / "s" / "process_00001.npz") as f:
        # its 10 of the 20 agents, or its 4 of the 8 chains
        assert f["leaf/0"].shape == ((8, 10, 6) if placement == "agents" else (4, 20, 6))
    _run([*half, "--out", str(tmp_path / "b.npz"), "--resume", str(tmp_path / "s")], processes=2)
    assert _close(_positions(tmp_path / "b.npz"), reference[0])


def test_sample_chains_in_one_process_is_dgsgld_sample_with_its_ensemble():
    _sample_chains_in_one_process(chain_offset=False)


# The chain offset compiles a third program (no ensemble_fn, positions kept): slow-only. Fast
# twins: the test above (sample_chains in one process) and, for chain offsets,
# tests/runner/test_runner_guarantees.py::
# test_chains_run_alone_with_their_offset_equal_those_of_the_full_run
@pytest.mark.slow  # fast twins: the two named above
def test_sample_chains_in_one_process_with_its_ensemble_and_a_chain_offset():
    _sample_chains_in_one_process(chain_offset=True)


def _sample_chains_in_one_process(chain_offset: bool):
    import jax
    import jax.numpy as jnp
    from _problems import linear_regression, ring

    import dgsgld

    prob = linear_regression(num_agents=4, dim=2)
    init = jnp.asarray(np.random.default_rng(0).normal(size=(6, 4, 2)), jnp.float32)
    spread = _example().spread
    args = (dgsgld.DIGingSGLD(0.05), prob.potential, ring(4), init, jax.random.key(0), 10)
    want = dgsgld.sample(*args, output=Output(thin=2, ensemble_fn=spread))
    got = dgsgld.sample(*args, output=Output(thin=2, ensemble_fn=spread),
                        placement=dgsgld.Processes())
    # The same compiled step and draws: equal positions; ensemble_fn applied after the run
    # instead of inside the loop (float32 rounding of the mean and variance at most).
    np.testing.assert_array_equal(got.state.position, want.state.position)
    assert got.ensemble.shape == want.ensemble.shape == (6, 2, 4, 2)
    np.testing.assert_allclose(got.ensemble, want.ensemble, rtol=1e-6, atol=1e-7)
    assert got.positions is None and got.values is None
    if not chain_offset:
        return
    # A chain offset composes with the process's block: global chains 2 + offset + c.
    np.testing.assert_array_equal(dgsgld.sample(*args, chain_offset=2,
                                                placement=dgsgld.Processes()).positions,
                                  dgsgld.sample(*args, chain_offset=2).positions)


@pytest.mark.slow  # default run: test_launch_fails_loudly_when_one_process_fails
def test_a_dying_process_stops_the_others_with_an_error(tmp_path):
    address = f"127.0.0.1:{distributed.free_port()}"
    procs = [
        subprocess.Popen(
            [*EXAMPLE, "--placement", "agents", "--chains", "4", "--steps", "10000000",
             "--out", str(tmp_path / "x.npz"), "--heartbeat-timeout", "5",
             "--process-id", str(i), "--num-processes", "2", "--coordinator", address],
            cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    try:
        for i, p in enumerate(procs):
            assert p.stdout.readline().strip() == f"process {i} of 2 joined"
        time.sleep(1.0)
        procs[1].send_signal(signal.SIGKILL)
        # Heartbeat timeout 5 s: the survivor is stopped well within 60 s (else: a hang).
        _, err = procs[0].communicate(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[0].returncode != 0
    # One line naming the dead process instead of the service's log and C++ stack trace
    # (the checkpointed version: tests/parallel/test_multiprocess_failures.py).
    assert "error: process 1 of 2 of this jax.distributed run died" in err
    assert "stack trace" not in err


def test_launch_fails_loudly_when_one_process_fails(tmp_path):
    code = ("import sys; a = sys.argv; i = int(a[a.index('--process-id') + 1]); "
            "assert a[a.index('--coordinator') + 1].startswith('127.0.0.1:'); "
            # A proxy of the parent's is kept, with loopback exempted from it.
            "import os; assert os.environ['no_proxy'] == 'example.org,127.0.0.1,localhost'; "
            "assert os.environ['NO_PROXY'] == '127.0.0.1,localhost'; "
            "import time; time.sleep(0 if i else 60); sys.exit(3 if i else 0)")
    start = time.monotonic()
    env = dict(_env(), https_proxy="http://10.0.0.1:3128", no_proxy="example.org")
    proc = subprocess.run([sys.executable, "-m", "dgsgld", "launch", "--processes", "2", "--",
                           sys.executable, "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3
    assert "process 1 of 2 exited with code 3" in proc.stderr
    assert time.monotonic() - start < 50                 # process 0 (sleeping 60 s) was stopped


def _free_port_in(low: int, high: int) -> int:
    import socket

    for port in np.random.default_rng().permutation(np.arange(low, high + 1)):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", int(port)))
            except OSError:
                continue
            return int(port)
    raise RuntimeError(f"no free port in {low}..{high}")


SLURM_PROBE = """
import jax
from dgsgld.parallel import processes as distributed
distributed.initialize()                 # no arguments, no DGSGLD_*: JAX's cluster detection
from jax.experimental import multihost_utils
ids = multihost_utils.process_allgather(jax.numpy.int32(jax.process_index()))
print("SLURM", jax.process_index(), jax.process_count(), jax.device_count(), list(map(int, ids)))
"""


@pytest.mark.slow  # fast twin: test_sample_chains_in_one_process_is_dgsgld_sample_with_its_ensemble
def test_initialize_without_arguments_joins_a_simulated_slurm_job():
    # What srun sets for two tasks of one job on one node ("localhost"); JAX derives the
    # coordinator (the first node, port 61440 + job id mod 4096) and each process's id and
    # count from them. Not tested here: srun itself, several nodes, GPUs.
    port = _free_port_in(61440, 65535)                 # the range JAX derives from the job id
    env = {k: v for k, v in _env().items() if not k.startswith(("DGSGLD_", "SLURM_"))}
    env |= {"SLURM_JOB_ID": str(port - 61440 + 4096 * 7), "SLURM_STEP_NODELIST": "localhost",
            "SLURM_NTASKS": "2", "SLURM_STEP_NUM_NODES": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", SLURM_PROBE], cwd=ROOT,
                              env=env | {"SLURM_PROCID": str(i), "SLURM_LOCALID": str(i)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for i, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, err[-2000:]
        line = next(ln for ln in out.splitlines() if ln.startswith("SLURM"))
        assert line == f"SLURM {i} 2 2 [0, 1]"          # joined as task i of 2; a collective ran


def test_bad_arguments_are_rejected_with_a_message():
    with pytest.raises(ValueError, match="together"):
        distributed.initialize(process_id=0)
    with pytest.raises(ValueError, match="process_id"):
        distributed.initialize(3, 2, "127.0.0.1:1")
    with pytest.raises(ValueError, match="command"):
        distributed.launch(2, [])


@pytest.mark.slow
def test_mini_batches_across_two_processes_equal_single_process_run(tmp_path):
    # Fig. 2(b): b = 3 of 5 local data, drawn from each agent's table of C(5, 3) subsets.
    _run(["--placement", "agents", "--batch-size", "3", "--out", str(tmp_path / "m.npz"),
          *SMALL], processes=2)
    assert _close(_positions(tmp_path / "m.npz"), _reference("--batch-size", "3"))


# Slow set: the neighbour exchange itself is checked in one process on 4 devices by
# tests/parallel/test_sharding.py's default run; here it runs across real processes.
@pytest.mark.parametrize("processes,network", [
    pytest.param(2, "barbell", marks=pytest.mark.slow),
    pytest.param(2, "ring", marks=pytest.mark.slow),
    pytest.param(4, "barbell", marks=pytest.mark.slow),
])
def test_sparse_agents_across_processes_equal_single_process_run(tmp_path, processes, network):
    # Sparse snapshots (barbell: neighbour lists; ring: circulant): each process receives only
    # the rows its agents' neighbours need (ppermute), not all rows. Same tolerance as above.
    sparse = ["--mixing", "sparse", "--network", network]
    _run(["--placement", "agents", "--out", str(tmp_path / "s.npz"), *sparse, *SMALL],
         processes=processes)
    assert _close(_positions(tmp_path / "s.npz"), _reference(*sparse))


# (channel, option, value): top-k's k = 2 of 6 entries, values and int32 indices, 16 B a
# message; random-k's k = 3 values, 12 B (the receivers draw its indices from the sender's
# key); quantize(4)'s sign bit and 3-bit level per entry packed in 3 B, and the norm: 7 B.
CHANNELS = [("top_k", "fraction", 0.25), ("random_k", "fraction", 0.5),
            ("quantize", "levels", 4)]
ROW_BYTES = {"top_k": 16, "random_k": 12, "quantize": 7}


def _channel_across_two_processes(tmp_path, *channel, network="ring"):
    """``(bytes_sent, reference trace)``: the example on the sparse ``network`` (the ring)
    with the ``channel`` options, agents across 2 processes, after asserting that its final
    positions are the single-process run's (:func:`_close`)."""
    args = ["--mixing", "sparse", "--network", network, *channel]
    _run(["--placement", "agents", "--out", str(tmp_path / "c.npz"), *args, *SMALL],
         processes=2)
    want = _reference(*args, whole=True)
    with np.load(tmp_path / "c.npz") as f:
        got, sent = f["positions"], f["bytes_sent"]
    assert _close(got, np.asarray(want.state.position))
    return sent, want


@pytest.mark.slow  # default run: tests/communication/test_agents.py (the same exchange of
# payloads on 4 devices in one process)
@pytest.mark.parametrize("channel,option,value", CHANNELS)
def test_compressed_payloads_across_two_processes_equal_single_process_run(
        tmp_path, channel, option, value):
    # A sparse ring with a channel that needs only neighbours' messages: each process sends
    # the compressed payloads of its boundary rows and rebuilds C(x_j) from those it
    # receives, the very floats the sender compressed. The draws (Langevin noise, random-k's
    # indices, quantize's levels) are the single-process run's, so positions differ by the
    # mixing's and gradients' rounding only: the bound of the sparse runs above, 1e-4 times
    # the scale.
    # One differing draw would move a position by about sqrt(2 eta) = 0.13, a flipped top-k
    # selection by a message entry (positions of scale 6, trackers 24 here).
    from dgsgld import communication as comm

    sent, want = _channel_across_two_processes(
        tmp_path, "--channel", channel, f"--{option}", str(value))
    # Counted as one device counts: 20 steps x 2 messages x 2 ring neighbours per agent, for
    # every chain and agent.
    np.testing.assert_array_equal(sent, np.full((8, 20), 20 * 2 * 2 * ROW_BYTES[channel]))
    reference = comm.Channel(getattr(comm, channel)(value))
    np.testing.assert_array_equal(sent, reference.bytes_sent(want.state))


@pytest.mark.slow  # default run: tests/communication/test_agents.py (stragglers over the
# exchange of 4 devices in one process)
def test_stragglers_over_the_exchange_across_two_processes_equal_single_process_run(tmp_path):
    # Each process draws every agent's activity from the step's shared key and cuts its own
    # rows (an inactive agent's row becomes e_i, its neighbours' weight on it moves to their
    # diagonals), so the draws are the single-process run's: the tolerance of the sparse
    # runs above. An agent is active w.p. 0.7 at each step, so it sends in 0.7 of the
    # 20 steps on average: the counts equal the single-process run's exactly and fall short of
    # every-step sending (20 steps x 2 messages x 2 neighbours x 16 B).
    from dgsgld import communication as comm

    sent, want = _channel_across_two_processes(
        tmp_path, "--channel", "top_k", "--fraction", "0.25", "--activity", "0.7")
    reference = comm.Channel(comm.top_k(0.25), activity=0.7)
    np.testing.assert_array_equal(sent, reference.bytes_sent(want.state))
    every_step = 20 * 2 * 2 * ROW_BYTES["top_k"]
    assert 0 < sent.mean() < 0.9 * every_step and sent.max() <= every_step


@pytest.mark.slow  # default run: tests/communication/test_agents.py (gossip over the
# exchange of 4 devices in one process)
def test_gossip_over_the_exchange_across_two_processes_equals_single_process_run(tmp_path):
    # Each process draws the step's matching for every agent from the step's shared key and
    # the ring's links it holds whole, and rewrites its rows to the gossip matrix's: the
    # single-process draws (the tolerance of the sparse runs above) and counts. A matched
    # agent sends one message to its partner, so each sends at most one of its 2 ring
    # neighbours' worth a step (20 steps x 2 messages x 16 B) and, on a ring of 20 where a
    # matching pairs an agent with probability about 1/2, some steps none.
    from dgsgld import communication as comm

    sent, want = _channel_across_two_processes(
        tmp_path, "--channel", "top_k", "--fraction", "0.25", "--gossip", "matching")
    reference = comm.Channel(comm.top_k(0.25), gossip="matching")
    np.testing.assert_array_equal(sent, reference.bytes_sent(want.state))
    one_partner = 20 * 2 * ROW_BYTES["top_k"]
    assert 0 < sent.mean() < 0.9 * one_partner and sent.max() <= one_partner


@pytest.mark.slow  # default run: tests/communication/test_agents.py (push-sum over a directed
# exchange of 4 devices in one process)
def test_push_sum_over_a_directed_exchange_across_two_processes_equals_single_process_run(
        tmp_path):
    # Push-DIGing-SGLD on the one-way ring (out-degree weights: each agent keeps 1/2 and sends
    # 1/2 on), converted with sparse.from_dense: each process receives only its upstream
    # neighbour's row, and stragglers rewrite its rows with the column rule (a dropped weight
    # stays with its sender). The single-process draws (the tolerance of the sparse runs
    # above) and counts. An active agent sends its top-k mass (16 B) with the push-sum weight
    # (4 B) and its tracker (16 B) to its one out-neighbour: at most 20 x 36 B, and less, as
    # stragglers (activity 0.7) send nothing.
    from dgsgld import communication as comm

    sent, want = _channel_across_two_processes(
        tmp_path, "--channel", "top_k", "--fraction", "0.25", "--activity", "0.7",
        network="directed_ring")
    reference = comm.Channel(comm.top_k(0.25), activity=0.7)
    np.testing.assert_array_equal(sent, reference.bytes_sent(want.state))
    every_step = 20 * (2 * ROW_BYTES["top_k"] + 4)
    assert 0 < sent.mean() < 0.9 * every_step and sent.max() <= every_step


@pytest.mark.slow  # default run: tests/communication/test_agents.py (public copies over the
# exchange of 4 devices in one process, copies equal to the public copies bit for bit)
def test_error_feedback_over_the_exchange_across_two_processes(tmp_path):
    # Error feedback: each process keeps copies of the public copies its agents listen to
    # and receives their compressed updates, so the run is the single-process one (the
    # tolerance of the sparse runs above) and counts alike. Each process then writes per step
    # the top-k payload of every row its agents listen to (the ring's 2 boundary rows, 16 B,
    # for 200 chains and 2 messages), as without error feedback; the transport's excess is
    # at most 256 B per ppermute (2 messages x 2 payload arrays). Sending the copies dense
    # would add 2 x 200 x 2 x (24 - 16) = 6400 B.
    from dgsgld import communication as comm

    sent, want = _channel_across_two_processes(
        tmp_path, "--channel", "top_k", "--fraction", "0.25", "--error-feedback")
    reference = comm.Channel(comm.top_k(0.25), error_feedback=True)
    np.testing.assert_array_equal(sent, reference.bytes_sent(want.state))
    np.testing.assert_array_equal(sent, np.full((8, 20), 20 * 2 * 2 * ROW_BYTES["top_k"]))
    bench = _module(ROOT / "benchmarks" / "distributed.py")
    cell = dict(network="ring", chains=200, agents=20, mixing="sparse", processes=2)
    predicted = bench.predicted_bytes(**cell, channel="top_k", fraction=0.25,
                                      error_feedback=True)
    assert predicted == 2 * 200 * 2 * ROW_BYTES["top_k"]
    measured = np.asarray(bench.bytes_per_process(**cell, tmp=tmp_path, channel="top_k",
                                                  fraction=0.25, error_feedback=True))
    excess = measured - predicted
    assert np.all((excess >= 0) & (excess <= 256 * 4)), (measured, predicted)


@pytest.mark.slow  # default run: tests/communication/test_agents.py (the traced exchange's
# ppermute operands are Channel.message_bytes(F) a row)
@pytest.mark.parametrize("channel,option,value", CHANNELS)
def test_each_process_writes_the_accounted_payload_bytes_per_step(tmp_path, channel, option,
                                                                  value):
    # benchmarks/distributed.py's measurement: the bytes each process wrote (/proc/self/io
    # wchar, which counts gloo's socket writes) after 100 and after 300 steps, differenced per
    # step (start-up, compilation and the final gather cancel); the paper-size ring, 200
    # chains. Predicted, for each process: DIGing-SGLD's 2 messages x 200 chains x 2 rows
    # received x Channel.message_bytes(6).
    bench = _module(ROOT / "benchmarks" / "distributed.py")
    cell = dict(network="ring", chains=200, agents=20, mixing="sparse", processes=2)
    predicted = bench.predicted_bytes(**cell, channel=channel, **{option: value})
    assert predicted == 2 * 200 * 2 * ROW_BYTES[channel]
    measured = np.asarray(bench.bytes_per_process(**cell, tmp=tmp_path, channel=channel,
                                                  **{option: value}))
    assert measured.shape == (2,)
    # The rest is the transport's own: 144 B per ppermute and step whatever its size (the
    # uncompressed sparse runs' excess too, benchmarks/distributed.md), bounded by 256 B; one
    # ppermute per message and payload array (2 processes: one device offset). Rows sent
    # dense (24 B) would add 2 x 200 x 2 x (24 - row) >= 6400 B, random-k's indices 9600 B.
    ppermutes = 2 * {"top_k": 2, "random_k": 1, "quantize": 2}[channel]
    excess = measured - predicted
    assert np.all((excess >= 0) & (excess <= 256 * ppermutes)), (measured, predicted)


@pytest.mark.slow
@pytest.mark.parametrize("placement", ["chains", "agents"])
def test_four_processes_equal_single_process_run(reference, tmp_path, placement):
    _run(["--placement", placement, "--out", str(tmp_path / "p.npz"), *SMALL], processes=4)
    x = _positions(tmp_path / "p.npz")
    assert _close(x, reference[0])
