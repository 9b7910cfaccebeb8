"""Edge-weight rules turning an undirected graph into a symmetric, doubly stochastic matrix.

Every rule here takes an adjacency of shape ``(N, N)`` or a stack ``(P, N, N)`` (NumPy, JAX, or,
for a single graph, a networkx graph) and returns float64 NumPy weights of the same shape with
``W[i, j] = W[j, i] >= 0``, ``W[i, j] = 0`` off the graph and every row and column summing to 1.
Mixing convention used throughout dgsgld: ``x⁺ = W @ x``, so ``W[i, j]`` is the weight agent ``i``
puts on agent ``j``. Degrees never count self-loops; a nonzero diagonal in the adjacency is ignored.

These run on the host at set-up time (NumPy, optionally networkx); never call them inside ``jit``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "as_adjacency",
    "metropolis_weights",
    "metropolis_hastings_weights",
    "max_degree_weights",
    "fastest_mixing_weights",
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


def _project_node_sums(p: np.ndarray, incident: list[np.ndarray]) -> np.ndarray:
    """``p (P, E)`` made feasible: ``p ≥ 0`` and, node after node, each node's incident weights
    projected onto ``{z ≥ 0, Σ z ≤ 1}`` (the sequential projection of Boyd, Diaconis & Xiao;
    a later node only lowers weights, so earlier nodes stay feasible)."""
    p = np.maximum(p, 0.0)
    for edges in incident:
        if edges.size == 0:
            continue
        z = p[:, edges]
        over = z.sum(axis=1) > 1.0
        if not over.any():
            continue
        # Euclidean projection of the offending rows onto the simplex {z ≥ 0, Σ z = 1}.
        v = np.sort(z[over], axis=1)[:, ::-1]
        cum = np.cumsum(v, axis=1) - 1.0
        ranks = np.arange(1, v.shape[1] + 1)
        count = np.sum(v - cum / ranks > 0, axis=1)
        shift = cum[np.arange(len(count)), count - 1] / count
        z[over] = np.maximum(z[over] - shift[:, None], 0.0)
        p[:, edges] = z
    return p


def fastest_mixing_weights(adjacency: Any, num_iterations: int = 2000,
                           step: float = 0.1) -> np.ndarray:
    """Fastest-mixing weights (Boyd, Diaconis & Xiao 2004): the symmetric doubly stochastic
    ``W`` on the graph with the smallest second largest eigenvalue modulus
    ``μ(W) = max(λ₂, −λ_N)`` (largest spectral gap ``1 − μ``), per snapshot.

    The projected subgradient method of that paper on ``W = I − Σ_e p_e (e_i − e_j)(e_i − e_j)ᵀ``:
    with ``u`` a unit eigenvector of ``λ₂`` (when ``μ = λ₂``) the subgradient of ``μ`` is
    ``−(u_i − u_j)²`` per edge, with ``v`` one of ``λ_N`` (when ``μ = −λ_N``) it is
    ``(v_i − v_j)²``; steps ``step / √k`` along the normalized subgradient, each followed by the
    projection onto ``{p ≥ 0, Σ_{e ∋ i} p_e ≤ 1}``; the best iterate is kept. It starts from the
    max-degree weights. The SDP's optimum is approached, not certified: the result's gap is
    never below the start's.

    Args:
        adjacency: graph, ``(N, N)`` or ``(P, N, N)`` adjacency (see :func:`as_adjacency`).
        num_iterations: subgradient iterations.
        step: the first step length (the normalized subgradient has unit norm).

    Returns:
        float64 array, same shape as the adjacency: symmetric and doubly stochastic.

    Example:
        >>> import numpy as np
        >>> path = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]])
        >>> np.round(fastest_mixing_weights(path), 3)
        array([[0.5, 0.5, 0. ],
               [0.5, 0. , 0.5],
               [0. , 0.5, 0.5]])
    """
    if isinstance(num_iterations, bool) or not isinstance(num_iterations, (int, np.integer)) \
            or num_iterations < 1:
        raise ValueError(f"fastest_mixing_weights: num_iterations must be an integer >= 1, "
                         f"got {num_iterations!r}")
    if not (np.isscalar(step) and step > 0):
        raise ValueError(f"fastest_mixing_weights: step must be a positive number, got {step!r}")
    adj = as_adjacency(adjacency)
    single = adj.ndim == 2
    stack = adj[None] if single else adj
    n = stack.shape[-1]
    i, j = np.nonzero(np.triu(stack.any(axis=0), 1))
    mask = stack[:, i, j]                                              # (P, E)
    incident = [np.flatnonzero((i == a) | (j == a)) for a in range(n)]
    d_max = stack.sum(axis=-1).max(axis=-1).astype(np.float64)
    p = mask / (1.0 + d_max)[:, None]

    def matrices(p):
        w = np.zeros(stack.shape)
        w[:, i, j] = w[:, j, i] = p
        w[:, np.arange(n), np.arange(n)] = 1.0 - w.sum(axis=-1)
        return w

    def slem(p):
        lam, vec = np.linalg.eigh(matrices(p))       # ascending; lam[:, -1] = 1
        second, last = lam[:, -2], lam[:, 0]
        return np.maximum(second, -last), second >= -last, vec[:, :, -2], vec[:, :, 0]

    best_p, (best_mu, *_) = p.copy(), slem(p)
    for k in range(1, int(num_iterations) + 1):
        mu, top, u, v = slem(p)
        better = mu < best_mu
        best_p[better], best_mu = p[better], np.minimum(mu, best_mu)
        g = np.where(top[:, None], -(u[:, i] - u[:, j]) ** 2, (v[:, i] - v[:, j]) ** 2) * mask
        norm = np.linalg.norm(g, axis=1, keepdims=True)
        p = _project_node_sums(p - step / np.sqrt(k) * g / np.where(norm > 0, norm, 1.0),
                               incident) * mask
    mu = slem(p)[0]
    best_p[mu < best_mu] = p[mu < best_mu]
    w = matrices(best_p)
    return w[0] if single else w


WEIGHT_RULES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "metropolis": metropolis_weights,
    "metropolis_hastings": metropolis_hastings_weights,
    "max_degree": max_degree_weights,
    "fastest_mixing": fastest_mixing_weights,
}


def get_weight_rule(weights: str | Callable[[np.ndarray], np.ndarray], eps: float = 1e-6):
    """A rule by name (``"metropolis"``, ``"metropolis_hastings"``, ``"max_degree"``,
    ``"fastest_mixing"``) or callable.

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
