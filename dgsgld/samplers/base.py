"""What every sampler is: a frozen pytree holding its configuration, with pure ``init``/``step``.

A sampler is an ``eqx.Module`` so that a constant step size is an array leaf: changing it, or
``vmap``-ing over a grid of step sizes, reuses the compiled run, and ``jax.grad`` flows to it.

Decentralized samplers work on a *network state*: a pytree whose leaves are ``(N, ...)``, one
row per agent. ``step(key, state, potential, mixing_matrix, noise=None)`` takes the per-step
inputs as arguments, so the same function serves ``dgsgld.sample`` and a user's own loop.

Randomness of a step: ``key`` splits into a noise key and a gradient key (mini-batches). The
Gaussian noise ``w`` is ``noise(key, position)``; passing it to ``step`` gives the same step as
drawing it there; passing it lets two samplers share their noise (synchronous coupling). Each
leaf of ``w`` is ``normal(leaf_key, (size,), dtype)`` reshaped to the leaf's shape:
``jax.random.normal`` unless the sampler was built with another generator, e.g.
``DIGingSGLD(0.01, normal=dgsgld.fast_normal)`` (:mod:`dgsgld.samplers.noise`: other numbers,
the same law to the tested accuracy, faster on CPU). A passed ``w`` may also have flat
``(size,)`` leaves, and the step then updates in that shape, with the same numbers:
``dgsgld.sample`` does so where its loop keeps the chain axis first, so that XLA:CPU fuses the
draw and the update into a loop over one long axis rather than a short last one.
"""

from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax

from .._util import tree as _tree
from .._util.types import Array, PRNGKey, PyTree, StepSize
from . import precondition as _pre
from .precondition import Preconditioner


def step_keys(key: PRNGKey) -> tuple[PRNGKey, PRNGKey]:
    """``(noise_key, grad_key)`` of one step."""
    noise_key, grad_key = jax.random.split(key)
    return noise_key, grad_key


def _normal(normal: Callable) -> Callable:
    if not callable(normal):
        raise ValueError(f"`normal` must be a function (key, shape, dtype) -> normals; got "
                         f"{normal!r}.")
    return normal


class SamplingAlgorithm(eqx.Module):
    """Interface of the samplers (documentation and ``isinstance`` only).

    The class of a sampler is its constructor: ``DIGingSGLD(0.05)``,
    ``DIGingSGLD(0.05, estimator, channel=...)``. Its protocol:

    - ``init(position, potential, key) -> State``: the state at ``count = 0``;
    - ``step(key, state, potential, mixing_matrix, noise=None) -> State``: one iteration.

    Every ``State`` is a NamedTuple with the fields ``position``, then the sampler's own
    variables among ``velocity``, ``tracker``, ``dual``, ``weight`` (in this order), then
    ``grad``, ``count``, ``estimator`` and ``channel``.

    Attributes:
        step_size: a positive constant or a schedule ``count -> step size``; checked when the
            sampler is built (``DIGingSGLD(-1.0)`` raises a ``ValueError`` naming
            ``step_size``), and a constant is stored as an array so that changing it reuses
            compiled runs.
        normal: keyword-only; ``(key, shape, dtype) -> standard normals``, the generator of
            the noise ``w`` (default ``jax.random.normal``; :func:`dgsgld.fast_normal` is the
            faster table transform of the same bits), called with each leaf's flat shape
            ``(size,)``. Static: a new step size with the same generator reuses compiled runs.
        preconditioner: keyword-only; ``None`` (default) or a constant
            :class:`~dgsgld.samplers.precondition.Preconditioner` ``M``: each agent's drift
            ``η g`` becomes ``η M g`` and its noise ``√(2η) w`` becomes ``√(2η) S w``
            (``S Sᵀ = M``); ``w`` itself, drawn or passed, stays standard normal. Its arrays
            are leaves: a new ``M`` of the same shapes reuses compiled runs.
        decentralized: ``True`` when positions carry an agent axis and a mixing matrix is used.
        name: the sampler's display name (``"DIGing-SGLD"``), the key of
            :func:`dgsgld.samplers.by_name`.
    """

    step_size: StepSize = eqx.field(converter=_tree.as_step_size)
    normal: Callable = eqx.field(
        default=jax.random.normal, converter=_normal, static=True, kw_only=True
    )
    preconditioner: Preconditioner | None = eqx.field(
        default=None, converter=_pre.as_preconditioner, kw_only=True
    )
    decentralized: ClassVar[bool] = True
    name: ClassVar[str]

    def init(self, position: PyTree, potential, key: PRNGKey):  # pragma: no cover - interface
        raise NotImplementedError

    def step(self, key: PRNGKey, state, potential, mixing_matrix: Array | None,
             noise: PyTree | None = None):  # pragma: no cover
        raise NotImplementedError

    def noise(self, key: PRNGKey, position: PyTree) -> PyTree:
        """The standard normal ``w`` that ``step(key, ...)`` draws, shaped like ``position``."""
        return _tree.normal_like(step_keys(key)[0], position, self.normal)

    def _precondition(self, tree: PyTree, position: PyTree) -> PyTree:
        """``M g`` agent by agent for a drift ``g`` shaped like ``position``; ``tree`` itself
        (no operation) without a preconditioner."""
        if self.preconditioner is None:
            return tree
        self.preconditioner.check(_pre.parameter_shapes(position, self.decentralized))
        return _pre.per_agent(self.preconditioner.apply, tree, position,
                                       self.decentralized)

    def _step_inputs(self, key: PRNGKey, state, noise: PyTree | None):
        """``(η, gradient key, ∇̃F(position), S w)`` of one step.

        The gradient is the one the state keeps (computed at its position by ``init`` or the
        step before); ``w`` is ``noise`` or drawn from the key, and ``S w`` is ``w`` without a
        preconditioner.
        """
        eta = _tree.resolve_step_size(self.step_size, state.count)
        _, grad_key = step_keys(key)
        grad = state.grad
        if grad is None:
            raise ValueError(f"`state` of {type(self).__name__} keeps no gradient (grad=None): "
                             "build states with the sampler's `init`.")
        if noise is None:
            noise = self.noise(key, state.position)
        if self.preconditioner is not None:
            self.preconditioner.check(
                _pre.parameter_shapes(state.position, self.decentralized))
            noise = _pre.per_agent(self.preconditioner.noise, noise, state.position,
                                            self.decentralized)
        return eta, grad_key, grad, noise
