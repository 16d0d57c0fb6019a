r"""PCA as a Wishart precision coupling (Van Assel et al. 2022, Theorem 2).

Model
-----
Both the data :math:`X \in \mathbb R^{n\times p}` and the embedding :math:`Z \in \mathbb R^{n\times q}`
are full-rank Gaussian MRFs over the rows, with conjugate Wishart priors on the among-row
precisions:

.. math::
    \Theta_X &\sim \mathcal W(\nu_X, I_n), &\qquad
    \mathrm{vec}(X) \mid \Theta_X &\sim \mathcal N(0, \Theta_X^{-1} \otimes I_p),\\
    \Theta_Z &\sim \mathcal W(\nu_Z, I_n), &\qquad
    \mathrm{vec}(Z) \mid \Theta_Z &\sim \mathcal N(0, \Theta_Z^{-1} \otimes I_q),

with posteriors (conjugacy)

.. math::
    \Theta_X \mid X \sim \mathcal W\big(\nu_X + p, (I_n + XX^\top)^{-1}\big),\qquad
    \Theta_Z \mid Z \sim \mathcal W\big(\nu_Z + q, (I_n + ZZ^\top)^{-1}\big).

The **precision coupling** minimises the cross-entropy
:math:`-\mathbb E_{\Theta_X \mid X}[\log p(\Theta_Z = \Theta_X \mid Z)]`, i.e. (up to terms free of Z)

.. math::
    \min_Z\ \frac{\nu_X+p}{2}\,\mathrm{tr}\big(Z^\top (I_n + XX^\top)^{-1} Z\big)
    - \frac{\nu_Z+q}{2}\log|I_n + ZZ^\top|,

whose minimiser (Theorem 2) is :math:`Z^* Z^{*\top} = V_{[:,q]}\mathrm{diag}(\lambda^*)V_{[:,q]}^\top`,
:math:`\lambda^*_i = \max(0, \gamma(1 + d_i) - 1)`, for :math:`XX^\top = V\mathrm{diag}(d)V^\top` and

.. math:: \gamma = \frac{\nu_Z + q}{\nu_X + p}

(the ratio printed in Van Assel et al. 2022, Appendix A.3, has the indices swapped; this is the one
the objective implies). With :math:`\nu_Z = \nu_X + p - q`, :math:`\gamma = 1` and :math:`Z^*` is a PCA
embedding of :math:`X`.

Pyro form
---------
The Z-side Wishart log-density is linear in :math:`\Theta` except for :math:`\log|\Theta|`, which does
not involve Z. Hence the expected log-likelihood equals the log-density **at the posterior mean**
:math:`\bar\Theta_X = (\nu_X + p)(I_n + XX^\top)^{-1}` plus a Z-free constant, and the coupling is a
proper observation site::

    Z       ~ ImproperUniform(R^{n x q})                      (flat prior)
    Theta_Z ~ Wishart(nu_Z + q, precision = I_n + Z Z^T)     obs = E[Theta_X | X]

``wishart_pca_model`` evaluates this with :class:`probdr.wishart.LowRankPrecisionWishart` on the
structured :class:`probdr.wishart.WoodburyInverse` mean (Woodbury identity + determinant lemma:
:math:`O(npq)` per step, no :math:`n\times n` matrix, so :math:`n = 20\,000` runs in memory).
``wishart_pca_model_dense`` is the same model with ``torch.distributions.Wishart`` and dense
:math:`n\times n` matrices: the test oracle. ``wishart_pca_generative`` is the X-side generative
model (Wishart prior, Gaussian likelihood), used to check the conjugate posterior.

Posterior
---------
The flat prior is the paper's, for the MAP. For posterior inference the model takes a prior
``z_prior`` on Z (the estimators use an isotropic Gaussian, wide next to the MAP) and a
**coupling weight** :math:`\omega > 0` (an inverse temperature) on the coupling likelihood,

.. math::
    p_\omega(Z \mid \bar\Theta_X) \;\propto\; p(Z)\,
    \mathcal W\big(\bar\Theta_X;\ \nu_Z + q,\ (I_n + ZZ^\top)^{-1}\big)^{\omega},

which concentrates on the MAP as :math:`\omega` grows (the log-likelihood is multiplied by
:math:`\omega`; a Laplace approximation has covariance :math:`\approx H^{-1}/\omega`). Here the
likelihood alone would be integrable in Z (a Gaussian in Z times a power of
:math:`|I_n + ZZ^\top|`); the Laplacian models of the family are flat along translations and do
need the prior. Like the MAP, the posterior is invariant to :math:`Z \mapsto ZR`,
:math:`R \in O(q)` (the likelihood sees :math:`ZZ^\top`, an isotropic prior is rotation
invariant), so draws are compared after a Procrustes alignment.

Reference
---------
H. Van Assel, T. Espinasse, J. Chiquet, F. Picard. *A Probabilistic Graph Coupling View of
Dimension Reduction*. NeurIPS 2022, §4.1 and Appendix A.3.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch.distributions import constraints

from probdr.laws.wishart import ConjugateWishartPosterior, LowRankPrecisionWishart

__all__ = [
    "wishart_pca_model",
    "whitening",
    "wishart_pca_model_dense",
    "wishart_pca_generative",
    "default_dofs",
    "coupling_gamma",
]


def default_dofs(n: int, p: int, q: int, nu_x: float | None = None,
                 nu_z: float | None = None) -> tuple[float, float]:
    r"""Default degrees of freedom: :math:`\nu_X = n` (the smallest integer allowed) and
    :math:`\nu_Z = \nu_X + p - q` (so that :math:`\gamma = 1`). Raises ``ValueError`` if a
    Wishart on :math:`n\times n` matrices would be improper (:math:`\nu \le n - 1`)."""
    nu_x = float(n) if nu_x is None else float(nu_x)
    nu_z = nu_x + p - q if nu_z is None else float(nu_z)
    for name, v in (("nu_x", nu_x), ("nu_z", nu_z)):
        if not v > n - 1:
            raise ValueError(f"{name}={v:g} must exceed n - 1 = {n - 1}: a Wishart law on n x n "
                             "precision matrices needs more than n - 1 degrees of freedom.")
    return nu_x, nu_z


def coupling_gamma(nu_x: float, nu_z: float, p: int, q: int) -> float:
    r""":math:`\gamma = (\nu_Z + q)/(\nu_X + p)`."""
    return (nu_z + q) / (nu_x + p)


def _z_prior(n: int, q: int, z_prior) -> dist.TorchDistribution:
    """The prior of the site Z: flat (improper) unless a distribution is given."""
    return dist.ImproperUniform(constraints.real, (), (n, q)) if z_prior is None else z_prior


def wishart_pca_model(X: torch.Tensor, n_components: int, nu_x: float, nu_z: float,
                      posterior: ConjugateWishartPosterior | None = None, *,
                      z_prior: dist.TorchDistribution | None = None,
                      coupling_weight: float = 1.0):
    r"""Structured Pyro model of the precision coupling (no n x n matrix).

    Parameters
    ----------
    X : tensor (n, p)
        Data (column-centred for PCA).
    n_components : int
    nu_x, nu_z : float
        Wishart degrees of freedom of the X and Z sides.
    posterior : ConjugateWishartPosterior, optional
        Precomputed X-side posterior (its factorisation costs O(np min(n, p)) once).
    z_prior : distribution over (n, q), optional
        Prior on Z; default flat (improper), as in the paper. Posterior inference needs a proper
        one.
    coupling_weight : float
        Weight :math:`\omega` of the coupling likelihood (``poutine.scale``), see the module
        docstring; 1 is the paper's model.
    """
    n = X.shape[0]
    post = ConjugateWishartPosterior(X, nu_x) if posterior is None else posterior
    Z = pyro.sample("Z", _z_prior(n, n_components, z_prior))
    with poutine.scale(scale=coupling_weight):
        pyro.sample("Theta_Z", LowRankPrecisionWishart(nu_z + n_components, Z), obs=post.mean)
    return Z


def whitening(posterior: ConjugateWishartPosterior, scale: float = 1.0) -> dict:
    r"""The linear change of variables :math:`Y = c\,(I_n + XX^\top)^{-1/2}Z` as
    ``{"Z": (to_site, from_site)}`` for :class:`probdr.infer.map.MAPFit` and
    :func:`probdr.infer.posterior.fit_posterior`.

    It whitens the trace term: :math:`\tfrac{\nu_X+p}{2}\mathrm{tr}(Z^\top(I_n+XX^\top)^{-1}Z)
    = \tfrac{\nu_X+p}{2c^2}\|Y\|_F^2`, so the optimiser no longer sees curvatures spread over
    the spectrum of :math:`XX^\top`. With :math:`c = (\nu_X + p)^{1/2}` the term has unit
    curvature (the posterior's scale at coupling weight 1). Structured: :math:`O(npq)`.
    """
    W = posterior._scale_inv
    return {"Z": (lambda Y: W.matpow(Y / scale, -0.5), lambda Z: scale * W.matpow(Z, 0.5))}


def wishart_pca_model_dense(X: torch.Tensor, n_components: int, nu_x: float, nu_z: float, *,
                            z_prior: dist.TorchDistribution | None = None,
                            coupling_weight: float = 1.0):
    """Dense version of :func:`wishart_pca_model` with ``torch.distributions.Wishart`` (oracle;
    O(n^3) per step)."""
    n, p = X.shape
    eye = torch.eye(n, dtype=X.dtype)
    Theta_bar = (nu_x + p) * torch.linalg.inv(eye + X @ X.T)
    Z = pyro.sample("Z", _z_prior(n, n_components, z_prior))
    with poutine.scale(scale=coupling_weight):
        pyro.sample("Theta_Z", dist.Wishart(df=torch.tensor(nu_z + n_components, dtype=X.dtype),
                                            precision_matrix=eye + Z @ Z.T), obs=Theta_bar)
    return Z


def wishart_pca_generative(X: torch.Tensor | None, n: int, p: int, nu_x: float):
    r"""X-side generative model: :math:`\Theta_X \sim \mathcal W(\nu_X, I_n)`, the ``p`` columns of
    :math:`X` i.i.d. :math:`\mathcal N(0, \Theta_X^{-1})` (``obs=X`` when given). Dense; for
    documentation and the conjugacy test."""
    eye = torch.eye(n, dtype=torch.float64)
    Theta = pyro.sample("Theta_X", dist.Wishart(df=torch.tensor(float(nu_x), dtype=torch.float64),
                                                covariance_matrix=eye))
    with pyro.plate("features", p):
        cols = pyro.sample("X", dist.MultivariateNormal(torch.zeros(n, dtype=torch.float64),
                                                        precision_matrix=Theta),
                           obs=None if X is None else X.T)
    return cols.T
