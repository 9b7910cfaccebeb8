"""Save/load of a finished Trace: exact round trips through .npz + JSON, never pickle."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dgsgld
from dgsgld import traceio


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
    algorithm, mixing = dgsgld.diging_sgld(0.05), dgsgld.networks.ring(3)
    trace = dgsgld.sample(algorithm, potential, mixing, init, jax.random.key(0), 10)
    loaded = traceio.load_trace(traceio.save_trace(tmp_path / "run.npz", trace))
    assert_same(loaded, trace)
    again = [dgsgld.sample(algorithm, potential, mixing, t.state, jax.random.key(1), 5)
             for t in (trace, loaded)]
    assert_same(again[0].positions, again[1].positions)


@pytest.mark.slow  # default run: the array state above; MLP templates: test_equinox_modules_need_a_template
def test_an_mlp_run_saves_loads_and_continues(tmp_path):
    # An eqx.nn.MLP passed directly as init: the trace's positions and state are MLPs.
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(1, "scalar", 3, 1, key=jax.random.key(0))
    init = jax.tree.map(lambda a: jnp.broadcast_to(a, (2, 3, *a.shape))
                        if eqx.is_array(a) else a, mlp)
    data = (jnp.ones((3, 4)), jnp.zeros((3, 4)))
    potential = dgsgld.Potential(lambda m, d: -0.5 * (m(d[0][None]) - d[1]) ** 2, None, data)
    algorithm, mixing = dgsgld.diging_sgld(0.01), dgsgld.networks.ring(3)
    trace = dgsgld.sample(algorithm, potential, mixing, init, jax.random.key(1), 4)
    path = traceio.save_trace(tmp_path / "mlp.npz", trace)
    with pytest.raises(ValueError, match=r"`trace.positions` holds a equinox.*pass like="):
        traceio.load_trace(path)
    loaded = traceio.load_trace(path, like=trace)
    assert_same(loaded, trace)
    again = [dgsgld.sample(algorithm, potential, mixing, t.state, jax.random.key(2), 3)
             for t in (trace, loaded)]
    assert_same(again[0].positions, again[1].positions)
