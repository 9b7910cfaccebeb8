"""A checkpoint vouches for what the model computes, across processes.

A run is started in one process and stopped after its first chunk; the model's source is then
edited on disk and a second process resumes. Each case below is an edit that changes what the
model computes while every name, and the bytecode of the function handed to ``Potential``, stay
the same: the resume must be refused. An edit that changes the bytecode but not the
computation, and no edit at all, must resume, bit-identical to one uninterrupted run.
"""

import importlib
import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import dgsgld
from dgsgld.runner import checkpoint as checkpoint
from dgsgld.runner.checkpoint import CheckpointError

pytestmark = pytest.mark.reliability

HELPERS = '''
import jax.numpy as jnp

SCALE = 0.5


def energy(theta, x):
    return 0.5 * jnp.sum((x - theta) ** 2)
'''

MODEL = '''
import jax.numpy as jnp

import helpers


class Gaussian:  # a log-likelihood given as an instance of a class
    def __call__(self, theta, x):
        return -0.5 * jnp.sum((x - theta) ** 2)


def in_other_module(theta, x):  # the computation is a helper of another module
    return -helpers.energy(theta, x)


def _two(theta, x):
    return 0.5 * jnp.sum((x - theta) ** 2)


def _one(theta, x):
    return _two(theta, x)


def two_deep(theta, x):  # a helper two calls deep in this module
    return -_one(theta, x)


def reads_a_value(theta, x):  # a module-level value read when it runs
    return -helpers.SCALE * jnp.sum((x - theta) ** 2)


def renamed(theta, x):  # its edit renames a local: other bytecode, the same computation
    d = x - theta
    return -0.5 * jnp.sum(d ** 2)


def untouched(theta, x):
    return -0.5 * jnp.sum((x - theta) ** 2)


CASES = {"class_call": Gaussian(), "other_module": in_other_module, "two_deep": two_deep,
         "module_value": reads_a_value, "renamed": renamed, "untouched": untouched}
'''

#: The edits made between the two processes: (file, old text, new text).
EDITS = {
    "class_call": ("model.py", "        return -0.5 * jnp.sum((x - theta) ** 2)\n\n\ndef in_",
                   "        return -0.6 * jnp.sum((x - theta) ** 2)\n\n\ndef in_"),
    "other_module": ("helpers.py", "    return 0.5 * jnp.sum(", "    return 0.6 * jnp.sum("),
    "two_deep": ("model.py", "def _two(theta, x):\n    return 0.5 *",
                 "def _two(theta, x):\n    return 0.6 *"),
    "module_value": ("helpers.py", "SCALE = 0.5", "SCALE = 0.6"),
    "renamed": ("model.py", "    d = x - theta\n    return -0.5 * jnp.sum(d ** 2)",
                "    diff = x - theta\n    return -0.5 * jnp.sum(diff ** 2)"),
}

CHILD = textwrap.dedent(
    """
    import json, sys
    sys.path[:0] = [{package!r}, {model_dir!r}]
    import jax, jax.numpy as jnp, numpy as np
    # The cases' programs are the same before the edits: compiled once, in the first process.
    jax.config.update("jax_compilation_cache_dir", sys.argv[3] + "/jax-cache")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    import dgsgld, model
    from dgsgld.runner.checkpoint import CheckpointError, sample_chunked

    mode, cases, root = sys.argv[1], sys.argv[2].split(","), sys.argv[3]
    data = jax.random.normal(jax.random.key(1), (2, 3, 2))
    init = jax.random.normal(jax.random.key(2), (2, 2, 2))
    W = np.array([[0.5, 0.5], [0.5, 0.5]], np.float32)
    results = {{}}
    for case in cases:
        potential = dgsgld.Potential(model.CASES[case], None, data)
        args = (dgsgld.DIGingSGLD(0.05), potential, W, init, jax.random.key(7), 4)
        kwargs = dict(chunk_size=2, output=dgsgld.Output(thin=2), path=f"{{root}}/{{case}}")

        def stop(done, total):
            raise KeyboardInterrupt

        if mode == "start":
            try:
                sample_chunked(*args, on_chunk=stop, **kwargs)
            except KeyboardInterrupt:
                pass
            continue
        try:
            got = sample_chunked(*args, **kwargs)
        except CheckpointError as err:
            results[case] = str(err)
            continue
        want = sample_chunked(*args, **{{**kwargs, "path": None}})  # one run, in memory
        same = all(np.array_equal(np.asarray(a), np.asarray(b))
                   for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
        results[case] = "identical" if same else "different"
    print(json.dumps(results))
    """
)


def _run(mode, cases, tmp_path):
    package = os.path.dirname(os.path.dirname(dgsgld.__file__))
    script = CHILD.format(package=package, model_dir=str(tmp_path / "src"))
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-c", script, mode, ",".join(cases),
                           str(tmp_path / "runs")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]) if mode == "resume" else None


def _write_model(src):
    src.mkdir()
    (src / "helpers.py").write_text(HELPERS)
    (src / "model.py").write_text(MODEL)


def _edit(src):
    for file, old, new in EDITS.values():
        text = (src / file).read_text()
        assert text.count(old) == 1, old
        (src / file).write_text(text.replace(old, new))


@pytest.mark.slow  # fast twin: test_a_model_edited_in_place_changes_the_fingerprint (one process)
def test_a_model_edited_between_processes_is_refused(tmp_path):
    src = tmp_path / "src"
    _write_model(src)
    cases = [*EDITS, "untouched"]
    _run("start", cases, tmp_path)
    _edit(src)
    got = _run("resume", cases, tmp_path)
    # No edit, or one that changes only the bytecode: resumed, bit for bit one run.
    assert got.pop("untouched") == "identical"
    assert got.pop("renamed") == "identical"
    path = lambda case: tmp_path / "runs" / case  # noqa: E731
    # The class's __call__ is described (and named) as a function; a helper's edit in another
    # module, two calls deep, or a value read at run time is named by the traced program.
    assert got.pop("class_call").startswith(
        f"`potential.log_likelihood.__call__` differs from the checkpoint in {path('class_call')}"
        ": function model.Gaussian.__call__ (code sha256:")
    for case in ("other_module", "two_deep", "module_value"):
        message = got.pop(case)
        assert message.startswith(
            f"`potential.log_likelihood.<program>` differs from the checkpoint in {path(case)}: "
            "program sha256:"), message
        assert "also differ: `program`" in message
        assert ("What `potential.log_likelihood` computes changed while its name and bytecode "
                "are the same: code it calls (in another module, or several calls deep) or a "
                "module-level value it reads when it runs.") in message
    assert not got


def _fingerprints(src, cases):
    """Each case's fingerprint as ``sample_chunked`` records it, from a fresh import of the
    model, with the gradient's program standing in for the whole run's (traced in a few ms)."""
    for name in ("model", "helpers"):
        sys.modules.pop(name, None)
    # From the source, never from bytecode cached by an earlier import: an edit of the same
    # size within the same second leaves a cached file's recorded mtime and size valid.
    importlib.invalidate_caches()
    sys.path.insert(0, str(src))
    cached, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        model = importlib.import_module("model")
    finally:
        sys.dont_write_bytecode = cached
        sys.path.remove(str(src))
    data = jax.random.normal(jax.random.key(1), (2, 3, 2))
    init = jax.random.normal(jax.random.key(2), (2, 2, 2))
    out = {}
    for case in cases:
        potential = dgsgld.Potential(model.CASES[case], None, data)
        out[case] = checkpoint._fingerprint(
            dgsgld.DIGingSGLD(0.05), potential, np.eye(2, dtype=np.float32), init,
            jax.random.key(7), {}, [], lambda k, p=potential: p.grad(init[0], k))
    for name in ("model", "helpers"):
        sys.modules.pop(name, None)
    return out


def test_a_model_edited_in_place_changes_the_fingerprint(tmp_path):
    src = tmp_path / "src"
    _write_model(src)
    cases = [*EDITS, "untouched"]
    before = _fingerprints(src, cases)
    assert _fingerprints(src, cases) == before  # imported afresh: the same contract
    _edit(src)
    after = _fingerprints(src, cases)
    for case in ("untouched", "renamed"):
        checkpoint._compare(before[case], after[case], "P")  # accepted
    assert dict(before["renamed"])["potential.log_likelihood"] != dict(
        after["renamed"])["potential.log_likelihood"]  # other bytecode, not refused for it
    first = {"class_call": "potential.log_likelihood.__call__", "other_module":
             "potential.log_likelihood.<program>", "two_deep": "potential.log_likelihood.<program>",
             "module_value": "potential.log_likelihood.<program>"}
    for case, field in first.items():
        with pytest.raises(CheckpointError) as err:
            checkpoint._compare(before[case], after[case], "P")
        text = str(err.value)
        assert text.startswith(f"`{field}` differs from the checkpoint in P: "), text
        assert "`program`" in text
        assert ("What the run computes changed." if case == "class_call" else
                "What `potential.log_likelihood` computes changed while its name and bytecode "
                "are the same") in text
    # Code that no named function's program shows (a helper of `trace_fn`, of a schedule):
    # the whole run's program names it.
    strip = lambda fp: [f for f in fp if not f[0].endswith(".<program>")]  # noqa: E731
    with pytest.raises(CheckpointError) as err:
        checkpoint._compare(strip(before["two_deep"]), strip(after["two_deep"]), "P")
    assert str(err.value).startswith("`program` differs from the checkpoint in P: program sha256:")
    assert ("What the run computes changed, while every argument the checkpoint names is the "
            "same: code that the model's functions, `output` functions or schedules call") in str(
        err.value)
