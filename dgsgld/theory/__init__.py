"""Theory of DIGing-SGLD: the paper's W2 bounds, and exact moments on quadratic potentials.

* :mod:`~dgsgld.theory.bounds`: ω̃, ω̂, γ₁…γ₄ (3.11–3.15), conditions (3.16), ``D`` (3.20),
  ``E₁, E₂, E₃`` (3.18, 3.19, 3.22) = Theorems 3.4/3.5, Lemma 3.6 and Corollary 3.7, with the
  re-derived corrections by default (``variant="printed"`` for the paper's text).
* :mod:`~dgsgld.theory.constants`: ``μ, L, σ², δ, B`` and the initial moments from a
  ``Potential`` and a schedule.
* :mod:`~dgsgld.theory.recursions`: each sampler's step on quadratic potentials as a linear
  Gaussian recursion, registered per sampler class (:func:`register_recursion`).
* :mod:`~dgsgld.theory.exact`: exact mean/covariance propagation of every sampler on quadratic
  potentials (channels included), and their stationary limits.
"""

from .bounds import BoundInputs as BoundInputs
from .bounds import BoundTerms as BoundTerms
from .bounds import Conditions316 as Conditions316
from .bounds import Corollary37 as Corollary37
from .bounds import Gammas as Gammas
from .bounds import Lemma36 as Lemma36
from .bounds import Omegas as Omegas
from .bounds import conditions_316 as conditions_316
from .bounds import corollary37 as corollary37
from .bounds import e1 as e1
from .bounds import e2 as e2
from .bounds import e3 as e3
from .bounds import eta_bar as eta_bar
from .bounds import eta_check as eta_check
from .bounds import failed_conditions as failed_conditions
from .bounds import gammas as gammas
from .bounds import j1 as j1
from .bounds import lambda_lower as lambda_lower
from .bounds import lemma36 as lemma36
from .bounds import lemma36_lambda as lemma36_lambda
from .bounds import max_step_316 as max_step_316
from .bounds import omegas as omegas
from .bounds import optimal_parameters as optimal_parameters
from .bounds import theorem34 as theorem34
from .bounds import theorem35 as theorem35
from .bounds import tracker_bound as tracker_bound
from .constants import Curvature as Curvature
from .constants import GradientNoise as GradientNoise
from .constants import bound_inputs as bound_inputs
from .constants import choose_window as choose_window
from .constants import estimate_gradient_covariance as estimate_gradient_covariance
from .constants import estimate_mu_L as estimate_mu_L
from .constants import estimate_sigma2 as estimate_sigma2
from .constants import exact_bound_inputs as exact_bound_inputs
from .exact import ExactMoments as ExactMoments
from .exact import StationaryMoments as StationaryMoments
from .exact import agent_hessians as agent_hessians
from .exact import exact_moments as exact_moments
from .exact import exact_w2 as exact_w2
from .exact import laplace_quadratic as laplace_quadratic
from .exact import loglog_slope as loglog_slope
from .exact import quadratic_from_potential as quadratic_from_potential
from .exact import stationary_moments as stationary_moments
from .exact import stationary_w2 as stationary_w2
from .recursions import LinearRecursion as LinearRecursion
from .recursions import Quadratic as Quadratic
from .recursions import SamplerRecursion as SamplerRecursion
from .recursions import linear_recursion as linear_recursion
from .recursions import recursion_of as recursion_of
from .recursions import register_recursion as register_recursion
