"""D-ULA: decentralized unadjusted Langevin with decaying consensus and gradient weights.

Parayil, Bai, George and Gurram, "Decentralized Langevin dynamics for Bayesian learning"
(NeurIPS 2020, arXiv:2007.06799), run with the network's mixing matrices:

    x_i⁺ = x_i − β_k Σ_j L⁽ᵏ⁾_ij x_j − α_k N ∇̃f_i(x_i) + √(2Nα_k) w_i,      L⁽ᵏ⁾ = I − W⁽ᵏ⁾,

i.e. ``x⁺ = ((1 − β_k) I + β_k W⁽ᵏ⁾) x − α_k N ∇̃F(x) + √(2Nα_k) w``: DE-SGLD's local step at
step ``Nα_k`` after a relaxed consensus step. Each agent follows ``N`` times its own gradient
with noise of variance ``2Nα_k``, so that the network average has the noise of centralized ULA
on ``f = Σ f_i`` at step ``α_k``: ``x̄⁺ = x̄ − α_k Σ_i ∇̃f_i(x_i) + √(2α_k) w̄``, ``w̄ ~ N(0, I)``.
Its drift is not ULA's ``α_k ∇f(x̄)``: the gradients are taken at the agents' ``x_i``, which
disagree by ``O(√(Nα_k))``. So the average samples the posterior ``exp(−f)`` only as
``α → 0`` (the paper's claim, "the averaged sample converges to the true posterior", is for
decaying steps); at a constant ``α`` its stationary law is ``O(α)`` from the posterior and
several times further than centralized ULA at the same step. Exactly (``theory.exact``, the
tests' 5-agent linear regression on a ring, ``β = 0.5``): stationary W2 of the average 0.0279
at ``α = 0.005`` and 0.0146 at ``α = 0.0025``, against 0.00362 and 0.00180 for ULA
(``docs/guide/samplers.md``). The consensus weight ``β_k`` and the step ``α_k`` decay as
schedules.

References. The authors' code
(github.com/AParayil/AParayil-Distribued-Learning-via-Bayesian-Inferencing and
pkgurram/d-ula: ``optimizers/dist_SGLD_toy.py``) steps ``x_i − β Σ_{j∈N_i}(x_i − x_j)`` then
``− α ∇f_i + √(2α) w`` with ``f_i`` the local likelihood plus ``1/N`` of the prior: the form
above with ``α = Nα_k`` (its logistic-regression script
``dist_SGLD_a9a.py`` uses ``N ∇f_i`` with ``√(2α) w`` instead, which samples ``exp(−N f)``).
The re-implementation sisl/Distributed_ADMM_Sampler steps ``− α_k N ∇f_i + √(2α_k) N(0, N I)``,
the form above. The authors' schedules are ``α_k = α₀/(1 + k/230)^0.55`` and
``β_k = β₀/(1 + k/230)^0.05`` (``β`` decaying slower than ``α``), see :class:`PolynomialDecay`
for ``a/(k+1)^δ``.

Difference from the paper, on purpose: the paper's ``L`` is the graph Laplacian of unit edge
weights (``β₀ = 1.01/λ_max(L)`` in the authors' code); here ``L = I − W`` is the Laplacian
weighted by the mixing matrix (``Σ_j L_ij x_j = Σ_j W_ij (x_i − x_j)``), so that D-ULA runs on
the same time-varying ``W⁽ᵏ⁾`` as the other samplers and ``(1 − β) I + β W`` stays doubly
stochastic for ``β ∈ (0, 1]``.

With ``preconditioner=M``: ``x⁺ = x − β_k (I − W⁽ᵏ⁾) x − α_k N M ∇̃F(x) + √(2Nα_k) S w``.
"""

from typing import ClassVar, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp

from .._util import tree as _tree
from .._util import validation as _validation
from .._util.types import Array, PRNGKey, PyTree, StepSize
from ..communication import Channel, as_channel, hold, init_states, send
from ..gradients import GradientEstimator, as_estimator
from .base import SamplingAlgorithm

__all__ = ["DULA", "DULAState", "PolynomialDecay"]


class PolynomialDecay(eqx.Module):
    """The schedule ``count -> initial / (count + 1) ** exponent`` (array leaves: a new value
    reuses compiled runs)."""

    initial: Array
    exponent: Array

    def __init__(self, initial: float, exponent: float):
        _validation.check_step_size(initial, name="initial")
        if not 0 <= float(exponent) < float("inf"):
            raise ValueError(f"`exponent` must be a finite number >= 0; got {exponent!r}.")
        self.initial = _tree.as_float_array(initial)
        self.exponent = _tree.as_float_array(exponent)

    def __call__(self, count):
        return self.initial / (jnp.asarray(count) + 1.0) ** self.exponent


def _consensus(consensus) -> StepSize:
    """A constant in ``(0, 1]`` (beyond 1, ``(1 − β) I + β W`` has negative weights) or a
    schedule (checked at count 0 to be positive)."""
    _validation.check_step_size(consensus, name="consensus")
    consensus = _tree.as_step_size(consensus)
    if not callable(consensus) and _validation.is_concrete(consensus) and float(consensus) > 1:
        raise ValueError(f"`consensus` must lie in (0, 1]; got {float(consensus)!r}.")
    return consensus


class DULAState(NamedTuple):
    """``position`` and ``grad = ∇̃F(position)`` leaves ``(N, *param_shape)`` (``grad``
    ``None``: drawn by the next step); ``count`` the iteration; ``estimator`` the gradient
    estimator's state; ``channel`` that of the message ``position``
    (:mod:`dgsgld.communication`)."""

    position: PyTree
    grad: PyTree
    count: Array
    estimator: PyTree = ()
    channel: PyTree = ()


class DULA(SamplingAlgorithm):
    """D-ULA: ``DULA(step_size, consensus=1.0, estimator=None, *, normal=jax.random.normal,
    channel=None)``.

    ``step_size`` is ``α_k`` and ``consensus`` the consensus weight ``β_k``, each a constant or
    a schedule ``count -> value`` (e.g. :class:`PolynomialDecay` or an optax schedule); a
    constant ``consensus`` must lie in ``(0, 1]``. ``estimator`` from :mod:`dgsgld.gradients`
    (default: plain mini-batches).
    """

    consensus: StepSize = eqx.field(default=1.0, converter=_consensus)
    estimator: GradientEstimator = eqx.field(default=None, converter=as_estimator)
    channel: Channel | None = eqx.field(default=None, converter=as_channel, kw_only=True)
    name: ClassVar[str] = "D-ULA"

    def init(self, position: PyTree, potential, key: PRNGKey) -> DULAState:
        grad, est = self.estimator.start(potential, position, key)
        channel = init_states(self.channel, potential.private_mask(position), position=position)
        return DULAState(position, grad, jnp.zeros((), jnp.int32), est, channel)

    def step(
        self, key: PRNGKey, state: DULAState, potential, mixing_matrix: Array,
        noise: PyTree | None = None,
    ) -> DULAState:
        private = potential.private_mask(state.position)
        alpha, grad_key, grad, noise = self._step_inputs(key, state, noise)
        beta = _tree.resolve_step_size(self.consensus, state.count)
        mixed, channel = send(self.channel, key, state.channel, "position", mixing_matrix,
                              state.position, state.count, private=private)
        base = jax.tree.map(
            lambda x, wx: x + beta.astype(x.dtype) * (wx - x), state.position, mixed
        )
        # α N ∇̃F with noise √(2Nα): the Langevin step at Nα (module docstring)
        position = _tree.langevin_update(base, self._precondition(grad, state.position), noise,
                                         potential.num_agents * alpha)
        new_grad, est = self.estimator.grad(state.estimator, potential, position, grad_key)
        new = DULAState(position, new_grad, state.count + 1, est, channel)
        return hold(self.channel, key, state, new, mixing_matrix)
