"""Agent potentials built from a user's log-likelihood and log-prior, with their gradients.

Agent ``i`` holds data ``D_i`` and the potential (eqs. 4.2, 4.3 of the paper)

    f_i(x) = -sum_{d in D_i} log p(d | x) - log p(x) / N,

so that ``sum_i f_i`` is the negative log-posterior. Gradients come from ``jax.grad``; the
per-datum log-likelihood is ``vmap``-ed over the local data. The stochastic estimator draws a
mini-batch ``S`` of ``b`` local data inside the compiled loop and returns the unbiased

    (n_i / b) sum_{d in S} grad(-log p(d | x)) + grad(-log p(x)) / N.

Mini-batches without replacement are uniform over the ``C(n_i, b)`` subsets. When these are few
(``_MAX_SUBSET_ENTRIES``), they are tabulated once and a step draws one 32-bit word per agent,
``subset = word mod C(n_i, b)``, cheaper at paper size than any ranking of the ``n_i`` data.
Otherwise :func:`distinct_batch` runs Floyd's algorithm on ``b`` words, whatever ``n_i`` and
``b <= n_i``: ``b`` compares per slot and one pass of a ``b``-gather (a few when taken slots
chain), so a step costs what a step with replacement costs at every ``n_i`` (measured in
``benchmarks/datasize.md``). Redrawing repeats in a ``while_loop`` would run under ``vmap``
whenever any chain or agent drew one, and ranking ``n_i`` uniforms (``top_k``) costs O(n_i).
With replacement each index is ``word mod n_i``. (``mod`` favours some values by at most
``count / 2**32`` relative probability, far below Monte Carlo error.)

Clipping (``clip=C``, for differential privacy: :mod:`dgsgld.evaluate.privacy`): every
per-datum gradient ``∇(−log p(d | x))`` is scaled to global norm (over all parameter leaves)
at most ``C`` before the sum, ``clip_C(g) = g · min(1, C / ‖g‖)``, in every gradient of the
data term (mini-batch, full batch, the estimators' anchors and tables, a device's rows); the
prior's gradient is data-independent and is not clipped. The data term keeps its value; only
its gradient is clipped (a custom JVP, :func:`_clipped_data_value`), so that every caller of
``jax.grad`` of it takes the clipped gradient. The clipped drift ``Σ_d clip_C(∇ℓ_d)`` is in
general the gradient of no potential; it is one for a linear-Gaussian likelihood, where
``clip_C((zᵀx − y) z) = ψ_{C/‖z‖}(zᵀx − y) z`` with ``ψ_c(r) = max(−c, min(c, r))``, the
derivative of Huber's loss ``H_c``: clipped Langevin dynamics then sample the posterior of
a Huber regression, ``exp(−Σ_d σ⁻² H_{c_d}(zᵀx − y) − (−log p(x)))``.
"""

import functools
import itertools
import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._util import params as _params
from .._util import private as _private
from .._util import validation as _validation
from .._util.types import Array, PRNGKey, PyTree
from . import ppl

__all__ = ["Potential", "clip_rows", "distinct_batch", "first_occurrences", "pad_agent_data",
           "stack_potentials"]

#: Largest table of mini-batch subsets (entries N * max_i C(n_i, b) * b) kept on a Potential.
_MAX_SUBSET_ENTRIES = 2**18

#: Largest ``b`` whose repeats are found by comparing every slot with every earlier one
#: (``b - 1`` shifted compares, fused; on CPU no slower than a sort up to this size);
#: larger batches sort ``(value, slot)`` pairs.
_COMPARE_MAX = 256


def first_occurrences(idx: Array) -> Array:
    """``(b,)`` booleans: slot ``s`` holds the first (lowest-slot) copy of its value in ``idx``.

    Which slots count as repeats depends only on which values are equal, never on the values.
    For ``b <= _COMPARE_MAX`` slot ``s`` is compared with slot ``s - k`` for ``k = 1..b-1``
    (elementwise, one fusion), else one sort of ``(value, slot)`` pairs, ``O(b log b)``.
    """
    b = idx.shape[0]
    slots = jnp.arange(b, dtype=jnp.int32)
    if b <= _COMPARE_MAX:
        doubled = jnp.concatenate([idx, idx])
        repeat = jnp.zeros((b,), bool)
        for k in range(1, b):
            repeat = repeat | ((slots >= k) & (idx == doubled[b - k:2 * b - k]))
        return ~repeat
    values, order = jax.lax.sort((idx, slots), num_keys=2)
    first = jnp.concatenate([jnp.ones((1,), bool), values[1:] != values[:-1]])
    return jnp.zeros((b,), bool).at[order].set(first, unique_indices=True)


def distinct_batch(key: PRNGKey, count: Array, b: int) -> Array:
    """``(b,)`` distinct indices, a uniform ``b``-subset of ``0, ..., count - 1`` (Floyd).

    Floyd's algorithm: for slot ``j = 0..b-1`` let ``J = count - b + j`` and ``t_j`` uniform on
    ``0..J``; slot ``j`` takes ``t_j``, or ``J`` if ``t_j`` is already taken by an earlier
    slot. By induction the first ``j + 1`` slots are a uniform ``(j + 1)``-subset of ``0..J``:
    a subset ``T`` containing ``J`` arises from ``T - {J}`` and any of ``j + 1`` draws
    (``T - {J}`` or ``J``), one without ``J`` from ``T - {t}`` and ``t_j = t``, for each of its
    ``j + 1`` elements ``t``; either way with probability ``(j + 1) / ((J + 1) C(J, j)) =
    1 / C(J + 1, j + 1)``.

    All ``t_j`` are drawn at once (one word each). Whether ``t_j`` is taken, ``taken_j``: a
    repeat of an earlier draw always is (that value was taken when first drawn, by its slot or
    an earlier one); a first draw only if ``t_j = count - b + i`` for an earlier slot ``i``
    whose own draw was taken. This recursion points to earlier slots only, so iterating
    ``taken = repeat | (link & taken[i])`` from ``repeat`` grows ``taken`` monotonically to
    its unique solution, the sequential algorithm's, in as many passes as the longest chain of
    links plus one (1 in most steps for ``count >> b``, 2-5 for ``count = 3b``). Under ``vmap``
    the loop runs until every member is settled. ``1 <= b <= count`` is the caller's check.
    """
    slots = jnp.arange(b, dtype=jnp.int32)
    top = count.astype(jnp.int32) - b + slots                        # J per slot
    t = (jax.random.bits(key, (b,)) % (top + 1).astype(jnp.uint32)).astype(jnp.int32)
    repeat = ~first_occurrences(t)
    back = top - t                                                     # = j - i if t = J_i
    link = ~repeat & (back >= 1) & (back <= slots)
    earlier = jnp.clip(slots - back, 0, b - 1)

    def settle(carry):
        _, taken = carry
        return taken, repeat | (link & taken[earlier])

    _, taken = jax.lax.while_loop(lambda c: jnp.any(c[0] != c[1]), settle,
                                  settle((repeat, repeat)))
    return jnp.where(taken, top, t)


def _subset_table(counts: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(subsets (N, M, b), sizes (N,))``: agent i's ``C(n_i, b)`` subsets, padded to ``M``."""
    sizes = np.array([math.comb(int(n), b) for n in counts])
    if len(counts) * int(sizes.max()) * b > _MAX_SUBSET_ENTRIES:
        return None
    table = np.zeros((len(counts), int(sizes.max()), b), np.int32)
    for i, n in enumerate(counts):
        rows = np.array(list(itertools.combinations(range(int(n)), b)), np.int32)
        table[i, : len(rows)] = rows
    return table, sizes.astype(np.uint32)


def clip_rows(grads: PyTree, clip: Array, batch_ndim: int = 1) -> PyTree:
    """Per-datum gradients ``grads`` (leaves ``(*batch, *param_shape)``, ``batch_ndim``
    leading axes) each scaled to global norm at most ``clip``: ``g · min(1, clip / ‖g‖)``,
    the norm over every leaf of one datum. A zero gradient stays zero; a NaN stays NaN."""
    leaves = jax.tree.leaves(grads)
    axes = lambda leaf: tuple(range(batch_ndim, leaf.ndim))  # noqa: E731
    norm = jnp.sqrt(sum(jnp.sum(jnp.square(leaf), axis=axes(leaf)) for leaf in leaves))
    factor = jnp.minimum(1.0, clip / norm).astype(leaves[0].dtype)   # clip / 0 = inf -> 1

    def one(leaf):
        return leaf * factor.reshape(factor.shape + (1,) * (leaf.ndim - batch_ndim))

    return jax.tree.map(one, grads)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _clipped_data_value(log_likelihood, params, data, weights, scale, clip):
    """``−scale Σ_j weights_j log p(d_j | params)``, whose derivative in ``params`` is that of
    the clipped gradient ``scale Σ_j weights_j clip_C(∇(−log p(d_j | params)))`` (weights 0/1).

    A custom JVP rather than a VJP, so that forward-over-reverse derivatives (Hessians of the
    clipped field, ``jax.jvp`` of ``full_grad``) work too. Derivatives in ``weights`` and
    ``scale`` are those of the value; in ``data`` and ``clip`` they are taken as zero."""
    ll = jax.vmap(log_likelihood, in_axes=(None, 0))(params, data)
    return -scale * jnp.sum(weights * ll)


@_clipped_data_value.defjvp
def _clipped_data_value_jvp(log_likelihood, primals, tangents):
    params, data, weights, scale, clip = primals
    d_params, _, d_weights, d_scale, _ = tangents
    ll = jax.vmap(log_likelihood, in_axes=(None, 0))(params, data)
    per = jax.vmap(jax.grad(lambda p, d: -log_likelihood(p, d)), in_axes=(None, 0))(params, data)
    total = jax.tree.map(lambda g: jnp.tensordot(weights.astype(g.dtype), g, axes=1),
                         clip_rows(per, clip))
    along = sum(jnp.vdot(g, t) for g, t in zip(jax.tree.leaves(total), jax.tree.leaves(d_params)))
    value = -scale * jnp.sum(weights * ll)
    tangent = scale * along - scale * jnp.sum(d_weights * ll) - d_scale * jnp.sum(weights * ll)
    return value, tangent


def _clip_value(clip) -> Array | None:
    """``None``, or the clipping norm as a float array (a leaf: a new ``C`` reuses compiled
    runs); a positive finite number."""
    if clip is None:
        return None
    if isinstance(clip, bool) or not _validation.is_concrete(clip) or np.ndim(clip) != 0 \
            or not 0 < float(clip) < math.inf:
        raise ValueError(f"`clip` must be None or a positive finite number (the norm bound of "
                         f"each datum's gradient); got {clip!r}.")
    return jnp.asarray(float(clip), jnp.result_type(float))


def pad_agent_data(datasets: Sequence[PyTree]) -> tuple[PyTree, Array]:
    """Stack per-agent data sets of different sizes into padded arrays and a mask.

    Args:
        datasets: one pytree per agent; every leaf of agent ``i`` has leading size ``n_i >= 1``.

    Returns:
        ``(data, mask)``: leaves ``(N, max_i n_i, ...)`` and a boolean mask ``(N, max_i n_i)``
        whose row ``i`` is ``n_i`` ones then zeros. Padding repeats the agent's first datum, so
        that a likelihood evaluated on padding stays finite (its value is masked out).
    """
    if len(datasets) == 0:
        raise ValueError("`datasets` must hold at least one agent's data; got an empty sequence.")
    structure = jax.tree.structure(datasets[0])
    sizes = []
    for i, d in enumerate(datasets):
        if jax.tree.structure(d) != structure:
            raise ValueError(
                f"`datasets`[{i}] has pytree structure {jax.tree.structure(d)}, "
                f"expected {structure} like agent 0."
            )
        lens = {np.shape(leaf)[0] if np.ndim(leaf) else None for leaf in jax.tree.leaves(d)}
        if len(lens) != 1 or None in lens:
            raise ValueError(
                f"`datasets`[{i}]: every leaf needs the same leading (local data) size; got {lens}."
            )
        (n,) = lens
        if n < 1:
            raise ValueError(f"`datasets`[{i}] is empty; every agent needs at least one datum.")
        sizes.append(n)
    n_max = max(sizes)

    def pad(*leaves):
        out = []
        for leaf, n in zip(leaves, sizes):
            leaf = np.asarray(leaf)
            fill = np.repeat(leaf[:1], n_max - n, axis=0)
            out.append(np.concatenate([leaf, fill], axis=0))
        return jnp.asarray(np.stack(out))

    data = jax.tree.map(pad, *datasets)
    mask = jnp.asarray(np.arange(n_max)[None, :] < np.asarray(sizes)[:, None])
    return data, mask


class Potential(eqx.Module):
    """The agents' potentials ``f_i`` and their (stochastic) gradients.

    Args:
        log_likelihood: ``(params, datum) -> scalar``, the log-likelihood of ONE datum;
            ``params`` may be any pytree. ``None`` when ``gradient_fn`` is given.
        log_prior: ``params -> scalar``; its gradient is split evenly over the agents
            (each adds ``grad log_prior / N``). ``None`` means a flat prior.
        data: a pytree whose leaves are ``(N, n_local, ...)``: agent, local datum, datum shape.
        batch_size: mini-batch size ``b`` per agent per step, or ``None`` for the full local
            batch. Must not exceed the smallest local data size.
        mask: optional ``(N, n_local)`` boolean array marking real data when agents hold
            different amounts (see :func:`pad_agent_data`); each row must be ones then zeros.
        replace: draw mini-batches with replacement (default: without).
        gradient_fn: optional oracle ``(params, agent_data, key) -> grad`` of ``f_i`` for models
            that do not factor per datum; ``agent_data`` is the agent's slice of ``data``.
        clip: ``C``, optional: every per-datum log-likelihood gradient is clipped to global
            norm ``C`` before the sum (module docstring; not with ``gradient_fn``). The values
            (:meth:`value`, :meth:`agent_values`) stay those of the unclipped potential.
        private: which leaves of the parameters are private to their agent (one value per
            agent, never mixed, never sent; :mod:`dgsgld._util.private`): top-level names
            (``("intercept",)``), a pytree of bools shaped like the parameters (or a prefix),
            or a function ``params -> mask``. ``None`` (default): every leaf is shared.
        log_agent_prior: ``params -> scalar``, optional: agent ``i``'s own prior term
            ``log p(θ_i | φ)``, added undivided to ``f_i`` (``log_prior`` is split over the
            agents). With private leaves agent ``i``'s potential is (every user function
            sees agent ``i``'s parameters ``(φ, θ_i)``, private leaves without agent axis)

                f_i(φ, θ_i) = −Σ_{d ∈ D_i} log p(d | φ, θ_i) − log p(θ_i | φ) − log p(φ) / N,

            so that ``Σ_i f_i`` is the joint negative log-posterior of ``φ, θ_1, ..., θ_N``.

    Derived fields: ``counts`` ``(N,)``, the agents' data counts (``None`` without a mask: all
    ``local_size``), kept so that a step never sums the mask;
    ``subsets`` ``(N, M, b)`` and ``num_subsets`` ``(N,)``, the table of every agent's mini-batch
    subsets when it is small (see the module docstring), else ``None``.

    Example:
        >>> import jax.numpy as jnp
        >>> ll = lambda theta, d: -0.5 * (d[0] @ theta - d[1]) ** 2
        >>> data = (jnp.ones((4, 3, 2)), jnp.zeros((4, 3)))
        >>> pot = Potential(ll, lambda t: -0.5 * t @ t, data)
        >>> pot.full_grad(jnp.zeros((4, 2))).shape
        (4, 2)
    """

    data: PyTree
    mask: Array | None
    counts: Array | None
    subsets: Array | None
    num_subsets: Array | None
    clip: Array | None
    log_likelihood: Callable | None = eqx.field(static=True)
    log_prior: Callable | None = eqx.field(static=True)
    log_agent_prior: Callable | None = eqx.field(static=True)
    private: _private.PrivateSpec | None = eqx.field(static=True)
    batch_size: int | None = eqx.field(static=True)
    replace: bool = eqx.field(static=True)
    gradient_fn: Callable | None = eqx.field(static=True)
    num_agents: int = eqx.field(static=True)
    local_size: int = eqx.field(static=True)

    def __init__(
        self,
        log_likelihood: Callable | None,
        log_prior: Callable | None,
        data: PyTree,
        batch_size: int | None = None,
        *,
        mask: Array | None = None,
        replace: bool = False,
        gradient_fn: Callable | None = None,
        clip: float | None = None,
        private=None,
        log_agent_prior: Callable | None = None,
    ):
        if log_likelihood is None and gradient_fn is None:
            raise ValueError("Give `log_likelihood` or `gradient_fn`; both are None.")
        if log_likelihood is not None and gradient_fn is not None:
            raise ValueError(
                "Give `log_likelihood` or `gradient_fn`, not both: with both, one would be "
                "silently ignored. Pass log_likelihood=None to use the gradient oracle."
            )
        if log_likelihood is not None and not callable(log_likelihood):
            raise ValueError(f"`log_likelihood` must be callable; got {type(log_likelihood)}.")
        if log_prior is not None and not callable(log_prior):
            raise ValueError(f"`log_prior` must be callable or None; got {type(log_prior)}.")
        _validation.check_callable(gradient_fn, name="gradient_fn")
        if clip is not None and gradient_fn is not None:
            raise ValueError("`clip` needs per-datum gradients, from `log_likelihood`; a "
                             "`gradient_fn` oracle's sum cannot be clipped per datum.")
        self.clip = _clip_value(clip)
        leaves = jax.tree.leaves(data)
        if not leaves:
            raise ValueError("`data` must be a pytree with at least one array leaf.")
        shapes = [np.shape(leaf) for leaf in leaves]
        if any(len(s) < 2 for s in shapes):
            raise ValueError(
                f"`data` leaves must be (num_agents, local_size, ...); got shapes {shapes}."
            )
        if len({s[:2] for s in shapes}) != 1:
            raise ValueError(
                "`data` leaves disagree on (num_agents, local_size): "
                f"got leading shapes {[s[:2] for s in shapes]}."
            )
        num_agents, local_size = shapes[0][:2]
        if num_agents < 1 or local_size < 1:
            raise ValueError(
                "`data` needs at least one agent and one datum per agent; got leading shape "
                f"(num_agents, local_size) = {(num_agents, local_size)}."
            )
        # A NaN in the data would otherwise surface only as NaN samples.
        _validation.check_finite_tree(data, name="data")
        if mask is not None:
            mask_np = np.asarray(mask)
            if mask_np.shape != (num_agents, local_size):
                raise ValueError(
                    f"`mask` must have shape (num_agents, local_size) = "
                    f"{(num_agents, local_size)}; got {mask_np.shape}."
                )
            if mask_np.dtype != bool and not np.isin(mask_np, (0, 1)).all():
                at = tuple(int(i) for i in np.argwhere(~np.isin(mask_np, (0, 1)))[0])
                raise ValueError(f"`mask` must be boolean (or 0/1); got {mask_np[at].item()!r} at "
                                 f"index {at}.")
            mask_np = mask_np.astype(bool)
            counts = mask_np.sum(axis=1)
            prefix = np.arange(local_size)[None, :] < counts[:, None]
            if not (mask_np == prefix).all():
                raise ValueError("`mask` rows must be ones followed by zeros (see pad_agent_data).")
            if counts.min() < 1:
                raise ValueError(f"`mask`: agent {int(counts.argmin())} holds no data.")
            smallest = int(counts.min())
            mask = jnp.asarray(mask_np)
        else:
            counts = np.full(num_agents, local_size)
            smallest = local_size
        if batch_size is not None:
            if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
                raise ValueError(f"`batch_size` must be an int or None; got {batch_size!r}.")
            if not 1 <= batch_size <= smallest:
                raise ValueError(
                    f"`batch_size` must be between 1 and the smallest local data size "
                    f"({smallest}); got {batch_size}."
                )
            batch_size = int(batch_size)
        self.data = jax.tree.map(jnp.asarray, data)
        self.mask = mask
        self.counts = None if mask is None else jnp.asarray(counts, jnp.int32)
        self.subsets = self.num_subsets = None
        if batch_size is not None and not replace and gradient_fn is None:
            table = _subset_table(counts, batch_size)
            if table is not None:
                self.subsets, self.num_subsets = jnp.asarray(table[0]), jnp.asarray(table[1])
        if log_agent_prior is not None and not callable(log_agent_prior):
            raise ValueError(f"`log_agent_prior` must be callable or None; got "
                             f"{type(log_agent_prior)}.")
        self.log_likelihood = log_likelihood
        self.log_prior = log_prior
        self.log_agent_prior = log_agent_prior
        self.private = _private.PrivateSpec.of(private)
        self.batch_size = batch_size
        self.replace = bool(replace)
        self.gradient_fn = gradient_fn
        self.num_agents = int(num_agents)
        self.local_size = int(local_size)

    @classmethod
    def from_numpyro(cls, model: Callable, data: PyTree, batch_size: int | None = None, *,
                     mask: Array | None = None, replace: bool = False,
                     model_kwargs: dict | None = None, plate: str | None = None,
                     clip: float | None = None, agent_plate: str | None = None) -> "Potential":
        """The potential of a numpyro model on its unconstrained space: observed sites in a
        plate over ``data`` (a dict of the model's data arguments, leaves ``(N, n_local,
        ...)``), latent sites outside it (:func:`dgsgld.model.ppl.factorize`: its arguments
        and errors); :func:`dgsgld.model.constrain` maps the draws back. With
        ``agent_plate``, the name of a plate over the agents, latent sites inside that plate
        are private parameters (one per agent; :mod:`dgsgld.model.ppl`). Needs numpyro (the
        ``numpyro`` extra), imported on use."""
        info = ppl.factorize(model, data, model_kwargs=model_kwargs, plate=plate,
                             agent_plate=agent_plate)
        private = info.private
        return cls(info.log_likelihood, info.log_prior, data, batch_size, mask=mask,
                   replace=replace, clip=clip, private=private or None,
                   log_agent_prior=info.log_agent_prior if private else None)

    # -- one agent -------------------------------------------------------------------------

    def _counts_weights(self, num_rows: int, dtype) -> tuple[Array, Array]:
        """``(counts (R,), weights (R, n_local))`` of this potential's ``R = num_rows`` agents
        (the rows it holds): the data counts and the 0/1 weights of the mask (none: every datum
        is real). The counts are stored, not summed: mini-batch steps stay ``O(b)``."""
        if self.mask is None:
            return (jnp.full((num_rows,), self.local_size, jnp.int32),
                    jnp.ones((num_rows, self.local_size), dtype))
        return self.counts, self.mask.astype(dtype)

    def private_mask(self, params: PyTree) -> PyTree | None:
        """Bools shaped like ``params``, ``True`` at the private leaves; ``None`` when no
        leaf is private (then every sampler runs exactly as without private parameters)."""
        return None if self.private is None else self.private.mask(params)

    @property
    def has_prior(self) -> bool:
        """Whether ``f_i`` has a prior term (``log_prior`` or ``log_agent_prior``)."""
        return self.log_prior is not None or self.log_agent_prior is not None

    def _prior_term(self, params: PyTree) -> Array:
        """``−log p(params) / N − log_agent_prior(params)``: agent ``i``'s prior terms."""
        term = jnp.zeros(()) if self.log_prior is None else \
            -self.log_prior(params) / self.num_agents
        if self.log_agent_prior is not None:
            term = term - self.log_agent_prior(params)
        return term

    def _data_value(self, params, agent_data, weights, scale) -> Array:
        """``-scale * sum_j weights_j log p(d_j | params)`` (its gradient clipped per datum
        with ``clip``)."""
        if self.clip is not None:
            return _clipped_data_value(self.log_likelihood, params, agent_data, weights,
                                       jnp.asarray(scale), self.clip)
        ll = jax.vmap(self.log_likelihood, in_axes=(None, 0))(params, agent_data)
        return -scale * jnp.sum(weights * ll)

    def _local_value(self, params, agent_data, weights, scale) -> Array:
        """``-scale * sum_j weights_j log p(d_j | params) - log p(params) / N``."""
        return self._data_value(params, agent_data, weights, scale) + self._prior_term(params)

    def _batch(self, key: PRNGKey, count: Array) -> Array:
        """Indices ``(b,)`` of a uniform mini-batch among an agent's first ``count`` data."""
        b = self.batch_size
        if self.replace:
            return (jax.random.bits(key, (b,)) % count.astype(jnp.uint32)).astype(jnp.int32)
        return distinct_batch(key, count, b)

    def _agent_grad(self, params, agent_data, count, weights, key, idx=None):
        """The data term of ``grad f_i`` (the whole of it for a ``gradient_fn``)."""
        if self.gradient_fn is not None:
            return self.gradient_fn(params, agent_data, key)
        grad = jax.grad(self._data_value)
        if self.batch_size is None:
            return grad(params, agent_data, weights, 1.0)
        if idx is None:
            idx = self._batch(key, count)
        batch = jax.tree.map(lambda leaf: leaf[idx], agent_data)
        scale = count / self.batch_size
        ones = jnp.ones((self.batch_size,))
        return grad(params, batch, ones, scale)

    @property
    def tabulated(self) -> bool:
        """Whether mini-batches are drawn from the table of subsets (see the module doc)."""
        return self.subsets is not None

    def subset_indices(self, key: PRNGKey) -> Array:
        """Every agent's mini-batch indices ``(N, b)`` from one word per agent (tabulated)."""
        pick = jax.random.bits(key, (self.num_agents,)) % self.num_subsets
        rows = jnp.take_along_axis(self.subsets, pick[:, None, None].astype(jnp.int32), axis=1)
        return rows[:, 0]

    def batch_indices(self, key: PRNGKey, first_row=0, num_rows: int | None = None) -> Array:
        """``(R, b)`` indices of the mini-batches that ``grad(x, key)`` draws for agents
        ``first_row, ..., first_row + R - 1`` (default all ``N``), whose rows ``mask`` holds."""
        num_rows = self.num_agents if num_rows is None else num_rows
        rows = lambda a: jax.lax.dynamic_slice_in_dim(a, first_row, num_rows)  # noqa: E731
        if self.tabulated:
            return rows(self.subset_indices(key))
        counts, _ = self._counts_weights(num_rows, jnp.result_type(float))
        return jax.vmap(self._batch)(rows(jax.random.split(key, self.num_agents)), counts)

    # -- all agents ------------------------------------------------------------------------

    # Parameters may be any pytree, e.g. an eqx.nn.MLP: its array leaves are the parameters
    # (with the agent axis here), its other leaves static, as in dgsgld.sample. The user's
    # functions see the whole model; gradients are pytrees of the array leaves (None at the
    # static leaves, like eqx.filter_grad).

    def _on_arrays(self, params: PyTree, *, name: str, agents: int | None):
        """``(potential, arrays)``: the array leaves of ``params`` and a potential whose user
        functions see the full parameters (:mod:`dgsgld._util.params`, the runner's convention).
        ``agents``: the leading size every array leaf must have (``None``: not checked)."""
        arrays, static = _params.split_static(params)
        if not jax.tree.leaves(arrays):
            raise ValueError(
                f"`{name}` has no array leaves; the parameters are its array leaves (other "
                "leaves, e.g. Python floats or functions, are static): pass jnp.asarray(...).")
        if agents is not None:
            _validation.check_leading_axis(arrays, agents, name=name,
                                           layout="(num_agents, *param_shape)")
        _validation.check_floating_tree(arrays, name=name)
        return (self if static is None else _params.potential_on_arrays(self, static)), arrays

    def grad(self, positions: PyTree, key: PRNGKey) -> PyTree:
        """Stochastic gradients of every agent's potential at its own position.

        Args:
            positions: pytree with array leaves ``(N, *param_shape)`` (other leaves static).
            key: PRNG key; split into one key per agent.

        Returns:
            The array leaves of ``positions``: agent ``i``'s unbiased estimate of
            ``grad f_i(x_i)``.
        """
        pot, positions = self._on_arrays(positions, name="positions", agents=self.num_agents)
        dtype = jax.tree.leaves(positions)[0].dtype
        counts, weights = self._counts_weights(self.num_agents, dtype)
        return pot.grad_rows(positions, self.data, counts, weights, key)

    def grad_rows(self, positions: PyTree, data: PyTree, counts: Array, weights: Array,
                  key: PRNGKey, first_row=0) -> PyTree:
        """Rows ``first_row, ..., first_row + R - 1`` of ``grad(all positions, key)``, from
        those agents' positions, data, data counts ``(R,)`` and weights ``(R, n_local)`` only
        (how :mod:`dgsgld.parallel.devices` computes a device's agents)."""
        pot, positions = self._on_arrays(positions, name="positions", agents=None)
        if pot is not self:
            return pot.grad_rows(positions, data, counts, weights, key, first_row)
        num_rows = jax.tree.leaves(positions)[0].shape[0]
        rows = lambda a: jax.lax.dynamic_slice_in_dim(a, first_row, num_rows)  # noqa: E731
        if self.tabulated:
            grads = jax.vmap(self._agent_grad, (0, 0, 0, 0, None, 0))(
                positions, data, counts, weights, None, rows(self.subset_indices(key))
            )
        else:
            keys = rows(jax.random.split(key, self.num_agents))
            grads = jax.vmap(self._agent_grad)(positions, data, counts, weights, keys)
        return grads if self.gradient_fn is not None else self._with_prior(grads, positions)

    def _with_prior(self, grads: PyTree, positions: PyTree) -> PyTree:
        if not self.has_prior:
            return grads
        prior = jax.vmap(jax.grad(self._prior_term))(positions)
        return jax.tree.map(jnp.add, grads, prior)

    def grad_on(self, positions: PyTree, indices: Array) -> PyTree:
        """:meth:`grad` on given mini-batches: ``indices`` ``(N, b)`` from
        :func:`dgsgld.gradients.batch_indices` (``key``) give ``grad(positions, key)``; one
        draw then serves several points (SVRG's point and anchor). Needs ``log_likelihood``."""
        # The rows this potential holds: all N, or a device's block (dgsgld.parallel.devices).
        pot, positions = self._on_arrays(positions, name="positions", agents=None)
        dtype = jax.tree.leaves(positions)[0].dtype
        counts, weights = self._counts_weights(indices.shape[0], dtype)
        grads = jax.vmap(pot._agent_grad, (0, 0, 0, 0, None, 0))(
            positions, self.data, counts, weights, None, indices)
        return pot._with_prior(grads, positions)

    def full_grad(self, positions: PyTree) -> PyTree:
        """Exact full-batch gradients ``grad f_i(x_i)``: the array leaves of ``positions``
        (``(N, *param_shape)``; other leaves static)."""
        if self.log_likelihood is None:
            raise ValueError("`full_grad` needs `log_likelihood`; this potential has an oracle.")
        pot, positions = self._on_arrays(positions, name="positions", agents=self.num_agents)
        dtype = jax.tree.leaves(positions)[0].dtype
        _, weights = self._counts_weights(self.num_agents, dtype)
        one = jax.grad(pot._local_value)
        return jax.vmap(one, in_axes=(0, 0, 0, None))(positions, self.data, weights, 1.0)

    def subsample_indices(self, key: PRNGKey, size: int) -> Array:
        """``(N, size)`` indices: every agent's uniform ``size``-subset of its own data (drawn
        without replacement; an agent with fewer data keeps all of them, padded by repeats of
        weight 0 in :meth:`subsample_grad`)."""
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"`size` must be a positive integer; got {size!r}.")
        counts, _ = self._counts_weights(self.num_agents, jnp.float32)
        size = min(size, self.local_size)
        keys = jax.random.split(key, self.num_agents)
        return jax.vmap(lambda k, c: distinct_batch(k, jnp.maximum(c, size), size))(keys, counts)

    def subsample_grad(self, positions: PyTree, indices: Array) -> PyTree:
        """Unbiased estimates of ``grad f_i(x_i)`` from the data ``indices`` ``(N, m)`` of
        :meth:`subsample_indices` (any ``m``, whatever ``batch_size``): agent ``i``'s data
        term scaled by ``n_i / m`` (every datum when ``m >= n_i``), plus the prior terms.
        ``positions`` as in :meth:`full_grad`; needs ``log_likelihood``."""
        if self.log_likelihood is None:
            raise ValueError("`subsample_grad` needs `log_likelihood`; this potential has an "
                             "oracle.")
        pot, positions = self._on_arrays(positions, name="positions", agents=self.num_agents)
        dtype = jax.tree.leaves(positions)[0].dtype
        counts, weights = self._counts_weights(self.num_agents, dtype)
        m = indices.shape[1]

        def one(params, agent_data, count, weight, idx):
            batch = jax.tree.map(lambda leaf: leaf[idx], agent_data)
            # an agent with at most m data: its real data once each (the draw holds them all)
            whole = count <= m
            w = jnp.where(whole, weight[idx], jnp.ones((m,), dtype))
            scale = jnp.where(whole, 1.0, count.astype(dtype) / m)
            return jax.grad(pot._local_value)(params, batch, w, scale)
        return jax.vmap(one)(positions, self.data, counts, weights, indices)

    def agent_values(self, positions: PyTree) -> Array:
        """Full-batch potentials ``f_i(x_i)``, shape ``(N,)``; ``positions`` as in
        :meth:`full_grad`."""
        if self.log_likelihood is None:
            raise ValueError("`agent_values` needs `log_likelihood`; this potential has an oracle.")
        pot, positions = self._on_arrays(positions, name="positions", agents=self.num_agents)
        dtype = jax.tree.leaves(positions)[0].dtype
        _, weights = self._counts_weights(self.num_agents, dtype)
        return jax.vmap(pot._local_value, in_axes=(0, 0, 0, None))(
            positions, self.data, weights, 1.0
        )

    def _stacked(self, params: PyTree):
        """``(potential, arrays (N, *param_shape), private mask)``: one point's array leaves,
        every agent: shared leaves repeated, private ones (already ``(N, ...)``) as they are."""
        pot, arrays = self._on_arrays(params, name="params", agents=None)
        n = self.num_agents
        mask = pot.private_mask(arrays)
        if mask is not None:
            _validation.check_leading_axis(
                _private.private_part(arrays, mask), n,
                name="params (private leaves)", layout="(num_agents, *param_shape)")
        stacked = jax.tree.map(lambda p: jnp.broadcast_to(p, (n, *jnp.shape(p))),
                               _private.shared_part(arrays, mask))
        return pot, _private.merge(stacked, arrays, mask), mask

    def value(self, params: PyTree) -> Array:
        """The pooled potential ``f(x) = sum_i f_i(x)`` (negative log-posterior) at one point
        ``params`` (any pytree; non-array leaves static)."""
        pot, stacked, _ = self._stacked(params)
        return jnp.sum(pot.agent_values(stacked))

    def pooled_grad(self, params: PyTree, key: PRNGKey) -> PyTree:
        """Stochastic gradient of ``f = sum_i f_i`` at one point (the centralized sampler's):
        the array leaves of ``params``. A private leaf ``θ`` ``(N, ...)`` gets ``∇_{θ_i} f_i``
        in row ``i`` (only ``f_i`` depends on ``θ_i``)."""
        pot, stacked, mask = self._stacked(params)
        grads = pot.grad(stacked, key)
        summed = jax.tree.map(lambda g: jnp.sum(g, axis=0), _private.shared_part(grads, mask))
        return _private.merge(summed, grads, mask)


def stack_potentials(potentials: Sequence[Potential]) -> Potential:
    """One model's potentials on data of one padded shape (splits, simulated data sets),
    stacked along a new leading axis of every array field, for ``vmap``.
    """
    template = potentials[0]
    leaves = [jax.tree.leaves(p) for p in potentials]
    if len({len(ls) for ls in leaves}) != 1:
        raise ValueError("the splits' potentials hold different array fields (a mini-batch "
                         "subset table for some splits only); they cannot be stacked.")
    return jax.tree.structure(template).unflatten(
        [jnp.stack(column) for column in zip(*leaves)])
