"""A network as :func:`dgsgld.sample` runs it: its checks, and a network whose checks ran.

:func:`check_network` runs the checks of :func:`dgsgld.sample` on a network (its values and
its joint connectivity): on the host for a concrete network, inside the computation
(``equinox.error_if``) for a traced one. :class:`CheckedNetwork` (built by
:func:`checked_network`) is a network whose host checks already ran, which :func:`dgsgld.sample`
runs without checking it again, even when it is traced under the caller's ``jit``.
"""

from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .._util import validation as _validation
from ._mixing import MixingStack, as_mixing, stochastic_sums
from ._util import on_the_fly_window
from .connectivity import check_joint_connectivity, union_adjacency
from .validation import check_values

__all__ = ["CheckedNetwork", "checked_network"]


def check_mixing_role(algorithm, mixing) -> None:
    """A centralized sampler has no network: a mixing given to it would be silently unused."""
    if mixing is not None and not getattr(algorithm, "decentralized", True):
        raise ValueError(
            f"`mixing` must be None for {type(algorithm).__name__} (centralized: it has no "
            f"network and would ignore one); got {type(mixing).__name__}."
        )


class CheckedNetwork(eqx.Module):
    """A network whose :func:`dgsgld.sample` checks ran on the host when it was built;
    :func:`dgsgld.sample` runs it without checking it again, even when it is traced under the
    caller's ``jit``.

    Build it with :func:`checked_network` (or this constructor, which runs the same checks:
    there is no way to build one unchecked; JAX's unflattening inside ``jit`` does not call it).

    Attributes:
        mixing: the network as :func:`dgsgld.sample` takes it (a dense stack is a
            :class:`~dgsgld.networks._mixing.MixingStack`); a pytree leaf, so it may be traced.
        allow_disconnected, connectivity_window: the settings it was checked with (static).
    """

    mixing: Any
    allow_disconnected: bool = eqx.field(static=True)
    connectivity_window: int | None = eqx.field(static=True)

    def __init__(self, mixing, *, allow_disconnected: bool = False,
                 connectivity_window: int | None = None):
        if isinstance(mixing, CheckedNetwork):
            mixing = mixing.mixing
        stack = as_mixing(mixing)  # a dense stack is checked here (finite, doubly stochastic, ...)
        if stack is None:
            raise ValueError("`mixing` is None: there is no network to check.")
        if not _validation.is_concrete_tree(stack):
            raise ValueError(
                "`mixing` is traced: checked_network checks on the host. Call it outside jit, "
                "or pass the network to sample as it is (it is then checked inside the "
                "computation)."
            )
        check_network(stack, None, allow_disconnected, connectivity_window)
        self.mixing = stack
        self.allow_disconnected = bool(allow_disconnected)
        self.connectivity_window = connectivity_window

    def matrix_at(self, k):
        return self.mixing.matrix_at(k)


def checked_network(mixing, *, allow_disconnected: bool = False,
                    connectivity_window: int | None = None) -> CheckedNetwork:
    """Run :func:`dgsgld.sample`'s network checks now, on the host, and mark the network as
    checked.

    A network traced under ``jit`` is checked inside the computation (``equinox.error_if``),
    which puts host callbacks in the program, and JAX's persistent compilation cache stores no
    program with host callbacks. Check a concrete network here and pass the result through
    the ``jit`` instead: the program then carries no check, is cached across processes, and is
    reused in-process for every network of the same shapes (e.g. one per seed). Pass
    ``on_divergence="flag"`` (or ``"stop"``) to :func:`dgsgld.sample` there too: the default
    ``"raise"`` checks for divergence inside a traced call by a host callback as well.

    Args:
        mixing: as for :func:`dgsgld.sample`; concrete (not traced).
        allow_disconnected, connectivity_window: as for :func:`dgsgld.sample`.

    Returns:
        A :class:`CheckedNetwork`.

    Raises:
        ValueError: what :func:`dgsgld.sample` would raise for this network, or if it is traced.
    """
    return CheckedNetwork(mixing, allow_disconnected=allow_disconnected,
                          connectivity_window=connectivity_window)


def checked_if_concrete(mixing):
    """:func:`checked_network` of a concrete network; a traced one or ``None`` as it is (then
    :func:`dgsgld.sample` checks it inside the computation). For drivers that call
    :func:`dgsgld.sample` under their own ``jit`` with the network as an argument (grid
    searches, pilots)."""
    if mixing is None or isinstance(mixing, CheckedNetwork):
        return mixing
    if not _validation.is_concrete_tree(mixing):
        return mixing
    return checked_network(mixing)


def unwrap_checked(mixing, allow_disconnected: bool, connectivity_window) -> tuple[Any, bool]:
    """``(network, prechecked)``: the network inside a :class:`CheckedNetwork` and ``True``, or
    ``mixing`` as it is and ``False``.

    Raises:
        ValueError: if ``mixing`` is a :class:`CheckedNetwork` and check settings are given too
            (they belong to :func:`checked_network`, which ran the checks).
    """
    if not isinstance(mixing, CheckedNetwork):
        return mixing, False
    if allow_disconnected or connectivity_window is not None:
        raise ValueError(
            "`mixing` is a CheckedNetwork: give `allow_disconnected`/`connectivity_window` "
            "to dgsgld.checked_network, which ran the checks, not to sample."
        )
    return mixing.mixing, True


def check_network(stack, target, allow_disconnected: bool, window):
    """Joint connectivity of the network ``stack`` (:func:`~dgsgld.networks._mixing.as_mixing`
    of it; checked on the host, or inside the computation when traced), plus the mixing checks
    that :func:`dgsgld._util.validation.check_mixing` could not run on a traced stack.

    Returns ``target`` (the run's initial positions or state) with the in-computation checks
    attached, so that the compiled run cannot skip them.
    """
    # Dense stacks are checked as arrays (their period, traced or not); other schedules
    # through their own protocol.
    if isinstance(stack, MixingStack):
        stack = stack.matrices
    if window is not None:
        _validation.check_positive_int(window, name="connectivity_window")
    schedule = hasattr(stack, "matrix_at")
    if _validation.is_concrete_tree(stack):
        if schedule:  # a dense stack was checked by MixingStack; the other forms here
            check_values(stack, window, name="mixing")
        if not allow_disconnected:
            try:
                check_joint_connectivity(stack, window, name="mixing")
            except ValueError as err:
                raise ValueError(
                    f"{err} Agents in different components never exchange information, so "
                    "their samples do not target the posterior (Assumption 3.2(iii)). Pass "
                    "allow_disconnected=True to run anyway"
                    + ("." if schedule else ", or check a window with connectivity_window=B.")
                ) from None
        return target
    if not schedule or hasattr(stack, "snapshots"):  # a sparse schedule: its dense stack
        dense = stack.todense() if schedule else stack
        target = _validation.mixing_error_if(target, dense, name="mixing",
                                             sums=stochastic_sums(stack))
    if allow_disconnected:
        return target
    if schedule:
        num = on_the_fly_window(stack, window) if not hasattr(stack, "snapshots") else None
        union = (jnp.any(stack.todense() != 0, axis=0) if num is None
                 else union_adjacency(stack, num))
        what = "its period" if num is None else f"its first {num} snapshots"
    else:
        union, what = jnp.any(stack != 0, axis=0), "its period"
    return _validation.connectivity_error_if(target, union, name="mixing", what=what)
