"""Sharded runs equal the single-device run: chains over a mesh, agents with shard_map.

Four CPU devices exist only when XLA is told so before JAX starts, hence one subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` that runs every check and prints JSON.

Tolerances: both runs make the same draws, so they differ only by the rounding of matrix
products over a different number of chains or rows per device. In float64 that is ~1e-16
relative per operation, amplified over 20 contracting steps to well below 1e-10; a single
differing draw would move positions by ~sqrt(2 η) = 0.3.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp, numpy as np
    import dgsgld
    from dgsgld.parallel import devices as sharding
    sys.path.insert(0, "tests")
    from _problems import linear_regression, permuted_rings, ring

    full = sys.argv[1] == "full"
    out = {"devices": jax.device_count()}
    key = jax.random.key(3)
    for batch in ((None, 2) if full else (2,)):
        prob = linear_regression(num_agents=8, dim=2, batch_size=batch, dtype=np.float64)
        mixing = permuted_rings(8, 3)
        init = jnp.asarray(np.random.default_rng(0).normal(size=(8, 8, 2)))
        alg = dgsgld.DIGingSGLD(0.05)
        ref = dgsgld.sample(alg, prob.potential, mixing, init, key, 20)
        chains = dgsgld.sample(alg, prob.potential, mixing, init, key, 20,
                               placement=dgsgld.Chains())
        agents = dgsgld.sample(alg, prob.potential, mixing, init, key, 20,
                               placement=dgsgld.Agents())
        pos, state = agents.positions, agents.state
        res = out[str(batch)] = {}
        if batch is not None and full:
            # D-ULA with SAGA: the estimator's table and the network size on agent blocks.
            dula = dgsgld.DULA(0.05, 0.5, dgsgld.gradients.saga())
            res["agents_dula_saga_diff"] = float(jnp.abs(
                dgsgld.sample(dula, prob.potential, mixing, init, key, 20,
                              placement=dgsgld.Agents())
                .positions - dgsgld.sample(dula, prob.potential, mixing, init, key, 20)
                .positions).max())
        if full:
            # Any decentralized sampler's own step runs sharded: DE-SGLD, and a resumed run.
            de = dgsgld.DESGLD(0.05)
            ref_de = dgsgld.sample(de, prob.potential, mixing, init, key, 20)
            de_agents = dgsgld.sample(de, prob.potential, mixing, init, key, 20,
                                      placement=dgsgld.Agents())
            ref_more = dgsgld.sample(alg, prob.potential, mixing, ref.state, key, 5)
            more_agents = dgsgld.sample(alg, prob.potential, mixing, state, key,
                                        5, output=dgsgld.Output(positions=False),
                                        placement=dgsgld.Agents())
            res["agents_de_diff"] = float(jnp.abs(de_agents.positions - ref_de.positions).max())
            # Private tracking: the copies' noise is drawn for all agents, each block its rows.
            private = dgsgld.DIGingSGLD(0.05, tracking_noise=2.0)
            res["agents_private_diff"] = float(jnp.abs(
                dgsgld.sample(private, prob.potential, mixing, init, key, 20,
                              placement=dgsgld.Agents()).positions
                - dgsgld.sample(private, prob.potential, mixing, init, key, 20).positions).max())
            res["agents_resume_diff"] = float(jnp.abs(more_agents.state.position
                                                      - ref_more.state.position).max())
            more = dgsgld.sample(alg, prob.potential, mixing, chains.state, key, 5,
                                 placement=dgsgld.Chains())
            two = dgsgld.sample(alg, prob.potential, mixing, init, key, 20,
                                placement=dgsgld.Chains(mesh=sharding.chain_mesh(2)))
            res["resume_diff"] = float(jnp.abs(more.positions - ref_more.positions).max())
            res["two_devices_diff"] = float(jnp.abs(two.positions - ref.positions).max())
        res |= {
            "chains_diff": float(jnp.abs(chains.positions - ref.positions).max()),
            "chains_spec": str(chains.positions.sharding.spec),
            "chains_devices": len(chains.positions.sharding.device_set),
            "agents_diff": float(jnp.abs(pos - ref.positions).max()),
            "agents_tracker_diff": float(jnp.abs(state.tracker - ref.state.tracker).max()),
            "agents_spec": str(pos.sharding.spec),
            "agents_diverged": bool(agents.diverged.any()),
            "scale": float(jnp.abs(ref.positions).max()),
        }
    # A preconditioned sampler: M acts on each agent's own row, its noise S w on the rows of
    # the network's noise that a device holds.
    from dgsgld.samplers import DensePreconditioner
    pre = dgsgld.DIGingSGLD(0.05, preconditioner=DensePreconditioner(np.array([[1.5, 0.6],
                                                                             [0.6, 0.8]])))
    ref = dgsgld.sample(pre, prob.potential, mixing, init, key, 20)
    out["preconditioned"] = {"scale": float(jnp.abs(ref.positions).max())} | {
        name + "_diff": float(jnp.abs(dgsgld.sample(pre, prob.potential, mixing, init, key, 20,
                                                     placement=placement).positions
                                      - ref.positions).max())
        for name, placement in (("chains", dgsgld.Chains()), ("agents", dgsgld.Agents()))}
    # Agent-private leaves: a device holds its agents' private intercepts, never gathered.
    from _problems import hierarchical_gaussian, hierarchical_params
    hb = hierarchical_gaussian(num_agents=8, batch_size=2, dtype=np.float64)
    hinit = hierarchical_params(np.random.default_rng(0).normal(size=(8, 8, 3)))
    href = dgsgld.sample(dgsgld.DIGingSGLD(0.02), hb.potential, mixing, hinit, key, 20)
    out["private"] = {"scale": max(float(jnp.abs(v).max()) for v in href.positions.values())} | {
        name + "_diff": max(float(jnp.abs(v - href.positions[k]).max()) for k, v in
                            dgsgld.sample(dgsgld.DIGingSGLD(0.02), hb.potential, mixing, hinit,
                                          key, 20, placement=placement).positions.items())
        for name, placement in (("chains", dgsgld.Chains()), ("agents", dgsgld.Agents()))}
    # A channel on the dense all-gather: top-k messages with error feedback and stragglers
    # (drawn for all agents by every device) give the single-device draws and byte counts.
    from dgsgld import communication as C
    chan = C.Channel(C.top_k(0.5), error_feedback=True, consensus=0.5, activity=0.7)
    calg = dgsgld.DIGingSGLD(0.05, channel=chan)
    cref = dgsgld.sample(calg, prob.potential, mixing, init, key, 20)
    cagents = dgsgld.sample(calg, prob.potential, mixing, init, key, 20,
                            placement=dgsgld.Agents())
    plain = dgsgld.sample(alg, prob.potential, mixing, init, key, 20)
    out["channel"] = {
        "scale": float(jnp.abs(cref.positions).max()),
        "effect": float(jnp.abs(cref.positions - plain.positions).max()),
        "agents_diff": float(jnp.abs(cagents.positions - cref.positions).max()),
        "bytes": np.asarray(chan.bytes_sent(cref.state)).tolist(),
        "bytes_agents": np.asarray(chan.bytes_sent(cagents.state)).tolist()}
    if full:   # the slow run: divergence and the sparse exchange (more programs)
        # A diverging run: the same first non-finite iteration and agent per chain.
        prob = linear_regression(num_agents=8, dim=2, batch_size=2, dtype=np.float64)
        blow = dgsgld.DIGingSGLD(1e4)   # non-finite after ~72 steps, agents 1 and 5
        ref = dgsgld.sample(blow, prob.potential, mixing, init, key, 100, on_divergence="flag",
                            output=dgsgld.Output(positions=False))
        agents = dgsgld.sample(blow, prob.potential, mixing, init, key, 100,
                               output=dgsgld.Output(positions=False),
                               on_divergence="flag", placement=dgsgld.Agents())
        out["divergence"] = [np.asarray(ref.divergence).tolist(),
                             np.asarray(agents.divergence).tolist()]
        # Sparse schedules: a neighbour exchange (ppermute of the rows neighbours need) instead of
        # the all-gather; on-the-fly sparse snapshots all-gather. The same draws as dgsgld.sample
        # with the same sparse mixing; the exchange's product alone, bit for bit.
        from dgsgld import networks
        from dgsgld.parallel import rows as rows
        from dgsgld.networks import sparse
        from jax.sharding import PartitionSpec as P
        prob = linear_regression(num_agents=8, dim=2, batch_size=2, dtype=np.float64)
        alg = dgsgld.DIGingSGLD(0.05)
        x = jnp.asarray(np.random.default_rng(1).normal(size=(8, 3)))
        schedules = {"circulant": sparse.from_dense(ring(8)),
                     "neighbors": sparse.from_dense(mixing, format="neighbors"),
                     "edges": sparse.from_dense(mixing, format="edges"),
                     "on_the_fly": networks.onthefly.one_peer_exponential_on_the_fly(
                         8, format="neighbors", dtype=jnp.float64)}
        sp = out["sparse"] = {}
        for name, mix in schedules.items():
            sp[name] = {}
            # Whole runs of every format.
            ref = dgsgld.sample(alg, prob.potential, mix, init, key, 20)
            got = dgsgld.sample(alg, prob.potential, mix, init, key, 20, placement=dgsgld.Agents())
            sp[name] = {"diff": float(jnp.abs(got.positions - ref.positions).max()),
                        "tracker_diff": float(jnp.abs(got.state.tracker
                                                      - ref.state.tracker).max())}
            if name != "on_the_fly":
                plan = rows.exchange_plan(mix, 4)
                product = jax.jit(jax.shard_map(
                    lambda pl, xl: pl.rows(jnp.int32(1), "agents", 4) @ xl,
                    mesh=sharding.agent_mesh(), in_specs=(jax.tree.map(lambda _: P(None, "agents"),
                                                                       plan), P("agents")),
                    out_specs=P("agents")))(plan, x)
                own = jax.jit(lambda w, x: w @ x)(mix.matrix_at(1), x)     # compiled, as in a run
                sp[name]["product_diff"] = float(jnp.abs(product - own).max())
                sp[name]["rows_received"] = plan.rows_received
    errors = {}
    prob = linear_regression(num_agents=6, dim=2)
    try:
        dgsgld.sample(dgsgld.DIGingSGLD(0.05), prob.potential, np.full((6, 6), 1 / 6),
                      jnp.zeros((6, 6, 2)), key, 2, placement=dgsgld.Chains())
    except ValueError as err:
        errors["chains"] = str(err)
    try:
        dgsgld.sample(dgsgld.DIGingSGLD(0.05), prob.potential,
                      np.full((6, 6), 1 / 6), jnp.zeros((4, 6, 2)), key, 2,
                      placement=dgsgld.Agents())
    except ValueError as err:
        errors["agents"] = str(err)
    out["errors"] = errors
    print("RESULT" + json.dumps(out))
    """
)


def _run(mode: str) -> dict:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ,
               XLA_FLAGS=os.environ["XLA_FLAGS"] + " --xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


@pytest.fixture(scope="module")
def result():
    return _run("fast")


@pytest.fixture(scope="module")
def full_result():
    return _run("full")


def _check_equal(r: dict) -> None:
    assert r["scale"] > 0.1                                  # a real, moving run
    bound = 1e-10 * max(1.0, r["scale"])
    assert r["chains_devices"] == 4 and "chains" in r["chains_spec"]
    assert "agents" in r["agents_spec"]
    assert r["chains_diff"] < bound
    assert r["agents_diff"] < bound
    assert r["agents_tracker_diff"] < 10 * bound             # trackers are gradient-sized
    assert not r["agents_diverged"]
    for name in ("resume_diff", "two_devices_diff", "agents_de_diff", "agents_resume_diff",
                 "agents_dula_saga_diff", "agents_private_diff"):
        if name in r:
            assert r[name] < bound


def test_chain_and_agent_sharded_runs_equal_single_device_run(result):
    assert result["devices"] == 4
    _check_equal(result["2"])


def test_preconditioned_sharded_runs_equal_single_device_run(result):
    r = result["preconditioned"]
    assert r["scale"] > 0.1
    bound = 1e-10 * max(1.0, r["scale"])
    assert r["chains_diff"] < bound and r["agents_diff"] < bound, r


def test_private_leaves_sharded_runs_equal_single_device_run(result):
    """Private intercepts (tests/_problems.hierarchical_gaussian) under Chains and Agents."""
    r = result["private"]
    assert r["scale"] > 0.1
    bound = 1e-10 * max(1.0, r["scale"])
    assert r["chains_diff"] < bound and r["agents_diff"] < bound, r


def test_a_channel_under_agent_placement_makes_the_single_device_draws_and_bytes(result):
    """Top-k with error feedback and stragglers on the dense all-gather (the neighbour
    exchange, gossip and every sampler: tests/communication/test_agents.py, slow). The same
    draws, so the same messages: positions to the float64 rounding bound, bytes exactly."""
    r = result["channel"]
    assert r["scale"] > 0.1 and r["effect"] > 1e-2, r      # a moving run the channel changes
    assert r["agents_diff"] < 1e-10 * max(1.0, r["scale"]), r
    assert r["bytes_agents"] == r["bytes"] and np.sum(r["bytes"]) > 0, r


@pytest.mark.slow  # the slow run's subprocess
def test_agent_sharded_divergence_is_that_of_the_single_device_run(full_result):
    ref, agents = full_result["divergence"]
    assert min(ref[0]) > 0                     # every chain diverged, after a few steps
    assert agents == ref


def test_indivisible_sizes_are_rejected_with_a_message(result):
    assert "multiple of the number of devices" in result["errors"]["chains"]
    assert "multiple of the number of devices" in result["errors"]["agents"]


@pytest.mark.slow  # the slow run's subprocess
# (across processes: tests/parallel/test_multiprocess.py)
def test_sparse_schedules_exchange_only_neighbour_rows_and_equal_single_device_run(full_result):
    # The exchange sums the same terms in the same order as each format's own product
    # (circulant shifts one after another, neighbour lists as one contraction; edge lists per
    # row in sender order instead of by segment_sum), so the products agree to rounding (XLA
    # may fuse multiply-adds differently in the two compiled programs: measured 0 or 5.6e-17).
    # Whole runs differ from dgsgld.sample by rounding only (per-device gradients and updates
    # compile to differently vectorised code, as for the dense all-gather); bound as above.
    _check_sparse(full_result["sparse"])


def _check_sparse(sp: dict) -> None:
    # |x| ~ 1 and rows of W sum to 1: rounding of a few float64 ulps (2.2e-16 each).
    assert sp["circulant"]["product_diff"] < 1e-15 and sp["neighbors"]["product_diff"] < 1e-15
    # A ring over 4 devices: each needs 1 row from each side. Permuted rings (3 snapshots):
    # at most 2 agents x 2 neighbours outside a block of 2, padded per offset.
    assert sp["circulant"]["rows_received"] == 2
    assert 2 <= sp["neighbors"]["rows_received"] <= 6
    if "product_diff" in sp.get("edges", {}):            # the slow run's formats
        assert sp["edges"]["product_diff"] < 1e-15
        assert sp["edges"]["rows_received"] == sp["neighbors"]["rows_received"]
    for name, r in sp.items():
        if "diff" in r:
            assert r["diff"] < 1e-10 and r["tracker_diff"] < 1e-9, name


@pytest.mark.slow
def test_full_batch_resumed_and_two_device_runs_equal_single_device_run(full_result):
    result = full_result
    for batch in ("None", "2"):
        assert {"agents_de_diff", "agents_resume_diff", "resume_diff",
                "agents_private_diff"} <= set(result[batch])
        _check_equal(result[batch])
    _check_sparse(result["sparse"])
    assert all("diff" in r for r in result["sparse"].values())


@pytest.mark.parametrize("fmt", ["circulant", "neighbors", "edges"])
@pytest.mark.parametrize("devices", [2, 4, 5])
def test_exchange_plan_rebuilds_every_snapshot_from_the_rows_it_sends(fmt, devices):
    # Each device's rows of W^(k), read through the plan (its own rows, then the rows the
    # others send it at each offset), must be exactly the snapshot: every neighbour's row
    # arrives, in the right slot. Only rows a device's agents listen to are sent.
    import numpy as np

    from dgsgld import networks
    from dgsgld.networks import sparse
    from dgsgld.parallel import rows as rows

    if fmt == "circulant":
        schedule = sparse.from_dense(networks.ring(20).matrices, format=fmt)
    else:
        schedule = sparse.from_dense(networks.barbell(20, period=6, seed=1).matrices, format=fmt)
    plan = rows.exchange_plan(schedule, devices)
    nbr, wts, diag = (np.asarray(a) for a in (plan.neighbors, plan.weights, plan.diagonal))
    dense = np.asarray(schedule.todense())
    size = 20 // devices
    for p in range(schedule.period):
        rebuilt = np.zeros((20, 20))
        for d in range(devices):
            arrived = [np.arange(d * size, (d + 1) * size)]
            for o, send in zip(plan.offsets, plan.sends):
                e = (d - o) % devices
                arrived.append(np.asarray(send)[p, e] + e * size)
            arrived = np.concatenate(arrived)
            # sources: the agents of the received rows (HaloRows.agents reads them).
            np.testing.assert_array_equal(np.asarray(plan.sources)[p, d], arrived[size:])
            for i in range(d * size, (d + 1) * size):
                np.add.at(rebuilt[i], arrived[nbr[p, i]], wts[p, i])
                rebuilt[i, i] += diag[p, i]
        np.testing.assert_array_equal(rebuilt, dense[p])
        # listeners: each agent's out-neighbours, the column pattern of the snapshot.
        listeners = np.asarray(plan.listeners)[p]
        for j in range(20):
            heard = set(np.flatnonzero(dense[p, :, j])) - {j}
            assert set(listeners[j][listeners[j] >= 0]) == heard, (p, j)
    if fmt == "circulant":                               # one row from each side
        assert plan.rows_received == 2
    assert plan.rows_received <= 20 - size               # never more than the all-gather
