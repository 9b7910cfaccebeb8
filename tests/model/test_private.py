"""Agent-private parameters: never mixed, never sent; exact laws of every sampler with them.

The model is ``tests/_problems.hierarchical_gaussian``: agent-private intercepts ``a_i`` under a
shared hyper-mean ``μ`` and a shared slope ``b``, all Gaussian, so that every sampler is a
linear Gaussian recursion (``dgsgld.theory``, private coordinates never mixed) and each iterate
is exactly Gaussian. Monte Carlo tolerances as in ``tests/_moments.py``: ``C`` independent
chains, the z-scores of every agent's sample mean and covariance entries within the Bonferroni
bound for a family-wise false alarm rate of 1e-3.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _moments import bonferroni, z_scores
from _problems import (
    hierarchical_gaussian,
    hierarchical_params,
    hierarchical_vector,
    linear_regression,
    ring,
)

import dgsgld
from dgsgld.networks import directed
from dgsgld.theory import exact

N = 4
INIT_MEAN = np.array([0.5, -0.5, 1.0])      # (b, μ, a_i)
INIT_COV = np.diag([0.3, 0.4, 0.5])

#: Step sizes: at most a few percent of the stable range of each sampler on this model.
STEPS = {
    dgsgld.DIGingSGLD: 0.01, dgsgld.DESGLD: 0.01, dgsgld.EXTRASGLD: 0.01,
    dgsgld.DIGingSGHMC: 0.05, dgsgld.DESGHMC: 0.05, dgsgld.DULA: 0.003, dgsgld.SGLD: 0.002,
    dgsgld.PushDIGingSGLD: 0.01, dgsgld.PushSumSGLD: 0.01,
}
FAST = (dgsgld.DIGingSGLD, dgsgld.DESGHMC)


def _network(cls):
    if getattr(cls, "network_kind", None) == "column_stochastic":
        # Directed, with push-sum weights away from 1: private masses are rescaled by v⁺/v.
        return np.asarray(directed.one_way_link_failures(np.ones((N, N)) - np.eye(N), 0.5,
                                                         period=3, seed=4).matrices)
    return None if not cls.decentralized else ring(N)


def _initial(cls, pb, num_chains):
    """Chains from ``N(INIT_MEAN, INIT_COV)`` i.i.d. over chains and agents (the joint vector
    ``(b, μ, a_1..a_N)`` from ``N(0, I/2)`` for centralized SGLD), and the exact law's
    initial moments."""
    rng = np.random.default_rng(1)
    if cls.decentralized:
        z = INIT_MEAN + rng.normal(size=(num_chains, N, 3)) @ np.sqrt(INIT_COV)
        return hierarchical_params(z.astype(np.float32)), INIT_MEAN, INIT_COV
    dim = pb.quadratic.joint_dim
    z = np.sqrt(0.5) * rng.normal(size=(num_chains, dim))
    params = {"shared": jnp.asarray(z[:, :2], jnp.float32),
              "intercept": jnp.asarray(z[:, 2:], jnp.float32)}
    return params, np.zeros(dim), 0.5 * np.eye(dim)


def _vector(cls, params):
    if cls.decentralized:
        return hierarchical_vector(params)
    return np.concatenate([np.asarray(params["shared"]), np.asarray(params["intercept"])],
                          -1).astype(np.float64)


def _check_exact_law(cls, num_chains=3000, num_steps=120, algorithm=None):
    pb = hierarchical_gaussian(num_agents=N)
    algorithm = cls(STEPS[cls]) if algorithm is None else algorithm
    W = _network(cls)
    init, m0, s0 = _initial(cls, pb, num_chains)
    trace = dgsgld.sample(algorithm, pb.potential, W, init, jax.random.key(2), num_steps,
                          output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
    x = _vector(cls, trace.state.position)
    with jax.enable_x64(True):
        law = exact.exact_moments(algorithm, pb.quadratic, W, m0, s0, num_steps)
        mean, cov = np.asarray(law.mean[-1]), np.asarray(law.cov[-1])
    z = np.concatenate([np.ravel(part) for part in z_scores(x, mean, cov)])
    assert np.max(np.abs(z)) < bonferroni(z.size), (np.max(np.abs(z)), bonferroni(z.size))


@pytest.mark.parametrize("cls", FAST, ids=lambda c: c.name)
def test_exact_law_with_private_leaves(cls):
    _check_exact_law(cls)


@pytest.mark.slow  # fast twins: test_exact_law_with_private_leaves (DIGing-SGLD, DE-SGHMC)
@pytest.mark.parametrize("cls", [c for c in dgsgld.samplers.ALL if c not in FAST],
                         ids=lambda c: c.name)
def test_exact_law_with_private_leaves_every_sampler(cls):
    _check_exact_law(cls)


@pytest.mark.slow  # fast twins: test_exact_law_with_private_leaves, test_private_tracking.py
def test_exact_law_with_private_leaves_and_tracking_noise():
    """Private gradient tracking with private leaves: the trackers' public copies carry noise on
    the shared coordinates only (a private leaf's tracker is its own gradient, never sent), as
    the recursion's ``σ (𝒲 − I)`` with ``𝒲 = W ⊗ D_s + I ⊗ D_p`` says. Not vacuous: at the
    last step the law without the noise is more than twice the Bonferroni bound away from it
    in standard errors of 3000 chains."""
    algorithm = dgsgld.DIGingSGLD(STEPS[dgsgld.DIGingSGLD], tracking_noise=20.0)
    _check_exact_law(dgsgld.DIGingSGLD, algorithm=algorithm)
    pb = hierarchical_gaussian(num_agents=N)
    with jax.enable_x64(True):
        laws = [exact.exact_moments(a, pb.quadratic, ring(N), INIT_MEAN, INIT_COV, 120)
                for a in (algorithm, dgsgld.DIGingSGLD(STEPS[dgsgld.DIGingSGLD]))]
    cov, plain = np.asarray(laws[0].cov[-1]), np.asarray(laws[1].cov[-1])
    var = np.einsum("naa->na", cov)
    se = np.sqrt((var[..., :, None] * var[..., None, :] + cov**2) / 2999)
    assert np.max(np.abs(plain - cov) / se) > 2 * bonferroni(4 * 3 * 5)


def test_stationary_law_tends_to_the_joint_posterior():
    """The exact stationary law of DIGing-SGLD with private intercepts: every agent's
    marginal of ``(b, μ, a_i)`` is the joint posterior's up to O(η). The gap halves with η
    (first order), and at η = 1e-3 it is below 2% of the posterior's scale."""
    pb = hierarchical_gaussian(num_agents=N)
    mean, cov = pb.quadratic.target()
    E = pb.quadratic.embedding()                                        # (N, 3, D)
    agent_mean, agent_cov = E @ mean, np.einsum("iad,de,ibe->iab", E, cov, E)
    gaps = []
    for eta in (2e-3, 1e-3):
        st = exact.stationary_moments(dgsgld.DIGingSGLD(eta), pb.quadratic, ring(N))
        sd = np.sqrt(np.diagonal(agent_cov, axis1=1, axis2=2))
        gaps.append(max(np.max(np.abs(st.mean[0] - agent_mean) / sd),
                        np.max(np.abs(st.cov[0] - agent_cov)) / np.max(agent_cov)))
    assert gaps[1] < 0.02, gaps
    assert 0.4 < gaps[1] / gaps[0] < 0.6, gaps


def _one_step(cls, pb, W, eta):
    """One step from a random state with a given noise: ``(start, noise, new state)``."""
    z = np.random.default_rng(0).normal(size=(N, 3)).astype(np.float32)
    start = hierarchical_params(z)
    algorithm = cls(eta)
    state = algorithm.init(start, pb.potential, jax.random.key(0))
    noise = algorithm.noise(jax.random.key(1), start)
    return start, noise, algorithm.step(jax.random.key(1), state, pb.potential, W, noise)


@pytest.mark.parametrize("cls", [dgsgld.DIGingSGLD, dgsgld.DESGLD, dgsgld.EXTRASGLD,
                                 dgsgld.DULA, dgsgld.PushDIGingSGLD, dgsgld.PushSumSGLD],
                         ids=lambda c: c.name)
def test_private_leaf_takes_its_own_langevin_step(cls):
    """Whatever the network, agent i's private leaf moves as ``a − h ∇_a f_i + √(2h) w``:
    Langevin at step ``h = η`` (``Nη`` for D-ULA, whose local step is at ``Nα``) with its own
    gradient; on a doubly stochastic matrix the push-sum weights stay 1. The shared leaves do
    mix (a swap of agents moves them). float32: a few ulp of |a| ≈ 1."""
    pb = hierarchical_gaussian(num_agents=N)
    W = np.asarray(np.roll(np.eye(N), 1, 1) * 0.5 + np.eye(N) * 0.5, np.float32)
    eta = 0.01
    start, noise, new = _one_step(cls, pb, W, eta)
    h = N * eta if cls is dgsgld.DULA else eta
    grad = pb.potential.full_grad(start)["intercept"]
    expect = start["intercept"] - h * grad + np.sqrt(2 * h) * noise["intercept"]
    np.testing.assert_allclose(new.position["intercept"], expect, rtol=0, atol=1e-6)
    if hasattr(new, "tracker"):   # DIGing tracks only the shared gradient
        np.testing.assert_array_equal(new.tracker["intercept"], new.grad["intercept"])
    # The shared leaves are mixed: agent i's slope now depends on agent i+1's.
    local = start["shared"] - h * pb.potential.full_grad(start)["shared"]
    assert np.max(np.abs(np.asarray(new.position["shared"]) - local)) > 0.01


def test_without_private_leaves_every_sampler_runs_the_same_program():
    """``private`` naming no leaf (an all-False mask) resolves to no mask: every sampler's
    ``init`` and ``step`` trace to the same program as without ``private`` (equal jaxprs), and
    a run draws the same numbers bit for bit."""
    pb = linear_regression(num_agents=N, local_size=4, dim=2, batch_size=2)
    ll, lp = pb.potential.log_likelihood, pb.potential.log_prior
    data = pb.potential.data
    plain = dgsgld.Potential(ll, lp, data, 2)
    masked = dgsgld.Potential(ll, lp, data, 2, private=False)
    assert masked.private_mask(jnp.zeros((N, 2))) is None
    key = jax.random.key(4)
    for cls in dgsgld.samplers.ALL:
        alg = cls(0.01)
        W = jnp.asarray(ring(N), jnp.float32) if cls.decentralized else None
        x = jnp.ones((N, 2) if cls.decentralized else (2,))
        programs = []
        for pot in (plain, masked):
            state = alg.init(x, pot, key)
            programs.append((
                str(jax.make_jaxpr(lambda x, pot=pot, alg=alg: alg.init(x, pot, key))(x)),
                str(jax.make_jaxpr(lambda s, pot=pot, alg=alg, W=W: alg.step(key, s, pot, W))(
                    state))))
        assert programs[0] == programs[1], cls.name
    init = jax.random.normal(jax.random.key(3), (2, N, 2))
    a = dgsgld.sample(dgsgld.DIGingSGLD(0.01), plain, ring(N), init, key, 5)
    b = dgsgld.sample(dgsgld.DIGingSGLD(0.01), masked, ring(N), init, key, 5)
    np.testing.assert_array_equal(a.positions, b.positions)


def test_channel_counts_only_the_shared_leaves():
    """A dense float32 message of DIGing-SGLD's ``x`` and ``y`` carries the 2 shared numbers of
    an agent, not its private intercept: 2 messages x 2 neighbours x 2 x 4 bytes per step, and
    the private leaf is mixed by nobody (it equals the run without any channel)."""
    pb = hierarchical_gaussian(num_agents=N)
    init, _, _ = _initial(dgsgld.DIGingSGLD, pb, 2)
    channel = dgsgld.communication.Channel()
    run = dgsgld.sample(dgsgld.DIGingSGLD(0.01), pb.potential, ring(N), init, jax.random.key(0),
                        10, channel=channel)
    sent = channel.bytes_sent(run.state, pb.potential)
    np.testing.assert_array_equal(sent, 10 * 2 * 2 * 2 * 4)
    plain = dgsgld.sample(dgsgld.DIGingSGLD(0.01), pb.potential, ring(N), init,
                          jax.random.key(0), 10)
    np.testing.assert_array_equal(run.positions["intercept"], plain.positions["intercept"])


@pytest.mark.slow  # fast twin: test_chunked_checkpointed_run_with_private_leaves_equals_one_run
def test_resume_from_a_checkpointed_state_continues_the_run():
    pb = hierarchical_gaussian(num_agents=N, batch_size=2)
    init, _, _ = _initial(dgsgld.DIGingSGHMC, pb, 2)
    alg = dgsgld.DIGingSGHMC(0.05)
    whole = dgsgld.sample(alg, pb.potential, ring(N), init, jax.random.key(0), 20)
    half = dgsgld.sample(alg, pb.potential, ring(N), init, jax.random.key(0), 10)
    rest = dgsgld.sample(alg, pb.potential, ring(N), half.state, jax.random.key(0), 10)
    for leaf in ("intercept", "shared"):
        np.testing.assert_array_equal(whole.positions[leaf][:, 10:], rest.positions[leaf])


def test_pooled_value_and_gradient_are_the_joint_posteriors():
    """``value`` and ``pooled_grad`` at a joint point ``(φ, θ_1..θ_N)`` are the joint quadratic
    ``½ zᵀAz − bᵀz`` (up to a constant) and ``Az − b``; float32 rounding."""
    pb = hierarchical_gaussian(num_agents=N)
    A, b = pb.quadratic.joint(np)
    rng = np.random.default_rng(5)
    z = [rng.normal(size=A.shape[0]) for _ in range(2)]
    as_params = [{"shared": jnp.asarray(v[:2], jnp.float32),
                  "intercept": jnp.asarray(v[2:], jnp.float32)} for v in z]
    grad = pb.potential.pooled_grad(as_params[0], jax.random.key(0))
    got = np.concatenate([np.asarray(grad["shared"]), np.asarray(grad["intercept"])])
    np.testing.assert_allclose(got, A @ z[0] - b, rtol=1e-4, atol=1e-3)
    quad = [0.5 * v @ A @ v - b @ v for v in z]
    diff = float(pb.potential.value(as_params[1]) - pb.potential.value(as_params[0]))
    np.testing.assert_allclose(diff, quad[1] - quad[0], rtol=1e-4, atol=1e-2)


def test_bad_private_declarations_are_refused_with_the_argument_named():
    pb = hierarchical_gaussian(num_agents=N)
    pot = dgsgld.Potential(pb.potential.log_likelihood, None, pb.potential.data,
                           private=("offset",))
    with pytest.raises(ValueError, match=r"`private` names \['offset'\]"):
        pot.private_mask({"intercept": jnp.zeros(N), "shared": jnp.zeros((N, 2))})
    with pytest.raises(ValueError, match="`private` must be None"):
        dgsgld.Potential(pb.potential.log_likelihood, None, pb.potential.data, private=3)
    with pytest.raises(ValueError, match="private leaves"):   # SGLD: (N, ...) private leaves
        pb.potential.pooled_grad({"intercept": jnp.zeros(()), "shared": jnp.zeros(2)},
                                 jax.random.key(0))


@pytest.mark.slow  # fast twin:
# tests/model/test_ppl.py::test_numpyro_potential_equals_the_model_written_by_hand
def test_numpyro_agent_plate_gives_private_sites_with_the_hand_written_potential():
    """A numpyro model of the pooled data with intercepts in a plate over the agents: the
    intercepts become private parameters, and the potential's gradients equal those of the
    hand-written hierarchical potential (``hierarchical_gaussian``; the model's priors on
    ``b`` and ``μ`` are its N(0, 2²), intercepts N(μ, 1), noise 0.5); ``constrain`` maps a
    positive private site (a per-agent noise scale) back to its support per agent."""
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    pb = hierarchical_gaussian(num_agents=N)
    x, y = (np.asarray(leaf) for leaf in pb.potential.data)

    def model(x, y):
        b = numpyro.sample("b", dist.Normal(0.0, 2.0))
        mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
        with numpyro.plate("agents", x.shape[0], dim=-2):
            a = numpyro.sample("a", dist.Normal(mu, 1.0))
            with numpyro.plate("data", x.shape[1], dim=-1):
                numpyro.sample("y", dist.Normal(a + b * x, 0.5), obs=y)

    pot = dgsgld.Potential.from_numpyro(model, {"x": x, "y": y}, agent_plate="agents")
    assert dgsgld.model.ppl.numpyro_model(pot).private == ("a",)
    z = np.random.default_rng(2).normal(size=(N, 3)).astype(np.float32)
    params = {"a": jnp.asarray(z[:, 2]), "b": jnp.asarray(z[:, 0]), "mu": jnp.asarray(z[:, 1])}
    g = pot.full_grad(params)
    want = pb.potential.full_grad(hierarchical_params(z))
    np.testing.assert_allclose(g["a"], want["intercept"], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.stack([g["b"], g["mu"]], -1), want["shared"], rtol=1e-5,
                               atol=1e-4)
    # A run takes the private site with its agent axis; constrain maps a positive one back.
    init = {k: jnp.broadcast_to(v, (2, *v.shape)) for k, v in params.items()}
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.005), pot, ring(N), init, jax.random.key(0), 3)
    assert trace.positions["a"].shape == (2, 4, N)   # the start and 3 steps

    def scales(x, y):
        s = numpyro.sample("s", dist.HalfNormal(1.0))
        with numpyro.plate("agents", x.shape[0], dim=-2):
            sigma = numpyro.sample("sigma", dist.LogNormal(0.0, s))
            with numpyro.plate("data", x.shape[1], dim=-1):
                numpyro.sample("y", dist.Normal(0.0, sigma), obs=y)

    pot2 = dgsgld.Potential.from_numpyro(scales, {"x": x, "y": y}, agent_plate="agents")
    draws = {"s": jnp.zeros((2, N)),
             "sigma": jnp.log(jnp.arange(1.0, N + 1))[None] * jnp.ones((2, 1))}
    out = dgsgld.model.constrain(pot2, draws)
    np.testing.assert_allclose(out["sigma"], np.broadcast_to(np.arange(1.0, N + 1), (2, N)),
                               rtol=1e-6)
    # The agent prior of the private site: log LogNormal(σ; 0, s) + log-Jacobian log σ.
    info = dgsgld.model.ppl.numpyro_model(pot2)
    u = {"s": jnp.asarray(0.3), "sigma": jnp.asarray(0.7)}
    want_agent = float(dist.LogNormal(0.0, info.constrain(u)["s"]).log_prob(jnp.exp(0.7)) + 0.7)
    np.testing.assert_allclose(float(info.log_agent_prior(u)), want_agent, rtol=1e-5)
    with pytest.raises(ValueError, match="`agent_plate` = 'groups' is no plate"):
        dgsgld.Potential.from_numpyro(model, {"x": x, "y": y}, agent_plate="groups")


PLACEMENTS = textwrap.dedent(
    """
    import json, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp, numpy as np
    import dgsgld
    from dgsgld.networks import sparse
    sys.path.insert(0, "tests")
    from _problems import hierarchical_gaussian, hierarchical_params, permuted_rings, ring

    key = jax.random.key(3)
    pb = hierarchical_gaussian(num_agents=8, batch_size=2, dtype=np.float64)
    init = hierarchical_params(np.random.default_rng(0).normal(size=(4, 8, 3)))
    out = {"devices": jax.device_count()}
    topk = dgsgld.communication.Channel(dgsgld.communication.top_k(0.5), error_feedback=True)
    cases = (
            ("diging", dgsgld.DIGingSGLD(0.02), permuted_rings(8, 3), None),
            ("sghmc_saga", dgsgld.DIGingSGHMC(0.05, 1.0, dgsgld.gradients.saga()),
             permuted_rings(8, 3), None),
            ("extra_exchange", dgsgld.EXTRASGLD(0.02), sparse.from_dense(ring(8)), None),
            ("diging_topk_exchange", dgsgld.DIGingSGLD(0.02), sparse.from_dense(ring(8)), topk))
    for name, alg, mix, channel in cases[:None if sys.argv[1] == "full" else 1]:
        ref = dgsgld.sample(alg, pb.potential, mix, init, key, 15, channel=channel)
        for where, placement in (("chains", dgsgld.Chains()), ("agents", dgsgld.Agents())):
            run = dgsgld.sample(alg, pb.potential, mix, init, key, 15, placement=placement,
                                channel=channel)
            out[name + "_" + where] = max(
                float(jnp.abs(run.positions[k] - ref.positions[k]).max()) / max(
                    1.0, float(jnp.abs(ref.positions[k]).max())) for k in ("intercept", "shared"))
    print(json.dumps(out))
    """
)


@pytest.mark.slow  # fast twin:
# tests/parallel/test_sharding.py::test_private_leaves_sharded_runs_equal_single_device_run
@pytest.mark.parametrize("scope", ["fast", "full"])
def test_placements_with_private_leaves_equal_the_unplaced_run(scope):
    """Chains over 4 devices, and agents over 4 devices (a device holds its agents' private
    leaves; dense all-gather, and a sparse ring's neighbour exchange, with top-k payloads and
    error feedback) give the unplaced run's draws. float64: agent blocks compute ``W @ x`` as
    row blocks and compile gradients separately, rounding apart by ~1e-16 per step relative;
    over 15 steps of a contracting map we allow 1e-12 relative (one differing draw would move
    a position by ~√(2η) = 0.2). The fast run: DIGing-SGLD, dense mixing only."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", PLACEMENTS, scope], capture_output=True, text=True,
                          check=False, env=env, cwd=Path(__file__).resolve().parents[2],
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out.pop("devices") == 4
    assert max(out.values()) < 1e-12, out


def test_network_average_keeps_private_leaves_per_agent():
    pb = hierarchical_gaussian(num_agents=N)
    z = np.random.default_rng(0).normal(size=(2, 5, N, 3))
    avg = dgsgld.evaluate.network_average(hierarchical_params(z), potential=pb.potential)
    np.testing.assert_allclose(avg["shared"], z[..., :2].mean(2), atol=1e-6)   # float32
    np.testing.assert_array_equal(avg["intercept"], np.asarray(hierarchical_params(z)["intercept"]))


def test_preconditioned_private_leaves_follow_the_exact_law():
    """``preconditioner=M`` acts on each agent's flattened ``(a_i, b, μ)`` (leaf order:
    ``intercept``, then ``shared``); a block-diagonal ``M`` (no coupling of private and shared
    coordinates, the joint diffusion's preconditioner ``diag(M_pp, M_ss / N)``) keeps the
    target. The exact law on the quadratic in that coordinate order, Monte Carlo as above."""
    from dgsgld.samplers import DensePreconditioner

    pb = hierarchical_gaussian(num_agents=N)
    order = [2, 0, 1]                                            # (a_i, b, μ)
    q = exact.Quadratic(pb.quadratic.hessians[:, order][:, :, order],
                        pb.quadratic.shifts[:, order], (True, False, False))
    M = np.array([[0.6, 0.0, 0.0], [0.0, 1.5, 0.4], [0.0, 0.4, 0.9]])
    alg = dgsgld.DIGingSGLD(0.01, preconditioner=DensePreconditioner(M))
    num_chains, num_steps = 3000, 100
    init, _, _ = _initial(dgsgld.DIGingSGLD, pb, num_chains)
    trace = dgsgld.sample(alg, pb.potential, ring(N), init, jax.random.key(5), num_steps,
                          output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
    x = hierarchical_vector(trace.state.position)[..., order]
    with jax.enable_x64(True):
        law = exact.exact_moments(alg, q, ring(N), INIT_MEAN[order],
                                  INIT_COV[np.ix_(order, order)], num_steps)
    z = np.concatenate([np.ravel(p) for p in z_scores(x, np.asarray(law.mean[-1]),
                                                      np.asarray(law.cov[-1]))])
    assert np.max(np.abs(z)) < bonferroni(z.size), (np.max(np.abs(z)), bonferroni(z.size))


@pytest.mark.slow  # fast twin: test_placements_with_private_leaves_equal_the_unplaced_run[fast]
def test_agents_across_two_processes_keep_their_private_leaves(tmp_path):
    """Two processes (``dgsgld launch``), each holding its 4 agents' data and private
    intercepts (``parallel.agent_potential`` keeps ``private`` and ``log_agent_prior``): the
    single-process draws, float64, up to the rounding of row-block products (1e-12)."""
    script = Path(__file__).resolve().parents[1] / "_private_processes.py"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    one = subprocess.run([sys.executable, str(script), "--out", str(tmp_path / "one.npz")],
                         env=env, cwd=root, capture_output=True, text=True, timeout=300,
                         check=False)
    assert one.returncode == 0, one.stderr[-3000:]
    two = subprocess.run([sys.executable, "-m", "dgsgld", "launch", "--processes", "2", "--",
                          sys.executable, str(script), "--out", str(tmp_path / "two.npz")],
                         env=env, cwd=root, capture_output=True, text=True, timeout=600,
                         check=False)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = np.load(tmp_path / "one.npz"), np.load(tmp_path / "two.npz")
    for leaf in ("intercept", "shared"):
        assert np.max(np.abs(a[leaf] - b[leaf])) < 1e-12 * max(1.0, np.max(np.abs(a[leaf])))


@pytest.mark.slow  # fast twin: test_exact_law_with_private_leaves (no channel)
def test_exact_law_with_private_coordinates_under_stragglers_and_refusals():
    """Stragglers (``activity``) enter the exact law as a mixture over active sets whatever
    the private coordinates: Monte Carlo agrees; random-k messages are refused."""
    pb = hierarchical_gaussian(num_agents=N)
    channel = dgsgld.communication.Channel(activity=0.6)
    alg = dgsgld.DIGingSGLD(0.01)
    num_chains, num_steps = 3000, 60
    init, m0, s0 = _initial(dgsgld.DIGingSGLD, pb, num_chains)
    trace = dgsgld.sample(alg, pb.potential, ring(N), init, jax.random.key(7), num_steps,
                          channel=channel,
                          output=dgsgld.Output(positions=False, trace_fn=lambda s: ()))
    x = hierarchical_vector(trace.state.position)
    with jax.enable_x64(True):
        law = exact.exact_moments(alg, pb.quadratic, ring(N), m0, s0, num_steps,
                                  channel=channel)
    z = np.concatenate([np.ravel(p) for p in z_scores(x, np.asarray(law.mean[-1]),
                                                      np.asarray(law.cov[-1]))])
    assert np.max(np.abs(z)) < bonferroni(z.size), (np.max(np.abs(z)), bonferroni(z.size))
    with pytest.raises(ValueError, match="random-k messages with private coordinates"):
        exact.exact_moments(alg, pb.quadratic, ring(N), m0, s0, 3,
                            channel=dgsgld.communication.Channel(
                                dgsgld.communication.random_k(0.5)))


@pytest.mark.parametrize("estimator", [pytest.param("svrg", marks=pytest.mark.slow), "saga"])
def test_variance_reduced_estimators_with_private_leaves_keep_the_tracking_invariants(estimator):
    """Mini-batches of 2 with SVRG (anchor every 5 steps) or SAGA: after 30 steps of
    DIGing-SGLD the tracker's shared leaves still sum to the gradients' sum over agents
    (eq. 3.5; float32 rounding of 30 steps, 1e-4 of the gradients' scale) and its private
    leaves are each agent's own gradient exactly."""
    pb = hierarchical_gaussian(num_agents=N, batch_size=2)
    est = (dgsgld.gradients.svrg(5) if estimator == "svrg" else dgsgld.gradients.saga())
    init, _, _ = _initial(dgsgld.DIGingSGLD, pb, 3)
    trace = dgsgld.sample(dgsgld.DIGingSGLD(0.01, est), pb.potential, ring(N), init,
                          jax.random.key(0), 30, output=dgsgld.Output(positions=False))
    st = trace.state
    np.testing.assert_array_equal(st.tracker["intercept"], st.grad["intercept"])
    gap = np.abs(np.sum(np.asarray(st.tracker["shared"]) - np.asarray(st.grad["shared"]), 1))
    assert np.max(gap) <= 1e-4 * np.max(np.abs(np.asarray(st.grad["shared"]))), gap
    assert np.isfinite(np.asarray(st.position["shared"])).all()


@pytest.mark.slow  # fast twin: tests/runner/test_checkpoint.py::test_chunked_equals_single_call
def test_chunked_checkpointed_run_with_private_leaves_equals_one_run(tmp_path):
    """``sample_chunked`` writing checkpoints (the potential's fingerprint holds its private
    declaration) gives the draws of one ``sample`` call; the same declaration as a mask gives
    the same draws as by name."""
    pb = hierarchical_gaussian(num_agents=N, batch_size=2)
    init, _, _ = _initial(dgsgld.DIGingSGLD, pb, 2)
    alg = dgsgld.DIGingSGLD(0.01)
    one = dgsgld.sample(alg, pb.potential, ring(N), init, jax.random.key(0), 20)
    chunked = dgsgld.sample_chunked(alg, pb.potential, ring(N), init, jax.random.key(0), 20,
                                    chunk_size=5, path=tmp_path / "ck")
    by_mask = dgsgld.Potential(pb.potential.log_likelihood, pb.potential.log_prior,
                               pb.potential.data, 2, private={"intercept": True, "shared": False},
                               log_agent_prior=pb.potential.log_agent_prior)
    masked = dgsgld.sample(alg, by_mask, ring(N), init, jax.random.key(0), 20)
    for leaf in ("intercept", "shared"):
        np.testing.assert_array_equal(chunked.positions[leaf], one.positions[leaf])
        np.testing.assert_array_equal(masked.positions[leaf], one.positions[leaf])
