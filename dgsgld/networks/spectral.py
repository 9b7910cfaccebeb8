"""Spectral diagnostics of a schedule, the quantities of Assumption 3.2(iii) that feed the theory.

Everything runs in float64 NumPy on the host. Windows follow eq. (3.9),
``W_B⁽ᵏ⁾ = W⁽ᵏ⁾ W⁽ᵏ⁻¹⁾ ⋯ W⁽ᵏ⁻ᴮ⁺¹⁾``, with cyclic indexing ``W⁽ᵏ⁾ = matrices[k % P]``: for a schedule
repeated forever, ``sup_{k ≥ B−1} δ(k)`` is the maximum over the ``P`` windows ending at
``k = 0, …, P−1`` (windows wrap around the period).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["spectral_gap", "delta", "Delta", "smallest_joint_connectivity_window", "union_graph"]


def _as_stack(schedule: Any) -> np.ndarray:
    """Float64 ``(P, N, N)`` from a Schedule (anything with ``.matrices``) or an array."""
    w = np.asarray(getattr(schedule, "matrices", schedule), dtype=np.float64)
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3 or w.shape[1] != w.shape[2]:
        raise ValueError(f"expected a (P, N, N) stack of mixing matrices; got shape {w.shape}.")
    return w


def _centred(w: np.ndarray) -> np.ndarray:
    # For doubly stochastic W, (W₁ − J)(W₂ − J) = W₁W₂ − J with J = 11ᵀ/N, so centring each
    # factor once gives W_B − J for every window without forming J-products, and keeps round-off
    # small.
    return w - 1.0 / w.shape[-1]


def _sigma_max(m: np.ndarray) -> np.ndarray:
    """Largest singular value of each matrix of a ``(P, N, N)`` stack."""
    return np.linalg.svd(m, compute_uv=False)[..., 0]


def spectral_gap(schedule: Any) -> np.ndarray:
    """Per-matrix spectral gap ``1 − σ_max(W⁽ᵏ⁾ − 11ᵀ/N)``.

    For a symmetric doubly stochastic ``W`` this is ``1 −`` (largest ``|λ|`` over eigenvectors
    ⟂ 1), i.e. one minus the second largest eigenvalue modulus; it is 0 exactly when the snapshot is
    disconnected (or periodic).

    Args:
        schedule: :class:`Schedule` or ``(P, N, N)`` / ``(N, N)`` array.

    Returns:
        ``(P,)`` float64 array.

    Example:
        >>> import numpy as np
        >>> spectral_gap(np.full((1, 4, 4), 0.25))
        array([1.])
    """
    w = _as_stack(schedule)
    centred = _centred(w)
    # Symmetric input: eigenvalues are cheaper than an SVD; fall back to the SVD otherwise.
    if np.allclose(centred, np.swapaxes(centred, 1, 2), atol=1e-12):
        sigma = np.abs(np.linalg.eigvalsh(centred)).max(axis=-1)
    else:
        sigma = _sigma_max(centred)
    return 1.0 - sigma


class Delta(NamedTuple):
    """``δ`` of Assumption 3.2(iii) for one window length ``B``.

    Attributes:
        per_k: ``(P,)`` float64, ``δ(k) = σ_max(W_B⁽ᵏ⁾ − 11ᵀ/N)`` for the window ending at ``k``.
        sup: ``max_k δ(k)``, the ``δ`` of the assumption for a schedule used cyclically.
    """

    per_k: np.ndarray
    sup: float


def _window_products(centred: np.ndarray, window: int):
    """Yield ``(B, W_B⁽ᵏ⁾ − J for k = 0..P−1)`` for ``B = 1, …, window``."""
    period = centred.shape[0]
    ks = np.arange(period)
    prod = centred.copy()
    yield 1, prod
    for b in range(2, window + 1):
        # Right-multiply by the older matrix W^(k−b+1): W_b^(k) = W_{b−1}^(k) W^(k−b+1).
        prod = prod @ centred[(ks - b + 1) % period]
        yield b, prod


def delta(schedule: Any, window: int) -> Delta:
    """``δ(k)`` for every ``k`` in one period, and ``δ = sup_k δ(k)``, for windows of length ``B``.

    Args:
        schedule: :class:`Schedule` or ``(P, N, N)`` array (symmetric, doubly stochastic).
        window: ``B >= 1``; may exceed ``P`` (windows then wrap around the period several times).

    Returns:
        :class:`Delta` ``(per_k, sup)``.

    Example:
        >>> import numpy as np
        >>> swap = np.array([[[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]],
        ...                  [[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.5, 0.5]]])
        >>> round(delta(swap, 1).sup, 6), round(delta(swap, 2).sup, 6)
        (1.0, 0.5)
    """
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"`window` must be an integer >= 1; got {window!r}.")
    *_, (_, prod) = _window_products(_centred(_as_stack(schedule)), int(window))
    per_k = _sigma_max(prod)
    return Delta(per_k, float(per_k.max()))


def union_graph(schedule: Any) -> nx.Graph:
    """Union over one period of the communication graphs (nonzero off-diagonal weights)."""
    import networkx as nx

    w = _as_stack(schedule)
    adj = (w != 0).any(axis=0)
    np.fill_diagonal(adj, False)
    return nx.from_numpy_array(adj.astype(np.int8))


def smallest_joint_connectivity_window(
    schedule: Any, max_window: int | None = None, *, tol: float = 1e-9, warn: bool = True
) -> int | None:
    """The smallest ``B`` with ``δ = sup_k σ_max(W_B⁽ᵏ⁾ − 11ᵀ/N) < 1 − tol``, or ``None``.

    ``tol`` separates a genuine contraction from round-off around ``δ = 1`` (a disconnected window
    has ``δ = 1`` exactly). If the union of the graphs over a whole period is disconnected, no
    ``B`` exists at all and ``None`` is returned at once; otherwise ``B`` is searched up to
    ``max_window``.
    When ``None`` is returned a ``UserWarning`` says why (unless ``warn=False``).

    Args:
        schedule: :class:`Schedule` or ``(P, N, N)`` array.
        max_window: largest ``B`` tried; default ``2 P`` (with positive diagonals, a period whose
            union graph is connected already gives ``δ < 1`` at ``B = P``).
        tol: margin below 1 that counts as ``δ < 1``.
        warn: whether to warn when returning ``None``.

    Returns:
        ``B`` (int) or ``None``.

    Example:
        >>> import numpy as np
        >>> swap = np.array([[[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]],
        ...                  [[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.5, 0.5]]])
        >>> smallest_joint_connectivity_window(swap)
        2
    """
    w = _as_stack(schedule)
    period = w.shape[0]
    limit = 2 * period if max_window is None else int(max_window)
    if limit < 1:
        raise ValueError(f"`max_window` must be >= 1; got {max_window!r}.")
    import networkx as nx

    union = union_graph(w)
    if w.shape[-1] > 1 and not nx.is_connected(union):
        if warn:
            parts = nx.number_connected_components(union)
            warnings.warn(
                f"no window B gives δ < 1: the union of all {period} graphs of the period has "
                f"{parts} connected components, so Assumption 3.2(iii) fails for every B.",
                stacklevel=2,
            )
        return None
    best = np.inf
    for b, prod in _window_products(_centred(w), limit):
        sup = float(_sigma_max(prod).max())
        best = min(best, sup)
        if sup < 1.0 - tol:
            return b
    if warn:
        warnings.warn(
            f"no window B <= {limit} gives δ < 1 - {tol:g} (smallest sup_k δ(k) seen: {best!r}); "
            f"try a larger max_window.",
            stacklevel=2,
        )
    return None
