r"""Hierarchical graph coupling (Van Assel et al. 2022, §4.2, Corollary 1).

Model
-----
Given a graph :math:`W`, let :math:`U_{[R]} \in \mathbb R^{n\times R}` hold the normalised indicators of
the connected components (CCs) of :math:`W + W^\top` (:math:`(U_{[R]})_{ir} = n_r^{-1/2}\mathbb 1_{i\in C_r}`)
and :math:`\bar X = U_{[R]}^\top X \in \mathbb R^{R\times p}` the CC coordinates of the data. The
hierarchical model adds a full-rank Gaussian on the CC means to the degenerate pairwise MRF:

.. math::
    W_X &\sim \mathbb P^\varepsilon_{\mathcal P_X, k_x}(\cdot; \mathbf 1, 1), \qquad
    \Theta_X \mid W_X \sim \mathcal W(\nu_X, I_R),\\
    X_C \mid W_X &\sim \mathbb P_{k_x}(\cdot \mid W_X), \qquad
    \mathrm{vec}(\bar X) \mid \Theta_X \sim \mathcal N\big(0, (\varepsilon\Theta_X)^{-1}\otimes I_p\big),

and the same for :math:`(W_Z, \Theta_Z, Z)` with :math:`\nu_Z` and :math:`q`. Coupling
:math:`(W_Z, \Theta_Z) = (W_X, \Theta_X)` splits the negative cross-entropy into the usual graph
coupling (8) and a global term (9):

.. math::
    (9) = \mathbb E_{\Theta_X \mid X}\big[\log\mathcal W\big(\Theta_X;\ \nu_Z + q,
          (I_R + \varepsilon\bar Z\bar Z^\top)^{-1}\big)\big],\qquad
    \Theta_X \mid X \sim \mathcal W\big(\nu_X + p, (I_R + \varepsilon\bar X\bar X^\top)^{-1}\big).

Up to terms free of :math:`Z`, :math:`-(9)` is

.. math::
    \frac{\nu_X+p}{2}\,\varepsilon\,\mathrm{tr}\big(\bar Z^\top(I_R + \varepsilon\bar X\bar X^\top)^{-1}
    \bar Z\big) - \frac{\nu_Z+q}{2}\log|I_R + \varepsilon\bar Z\bar Z^\top|,

i.e. eq. (21)/(22) of Van Assel et al. (2022) **with the factor** :math:`\varepsilon` **on the
trace term** (the printed (21) omits it; the derivation from the Wishart posterior gives it,
and only with it is the minimiser independent of :math:`\varepsilon`, as Corollary 1 states). With
:math:`\tilde Z = \sqrt\varepsilon\bar Z`, :math:`\tilde X = \sqrt\varepsilon\bar X` it is Theorem 2, so for
:math:`\gamma = 1` the minimiser over :math:`Z \in \mathcal S_M^q` is a PCA embedding of
:math:`U_{[R]}U_{[R]}^\top X` (**Corollary 1**). ``eps_factor=False`` reproduces the printed version,
whose minimiser depends on :math:`\varepsilon` (effective :math:`\gamma = \varepsilon`).

Pyro form
---------
:func:`global_coupling_model` (term 9 for a fixed graph): ``Zbar`` (R, q) flat, and the Z-side
Wishart observed at :math:`\mathbb E[\Theta_X \mid X]` (same device as
:mod:`probdr.models.wishart_pca`). :func:`hierarchical_coupling_model` (terms 8 + 9): ``Z`` (n, q)
flat; at each call a graph :math:`W_X` is drawn from the input posterior (Monte Carlo over
:math:`W_X`), :math:`W_Z = W_X` is observed under the latent graph law (term 8) and term (9) is
observed on the CC coordinates :math:`U_{[R]}^\top Z` of that draw. :math:`R` changes from draw to
draw, which is fine because the :math:`\Theta` sites are observed (no guide parameters).

Reference
---------
H. Van Assel, T. Espinasse, J. Chiquet, F. Picard. *A Probabilistic Graph Coupling View of
Dimension Reduction*. NeurIPS 2022, §4.2, Corollary 1, Appendix A.4.
"""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from probdr.laws.components import batch_memberships
from probdr.laws.wishart import (
    ConjugateWishartPosterior,
    LowRankPrecisionWishart,
    theorem2_solution,
)

__all__ = [
    "cc_coordinates",
    "from_cc_coordinates",
    "global_coupling_objective",
    "corollary1_solution",
    "global_coupling_model",
    "hierarchical_coupling_model",
]


def cc_coordinates(X: torch.Tensor, membership: torch.Tensor) -> torch.Tensor:
    r""":math:`\bar X = U_{[R]}^\top X`: row :math:`r` is :math:`n_r^{-1/2}\sum_{i\in C_r}X_i`
    (``membership`` (n,) labels 0..R-1)."""
    R = int(membership.max()) + 1
    counts = torch.bincount(membership, minlength=R).to(X.dtype)
    sums = torch.zeros(R, X.shape[1], dtype=X.dtype).index_add(0, membership, X)
    return sums / torch.sqrt(counts)[:, None]


def from_cc_coordinates(Zbar: torch.Tensor, membership: torch.Tensor) -> torch.Tensor:
    r""":math:`U_{[R]}\bar Z` (n, q): row :math:`i` is :math:`n_r^{-1/2}\bar Z_r` for :math:`i\in C_r`."""
    counts = torch.bincount(membership, minlength=Zbar.shape[0]).to(Zbar.dtype)
    return (Zbar / torch.sqrt(counts)[:, None])[membership]


def global_coupling_objective(Zbar: torch.Tensor, Xbar: torch.Tensor, eps: float,
                              nu_x: float, nu_z: float, eps_factor: bool = True) -> torch.Tensor:
    r"""The Z-dependent part of :math:`-(9)` in CC coordinates (dense :math:`R\times R`):
    :math:`\frac{\nu_X+p}{2}\,c\,\mathrm{tr}(\bar Z^\top(I+\varepsilon\bar X\bar X^\top)^{-1}\bar Z)
    - \frac{\nu_Z+q}{2}\log|I + \varepsilon\bar Z\bar Z^\top|` with :math:`c = \varepsilon`
    (``eps_factor=True``, derived) or :math:`c = 1` (as printed in their eq. (21))."""
    R, p = Xbar.shape
    q = Zbar.shape[1]
    eye = torch.eye(R, dtype=Xbar.dtype)
    A = torch.linalg.solve(eye + eps * Xbar @ Xbar.T, Zbar)
    c = eps if eps_factor else 1.0
    tr = c * (Zbar * A).sum()
    logdet = torch.logdet(eye + eps * Zbar @ Zbar.T)
    return 0.5 * (nu_x + p) * tr - 0.5 * (nu_z + q) * logdet


def corollary1_solution(X: torch.Tensor, membership: torch.Tensor, q: int) -> torch.Tensor:
    r"""Corollary 1's minimiser (:math:`\gamma = 1`): the PCA scores of the CC-mean matrix
    :math:`U_{[R]}U_{[R]}^\top X`, i.e. :math:`U_{[R]}\bar Z^*` with :math:`\bar Z^*` Theorem 2's
    solution for :math:`\bar X`. (No centring: the model is zero-mean; centre X first for PCA.)"""
    Xbar = cc_coordinates(X.to(torch.float64), membership)
    return from_cc_coordinates(theorem2_solution(Xbar, q), membership)


def global_coupling_model(X: torch.Tensor, membership: torch.Tensor, n_components: int,
                          eps: float = 1.0, nu_x: float | None = None,
                          nu_z: float | None = None):
    r"""Pyro model of the global term (9) for a fixed graph (CC labels ``membership``):
    ``Zbar`` (R, q) with a flat prior, and
    :math:`\Theta_Z \mid \bar Z \sim \mathcal W(\nu_Z + q, (I_R + \varepsilon\bar Z\bar Z^\top)^{-1})`
    observed at :math:`\mathbb E[\Theta_X \mid X] = (\nu_X+p)(I_R + \varepsilon\bar X\bar X^\top)^{-1}`
    (this carries the :math:`\varepsilon` factor of the derivation). Defaults :math:`\nu_X = R`,
    :math:`\nu_Z = \nu_X + p - q` (:math:`\gamma = 1`). Returns :math:`Z = U_{[R]}\bar Z`."""
    Xbar = cc_coordinates(X, membership)
    R, p = Xbar.shape
    q = n_components
    nu_x = float(R) if nu_x is None else float(nu_x)
    nu_z = nu_x + p - q if nu_z is None else float(nu_z)
    post = ConjugateWishartPosterior(Xbar, nu_x, eps=eps)
    Zbar = pyro.sample("Zbar", dist.ImproperUniform(constraints.real, (), (R, q)))
    law = LowRankPrecisionWishart(nu_z + q, eps**0.5 * Zbar)
    pyro.sample("Theta_Z", law, obs=post.mean)
    return from_cc_coordinates(Zbar, membership)


def hierarchical_coupling_model(X: torch.Tensor, input_law, latent_prior, kernel,
                                n_components: int, eps: float = 1.0,
                                nu_x: float | None = None, global_weight: float = 1.0):
    r"""Pyro model of the hierarchical coupling, terms (8) + (9), with a Monte Carlo draw of
    :math:`W_X` at every call.

    Parameters
    ----------
    X : tensor (n, p)
        Data (column-centred).
    input_law : probdr.laws.GraphLaw
        Posterior of the input graph, :math:`\mathbb P_{\mathcal P_X}(\cdot; K_X)`.
    latent_prior : probdr.laws.GraphPrior
        Latent graph prior (its ``posterior(KernelWeights(Z, kernel))`` is the law of
        :math:`W_Z \mid Z`); the pair must be a defined coupling (spec Table 1).
    kernel : probdr.kernels.Kernel
        Latent kernel :math:`k_z`.
    eps : float
        Diffusion parameter :math:`\varepsilon > 0` of the CC means.
    nu_x : float, optional
        Defaults to :math:`R` of each draw; :math:`\nu_Z = \nu_X + p - q` (:math:`\gamma = 1`).
    global_weight : float
        Multiplies term (9) (``pyro.poutine.scale``); 1 is the model as written.
    """
    from probdr.laws.weights import KernelWeights

    n, p = X.shape
    q = n_components
    Z = pyro.sample("Z", dist.ImproperUniform(constraints.real, (), (n, q)))
    with torch.no_grad():
        W_X = input_law.sample()
    # (8): the latent graph law observed at the input draw
    pyro.sample("W_Z", latent_prior.posterior(KernelWeights(Z, kernel)), obs=W_X)
    # (9): the global Wishart term on the CC coordinates of this draw
    memb = batch_memberships(W_X)[0]
    Xbar = cc_coordinates(X, memb)
    R = Xbar.shape[0]
    nx = float(R) if nu_x is None else float(nu_x)
    post = ConjugateWishartPosterior(Xbar, nx, eps=eps)
    Zbar = cc_coordinates(Z, memb)
    nz = nx + p - q
    with pyro.poutine.scale(scale=global_weight):
        pyro.sample("Theta_Z", LowRankPrecisionWishart(nz + q, eps**0.5 * Zbar), obs=post.mean)
    return Z
