"""Stragglers and the simulated clock: random activity through ``sample`` for every sampler, a
round waiting for the slowest agent or dropping it at the deadline, and the compute times'
law."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _channels import N, _samplers, _states, _with
from _problems import linear_regression, ring

import dgsgld
from dgsgld import communication as C


@pytest.mark.slow  # fast twin: test_links_and_stragglers_step_by_step
def test_random_stragglers_every_sampler(key):
    """activity = 0.6 through ``sample`` for the six samplers: each agent's messages are 2
    ring links × the messages of its sampler at the steps it is active, with the activity
    drawn from the step keys (recomputed here: fold_in(chain key, k), :func:`C.active_agents`);
    the states stay finite."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    channel, T = C.Channel(activity=0.6), 8
    run_key = jax.random.split(dgsgld.runner.loop.chain_keys(
        dgsgld.runner.loop._random.fast_key(key), 1, 0)[0])[1]
    active = np.stack([np.asarray(C.active_agents(channel, jax.random.fold_in(run_key, k), k, N))
                       for k in range(T)])
    assert 0 < active.sum() < active.size
    for name, alg in _samplers().items():
        trace = dgsgld.sample(alg, problem.potential, ring(N), jnp.zeros((1, N, 2)), key, T,
                              channel=channel)
        per = 2 if name in ("diging", "diging_sghmc", "extra") else 1
        np.testing.assert_array_equal(np.asarray(C.messages_sent(trace.state))[0],
                                      per * 2 * active.sum(0), err_msg=name)
        assert np.isfinite(np.asarray(trace.positions)).all(), name


# -- the simulated clock ------------------------------------------------------------------------


@pytest.mark.parametrize("cells", [
    "one_program",
    # fast twin: the "one_program" cell; a trace_fn of the channel state through sample:
    # test_sample_channel_option_counts_bytes
    pytest.param("all", marks=pytest.mark.slow),
])
def test_clock_waits_for_the_slowest_agent_or_drops_it_at_the_deadline(cells, key):
    """DE-SGLD on the ring, 6 steps, one compiled program, compute times (1, 1, 1, 3) s with no
    jitter and 0.5 s latency a round. Waiting for everyone: 3.5 s a step; with rounds every 2
    steps only 3 of the 6 steps pay the latency (6 · 3 + 3 · 0.5 = 19.5 s). With a 2 s
    deadline agent 3 is never done in time: it takes no step and sends nothing (its position
    stays its start, exactly), each step lasts 2 + 0.5 s, and it counts no message.
    (``"all"``) ``elapsed_time`` traced per iteration through ``sample`` is 0, 3.5, 7, ..."""
    problem = linear_regression(num_agents=N, local_size=3, dim=2, batch_size=2)
    alg, T = dgsgld.DESGLD(0.05), 6
    slow = C.Clock(compute=(1, 1, 1, 3), latency=0.5)
    channels = (C.Channel(clock=slow), C.Channel(every=2, clock=slow),
                C.Channel(clock=C.Clock(compute=(1, 1, 1, 3), latency=0.5, deadline=2.0)))

    @jax.jit
    def runs(key):
        return [_states(_with(alg, ch), problem, ring(N)[None], T, key) for ch in channels]

    (first, wait, _), (_, local, _), (_, cut, _) = runs(key)
    np.testing.assert_allclose(C.elapsed_time(wait), 3.5 * np.arange(1, T + 1), rtol=1e-6)
    assert float(C.elapsed_time(local)[-1]) == pytest.approx(19.5)
    np.testing.assert_allclose(C.elapsed_time(cut), 2.5 * np.arange(1, T + 1), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(cut.position)[:, 3],
                                  np.broadcast_to(np.asarray(first.position)[3], (T, 2)))
    assert (np.asarray(cut.position)[-1, :3] != np.asarray(first.position)[:3]).all()
    np.testing.assert_array_equal(np.asarray(cut.channel["position"].sent)[-1],
                                  [2 * T, 2 * T, 2 * T, 0])    # both ring links, as for
    # `activity`: an inactive agent still receives (public copies stay known), sends nothing
    if cells == "one_program":
        return
    trace = dgsgld.sample(alg, problem.potential, ring(N), jnp.zeros((2, N, 2)), key, 4,
                          channel=channels[0], output=dgsgld.Output(trace_fn=C.elapsed_time))
    np.testing.assert_allclose(np.asarray(trace.values), [[0, 3.5, 7, 10.5, 14]] * 2,
                               rtol=1e-6)


@pytest.mark.slow  # fast twin: test_clock_waits_for_the_slowest_agent_or_drops_it_at_the_deadline
def test_clock_compute_times_have_the_stated_law():
    """``t_i = c_i (1 − j + j E_i)``, ``E_i ~ Exp(1)``: over 20 000 steps the mean of each
    agent's time is ``c_i`` and its variance ``(j c_i)²`` within 5 standard errors (the
    sample mean's s.e. is ``j c_i / √n``; the sample variance's, for an exponential part,
    ``√8 (j c_i)² / √n`` from its fourth central moment 9σ⁴). A deadline makes exactly the
    agents with ``t_i > deadline`` inactive in :func:`C.active_agents`."""
    clock = C.Clock(compute=(1.0, 2.0, 4.0), jitter=0.5, deadline=3.0)
    keys = jax.random.split(jax.random.key(0), 20_000)
    channel = C.Channel(clock=clock)
    t, active = jax.jit(lambda keys: (                              # one program, not op by op
        jax.vmap(lambda k: clock.times(k, 3))(keys),
        jax.vmap(lambda k: C.active_agents(channel, k, 0, 3))(keys[:200])))(keys)
    t, active = np.asarray(t, np.float64), np.asarray(active)
    c, j, n = np.array([1.0, 2.0, 4.0]), 0.5, len(keys)
    assert (np.abs(t.mean(0) - c) <= 5 * j * c / np.sqrt(n)).all(), t.mean(0)
    assert (np.abs(t.var(0) - (j * c) ** 2) <= 5 * np.sqrt(8) * (j * c) ** 2 / np.sqrt(n)).all()
    assert (t >= (1 - j) * c).all()
    np.testing.assert_array_equal(active, t[:200] <= 3.0)
    with pytest.raises(ValueError, match="`jitter` must be a number in"):
        C.Clock(jitter=1.5)
    with pytest.raises(ValueError, match="`compute` must be a finite number of seconds > 0"):
        C.Clock(compute=(1.0, 0.0))
    with pytest.raises(ValueError, match="`deadline` must be a finite number of seconds > 0"):
        C.Clock(deadline=0)
    with pytest.raises(TypeError, match="`clock` must be None or a dgsgld.communication.Clock"):
        C.Channel(clock=2.0)
    with pytest.raises(ValueError, match="`compute` has 3 agents; the network has 4"):
        clock.times(keys[0], 4)
    with pytest.raises(ValueError, match="`state` has no simulated clock"):
        C.elapsed_time(dgsgld.DESGLD(0.1, channel=C.Channel()).init(
            jnp.zeros((N, 2)), linear_regression(num_agents=N).potential, keys[0]))
