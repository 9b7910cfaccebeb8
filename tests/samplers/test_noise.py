"""``dgsgld.fast_normal``, the samplers' optional noise generator: its law against N(0, 1), and
samplers built with it against the exact laws of ``dgsgld.theory.exact``.

Tolerances. Every Monte Carlo comparison below is a z-score ``(estimate − truth) / s.e.``, the
standard error that of an average of ``n`` i.i.d. terms under the exact law (stated where the
test computes it). With ``m`` comparisons in a test we require ``|z| ≤ Φ⁻¹(1 − α/(2m))`` for a
family-wise false-alarm rate ``α = 1e-3`` (Bonferroni). The transform's own deterministic error
(at most 1e-5 per draw, and the tails cut at ``|z| < 5.3``, mass 1.2e-7) moves every moment
tested by less than 1e-4, below 1/40 of the smallest standard error here, so it needs no room
of its own; ``test_transform_is_the_normal_quantile_on_every_input`` bounds it exactly.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _moments import assert_exact_law, bonferroni, count_traces
from _problems import linear_regression, permuted_rings, ring
from scipy.special import ndtri
from scipy.stats import norm

import dgsgld
from dgsgld.runner.loop import chain_keys
from dgsgld.samplers import noise as noise
from dgsgld.samplers.base import step_keys

SAMPLERS = {  # every sampler class, built with the fast generator
    "diging": lambda **kw: dgsgld.DIGingSGLD(0.05, **kw),
    "de": lambda **kw: dgsgld.DESGLD(0.05, **kw),
    "extra": lambda **kw: dgsgld.EXTRASGLD(0.05, **kw),
    "sgld": lambda **kw: dgsgld.SGLD(0.02, **kw),
    "diging_sghmc": lambda **kw: dgsgld.DIGingSGHMC(0.05, 1.0, **kw),
    "de_sghmc": lambda **kw: dgsgld.DESGHMC(0.05, 1.0, **kw),
    "d_ula": lambda **kw: dgsgld.DULA(0.01, 0.5, **kw),
}


# ------------------------------------------------------------------ the normals themselves


@pytest.mark.slow  # fast twin: test_moments_and_tails_match_the_standard_normal (the law) and
# test_numbers_are_close_to_jax_random_normal_but_not_equal (within 2e-5 of JAX's quantile)
def test_transform_is_the_normal_quantile_on_every_input():
    """Exhaustive, no Monte Carlo: the top 23 bits ``k`` of a word map to ``Φ⁻¹((k + ½)/2²³)``
    within 5e-6 (measured 2.5e-6; jax.random.normal's own transform is within 2.2e-5 of its
    uniform's quantile), exactly antisymmetrically, monotonically, the same numbers with and
    without jit (XLA's fused multiply-add), and the low 9 bits are ignored."""
    k = np.arange(2**23, dtype=np.uint32)
    transform = jax.jit(noise.normals_from_bits)
    words = jnp.asarray(k << np.uint32(9))
    z = np.asarray(transform(words), np.float64)
    assert np.max(np.abs(z - ndtri((k + 0.5) / 2**23))) < 5e-6
    np.testing.assert_array_equal(z[::97], noise.normals_from_bits(words[::97]))  # op by op
    np.testing.assert_array_equal(z, -z[::-1])
    assert np.all(np.diff(z) >= 0)  # monotone: the law's CDF is within 1e-5 · φ of Φ
    low = np.asarray(transform(jnp.asarray((k << np.uint32(9)) | np.uint32(511))), np.float64)
    np.testing.assert_array_equal(z, low)


def test_moments_and_tails_match_the_standard_normal():
    """``n = 2²²`` draws of one key. Averages of ``g(z)`` with, under N(0, 1), mean ``E g`` and
    s.e. ``sqrt(Var g / n)``: ``z`` (Var 1), ``z²`` (Var 2), ``z³`` (skewness; Var 15), ``z⁴``
    (kurtosis; Var 96), ``1{|z| > c}`` (Var π(1 − π), ``π = 2Φ(−c)``; c = 1..4, the last about
    260 draws), and ``z_i z_{i+1}`` (lag-one correlation; Var 1: the products are uncorrelated)."""
    n = 2**22
    z = np.asarray(jax.jit(lambda k: dgsgld.fast_normal(k, (n,)))(jax.random.key(0)), np.float64)
    tails = [2 * norm.cdf(-c) for c in (1, 2, 3, 4)]
    stats = [(z.mean(), 0.0, 1.0), ((z**2).mean(), 1.0, 2.0), ((z**3).mean(), 0.0, 15.0),
             ((z**4).mean(), 3.0, 96.0), ((z[1:] * z[:-1]).mean(), 0.0, 1.0)]
    stats += [((np.abs(z) > c).mean(), p, p * (1 - p)) for c, p in zip((1, 2, 3, 4), tails)]
    scores = np.array([(est - truth) / np.sqrt(var / n) for est, truth, var in stats])
    assert np.max(np.abs(scores)) < bonferroni(len(scores)), scores


def test_numbers_are_close_to_jax_random_normal_but_not_equal():
    """Both invert Φ at the same 23-bit uniform (ours at the midpoint): close where the
    quantile is flat, apart in the far tails, never the same run."""
    ours = jax.jit(lambda k: dgsgld.fast_normal(k, (2**20,)))(jax.random.key(5))
    theirs = jax.random.normal(jax.random.key(5), (2**20,))
    diff, centre = np.abs(np.asarray(ours - theirs)), np.abs(np.asarray(theirs)) < 3
    assert diff[centre].max() < 2e-5
    assert not np.array_equal(ours, theirs)


def test_draws_are_deterministic_under_jit_vmap_and_batching():
    keys = jax.random.split(jax.random.key(3), 8)
    draw = jax.jit(lambda k: dgsgld.fast_normal(k, (5, 2)))
    batched = jax.jit(jax.vmap(draw))(keys)
    for i in (0, 7):
        np.testing.assert_array_equal(batched[i], draw(keys[i]))
    # The same numbers from the runner's key implementation (dgsgld.runner._random) as from JAX's.
    np.testing.assert_array_equal(jax.jit(jax.vmap(draw))(dgsgld.runner._random.fast_key(keys)),
                                  batched)
    assert jax.eval_shape(lambda k: dgsgld.fast_normal(k, (3,), jnp.bfloat16),
                          keys[0]).dtype == jnp.bfloat16
    with pytest.raises(ValueError, match="float dtype"):
        dgsgld.fast_normal(keys[0], (3,), jnp.int32)


# ------------------------------------------------------------------ the sampler option


def test_default_is_jax_random_normal_bit_for_bit(key):
    position = {"a": jnp.zeros((4, 3)), "b": jnp.zeros((4,))}
    alg = dgsgld.DIGingSGLD(0.05)
    assert alg.normal is jax.random.normal
    leaf_keys = jax.random.split(step_keys(key)[0], 2)
    w = alg.noise(key, position)
    np.testing.assert_array_equal(w["a"], jax.random.normal(leaf_keys[0], (4, 3)))
    np.testing.assert_array_equal(w["b"], jax.random.normal(leaf_keys[1], (4,)))


def test_every_sampler_draws_its_noise_from_the_generator(key):
    """For every sampler class, leaf ``i`` of ``w`` is ``fast_normal(split(noise_key, 2)[i],
    shape, dtype)``; a built sampler takes another generator through
    ``dataclasses.replace``; a non-function is refused when the sampler is built."""
    algs = {name: make(normal=dgsgld.fast_normal) for name, make in SAMPLERS.items()}
    x = jax.random.normal(jax.random.key(1), (5, 2))
    position = {"a": x, "b": x[:, :1] + 1.0}
    leaf_keys = jax.random.split(step_keys(key)[0], 2)

    @jax.jit
    def draws(key, position):
        noises = {name: alg.noise(key, position) for name, alg in algs.items()}
        default = SAMPLERS["diging"]().noise(key, position)
        return noises, default, dgsgld.fast_normal(leaf_keys[0], (5, 2)), \
            dgsgld.fast_normal(leaf_keys[1], (5, 1))

    noises, default, a, b = draws(key, position)
    for name, w in noises.items():
        np.testing.assert_array_equal(w["a"], a, err_msg=name)
        np.testing.assert_array_equal(w["b"], b, err_msg=name)
        assert dataclasses.replace(SAMPLERS[name](), normal=dgsgld.fast_normal) == algs[name]
        with pytest.raises(ValueError, match="normal"):
            SAMPLERS[name](normal="fast")
    assert not np.array_equal(default["a"], a)


# Default run: a decentralized sampler; centralized SGLD in the slow set.
@pytest.mark.parametrize("name", ["diging", pytest.param("sgld", marks=pytest.mark.slow)])
def test_step_draws_the_generators_noise(name, key):
    alg = SAMPLERS[name](normal=dgsgld.fast_normal)
    pb = linear_regression()
    x = jax.random.normal(jax.random.key(1), (5, 2) if alg.decentralized else (2,))
    mixing = jnp.asarray(ring(5)) if alg.decentralized else None

    @jax.jit
    def both(key, x):
        state = alg.init(x, pb.potential, key)
        drawn = alg.step(key, state, pb.potential, mixing).position
        return drawn, alg.step(key, state, pb.potential, mixing, alg.noise(key, x)).position

    drawn, passed = both(key, x)
    np.testing.assert_array_equal(drawn, passed)


@pytest.mark.slow  # fast twin:
# tests/samplers/test_samplers.py::test_compiled_once_for_new_step_size_and_init (retrace guard);
# same run: test_a_shape_dependent_generator_gives_the_same_run_in_either_layout
def test_same_key_same_run_and_a_new_step_size_reuses_the_compiled_run(key):
    ll, calls = count_traces()
    pb = linear_regression()
    pot = dgsgld.Potential(ll, None, pb.potential.data)
    init = jax.random.normal(key, (3, 5, 2))
    run = lambda eta, k: dgsgld.sample(  # noqa: E731
        dgsgld.DIGingSGLD(eta, normal=dgsgld.fast_normal), pot, permuted_rings(5, 3), init, k, 5)
    first = run(0.01, key).positions
    np.testing.assert_array_equal(run(0.01, key).positions, first)
    n = len(calls)
    run(0.02, jax.random.key(3))
    assert len(calls) - n <= 1  # only the pre-compile shape check (jax.eval_shape) traces


@pytest.mark.slow  # fast twin: test_draws_are_deterministic_under_jit_vmap_and_batching
# (fast_normal batched = alone, runner's key implementation) and
# test_a_shape_dependent_generator_gives_the_same_run_in_either_layout (8 chains vs 2, whole runs,
# bit for bit)
def test_same_noise_however_chains_are_batched(key):
    """The noise of step 0 for chains 6-7 as the runner draws it, 8 chains at once against
    those 2 alone (the runner keeps these in different layouts; whole runs would also compare
    the rounding of two layouts of the mixing product)."""
    alg = dgsgld.DIGingSGLD(0.05, normal=dgsgld.fast_normal)
    position = jnp.zeros((5, 2))

    def draws(num_chains, offset):
        keys = jax.vmap(jax.random.split)(chain_keys(key, num_chains, offset))[:, 1]
        keys = jax.vmap(jax.random.fold_in, (0, None))(keys, 0)
        return jax.vmap(alg.noise, (0, None), -1)(keys, position)

    np.testing.assert_array_equal(jax.jit(draws, static_argnums=(0, 1))(8, 0)[..., 6:],
                                  jax.jit(draws, static_argnums=(0, 1))(2, 6))


def _transposed_normal(key, shape, dtype=jnp.float32):
    """A generator of the user's own whose numbers depend on the shape asked for (normals
    drawn transposed): a flat draw and a shaped one differ."""
    return jax.random.normal(key, tuple(shape)[::-1], dtype).T


@pytest.mark.slow  # fast twin: test_every_sampler_draws_its_noise_from_the_generator
def test_a_shape_dependent_generator_gives_the_same_run_in_either_layout(key):
    """The runner keeps the chain axis last for 8 chains of (5, 2) leaves and first for 2, and
    passes the noise flat to chains-first steps; every leaf is drawn flat whatever the layout,
    so chains 0-1 of the 8-chain run equal the 2-chain run even with a generator whose
    numbers depend on the shape. Zero gradients and the identity network make every step
    ``x += √(2η) w`` elementwise: any difference is the noise, compared bit for bit."""
    zero = dgsgld.Potential(lambda x, d: 0.0 * jnp.sum(x) * d, None, jnp.ones((5, 1)))
    alg = dgsgld.DIGingSGLD(0.05, normal=_transposed_normal)
    init = jnp.zeros((8, 5, 2))

    def run(num_chains):
        return dgsgld.sample(alg, zero, np.eye(5, dtype=np.float32), init[:num_chains], key, 4,
                             allow_disconnected=True).positions

    eight, two = run(8), run(2)
    assert float(jnp.std(two[:, -1])) > 0.1                  # noise was added
    np.testing.assert_array_equal(eight[:2], two)
    # The generator itself differs between a flat and a shaped draw of one leaf.
    k = jax.random.key(0)
    assert not np.array_equal(_transposed_normal(k, (10,)).reshape(5, 2),
                              _transposed_normal(k, (5, 2)))


# ------------------------------------------------------------------ moments of whole runs


def _check_exact_law(alg, num_chains, num_steps, check_at, thin=1):
    """Chains of ``alg`` (float32, fast noise) on a heterogeneous 4-agent regression over a
    time-varying ring against the exact law (:func:`_moments.assert_exact_law`)."""
    pb = linear_regression(num_agents=4, local_size=4, dim=2, heterogeneous=True)
    schedule = permuted_rings(4, 3, seed=4) if alg.decentralized else None
    assert_exact_law(alg, pb, schedule, num_chains, num_steps, check_at, thin)


def test_diging_sgld_with_fast_noise_matches_the_exact_law():
    """20 000 chains: a noise variance off by 3% fails (covariance s.e. ≈ 1%)."""
    _check_exact_law(dgsgld.DIGingSGLD(0.08, normal=dgsgld.fast_normal), 20_000, 12, (1, 4, 12))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_every_sampler_with_fast_noise_matches_the_exact_law(name):
    """200 000 chains, 60 iterations: a noise variance off by 1% fails (covariance s.e. ≈
    0.3%)."""
    _check_exact_law(SAMPLERS[name](normal=dgsgld.fast_normal), 200_000, 60, (10, 30, 60),
                     thin=10)


@pytest.mark.slow  # fast twin:
# tests/runner/test_reliability_checkpoint.py::test_resume_with_other_settings_is_refused (the
# fingerprint covers the algorithm's fields)
@pytest.mark.reliability
def test_resuming_a_checkpoint_with_another_noise_generator_is_refused(tmp_path):
    # The generator is part of the sampler, so the checkpoint's fingerprint covers it: a run
    # started with jax.random.normal cannot be continued with other numbers.
    from dgsgld.runner.checkpoint import CheckpointError

    pb = linear_regression(num_agents=4, dim=2)
    args = (pb.potential, dgsgld.networks.ring(4), jnp.zeros((2, 4, 2)), jax.random.key(0))
    dgsgld.sample_chunked(dgsgld.DIGingSGLD(0.05), *args, 10, chunk_size=5, path=tmp_path)
    with pytest.raises(CheckpointError, match=r"`algorithm.normal` differs from the checkpoint"):
        dgsgld.sample_chunked(dgsgld.DIGingSGLD(0.05, normal=dgsgld.fast_normal), *args, 20,
                              chunk_size=5, path=tmp_path)


@pytest.mark.parametrize("make", [dgsgld.DIGingSGLD, dgsgld.DESGLD, dgsgld.EXTRASGLD,
                                  dgsgld.SGLD, dgsgld.DESGHMC, dgsgld.DIGingSGHMC,
                                  dgsgld.DULA, dgsgld.PushDIGingSGLD, dgsgld.PushSumSGLD])
def test_every_constructor_takes_the_noise_generator(make):
    # One constructor per sampler, its class, and `normal` is one of its keyword options.
    fast, default = make(0.01, normal=dgsgld.fast_normal), make(0.01)
    assert fast.normal is dgsgld.fast_normal and default.normal is jax.random.normal
    assert type(fast) is type(default)
    with pytest.raises(ValueError, match="`normal` must be a function"):
        make(0.01, normal=1.0)
