"""Convergence diagnostics per agent: effective sample size, split R-hat.

(Consensus error over time: :func:`dgsgld.metrics.consensus_error` of ``trace.positions``.)

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

ArviZ itself is optional (``pip install dgsgld[diagnostics]``), needed only by
:func:`to_arviz`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from scipy import special, stats

from . import _validation

__all__ = [
    "ess",
    "rhat",
    "split_rhat",
    "agent_summary",
    "to_arviz",
]


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


def split_rhat(samples) -> np.ndarray:
    """Classic split R-hat (Gelman et al., BDA3 §11.4), no rank normalization.

    Args:
        samples: ``(chain, draw, ...)`` with at least 2 chains and 4 draws.

    Returns:
        ``(...)``: values near 1 when the (split) chains agree; above ~1.01 signals that they
        have not mixed.
    """
    x = _as_draws(samples, "samples")
    _need_chains(x, 2)
    return _rhat_basic(_split(x)).reshape(np.shape(samples)[2:])


def rhat(samples) -> np.ndarray:
    """Rank-normalized split R-hat, the larger of bulk and tail (ArviZ's default ``rhat``).

    Args:
        samples: ``(chain, draw, ...)`` with at least 2 chains and 4 draws.

    Returns:
        ``(...)``.
    """
    x = _as_draws(samples, "samples")
    _need_chains(x, 2)
    s = _split(x)
    bulk = _rhat_basic(_rank_normalize(s))
    tail = _rhat_basic(_rank_normalize(np.abs(s - np.median(s.reshape(-1, s.shape[2]), axis=0))))
    return np.maximum(bulk, tail).reshape(np.shape(samples)[2:])


def _need_chains(x: np.ndarray, m: int) -> None:
    if x.shape[0] < m:
        raise ValueError(
            f"`samples` needs at least {m} chains to compare them; got {x.shape[0]} "
            f"(shape (chain, draw, ...) = {x.shape[:2]} + ...)."
        )


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


def ess(samples) -> np.ndarray:
    """Bulk effective sample size: multi-chain ESS of rank-normalized split chains.

    Args:
        samples: ``(chain, draw, ...)`` with at least 4 draws; one chain is allowed.

    Returns:
        ``(...)``: the number of independent draws carrying the same information about the
        bulk of each marginal (at most about ``chain * draw``; larger for anticorrelated
        chains).
    """
    x = _as_draws(samples, "samples")
    return _ess_basic(_rank_normalize(_split(x))).reshape(np.shape(samples)[2:])


def agent_summary(positions, *, burn_in: int = 0) -> dict[str, np.ndarray]:
    """Per-agent mean, standard deviation, bulk ESS and R-hat of ``trace.positions``.

    Args:
        positions: one array ``(chain, draw, N, *param_shape)``.
        burn_in: draws to discard from the start of every chain.

    Returns:
        ``{"mean", "sd", "ess", "rhat"}``, each ``(N, *param_shape)`` (``rhat`` needs 2 chains;
        with one chain it is NaN).
    """
    burn_in = int(burn_in)
    if burn_in < 0 or burn_in >= np.shape(positions)[1]:
        raise ValueError(
            f"`burn_in` must be in [0, draws) = [0, {np.shape(positions)[1]}); got {burn_in}."
        )
    x = np.asarray(positions)[:, burn_in:]
    out = {
        "mean": x.mean(axis=(0, 1)),
        "sd": x.std(axis=(0, 1), ddof=1),
        "ess": ess(x),
    }
    out["rhat"] = rhat(x) if x.shape[0] > 1 else np.full(x.shape[2:], np.nan)
    return out


def _import_arviz():
    try:
        import arviz
    except ImportError as err:
        raise ImportError(
            "dgsgld.diagnostics.to_arviz needs ArviZ, an optional extra: "
            "pip install 'dgsgld[diagnostics]'"
        ) from err
    return arviz


def to_arviz(trace, var_names: str | Sequence[str] | None = None, *, burn_in: int = 0,
             agent_axis: bool | None = None):
    """An ``arviz.InferenceData`` with the trace's positions as its ``posterior`` group.

    Args:
        trace: a :class:`dgsgld.Trace` with stored positions (or the positions pytree itself).
        var_names: names for the position leaves: one string for an array, a sequence for a
            tuple/list of leaves; dict keys are used for dicts. Default ``"x"`` or ``"x0",
            "x1", ...``.
        burn_in: kept iterations to discard from the start of every chain.
        agent_axis: whether axis 2 is the agent axis; by default ``True`` unless the trace
            comes from the centralized sampler (guessed from ``trace.state``; pass it for bare
            positions of ``dgsgld.sgld``).

    Returns:
        ``arviz.InferenceData``; each variable has dims ``(chain, draw, agent, <name>_dim_0,
        ...)`` (no ``agent`` for the centralized sampler) and coordinate ``agent = 0..N-1``.
        ``az.ess(idata)`` and ``az.rhat(idata)`` then give per-agent diagnostics.
    """
    positions = getattr(trace, "positions", trace)
    if positions is None:
        raise ValueError(
            "`trace` has no stored positions (run sample with store_positions=True)."
        )
    if agent_axis is None:
        agent_axis = True
        state = getattr(trace, "state", None)
        if state is not None and type(state).__name__ == "SGLDState":
            agent_axis = False
    if isinstance(positions, dict):
        if var_names is not None:
            raise ValueError("`var_names` must be None for dict positions (the keys are used).")
        named = dict(positions)
    else:
        leaves = jax.tree.leaves(positions)
        if var_names is None:
            names = ["x"] if len(leaves) == 1 else [f"x{i}" for i in range(len(leaves))]
        else:
            names = [var_names] if isinstance(var_names, str) else list(var_names)
        if len(names) != len(leaves):
            raise ValueError(
                f"`var_names` must name each of the {len(leaves)} position leaves; got {names}."
            )
        named = dict(zip(names, leaves))
    burn_in = int(burn_in)
    posterior, dims = {}, {}
    num_agents = None
    for name, leaf in named.items():
        arr = np.asarray(leaf)
        lead = 3 if agent_axis else 2
        _validation.check_samples(
            arr, name=f"positions[{name!r}]", min_ndim=lead,
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
    return az.from_dict(posterior=posterior, dims=dims, coords=coords)
