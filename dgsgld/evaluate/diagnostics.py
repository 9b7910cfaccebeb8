"""Convergence diagnostics per agent: effective sample size, split R-hat.

(Consensus error over time: :func:`dgsgld.evaluate.consensus_error` of ``trace.positions``.)

Every function takes draws laid out chain-major, ``(chain, draw, ...)``, as in
``trace.positions`` (``(num_chains, num_kept, N, *param_shape)``), and treats each trailing
entry (agent ``i``, coordinate ``j``) as its own scalar quantity, so ``ess(trace.positions)`` is
``(N, *param_shape)``: the effective sample size of every coordinate of every agent.

The estimators are those of Vehtari, Gelman, Simpson, Carpenter and Bürkner (2021), "Rank-
normalization, folding, and localization: an improved R-hat", as implemented in ArviZ (whose
default ``ess`` and ``rhat`` these reproduce to rounding):

* split chains: each chain's first and second halves count as two chains (a middle draw of an
  odd-length chain is dropped), so a trend within a chain shows up as disagreement;
* rank normalization: draws are replaced by ``Φ⁻¹((rank − 3/8) / (S + 1/4))`` over all ``S``
  pooled draws, which makes the statistics robust to heavy tails;
* ``rhat``: the larger of the split R-hat of the rank-normalized draws (bulk) and of the
  rank-normalized ``|draw − median|`` (tails), with
  ``R̂ = sqrt(((n − 1)/n · W + B/n) / W)`` for ``m`` (split) chains of ``n`` draws, ``W`` the
  mean within-chain variance and ``B/n`` the variance of the chain means;
* ``ess`` (bulk): ``m n / τ̂`` with ``τ̂ = −1 + 2 Σ ρ̂_t`` summed over Geyer's initial
  monotone sequence of autocorrelation pairs, the autocorrelations ``ρ̂_t`` combining within- and
  between-chain variance (FFT autocovariances).

Parameters may be any pytree (a dict, a NamedTuple, an ``eqx.Module``): every function maps
over the array leaves and returns the same structure (non-array leaves of an equinox module,
such as its activation function, come back as ``None``). ``ess(trace.positions)`` on
``{"w": (C, T, N, 3), "b": (C, T, N)}`` is ``{"w": (N, 3), "b": (N,)}``.

A diverged chain never enters a summary silently: a chain flagged by the run
(``trace.divergence``) or with a diverged draw in any leaf (non-finite, or at least
``divergence_threshold`` times ``max(1, max |first draw|)`` of the chain: the runner's
definition, :mod:`dgsgld.evaluate._divergence`) is refused (``diverged="raise"``, the default,
says how many chains and how to drop them) or left out of every leaf with a warning
(``diverged="drop"``).

ArviZ itself is optional (``pip install dgsgld[diagnostics]``: ArviZ 0.x on Python 3.11, 1.x
on Python 3.12 and later), needed only by :func:`to_arviz`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import numpy as np
from scipy import special, stats

from .._util import validation as _validation
from . import _divergence as _divergence

__all__ = [
    "ess",
    "rhat",
    "split_rhat",
    "network_average",
    "diverged_chains",
    "agent_summary",
    "to_arviz",
]


_DIVERGED = ("raise", "drop")


def _positions_of(samples):
    """``(positions, diverged flags or None)`` of a :class:`dgsgld.Trace` or of bare draws."""
    if hasattr(samples, "positions") and hasattr(samples, "divergence"):
        if samples.positions is None:
            raise ValueError(
                "`trace` has no stored positions (run sample with "
                "output=dgsgld.Output(positions=True))."
            )
        return samples.positions, np.asarray(samples.divergence.iteration) >= 0
    return samples, None


def _array_leaves(tree, name: str) -> list:
    """``[(path, leaf)]`` of the array leaves of ``tree`` (an equinox module's others skipped)."""
    flat = jax.tree_util.tree_flatten_with_path(eqx.filter(tree, eqx.is_array))[0]
    if not flat:
        raise ValueError(
            f"`{name}` must hold at least one array leaf; got {type(tree).__name__} with none."
        )
    return flat


def _leaf_name(name: str, path) -> str:
    return _validation._leaf_name(name, path)


def diverged_chains(samples, *, name: str = "samples",
                    divergence_threshold: float = _divergence.DEFAULT_THRESHOLD) -> np.ndarray:
    """Chains with a diverged draw in any array leaf: non-finite, or at least
    ``divergence_threshold`` times ``max(1, max |first draw|)`` of the chain (the runner's
    definition, see :func:`dgsgld.sample`).

    Args:
        samples: draws, leaves ``(chain, draw, ...)`` (or ``(chain,)``: only non-finite values
            count), or a :class:`dgsgld.Trace` (whose ``trace.diverged`` chains count too).
        name: the argument's name for error messages.
        divergence_threshold: as for :func:`dgsgld.sample`; ``math.inf``: non-finite only.

    Returns:
        ``(chain,)`` boolean.
    """
    positions, flagged = _positions_of(samples)
    flat = _array_leaves(positions, name)
    chains = {np.shape(leaf)[0] if np.ndim(leaf) else None for _, leaf in flat}
    if len(chains) != 1 or None in chains:
        shapes = {_leaf_name(name, path): np.shape(leaf) for path, leaf in flat}
        raise ValueError(
            f"`{name}` leaves must share a leading chain axis; got shapes {shapes}."
        )
    threshold = _divergence.check_threshold(divergence_threshold)
    bad = np.zeros(chains.pop(), bool) if flagged is None else flagged.copy()
    draws = []
    for _, leaf in flat:
        arr = np.asarray(leaf)
        if np.issubdtype(arr.dtype, np.inexact) and arr.size:
            bad |= ~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1)
            if arr.ndim >= 2:
                draws.append(arr)
    if draws:
        bad |= _divergence.diverged_draws(draws, threshold)
    return bad


def _finite_chains(samples, name: str, diverged: str,
                   threshold: float = _divergence.DEFAULT_THRESHOLD):
    """The array leaves of ``samples`` without diverged chains (per ``diverged``)."""
    if diverged not in _DIVERGED:
        raise ValueError(f"`diverged` must be 'raise' or 'drop'; got {diverged!r}.")
    positions, _ = _positions_of(samples)
    arrays = eqx.filter(positions, eqx.is_array)
    bad = diverged_chains(samples, name=name, divergence_threshold=threshold)
    if not bad.any():
        return arrays
    count, total, which = int(bad.sum()), bad.size, np.flatnonzero(bad).tolist()
    if diverged == "raise" or count == total:
        raise ValueError(
            f"`{name}`: {count} of {total} chains diverged (`trace.diverged`, or draws with "
            f"{_divergence.describe(threshold, 'draw', 'first draw')}"
            f"; chains {which}). Did the run diverge? See `trace.divergence`."
            + (f" Pass diverged='drop' to summarize the other {total - count} chains only."
               if count < total else " No chain is left to summarize.")
        )
    warnings.warn(
        f"Dropped {count} of {total} diverged chains (chains {which}) from `{name}`; the "
        f"summary uses the other {total - count}.",
        RuntimeWarning,
        stacklevel=3,
    )
    return jax.tree.map(lambda leaf: np.asarray(leaf)[~bad], arrays)


def _per_leaf(fn: Callable[[np.ndarray], np.ndarray], arrays, name: str, min_chains: int = 1):
    """``fn((chain, draw, K) float64) -> (K,)`` on every array leaf, reshaped to
    ``leaf.shape[2:]``; the result has the structure of ``arrays``."""

    def one(path, leaf):
        leaf_name = _leaf_name(name, path)
        x = _as_draws(leaf, leaf_name)
        if x.shape[0] < min_chains:
            raise ValueError(
                f"`{leaf_name}` needs at least {min_chains} chains to compare them; got "
                f"{x.shape[0]} (shape (chain, draw, ...) = {x.shape[:2]} + ...)."
            )
        return fn(x).reshape(np.shape(leaf)[2:])

    return jax.tree_util.tree_map_with_path(one, arrays)


def _as_draws(samples, name: str) -> np.ndarray:
    """``(chain, draw, K)`` float64 array of ``samples (chain, draw, ...)``."""
    _validation.check_samples(samples, name=name, min_ndim=2, layout="(chain, draw, ...)")
    x = np.asarray(samples, dtype=np.float64)
    if x.shape[1] < 4:
        raise ValueError(f"`{name}` needs at least 4 draws per chain; got shape {x.shape}.")
    return x.reshape(x.shape[0], x.shape[1], -1)


def _split(x: np.ndarray) -> np.ndarray:
    """``(2 chain, draw // 2, K)``: first and last halves of every chain."""
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half:]], axis=0)


def _rank_normalize(x: np.ndarray) -> np.ndarray:
    """Normal scores of the pooled ranks of each column of ``x (chain, draw, K)``."""
    c, n, k = x.shape
    ranks = stats.rankdata(x.reshape(c * n, k), method="average", axis=0)
    size = c * n
    return special.ndtri((ranks - 0.375) / (size + 0.25)).reshape(c, n, k)


def _rhat_basic(x: np.ndarray) -> np.ndarray:
    """Classic (non-split) Gelman–Rubin R-hat of ``x (chain, draw, K)`` -> ``(K,)``."""
    n = x.shape[1]
    within = np.mean(np.var(x, axis=1, ddof=1), axis=0)
    between = n * np.var(np.mean(x, axis=1), axis=0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def split_rhat(samples, *, diverged: str = "raise",
               divergence_threshold: float = _divergence.DEFAULT_THRESHOLD):
    """Classic split R-hat (Gelman et al., BDA3 §11.4), no rank normalization.

    Args:
        samples: draws with at least 2 chains and 4 draws per leaf (see the module doc).
        diverged: ``"raise"`` or ``"drop"`` (see the module doc).
        divergence_threshold: what counts as diverged (:func:`diverged_chains`).

    Returns:
        The structure of ``samples``, leaves ``(...)``: values near 1 when the (split) chains
        agree; above ~1.01 signals that they have not mixed.
    """
    arrays = _finite_chains(samples, "samples", diverged, divergence_threshold)
    return _per_leaf(lambda x: _rhat_basic(_split(x)), arrays, "samples", min_chains=2)


def _rank_rhat(x: np.ndarray) -> np.ndarray:
    s = _split(x)
    bulk = _rhat_basic(_rank_normalize(s))
    tail = _rhat_basic(_rank_normalize(np.abs(s - np.median(s.reshape(-1, s.shape[2]), axis=0))))
    return np.maximum(bulk, tail)


def rhat(samples, *, diverged: str = "raise",
         divergence_threshold: float = _divergence.DEFAULT_THRESHOLD):
    """Rank-normalized split R-hat, the larger of bulk and tail (ArviZ's default ``rhat``).

    Args:
        samples: draws with at least 2 chains and 4 draws per leaf (see the module doc).
        diverged: ``"raise"`` or ``"drop"`` (see the module doc).
        divergence_threshold: what counts as diverged (:func:`diverged_chains`).

    Returns:
        The structure of ``samples``, leaves ``(...)``.
    """
    arrays = _finite_chains(samples, "samples", diverged, divergence_threshold)
    return _per_leaf(_rank_rhat, arrays, "samples", min_chains=2)


def _autocov(x: np.ndarray) -> np.ndarray:
    """Biased autocovariances of every chain and column at every lag: ``(chain, draw, K)``."""
    n = x.shape[1]
    size = 1 << (2 * n - 1).bit_length()
    centred = x - x.mean(axis=1, keepdims=True)
    f = np.fft.rfft(centred, n=size, axis=1)
    return np.fft.irfft(f * np.conjugate(f), n=size, axis=1)[:, :n] / n


def _ess_basic(x: np.ndarray) -> np.ndarray:
    """Multi-chain ESS of ``x (chain, draw, K)`` by Geyer's initial monotone sequence."""
    m, n, k = x.shape
    acov = _autocov(x)
    mean_var = np.mean(acov[:, 0], axis=0) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n
    if m > 1:
        var_plus = var_plus + np.var(np.mean(x, axis=1), axis=0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (mean_var - np.mean(acov, axis=0)) / var_plus  # (n, K), rho[0] = 1
    # Initial positive sequence: pairs (rho[t+1], rho[t+2]), t = 1, 3, ..., kept while their
    # sum stays nonnegative; the scan stops after the first pair whose sum is not positive.
    kept = np.zeros_like(rho)
    kept[0], kept[1] = 1.0, rho[1]
    cols = np.arange(k)
    active = np.ones(k, bool)
    prev_sum = rho[0] + rho[1]
    t_end = np.ones(k, int)  # final value of t for each column
    last_even = np.ones(k)
    t = 1
    while t < n - 3 and active.any():
        active &= prev_sum > 0
        even, odd = rho[t + 1], rho[t + 2]
        pair = even + odd
        store = active & (pair >= 0)
        kept[t + 1] = np.where(store, even, kept[t + 1])
        kept[t + 2] = np.where(store, odd, kept[t + 2])
        last_even = np.where(active, even, last_even)
        t_end = np.where(active, t + 2, t_end)
        prev_sum = np.where(active, pair, prev_sum)
        t += 2
    max_t = t_end - 2
    fix = last_even > 0
    kept[max_t[fix] + 1, cols[fix]] = last_even[fix]
    # Initial monotone sequence: each pair sum no larger than the one before.
    t = 1
    while t <= max_t.max() - 2:
        todo = t <= max_t - 2
        before = kept[t - 1] + kept[t]
        bump = todo & (kept[t + 1] + kept[t + 2] > before)
        kept[t + 1] = np.where(bump, before / 2.0, kept[t + 1])
        kept[t + 2] = np.where(bump, before / 2.0, kept[t + 2])
        t += 2
    lags = np.arange(n)[:, None]
    tau = -1.0 + 2.0 * np.sum(np.where(lags <= max_t, kept, 0.0), axis=0)
    tau = tau + kept[max_t + 1, cols]
    total = m * n
    tau = np.maximum(tau, 1.0 / np.log10(total))
    out = total / tau
    constant = np.ptp(x.reshape(-1, k), axis=0) < np.finfo(float).resolution
    return np.where(constant, float(total), out)


def _bulk_ess(x: np.ndarray) -> np.ndarray:
    return _ess_basic(_rank_normalize(_split(x)))


def ess(samples, *, diverged: str = "raise",
        divergence_threshold: float = _divergence.DEFAULT_THRESHOLD):
    """Bulk effective sample size: multi-chain ESS of rank-normalized split chains.

    Args:
        samples: draws with at least 4 draws per leaf; one chain is allowed (see the module
            doc).
        diverged: ``"raise"`` or ``"drop"`` (see the module doc).
        divergence_threshold: what counts as diverged (:func:`diverged_chains`).

    Returns:
        The structure of ``samples``, leaves ``(...)``: the number of independent draws
        carrying the same information about the bulk of each marginal (at most about
        ``chain * draw``; larger for anticorrelated chains).
    """
    arrays = _finite_chains(samples, "samples", diverged, divergence_threshold)
    return _per_leaf(_bulk_ess, arrays, "samples")


def network_average(positions, *, axis: int = 2, potential=None):
    """The agents' average of every parameter leaf: the network (consensus) view of a trace.

    Each kept iteration of a decentralized run holds ``N`` samples, one per agent; their
    average ``x̄ = (1/N) Σ_i x_i`` is the quantity the theory bounds (the agents track it, and
    its law approaches the posterior). Summaries of ``network_average(trace.positions)`` are
    those of the network as a whole, e.g. ``ess(network_average(trace.positions))``.

    Args:
        positions: any pytree whose array leaves have an agent axis at ``axis``:
            ``trace.positions`` (``(chain, draw, N, *param_shape)``, ``axis=2``, the default),
            or a state's ``position`` inside a ``trace_fn`` (``(N, *param_shape)``, ``axis=0``).
            A :class:`dgsgld.Trace` is accepted for its positions.
        potential: the run's :class:`dgsgld.Potential`, when it has private leaves: those
            hold one parameter per agent, not copies of one, and are returned as they are
            (with their agent axis).

    Returns:
        The structure of ``positions`` with the agent axis averaged out, e.g. leaves
        ``(chain, draw, *param_shape)`` (private leaves unchanged). A diverged chain stays
        non-finite in its own chain only; the summaries refuse or drop it.
    """
    positions, _ = _positions_of(positions)

    def one(path, leaf):
        if np.ndim(leaf) <= axis:
            raise ValueError(
                f"`{_leaf_name('positions', path)}` has no agent axis {axis}: shape "
                f"{np.shape(leaf)}. Centralized runs (dgsgld.SGLD) have no agents to average."
            )
        return jax.numpy.mean(leaf, axis=axis)

    _array_leaves(positions, "positions")
    arrays = eqx.filter(positions, eqx.is_array)
    mask = None if potential is None else potential.private_mask(arrays)
    if mask is None:
        return jax.tree_util.tree_map_with_path(one, arrays)
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf, private: leaf if private else one(path, leaf), arrays, mask)


def _burn(arrays, burn_in, name: str):
    """Drop the first ``burn_in`` draws of every leaf (checked against the shortest)."""
    burn_in = int(burn_in)
    flat = _array_leaves(arrays, name)
    for path, leaf in flat:
        if np.ndim(leaf) < 2:
            raise ValueError(f"`{_leaf_name(name, path)}` must be (chain, draw, ...); got shape "
                             f"{np.shape(leaf)}.")
    draws = min(np.shape(leaf)[1] for _, leaf in flat)
    if burn_in < 0 or burn_in >= draws:
        raise ValueError(f"`burn_in` must be in [0, draws) = [0, {draws}); got {burn_in}.")
    return jax.tree.map(lambda leaf: np.asarray(leaf)[:, burn_in:], arrays)


def agent_summary(positions, *, burn_in: int = 0, diverged: str = "raise",
                  divergence_threshold: float = _divergence.DEFAULT_THRESHOLD) -> dict:
    """Per-agent mean, standard deviation, bulk ESS and R-hat of ``trace.positions``.

    Args:
        positions: any pytree of ``(chain, draw, N, *param_shape)`` leaves, or a
            :class:`dgsgld.Trace` (also works on :func:`network_average` output and centralized
            runs: every trailing entry is summarized).
        burn_in: draws to discard from the start of every chain.
        diverged: ``"raise"`` or ``"drop"`` diverged chains (see the module doc).
        divergence_threshold: what counts as diverged (:func:`diverged_chains`).

    Returns:
        ``{"mean", "sd", "ess", "rhat"}``, each with the structure of ``positions`` and leaves
        ``(N, *param_shape)`` (``rhat`` needs 2 chains; with one chain it is NaN).
    """
    arrays = _burn(_finite_chains(positions, "positions", diverged, divergence_threshold),
                   burn_in, "positions")

    def rhat_or_nan(x):
        return _rank_rhat(x) if x.shape[0] > 1 else np.full(x.shape[2], np.nan)

    return {
        "mean": _per_leaf(lambda x: x.mean(axis=(0, 1)), arrays, "positions"),
        "sd": _per_leaf(lambda x: x.reshape(-1, x.shape[2]).std(axis=0, ddof=1), arrays,
                        "positions"),
        "ess": _per_leaf(_bulk_ess, arrays, "positions"),
        "rhat": _per_leaf(rhat_or_nan, arrays, "positions"),
    }


def _import_arviz():
    try:
        import arviz
    except ImportError as err:
        raise ImportError(
            "dgsgld.evaluate.to_arviz needs ArviZ, an optional extra: "
            "pip install 'dgsgld[diagnostics]'"
        ) from err
    return arviz


def _var_name(path) -> str:
    """``w``, ``layers.0.weight``, ... from a leaf's key path (``x0``, ``x1`` for a tuple)."""
    if len(path) == 1 and isinstance(path[0], jax.tree_util.SequenceKey):
        return f"x{path[0].idx}"
    parts = []
    for key in path:
        for attr in ("key", "name", "idx"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
        else:
            parts.append(str(key))
    return ".".join(parts) if parts else "x"


def to_arviz(trace, var_names: str | Sequence[str] | None = None, *, burn_in: int = 0,
             agent_axis: bool | None = None, diverged: str = "raise",
             divergence_threshold: float = _divergence.DEFAULT_THRESHOLD):
    """ArviZ's container with the trace's positions as its ``posterior`` group.

    Args:
        trace: a :class:`dgsgld.Trace` with stored positions (or the positions pytree itself).
        var_names: names for the position leaves, in ``jax.tree.leaves`` order: one string for
            a single array, a sequence otherwise. Default: the leaf's key path (dict keys,
            NamedTuple fields, equinox module attributes, e.g. ``"layers.0.weight"``), ``"x"``
            for one bare array, ``"x0", "x1", ...`` for a tuple or list.
        burn_in: kept iterations to discard from the start of every chain.
        agent_axis: whether axis 2 is the agent axis; by default ``True`` unless the trace
            comes from the centralized sampler (guessed from ``trace.state``; pass it for bare
            positions of ``dgsgld.SGLD`` or for :func:`network_average` output).
        diverged: ``"raise"`` or ``"drop"`` diverged chains (see the module doc).
        divergence_threshold: what counts as diverged (:func:`diverged_chains`).

    Returns:
        ``arviz.InferenceData`` with ArviZ 0.x, ``xarray.DataTree`` with ArviZ 1.x (both read
        as ``idata.posterior[name]``); each variable has dims ``(chain, draw, agent,
        <name>_dim_0, ...)`` (no ``agent`` for the centralized sampler) and coordinate
        ``agent = 0..N-1``. ``az.ess(idata)`` and ``az.rhat(idata)`` then give per-agent
        diagnostics.
    """
    if agent_axis is None:
        agent_axis = True
        state = getattr(trace, "state", None)
        if state is not None and type(state).__name__ == "SGLDState":
            agent_axis = False
    positions, _ = _positions_of(trace)
    if positions is None:
        raise ValueError(
            "`trace` has no stored positions (run sample with "
            "output=dgsgld.Output(positions=True))."
        )
    flat = _array_leaves(positions, "positions")
    if var_names is None:
        names = [_var_name(path) for path, _ in flat]
    else:
        names = [var_names] if isinstance(var_names, str) else list(var_names)
    if len(names) != len(flat) or len(set(names)) != len(names):
        raise ValueError(
            f"`var_names` must name each of the {len(flat)} position leaves once; got {names}."
        )
    arrays = _finite_chains(trace, "positions", diverged, divergence_threshold)
    leaves = jax.tree.leaves(arrays)
    burn_in = int(burn_in)
    posterior, dims = {}, {}
    num_agents = None
    lead = 3 if agent_axis else 2
    for (path, _), name, leaf in zip(flat, names, leaves):
        arr = np.asarray(leaf)
        _validation.check_samples(
            arr, name=_leaf_name("positions", path), min_ndim=lead,
            layout="(chain, draw, N, ...)" if agent_axis else "(chain, draw, ...)",
        )
        if not 0 <= burn_in < arr.shape[1]:
            raise ValueError(f"`burn_in` must be in [0, {arr.shape[1]}); got {burn_in}.")
        posterior[name] = arr[:, burn_in:]
        extra = [f"{name}_dim_{i}" for i in range(arr.ndim - lead)]
        dims[name] = (["agent"] if agent_axis else []) + extra
        if agent_axis:
            num_agents = arr.shape[2]
    coords = {"agent": np.arange(num_agents)} if agent_axis else None
    az = _import_arviz()  # after the checks, so that they work without the extra too
    if _major_version(az) >= 1:  # arviz-base: one dict of groups, an xarray.DataTree back
        return az.from_dict({"posterior": posterior}, dims=dims, coords=coords)
    return az.from_dict(posterior=posterior, dims=dims, coords=coords)


def _major_version(module) -> int:
    """``1`` for ``"1.3.0"``, ``0`` for ``"0.23.4"`` (a module's ``__version__``)."""
    return int(str(module.__version__).split(".")[0])
