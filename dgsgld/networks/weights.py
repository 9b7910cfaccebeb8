"""Edge-weight rules turning an undirected graph into a symmetric, doubly stochastic matrix.

Every rule here takes an adjacency of shape ``(N, N)`` or a stack ``(P, N, N)`` (NumPy, JAX, or,
for a single graph, a networkx graph) and returns float64 NumPy weights of the same shape with
``W[i, j] = W[j, i] >= 0``, ``W[i, j] = 0`` off the graph and every row and column summing to 1.
Mixing convention used throughout dgsgld: ``x⁺ = W @ x``, so ``W[i, j]`` is the weight agent ``i``
puts on agent ``j``. Degrees never count self-loops; a nonzero diagonal in the adjacency is ignored.

These run on the host at set-up time (NumPy, optionally networkx); never call them inside ``jit``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sys

import numpy as np

__all__ = [
    "as_adjacency",
    "metropolis_weights",
    "metropolis_hastings_weights",
    "max_degree_weights",
    "get_weight_rule",
    "WEIGHT_RULES",
]


def _is_graph(obj: Any) -> bool:
    """Whether ``obj`` is a networkx graph, without importing networkx (lazy: an object cannot
    be a networkx graph unless networkx is already loaded)."""
    nx = sys.modules.get("networkx")
    return nx is not None and isinstance(obj, nx.Graph)


def as_adjacency(adjacency: Any) -> np.ndarray:
    """Boolean adjacency with an empty diagonal.

    Args:
        adjacency: a networkx graph (nodes in ``graph.nodes`` order; an integer-labelled graph
            ``0..N-1`` is taken in label order) or an array of shape ``(N, N)`` or ``(P, N, N)``
            whose nonzero off-diagonal entries are edges.

    Returns:
        bool array of shape ``(N, N)`` or ``(P, N, N)``, symmetric, ``False`` on the diagonal.

    Raises:
        ValueError: if the array is not square or not symmetric (the graph must be undirected).
    """
    if _is_graph(adjacency):
        import networkx as nx

        if adjacency.is_directed():
            raise ValueError(
                "adjacency: expected an undirected graph, got a directed networkx graph"
            )
        nodes = list(adjacency.nodes)
        # Integer labels 0..N-1 are agent indices: keep label order, not insertion order.
        if all(isinstance(v, int) for v in nodes) and set(nodes) == set(range(len(nodes))):
            nodes = list(range(len(nodes)))
        adj = nx.to_numpy_array(adjacency, nodelist=nodes, weight=None) != 0
    else:
        adj = np.asarray(adjacency) != 0
    if adj.ndim not in (2, 3) or adj.shape[-1] != adj.shape[-2]:
        raise ValueError(f"adjacency: expected shape (N, N) or (P, N, N), got {adj.shape}")
    if not np.array_equal(adj, np.swapaxes(adj, -1, -2)):
        raise ValueError("adjacency: not symmetric; the communication graph must be undirected")
    adj = adj.copy()
    n = adj.shape[-1]
    adj[..., np.arange(n), np.arange(n)] = False
    return adj


def _weights_from_edge_values(adj: np.ndarray, edge_value: np.ndarray) -> np.ndarray:
    """``edge_value`` on the edges of ``adj``; the complement of each row sum on the diagonal."""
    w = np.where(adj, edge_value, 0.0)
    n = adj.shape[-1]
    w[..., np.arange(n), np.arange(n)] = 1.0 - w.sum(axis=-1)
    return w


def metropolis_weights(adjacency: Any, eps: float = 1e-6) -> np.ndarray:
    """Metropolis constant edge-weight rule of the paper, eq. (4.1).

    ``W_ij = 1 / (max(deg_i, deg_j) + eps)`` on edges, ``0`` off the graph and
    ``W_ii = 1 − Σ_{j≠i} W_ij``. Each of the ``deg_i`` terms of row ``i`` is at most
    ``1/(deg_i + eps)``, so the diagonal is at least ``eps / (deg_i + eps) > 0``: tiny, but
    positive, which is what makes the chain aperiodic. With ``eps → 0`` a bipartite graph (even
    ring, star, grid) gets an eigenvalue near ``−1``; prefer :func:`metropolis_hastings_weights`
    there.

    Args:
        adjacency: graph, ``(N, N)`` or ``(P, N, N)`` adjacency (see :func:`as_adjacency`).
        eps: the paper's ``ε̂ > 0`` (``1e-6`` in its experiments).

    Returns:
        float64 array, same shape as the adjacency: symmetric and doubly stochastic.

    Example:
        >>> import numpy as np
        >>> path = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]])
        >>> np.round(metropolis_weights(path, eps=0.0), 3)
        array([[0.5, 0.5, 0. ],
               [0.5, 0. , 0.5],
               [0. , 0.5, 0.5]])
    """
    if not eps >= 0:
        raise ValueError(f"metropolis_weights: eps must be >= 0, got {eps}")
    adj = as_adjacency(adjacency)
    deg = adj.sum(axis=-1).astype(np.float64)
    max_deg = np.maximum(deg[..., :, None], deg[..., None, :])
    with np.errstate(divide="ignore"):  # 1/0 only where there is no edge, masked out below
        edge = 1.0 / (max_deg + eps)
    return _weights_from_edge_values(adj, edge)


def metropolis_hastings_weights(adjacency: Any) -> np.ndarray:
    """The common Metropolis–Hastings rule ``W_ij = 1 / (1 + max(deg_i, deg_j))`` on edges.

    Diagonal ``W_ii = 1 − Σ_{j≠i} W_ij ≥ 1/(1 + deg_i)``, so every agent keeps a real share of its
    own value (no near-periodic behaviour on bipartite graphs, unlike eq. (4.1) with small ``eps``).

    Args:
        adjacency: graph, ``(N, N)`` or ``(P, N, N)`` adjacency (see :func:`as_adjacency`).

    Returns:
        float64 array, same shape as the adjacency: symmetric and doubly stochastic.

    Example:
        >>> import numpy as np
        >>> path = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]])
        >>> np.round(metropolis_hastings_weights(path), 3)
        array([[0.667, 0.333, 0.   ],
               [0.333, 0.333, 0.333],
               [0.   , 0.333, 0.667]])
    """
    return metropolis_weights(adjacency, eps=1.0)


def max_degree_weights(adjacency: Any) -> np.ndarray:
    """Max-degree rule: one weight ``1 / (1 + d_max)`` on every edge (``d_max``: largest degree).

    Computed per matrix for a stack. ``W_ii = 1 − deg_i / (1 + d_max) ≥ 1/(1 + d_max) > 0``.

    Args:
        adjacency: graph, ``(N, N)`` or ``(P, N, N)`` adjacency (see :func:`as_adjacency`).

    Returns:
        float64 array, same shape as the adjacency: symmetric and doubly stochastic.

    Example:
        >>> import numpy as np
        >>> path = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]])
        >>> np.round(max_degree_weights(path), 3)
        array([[0.667, 0.333, 0.   ],
               [0.333, 0.333, 0.333],
               [0.   , 0.333, 0.667]])
    """
    adj = as_adjacency(adjacency)
    d_max = adj.sum(axis=-1).max(axis=-1).astype(np.float64)
    edge = 1.0 / (1.0 + d_max)[..., None, None]
    return _weights_from_edge_values(adj, np.broadcast_to(edge, adj.shape))


WEIGHT_RULES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "metropolis": metropolis_weights,
    "metropolis_hastings": metropolis_hastings_weights,
    "max_degree": max_degree_weights,
}


def get_weight_rule(weights: str | Callable[[np.ndarray], np.ndarray], eps: float = 1e-6):
    """A rule by name (``"metropolis"``, ``"metropolis_hastings"``, ``"max_degree"``) or callable.

    A callable receives a bool adjacency ``(N, N)`` and must return the ``(N, N)`` weights; ``eps``
    applies to ``"metropolis"`` only.
    """
    if callable(weights):
        return weights
    if weights == "metropolis":
        return lambda adj: metropolis_weights(adj, eps=eps)
    if weights in WEIGHT_RULES:
        return WEIGHT_RULES[weights]
    raise ValueError(
        f"unknown weight rule {weights!r}; expected one of {sorted(WEIGHT_RULES)} or a callable"
    )
