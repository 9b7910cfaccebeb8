"""Plots of a run: per-agent error or accuracy against iteration, bytes sent or time, with the
network beside it (matplotlib is an optional dependency, imported on use).

A run's per-agent metric is an array ``(T, N)`` (kept iteration, agent). :func:`per_agent`
reads it from what :func:`dgsgld.sample` returns: a streamed ``ensemble_fn`` metric such as
``dgsgld.evaluate.streamed_per_agent_w2`` (``trace.ensemble``, ``(T, N)``), or a per-chain
``trace_fn`` metric (``trace.values``, ``(C, T, N)``, averaged over chains). The x axis is the
iteration (:func:`iterations`), the bytes the agents have sent (:func:`communication_bytes`)
or any other ``(T,)`` array, e.g. the wall-clock seconds of each kept iteration.

* :func:`agent_curves`: on one axes, the mean over agents with a band of ±1 standard deviation
  across agents (the paper's figures), and optionally every agent's own line;
* :func:`mean_band`: the same from a precomputed mean and standard deviation;
* :func:`plot_run`: a figure with one or several runs' curves and the network's snapshot beside
  them (:func:`dgsgld.networks.draw_snapshot`), written to a file if asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "agent_curves",
    "communication_bytes",
    "iterations",
    "mean_band",
    "per_agent",
    "plot_run",
    "pyplot",
]


def pyplot(headless: bool = False):
    """``matplotlib.pyplot``, with a clear error when matplotlib is missing.

    Args:
        headless: select the Agg backend first (figures written to files, no display).
    """
    try:
        import matplotlib
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("Plots need matplotlib: pip install 'dgsgld[plots]'.") from err
    if headless:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def per_agent(source: Any, metric: str | None = None) -> np.ndarray:
    """A run's per-agent metric as a ``(T, N)`` array (kept iteration, agent).

    Args:
        source: a :class:`dgsgld.Trace` (its ``ensemble`` when stored, else its ``values``), a
            dict of streamed metrics (e.g. ``trace.ensemble`` of ``dgsgld.evaluate.combine``), or
            an array: ``(T, N)`` as is, ``(C, T, N)`` averaged over the chains.
        metric: the entry to take when the metrics are a dict.

    Returns:
        ``(T, N)`` float64.
    """
    values = source
    if hasattr(source, "ensemble") and hasattr(source, "values"):  # a dgsgld.Trace
        values = source.ensemble if source.ensemble is not None else source.values
        if values is None:
            raise ValueError(
                "`source` is a Trace without metrics: pass output=dgsgld.Output(ensemble_fn=...)"
                " or trace_fn=... to dgsgld.sample, or the metric array itself."
            )
    if isinstance(values, Mapping):
        if metric is None or metric not in values:
            raise ValueError(
                f"`source` holds the metrics {sorted(values)}; pick one with `metric=` "
                f"(got {metric!r})."
            )
        values = values[metric]
    elif metric is not None:
        raise ValueError(f"`metric` = {metric!r} given but `source` is not a dict of metrics.")
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 3:
        values = values.mean(axis=0)
    if values.ndim != 2:
        raise ValueError(
            "the per-agent metric must be (num_kept, num_agents), or (num_chains, num_kept, "
            f"num_agents) to average over chains; got shape {values.shape}."
        )
    return values


def iterations(num_kept: int, *, thin: int = 1, burn_in: int = 0) -> np.ndarray:
    """``(num_kept,)`` iterations ``burn_in, burn_in + thin, ...`` kept by
    ``dgsgld.Output(thin=thin, burn_in=burn_in)``."""
    return burn_in + thin * np.arange(num_kept)


def communication_bytes(mixing: Any, iterations: Any, floats_per_message: int, *,
                        itemsize: int = 4) -> np.ndarray:
    """Bytes the agents have sent in total before each of ``iterations``.

    At iteration ``k`` agent ``j`` sends each of its neighbours in ``W⁽ᵏ⁾`` (``W[i, j] != 0``,
    ``i != j``) one message of ``floats_per_message`` numbers: the parameter dimension ``d``
    for DE-SGLD, ``2 d`` for DIGing-SGLD and EXTRA-SGLD (positions and tracker / dual variable).

    Args:
        mixing: a schedule (anything with ``.matrices``, ``W⁽ᵏ⁾ = matrices[k % P]``) or a
            ``(P, N, N)`` / ``(N, N)`` array.
        iterations: ``(T,)`` non-negative iterations (e.g. :func:`iterations`).
        floats_per_message: numbers per message.
        itemsize: bytes per number (4 for float32).

    Returns:
        ``(T,)`` int64 cumulative bytes.
    """
    w = np.asarray(getattr(mixing, "matrices", mixing))
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3 or w.shape[1] != w.shape[2]:
        raise ValueError(
            f"`mixing` must be a schedule or a (P, N, N) array of mixing matrices; got shape "
            f"{w.shape}."
        )
    its = np.asarray(iterations)
    if its.ndim != 1 or not np.issubdtype(its.dtype, np.integer) or (its.size and its.min() < 0):
        raise ValueError(f"`iterations` must be a 1-D array of non-negative ints; got {its!r}.")
    for name, v in (("floats_per_message", floats_per_message), ("itemsize", itemsize)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"`{name}` must be a positive int; got {v!r}.")
    off = ~np.eye(w.shape[1], dtype=bool)
    messages = ((w != 0) & off).sum(axis=(1, 2))  # (P,) directed edges per snapshot
    period = len(messages)
    per_period = int(messages.sum())
    prefix = np.concatenate([[0], np.cumsum(messages)])  # messages in snapshots 0..r-1
    sent = (its // period) * per_period + prefix[its % period]
    return sent.astype(np.int64) * floats_per_message * itemsize


def mean_band(ax, x, mean, std=None, *, label: str | None = None, alpha: float = 0.25,
              **line_kwargs):
    """Draw ``mean`` against ``x`` and, when ``std`` is given, a band ``mean ± std`` in the
    line's colour; returns the line."""
    (line,) = ax.plot(x, mean, label=label, **line_kwargs)
    if std is not None:
        ax.fill_between(x, mean - std, mean + std, alpha=alpha, color=line.get_color(),
                        linewidth=0)
    return line


def agent_curves(ax, values, x=None, *, label: str | None = None, band: bool = True,
                 agents: bool = False, **line_kwargs):
    """Draw a per-agent metric on ``ax``: the mean over agents, a ±1 standard-deviation band
    across agents (``band``) and every agent's own thin line (``agents``).

    Args:
        ax: matplotlib axes.
        values: ``(T, N)`` per-agent metric, or anything :func:`per_agent` reads.
        x: ``(T,)`` x values (default ``0..T-1``).
        label: legend label of the mean line.
        band, agents: what to draw besides the mean.
        **line_kwargs: passed to the mean line (``color``, ``linestyle``, ...).

    Returns:
        The mean line.
    """
    values = per_agent(values)
    x = np.arange(len(values)) if x is None else np.asarray(x)
    if x.shape != values.shape[:1]:
        raise ValueError(
            f"`x` must have shape ({values.shape[0]},), one value per kept iteration; got "
            f"{x.shape}."
        )
    line = mean_band(ax, x, values.mean(axis=1), values.std(axis=1) if band else None,
                     label=label, **line_kwargs)
    if agents:
        ax.plot(x, values, color=line.get_color(), linewidth=0.5, alpha=0.5)
    return line


def plot_run(runs: Any, *, x: Any = None, thin: int = 1, burn_in: int = 0,
             xlabel: str = "iteration", ylabel: str = "per-agent metric",
             metric: str | None = None, network: Any = None, k: int = 0, pos: Any = None,
             band: bool = True, agents: bool = False, logy: bool = False,
             path: str | Path | None = None):
    """One figure: the runs' per-agent curves, and the network's snapshot ``k`` beside them.

    Args:
        runs: one run (anything :func:`per_agent` reads) or a dict ``label -> run``.
        x: ``(T,)`` x values shared by the runs (bytes, seconds, ...); default the
            iterations ``burn_in + thin * (0..T-1)``.
        thin, burn_in: the run's ``dgsgld.Output`` settings, for the default ``x``.
        xlabel, ylabel: axis labels.
        metric: which streamed metric to draw when the runs hold a dict of them.
        network: a schedule to draw beside the curves (``None``: curves only).
        k, pos: snapshot and agent positions for :func:`dgsgld.networks.draw_snapshot`.
        band, agents: as in :func:`agent_curves`.
        logy: logarithmic y axis (e.g. for W2).
        path: write the figure there (PNG, ...) and close it (matplotlib picks a
            non-interactive backend itself where there is no display).

    Returns:
        ``(figure, axes)``: the curves' axes first, then the network's.
    """
    plt = pyplot()  # the user's backend: writing a file needs no display
    named = runs if isinstance(runs, Mapping) and not _is_metric_dict(runs, metric) else {
        None: runs}
    curves = {label: per_agent(run, metric) for label, run in named.items()}
    ncols = 1 if network is None else 2
    fig, axes = plt.subplots(1, ncols, figsize=(5.5 * ncols, 4), squeeze=False,
                             gridspec_kw={"width_ratios": [1.4, 1][:ncols]})
    axes = list(axes[0])
    ax = axes[0]
    for label, values in curves.items():
        xs = iterations(len(values), thin=thin, burn_in=burn_in) if x is None else x
        agent_curves(ax, values, xs, label=label, band=band, agents=agents)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3, which="both")
    if any(label is not None for label in curves):
        ax.legend(fontsize=8)
    if network is not None:
        from ..networks import draw_snapshot

        draw_snapshot(network, k, ax=axes[1], pos=pos)
    fig.tight_layout()
    if path is not None:
        fig.savefig(Path(path), dpi=110)
        plt.close(fig)
    return fig, axes


def _is_metric_dict(runs: Mapping, metric: str | None) -> bool:
    """Whether ``runs`` is one run's dict of streamed metrics rather than ``label -> run``."""
    return metric is not None and metric in runs and not hasattr(runs[metric], "ensemble")
