"""Bound vs exact vs Monte Carlo W2 on the paper's barbell linear regression.

    python examples/theory_report.py [--out DIR] [--small]

Writes ``theory_report.png`` and ``theory_report.json`` (see ``experiments.theory_report``) and
prints the headline numbers.
"""

import argparse
import json

from experiments import theory_report as theory_report


def main(out_dir: str = "results/theory", small: bool = False) -> None:
    sizes = dict(num_chains=50, num_tuning_steps=6, num_stationary_steps=4) if small else {}
    result = theory_report(out_dir, seed=0, **({"num_chains": 200} | sizes))
    c = result["constants"]
    print(f"B = {c['B']}, delta = {c['delta']:.4f}, mu = {c['mu']:.4g}, L = {c['L']:.4g}")
    print(
        f"eta_bar: corrected {c['eta_bar']['corrected']:.3e}, printed {c['eta_bar']['printed']:.3e}"
    )
    cor = c["corollary37"]["corrected"]
    print(f"Corollary 3.7 (eps = 0.1): eta* = {cor['eta_star']:.3e}, k* = {cor['k_star']:.3e}")
    for name, b in result["bound"].items():
        print(
            f"bound at {name}: k=100 bound {b['bound_k100_lemma36']:.3e}, "
            f"exact {b['exact_w2_k100']:.3f}, ratio {b['ratio_bound_to_exact_k100']:.3e}"
        )
    for kind in ("diging", "de", "sgld"):
        st = result["stationary"][kind]
        print(f"stationary W2 vs eta, {kind}: secant slope {st['slope']:.3f}, "
              f"local slope at small eta {st['local_slope_small_eta']:.3f}")
    print(json.dumps({k: result[k]["tuned_step"] for k in ("diging", "de")}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/theory", help="output directory")
    parser.add_argument("--small", action="store_true", help="a reduced run (fewer chains/steps)")
    args = parser.parse_args()
    main(args.out, args.small)
