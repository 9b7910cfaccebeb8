"""``sample``: every chain of an experiment in one compiled call.

The runner ``lax.scan``-s the sampler's ``step`` over iterations, feeding ``W⁽ᵏ⁾ =
mixing.matrix_at(k)``, and ``vmap``-s it across chains inside the scan body, so cross-chain
statistics can be streamed (see ``ensemble_fn``). On XLA:CPU the loop keeps small leaves' chain
axis last through ``vmap``'s ``in_axes``/``out_axes`` (:func:`_chain_axes`); nothing below the
runner knows it. It is compiled once per shape and configuration: a new step size, new
data of the same shapes or new initial positions reuse the compiled run.

Randomness: chain ``c`` draws from ``fold_in(key, c)``, split into an init key and a run key, and
step ``k`` of that chain uses ``fold_in(run_key, k)``. So the draws of a chain do not depend on
how many chains run beside it, how they are batched or sharded, or how the iterations are split
into calls (a run resumed from ``trace.state`` with the same key continues identically).
``chain_offset=k`` makes chain ``c`` of a call global chain ``k + c``: chains run apart then
equal those of one run, and calls that share a key but not an offset stay independent. The key
is converted at entry to :mod:`dgsgld.runner._random`'s implementation of the same threefry numbers,
which XLA:CPU runs 2-3x faster inside a loop; so the draws equal those of ``jax.random`` with
the user's key in a hand-written loop.

Mixing: anything with ``matrix_at(k) -> W⁽ᵏ⁾`` (:mod:`dgsgld.networks._mixing`); arrays are
wrapped in a ``MixingStack``. The network checks are :mod:`dgsgld.networks.checked`'s.

Every runner is this module's front end and loop: :func:`_prepare` (validation, resume state,
static leaves, network checks, key, chain identity; on the host, once) and :func:`_loop` (the
one compiled sampling loop, over a network application: :class:`Whole` here, a device's
:class:`dgsgld.parallel.devices.AgentBlock` inside ``shard_map``). Placements (``placement=``:
:mod:`dgsgld.parallel.devices`'s ``Chains``/``Agents``, :mod:`dgsgld.parallel.processes`'s
``Processes``) say where the loop runs; :func:`dgsgld.runner.checkpoint.sample_chunked` runs it
chunk by chunk.
"""

import warnings
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .. import communication
from .._util import params as _params
from .._util import tree as _tree
from .._util import validation as _validation
from .._util.types import Array, PRNGKey, PyTree
from ..evaluate import Metric
from ..evaluate import _divergence as _divergence
from ..model.potential import Potential
from ..networks._mixing import abstract_matrix, as_mixing
from ..networks.checked import check_mixing_role, check_network, unwrap_checked
from ..networks.directed import network_for
from ..samplers.base import SamplingAlgorithm
from . import _random as _random
from . import progress as _progress

__all__ = [
    "Divergence",
    "DivergenceError",
    "Output",
    "Trace",
    "sample",
]


class Output(NamedTuple):
    """What :func:`sample` keeps of a run (one argument, ``output=``, for all of it).

    Kept iterations are ``burn_in, burn_in + thin, ..., num_steps`` (iteration ``0`` is the
    starting point); ``trace.state`` is the final state whatever is kept.

    Attributes:
        thin: keep every ``thin``-th iteration (``num_steps`` must be a multiple).
        burn_in: drop the first ``burn_in`` iterations of the call; a multiple of ``thin``.
        positions: store the positions; by default only when neither ``trace_fn`` nor
            ``ensemble_fn`` is given.
        trace_fn: optional ``state -> pytree`` stored per chain and kept iteration (e.g. a
            per-chain :class:`dgsgld.evaluate.Metric`). Pass the same function object to
            reuse compilation.
        ensemble_fn: optional ``states -> pytree`` over all chains at once (leaves
            ``(num_chains, ...)``) per kept iteration, for streamed cross-chain statistics
            (e.g. an ensemble :class:`dgsgld.evaluate.Metric`). A metric passed as the other
            kind (its ``per_chain``) is refused with an error naming the field.

    Example:
        >>> out = Output(thin=10, burn_in=100, trace_fn=lambda s: s.position.mean(0))
    """

    thin: int = 1
    burn_in: int = 0
    positions: bool | None = None
    trace_fn: Callable[[Any], PyTree] | None = None
    ensemble_fn: Callable[[Any], PyTree] | None = None

    @property
    def stores_positions(self) -> bool:
        """Whether positions are stored (resolving the default of ``positions``)."""
        if self.positions is None:
            return self.trace_fn is None and self.ensemble_fn is None
        return bool(self.positions)


def _check_output(output, num_steps: int) -> Output:
    """``output`` validated against ``num_steps``: a clear error naming the field at fault."""
    if not isinstance(output, Output):
        raise ValueError(
            "`output` must be a dgsgld.Output (e.g. dgsgld.Output(thin=10)); "
            f"got {type(output).__name__}."
        )
    thin = _validation.check_positive_int(output.thin, name="output.thin")
    if num_steps % thin:
        raise ValueError(f"`num_steps` ({num_steps}) must be a multiple of `output.thin` ({thin}).")
    burn_in = _validation.check_burn_in(output.burn_in, num_steps, thin, name="output.burn_in")
    _validation.check_callable(output.trace_fn, name="output.trace_fn")
    _validation.check_callable(output.ensemble_fn, name="output.ensemble_fn")
    _check_metric_kind(output.trace_fn, per_chain=True)
    _check_metric_kind(output.ensemble_fn, per_chain=False)
    output = output._replace(**{
        f: _ArrayResult(fn, f"output.{f}") for f in ("trace_fn", "ensemble_fn")
        if (fn := getattr(output, f)) is not None and not isinstance(fn, _ArrayResult)})
    if output.positions is not None and not isinstance(output.positions, (bool, np.bool_)):
        raise ValueError(
            f"`output.positions` must be True, False or None; got {output.positions!r}."
        )
    return output._replace(thin=thin, burn_in=burn_in)


def _check_metric_kind(fn, *, per_chain: bool) -> None:
    """A :class:`dgsgld.evaluate.Metric` of the other kind (per-chain vs ensemble) refused."""
    kind = fn.per_chain if isinstance(fn, Metric) else None
    if kind is None or kind == per_chain:
        return
    if per_chain:
        raise ValueError(
            "`output.trace_fn` is an ensemble metric (per_chain=False: a function of all "
            "chains' states); pass it as `output.ensemble_fn`, or build the per-chain form "
            "(evaluate.streamed_consensus_error and evaluate.streamed_accuracy take "
            "per_chain=True).")
    raise ValueError(
        "`output.ensemble_fn` is a per-chain metric (per_chain=True: a function of one chain's "
        "state); pass it as `output.trace_fn`, or build it with per_chain=False.")


class _ArrayResult(eqx.Module):
    """``fn`` whose result is checked when traced to be a pytree of arrays (equal for equal
    ``fn``, so wrapping does not recompile)."""

    fn: Callable
    name: str = eqx.field(static=True)

    def __call__(self, *args):
        out = self.fn(*args)
        for path, leaf in jax.tree_util.tree_flatten_with_path(out)[0]:
            if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, bool, int, float)):
                where = jax.tree_util.keystr(path) or "the top level"
                raise TypeError(f"`{self.name}` must return a pytree of arrays; got "
                                f"{type(leaf).__name__} {leaf!r:.60} at {where}.")
        return out


class Divergence(NamedTuple):
    """Where each chain first diverged: a position non-finite, or at least
    ``divergence_threshold`` times ``max(1, largest |initial position|)`` of the chain
    (:mod:`dgsgld.evaluate._divergence`).

    Attributes:
        iteration: ``(num_chains,)`` first iteration with a diverged position, ``-1`` if none.
        agent: ``(num_chains,)`` the first agent diverged at that iteration (``0`` for the
            centralized sampler), ``-1`` if none.
    """

    iteration: Array
    agent: Array


class DivergenceError(FloatingPointError):
    """Raised by :func:`sample` when a chain diverges (see :class:`Divergence`)."""


class Trace(NamedTuple):
    """What :func:`sample` returns. Iteration axes hold iterations ``0, thin, 2 thin, ...``.

    Attributes:
        positions: leaves ``(num_chains, num_kept, N, *param_shape)`` (no agent axis for the
            centralized sampler); ``None`` when not stored.
        values: ``trace_fn(state)`` per chain and kept iteration, leaves ``(num_chains,
            num_kept, ...)``; ``None`` without ``trace_fn``.
        ensemble: ``ensemble_fn(states)`` per kept iteration (over all chains at once), leaves
            ``(num_kept, ...)``; ``None`` without ``ensemble_fn``.
        state: the final sampler state of every chain (leaves ``(num_chains, ...)``); pass it
            back as ``init`` to continue the run.
        divergence: a :class:`Divergence`: first non-finite iteration and agent per chain.
    """

    positions: PyTree | None
    values: PyTree | None
    ensemble: PyTree | None
    state: Any
    divergence: Divergence

    @property
    def diverged(self) -> Array:
        """``(num_chains,)`` boolean: chains that diverged (see :class:`Divergence`)."""
        return self.divergence.iteration >= 0


def chain_keys(key: PRNGKey, num_chains: int, start: int = 0) -> Array:
    """Keys ``fold_in(key, c)`` for chains ``c = start, ..., start + num_chains - 1``
    (``start`` may be traced)."""
    return jax.vmap(jax.random.fold_in, (None, 0))(key, start + jnp.arange(num_chains))


def _is_state(init) -> bool:
    # Fields, not attributes: every NamedTuple has a `count` method (e.g. a user's parameters).
    fields = getattr(init, "_fields", ()) if isinstance(init, tuple) else ()
    return "position" in fields and "count" in fields


def _check_inputs(algorithm, potential, stack, positions, key, num_steps, resume_state=None) -> int:
    """Validate before compiling; returns the number of chains."""
    if not isinstance(algorithm, SamplingAlgorithm):
        raise ValueError(
            "`algorithm` must be a sampler such as dgsgld.DIGingSGLD(step_size=...); "
            f"got {type(algorithm).__name__}."
        )
    if not isinstance(potential, Potential):
        raise ValueError(f"`potential` must be a dgsgld.Potential; got {type(potential).__name__}.")
    _validation.check_key(key)
    leaves = jax.tree.leaves(positions)
    if not leaves:
        raise ValueError("`init` must be a pytree with at least one array leaf.")
    lead = 2 if algorithm.decentralized else 1
    expect = "(num_chains, num_agents, *param_shape)" if lead == 2 else "(num_chains, *param_shape)"
    for path, leaf in jax.tree_util.tree_flatten_with_path(positions)[0]:
        if jnp.ndim(leaf) < lead:
            raise ValueError(
                f"`init` array leaves must be {expect}; got `init{jax.tree_util.keystr(path)}` "
                f"of shape {jnp.shape(leaf)}. Build per-chain (and per-agent) parameters with "
                "jax.vmap / eqx.filter_vmap; non-array leaves (e.g. an eqx.nn.MLP's activation) "
                "are static and need no axes."
            )
    _validation.check_floating_tree(positions, name="init")
    _validation.check_finite_tree(positions, name="init")
    num_chains = {jnp.shape(leaf)[0] for leaf in leaves}
    if len(num_chains) != 1:
        raise ValueError(f"`init` leaves disagree on the number of chains: {sorted(num_chains)}.")
    if 0 in num_chains:
        raise ValueError("`init` must hold at least one chain; got 0 on axis 0.")
    start = 0
    if resume_state is not None:
        template = jax.eval_shape(
            jax.vmap(algorithm.init, (0, None, 0)), positions, potential,
            chain_keys(key, num_chains.copy().pop()),
        )
        _validation.check_resume_state(resume_state, template, name="init")
        if _validation.is_concrete(resume_state.count):
            start = int(np.asarray(resume_state.count).reshape(-1)[0])
    _validation.check_iteration_range(start, num_steps)
    _validation.check_step_size_range(algorithm.step_size, start, start + num_steps)
    if algorithm.decentralized:
        agents = {jnp.shape(leaf)[1] for leaf in leaves}
        if agents != {potential.num_agents}:
            raise ValueError(
                f"`init` has {sorted(agents)} agents on axis 1 but `potential.data` holds "
                f"{potential.num_agents}; expected {expect}."
            )
        if stack is None:
            raise ValueError(f"`mixing` is required by {type(algorithm).__name__}; got None.")
        # W^(0) traced abstractly: a dense array, or any object with `@` (e.g. sparse).
        try:
            w0 = abstract_matrix(stack)
        except Exception as err:  # noqa: BLE001 - re-raised with the argument named
            raise ValueError(
                f"`mixing`.matrix_at(0) failed: {type(err).__name__}: {err}"
            ) from err
        shape = tuple(getattr(w0, "shape", ()))
        size = shape[-1] if len(shape) >= 2 else getattr(stack, "num_agents", potential.num_agents)
        if size != potential.num_agents or (len(shape) >= 2 and shape[-2] != size):
            raise ValueError(
                f"`mixing` matrices are {shape or (size, size)} but there are "
                f"{potential.num_agents} agents; expected ({potential.num_agents}, "
                f"{potential.num_agents})."
            )
    # Trace the model once on one chain's shapes so that shape/pytree mistakes in the user's
    # log-likelihood surface here, with context, rather than deep inside the compiled scan.
    one = jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(jnp.shape(leaf)[1:], jnp.result_type(leaf)), positions
    )
    if not algorithm.decentralized:
        # Every agent's view of one point: shared leaves repeated, private ones (N, ...) as given.
        private = potential.private_mask(one)
        one = jax.tree.map(
            lambda s, p: s if p else jax.ShapeDtypeStruct((potential.num_agents, *s.shape),
                                                          s.dtype),
            one, jax.tree.map(lambda _: False, one) if private is None else private)
    _check_model(potential, one)
    return num_chains.pop()


#: Signatures (model, data shapes, parameter shapes) whose gradient has been checked: tracing
#: the model again on every call would cost more than a paper-size run on a GPU.
_CHECKED_MODELS: dict = {}


def _check_model(potential: Potential, one) -> None:
    """Trace ``potential.grad`` on one chain's shapes (once per signature) and compare shapes."""
    signature = (
        jax.tree.structure(potential),
        tuple((jnp.shape(x), jnp.result_type(x)) for x in jax.tree.leaves(potential)),
        jax.tree.structure(one),
        tuple((s.shape, s.dtype) for s in jax.tree.leaves(one)),
    )
    try:
        if signature in _CHECKED_MODELS:
            return
    except TypeError:  # unhashable static field in a user's model: check every time
        signature = None
    if potential.log_likelihood is not None:
        # The user's functions, one at a time, so that an error names the one at fault.
        params = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), one)
        datum = jax.tree.map(
            lambda leaf: jax.ShapeDtypeStruct(jnp.shape(leaf)[2:], jnp.result_type(leaf)),
            potential.data,
        )
        shapes = jax.tree.map(lambda s: s.shape, params)
        what = f"parameters of shapes {shapes} (from `init`)"
        _validation.check_scalar_output(potential.log_likelihood, (params, datum),
                                        name="log_likelihood", what=what + " and one datum")
        if potential.log_prior is not None:
            _validation.check_scalar_output(potential.log_prior, (params,), name="log_prior",
                                            what=what)
    try:
        out = jax.eval_shape(potential.grad, one, jax.random.key(0))
    except Exception as err:  # noqa: BLE001 - re-raised with context
        shapes = jax.tree.map(lambda s: s.shape, one)
        raise ValueError(
            f"The model failed on per-agent parameters of shapes {shapes} (taken from `init`): "
            f"{type(err).__name__}: {err}"
        ) from err
    # Structure, shapes and dtypes (a dtype change would break the compiled loop's carry).
    _validation.check_gradient_matches(out, one, name="init")
    if signature is not None:
        if len(_CHECKED_MODELS) > 256:
            _CHECKED_MODELS.clear()
        _CHECKED_MODELS[signature] = True


def sample(
    algorithm: SamplingAlgorithm,
    potential: Potential,
    mixing,
    init: PyTree,
    key: PRNGKey,
    num_steps: int,
    *,
    output: Output = Output(),
    on_divergence: Literal["raise", "warn", "flag", "stop"] = "raise",
    progress: bool | int | str = False,
    chain_offset: int = 0,
    allow_disconnected: bool = False,
    connectivity_window: int | None = None,
    divergence_threshold: float = _divergence.DEFAULT_THRESHOLD,
    placement=None,
    channel=None,
) -> Trace:
    """Run ``num_chains`` independent chains of a sampler for ``num_steps`` iterations.

    Chain identity: chain ``c`` of the call draws as global chain ``chain_offset + c`` of
    ``key``. Two calls with the same ``key`` and ``chain_offset`` produce coupled chains (the
    same noise), whatever their starting points; pooling them silently shrinks every variance.
    To run one experiment's chains in several calls, give them disjoint offsets (chains 6-7 of
    an 8-chain run are ``sample(..., init[6:8], key, ..., chain_offset=6)``) or different keys.

    Parameters: ``init`` may be any pytree, e.g. an ``eqx.nn.MLP`` built with
    ``eqx.filter_vmap`` over chains and agents. Its array leaves carry the ``(num_chains,
    num_agents)`` axes; every other leaf (an activation function, an int) is static (the
    ``eqx.partition(init, eqx.is_array)`` convention): the loop carries the arrays, and the
    user's functions and ``trace.positions`` see ``eqx.combine(arrays, static)``.

    Args:
        algorithm: a sampler, e.g. ``dgsgld.DIGingSGLD(step_size=0.01)``.
        potential: the agents' potentials (:class:`dgsgld.Potential`).
        mixing: anything with ``matrix_at(k) -> W⁽ᵏ⁾`` (``dgsgld.networks`` and
            ``dgsgld.networks.sparse`` schedules, ``MixingStack``), or a ``(P, N, N)`` stack
            (``W⁽ᵏ⁾ = mixing[k % P]``) or one ``(N, N)`` matrix, wrapped in a
            :class:`~dgsgld.networks._mixing.MixingStack`; ``None`` for ``dgsgld.SGLD``.
            ``W[i, j]`` is the weight agent ``i`` puts on agent ``j``: ``x⁺ = W @ x``. Checked
            to be finite, symmetric, nonnegative and doubly stochastic, and jointly connected
            (see ``allow_disconnected``); a stack traced under the caller's ``jit`` is checked
            inside the computation (``equinox.error_if``: the call raises when it runs)
            (:mod:`dgsgld.networks.checked`).
        init: initial positions, leaves ``(num_chains, N, *param_shape)``
            (``(num_chains, *param_shape)`` for ``dgsgld.SGLD``), or ``trace.state`` of an
            earlier call to continue it.
        key: PRNG key (``jax.random.key(seed)`` or ``jax.random.PRNGKey(seed)``); ``rbg`` and
            ``unsafe_rbg`` keys are refused (their draws depend on how chains are batched).
        num_steps: iterations to run.
        output: what to keep (:class:`Output`: ``thin``, ``burn_in``, ``positions``,
            ``trace_fn``, ``ensemble_fn``); by default every iteration's positions.
        on_divergence: what to do when a chain diverges (checked at every iteration inside the
            compiled loop; see ``divergence_threshold``): ``"raise"`` a
            :class:`DivergenceError` naming the first iteration, chain and agent, and the cause
            when it is a schedule leaving its range or the model; ``"warn"``; or ``"flag"``
            (only set ``trace.divergence``); or ``"stop"``: flag, and once any chain diverges
            stop computing further iterations (the remaining kept iterations repeat the frozen
            state). Under the caller's ``jit``/``vmap``/``grad``, ``"raise"`` raises when the
            computation runs (``equinox.error_if``: a runtime error without the iteration and
            chain) and ``"warn"`` warns from a host callback; pass ``"flag"`` there to read
            ``trace.divergence`` instead (e.g. a grid of step sizes under ``vmap``).
        progress: a progress bar reported from inside the compiled loop (see
            :mod:`dgsgld.runner.progress`): ``False`` (default), ``True`` (about 100 reports, only
            when standard error is a terminal), ``"always"``, or a number of iterations between
            reports. ``DGSGLD_PROGRESS=0`` in the environment silences it.
        chain_offset: global index of the call's first chain (see "Chain identity" above).
            Continue a run with the offset it was started with.
        allow_disconnected: run even when the union of the network's graphs over its period
            (or over ``connectivity_window``) is disconnected, e.g. to study what happens then;
            by default such a network is refused with a ``ValueError`` naming the components.
        connectivity_window: ``B``: require every ``B`` consecutive snapshots of a stack to be
            jointly connected (default: the whole period). For schedules generated on the fly,
            the number of first snapshots checked (default 100, or the period when shorter).
        divergence_threshold: a chain has diverged when a coordinate of its position is
            non-finite or reaches ``divergence_threshold`` times ``max(1, max |initial
            position|)`` of the chain (the call's ``init``; :mod:`dgsgld.evaluate._divergence`): an
            unstable chain is caught while still finite. A number > 1; ``math.inf`` flags
            non-finite positions only. Raise it for parameters that legitimately travel
            further from their start.
        placement: where the loop runs: ``None`` (the default device), or
            :class:`dgsgld.parallel.devices.Chains` (chains split over a mesh) or
            :class:`dgsgld.parallel.devices.Agents` (agents split over a mesh). The same draws for
            the same key on every placement.
        channel: how agents exchange their messages (:mod:`dgsgld.communication`): ``None``
            (default: the sampler's own, exact mixing unless it was built with one) or a
            :class:`dgsgld.communication.Channel` (compression, error feedback, local steps,
            random rounds or links, event triggers, stragglers; byte counts in
            ``trace.state.channel``; ``Channel.bytes_sent(trace.state)``), on every
            placement with the same draws and counts.

    Returns:
        A :class:`Trace`.
    """
    _check_placement(placement)
    prep = _prepare(algorithm, potential, mixing, init, key, num_steps, output=output,
                    on_divergence=on_divergence, chain_offset=chain_offset,
                    allow_disconnected=allow_disconnected,
                    connectivity_window=connectivity_window,
                    divergence_threshold=divergence_threshold, channel=channel,
                    placement=placement)
    return _finish(prep, _execute(prep, placement, progress))


class Prepared(NamedTuple):
    """A run after the front end (host, once): what every placement executes.

    Attributes:
        algorithm, potential: validated; the potential's functions see the full parameters
            while it works on ``positions``' array leaves (``static`` holds the rest).
        stack: the checked network (``matrix_at``), ``None`` for a centralized sampler.
        state: a resume state (array leaves) or ``None``; ``positions``: the array leaves of
            ``init`` (or of ``state.position``), leaves ``(num_chains, ...)``.
        key: the run's key in :mod:`dgsgld.runner._random`'s implementation.
        num_chains, chain_offset, num_steps: chain identity and length.
        output: the checked :class:`Output`, ``trace_fn``/``ensemble_fn`` seeing full parameters.
        static: the non-array leaves of the parameters (``None``: all leaves are arrays).
        on_divergence, divergence_threshold: as for :func:`sample`.
    """

    algorithm: SamplingAlgorithm
    potential: Potential
    stack: Any
    state: Any
    positions: PyTree
    key: PRNGKey
    num_chains: int
    chain_offset: int
    num_steps: int
    output: Output
    static: Any
    on_divergence: str
    divergence_threshold: float


def _prepare(algorithm, potential, mixing, init, key, num_steps, *, output=Output(),
             on_divergence="raise", chain_offset=0, allow_disconnected=False,
             connectivity_window=None,
             divergence_threshold=_divergence.DEFAULT_THRESHOLD, channel=None,
             placement=None) -> Prepared:
    """The front end of every runner: validate, split static leaves, check the network, key;
    ``channel`` is installed in the algorithm (:func:`_with_channel`), and a ``placement``
    with a ``configure(algorithm, stack)`` adapts it before the state is checked (e.g.
    ``Agents``: the copies of public copies its neighbour exchange keeps)."""
    _check_on_divergence(on_divergence)
    algorithm = _with_channel(algorithm, channel)
    num_steps = _validation.check_positive_int(num_steps, name="num_steps")
    threshold = _divergence.check_threshold(divergence_threshold)
    output = _check_output(output, num_steps)
    trace_fn, ensemble_fn = output.trace_fn, output.ensemble_fn
    resume = _is_state(init)
    positions, static = _params.split_static(init.position if resume else init)
    if resume:
        init = init._replace(position=positions)
    if static is not None:
        potential, trace_fn, ensemble_fn = _see_static(static, potential, trace_fn, ensemble_fn)
    check_mixing_role(algorithm, mixing)
    mixing, prechecked = unwrap_checked(mixing, allow_disconnected, connectivity_window)
    mixing = network_for(algorithm, mixing)  # push-sum samplers take column-stochastic
    stack = as_mixing(mixing)
    algorithm = _with_listeners(algorithm, stack)
    if hasattr(placement, "configure"):
        algorithm = placement.configure(algorithm, stack)
    num_chains = _check_inputs(
        algorithm, potential, stack, positions, key, num_steps, init if resume else None
    )
    chain_offset = _check_chain_offset(chain_offset, num_chains)
    if stack is not None and not prechecked:
        checked = check_network(stack, init if resume else positions, allow_disconnected,
                                connectivity_window)
        init, positions = (checked, positions) if resume else (init, checked)
    output = output._replace(trace_fn=trace_fn, ensemble_fn=ensemble_fn)
    return Prepared(algorithm, potential, stack, init if resume else None, positions,
                    _random.fast_key(key), num_chains, chain_offset, num_steps, output, static,
                    on_divergence, threshold)


def _with_channel(algorithm, channel):
    """``algorithm`` with ``channel`` as its ``channel`` field (``None``: unchanged), checked
    against the sampler."""
    if channel is not None:
        communication.as_channel(channel)
        if not algorithm.decentralized:
            raise ValueError(
                f"`channel` must be None for {type(algorithm).__name__} (centralized: it sends "
                "no messages)."
            )
        if algorithm.channel is not None and algorithm.channel != channel:
            raise ValueError(
                f"`channel` differs from the channel {type(algorithm).__name__} was built with; "
                "give it in one place."
            )
        algorithm = eqx.tree_at(lambda a: a.channel, algorithm, channel,
                                is_leaf=lambda x: x is None)
    return algorithm


def _with_listeners(algorithm, stack):
    """``algorithm`` with its channel as it runs over the network ``stack``
    (:meth:`dgsgld.communication.Channel.for_network`: public copies count every agent that
    ever listens as a receiver of each update); unchanged otherwise."""
    channel = getattr(algorithm, "channel", None)
    if channel is None or stack is None:
        return algorithm
    configured = channel.for_network(stack)
    if configured is channel:
        return algorithm
    return eqx.tree_at(lambda a: a.channel, algorithm, configured)


def _check_on_divergence(on_divergence: str) -> str:
    if on_divergence not in ("raise", "warn", "flag", "stop"):
        raise ValueError(
            f"`on_divergence` must be 'raise', 'warn', 'flag' or 'stop'; got {on_divergence!r}."
        )
    return on_divergence


def _check_placement(placement) -> None:
    if placement is not None and not callable(getattr(placement, "execute", None)):
        raise ValueError(
            "`placement` must be None (one device) or a placement such as "
            "dgsgld.parallel.devices.Chains(mesh) or dgsgld.parallel.devices.Agents(mesh); "
            f"got {type(placement).__name__}."
        )


def _execute(prep: Prepared, placement=None, progress: bool | int | str = False) -> Trace:
    """Run the compiled loop on ``placement`` (``None``: one device); the trace as the loop
    leaves it (array leaves only, burn-in kept, divergence flagged, not reported)."""
    # The bar is reached through an int32 token (a traced argument), so that turning progress
    # on does not recompile for every call; only the report spacing is static.
    every, token, bar = 0, np.int32(0), None   # NumPy: no eager program to make it
    if _progress.wants_progress(progress):
        every = _progress.report_every(progress, prep.num_steps, prep.output.thin)
        bar = _progress.ProgressBar(prep.num_steps)
        token = _progress.register(bar)
    try:
        if placement is None:
            return _execute_here(prep, every, token)
        return placement.execute(prep, every, token)
    finally:
        if bar is not None:
            _progress.unregister(token)
            bar.update_to(prep.num_steps)
            bar.close()


def _execute_here(prep: Prepared, every: int = 0, token=np.int32(0)) -> Trace:
    """The loop on the devices its inputs are on (one, or chains sharded by the compiler)."""
    out = prep.output
    return _run(prep.algorithm, prep.potential, prep.stack, prep.state, prep.positions,
                prep.key, prep.num_chains, prep.num_steps, out.thin, out.trace_fn,
                out.ensemble_fn, out.stores_positions, prep.on_divergence == "stop", every,
                token, _chains_last(), chain_offset=np.int32(prep.chain_offset),
                divergence_threshold=np.float32(prep.divergence_threshold))


def _finish(prep: Prepared, trace: Trace) -> Trace:
    """Report divergence as asked, drop the burn-in, give positions their static leaves."""
    how, threshold = prep.on_divergence, prep.divergence_threshold
    if how in ("raise", "warn") and _validation.is_concrete(trace.divergence.iteration):
        iteration = np.asarray(trace.divergence.iteration)
        cause = None
        if (iteration >= 0).any():  # a schedule out of range first, then the model
            start = int(np.asarray(trace.state.count).reshape(-1)[0]) - prep.num_steps
            first = int(iteration[iteration >= 0].min())
            cause = (_divergence.schedule_cause(prep.algorithm, start, first)
                     or _divergence_cause(trace, prep.potential, prep.key,
                                          prep.algorithm.decentralized, prep.num_steps,
                                          prep.output.thin))
        _report_divergence(trace.divergence, how, cause, threshold)
    elif how in ("raise", "warn"):  # traced by the caller's jit/vmap/grad
        trace = _divergence_under_trace(trace, how, threshold)
    return _with_static(_drop_burn_in(trace, prep.output.burn_in // prep.output.thin),
                        prep.static)


def _report_divergence(divergence: Divergence, how: str, cause: str | None = None,
                       threshold: float = _divergence.DEFAULT_THRESHOLD) -> None:
    iteration = np.asarray(divergence.iteration).reshape(-1)
    bad = np.flatnonzero(iteration >= 0)
    if bad.size == 0:
        return
    first = bad[np.argmin(iteration[bad])]
    message = (
        f"{bad.size} of {iteration.size} chains diverged ({_divergence.describe(threshold)}); "
        f"the first at iteration {int(iteration[first])}, chain {int(first)}, agent "
        f"{int(np.asarray(divergence.agent).reshape(-1)[first])}. "
        + ("Reduce the step size (or raise `divergence_threshold` if the chains legitimately "
           "travel that far)" if cause is None else cause)
        + ", or pass on_divergence='flag' to get the trace back with `trace.divergence` set."
    )
    if how == "raise":
        raise DivergenceError(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _divergence_under_trace(trace: Trace, how: str, threshold: float) -> Trace:
    """``trace`` with the divergence report attached for a run traced by the caller
    (``jit``/``vmap``/``grad``): ``"raise"`` by ``equinox.error_if`` (raises when the
    computation runs, as the traced network checks do), ``"warn"`` from a host callback."""
    diverged = jnp.any(trace.divergence.iteration >= 0)
    if how == "warn":
        jax.debug.callback(lambda it, ag: _report_divergence(Divergence(it, ag), "warn",
                                                             threshold=threshold),
                           trace.divergence.iteration, trace.divergence.agent)
        return trace
    return eqx.error_if(
        trace, diverged,
        f"dgsgld.sample: chains diverged ({_divergence.describe(threshold)}) inside the "
        "caller's jit/vmap/grad, with on_divergence='raise'. Reduce the step size; for the "
        "iteration, chain and agent call sample outside jit, or pass on_divergence='flag' and "
        "read `trace.divergence` (e.g. for a grid of step sizes under vmap).")


def _chains_last() -> bool:
    """Whether the loop keeps small leaves' chain axis last: on XLA:CPU (:func:`_chain_axes`)."""
    return jax.default_backend() == "cpu"


def _chain_axes(state, num_chains: int, chains_last: bool):
    """Where the loop keeps each state leaf's chain axis: ``0``, or ``-1`` (last) when
    ``chains_last`` and the leaf's own last axis is shorter than the number of chains.

    The runner's one layout choice, made for XLA:CPU (``sample`` turns it on there only): it
    vectorises elementwise work along the last axis and runs the per-chain ``W @ x`` as one
    matrix product when chains are last; with chains first a paper-size run (200 chains,
    leaves ``(20, 6)``) is 3-5x slower. Only ``vmap``'s ``in_axes``/``out_axes`` change: the
    numbers are the same (``tests/samplers/test_samplers.py``).
    """

    def axis(leaf):
        shape = jnp.shape(leaf)[1:]
        return -1 if chains_last and len(shape) >= 1 and num_chains > shape[-1] else 0

    return jax.tree.map(axis, state)


def _move_chains(tree, axes, inward: bool):
    """Chain axis from first to ``axes`` (``inward``) or back to first."""

    def one(leaf, axis):
        if axis == 0:
            return leaf
        return jnp.moveaxis(leaf, 0, -1) if inward else jnp.moveaxis(leaf, -1, 0)

    return jax.tree.map(one, tree, axes)


class Whole(eqx.Module):
    """The network as one device's loop sees it: every agent's rows (see
    :class:`dgsgld.parallel.devices.AgentBlock` for a device's block of them).

    What :func:`_loop` asks of a network application: ``potential`` (what ``step``
    differentiates), ``matrix_at(k)`` (its mixing operand), ``noise`` (its rows of the
    network's noise), ``first`` (its first agent), ``gather`` (states with every agent, for
    ``trace_fn``/``ensemble_fn``), ``any`` (over the network) and ``divergence`` (combined
    over the network).
    """

    potential: Potential
    mixing: Any
    first: int = eqx.field(default=0, static=True)

    def matrix_at(self, k):
        return None if self.mixing is None else self.mixing.matrix_at(k)

    def noise(self, algorithm, key, position):
        return algorithm.noise(key, position)

    def gather(self, states):
        return states

    def any(self, flag):
        return flag

    def max(self, value):
        return value

    def divergence(self, div: Divergence) -> Divergence:
        return div


def _loop(algorithm, app, state, positions, key, num_chains, num_steps, thin, trace_fn,
          ensemble_fn, store_positions, stop_on_divergence, progress_every, progress_token,
          chains_last, chain_offset, divergence_threshold) -> Trace:
    """The sampling loop of every runner (traced inside its ``jit``, or ``shard_map``).

    Chain ``c`` draws from ``fold_in(key, chain_offset + c)``; ``lax.scan`` over kept
    iterations, each a ``scan`` of ``thin`` steps of the ``vmap``-ed ``algorithm.step`` on
    ``app`` (:class:`Whole`'s protocol). ``state``: a resume state or ``None`` (then
    ``algorithm.init`` of ``positions``). Returns a :class:`Trace` (burn-in kept).
    """
    split = jax.vmap(jax.random.split)(chain_keys(key, num_chains, chain_offset))
    init_keys, run_keys = split[:, 0], split[:, 1]
    if state is None:
        state = jax.vmap(algorithm.init, (0, None, 0))(positions, app.potential, init_keys)
    axes = _chain_axes(state, num_chains, chains_last)
    # The barrier keeps XLA from folding this transpose into the layout of the product that
    # made the state (XLA:CPU's small-dot emitter aborts on such layouts, e.g. 3 chains, d = 2).
    state = _move_chains(jax.lax.optimization_barrier(state), axes, inward=True)
    # The noise is drawn for all chains before the step, in the layout of the positions: drawn
    # inside the vmapped step it would come out chains-first and drag the state with it. Leaves
    # with the chain axis first get it flat, and the step updates them in that shape: XLA:CPU
    # then fuses the draw and the update into one loop over a long axis, not the short last one.
    flat = jax.tree.map(lambda axis: axis == 0, axes.position)
    noise = jax.vmap(
        lambda k, p: _tree.flatten_where(app.noise(algorithm, k, p), flat),
        (0, axes.position), axes.position)
    step = jax.vmap(algorithm.step, (0, axes, None, None, axes.position), axes)
    # Each chain's scale max(1, max |x⁽⁰⁾|), over all its agents.
    scale = app.max(jax.vmap(_divergence.reference, (axes.position,))(state.position))  # (C,)
    check = jax.vmap(lambda p, r: _divergence.first_bad_agent(
        p, r, divergence_threshold, algorithm.decentralized), (axes.position, 0))

    def one_step(carry, _):
        states, div = carry
        k = states.count[0]
        keys = jax.vmap(jax.random.fold_in, (0, None))(run_keys, k)
        states = step(keys, states, app.potential, app.matrix_at(k),
                      noise(keys, states.position))
        bad, agent = check(states.position, scale)
        new = bad & (div.iteration < 0)
        div = Divergence(
            jnp.where(new, k + 1, div.iteration).astype(jnp.int32),
            jnp.where(new, app.first + agent, div.agent).astype(jnp.int32),
        )
        return (states, div), None

    def run_thin(carry):
        return jax.lax.scan(one_step, carry, None, length=thin)[0]

    def record(states):
        return (
            states.position if store_positions else None,
            None if trace_fn is None else jax.vmap(trace_fn, (axes,))(app.gather(states)),
            None if ensemble_fn is None
            else ensemble_fn(app.gather(_move_chains(states, axes, False))),
        )

    def outer(carry, done):
        if stop_on_divergence:
            # Skipping costs a copy of the carried state (XLA copies a `cond`'s operands), a
            # price only this opt-in mode pays.
            stopped = app.any(jnp.any(carry[1].iteration >= 0))
            carry = jax.lax.cond(stopped, lambda c: c, run_thin, carry)
        else:
            carry = run_thin(carry)
        if progress_every:
            _progress.tick(progress_token, done, progress_every)
        return carry, record(carry[0])

    minus_one = jnp.full((num_chains,), -1, jnp.int32)
    carry = (state, Divergence(minus_one, minus_one))
    # The initial state is recorded before the loop, and the barrier makes the loop wait for
    # that record: XLA:CPU runs independent parts of a program at once, and two batched LAPACK
    # calls at once (say an `eigh` of a streamed W2 of the initial state beside one of the
    # first kept iteration) can deadlock its thread pool (docs/known-issues.md).
    first, carry = jax.lax.optimization_barrier((record(state), carry))
    done = thin * jnp.arange(1, num_steps // thin + 1, dtype=jnp.int32)  # iterations run
    (final, div), kept = jax.lax.scan(outer, carry, done)
    kept = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, kept)
    positions, values, ensemble = kept
    # Kept iterations are stacked in front: (K, C, ...) or (K, ..., C) -> (C, K, ...).
    if positions is not None:
        positions = jax.tree.map(
            lambda a, axis: jnp.moveaxis(a, 1 if axis == 0 else -1, 0), positions, axes.position
        )
    values = jax.tree.map(lambda a: jnp.moveaxis(a, 0, 1), values)
    final = _move_chains(final, axes, inward=False)
    return Trace(positions, values, ensemble, final, app.divergence(div))


@eqx.filter_jit
def _run(algorithm, potential, mixing, state, positions, key, num_chains, num_steps, thin,
         trace_fn, ensemble_fn, store_positions, stop_on_divergence, progress_every=0,
         progress_token=None, chains_last=False, chain_offset=0,
         divergence_threshold=_divergence.DEFAULT_THRESHOLD):
    """:func:`_loop` over :class:`Whole` (compiled once per configuration and shapes)."""
    # Sparse snapshots gather along the agent axis: their loop keeps chains first, unless the
    # format says its product keeps chains last like the dense one (``chains_last``).
    w0 = None if mixing is None else abstract_matrix(mixing)
    dense = (mixing is None or isinstance(w0, jax.ShapeDtypeStruct)
             or getattr(w0, "chains_last", False))
    return _loop(algorithm, Whole(potential, mixing), state, positions, key, num_chains,
                 num_steps, thin, trace_fn, ensemble_fn, store_positions, stop_on_divergence,
                 progress_every, progress_token, chains_last and dense, chain_offset,
                 divergence_threshold)


def num_kept(num_steps: int, thin: int = 1) -> int:
    """Length of the iteration axis of a trace: iterations ``0, thin, ..., num_steps``."""
    return num_steps // thin + 1


# -- runner guarantees: chain identity, pytrees ------------------------------------------------


def _check_chain_offset(chain_offset, num_chains: int) -> int:
    if (isinstance(chain_offset, bool) or not isinstance(chain_offset, (int, np.integer))
            or chain_offset < 0):
        raise ValueError(f"`chain_offset` must be a nonnegative integer; got {chain_offset!r}.")
    if chain_offset + num_chains > 2**31 - 1:
        raise ValueError(
            f"`chain_offset` + num_chains must be at most 2**31 - 1; got {chain_offset} + "
            f"{num_chains}."
        )
    return int(chain_offset)


def _see_static(static: _params.Static, potential: Potential, trace_fn, ensemble_fn):
    """The potential, ``trace_fn`` and ``ensemble_fn`` rewired to see the full parameters
    while the loop (and ``jax.grad`` inside ``Potential``) works on the array leaves only."""
    wrap = lambda fn: None if fn is None else _params.OnFull(fn, static, "state")  # noqa: E731
    return _params.potential_on_arrays(potential, static), wrap(trace_fn), wrap(ensemble_fn)


def _with_static(trace: Trace, static: _params.Static | None) -> Trace:
    """``trace.positions`` and ``trace.state.position`` as full parameters (models to call)."""
    if static is None:
        return trace
    positions = None if trace.positions is None else static.combine(trace.positions)
    state = trace.state._replace(position=static.combine(trace.state.position))
    return trace._replace(positions=positions, state=state)


def _drop_burn_in(trace: Trace, skip: int) -> Trace:
    """Drop the first ``skip`` kept iterations (axis 1 per chain, axis 0 of ``ensemble``)."""
    if skip == 0:
        return trace
    return trace._replace(
        positions=jax.tree.map(lambda a: a[:, skip:], trace.positions),
        values=jax.tree.map(lambda a: a[:, skip:], trace.values),
        ensemble=jax.tree.map(lambda a: a[skip:], trace.ensemble),
    )


def _divergence_cause(trace: Trace, potential: Potential, key, decentralized: bool,
                      num_steps: int, thin: int) -> str | None:
    """A model that returns NaN at finite parameters, when that is what diverged.

    Re-evaluates the gradient (host, once) at the first diverged chain's last finite stored
    position. A non-finite gradient there, at parameters far from overflow (``|x| <
    sqrt(max float)``; an unstable step size reaches them only just before overflowing), is
    the model's fault, not the step size's. ``None``: not the model, or not checkable
    (positions not stored).
    """
    iteration = np.asarray(trace.divergence.iteration)
    bad = np.flatnonzero(iteration >= 0)
    if bad.size == 0 or trace.positions is None or not all(
            getattr(leaf, "is_fully_addressable", True)
            for leaf in jax.tree.leaves(trace.positions)):  # split over processes
        return None
    c = int(bad[np.argmin(iteration[bad])])
    chain = [np.asarray(leaf[c]) for leaf in jax.tree.leaves(trace.positions)]
    finite = np.all([np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1) for a in chain], axis=0)
    j = int(np.argmin(finite)) - 1 if not finite.all() else len(finite) - 1
    if j < 0:
        return None
    x = jax.tree.map(lambda leaf: leaf[c, j], trace.positions)
    grad = eqx.filter_jit(
        lambda pot, x, k: pot.grad(x, k) if decentralized else pot.pooled_grad(x, k)
    )(potential, x, key)
    if all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grad)):
        return None
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(x)]
    largest = max(float(np.abs(a).max(initial=0.0)) for a in leaves)
    if largest > np.sqrt(float(np.finfo(leaves[0].dtype).max)):
        return None
    at = int(np.asarray(trace.state.count).reshape(-1)[0]) - num_steps + j * thin
    return (
        f"The model's gradient is already non-finite at chain {c}'s last finite stored position "
        f"(iteration {at}, largest |parameter| {largest:.3g}): `log_likelihood`, `log_prior` or "
        "`gradient_fn` returns NaN or inf at finite parameters (e.g. the log or square root of "
        "a negative number, 0/0), which a smaller step size will not fix. Fix the model"
    )
