"""Chunked, checkpointed runs: bit-identical to one call, and after a kill at any point.

Every comparison is exact (``np.array_equal``): step ``k`` of a chain draws from
``fold_in(run_key, k)`` with ``k`` the state's counter, so splitting the iterations into calls,
or resuming from disk, must not change a single bit.
"""

import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld.runner import checkpoint as checkpoint
from dgsgld.runner.checkpoint import read_checkpoint, sample_chunked

N, N_LOCAL, D, C = 3, 4, 2, 2
NUM_STEPS, THIN = 24, 2
KEY_SEED = 7
#: A symmetric, doubly stochastic 3-agent matrix (the path graph with Metropolis weights).
W = np.array([[0.5, 0.5, 0.0], [0.5, 0.0, 0.5], [0.0, 0.5, 0.5]], np.float32)


def log_likelihood(theta, x):
    return -0.5 * jnp.sum((x - theta) ** 2)


def log_prior(theta):
    return -0.05 * jnp.sum(theta**2)


@functools.cache
def problem():
    """Gaussian mean model; every step draws Langevin noise from its own key.

    Cached, with module-level functions, so that every test reuses the same compiled runs.
    (Full batches: mini-batch draws use the same per-step keys and would double compile time.)
    """
    data = jax.random.normal(jax.random.key(1), (N, N_LOCAL, D))
    potential = dgsgld.Potential(log_likelihood, log_prior, data)
    init = jax.random.normal(jax.random.key(2), (C, N, D))
    return dgsgld.DIGingSGLD(0.05), potential, init


def trace_fn(state):
    return {"mean": jnp.mean(state.position, axis=0)}


def ensemble_fn(states):
    return jnp.var(states.position, axis=0)


KWARGS = dict(output=dgsgld.Output(thin=THIN, trace_fn=trace_fn, ensemble_fn=ensemble_fn,
                                   positions=True))


@pytest.fixture(scope="module")
def reference():
    alg, potential, init = problem()
    return dgsgld.sample(alg, potential, W, init, jax.random.key(KEY_SEED), NUM_STEPS, **KWARGS)


def run_chunked(path, chunk_size=10, **extra):
    alg, potential, init = problem()
    return sample_chunked(
        alg, potential, W, init, jax.random.key(KEY_SEED), NUM_STEPS, chunk_size=chunk_size,
        path=path, **KWARGS, **extra,
    )


def assert_identical(got, want):
    g, w = jax.tree.leaves(got), jax.tree.leaves(want)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    assert len(g) == len(w) > 0
    for a, b in zip(g, w):
        assert np.shape(a) == np.shape(b)
        assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow  # fast twin: test_resume_after_crash_between_chunks
def test_chunked_equals_single_call(tmp_path, reference):
    got = run_chunked(tmp_path / "run")  # chunks of 10 + 10 + 4 iterations
    assert got.positions.shape == (C, NUM_STEPS // THIN + 1, N, D)
    assert_identical(got, reference)
    # The result does not depend on the checkpoint either: no path, same bits.
    assert_identical(run_chunked(None), reference)


def test_resume_after_crash_between_chunks(tmp_path, reference):
    path = tmp_path / "run"

    def crash(done, total):
        if done == 20:
            raise KeyboardInterrupt  # as if killed right after the second chunk was saved

    with pytest.raises(KeyboardInterrupt):
        run_chunked(path, on_chunk=crash)
    assert read_checkpoint(path)["meta"]["steps_done"] == 20
    seen = []
    got = run_chunked(path, on_chunk=lambda done, total: seen.append(done))
    assert seen == [24]  # only the missing chunk ran
    assert_identical(got, reference)


def test_interrupted_write_keeps_previous_checkpoint(tmp_path, reference, monkeypatch):
    path = tmp_path / "run"
    real = checkpoint._write_file
    writes = []

    def failing(f, payload):  # writes: chunk 0, state, chunk 1, state (4th fails half-way)
        writes.append(len(payload))
        if len(writes) == 4:
            real(f, payload[: len(payload) // 2])
            raise OSError("no space left on device")
        real(f, payload)

    monkeypatch.setattr(checkpoint, "_write_file", failing)
    with pytest.raises(OSError, match="no space"):
        run_chunked(path)
    monkeypatch.setattr(checkpoint, "_write_file", real)
    saved = read_checkpoint(path)
    assert saved["meta"]["steps_done"] == 10 and saved["meta"]["chunks_done"] == 1
    assert not [n for n in os.listdir(path) if n.startswith(".tmp-")]
    assert_identical(run_chunked(path), reference)


CHILD = textwrap.dedent(
    """
    import os, sys, time
    sys.path[:0] = [{package!r}, {tests!r}]  # the very dgsgld the parent test imported
    import test_checkpoint as t
    from dgsgld.runner import checkpoint as checkpoint
    marker, mode = {marker!r}, {mode!r}

    def hang():
        open(marker, "w").close()
        time.sleep(600)

    if mode == "between":
        on_chunk = lambda done, total: hang()
    else:
        on_chunk = None
        real = checkpoint._write_file

        def half_then_hang(f, payload):
            if b"state/0.npy" in payload:  # the state record (a zip member name)
                real(f, payload[: len(payload) // 2])
                f.flush()
                os.fsync(f.fileno())
                hang()
            real(f, payload)

        checkpoint._write_file = half_then_hang
    t.run_chunked({path!r}, on_chunk=on_chunk)
    """
)


# A child process imports JAX and compiles a chunk of its own (~6 s): slow-only. Fast twins:
# test_resume_after_crash_between_chunks (a stop right after a chunk is saved, in-process),
# test_interrupted_write_keeps_previous_checkpoint (a state record torn half-way) and
# tests/runner/test_reliability_checkpoint.py::
# test_partial_temp_file_and_uncommitted_chunk_are_ignored (a torn temporary file and an
# uncommitted chunk beside the record are ignored on resume).
@pytest.mark.slow  # fast twins: the three named above
@pytest.mark.parametrize("mode", ["between", "mid_write"])
def test_resume_after_sigkill(tmp_path, reference, mode):
    """The child resumes after chunk 0 (saved here, so that it compiles only one chunk), runs
    chunk 1 and is killed: after saving it, or half-way through writing its state record."""
    path, marker = str(tmp_path / "run"), str(tmp_path / "marker")

    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_chunked(path, on_chunk=stop)
    package = os.path.dirname(os.path.dirname(dgsgld.__file__))
    script = CHILD.format(package=package, tests=os.path.dirname(os.path.dirname(__file__)),
                          marker=marker, mode=mode, path=path)
    child = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(marker):
            if child.poll() is not None:
                pytest.fail(f"child exited early: {child.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("child did not reach the kill point in 120 s")
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.stderr.close()
    saved = read_checkpoint(path)
    leftovers = [n for n in os.listdir(path) if n.startswith(".tmp-")]
    if mode == "between":
        assert saved["meta"]["steps_done"] == 20 and not leftovers
    else:
        # The kill hit the second state record half-way: the first one is intact, the torn
        # temporary file lies beside it, and chunk 1's file is already there but uncommitted.
        assert saved["meta"]["steps_done"] == 10 and len(leftovers) == 1
        assert os.path.exists(os.path.join(path, "chunk_00001.npz"))
    assert_identical(run_chunked(path), reference)
    assert not [n for n in os.listdir(path) if n.startswith(".tmp-")]


def test_finished_checkpoint_is_read_back_without_sampling(tmp_path, reference, monkeypatch):
    path = tmp_path / "run"
    run_chunked(path)

    real = checkpoint._run._execute_here

    def no_sampling(*args, **kwargs):
        # Only traced for shapes (under jax.eval_shape: tracer outputs), never run.
        out = real(*args, **kwargs)
        if not isinstance(out.divergence.iteration, jax.core.Tracer):
            raise AssertionError("a finished run must not sample again")
        return out

    monkeypatch.setattr(checkpoint._run, "_execute_here", no_sampling)
    assert_identical(run_chunked(path), reference)


def test_on_disk_format_is_plain_numpy(tmp_path, reference):
    path = tmp_path / "run"
    run_chunked(path)
    with np.load(path / "state.npz", allow_pickle=False) as record:
        meta = json.loads(str(record["meta"]))
        state_leaves = [record[f"state/{i}"] for i in range(len(meta["specs"]["state"]))]
    assert meta["format"] == "dgsgld-checkpoint"
    assert meta["version"] == checkpoint.FORMAT_VERSION == 4
    fingerprint = dict(meta["fingerprint"])
    assert fingerprint["algorithm"] == "dgsgld.samplers.diging.DIGingSGLD"
    assert fingerprint["algorithm.step_size"] == "0.05 (float32)"
    assert fingerprint["key"] == f"key<threefry2x32> [0, {KEY_SEED}] (uint32[2])"
    assert fingerprint["program"].startswith("program sha256:")
    # Every entry's SHA-256 as written: of the arrays' dtype, shape and bytes.
    assert set(meta["sha256"]) == {"meta", "divergence/iteration", "divergence/agent",
                                   *(f"state/{i}" for i in range(len(state_leaves)))}
    for i, leaf in enumerate(state_leaves):
        want = hashlib.sha256(f"{leaf.dtype.str}{list(leaf.shape)}".encode() + leaf.tobytes())
        assert meta["sha256"][f"state/{i}"] == want.hexdigest()
    assert meta["run"]["num_steps"] == NUM_STEPS and meta["run"]["thin"] == THIN
    assert meta["steps_done"] == NUM_STEPS and meta["chunks_done"] == 3
    for leaf, want in zip(state_leaves, jax.tree.leaves(reference.state)):
        assert np.array_equal(leaf, np.asarray(want))
    chunks = []
    for j in range(3):
        with np.load(path / f"chunk_{j:05d}.npz", allow_pickle=False) as archive:
            chunks.append(archive["positions/0"])
            assert json.loads(str(archive["meta"]))["last_step"] == [10, 20, 24][j]
    # Chunk 0 holds iterations 0, 2, ..., 10 (6 kept), then 12..20 (5) and 22, 24 (2).
    assert [c.shape[1] for c in chunks] == [6, 5, 2]
    assert np.array_equal(np.concatenate(chunks, axis=1), np.asarray(reference.positions))


def test_checkpoint_of_another_run_is_refused(tmp_path):
    path = tmp_path / "run"
    run_chunked(path)
    alg, potential, init = problem()
    args = (potential, W)
    cases = [
        ((alg, *args, init, jax.random.key(KEY_SEED + 1), NUM_STEPS), {}, "`key`"),
        ((alg, *args, init, jax.random.key(KEY_SEED), NUM_STEPS + 10), {}, "`num_steps`"),
        ((alg, *args, init + 1.0, jax.random.key(KEY_SEED), NUM_STEPS), {}, "`init`"),
        ((dgsgld.DESGLD(0.05), *args, init, jax.random.key(KEY_SEED), NUM_STEPS), {},
         "`algorithm`"),
        ((dgsgld.DIGingSGLD(0.04), *args, init, jax.random.key(KEY_SEED), NUM_STEPS), {},
         "`algorithm.step_size`"),
        ((alg, *args, init, jax.random.key(KEY_SEED), NUM_STEPS),
         {"output": KWARGS["output"]._replace(thin=1)},
         "`output.thin`"),
    ]
    for call, extra, field in cases:
        kwargs = {**KWARGS, **extra}
        with pytest.raises(ValueError, match=field) as err:
            sample_chunked(*call, chunk_size=10, path=path, **kwargs)
        assert f"differs from the checkpoint in {path}" in str(err.value)


def test_damaged_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "run"
    path.mkdir()
    (path / "state.npz").write_bytes(b"PK\x03\x04 not really a zip file")
    with pytest.raises(ValueError, match="unreadable"):
        run_chunked(path)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(chunk_size=3), r"`chunk_size` \(3\) must be a multiple of `output.thin` \(2\)"),
        (dict(chunk_size=0), "`chunk_size` must be a positive integer; got 0"),
        (dict(chunk_size=8.0), "`chunk_size` must be a positive integer; got 8.0"),
        (dict(chunk_size=10, on_divergence="ignore"), "`on_divergence` must be"),
        (dict(chunk_size=10, thinn=2), r"unknown option\(s\) \['thinn'\]"),
        (dict(chunk_size=10, on_chunk=3), "`on_chunk` must be a callable or None"),
    ],
)
def test_bad_chunking_arguments(tmp_path, kwargs, match):
    alg, potential, init = problem()
    with pytest.raises(ValueError, match=match):
        sample_chunked(alg, potential, W, init, jax.random.key(0), NUM_STEPS,
                       output=dgsgld.Output(thin=THIN), path=tmp_path, **kwargs)
