"""dgsgld.evaluate.plots: the figure's structure and its line data are the run's numbers."""

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt  # noqa: E402

import dgsgld  # noqa: E402
from dgsgld import networks  # noqa: E402
from dgsgld.evaluate import plots as plots

T, N = 6, 4
RNG = np.random.default_rng(0)
W2 = RNG.uniform(0.1, 2.0, size=(T, N))            # a streamed (T, N) metric
PER_CHAIN = RNG.uniform(0.5, 1.0, size=(3, T, N))   # a trace_fn metric (C, T, N)


def _trace(ensemble=None, values=None):
    none = dgsgld.Divergence(np.full(1, -1), np.full(1, -1))
    return dgsgld.Trace(None, values, ensemble, None, none)


def test_plot_run_draws_each_run_and_the_network(tmp_path):
    ring = networks.ring(N)
    runs = {"DIGing-SGLD": _trace(ensemble={"w2": W2}), "DE-SGLD": _trace(ensemble={"w2": 2 * W2})}
    path = tmp_path / "run.png"
    fig, axes = plots.plot_run(runs, metric="w2", thin=10, burn_in=20, network=ring, agents=True,
                               logy=True, path=path)
    assert path.stat().st_size > 5_000 and len(fig.axes) == 2
    ax = axes[0]
    means = [line for line in ax.lines if line.get_label() in runs]
    assert [line.get_label() for line in means] == list(runs)
    np.testing.assert_array_equal(means[0].get_xdata(), 20 + 10 * np.arange(T))
    np.testing.assert_allclose(means[0].get_ydata(), W2.mean(1))
    np.testing.assert_allclose(means[1].get_ydata(), 2 * W2.mean(1))
    # Every agent's own line, and the ±1 sd band's edges: mean − sd below, mean + sd above.
    agent_lines = [line for line in ax.lines if line.get_label() not in runs]
    assert len(agent_lines) == 2 * N
    np.testing.assert_allclose(agent_lines[2].get_ydata(), W2[:, 2])
    band = ax.collections[0].get_paths()[0].vertices
    lo, hi = W2.mean(1) - W2.std(1), W2.mean(1) + W2.std(1)
    np.testing.assert_allclose(band[1:T + 1, 1], lo)
    np.testing.assert_allclose(np.sort(band[:, 1]).max(), hi.max())
    assert ax.get_yscale() == "log"
    # The network panel: the ring's N edges.
    assert len(axes[1].collections[-1].get_segments()) == N


def test_per_chain_values_are_averaged_and_bytes_count_messages():
    fig, (ax,) = plots.plot_run(_trace(values=PER_CHAIN), band=False,
                                x=plots.communication_bytes(networks.ring(N), np.arange(T), 6))
    (line,) = ax.lines
    np.testing.assert_allclose(line.get_ydata(), PER_CHAIN.mean(0).mean(1))
    # A ring of N agents: 2N directed messages per iteration, 6 float32 numbers each.
    np.testing.assert_array_equal(line.get_xdata(), np.arange(T) * 2 * N * 6 * 4)
    plt.close(fig)
    # A time-varying stack: snapshot k % P's edges are counted at iteration k.
    stack = np.stack([np.eye(3), networks.complete(3).matrices[0]])  # 0 then 6 messages
    np.testing.assert_array_equal(plots.communication_bytes(stack, np.array([0, 1, 2, 3, 5]), 1,
                                                            itemsize=1), [0, 0, 6, 6, 12])


@pytest.mark.reliability
def test_plots_name_what_is_wrong():
    with pytest.raises(ValueError, match=r"holds the metrics \['acc', 'w2'\]; pick one"):
        plots.per_agent({"w2": W2, "acc": W2})
    with pytest.raises(ValueError, match="a Trace without metrics"):
        plots.per_agent(_trace())
    with pytest.raises(ValueError, match=r"must be \(num_kept, num_agents\).*got shape \(6,\)"):
        plots.per_agent(W2[:, 0])
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match=r"`x` must have shape \(6,\)"):
        plots.agent_curves(ax, W2, x=np.arange(5))
    plt.close(fig)
    with pytest.raises(ValueError, match="`iterations` must be a 1-D array of non-negative"):
        plots.communication_bytes(networks.ring(N), np.array([-1]), 2)
