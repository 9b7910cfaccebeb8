"""Pictures of one snapshot of a schedule, like the paper's Figure 1 (matplotlib is optional)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["draw_snapshot"]


def draw_snapshot(
    schedule: Any,
    k: int = 0,
    ax: Any = None,
    *,
    layout: str = "kamada_kawai",
    pos: Any = None,
    seed: int = 0,
    edge_weights: bool = True,
    **draw_kwargs: Any,
) -> Any:
    """Draw the communication graph of snapshot ``k % P`` with networkx and matplotlib.

    Args:
        schedule: :class:`~dgsgld.networks.Schedule` (or anything with ``.matrices``, or a
            ``(P, N, N)`` array); edges come from its adjacency when known, else nonzero weights.
        k: iteration; snapshot ``k % P`` is drawn.
        ax: matplotlib axes; a new figure is made when ``None``.
        layout: ``"kamada_kawai"`` (needs scipy; falls back to spring), ``"spring"`` or
            ``"circular"``; ignored when ``pos`` is given.
        pos: the agents' positions, a dict ``agent -> (x, y)`` (e.g. networkx's
            ``nx.get_node_attributes(graph, "pos")`` of a random geometric graph) or an
            ``(N, 2)`` array; ``None`` computes them with ``layout``.
        seed: seed of the spring layout.
        edge_weights: scale edge widths by the mixing weights ``W[i, j]``.
        **draw_kwargs: passed to ``networkx.draw_networkx``.

    Returns:
        The matplotlib axes.
    """
    import matplotlib.pyplot as plt  # lazy: matplotlib stays an optional dependency
    import networkx as nx

    w = np.asarray(getattr(schedule, "matrices", schedule), dtype=np.float64)
    if w.ndim == 2:
        w = w[None]
    p = k % w.shape[0]
    adjacency = getattr(schedule, "adjacency", None)
    adj = np.asarray(adjacency[p]) if adjacency is not None else w[p] != 0
    adj = adj & ~np.eye(adj.shape[0], dtype=bool)
    graph = nx.from_numpy_array(adj.astype(np.int8))

    if pos is not None:
        pos = _positions(pos, graph.number_of_nodes())
    elif layout == "kamada_kawai":
        try:
            pos = nx.kamada_kawai_layout(graph)
        except ImportError:
            pos = nx.spring_layout(graph, seed=seed)
    elif layout == "spring":
        pos = nx.spring_layout(graph, seed=seed)
    elif layout == "circular":
        pos = nx.circular_layout(graph)
    else:
        raise ValueError(
            f"unknown layout {layout!r}; expected 'kamada_kawai', 'spring' or 'circular'."
        )

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4))
    if edge_weights and graph.number_of_edges():
        widths = np.array([w[p, i, j] for i, j in graph.edges])
        draw_kwargs.setdefault("width", 0.5 + 2.5 * widths / widths.max())
    draw_kwargs.setdefault("node_color", "#8fb8de")
    draw_kwargs.setdefault("node_size", 300)
    draw_kwargs.setdefault("font_size", 8)
    nx.draw_networkx(graph, pos, ax=ax, **draw_kwargs)
    name = getattr(schedule, "name", "schedule")
    ax.set_title(f"{name}: snapshot k = {k} (matrix {p})")
    ax.set_axis_off()
    return ax


def _positions(pos: Any, num_agents: int) -> dict:
    """``pos`` (a dict ``agent -> (x, y)`` or an ``(N, 2)`` array) as networkx's dict."""
    if isinstance(pos, dict):
        missing = sorted(set(range(num_agents)) - set(pos))
        if missing:
            raise ValueError(
                f"`pos` has no position for agents {missing[:10]}; it needs one per agent "
                f"0..{num_agents - 1}."
            )
        pos = np.array([pos[i] for i in range(num_agents)], dtype=np.float64)
    pos = np.asarray(pos, dtype=np.float64)
    if pos.shape != (num_agents, 2):
        raise ValueError(
            f"`pos` must give (x, y) for each of the {num_agents} agents, shape "
            f"({num_agents}, 2); got shape {pos.shape}."
        )
    if not np.all(np.isfinite(pos)):
        raise ValueError("`pos` holds non-finite positions.")
    return {i: pos[i] for i in range(num_agents)}
