"""A checkpoint never splices two runs or returns what it cannot vouch for.

Every case here was a silent wrong result (or a raw JSONDecodeError/KeyError, or a killed
writer) before checkpoints carried a fingerprint, cross-checked files and a lock. The problem,
its compiled chunks and the reference trace are those of ``test_checkpoint``.
"""

import io
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import zipfile

import hypothesis
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_checkpoint import (
    KEY_SEED,
    KWARGS,
    NUM_STEPS,
    THIN,
    W,
    assert_identical,
    ensemble_fn,
    log_likelihood,
    log_prior,
    problem,
    run_chunked,
    trace_fn,
)

import dgsgld
from dgsgld.runner import checkpoint as checkpoint
from dgsgld.runner._fingerprint import describe
from dgsgld.runner.checkpoint import CheckpointDir, CheckpointError, read_checkpoint, sample_chunked

pytestmark = pytest.mark.reliability


@pytest.fixture(scope="module")
def reference():
    alg, potential, init = problem()
    return dgsgld.sample(alg, potential, W, init, jax.random.key(KEY_SEED), NUM_STEPS, **KWARGS)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished checkpoint (chunks of 10, 10, 4 iterations), never modified by the tests."""
    path = tmp_path_factory.mktemp("ckpt") / "run"
    run_chunked(path)
    return path


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    """A checkpoint after two of its three chunks (20 of 24 iterations)."""
    path = tmp_path_factory.mktemp("ckpt") / "run"

    def stop(done, total):
        if done == 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_chunked(path, on_chunk=stop)
    return path


def copy(path, tmp_path):
    dest = tmp_path / "copy"
    shutil.copytree(path, dest)
    return dest


def other_prior(theta):
    return -0.06 * jnp.sum(theta**2)


def scaled_trace_fn(scale):
    return lambda state: {"mean": scale * jnp.mean(state.position, axis=0)}


def resume(path, algorithm=None, potential=None, mixing=W, init=None, key=KEY_SEED,
           num_steps=NUM_STEPS, chunk_size=10, **changes):
    alg, pot, ini = problem()
    # Changes of single output fields (thin=1, ...) are made inside KWARGS's `output`.
    fields = {name: changes.pop(name) for name in list(changes) if name in dgsgld.Output._fields}
    output = changes.pop("output", KWARGS["output"])._replace(**fields)
    return sample_chunked(algorithm or alg, potential or pot, mixing, ini if init is None else init,
                          jax.random.key(key), num_steps, chunk_size=chunk_size, path=path,
                          **{**KWARGS, "output": output, **changes})


# -- 1. a checkpoint is a contract --------------------------------------------------------------


def _potential(**changes):
    _, pot, _ = problem()
    kwargs = dict(log_likelihood=log_likelihood, log_prior=log_prior, data=pot.data)
    return dgsgld.Potential(**{**kwargs, **changes})


W2 = np.array([[0.6, 0.4, 0.0], [0.4, 0.2, 0.4], [0.0, 0.4, 0.6]], np.float32)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(algorithm=dgsgld.DIGingSGLD(0.06)),
         "`algorithm.step_size` differs from the checkpoint in {path}: 0.05 (float32) "
         "(checkpoint) vs 0.06 (float32) (this call)"),
        (dict(algorithm=dgsgld.DESGLD(0.05)), "`algorithm` differs"),
        (dict(potential="data"), "`potential.data` differs"),
        (dict(potential="batch_size"), "`potential.batch_size` differs"),
        (dict(potential="prior"), "`potential.log_prior` differs"),
        (dict(potential="mask"), "`potential.mask` differs"),
        (dict(mixing=W2), "`mixing` differs"),
        (dict(mixing=jnp.stack([W, W])), "`mixing` differs"),
        (dict(key=KEY_SEED + 1), "`key` differs"),
        (dict(trace_fn=scaled_trace_fn(2.0)), "`output.trace_fn` differs"),
        (dict(ensemble_fn=None), "`output.ensemble_fn` differs"),
        (dict(positions=False), "`output.positions` differs"),
        (dict(chunk_size=12), "`chunk_size` differs"),
        (dict(num_steps=NUM_STEPS + 2), "`num_steps` differs"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_resume_with_other_settings_is_refused(finished, changes, message):
    changes = dict(changes)
    what = changes.get("potential")
    if isinstance(what, str):
        _, pot, _ = problem()
        changes["potential"] = {
            "data": lambda: _potential(data=pot.data + 1.0),
            "batch_size": lambda: _potential(batch_size=2),
            "prior": lambda: _potential(log_prior=other_prior),
            "mask": lambda: _potential(mask=np.array([[1, 1, 1, 0]] * 3, bool)),
        }[what]()
    with pytest.raises(CheckpointError) as err:
        resume(finished, **changes)
    text = str(err.value)
    assert message.format(path=finished) in text
    if what == "batch_size":
        # the setting and the arrays derived from it
        assert "also differ: `potential.subsets`" in text


def test_closure_values_and_function_bodies_are_part_of_the_contract(finished):
    fields = lambda fn: dict(describe(fn, "trace_fn"))  # noqa: E731
    one, three = fields(scaled_trace_fn(1.0)), fields(scaled_trace_fn(3.0))
    assert one == fields(scaled_trace_fn(1.0))  # rebuilt from scratch: the same contract
    assert one["trace_fn.<closure scale>"] == "1.0" and three["trace_fn.<closure scale>"] == "3.0"
    # Same name, other body: the bytecode hash differs, and a resume with it is refused.
    namespace = {"jnp": jnp}
    exec("def trace_fn(state):\n    return {'mean': jnp.mean(state.position, axis=0) + 1}",
         namespace)
    namespace["trace_fn"].__module__ = trace_fn.__module__
    assert fields(namespace["trace_fn"])["trace_fn"] != fields(trace_fn)["trace_fn"]
    with pytest.raises(CheckpointError, match=r"`output.trace_fn` differs .*code sha256:"):
        resume(finished, trace_fn=namespace["trace_fn"])


# -- 2. files are cross-checked --------------------------------------------------------------


def rewrite(file, **entries):
    """Rewrite an .npz with some entries replaced (``meta`` given as a dict or raw string)."""
    with np.load(file, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    for name, value in entries.items():
        if name == "meta" and isinstance(value, dict):
            value = json.dumps(value)
        arrays[name] = np.asarray(value)
    np.savez(file, **arrays)


def meta_of(file):
    with np.load(file, allow_pickle=False) as archive:
        return json.loads(str(archive["meta"]))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: {**m, "steps_done": 10}, "`steps_done` = 10 and `chunks_done` = 3 disagree"),
        (lambda m: {**m, "chunks_done": 2}, "`steps_done` = 24 and `chunks_done` = 2 disagree"),
        (lambda m: {**m, "stopped": True}, "metadata `stopped` is True"),
        (lambda m: {**m, "steps_done": "24"}, "metadata `steps_done` is '24'; expected an integer"),
        (lambda m: {k: v for k, v in m.items() if k != "run"}, "metadata `run` is None"),
        (lambda m: {**m, "run": {**m["run"], "thin": 1}}, "metadata `thin` (1) disagrees"),
        (lambda m: {**m, "version": 2},
         "version 2; this dgsgld reads 'dgsgld-checkpoint' version 4"),
        (lambda m: "{not json", "has `meta` that is not valid JSON"),
        (lambda m: [1, 2], "has `meta` that is not a JSON object"),
    ],
)
def test_edited_metadata_is_refused_naming_the_file(finished, tmp_path, edit, message):
    path = copy(finished, tmp_path)
    state = path / "state.npz"
    new = edit(meta_of(state))
    rewrite(state, meta=new if isinstance(new, (dict, str)) else json.dumps(new))
    with pytest.raises(CheckpointError) as err:
        resume(path)
    assert message in str(err.value) and str(state) in str(err.value)


def test_state_count_and_divergence_record_are_cross_checked(finished, tmp_path):
    path = copy(finished, tmp_path)
    state = path / "state.npz"
    spec = meta_of(state)
    count = f"state/{spec['run']['count_leaf']}"
    with np.load(state) as archive:
        good_count, good_div = archive[count], archive["divergence/iteration"]
    rewrite(state, **{count: good_count - 4})
    with pytest.raises(CheckpointError, match=r"`count` \[20, 20\] disagrees with the 24 itera"):
        resume(path)
    rewrite(state, **{count: good_count, "divergence/iteration": good_div + 7})
    with pytest.raises(CheckpointError, match="divergence record is inconsistent"):
        resume(path)


def test_short_or_foreign_chunk_is_refused(finished, tmp_path):
    path = copy(finished, tmp_path)
    chunk = path / "chunk_00001.npz"
    with np.load(chunk) as archive:
        positions = archive["positions/0"]
    rewrite(chunk, **{"positions/0": positions[:, :3]})
    with pytest.raises(CheckpointError, match=r"entry `positions/0` of shape \(2, 3, 3, 2\) and "
                                              r"dtype float32; expected \(2, 5, 3, 2\)"):
        resume(path)
    # A chunk of another run (same shapes, other key) in place of this one.
    other = tmp_path / "other"
    resume(other, key=KEY_SEED + 1)
    shutil.copy(other / "chunk_00001.npz", chunk)
    with pytest.raises(CheckpointError, match="`run` .* belongs to another run"):
        resume(path)


def test_missing_chunk_in_the_middle_is_refused(finished, tmp_path):
    path = copy(finished, tmp_path)
    os.remove(path / "chunk_00001.npz")
    with pytest.raises(CheckpointError, match=r"chunk_00001.npz' is missing, but .* records it"):
        resume(path)
    with pytest.raises(CheckpointError, match="chunk_00001.npz' is missing"):
        read_checkpoint(path)


def _npz_with_header(file, entries):
    """An uncompressed .npz whose members are (name, header dict, payload bytes)."""
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED) as archive:
        for name, header, payload in entries:
            buffer = io.BytesIO()
            np.lib.format.write_array_header_1_0(buffer, header)
            archive.writestr(name + ".npy", buffer.getvalue() + payload)


def test_declared_sizes_are_checked_before_allocation(finished, tmp_path):
    path = copy(finished, tmp_path)
    chunk = path / "chunk_00002.npz"
    with np.load(chunk) as archive:
        arrays = {name: archive[name] for name in archive.files}
    # A 48 GB positions array declared by a few bytes: refused from its header alone.
    entries = [(name, {"descr": a.dtype.str, "fortran_order": False, "shape": a.shape},
                a.tobytes()) for name, a in arrays.items()]
    entries[[e[0] for e in entries].index("positions/0")] = (
        "positions/0", {"descr": "<f4", "fortran_order": False, "shape": (2, 10**9, 3, 2)}, b"0")
    _npz_with_header(chunk, entries)
    with pytest.raises(CheckpointError, match=r"`positions/0` whose size \(\d+ bytes\) disagrees "
                                              r"with its header \(\(2, 1000000000, 3, 2\)"):
        resume(path)
    # A compressed archive (a zip bomb's vehicle) is refused whatever it holds.
    np.savez_compressed(chunk, **arrays)
    with pytest.raises(CheckpointError, match="has a compressed entry"):
        resume(path)


def test_partial_temp_file_and_uncommitted_chunk_are_ignored(partial, reference, tmp_path):
    path = copy(partial, tmp_path)
    (path / ".tmp-abcd.npz").write_bytes(b"PK\x03\x04 half a zip")
    shutil.copy(path / "chunk_00000.npz", path / "chunk_00002.npz")  # uncommitted, wrong
    assert_identical(resume(path), reference)
    assert not list(path.glob(".tmp-*"))
    assert read_checkpoint(path)["meta"]["chunks_done"] == 3


def test_checkpoint_dir_api(finished, reference):
    ckpt = CheckpointDir(finished)
    assert ckpt.exists() and ckpt.meta["steps_done"] == NUM_STEPS
    saved = ckpt.load()
    assert len(saved.chunks) == 3
    for got, want in zip(saved.state, jax.tree.leaves(reference.state)):
        assert np.array_equal(got, np.asarray(want))
    with pytest.raises(RuntimeError, match=r"needs the directory held with \.lock\(\)"):
        ckpt.save_chunk({}, 0, {}, None, None)
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        CheckpointDir(finished / "nothing").meta


def test_path_that_is_a_file_is_refused(tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(CheckpointError, match=r"`path` .* is a file, not a directory"):
        resume(file)


# -- 3. one writer at a time ----------------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import os, sys, time
    sys.path[:0] = [{package!r}, {tests!r}]
    import test_checkpoint as t
    from dgsgld.runner import checkpoint as checkpoint
    started, go = {started!r}, {go!r}
    real = checkpoint._write_file

    def wait_then_write(f, payload):  # stop in the middle of a save, temporary file open
        if not os.path.exists(started):
            open(started, "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(go) and time.monotonic() < deadline:
                time.sleep(0.05)
        real(f, payload)

    checkpoint._write_file = wait_then_write
    t.run_chunked({path!r})
    """
)


# A second process imports JAX and compiles a chunk (~9 s): slow-only. Fast twins:
# test_lock_is_per_directory_in_one_process_too (a second writer of a held directory fails at
# once, naming the holder) and test_a_linked_lock_file_is_refused_by_sample_chunked
# (sample_chunked takes the lock before it writes).
@pytest.mark.slow  # fast twins: the two named above
def test_second_writer_fails_at_once_and_first_finishes_intact(partial, tmp_path, reference,
                                                              monkeypatch):
    """The holder resumes a checkpoint and is stopped half-way through saving its last chunk;
    meanwhile this process tries to write the same directory, with the same and other settings."""
    path, started, go = copy(partial, tmp_path), tmp_path / "started", tmp_path / "go"
    package = os.path.dirname(os.path.dirname(dgsgld.__file__))
    script = HOLDER.format(package=package, tests=os.path.dirname(os.path.dirname(__file__)),
                           started=str(started), go=str(go), path=str(path))
    child = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            if child.poll() is not None:
                pytest.fail(f"holder exited early: {child.stderr.read().decode()[-2000:]}")
            assert time.monotonic() < deadline, "holder did not start in 120 s"
            time.sleep(0.05)
        in_flight = sorted(path.glob(".tmp-*"))
        assert len(in_flight) == 1  # the holder's save in progress
        ran = []
        real = checkpoint._run._execute_here
        monkeypatch.setattr(checkpoint._run, "_execute_here",
                            lambda *a, **k: ran.append(1) or real(*a, **k))
        for kwargs in ({}, {"algorithm": dgsgld.DIGingSGLD(0.07)}):
            with pytest.raises(CheckpointError) as err:
                resume(path, **kwargs)
            assert str(err.value).startswith(
                f"Checkpoint directory {str(path)!r} is in use by another writer (process "
                f"{child.pid}")
        assert len(ran) == 4  # per call, the shape probe and the program trace; never a chunk
        assert sorted(path.glob(".tmp-*")) == in_flight  # not cleaned up under the holder
        go.touch()
        assert child.wait(120) == 0, child.stderr.read().decode()[-2000:]
    finally:
        if child.poll() is None:
            child.kill()
        child.stderr.close()
    monkeypatch.undo()
    assert read_checkpoint(path)["meta"]["steps_done"] == NUM_STEPS
    assert_identical(resume(path), reference)


def test_lock_is_per_directory_in_one_process_too(tmp_path):
    ckpt = CheckpointDir(tmp_path / "run")
    with ckpt.lock():
        busy = f"is in use by another writer \\(process {os.getpid()}"
        with pytest.raises(CheckpointError, match=busy):
            with CheckpointDir(tmp_path / "run").lock():
                pass
    with ckpt.lock():  # released
        pass


# -- fuzzing ------------------------------------------------------------------------------------


def _mutations():
    value = st.one_of(st.none(), st.booleans(), st.integers(-3, 40), st.text(max_size=4),
                      st.lists(st.integers(0, 3), max_size=3))
    top = st.sampled_from(["steps_done", "chunks_done", "stopped", "format", "version",
                           "fingerprint_sha256", "specs", "fingerprint"])
    run = st.sampled_from(["num_chains", "num_steps", "chunk_size", "thin", "first_count", "stop",
                           "count_leaf"])
    return st.one_of(
        st.tuples(st.just("top"), top, value),
        st.tuples(st.just("run"), run, value),
        st.tuples(st.just("fingerprint"), st.integers(0, 60), st.text(max_size=6)),
        st.tuples(st.just("delete"), top, st.none()),
    )


def _fuzz_settings(max_examples):
    return hypothesis.settings(
        max_examples=max_examples, deadline=None,
        suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])


# Each example copies a checkpoint and resumes it (a trace for shapes at least): the default
# run draws 10 examples of the same strategies, the slow run 40.
@_fuzz_settings(10)
@hypothesis.given(mutation=_mutations())
def test_fuzzed_metadata_is_refused_or_harmless(finished, reference, tmp_path_factory, mutation):
    _fuzz_metadata(finished, reference, tmp_path_factory, mutation)


@pytest.mark.slow  # fast twin: test_fuzzed_metadata_is_refused_or_harmless (10 examples)
@_fuzz_settings(40)
@hypothesis.given(mutation=_mutations())
def test_fuzzed_metadata_is_refused_or_harmless_40(finished, reference, tmp_path_factory,
                                                   mutation):
    _fuzz_metadata(finished, reference, tmp_path_factory, mutation)


def _fuzz_metadata(finished, reference, tmp_path_factory, mutation):
    path = copy(finished, tmp_path_factory.mktemp("fuzz"))
    state = path / "state.npz"
    meta = meta_of(state)
    kind, field, value = mutation
    if kind == "top":
        meta[field] = value
    elif kind == "run":
        meta["run"][field] = value
    elif kind == "fingerprint":
        meta["fingerprint"][field % len(meta["fingerprint"])][1] = value
    else:
        del meta[field]
    rewrite(state, meta=meta)
    try:
        got = resume(path)
    except CheckpointError as err:
        assert str(state) in str(err) or f"in {path}:" in str(err)
    else:
        assert_identical(got, reference)


ARGUMENTS = {
    "algorithm": [None, dgsgld.DIGingSGLD(0.05), dgsgld.DIGingSGLD(jnp.float32(0.05)),
                  dgsgld.DIGingSGLD(0.0500001), dgsgld.DIGingSGLD(lambda k: 0.05)],
    "mixing": [W, W.copy(), jnp.asarray(W), W[None], W2, W.astype(np.float64)],
    "key": [KEY_SEED, KEY_SEED + 1],
    "num_steps": [NUM_STEPS, NUM_STEPS + 2, NUM_STEPS - 4],
    "chunk_size": [10, 12, 20],
    "thin": [THIN, 1],
    "trace_fn": [trace_fn, scaled_trace_fn(1.0), None],
    "ensemble_fn": [ensemble_fn, None],
    "positions": [True, None, False],
}


_CHOICES = st.fixed_dictionaries(
    {name: st.sampled_from(range(len(options))) for name, options in ARGUMENTS.items()})


@_fuzz_settings(10)  # as the metadata fuzzing: 10 examples by default, 40 in the slow run
@hypothesis.given(choice=_CHOICES)
def test_fuzzed_arguments_on_resume_are_refused_or_identical(partial, reference, tmp_path_factory,
                                                             choice):
    _fuzz_arguments(partial, reference, tmp_path_factory, choice)


@pytest.mark.slow  # fast twin: test_fuzzed_arguments_on_resume_are_refused_or_identical
@_fuzz_settings(40)
@hypothesis.given(choice=_CHOICES)
def test_fuzzed_arguments_on_resume_are_refused_or_identical_40(partial, reference,
                                                                tmp_path_factory, choice):
    _fuzz_arguments(partial, reference, tmp_path_factory, choice)


def _fuzz_arguments(partial, reference, tmp_path_factory, choice):
    path = copy(partial, tmp_path_factory.mktemp("fuzz"))
    args = {name: ARGUMENTS[name][i] for name, i in choice.items()}
    try:
        got = resume(path, **args)
    except ValueError as err:  # a changed setting, or an argument sample() refuses
        text = str(err)
        assert f"differs from the checkpoint in {path}" in text or "`" in text
    else:
        # Accepted only when nothing that matters changed: the trace of the original run.
        assert_identical(got, reference)


# -- resumes that must be accepted ----------------------------------------------------------------


# Compiles the chunks of another problem (test_divergence's) with on_divergence="stop". Fast twins:
# tests/runner/test_divergence.py::test_on_divergence_stop_freezes_every_chain (a stopped run's
# frozen count and divergence record) and test_edited_metadata_is_refused_naming_the_file (the
# metadata's `stopped` flag is cross-checked).
@pytest.mark.slow  # fast twins: the two named above
def test_stopped_run_is_committed_consistently_and_read_back(tmp_path):
    """A run frozen by a divergence: its checkpoint passes the cross-checks (stopped flag, frozen
    count, divergence record) and reads back bit for bit. (That it equals one ``sample`` call
    is test_divergence's.)"""
    import test_divergence as td

    potential, init = td.problem()
    args = (dgsgld.DIGingSGLD(1.0), potential, jnp.eye(td.N), init, jax.random.key(3),
            td.NUM_STEPS)
    kwargs = dict(chunk_size=20, on_divergence="stop", allow_disconnected=True)  # W = I
    got = sample_chunked(*args, path=tmp_path, **kwargs)
    meta = read_checkpoint(tmp_path)["meta"]
    assert meta["stopped"] and meta["steps_done"] == td.NUM_STEPS
    assert np.asarray(got.diverged).any()
    for again in (sample_chunked(*args, path=tmp_path, **kwargs),
                  sample_chunked(*args, path=None, **kwargs)):
        for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(got)):
            assert np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    # A stopped flag taken away is caught by the cross-check.
    state = tmp_path / "state.npz"
    rewrite(state, meta={**meta_of(state), "stopped": False})
    with pytest.raises(CheckpointError, match="metadata `stopped` is False but the divergence"):
        sample_chunked(*args, path=tmp_path, **kwargs)


@pytest.mark.slow  # fast twin:
# tests/runner/test_traceio.py::test_a_loaded_state_continues_the_run_exactly
def test_run_continued_from_a_state_resumes(partial, tmp_path):
    """``init`` a state with ``count`` 20: the counts in the checkpoint start there."""
    alg, potential, _ = problem()
    leaves = read_checkpoint(partial)["state"]
    state = jax.tree.unflatten(jax.tree.structure(problem_state()),
                               [jnp.asarray(x) for x in leaves])
    args = (alg, potential, W, state, jax.random.key(KEY_SEED), 4)
    want = dgsgld.sample(*args, **KWARGS)
    path = tmp_path / "run"

    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sample_chunked(*args, chunk_size=2, path=path, on_chunk=stop, **KWARGS)
    assert read_checkpoint(path)["meta"]["run"]["first_count"] == 20
    assert_identical(sample_chunked(*args, chunk_size=2, path=path, **KWARGS), want)


def problem_state():
    alg, potential, init = problem()
    return jax.eval_shape(lambda: dgsgld.sample(alg, potential, W, init, jax.random.key(0), THIN,
                                                **KWARGS).state)


def test_chain_offset_and_burn_in_pass_through(finished, reference):
    """``chain_offset`` reaches every chunk (and is part of the contract); ``burn_in`` is
    dropped from the whole run's outputs, so it may change on a finished checkpoint."""
    alg, potential, init = problem()
    args = (alg, potential, W, init, jax.random.key(KEY_SEED), NUM_STEPS)
    want = dgsgld.sample(*args, chain_offset=5, **KWARGS)
    assert not np.array_equal(np.asarray(want.positions), np.asarray(reference.positions))
    assert_identical(sample_chunked(*args, chunk_size=10, chain_offset=5, **KWARGS), want)
    with pytest.raises(CheckpointError, match=r"`chain_offset` differs .*: 0 \(checkpoint\) vs 5"):
        resume(finished, chain_offset=5)
    assert_identical(resume(finished, burn_in=6),
                     dgsgld.sample(*args, output=KWARGS["output"]._replace(burn_in=6)))


# -- nothing inside a checkpoint directory is followed ---------------------------------------------


def _plant(path, name, kind, victim):
    member = path / name
    if member.exists() or member.is_symlink():
        member.unlink()
    if kind == "symlink":
        member.symlink_to(victim)
    elif kind == "dangling symlink":
        member.symlink_to(victim.parent / "created-through-the-link")
    elif kind == "hard link":
        os.link(victim, member)
    elif kind == "directory":
        member.mkdir()
    elif kind == "fifo":
        os.mkfifo(member)


LINKED = [(".lock", "symlink"), (".lock", "dangling symlink"), (".lock", "hard link"),
          (".lock", "directory"), ("state.npz", "symlink"), ("chunk_00001.npz", "symlink"),
          ("chunk_00002.npz", "symlink"), (".tmp-abcd.npz", "symlink"), ("notes.txt", "symlink"),
          ("state.npz", "fifo"), ("chunk_00000.npz", "directory")]


@pytest.mark.parametrize("name, kind", LINKED, ids=[f"{n} {k}" for n, k in LINKED])
def test_members_are_never_followed_and_links_are_refused(partial, tmp_path, name, kind):
    """A writer (the lock) and a reader (read_checkpoint) of a directory holding a link, or one
    of the format's names that is not a regular file, refuse it before opening anything through
    it: the victim, a file outside the directory, keeps its bytes and no file is created."""
    path = copy(partial, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    if name in ("state.npz", "chunk_00001.npz"):  # a link to an identical copy: still refused
        shutil.copy(path / name, victim)
    before = victim.read_bytes()
    _plant(path, name, kind, victim)
    outcomes = []
    for open_it in (lambda: CheckpointDir(path).lock().__enter__(), lambda: read_checkpoint(path)):
        done = []
        reader = threading.Thread(target=lambda: done.append(_refusal(open_it)), daemon=True)
        reader.start()
        reader.join(30)  # a FIFO opened for reading would block for ever
        outcomes.append(done[0] if done else "blocked")
    if name == ".lock" and kind != "symlink":
        outcomes = outcomes[:1]  # readers take no lock: a hard-linked lock file is harmless
    for text in outcomes:
        assert text.startswith(f"Checkpoint directory {str(path)!r} holds ") or text.startswith(
            f"Checkpoint lock file {str(path / name)!r} "), text
        if kind in ("symlink", "dangling symlink"):
            assert f"holds a symbolic link `{name}` (to " in text
        elif kind == "hard link":
            assert "has 2 hard links; it may be another file: it is not written" in text
        else:
            assert f"holds `{name}`, which is not a regular file" in text
    assert victim.read_bytes() == before
    assert not (tmp_path / "created-through-the-link").exists()


def _refusal(open_it):
    try:
        open_it()
    except CheckpointError as err:
        return str(err)
    return "accepted"


def test_a_linked_lock_file_is_refused_by_sample_chunked(partial, tmp_path):
    path = copy(partial, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (path / ".lock").unlink()
    (path / ".lock").symlink_to(victim)
    with pytest.raises(CheckpointError, match=r"holds a symbolic link `\.lock` \(to '.*victim"
                                              r"\.txt'\); sample_chunked never follows links"):
        resume(path)
    assert victim.read_text() == "precious"


# -- every file's contents are sealed --------------------------------------------------------------


SEALED = [("state.npz", "state/0"), ("state.npz", "state/1"), ("state.npz", "state/2"),
          ("state.npz", "divergence/agent"), ("chunk_00000.npz", "positions/0"),
          ("chunk_00001.npz", "values/0"), ("chunk_00002.npz", "ensemble/0")]


@pytest.mark.parametrize("name, entry", SEALED)
def test_values_rewritten_with_the_same_structure_are_refused(finished, tmp_path, name, entry):
    """Same names, shapes, dtypes and metadata, other values (every kind of entry, in the
    commit record and in chunks): refused, naming the file and the entry."""
    path = copy(finished, tmp_path)
    file = path / name
    with np.load(file) as archive:
        value = archive[entry]
    if entry == "divergence/agent":  # a divergence made up consistently with the counts
        with np.load(file) as archive:
            iteration = archive["divergence/iteration"]
        rewrite(file, **{entry: np.where(np.arange(len(value)) == 0, 1, value),
                         "divergence/iteration": np.where(np.arange(len(value)) == 0, 5,
                                                          iteration)})
        entry = "divergence/agent`, `divergence/iteration"
    else:
        rewrite(file, **{entry: value + np.ones_like(value)})
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(path)
    text = str(err.value)
    assert text.startswith(f"Checkpoint file {str(file)!r}: the contents of `{entry}` differ "
                           "from what sample_chunked wrote (SHA-256 "), text


def test_metadata_edits_that_pass_the_cross_checks_are_refused(finished, tmp_path):
    path = copy(finished, tmp_path)
    for name in ("state.npz", "chunk_00001.npz"):
        file = path / name
        rewrite(file, meta={**meta_of(file), "note": "edited"})
        with pytest.raises(CheckpointError, match=rf"^Checkpoint file '{file}': the contents of "
                                                  r"`meta` differ"):
            read_checkpoint(path)
        shutil.copy(finished / name, file)
    rewrite(path / "state.npz", meta={k: v for k, v in meta_of(path / "state.npz").items()
                                      if k != "sha256"})
    with pytest.raises(CheckpointError, match="metadata `sha256` does not list its"):
        read_checkpoint(path)


def test_an_edited_state_is_refused_on_resume(partial, tmp_path):
    path = copy(partial, tmp_path)
    file = path / "state.npz"
    with np.load(file) as archive:
        position = archive["state/0"]
    rewrite(file, **{"state/0": position * 2})  # the positions half-way through the run
    with pytest.raises(CheckpointError, match=rf"'{file}': the contents of `state/0` differ"):
        resume(path)


# -- a legacy key of the same draws ---------------------------------------------------------------


def test_a_legacy_key_of_the_same_draws_resumes(partial, reference, tmp_path):
    """``PRNGKey(s)`` and ``key(s)`` give the same draws in ``sample``: a run started with
    one resumes with the other, bit-identical; another seed is refused, printed as keys."""
    alg, potential, init = problem()
    args = (alg, potential, W, init)
    for key in (jax.random.PRNGKey(KEY_SEED), jax.random.key(KEY_SEED)):
        path = copy(partial, tmp_path / str(len(str(key))))
        got = sample_chunked(*args, key, NUM_STEPS, chunk_size=10, path=path, **KWARGS)
        assert_identical(got, reference)
    with pytest.raises(CheckpointError) as err:
        sample_chunked(*args, jax.random.PRNGKey(KEY_SEED + 1), NUM_STEPS, chunk_size=10,
                       path=copy(partial, tmp_path / "other"), **KWARGS)
    assert f"`key` differs from the checkpoint in {tmp_path / 'other' / 'copy'}: " \
           f"key<threefry2x32> [0, {KEY_SEED}] (uint32[2]) (checkpoint) vs key<threefry2x32> " \
           f"[0, {KEY_SEED + 1}] (uint32[2]) (this call)" in str(err.value)
