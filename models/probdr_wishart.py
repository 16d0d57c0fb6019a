r"""ProbDR's Laplacian--Wishart models (Ravuri & Lawrence, AABI 2025).

Notation: ``Z`` (n, q) is the embedding (the paper writes it :math:`X`); the data enter only through
the symmetrised binary kNN graph (adjacency :math:`A`, degrees :math:`D`, Laplacian
:math:`\hat L = D - A`). :math:`H = I - \mathbf 1\mathbf 1^\top/n`, :math:`P^u_{ij} = 1/(1+\|z_i-z_j\|^2)`,
:math:`\tilde\epsilon = 4 n_\text{neg} n_\text{neigh}/(3n)`.

Models
------
**Laplacian eigenmaps as Wishart MAP** (eq. 2). The Laplacian is read as a precision estimate,

.. math:: \nu\hat L \mid Z \sim \mathcal W\big((ZZ^\top + \beta I)^{-1}, \nu\big)

(the paper's order: scale, dof), whose :math:`Z`-dependent log-likelihood is
:math:`\tfrac\nu2\big[\log|\beta I + ZZ^\top| - \mathrm{tr}(Z^\top\hat L Z)\big]`. Its maximiser is
:math:`Z = U_{2..q+1}\,\mathrm{diag}\big((1/l_i - \beta)_+\big)^{1/2}`: the non-trivial smallest
eigenvectors :math:`U` of :math:`\hat L`, i.e. Laplacian eigenmaps.

**Laplacian--Wishart model** (eq. 5), the model the paper proposes for UMAP/t-SNE-like embeddings:

.. math::
    \hat L \mid Z \sim \mathcal W\big(M(Z)^{-1}, n\big),\qquad
    M(Z) = \tfrac{1}{2}\tilde\epsilon^{-1} I + \tfrac12 H P^u H + ZZ^\top,

with MAP objective :math:`-\tfrac12\mathrm{tr}(\hat L M(Z)) + \tfrac n2\log|M(Z)|`, where
:math:`\mathrm{tr}(\hat L H P^u H) = \sum_{ij}\hat L_{ij}P^u_{ij}` (since :math:`H\hat LH = \hat L`).

**Comparison models.** The Bernoulli adjacency model (eq. 4),
:math:`A_{ij} \mid Z \sim \mathcal B(\tilde\epsilon\,P^u_{ij})` for :math:`i \ne j`, a proper
likelihood that needs :math:`\tilde\epsilon < 1` (:math:`n > 100` with the defaults); and the CNE
energy (eq. 3, Damrich et al. 2022),
:math:`\sum_{i\ne j}A_{ij}\log P^u_{ij} + \tilde\epsilon\sum_{i\ne j}(1-A_{ij})\log(1-P^u_{ij})`,
which is **not** a likelihood and enters as ``pyro.factor``.

Choices made here (documented deviations)
-----------------------------------------
* **The Laplacian is singular** (:math:`\hat L\mathbf 1 = 0`), so it lies outside the Wishart support
  and :math:`\log|\hat L| = -\infty`. Every term that involves only :math:`\hat L` is constant in
  :math:`Z`; eqs. (2) and (5) therefore enter as ``pyro.factor`` with **the Z-dependent Wishart terms
  only**. An optional ridge :math:`\hat L + \delta I` (the paper's footnote 4) is available
  for eq. (2) (it is needed when the kNN graph is disconnected).
* **Centring.** :math:`\mathrm{tr}(Z^\top\hat LZ)` does not see translations, while
  :math:`\log|\beta I + ZZ^\top|` and :math:`\log|M(Z)|` grow without bound along :math:`Z + \mathbf 1 m^\top`.
  As ProbDR does, the likelihood is evaluated at the column-centred :math:`HZ` (equivalently
  :math:`ZZ^\top` is replaced by :math:`HZZ^\top H`): the constant eigenvector is excluded and the
  eigenmaps MAP is exactly eigenvectors 2..q+1. The returned embedding is :math:`HZ`.
* The :math:`\tilde\epsilon^{-1}` noise term and :math:`\nu = n` follow the paper's §3; the
  eq. (5) log-determinant is dense (Cholesky, :math:`O(n^3)` per step).

Posterior
---------
Every model here takes a prior ``z_prior`` on Z (default flat, as in the paper) and a **coupling
weight** :math:`\omega > 0` (an inverse temperature, ``poutine.scale`` on the likelihood or
energy; 1 is the paper's model): :math:`p_\omega(Z \mid \hat L) \propto p(Z)\,
p(\hat L \mid Z)^{\omega}`. The likelihoods are flat along translations of Z (they see
:math:`HZ`) and invariant to rotations, so a posterior needs a proper prior (the estimators use
an isotropic Gaussian) and draws are compared after a Procrustes alignment. As :math:`\omega`
grows the posterior concentrates on the MAP. For the CNE energy, which is not a likelihood, this
is a Gibbs (pseudo-)posterior.

Reference
---------
A. Ravuri, N. D. Lawrence. *Towards One Model for Classical Dimensionality Reduction: A
Probabilistic Perspective on UMAP and t-SNE*. AABI 2025, eqs. (2)--(5).
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch.distributions import constraints

from probdr._compute.allpairs import pairwise_sq_distances
from probdr.laws.wishart import (
    KNNLaplacian,
    LowRankPrecisionWishart,
    laplacian_eigenmaps,
    probdr_epsilon,
)

__all__ = [
    "centred",
    "student_affinity",
    "double_centre",
    "wishart_matrix",
    "laplacian_wishart_loglik",
    "laplacian_wishart_model",
    "eigenmaps_model",
    "eigenmaps_solution",
    "bernoulli_adjacency_model",
    "cne_energy",
    "cne_model",
    "probdr_epsilon",
    "laplacian_whitening",
    "WHITENING_DENSE_MAX_N",
]

#: above this many points :func:`laplacian_whitening` is a scalar (no dense eigendecomposition)
WHITENING_DENSE_MAX_N = 4000


def _flat(n: int, q: int):
    return dist.ImproperUniform(constraints.real, (), (n, q))


def _z_prior(n: int, q: int, z_prior):
    """The prior of the site Z: flat (improper) unless a distribution is given."""
    return _flat(n, q) if z_prior is None else z_prior



def centred(Z: torch.Tensor) -> torch.Tensor:
    """:math:`HZ`: columns centred."""
    return Z - Z.mean(0, keepdim=True)


def student_affinity(Z: torch.Tensor) -> torch.Tensor:
    r""":math:`P^u_{ij} = 1/(1 + \|z_i - z_j\|^2)` (dense, unit diagonal)."""
    return 1.0 / (1.0 + pairwise_sq_distances(Z))


def double_centre(M: torch.Tensor) -> torch.Tensor:
    """:math:`HMH` for a dense symmetric matrix."""
    return M - M.mean(0, keepdim=True) - M.mean(1, keepdim=True) + M.mean()


def wishart_matrix(Z: torch.Tensor, eps_tilde: float, Pu: torch.Tensor | None = None
                   ) -> torch.Tensor:
    r""":math:`M(Z) = \tfrac12\tilde\epsilon^{-1}I + \tfrac12 HP^uH + ZZ^\top` (dense), the precision
    parameter of eq. (5); ``Z`` should be centred."""
    n = Z.shape[0]
    Pu = student_affinity(Z) if Pu is None else Pu
    M = 0.5 * double_centre(Pu) + Z @ Z.T
    return M + (0.5 / eps_tilde) * torch.eye(n, dtype=Z.dtype)


def laplacian_wishart_loglik(Z: torch.Tensor, L: KNNLaplacian, eps_tilde: float,
                             nu: float | None = None, jitter: float = 1e-10) -> torch.Tensor:
    r"""Z-dependent part of :math:`\log\mathcal W(\hat L \mid M(Z)^{-1}, \nu)`:
    :math:`-\tfrac12\big[\tfrac12\sum_{ij}\hat L_{ij}P^u_{ij} + \mathrm{tr}(Z^\top\hat LZ)\big]
    + \tfrac\nu2\log|M(Z)|` (``Z`` centred; :math:`\nu = n` by default). Dense Cholesky."""
    n = Z.shape[0]
    nu = float(n) if nu is None else float(nu)
    Pu = student_affinity(Z)
    M = wishart_matrix(Z, eps_tilde, Pu)
    C, info = torch.linalg.cholesky_ex(M)
    if int(info) != 0:  # numerically indefinite: add jitter relative to the noise level
        C = torch.linalg.cholesky(M + jitter * (0.5 / eps_tilde) * torch.eye(n, dtype=Z.dtype))
    logdet = 2.0 * torch.log(torch.diagonal(C)).sum()
    trace = 0.5 * L.weighted_sum(Pu) + L.quad(Z)
    return -0.5 * trace + 0.5 * nu * logdet


def laplacian_wishart_model(L: KNNLaplacian, n_components: int, eps_tilde: float,
                            nu: float | None = None, *, z_prior=None,
                            coupling_weight: float = 1.0):
    r"""Pyro model of eq. (5): a prior on Z (flat by default), the Laplacian's Z-dependent
    Wishart terms as a factor (the Laplacian is singular; see the module docstring).

    Parameters
    ----------
    z_prior : distribution over (n, q), optional
        Prior on Z; default flat (improper), as in the paper.
    coupling_weight : float
        Weight :math:`\omega` of the likelihood (``poutine.scale``); 1 is the paper's model.
    """
    Z = pyro.sample("Z", _z_prior(L.n, n_components, z_prior))
    with poutine.scale(scale=coupling_weight):
        pyro.factor("wishart_L", laplacian_wishart_loglik(centred(Z), L, eps_tilde, nu))
    return Z


def eigenmaps_model(L: KNNLaplacian, n_components: int, beta: float = 1e-3,
                    nu: float | None = None, ridge: float = 0.0, *, z_prior=None,
                    coupling_weight: float = 1.0):
    r"""Pyro model of eq. (2): :math:`\nu(\hat L + \delta I) \mid Z \sim
    \mathcal W((HZZ^\top H + \beta I)^{-1}, \nu)`, Z-dependent terms only
    (:meth:`LowRankPrecisionWishart.latent_terms`: :math:`O(\mathrm{nnz}\,q + nq^2)` per step).

    Parameters
    ----------
    z_prior : distribution over (n, q), optional
        Prior on Z; default flat (improper), as in the paper.
    coupling_weight : float
        Weight :math:`\omega` of the likelihood (``poutine.scale``); 1 is the paper's model.
    """
    n = L.n
    nu = float(n) if nu is None else float(nu)
    Z = pyro.sample("Z", _z_prior(n, n_components, z_prior))
    law = LowRankPrecisionWishart(nu, centred(Z), beta)
    with poutine.scale(scale=coupling_weight):
        pyro.factor("wishart_L", law.latent_terms(L.scaled(nu, ridge)))
    return Z


def eigenmaps_solution(L: KNNLaplacian, n_components: int, beta: float = 1e-3,
                       ridge: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Closed-form MAP of eq. (2) over centred Z: :math:`U_{2..q+1}\mathrm{diag}
    \big((1/(l_i + \delta) - \beta)_+\big)^{1/2}`. Returns ``(Z, eigenvalues l_1..l_{q+1})``."""
    w, U = laplacian_eigenmaps(L, n_components)
    lam = (1.0 / (w[1:] + ridge) - beta).clamp_min(0.0)
    return U * torch.sqrt(lam), w


def _adjacency_rows(L: KNNLaplacian, idx: torch.Tensor) -> torch.Tensor:
    """Dense rows ``idx`` of the adjacency matrix."""
    n = L.n
    pos = torch.full((n,), -1, dtype=torch.long)
    pos[idx] = torch.arange(idx.numel())
    keep = pos[L.rows] >= 0
    A = torch.zeros(idx.numel(), n, dtype=torch.float64)
    A[pos[L.rows[keep]], L.cols[keep]] = 1.0
    return A


def bernoulli_adjacency_model(L: KNNLaplacian, n_components: int, eps_tilde: float,
                              subsample_size: int | None = None, *, z_prior=None,
                              coupling_weight: float = 1.0):
    r"""Pyro model of eq. (4): :math:`A_{ij} \mid Z \sim \mathcal B(\tilde\epsilon/(1+d_{ij}^2))`
    independently for all ordered pairs :math:`i\ne j`, observed at the kNN adjacency. Rows can
    be subsampled (``pyro.plate`` rescales the likelihood).

    Parameters
    ----------
    z_prior : distribution over (n, q), optional
        Prior on Z; default flat (improper), as in the paper.
    coupling_weight : float
        Weight :math:`\omega` of the likelihood (``poutine.scale``); 1 is the paper's model.
    """
    if not 0 < eps_tilde < 1:
        raise ValueError(f"eq. (4) needs 0 < eps_tilde < 1 to define probabilities, got "
                         f"{eps_tilde:.4g} (eps_tilde = 4 n_neg n_neigh / (3n) = 100/n with the "
                         "defaults, so n must exceed 100).")
    n = L.n
    Z = pyro.sample("Z", _z_prior(n, n_components, z_prior))
    with pyro.plate("rows", n, subsample_size=subsample_size) as idx, \
            poutine.scale(scale=coupling_weight):
        d2 = pairwise_sq_distances(Z[idx], Z)
        probs = eps_tilde / (1.0 + d2)
        mask = torch.ones_like(probs, dtype=torch.bool)
        mask[torch.arange(idx.numel()), idx] = False
        pyro.sample("A", dist.Bernoulli(probs=probs).mask(mask).to_event(1),
                    obs=_adjacency_rows(L, idx).to(Z.dtype))
    return Z


def cne_energy(Z: torch.Tensor, L: KNNLaplacian, eps_tilde: float,
               idx: torch.Tensor | None = None, d2_floor: float = 1e-12) -> torch.Tensor:
    r"""Per-row CNE energy (eq. 3), :math:`\sum_{j\ne i}A_{ij}\log P^u_{ij} + \tilde\epsilon
    \sum_{j\ne i}(1-A_{ij})\log(1 - P^u_{ij})` for rows ``idx`` (all by default); squared
    distances floored at ``d2_floor`` inside :math:`\log d^2` (duplicates)."""
    n = L.n
    idx = torch.arange(n) if idx is None else idx
    d2 = pairwise_sq_distances(Z[idx], Z)
    A = _adjacency_rows(L, idx).to(Z.dtype)
    off = torch.ones_like(d2)
    off[torch.arange(idx.numel()), idx] = 0.0
    log_pu = -torch.log1p(d2)
    log_1m = torch.log(d2.clamp_min(d2_floor)) + log_pu  # log(d^2 / (1 + d^2))
    return (A * log_pu + eps_tilde * (off - A) * log_1m).sum(1)


def cne_model(L: KNNLaplacian, n_components: int, eps_tilde: float,
              subsample_size: int | None = None, *, z_prior=None, coupling_weight: float = 1.0):
    r"""Pyro model with the CNE energy (eq. 3) as a factor (not a likelihood; baseline).

    Parameters
    ----------
    z_prior : distribution over (n, q), optional
        Prior on Z; default flat (improper), as in the paper.
    coupling_weight : float
        Weight :math:`\omega` of the energy (``poutine.scale``); 1 is the paper's model.
    """
    n = L.n
    Z = pyro.sample("Z", _z_prior(n, n_components, z_prior))
    with pyro.plate("rows", n, subsample_size=subsample_size) as idx, \
            poutine.scale(scale=coupling_weight):
        pyro.factor("cne", cne_energy(Z, L, eps_tilde, idx))
    return Z


def laplacian_whitening(L: KNNLaplacian, ridge: float = 0.0, nu: float | None = None) -> dict:
    r"""A linear change of variables :math:`Y = PZ` for the posterior of these models, as
    ``{"Z": (to_site, from_site)}`` for :func:`probdr.infer.posterior.fit_posterior`.

    :math:`P = \big(\nu(\hat L + \delta I + l_2 I)\big)^{1/2}` (dense eigendecomposition;
    :math:`l_2` the smallest non-zero eigenvalue of :math:`\hat L`): the trace term
    :math:`\tfrac\nu2\mathrm{tr}(Z^\top(\hat L + \delta I)Z)`, of curvature
    :math:`\nu(l_j + \delta)` along eigenvector j, has curvature
    :math:`(l_j + \delta)/(l_j + \delta + l_2) < 1` in Y, so that Adam and NUTS see a posterior
    of unit scale instead of one spread over the Laplacian's spectrum (:math:`\nu = n` for
    eq. (2), 1 for the :math:`\tfrac12\mathrm{tr}(Z^\top\hat LZ)` of eq. (5)). Above
    :data:`WHITENING_DENSE_MAX_N` points, the scalar
    :math:`P = (\nu(\mathrm{tr}\hat L/n + \delta))^{1/2}` (the mean curvature).
    """
    n = L.n
    nu = float(n) if nu is None else float(nu)
    if n > WHITENING_DENSE_MAX_N:
        c = (nu * (L.trace() / n + ridge)) ** 0.5
        return {"Z": (lambda Y: Y / c, lambda Z: c * Z)}
    w, V = torch.linalg.eigh(L.dense())
    w = w.clamp_min(0.0)
    positive = w > 1e-10 * max(float(w[-1]), 1e-300)
    l2 = float(w[positive].min()) if bool(positive.any()) else 1.0
    d = torch.sqrt(nu * (w + ridge + l2))
    P, P_inv = (V * d) @ V.T, (V / d) @ V.T
    return {"Z": (lambda Y: P_inv @ Y, lambda Z: P @ Z)}
