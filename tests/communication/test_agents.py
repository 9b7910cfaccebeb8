"""Communication channels under ``placement=Agents``: the agent-sharded run makes the draws of
the single-device run with the same key (every per-agent draw is made for all ``N`` agents
and sliced), so positions agree to float32 rounding and the message counts exactly; over a
sparse schedule's neighbour exchange the compressed payloads travel, of the accounted size,
and stragglers, dropped links and gossip rounds rewrite each device's rows without gathering
(on a directed network too, where a dropped weight stays in its sender's column).

Four CPU devices exist only when XLA is told so before JAX starts, hence one subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` that runs every check and prints JSON.

Tolerance: the channel mixes over the whole snapshot on every device with the single-device
arithmetic, or over the neighbour exchange in the snapshot format's order (with stragglers or
dropped links the single-device run mixes with the dense ``W'``, and a row's dropped weight
is summed over its ``K`` terms instead of its ``N`` entries: a few ulps of ``|x|`` per step);
the runs differ only where the agent-sharded loop itself rounds differently (the gradient and
noise of a device's rows, compiled in another program: an ulp of ``|x|`` per step, as without
a channel). In float32 that is ``ε |x| = 1.2e-7 |x|`` per step; mixing is
non-expansive and the gradient step contracts (``η L ≤ 0.05 · 1``), so after ``K = 12`` steps
the positions differ by at most ``K · N ε |x| = 12 · 8 · 1.2e-7 |x| ≈ 1.2e-5 |x|``: the bound
``2e-5 · max(1, scale)``. A single differing draw (a compressor's key, a dropped link, an
inactive agent) moves a position by the message's own scale, ``≳ 1e-2`` (the full run's
``effect`` checks that each channel changes the run by that much), and a flipped top-k
selection or trigger by as much.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _problems import permuted_rings, ring

from dgsgld import networks
from dgsgld.networks import sparse
from dgsgld.parallel import rows as rows

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax
    import jax.numpy as jnp, numpy as np
    import jax.extend.core as jex
    from jax.sharding import PartitionSpec as P
    import dgsgld
    from dgsgld import networks
    from dgsgld.parallel import devices as sharding
    from dgsgld import communication as C
    from dgsgld.parallel import rows as rows
    from dgsgld.networks import sparse
    sys.path.insert(0, "tests")
    from _problems import linear_regression, permuted_rings, ring

    full = sys.argv[1] == "full"
    key = jax.random.key(3)
    prob = linear_regression(num_agents=8, dim=2, batch_size=2)
    init = jnp.asarray(np.random.default_rng(0).normal(size=(2, 8, 2)), jnp.float32)
    dense = permuted_rings(8, 3)
    directed = networks.directed_one_peer_exponential(8)
    neighbours = sparse.from_dense(dense, format="neighbors")
    directed_neighbours = sparse.from_dense(networks.directed_barbell(8, period=4, seed=1),
                                            format="neighbors")
    directed_failures = networks.one_way_link_failures(np.ones((8, 8)) - np.eye(8), 0.5,
                                                       period=3, seed=4)
    # The ring with one one-way link of weight 1e-6 (symmetric within the checks' tolerance).
    one_way = np.asarray(ring(8), np.float64)
    one_way[0, 4], one_way[0, 0] = 1e-6, one_way[0, 0] - 1e-6
    one_way = jnp.asarray(one_way, jnp.float32)
    clock = C.Clock(1.0, jitter=1.0, latency=0.1, deadline=1.5)
    exchanged = C.Channel(C.top_k(0.5), every=2, activity=0.6, probability=0.7, per_link=True,
                          clock=clock)
    # (sampler, mixing, channel): by default error feedback, stragglers, event triggers and
    # public copies over the neighbour exchange (and one send of `exchanged`, with local
    # steps, a clock, dropped links and stragglers, over the exchange below); the full run
    # adds the gathered network, the whole run with `exchanged`, every sampler, random
    # rounds, per-link drops, gossip, activity patterns and every compressor.
    cells = {}
    if full:
        cells["diging_topk_ef_every_activity_clock"] = (
            dgsgld.DIGingSGLD(0.05), dense,
            C.Channel(C.top_k(0.5), error_feedback=True, every=2, activity=0.6, clock=clock))
        # The neighbour exchange carries the payloads, stragglers and dropped links
        # rewriting each device's rows.
        cells["diging_exchange_topk_every_activity_clock_per_link"] = (
            dgsgld.DIGingSGLD(0.05), neighbours, exchanged)
    # Gossip rounds drawn for all agents by every device, over the exchange.
    cells["diging_exchange_gossip_matching_activity"] = (
        dgsgld.DIGingSGLD(0.05), neighbours,
        C.Channel(C.top_k(0.5), gossip="matching", activity=0.7))
    # A directed network's sparse snapshots: push-sum over the exchange of in-neighbours,
    # a straggler's dropped weight kept in its sender's column (HaloRows.sent).
    cells["push_diging_exchange_directed_topk_ef_activity"] = (
        dgsgld.PushDIGingSGLD(0.05), directed_neighbours,
        C.Channel(C.top_k(0.5), error_feedback=True, consensus=0.5, activity=0.7))
    # Public copies over the exchange of the period's union (copies kept per agent).
    cells["diging_exchange_randk_ef_trigger_activity"] = (
        dgsgld.DIGingSGLD(0.05), neighbours,
        C.Channel(C.random_k(0.5), error_feedback=True, threshold=0.02, activity=0.7))
    if full:
        cells |= {
            "de_exchange_quantize_trigger_round": (
                dgsgld.DESGLD(0.05), neighbours,
                C.Channel(C.quantize(4), threshold=0.05, probability=0.8)),
            "diging_randk_per_link": (
                dgsgld.DIGingSGLD(0.05), dense,
                C.Channel(C.random_k(0.5), probability=0.7, per_link=True)),
            "push_diging_sign_gossip_pattern": (
                dgsgld.PushDIGingSGLD(0.05), directed,
                C.Channel(C.sign(), gossip="matching", activity=[[1, 0] * 4, [1] * 8])),
            "extra_randk_ef_activity": (
                dgsgld.EXTRASGLD(0.05), dense,
                C.Channel(C.random_k(0.5), error_feedback=True, consensus=0.5, activity=0.7)),
            "dula_quantize_ef_trigger": (
                dgsgld.DULA(0.02, 0.5), dense,
                C.Channel(C.quantize(2), error_feedback=True, threshold=0.02)),
            "de_sghmc_topk_gossip_edge": (
                dgsgld.DESGHMC(0.1, 2.0), dense, C.Channel(C.top_k(0.3), gossip="edge")),
            "diging_sghmc_sign_clock": (
                dgsgld.DIGingSGHMC(0.1, 2.0), ring(8),
                C.Channel(C.sign(), clock=C.Clock((1.0,) * 7 + (3.0,), deadline=2.0))),
            "push_sum_randk_per_link_activity": (
                dgsgld.PushSumSGLD(0.05), directed,
                C.Channel(C.random_k(0.5), probability=0.7, per_link=True, activity=0.7)),
            "de_sghmc_exchange_randk_round": (
                dgsgld.DESGHMC(0.1, 2.0), sparse.from_dense(dense, format="edges"),
                C.Channel(C.random_k(0.5), probability=0.7)),
            "extra_exchange_circulant_sign": (
                dgsgld.EXTRASGLD(0.05), sparse.from_dense(ring(8)), C.Channel(C.sign())),
            "de_exchange_edges_pattern_deadline": (
                dgsgld.DESGLD(0.05), sparse.from_dense(dense, format="edges"),
                C.Channel(activity=[[1, 0] * 4, [1] * 8, [0, 1, 1, 1] * 2],
                          clock=C.Clock((1.0,) * 7 + (3.0,), deadline=2.0))),
            "extra_exchange_circulant_randk_per_link_activity": (
                dgsgld.EXTRASGLD(0.05), sparse.from_dense(ring(8)),
                C.Channel(C.random_k(0.5), probability=0.7, per_link=True, activity=0.7)),
            "diging_sghmc_exchange_quantize_deadline": (
                dgsgld.DIGingSGHMC(0.1, 2.0), neighbours,
                C.Channel(C.quantize(4), clock=C.Clock(1.0, jitter=1.0, deadline=1.2))),
            "de_sghmc_exchange_per_link": (
                dgsgld.DESGHMC(0.1, 2.0), neighbours,
                C.Channel(probability=0.6, per_link=True)),
            "de_exchange_topk_ef_consensus": (
                dgsgld.DESGLD(0.05), neighbours,
                C.Channel(C.top_k(0.5), error_feedback=True, consensus=0.5)),
            "extra_exchange_circulant_sign_trigger": (
                dgsgld.EXTRASGLD(0.05), sparse.from_dense(ring(8)),
                C.Channel(C.sign(), threshold=0.05, every=2)),
            "dula_exchange_edges_quantize_ef": (
                dgsgld.DULA(0.02, 0.5), sparse.from_dense(dense, format="edges"),
                C.Channel(C.quantize(2), error_feedback=True, probability=0.8)),
            "diging_sghmc_exchange_identity_trigger_dict": (
                dgsgld.DIGingSGHMC(0.1, 2.0), neighbours,
                C.Channel(threshold={"position": 0.05})),
            "de_exchange_edges_gossip_edge": (
                dgsgld.DESGLD(0.05), sparse.from_dense(dense, format="edges"),
                C.Channel(C.quantize(4), gossip="edge")),
            "extra_exchange_circulant_gossip_matching_every_deadline": (
                dgsgld.EXTRASGLD(0.05), sparse.from_dense(ring(8)),
                C.Channel(gossip="matching", every=2,
                          clock=C.Clock((1.0,) * 7 + (3.0,), deadline=2.0))),
            # Gossip after per-link drops (the links that are up, drawn by every device);
            # on links that are not symmetric (a partner's row might not be received)
            # gathered, the same draws.
            "de_sghmc_exchange_gossip_per_link": (
                dgsgld.DESGHMC(0.1, 2.0), neighbours,
                C.Channel(gossip="matching", probability=0.7, per_link=True)),
            "diging_gossip_one_way_links": (
                dgsgld.DIGingSGLD(0.05), sparse.from_dense(one_way, format="neighbors"),
                C.Channel(C.sign(), gossip="matching")),
            "push_sum_exchange_directed_edges_quantize_every_trigger": (
                dgsgld.PushSumSGLD(0.05), sparse.from_dense(directed, format="edges"),
                C.Channel(C.quantize(4), every=2, threshold=0.02)),
            "push_sum_exchange_directed_circulant_sign_ef_round": (
                dgsgld.PushSumSGLD(0.05), sparse.from_dense(directed),
                C.Channel(C.sign(), error_feedback=True, probability=0.8)),
            # Directed: one-way drops with a deadline, and gossip pushes composed with
            # stragglers, over the exchange.
            "push_diging_exchange_directed_edges_per_link_deadline": (
                dgsgld.PushDIGingSGLD(0.05), sparse.from_dense(directed_failures, format="edges"),
                C.Channel(C.random_k(0.5), probability=0.7, per_link=True,
                          clock=C.Clock((1.0,) * 7 + (3.0,), deadline=2.0))),
            "push_sum_exchange_directed_gossip_edge_activity": (
                dgsgld.PushSumSGLD(0.05), directed_neighbours,
                C.Channel(C.quantize(4), gossip="edge", activity=0.7)),
            "push_diging_exchange_directed_gossip_matching_per_link": (
                dgsgld.PushDIGingSGLD(0.05), sparse.from_dense(directed_failures),
                C.Channel(gossip="matching", probability=0.7, per_link=True)),
            "diging_on_the_fly_topk_ef": (
                dgsgld.DIGingSGLD(0.05),
                networks.onthefly.one_peer_exponential_on_the_fly(8, format="neighbors"),
                C.Channel(C.top_k(0.5), error_feedback=True)),
        }
    agents = sharding.Agents(sharding.agent_mesh(4))
    # Which operand each agent-sharded run mixes with: a neighbour exchange's ExchangePlan,
    # or the gathered network.
    operands = []
    split_rows = sharding.split_rows
    sharding.split_rows = lambda *a, **k: operands.append(split_rows(*a, **k)) or operands[-1]
    out = {"devices": jax.device_count(), "cells": {}}
    runs = {}
    for name, (alg, mixing, channel) in cells.items():
        ref = dgsgld.sample(alg, prob.potential, mixing, init, key, 12, channel=channel)
        got = dgsgld.sample(alg, prob.potential, mixing, init, key, 12, channel=channel,
                            placement=agents)
        runs[name] = got, ref
        res = out["cells"][name] = {
            "exchange": isinstance(operands[-1], rows.ExchangePlan),
            "diff": float(jnp.abs(got.positions - ref.positions).max()),
            "scale": float(jnp.abs(ref.positions).max()),
            "bytes": channel.bytes_sent(ref.state).tolist(),
            "bytes_agents": channel.bytes_sent(got.state).tolist(),
            "messages_agents": np.asarray(C.messages_sent(got.state)).tolist(),
            "spec": str(got.positions.sharding.spec),
        }
        if full:   # the channel changes the run (an exact channel's run against it)
            exact = dgsgld.sample(alg, prob.potential, mixing, init, key, 12,
                                  channel=C.Channel())
            res["effect"] = float(jnp.abs(exact.positions - ref.positions).max())
        if isinstance(operands[-1], rows.ExchangePlan) and channel.has_public_copies:
            # Every agent's copies equal the public copies of the agents it listens to (the
            # period's union), bit for bit: the same updates added in the same order.
            union, _ = rows._union(rows._neighbour_lists(mixing)[0])
            st = got.state.channel["position"]
            public = np.asarray(st.public).reshape(st.copies.shape[0], 8, -1)
            res["copies_equal"] = bool(np.array_equal(
                np.asarray(st.copies), public[:, union]))
        if channel.clock is not None:
            res["elapsed"] = np.asarray(C.elapsed_time(ref.state)).tolist()
            res["elapsed_agents"] = np.asarray(C.elapsed_time(got.state)).tolist()

    # Public copies over the exchange: (full) a run continued from its state goes on as one
    # uninterrupted run (the copies travel in the state); a single-device state, which keeps
    # no copies, is refused.
    alg, mixing, ef = cells["diging_exchange_randk_ef_trigger_activity"]
    whole_run, single = runs["diging_exchange_randk_ef_trigger_activity"]
    out["resume"] = {}
    if full:
        half = dgsgld.sample(alg, prob.potential, mixing, init, key, 6, channel=ef,
                             placement=agents)
        rest = dgsgld.sample(alg, prob.potential, mixing, half.state, key, 6, channel=ef,
                             placement=agents)
        out["resume"]["diff"] = float(jnp.abs(rest.state.position
                                              - whole_run.state.position).max())
    try:
        dgsgld.sample(alg, prob.potential, mixing, single.state, key, 6, channel=ef,
                      placement=agents)
        out["resume"]["refused"] = ""
    except ValueError as error:
        out["resume"]["refused"] = str(error)

    # What one device sends over the neighbour exchange for one message of F = 8 entries:
    # the bytes of every ppermute's operands in the traced mix.
    def ppermute_bytes(jaxpr):
        total = 0
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "ppermute":
                total += sum(v.aval.size * v.aval.dtype.itemsize for v in eqn.invars)
            total += sum(ppermute_bytes(sub) for sub in jex.jaxprs_in_params(eqn.params))
        return total

    plan = rows.exchange_plan(neighbours, 4)
    x = jnp.asarray(np.random.default_rng(1).normal(size=(8, 8)), jnp.float32)
    specs = (jax.tree.map(lambda _: P(None, "agents"), plan), P("agents"))
    out["payload"] = {"rows_received": plan.rows_received}
    def count(jaxpr, primitive):
        return sum((eqn.primitive.name == primitive)
                   + sum(count(sub, primitive) for sub in jex.jaxprs_in_params(eqn.params))
                   for eqn in jaxpr.eqns)

    # Error feedback over the exchange of copies: one payload per row of the union; with
    # stragglers a one-byte flag beside each (sent or not).
    copy_plan = rows.exchange_plan(neighbours, 4, copies=True)
    copy_specs = jax.tree.map(lambda _: P(None, "agents"), copy_plan)
    for label, ef in {"ef": C.Channel(C.top_k(0.25), error_feedback=True, copy_slots=5),
                      "ef_activity": C.Channel(C.top_k(0.25), error_feedback=True,
                                               activity=0.5, copy_slots=5)}.items():
        send_ef = jax.jit(jax.shard_map(
            lambda pl, xl, ch=ef: C.send(ch, key, C.init_states(ch, position=xl), "position",
                                         pl.rows(jnp.int32(1), "agents", 4), xl, 1)[0],
            mesh=sharding.agent_mesh(), in_specs=(copy_specs, P("agents")),
            out_specs=P("agents")))
        jaxpr = jax.make_jaxpr(send_ef)(copy_plan, x).jaxpr
        out["payload_copies_" + label] = {
            "slots": copy_plan.copy_slots, "rows_received": copy_plan.copies.rows_received,
            "sent": ppermute_bytes(jaxpr), "all_gather": count(jaxpr, "all_gather"),
            "message_bytes": ef.message_bytes(8)}


    # A gossip send over the exchange (traced only): the links whole on every device, no
    # all_gather.
    gossip_plan = rows.exchange_plan(neighbours, 4, support=True)
    gossip_specs = sharding._agent_in_specs(prob.potential, gossip_plan, init, "agents")[1]
    gossip = C.Channel(gossip="matching", activity=0.5)
    send_gossip = jax.shard_map(
        lambda pl, xl: C.send(gossip, key, C.init_states(gossip, position=xl), "position",
                              pl.rows(jnp.int32(1), "agents", 4), xl, 1)[0],
        mesh=sharding.agent_mesh(), in_specs=(gossip_specs, P("agents")),
        out_specs=P("agents"))
    jaxpr = jax.make_jaxpr(send_gossip)(gossip_plan, x).jaxpr
    out["send_gossip"] = {"ppermute": count(jaxpr, "ppermute"),
                          "all_gather": count(jaxpr, "all_gather"),
                          "support_spec": list(gossip_specs.support)}

    # One send of the exchanged channel at rounds k = 0, 2, 4 (keys 0, 1, 2): over the
    # exchange (ppermutes, no all_gather) its mix and messages are the single-device ones.
    def send(pl, xl, step_key, k):
        sent = C.send(exchanged, step_key, C.init_states(exchanged, position=xl), "position",
                      pl.rows(k, "agents", 4), xl, k)
        return sent[0], sent[1]["position"].sent
    send = jax.jit(jax.shard_map(send, mesh=sharding.agent_mesh(), in_specs=(*specs, P(), P()),
                                 out_specs=(P("agents"), P("agents"))))
    single = jax.jit(lambda step_key, k: C.send(
        exchanged, step_key, C.init_states(exchanged, position=x), "position",
        neighbours.matrix_at(k), x, k))
    jaxpr = jax.make_jaxpr(send)(plan, x, key, jnp.int32(0)).jaxpr
    out["send"] = {"ppermute": count(jaxpr, "ppermute"), "all_gather": count(jaxpr, "all_gather"),
                   "diff": 0.0, "sent": [], "sent_single": []}
    for i, k in enumerate((0, 2, 4)):
        step_key, k = jax.random.fold_in(key, i), jnp.int32(k)
        mixed, sent = send(plan, x, step_key, k)
        ref, states = single(step_key, k)
        out["send"]["diff"] = max(out["send"]["diff"], float(jnp.abs(mixed - ref).max()))
        out["send"]["sent"].append(np.asarray(sent).tolist())
        out["send"]["sent_single"].append(np.asarray(states["position"].sent).tolist())
    compressors = {"top_k": C.top_k(0.25)}
    if full:
        compressors |= {"quantize": C.quantize(4), "random_k": C.random_k(0.5),
                        "sign": C.sign(),
                        "identity": C.identity(), "quantize_1": C.quantize(1)}
    for name, compressor in compressors.items():
        # Compiled (one program each, not op by op).
        mix = jax.jit(jax.shard_map(
            lambda pl, xl: C.channel._compress_mix(
                compressor, key, pl.rows(jnp.int32(1), "agents", 4), xl)[1],
            mesh=sharding.agent_mesh(), in_specs=specs, out_specs=P("agents")))
        one = jax.jit(lambda xl: C.channel._compress_mix(compressor, key,
                                                         neighbours.matrix_at(1), xl)[1])
        out["payload"][name] = {
            "sent": ppermute_bytes(jax.make_jaxpr(mix)(plan, x).jaxpr),
            "message_bytes": C.Channel(compressor).message_bytes(8),
            # The mix itself, against the single-device one (same keys).
            "diff": float(jnp.abs(mix(plan, x) - one(x)).max())}
    print("RESULT" + json.dumps(out))
    """
)


def _run(mode: str) -> dict:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ,
               XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
               + " --xla_force_host_platform_device_count=4",
               JAX_PLATFORMS="cpu", PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], cwd=root, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def _check(result: dict) -> None:
    assert result["devices"] == 4 and result["cells"]
    for cell, res in result["cells"].items():
        assert "agents" in res["spec"], cell                      # really split over devices
        assert res["exchange"] == ("exchange" in cell), cell      # the path the cell names
        assert res["scale"] > 0.1, cell                           # a real, moving run
        assert res.get("effect", 1.0) > 1e-2, cell                # the channel changes the run
        assert res["diff"] < 2e-5 * max(1.0, res["scale"]), (cell, res["diff"])
        # Counts are integers from the same draws: equal exactly, and some were sent.
        assert res["bytes_agents"] == res["bytes"], cell
        assert sum(map(sum, res["messages_agents"])) > 0, cell
        if "elapsed" in res:                                      # the same float32 sums
            assert res["elapsed_agents"] == res["elapsed"], cell


def _check_payload(result: dict, full: bool) -> None:
    # The neighbour exchange sends each received row's payload, Channel.message_bytes(8):
    # k = 2 values and int32 indices for top-k (16 B, half the dense 32 B), k = 4 values for
    # random-k (16 B), quantize(4)'s packed sign and 3-bit level per entry and the norm
    # (4 + 4 B), quantize(1)'s 2 bits per entry and the norm (2 + 4 B), sign's packed bits
    # and scale (1 + 4 B), the dense row for the identity. The mix is the single-device one
    # to float32 rounding of a sum of at most 8 terms of weight ≤ 1 and |q| ≤ 8 (random-k
    # scales by d / k = 2, quantize's entries are at most ‖x_j‖₂; x standard normal, 64
    # draws): ≤ 8 · 8 · 1.2e-7 ≈ 8e-6.
    pay = dict(result["payload"])
    rows = pay.pop("rows_received")
    assert rows > 0
    for name, res in pay.items():
        assert res["sent"] == rows * res["message_bytes"], name
        assert res["diff"] < 1e-5, name
    sizes = {"top_k": 16, "random_k": 16, "quantize": 8, "sign": 5, "identity": 32,
             "quantize_1": 6}
    assert set(pay) == ({"top_k"} | ({"quantize", "random_k", "sign", "identity", "quantize_1"}
                                     if full else set()))
    assert {name: pay[name]["message_bytes"] for name in pay} == {
        name: size for name, size in sizes.items() if name in pay}


def _check_copies(result: dict, full: bool) -> None:
    # Public copies over the exchange of the period's union: no all_gather, and one payload
    # per received row (top_k(0.25) of 8 entries: 2 values and 2 int32 indices, 16 B), plus
    # a one-byte flag per row where stragglers may not send.
    for label, flags in (("ef", 0), ("ef_activity", 1)):
        res = result["payload_copies_" + label]
        assert res["slots"] == 5 and res["rows_received"] > 0, res
        assert res["all_gather"] == 0, res
        assert res["message_bytes"] == 16
        assert res["sent"] == res["rows_received"] * (res["message_bytes"] + flags), res
    # (full) Continued from its state, the run is the uninterrupted one (the same program, the
    # same floats); a state without copies is refused, naming the argument.
    assert ("diff" in result["resume"]) == full, result["resume"]
    if full:
        assert result["resume"]["diff"] == 0.0, result["resume"]
    assert "`init`" in result["resume"]["refused"], result["resume"]
    checked = [cell for cell, res in result["cells"].items() if "copies_equal" in res]
    assert checked and all(result["cells"][cell]["copies_equal"] for cell in checked), checked


def _check_send(result: dict) -> None:
    # One send with stragglers and dropped links over the neighbour exchange: no all_gather,
    # and the single-device mix to float32 rounding. The dropped weight is summed into the
    # diagonal over a row's K terms here and over its N entries on one device, and the mix
    # sums at most 8 terms of weight ≤ 1 and |x| ≤ 4 (64 standard normals): at most
    # 2 · 8 · 4 · 1.2e-7 ≈ 8e-6. A differing draw moves a row by a weight times |x| ≳ 1e-2.
    send = result["send"]
    assert send["ppermute"] > 0 and send["all_gather"] == 0, send
    assert send["diff"] < 1e-5, send["diff"]
    assert send["sent"] == send["sent_single"]
    # Some agents sent and some did not (activity 0.6, links up with probability 0.7).
    sent = [m for step in send["sent"] for m in step]
    assert 0 in sent and max(sent) > 0, sent
    # Gossip over the exchange: the snapshot's links replicated, no all_gather.
    gossip = result["send_gossip"]
    assert gossip["ppermute"] > 0 and gossip["all_gather"] == 0, gossip
    assert gossip["support_spec"] == [], gossip                  # replicated


@pytest.mark.slow  # fast twin: tests/parallel/test_sharding.py::
# test_a_channel_under_agent_placement_makes_the_single_device_draws_and_bytes
def test_channels_under_agent_placement_make_the_single_device_draws():
    result = _run("fast")
    _check(result)
    _check_payload(result, full=False)
    _check_copies(result, full=False)
    _check_send(result)


def test_gossip_exchange_plan_keeps_symmetric_links_whole():
    # exchange_plan(support=True) keeps each snapshot's links (agents j != i with
    # W[i, j] != 0, padding i) for every device, and refuses one-way links, naming them.
    dense = np.asarray(permuted_rings(8, 3))
    plan = rows.exchange_plan(sparse.from_dense(dense, format="neighbors"), 4, support=True)
    support = np.asarray(plan.support)
    assert support.shape[:2] == (3, 8)
    for snapshot, linked in zip(dense, support):
        links = np.zeros((8, 8), bool)
        links[np.arange(8)[:, None], linked] = True
        np.fill_diagonal(links, False)
        np.testing.assert_array_equal(links, (snapshot != 0) & ~np.eye(8, dtype=bool))
    assert rows.exchange_plan(sparse.from_dense(dense), 4).support is None
    # One one-way link of weight 1e-6: symmetric within the checks' tolerance, not its links.
    one_way = np.asarray(ring(8), np.float64)
    one_way[0, 4], one_way[0, 0] = 1e-6, one_way[0, 0] - 1e-6
    schedule = sparse.from_dense(one_way.astype(np.float32), format="neighbors")
    assert rows.symmetric_links(sparse.from_dense(dense)) and not rows.symmetric_links(schedule)
    with pytest.raises(ValueError, match="symmetric links"):
        rows.exchange_plan(schedule, 4, support=True)
    # A directed schedule's one-way links are kept: an agent pushes to an out-neighbour, whose
    # rows include it. Each agent's out-links carry the weights it gives out (HaloRows.sent).
    directed = sparse.from_dense(networks.directed_barbell(8, period=4, seed=1))
    plan = rows.exchange_plan(directed, 4, support=True)
    dense = np.asarray(directed.todense())
    for snapshot, listeners, sent in zip(dense, np.asarray(plan.listeners),
                                         np.asarray(plan.sent)):
        for j in range(8):
            out = np.flatnonzero((snapshot[:, j] != 0) & (np.arange(8) != j))
            np.testing.assert_array_equal(listeners[j][listeners[j] >= 0], out)
            np.testing.assert_array_equal(sent[j][listeners[j] >= 0], snapshot[out, j])
            assert not sent[j][listeners[j] < 0].any()


@pytest.mark.slow  # fast twin: test_channels_under_agent_placement_make_the_single_device_draws
def test_channels_under_agent_placement_every_sampler():
    result = _run("full")
    _check(result)
    _check_payload(result, full=True)
    _check_copies(result, full=True)
    _check_send(result)
