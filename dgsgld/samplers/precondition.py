"""Constant preconditioners of the Langevin samplers: ``M`` positive definite, ``S Sᵀ = M``.

Every sampler takes ``preconditioner=`` (default ``None``: no preconditioning, and no extra
operation in the step). With one, each agent's drift ``η g`` becomes ``η M g`` and its noise
``√(2η) w`` becomes ``√(2η) S w``: for SGLD ``x⁺ = x − η M ∇̃f(x) + √(2η) S w``, whose
continuous limit ``dx = −M ∇f dx + √2 S dB`` keeps ``exp(−f)`` invariant for any constant
symmetric positive definite ``M``. The same ``M`` acts on every agent's row; what is mixed over
the network, tracked (DIGing's ``y`` still tracks ``Σ_i ∇̃f_i(x_i)``) or kept in the state is
unchanged. Each sampler's module says where ``M`` enters its update.

``M`` acts on the flattened parameters of one agent: the array leaves of the position in
``jax.tree.leaves`` order, each raveled row-major (the order of
``jax.flatten_util.ravel_pytree``), ``d`` numbers in all. Three representations:

* :class:`DensePreconditioner`: a ``(d, d)`` matrix, checked symmetric positive definite on
  the host; ``S`` is its lower Cholesky factor.
* :class:`DiagonalPreconditioner`: a flat ``(d,)`` vector, or one array per parameter leaf
  (a pytree shaped like the parameters); ``S = M^{1/2}``.
* :class:`LowRankPreconditioner`: ``M = D + U Uᵀ`` with a positive ``(d,)`` diagonal ``D``
  and a ``(d, k)`` factor ``U``; ``S = D^{1/2} (I + V B Vᵀ)`` with ``V = D^{-1/2} U`` and
  ``B = Q diag(1 / (1 + √(1 + λ))) Qᵀ`` from the ``k × k`` eigendecomposition
  ``VᵀV = Q diag(λ) Qᵀ``, so that ``(I + V B Vᵀ)² = I + V Vᵀ`` and ``S Sᵀ = M``: a square
  root that keeps ``w`` shaped like the position, at ``O(d k)`` per agent.

Each is an ``eqx.Module`` whose arrays are leaves: a new ``M`` of the same shapes reuses the
compiled run, and a checkpoint's fingerprint records it. ``apply`` (``M g``) and ``noise``
(``S w``) act on one agent's pytree; :func:`per_agent` applies them to every row of a network
state, whose leaves are ``(N, ...)``, or flat ``(N · size,)`` for the noise the runner passes
flat (:func:`dgsgld._util.tree.in_noise_shape`).
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util import tree as _tree
from .._util import validation as _validation
from .._util.types import Array, PyTree

__all__ = [
    "DensePreconditioner",
    "DiagonalPreconditioner",
    "LowRankPreconditioner",
    "Preconditioner",
    "as_preconditioner",
    "per_agent",
]

#: Relative asymmetry ``max |M − Mᵀ| / max |M|`` a dense matrix may have (float32 rounding of a
#: product such as ``X Xᵀ``); it is symmetrized before its Cholesky factor is taken.
SYMMETRY_TOL = 1e-5


def _refuse(why: str):
    raise ValueError(f"`preconditioner`: {why}.")


def _host(x, what: str, ndim: int | None = None) -> np.ndarray:
    """``x`` as a float64 NumPy array, checked finite (and of ``ndim`` dimensions)."""
    arr = np.asarray(x, dtype=np.float64)
    if ndim is not None and arr.ndim != ndim:
        _refuse(f"{what} must have {ndim} dimension{'s' if ndim != 1 else ''}; got shape "
                f"{arr.shape}")
    if arr.size == 0:
        _refuse(f"{what} is empty (shape {arr.shape})")
    if not np.isfinite(arr).all():
        _refuse(f"{what} has non-finite entries")
    return arr


def _stored(x) -> Array:
    """A preconditioner's array in the default float dtype (a host value transferred once; a
    traced one, e.g. under ``vmap``, kept traced)."""
    return _tree.as_float_array(x)


def _flatten(tree: PyTree) -> tuple[Array, Callable[[Array], PyTree]]:
    """``(flat (d,), unflatten)``: the leaves raveled and concatenated in ``jax.tree.leaves``
    order, and the map back to leaves of the input's shapes and dtypes."""
    leaves, treedef = jax.tree.flatten(tree)
    dtype = jnp.result_type(*leaves)
    flat = jnp.concatenate([jnp.ravel(leaf).astype(dtype) for leaf in leaves])

    def unflatten(vector: Array) -> PyTree:
        out, start = [], 0
        for leaf in leaves:
            size = int(np.prod(jnp.shape(leaf), dtype=np.int64))
            out.append(vector[start:start + size].reshape(jnp.shape(leaf)).astype(leaf.dtype))
            start += size
        return jax.tree.unflatten(treedef, out)

    return flat, unflatten


def _total(shapes) -> int:
    return int(sum(int(np.prod(s, dtype=np.int64)) for s in shapes))


class Preconditioner(eqx.Module):
    """A constant symmetric positive definite ``M`` on one agent's flattened parameters, with a
    square root ``S`` (``S Sᵀ = M``), the same on every agent (module docstring).

    Subclasses implement ``apply``, ``noise``, ``dense`` and ``check``.
    """

    def apply(self, tree: PyTree) -> PyTree:  # pragma: no cover - interface
        """``M g`` for one agent's ``g`` (leaves shaped like its parameters, or flat)."""
        raise NotImplementedError

    def noise(self, tree: PyTree) -> PyTree:  # pragma: no cover - interface
        """``S w`` for one agent's ``w`` (leaves shaped like its parameters, or flat)."""
        raise NotImplementedError

    def dense(self, xp=jnp) -> tuple[Array, Array]:  # pragma: no cover - interface
        """``(M (d, d), S (d, d))`` as matrices, in ``xp`` (``jax.numpy`` or ``numpy``)."""
        raise NotImplementedError

    def check(self, shapes: list[tuple[int, ...]]) -> None:  # pragma: no cover - interface
        """Raise a ``ValueError`` naming ``preconditioner`` unless it fits parameters whose
        array leaves have these shapes (one agent's)."""
        raise NotImplementedError


class DensePreconditioner(Preconditioner):
    """``M`` a dense ``(d, d)`` matrix on the flattened parameters; ``S`` its Cholesky factor.

    ``DensePreconditioner(matrix)``: ``matrix`` is checked on the host (a concrete value)
    to be square, finite, symmetric to :data:`SYMMETRY_TOL` relative and positive definite,
    else a ``ValueError`` naming ``preconditioner`` says which; it is then symmetrized.

    Attributes:
        matrix: ``(d, d)``, ``M``.
        root: ``(d, d)``, lower triangular ``S`` with ``S Sᵀ = M``.
    """

    matrix: Array
    root: Array

    def __init__(self, matrix):
        if _validation.is_concrete(matrix):
            m = _host(matrix, "the matrix", ndim=2)
            if m.shape[0] != m.shape[1]:
                _refuse(f"the matrix must be square (d, d); got shape {m.shape}")
            scale = float(np.max(np.abs(m)))
            asym = float(np.max(np.abs(m - m.T)))
            if asym > SYMMETRY_TOL * scale:
                _refuse(f"the matrix must be symmetric; max |M − Mᵀ| = {asym:.3g} "
                        f"(tolerance {SYMMETRY_TOL * scale:.3g})")
            m = 0.5 * (m + m.T)
            try:
                root = np.linalg.cholesky(m)
            except np.linalg.LinAlgError:
                smallest = float(np.linalg.eigvalsh(m)[0])
                _refuse(f"the matrix must be positive definite; its smallest eigenvalue is "
                        f"{smallest:.3g}")
            self.matrix, self.root = _stored(m), _stored(root)
        else:
            m = jnp.asarray(matrix)
            m = 0.5 * (m + m.T)
            self.matrix, self.root = m, jnp.linalg.cholesky(m)

    def apply(self, tree: PyTree) -> PyTree:
        """``M g`` on the flattened leaves of one agent's ``g``."""
        flat, unflatten = _flatten(tree)
        return unflatten(self.matrix.astype(flat.dtype) @ flat)

    def noise(self, tree: PyTree) -> PyTree:
        """``S w`` on the flattened leaves of one agent's ``w``."""
        flat, unflatten = _flatten(tree)
        return unflatten(self.root.astype(flat.dtype) @ flat)

    def dense(self, xp=jnp) -> tuple[Array, Array]:
        """``(M, S)``, each ``(d, d)``."""
        return xp.asarray(self.matrix), xp.asarray(self.root)

    def check(self, shapes) -> None:
        """``d`` must be the number of parameter entries."""
        d, total = self.matrix.shape[0], _total(shapes)
        if d != total:
            _refuse(f"a ({d}, {d}) matrix for parameters of {total} entries (one agent's "
                    f"leaves shaped {list(shapes)})")


class DiagonalPreconditioner(Preconditioner):
    """``M = diag(m)``, ``S = diag(√m)``, positive ``m``.

    ``DiagonalPreconditioner(diagonal)``: a flat ``(d,)`` array over the flattened parameters
    (module docstring), or a pytree shaped like the parameters whose array leaves are the
    diagonals of the matching parameter leaves (other leaves, such as an ``eqx.nn.MLP``'s
    activation, are ignored: ``eqx.filter(diagonal, eqx.is_array)``). Checked positive and
    finite on the host.

    Attributes:
        diagonal: the positive entries: a ``(d,)`` array, or a pytree of arrays shaped like
            the parameters' array leaves.
        flat: whether ``diagonal`` is one ``(d,)`` array over all parameters (static).
    """

    diagonal: PyTree
    flat: bool = eqx.field(static=True)

    def __init__(self, diagonal):
        if isinstance(diagonal, (list, tuple)) and all(
                isinstance(v, (int, float, np.number)) for v in diagonal):
            diagonal = np.asarray(diagonal, np.float64)   # a flat list of numbers
        flat = isinstance(diagonal, (np.ndarray, jax.Array)) and np.ndim(diagonal) == 1
        arrays = eqx.filter(diagonal, eqx.is_array)
        leaves = jax.tree.leaves(arrays)
        if not leaves:
            _refuse(f"the diagonal must be a (d,) array or a pytree of arrays; got "
                    f"{type(diagonal).__name__}")
        for leaf in leaves:
            if _validation.is_concrete(leaf):
                arr = _host(leaf, "the diagonal")
                if not (arr > 0).all():
                    _refuse(f"the diagonal must be positive; its smallest entry is "
                            f"{float(arr.min()):.3g}")
        self.diagonal = jax.tree.map(_stored, arrays)
        self.flat = bool(flat)

    def _parts(self, leaves) -> list:
        """The diagonal's entries of each leaf, shaped like it."""
        if self.flat:
            out, start = [], 0
            for leaf in leaves:
                size = int(np.prod(jnp.shape(leaf), dtype=np.int64))
                out.append(self.diagonal[start:start + size].reshape(jnp.shape(leaf)))
                start += size
            return out
        return [jnp.reshape(m, jnp.shape(leaf))
                for m, leaf in zip(jax.tree.leaves(self.diagonal), leaves)]

    def _scale(self, tree: PyTree, power: float) -> PyTree:
        leaves, treedef = jax.tree.flatten(tree)
        parts = self._parts(leaves)
        return jax.tree.unflatten(treedef, [
            leaf * (m if power == 1 else jnp.sqrt(m)).astype(leaf.dtype)
            for leaf, m in zip(leaves, parts)])

    def apply(self, tree: PyTree) -> PyTree:
        """``m ⊙ g`` leaf by leaf."""
        return self._scale(tree, 1.0)

    def noise(self, tree: PyTree) -> PyTree:
        """``√m ⊙ w`` leaf by leaf."""
        return self._scale(tree, 0.5)

    def dense(self, xp=jnp) -> tuple[Array, Array]:
        """``(diag(m), diag(√m))``, each ``(d, d)``."""
        m = xp.concatenate([xp.ravel(xp.asarray(leaf))
                            for leaf in jax.tree.leaves(self.diagonal)])
        return xp.diag(m), xp.diag(xp.sqrt(m))

    def check(self, shapes) -> None:
        """A flat diagonal must have ``d`` entries, a pytree one the parameters' leaf shapes."""
        shapes = [tuple(s) for s in shapes]
        if self.flat:
            d, total = self.diagonal.shape[0], _total(shapes)
            if d != total:
                _refuse(f"a ({d},) diagonal for parameters of {total} entries (one agent's "
                        f"leaves shaped {shapes})")
            return
        mine = [tuple(np.shape(m)) for m in jax.tree.leaves(self.diagonal)]
        if mine != shapes:
            _refuse(f"a diagonal with leaves shaped {mine} for parameters whose leaves are "
                    f"shaped {shapes} (one agent's)")


class LowRankPreconditioner(Preconditioner):
    """``M = D + U Uᵀ``: a positive diagonal plus a rank-``k`` term, on the flattened
    parameters, with the square root ``S = D^{1/2} (I + V B Vᵀ)`` of the module docstring.

    ``LowRankPreconditioner(diagonal, factor)``: ``diagonal`` ``(d,)`` positive, ``factor``
    ``(d, k)``; checked finite on the host.

    Attributes:
        diagonal: ``(d,)``, ``D``.
        factor: ``(d, k)``, ``U``.
        scaled: ``(d, k)``, ``V = D^{-1/2} U``.
        core: ``(k, k)``, ``B = Q diag(1 / (1 + √(1 + λ))) Qᵀ`` with ``VᵀV = Q diag(λ) Qᵀ``.
    """

    diagonal: Array
    factor: Array
    scaled: Array
    core: Array

    def __init__(self, diagonal, factor):
        if _validation.is_concrete_tree((diagonal, factor)):
            D = _host(diagonal, "the diagonal", ndim=1)
            U = _host(factor, "the factor", ndim=2)
            if U.shape[0] != D.shape[0]:
                _refuse(f"the factor must be (d, k) with d = {D.shape[0]} (the diagonal's); "
                        f"got shape {U.shape}")
            if not (D > 0).all():
                _refuse(f"the diagonal must be positive; its smallest entry is "
                        f"{float(D.min()):.3g}")
            V = U / np.sqrt(D)[:, None]
            lam, Q = np.linalg.eigh(V.T @ V)
            B = (Q / (1.0 + np.sqrt(1.0 + np.maximum(lam, 0.0)))) @ Q.T
        else:
            D, U = jnp.asarray(diagonal), jnp.asarray(factor)
            V = U / jnp.sqrt(D)[:, None]
            lam, Q = jnp.linalg.eigh(V.T @ V)
            B = (Q / (1.0 + jnp.sqrt(1.0 + jnp.maximum(lam, 0.0)))) @ Q.T
        self.diagonal, self.factor = _stored(D), _stored(U)
        self.scaled, self.core = _stored(V), _stored(B)

    def apply(self, tree: PyTree) -> PyTree:
        """``D g + U (Uᵀ g)`` on the flattened leaves of one agent's ``g``."""
        flat, unflatten = _flatten(tree)
        D, U = self.diagonal.astype(flat.dtype), self.factor.astype(flat.dtype)
        return unflatten(D * flat + U @ (U.T @ flat))

    def noise(self, tree: PyTree) -> PyTree:
        """``D^{1/2} (w + V (B (Vᵀ w)))`` on the flattened leaves of one agent's ``w``."""
        flat, unflatten = _flatten(tree)
        dtype = flat.dtype
        V, B = self.scaled.astype(dtype), self.core.astype(dtype)
        return unflatten(jnp.sqrt(self.diagonal.astype(dtype)) * (flat + V @ (B @ (V.T @ flat))))

    def dense(self, xp=jnp) -> tuple[Array, Array]:
        """``(D + U Uᵀ, D^{1/2} (I + V B Vᵀ))``, each ``(d, d)``."""
        D, U = xp.asarray(self.diagonal), xp.asarray(self.factor)
        V, B = xp.asarray(self.scaled), xp.asarray(self.core)
        eye = xp.eye(D.shape[0], dtype=D.dtype)
        return xp.diag(D) + U @ U.T, xp.sqrt(D)[:, None] * (eye + V @ B @ V.T)

    def check(self, shapes) -> None:
        """``d`` must be the number of parameter entries."""
        d, total = self.diagonal.shape[0], _total(shapes)
        if d != total:
            _refuse(f"a rank-{self.factor.shape[1]} plus diagonal matrix of size d = {d} for "
                    f"parameters of {total} entries (one agent's leaves shaped "
                    f"{list(shapes)})")


def as_preconditioner(value) -> Preconditioner | None:
    """The converter of the samplers' ``preconditioner`` field: ``None`` or a
    :class:`Preconditioner`, else a ``ValueError`` naming ``preconditioner``."""
    if value is None or isinstance(value, Preconditioner):
        return value
    raise ValueError(
        "`preconditioner` must be None or a dgsgld.samplers Preconditioner "
        "(DensePreconditioner(matrix), DiagonalPreconditioner(diagonal), "
        f"LowRankPreconditioner(diagonal, factor)); got {type(value).__name__}.")


def per_agent(fn: Callable[[PyTree], PyTree], tree: PyTree, position: PyTree,
              decentralized: bool) -> PyTree:
    """``fn`` (a preconditioner's ``apply`` or ``noise``) on every agent's row of ``tree``.

    Args:
        fn: one agent's pytree -> a pytree of the same shapes.
        tree: leaves shaped like ``position``'s or flat ``(size,)`` (the runner's noise).
        position: the state's position, leaves ``(N, *param_shape)`` (``(*param_shape)`` for
            a centralized sampler): the rows and the parameters' shapes.
        decentralized: whether the leaves carry the agent axis first.

    Returns:
        ``tree``'s structure and leaf shapes.
    """
    leaves = jax.tree.leaves(position)
    if not decentralized:
        return fn(tree)
    rows = jnp.shape(leaves[0])[0]
    split = jax.tree.map(lambda leaf: jnp.reshape(leaf, (rows, -1)), tree)
    out = jax.vmap(fn)(split)
    return jax.tree.map(lambda o, leaf: jnp.reshape(o, jnp.shape(leaf)), out, tree)


def parameter_shapes(position: PyTree, decentralized: bool) -> list[tuple[int, ...]]:
    """One agent's parameter leaf shapes from a position (its agent axis dropped)."""
    return [tuple(jnp.shape(leaf)[1 if decentralized else 0:])
            for leaf in jax.tree.leaves(position)]
