"""Plots of the figures in the paper's layout (matplotlib, Agg backend, imported on use).

* :func:`plot_figure`: one figure's PNG with three panels — the paper's panel (metric against
  iteration, mean over agents with a ±1 standard-deviation band across agents, for DIGing-SGLD,
  DE-SGLD and the centralized SGLD reference), the consensus error, and the step-size tuning
  curve (final value against step size; chosen step and gradient-tuned step marked).
* :func:`plot_overview`: the paper's panels of several figures side by side.
"""

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dgsgld.evaluate.plots import mean_band, pyplot

from .figures import CENTRALIZED, FigureResult

__all__ = ["plot_figure", "plot_overview"]

_STYLE = {
    "DIGing-SGLD": {"color": "tab:blue", "linestyle": "-"},
    "DE-SGLD": {"color": "tab:orange", "linestyle": "-"},
    CENTRALIZED: {"color": "0.35", "linestyle": "--"},
}
_YLABEL = {"W2": "W2 distance to the posterior", "accuracy": "test accuracy"}


def _main_panel(ax, result: FigureResult, legend: bool = True) -> None:
    it = result.iterations
    for name, res in result.algorithms.items():
        style = _STYLE.get(name, {})
        label = f"{name} (η={res.step_size:.3g})"
        # The centralized reference has one "agent": no band.
        std = None if name == CENTRALIZED else res.std
        mean_band(ax, it, res.mean, std, label=label, linewidth=1.8, **style)
    for i, (label, level) in enumerate(result.references.items()):
        ax.axhline(level, color="0.6", linestyle=":", linewidth=1.2, label=label)
    if result.metric == "W2":
        ax.set_yscale("log")
    ax.set_xlabel("iteration")
    ax.set_ylabel(_YLABEL[result.metric])
    ax.set_xlim(it[0], it[-1])
    ax.set_title(result.title, fontsize=10)
    ax.grid(True, alpha=0.3, which="both")
    if legend:
        ax.legend(fontsize=8, loc="best")


def _consensus_panel(ax, result: FigureResult) -> None:
    for name, res in result.algorithms.items():
        if name == CENTRALIZED:
            continue
        ax.plot(
            result.iterations, np.maximum(res.consensus, 1e-12), label=name, **_STYLE.get(name, {})
        )
    ax.set_yscale("log")
    ax.set_xlabel("iteration")
    ax.set_ylabel("consensus error (RMS distance to the agents' mean)")
    ax.set_title("consensus error, root mean square over trials", fontsize=10)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)


def _tuning_panel(ax, result: FigureResult) -> None:
    lower_is_better = result.metric == "W2"
    # Unstable grid points reach astronomically large errors; show them at the top of a range
    # set by the stable ones (above twice the initial error counts as unstable for display).
    cap = 2.0 * max(float(r.mean[0]) for r in result.algorithms.values())
    shown = [r.grid_scores[~r.grid_diverged] for r in result.algorithms.values()]
    shown = np.concatenate(shown)
    if lower_is_better:
        shown = shown[shown <= cap]
    for name, res in result.algorithms.items():
        style = _STYLE.get(name, {})
        bad = res.grid_diverged | (res.grid_scores > cap if lower_is_better else False)
        ax.plot(
            res.grid[~bad], res.grid_scores[~bad], marker="o", markersize=3, label=name, **style
        )
        if bad.any():
            level = cap if lower_is_better else shown.min()
            ax.plot(
                res.grid[bad],
                np.full(bad.sum(), level),
                "x",
                color=style.get("color"),
                markersize=6,
            )
        best = int(np.argmin(np.abs(res.grid - res.step_size)))
        ax.plot(
            [res.step_size],
            [res.grid_scores[best]],
            marker="*",
            markersize=13,
            color=style.get("color"),
            markeredgecolor="k",
            linestyle="none",
        )
        if res.gradient is not None:
            ax.axvline(
                res.gradient.step_size,
                color=style.get("color"),
                linestyle=":",
                linewidth=1.5,
                label=f"{name}, gradient-tuned",
            )
    ax.set_xscale("log")
    if lower_is_better:
        ax.set_yscale("log")
    ax.set_xlabel("step size η (centralized SGLD: its own, 1/N scale)")
    ax.set_ylabel(f"final {_YLABEL[result.metric]}")
    ax.set_title("step-size tuning (★ chosen, × diverged or unstable)", fontsize=10)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=7)


def plot_figure(result: FigureResult, path: str | Path) -> Path:
    """Write one figure's three-panel PNG to ``path``; returns the path."""
    plt = pyplot(headless=True)
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [1.4, 1, 1]})
    _main_panel(axes[0], result)
    _consensus_panel(axes[1], result)
    _tuning_panel(axes[2], result)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_overview(results: Sequence[FigureResult], path: str | Path) -> Path:
    """The paper's panels of ``results`` in one row (e.g. Figure 2 (a)–(c)); returns the path."""
    plt = pyplot(headless=True)
    fig, axes = plt.subplots(1, len(results), figsize=(5.6 * len(results), 4.4), squeeze=False)
    for ax, result in zip(axes[0], results):
        _main_panel(ax, result)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
