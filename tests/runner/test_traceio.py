"""Save/load of a finished Trace: exact round trips through .npz + JSON, never pickle."""

import io
import json
import os
import threading
import zipfile
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld.runner import traceio as traceio


class Params(NamedTuple):
    w: jax.Array
    b: jax.Array


def make_trace(positions, values=None, ensemble=None):
    state = dgsgld.DIGingState(jax.tree.map(lambda x: x[:, -1] if hasattr(x, "shape") else x,
                                            positions),
                               None, None, jnp.full((3,), 7, jnp.int32))
    divergence = dgsgld.Divergence(jnp.array([-1, 4, -1]), jnp.array([-1, 2, -1]))
    return dgsgld.Trace(positions, values, ensemble, state, divergence)


def assert_same(a, b):
    """Same key paths (dict keys, fields, indices), leaf types, dtypes and values; a user's
    NamedTuple may come back as an equivalent class (see the next test)."""
    flat_a, flat_b = (jax.tree_util.tree_flatten_with_path(t)[0] for t in (a, b))
    assert [jax.tree_util.keystr(p) for p, _ in flat_a] == [
        jax.tree_util.keystr(p) for p, _ in flat_b]
    assert str(jax.tree.structure(a)) == str(jax.tree.structure(b))
    for (_, x), (_, y) in zip(flat_a, flat_b):
        assert type(x) is type(y)
        if callable(x):  # an equinox module's activation: taken from the template
            assert x is y
            continue
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            assert jax.random.key_impl(x) == jax.random.key_impl(y)
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert np.asarray(x).dtype == np.asarray(y).dtype
        assert np.array_equal(np.asarray(x), np.asarray(y))


rng = np.random.default_rng(0)
W = jnp.asarray(rng.standard_normal((3, 5, 4, 2)), jnp.float32)
B = jnp.asarray(rng.standard_normal((3, 5, 4)), jnp.float32)


@pytest.mark.parametrize("positions", [
    {"w": W, "b": B},
    Params(W, B),
    W,
    {"nested": {"w": W}, "pair": (B, [B])},
])
def test_round_trip_is_exact(tmp_path, positions):
    trace = make_trace(positions, values={"loss": np.arange(15.0).reshape(3, 5)},
                       ensemble=None)
    path = traceio.save_trace(tmp_path / "run", trace, metadata={"step_size": 0.01})
    assert path.suffix == ".npz"
    loaded = traceio.load_trace(path)
    assert_same(loaded, trace)
    assert type(loaded.state) is dgsgld.DIGingState and isinstance(loaded, dgsgld.Trace)
    assert loaded.positions is not None and loaded.ensemble is None
    assert np.array_equal(loaded.diverged, [False, True, False])
    assert traceio.read_metadata(path) == {"step_size": 0.01}
    # Plain NumPy can read it without pickle.
    with np.load(path, allow_pickle=False) as files:
        assert "__meta__" in files.files


def test_a_users_namedtuple_comes_back_with_its_fields(tmp_path):
    loaded = traceio.load_trace(traceio.save_trace(tmp_path / "t.npz", make_trace(Params(W, B))))
    # Not importable from the file (only dgsgld's classes are): an equivalent namedtuple.
    assert type(loaded.positions).__name__ == "Params"
    assert loaded.positions._fields == ("w", "b")
    assert np.array_equal(loaded.positions.w, W)
    # With a template, the user's own class.
    like = traceio.load_trace(tmp_path / "t.npz", like=make_trace(Params(W, B)))
    assert type(like.positions) is Params


def test_prng_keys_and_python_scalars(tmp_path):
    keys = jax.random.split(jax.random.key(3), 3)
    trace = make_trace({"w": W}, values={"key": keys, "n": 3, "x": 0.5})
    assert_same(traceio.load_trace(traceio.save_trace(tmp_path / "k.npz", trace)), trace)


def test_equinox_modules_need_a_template(tmp_path):
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(2, 1, 3, 1, key=jax.random.key(0))
    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (3, 5, 4, *x.shape))
                           if eqx.is_array(x) else x, mlp)
    trace = make_trace(stacked)
    path = traceio.save_trace(tmp_path / "mlp.npz", trace)
    with pytest.raises(ValueError, match=r"trace.positions.*pass like="):
        traceio.load_trace(path)
    loaded = traceio.load_trace(path, like=trace)
    assert_same(loaded, trace)
    assert loaded.positions.activation is mlp.activation


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="`trace` must be a dgsgld.Trace"):
        traceio.save_trace(tmp_path / "x.npz", {"w": W})
    with pytest.raises(ValueError, match="dict keys must be strings"):
        traceio.save_trace(tmp_path / "x.npz", make_trace({1: W}))
    with pytest.raises(ValueError, match="`metadata` must be JSON-serializable"):
        traceio.save_trace(tmp_path / "x.npz", make_trace(W), metadata={"f": print})
    with pytest.raises(ValueError, match="does not exist"):
        traceio.load_trace(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", a=np.zeros(2))
    with pytest.raises(ValueError, match="not a dgsgld trace"):
        traceio.load_trace(tmp_path / "other.npz")


def test_a_loaded_state_continues_the_run_exactly(tmp_path):
    # Dict parameters through the runner: continuing from the loaded state gives the same
    # draws as continuing from the state in memory (same key, bitwise).
    def log_likelihood(p, datum):
        return -0.5 * (datum @ p["w"] + p["b"]) ** 2

    data = jnp.asarray(rng.standard_normal((3, 4, 2)), jnp.float32)
    potential = dgsgld.Potential(log_likelihood, lambda p: -0.5 * jnp.sum(p["w"] ** 2), data)
    init = {"w": jnp.zeros((2, 3, 2)), "b": jnp.zeros((2, 3))}
    algorithm, mixing = dgsgld.DIGingSGLD(0.05), dgsgld.networks.ring(3)
    trace = dgsgld.sample(algorithm, potential, mixing, init, jax.random.key(0), 10)
    loaded = traceio.load_trace(traceio.save_trace(tmp_path / "run.npz", trace))
    assert_same(loaded, trace)
    again = [dgsgld.sample(algorithm, potential, mixing, t.state, jax.random.key(1), 5)
             for t in (trace, loaded)]
    assert_same(again[0].positions, again[1].positions)


@pytest.mark.slow  # default run: the array state above; MLP templates:
# test_equinox_modules_need_a_template
def test_an_mlp_run_saves_loads_and_continues(tmp_path):
    # An eqx.nn.MLP passed directly as init: the trace's positions and state are MLPs.
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(1, "scalar", 3, 1, key=jax.random.key(0))
    init = jax.tree.map(lambda a: jnp.broadcast_to(a, (2, 3, *a.shape))
                        if eqx.is_array(a) else a, mlp)
    data = (jnp.ones((3, 4)), jnp.zeros((3, 4)))
    potential = dgsgld.Potential(lambda m, d: -0.5 * (m(d[0][None]) - d[1]) ** 2, None, data)
    algorithm, mixing = dgsgld.DIGingSGLD(0.01), dgsgld.networks.ring(3)
    trace = dgsgld.sample(algorithm, potential, mixing, init, jax.random.key(1), 4)
    path = traceio.save_trace(tmp_path / "mlp.npz", trace)
    with pytest.raises(ValueError, match=r"`trace.positions` holds a equinox.*pass like="):
        traceio.load_trace(path)
    loaded = traceio.load_trace(path, like=trace)
    assert_same(loaded, trace)
    again = [dgsgld.sample(algorithm, potential, mixing, t.state, jax.random.key(2), 3)
             for t in (trace, loaded)]
    assert_same(again[0].positions, again[1].positions)


# -- damaged and hostile files: one ValueError naming the file ------------------------------------


def _members(path):
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def _meta(members):
    return json.loads(members["__meta__"].tobytes().decode())


def _with_meta(members, meta):
    return {**members, "__meta__": np.frombuffer(json.dumps(meta).encode(), np.uint8)}


def _leaf_node(meta):
    """The description of ``trace.state.count`` (a jax int32 array of shape (3,))."""
    return meta["tree"]["children"][3]["children"][3]


def _edit_meta(edit):
    def damage(members):
        meta = _meta(members)
        edit(meta)
        return _with_meta(members, meta)
    return damage


def _raw_entry(file, header, payload):
    """Rewrite the trace ``file`` with entry ``a0`` given as a raw .npy header and payload."""
    members = _members(file)
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED) as archive:
        for name, array in members.items():
            archive.writestr(name + ".npy", buffer.getvalue() + payload if name == "a0"
                             else _npy(array))


def _npy(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


DAMAGE = {
    "text file": (lambda p: p.write_text("step,loss\n1,0.5\n"),
                  "is unreadable (BadZipFile: File is not a zip file)"),
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
                  "is unreadable (BadZipFile"),
    "meta not JSON": (lambda m: {**m, "__meta__": np.frombuffer(b"{not json", np.uint8)},
                      "has a '__meta__' entry that is not UTF-8 JSON"),
    "meta a list": (lambda m: {**m, "__meta__": np.frombuffer(b"[1, 2]", np.uint8)},
                    "has a '__meta__' entry that is not a JSON object"),
    "meta not bytes": (lambda m: {**m, "__meta__": np.zeros(3, np.float32)},
                       "has an entry `__meta__` of shape (3,) and dtype float32"),
    "no tree": (_edit_meta(lambda m: m.pop("tree")), "malformed description at `trace`"),
    "leaf without entry name": (_edit_meta(lambda m: _leaf_node(m).pop("a")),
                                "malformed description at `trace.state.count`: entry name"),
    "unknown node type": (_edit_meta(lambda m: _leaf_node(m).update(t="pickle")),
                          "at `trace.state.count`: node type 'pickle'"),
    "bad field name": (_edit_meta(lambda m: m["tree"]["fields"].__setitem__(0, "class")),
                       "at `trace`: bad NamedTuple fields"),
    "entry missing": (lambda m: {k: v for k, v in m.items() if k != "a0"},
                      "holds 5 entries; missing ['a0'], unexpected []"),
    "entry extra": (lambda m: {**m, "extra": np.zeros(2)}, "unexpected ['extra']"),
    "other shape": (lambda m: {**m, "a0": m["a0"][:, :2]},
                    "has an entry `a0` of shape (3, 2, 4, 2) and dtype float32; the description "
                    "records (3, 5, 4, 2) and float32"),
    "other dtype": (lambda m: {**m, "a0": m["a0"].astype(np.float64)},
                    "the description records (3, 5, 4, 2) and float32"),
    "object dtype": (lambda m: {**m, "a0": np.array([None, 1], object)},
                     "has an entry `a0` of object dtype"),
    "key of unknown impl": (_edit_meta(lambda m: _leaf_node(m).update(t="key", impl="nope")),
                            "JAX cannot rebuild as a 'nope' key"),
    "48 GB declared by a few bytes": (
        lambda p: _raw_entry(p, {"descr": "<f4", "fortran_order": False,
                                 "shape": (3, 5 * 10**9, 4, 2)}, b"0" * 8),
        "bytes) disagrees with its header ((3, 5000000000, 4, 2), float32)"),
}


#: Damage to leaf entries, which read_metadata does not read.
LEAF_DAMAGE = ("other shape", "other dtype", "object dtype", "key of unknown impl",
               "48 GB declared by a few bytes")


@pytest.mark.reliability
@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_or_hostile_file_is_one_error_naming_it(tmp_path, case):
    damage, message = DAMAGE[case]
    path = traceio.save_trace(tmp_path / "run.npz", make_trace(W))
    if damage.__code__.co_varnames[:1] == ("p",):
        damage(path)
    else:
        np.savez(path, **damage(_members(path)))
    for read in (traceio.load_trace, traceio.read_metadata):
        if read is traceio.read_metadata and case in LEAF_DAMAGE:
            continue  # the description alone is fine
        with pytest.raises(ValueError) as err:
            read(path)
        assert type(err.value) is ValueError  # not a JSONDecodeError, BadZipFile, ...
        text = str(err.value)
        assert text.startswith(f"Trace file {str(path)!r} "), text
        assert message in text, text


@pytest.mark.reliability
def test_compressed_entries_are_read_up_to_a_limit(tmp_path, monkeypatch):
    """save_trace writes stored entries; a compressed copy loads, unless its entries declare
    more than the limit in all (refused from the zip headers, before inflating anything)."""
    trace = make_trace(W)
    path = traceio.save_trace(tmp_path / "run.npz", trace)
    np.savez_compressed(path, **_members(path))
    assert_same(traceio.load_trace(path), trace)
    monkeypatch.setattr(traceio, "_MAX_COMPRESSED", W.nbytes)  # the trace holds W and more
    with pytest.raises(ValueError, match=r"^Trace file .* has a compressed entry `.*` \(its "
                                         r"compressed entries declare \d+ bytes, more than the "
                                         rf"{W.nbytes} read"):
        traceio.load_trace(path)


@pytest.mark.reliability
def test_a_fifo_or_a_directory_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "run.npz"
    os.mkfifo(fifo)
    errors = []
    reader = threading.Thread(target=lambda: errors.append(_error(traceio.load_trace, fifo)),
                              daemon=True)
    reader.start()
    reader.join(30)
    assert errors == [f"Trace file {str(fifo)!r} is not a regular file; it is not a trace "
                      "written by dgsgld.runner.traceio.save_trace, or it was damaged since."]
    assert _error(traceio.load_trace, tmp_path).startswith(f"Trace file {str(tmp_path)!r} is "
                                                          "not a regular file")


def _error(fn, *args):
    try:
        fn(*args)
    except ValueError as err:
        return str(err)
    return None


@pytest.mark.reliability
def test_shapes_and_dtypes_are_recorded(tmp_path):
    path = traceio.save_trace(tmp_path / "run.npz", make_trace(W))
    node = _leaf_node(_meta(_members(path)))
    assert node == {"t": "leaf", "a": node["a"], "kind": "jax", "shape": [3], "dtype": "<i4"}
    # A file of format version 1 (no recorded shapes) still loads, checked against its headers.
    members = _members(path)
    meta = _meta(members)
    meta["version"] = 1

    def strip(desc):
        if isinstance(desc, dict):
            for key in ("shape", "dtype"):
                desc.pop(key, None)
            for value in desc.values():
                strip(value)
        elif isinstance(desc, list):
            for value in desc:
                strip(value)

    strip(meta["tree"])
    np.savez(path, **_with_meta(members, meta))
    assert_same(traceio.load_trace(path), make_trace(W))
