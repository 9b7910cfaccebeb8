"""What the band asks of DIGing-SGLD: the pooled draws' inflation against their effective draws.

A decentralized Langevin sampler's draws, pooled over agents as the leaderboard keeps them,
are wider than the posterior by what the agents' own noise adds before the network averages
it, while the network average moves at ``η/N`` per step. On one preconditioned direction (the
posterior ``N(0, 1)``, every agent holding ``1/N`` of its curvature: what a perfect ``M``
leaves) DIGing-SGLD's exact stationary law gives, to within ``1e-3``, ::

    sd ratio² ≈ 1 / (1 − η / (2N)) + 2η (1 − 1/N) g,    τ ≈ 2N / η,

``g`` the mean of ``1 / (1 − λ²)`` over the mixing matrix's eigenvalues ``λ`` other than its
unit one (1 on the complete graph, more on slower networks) and ``τ`` the network average's
integrated autocorrelation time. Fixing the inflation ``ε = sd ratio² − 1`` fixes ``η``, and
``C`` chains of ``T`` steps then hold ``ESS = C T / τ ≈ C T ε / (4 (N − 1) g)`` effective
draws, whatever the posterior: fewer as the agents grow in number or the network mixes more
slowly.

For each network of the leaderboard (4 agents; and 16, as on the large-data target) the
script takes the step the warm-up's criterion chooses on that direction
(:func:`dgsgld.tuning.criterion.choose_step`, ``tol_sd`` 0.1, sized for the leaderboard's 8
chains x 2 000 sampling steps), and gives the exact law's sd ratio and ``τ``, the closed
forms', and the ESS.

``PYTHONPATH=. python benchmarks/pooled_inflation.py`` writes ``benchmarks/pooled_inflation.json``
and ``.md`` (a few seconds).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import dgsgld
from dgsgld.tuning import criterion
from experiments.bench import NETWORKS

CHAINS, STEPS = 8, 2000


def network_factor(mixing) -> float:
    """``g``: the mean of ``1 / (1 − λ²)`` over the eigenvalues of the (symmetric) mixing
    matrix but its unit one (first of its stack)."""
    W = np.asarray(getattr(mixing, "matrices", mixing), np.float64)
    W = W[0] if W.ndim == 3 else W
    lam = np.sort(np.linalg.eigvalsh(0.5 * (W + W.T)))[:-1]
    return float(np.mean(1.0 / (1.0 - lam**2)))


def row(network: str, n: int) -> dict:
    mixing = NETWORKS[network](n)
    g = network_factor(mixing)

    def errors(eta, _par):
        return criterion.modal_errors(dgsgld.DIGingSGLD(eta), [1.0], n, mixing)

    choice = criterion.choose_step(errors, lo=1e-4, hi=4.0 * n, num_draws=CHAINS * STEPS)
    eta, e = choice.step_size, choice.errors
    tau = criterion.tau_int(e.radius)
    closed = math.sqrt(1.0 / (1.0 - eta / (2 * n)) + 2 * eta * (1 - 1 / n) * g)
    return {"network": network, "agents": n, "g": g, "step": eta,
            "sd_ratio": math.exp(e.sd), "sd_ratio_closed": closed, "tau": tau,
            "tau_closed": 2 * n / eta, "ess": CHAINS * STEPS / tau}


def markdown(rows) -> str:
    lines = [
        "DIGing-SGLD on one preconditioned direction (the posterior N(0, 1), every agent "
        "holding 1/N of its curvature), at the step the warm-up's criterion chooses there "
        "(`tol_sd` 0.1, sized for 8 chains x 2 000 sampling steps): the exact law's worst sd "
        "ratio of the draws pooled over agents and the network average's autocorrelation "
        "time τ, beside the closed forms √(1/(1 − η/(2N)) + 2η(1 − 1/N) g) and 2N/η (g: the "
        "mean of 1/(1 − λ²) over the mixing matrix's non-unit eigenvalues), and the ESS "
        "8 x 2 000 / τ. `benchmarks/pooled_inflation.py`.", "",
        "| network | N | g | step | sd ratio (law) | sd ratio (closed form) | τ (law) | 2N/η "
        "| ESS |",
        "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['network']} | {r['agents']} | {r['g']:.3f} | {r['step']:.3g} "
                     f"| {r['sd_ratio']:.4f} | {r['sd_ratio_closed']:.4f} | {r['tau']:.0f} "
                     f"| {r['tau_closed']:.0f} | {r['ess']:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    rows = [row(network, n) for n in (4, 16) for network in NETWORKS]
    out = Path(__file__).with_name("pooled_inflation.json")
    out.write_text(json.dumps(rows, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
