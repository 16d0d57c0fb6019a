r"""The unifying ProbDR model (Ravuri & Lawrence, AABI 2025, eq. 1) as a Pyro program.

Notation: ``Z`` (n, q) is the embedding (the paper writes it :math:`X`), :math:`Z_c = HZ` its
column-centred version, :math:`H = I - \mathbf 1\mathbf 1^\top/n`.

Model
-----
A covariance estimate :math:`S` of the data (n x n) is observed through an inverse Wishart,

.. math::
    S \mid Z \sim \mathcal W^{-1}\big(\Psi(Z), \nu\big),\qquad
    \Psi(Z) = Z_cZ_c^\top + \alpha\,HK(Z)H + \gamma I,\qquad p(Z) \propto 1,

(scale :math:`\Psi`, degrees of freedom :math:`\nu > n - 1`; scipy's ``invwishart(df=nu,
scale=Psi)``), with :math:`K` a kernel matrix of the latents, :math:`K_{ij} = k(\|z_i - z_j\|^2)`:
the Student-t (Cauchy) kernel :math:`1/(1 + d^2)` by default, as in eq. (5). The inverse Wishart
log-density is

.. math::
    \log p(S \mid Z) = \tfrac\nu2\log|\Psi| - \tfrac12\mathrm{tr}(\Psi\Lambda)
    - \tfrac{\nu+n+1}{2}\log|S| - \tfrac{\nu n}{2}\log 2 - \log\Gamma_n(\tfrac\nu2),
    \qquad \Lambda = S^{-1},

so the model only needs the **precision** :math:`\Lambda` (passed as such: the kNN Laplacian is
never inverted; :math:`\log|S| = -\log|\Lambda|`). Writing
:math:`\mathrm{tr}(\Psi\Lambda) = \mathrm{tr}(Z_c^\top\Lambda Z_c) + \alpha\langle HKH,
\Lambda\rangle + \gamma\,\mathrm{tr}\Lambda`, the log-density splits into its :math:`Z`-dependent
part

.. math:: \ell(Z) = \tfrac\nu2\log|\Psi(Z)| - \tfrac12\mathrm{tr}(Z_c^\top\Lambda Z_c)
    - \tfrac\alpha2\langle HK(Z)H, \Lambda\rangle

and the rest, :math:`-\tfrac\gamma2\mathrm{tr}\Lambda + \tfrac{\nu+n+1}2\log|\Lambda| -
\tfrac{\nu n}2\log 2 - \log\Gamma_n(\tfrac\nu2)`. :func:`latent_loglik` returns the whole
log-density by default, a function of :math:`Z`, :math:`\gamma`, :math:`\alpha` and :math:`\nu`
(any of which may be a tensor with a gradient), so that one's own Pyro program can put priors on
:math:`\gamma`, :math:`\alpha` or :math:`\nu` and add ``pyro.factor("S", latent_loglik(...))``.
``terms="z"`` returns :math:`\ell(Z)` alone, which is what the MAP over :math:`Z` with the other
parameters fixed needs (:func:`probdr_general_model`): it leaves out
:math:`-\tfrac\gamma2\mathrm{tr}\Lambda` (large when :math:`S` is nearly singular: it would swamp
the optimiser's relative stopping rule) and the terms in :math:`\nu` and :math:`S`, and
:math:`\log|\Lambda|` does not exist for a singular Laplacian. (Learning :math:`\gamma` with
:math:`\ell` alone is wrong: without :math:`-\tfrac\gamma2\mathrm{tr}\Lambda` the factor grows
without bound in :math:`\gamma`.)

Closed form at :math:`\alpha = 0`
---------------------------------
With :math:`\alpha = 0`, :math:`\ell` is dual probabilistic PCA's objective in the precision
(Lawrence 2005; Ravuri and Lawrence 2025, footnote 4). Let :math:`\mu_1 \le \dots \le \mu_q` be the smallest
eigenvalues of :math:`\Lambda` restricted to centred vectors (of :math:`Q^\top\Lambda Q`,
:math:`Q` an orthonormal basis of :math:`\mathbf 1^\perp`) and :math:`u_i` the eigenvectors.
Along :math:`u_i`, :math:`\Psi` has eigenvalue :math:`\lambda_i + \gamma` and the objective is
:math:`\tfrac\nu2\log(\lambda_i + \gamma) - \tfrac12\mu_i(\lambda_i + \gamma)`, maximal at
:math:`\lambda_i + \gamma = \nu/\mu_i`. The MAP is

.. math::
    Z^* = U_q\,\mathrm{diag}(\lambda^*)^{1/2}R,\qquad
    \lambda^*_i = \max\big(0,\ \nu/\mu_i - \gamma\big),

for any :math:`q\times q` rotation :math:`R` (:func:`closed_form`): :math:`\lambda^*` are the
eigenvalues of the Gram matrix :math:`Z^*Z^{*\top}`. When :math:`S\mathbf 1 \propto \mathbf 1`
(the Laplacian, whose :math:`\Lambda = \hat L + \epsilon I` has the constant eigenvector, and
the sample covariance of centred data), :math:`\mu_i = 1/s_i` and

.. math:: \lambda^*_i = \max(0,\ \nu s_i - \gamma)

along the top non-constant eigenvectors of :math:`S`. Axes with :math:`\nu s_i \le \gamma`
collapse (the clipping at :math:`\gamma`, i.e. :math:`\beta` in dual PPCA).

Reductions (the paper's models)
-------------------------------
* **Eq. (2)** (Laplacian eigenmaps): :math:`\Lambda = \nu\hat L`, :math:`\alpha = 0`,
  :math:`\gamma = \beta`: :math:`\ell = \tfrac\nu2[\log|Z_cZ_c^\top + \beta I| -
  \mathrm{tr}((Z_cZ_c^\top + \beta I)\hat L)]`, the :math:`Z`-dependent terms of
  :math:`\log\mathcal W(\nu\hat L \mid (ZZ^\top + \beta I)^{-1}, \nu)`, with MAP eigenvalues
  :math:`1/l_i - \beta`.
* **Eq. (5)** (the UMAP/t-SNE-like model): :math:`\Lambda = \hat L`, :math:`\nu = n`,
  :math:`\alpha = \tfrac12`, Student-t :math:`K = P^u`, :math:`\gamma = \tfrac12\tilde\epsilon^{-1}`:
  :math:`\Psi = M(Z)` of eq. (5) and :math:`\ell = \tfrac n2\log|M(Z)| - \tfrac12\mathrm{tr}(\hat L
  M(Z))`, the log-likelihood of :math:`\hat L \mid Z \sim \mathcal W(M(Z)^{-1}, n)` up to terms in
  :math:`\hat L` alone.
* **Dual PPCA**: :math:`S = YY^\top/d` (centred data), :math:`\alpha = 0`: the MAP spans the top
  :math:`q` principal components (the scores), with the eigenvalues above.

Cost: :math:`\alpha = 0` uses the determinant lemma (:func:`probdr.laws.wishart.gram_logdet`,
:math:`O(nq^2)`) and a dense trace :math:`\mathrm{tr}(Z_c^\top\Lambda Z_c)` (:math:`O(n^2q)`);
:math:`\alpha > 0` needs a dense :math:`n\times n` Cholesky of :math:`\Psi` per evaluation.

Reference
---------
A. Ravuri, N. D. Lawrence. *Towards One Model for Classical Dimensionality Reduction: A
Probabilistic Perspective on UMAP and t-SNE*. AABI 2025, eqs. (1), (2), (5) and footnote 4.
N. D. Lawrence. *Probabilistic non-linear principal component analysis with Gaussian process
latent variable models*. JMLR 2005 (dual PPCA).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pyro
import pyro.distributions as dist
import torch
from torch.distributions import constraints

from probdr._compute.allpairs import pairwise_sq_distances
from probdr.laws.wishart import gram_logdet

__all__ = [
    "KERNELS",
    "kernel_matrix",
    "latent_scale",
    "latent_loglik",
    "precision_logdet",
    "centred_precision_eigh",
    "closed_form",
    "probdr_general_model",
]


def _student(d2: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + d2)


def _gaussian(d2: torch.Tensor) -> torch.Tensor:
    return torch.exp(-0.5 * d2)


#: named kernels :math:`k(d^2)`: Student-t/Cauchy :math:`1/(1+d^2)` (eq. 5's :math:`P^u`) and
#: Gaussian :math:`\exp(-d^2/2)`
KERNELS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "student": _student,
    "gaussian": _gaussian,
}


def _kernel_fn(kernel) -> Callable[[torch.Tensor], torch.Tensor]:
    if callable(kernel):
        return kernel
    try:
        return KERNELS[kernel]
    except (KeyError, TypeError):
        raise ValueError(f"kernel must be one of {tuple(KERNELS)} or a callable of the squared "
                         f"distances, got {kernel!r}.") from None


def kernel_matrix(Z: torch.Tensor, kernel="student") -> torch.Tensor:
    r""":math:`K_{ij} = k(\|z_i - z_j\|^2)` (dense n x n). ``kernel``: a name of
    :data:`KERNELS` or a callable mapping squared distances to kernel values (e.g. a
    :mod:`probdr.kernels` kernel)."""
    return _kernel_fn(kernel)(pairwise_sq_distances(Z))


def _double_centre(M: torch.Tensor) -> torch.Tensor:
    return M - M.mean(0, keepdim=True) - M.mean(1, keepdim=True) + M.mean()


def latent_scale(Z: torch.Tensor, gamma: float, alpha: float = 0.0, kernel="student"
                 ) -> torch.Tensor:
    r"""The inverse Wishart scale :math:`\Psi(Z) = Z_cZ_c^\top + \alpha HK(Z)H + \gamma I`
    (dense; ``Z`` is centred here)."""
    Zc = Z - Z.mean(0, keepdim=True)
    n = Z.shape[0]
    Psi = Zc @ Zc.T + gamma * torch.eye(n, dtype=Z.dtype, device=Z.device)
    if alpha != 0.0:
        Psi = Psi + alpha * _double_centre(kernel_matrix(Zc, kernel))
    return Psi


def _is_zero(alpha) -> bool:
    """``alpha == 0`` and not a tensor that needs a gradient (the alpha = 0 shortcut drops the
    kernel, and with it the derivative in ``alpha``)."""
    if torch.is_tensor(alpha) and alpha.requires_grad:
        return False
    return float(alpha) == 0.0


def precision_logdet(precision: torch.Tensor) -> torch.Tensor:
    r""":math:`\log|\Lambda| = -\log|S|` by a Cholesky factorisation of the dense precision
    (one :math:`O(n^3)` pass).

    Raises ``ValueError`` when :math:`\Lambda` is singular to working precision: the
    factorisation fails, or a pivot :math:`c_{ii}^2` is at most :math:`n\,\epsilon_{\rm mach}
    \max_i\Lambda_{ii}` (a kNN Laplacian without a ridge passes the factorisation with a
    round-off pivot, and ``slogdet`` returns a finite, meaningless value for it). Every
    :math:`c_{ii}^2 \ge \lambda_{\min}(\Lambda)`, so a precision whose smallest eigenvalue is
    above that level is never refused."""
    n = precision.shape[0]
    P = 0.5 * (precision + precision.T)
    C, info = torch.linalg.cholesky_ex(P)
    pivots = torch.diagonal(C).square()
    tol = n * torch.finfo(P.dtype).eps * P.diagonal().abs().max()
    if int(info) != 0 or not bool((pivots > tol).all()):
        raise ValueError(
            "the precision is singular (or not positive definite) to working precision, so "
            "log|S| = -log|precision| and the whole inverse Wishart density do not exist (e.g. "
            "a kNN Laplacian without a ridge). Add a ridge (Laplacian + eps * I), pass "
            "logdet_precision= yourself (any constant will do when nu is fixed), or ask for "
            "terms='z'.")
    return torch.log(pivots).sum()


def _check_nu(nu, n: int) -> None:
    if torch.is_tensor(nu):
        nu = nu.detach()
    if not float(nu) > n - 1:
        raise ValueError(f"the inverse Wishart density needs nu > n - 1 = {n - 1}, got "
                         f"nu = {float(nu)!r}.")


def _constant_terms(precision, nu, gamma, n, factor, logdet_precision) -> torch.Tensor:
    r"""The terms of the log-density that do not depend on :math:`Z`:
    :math:`-\tfrac\gamma2\mathrm{tr}\Lambda + \tfrac{\nu+n+1}2\log|\Lambda|
    - \tfrac{\nu n}2\log 2 - \log\Gamma_n(\tfrac\nu2)`."""
    _check_nu(nu, n)
    trace = factor.square().sum() if factor is not None else torch.diagonal(precision).sum()
    if logdet_precision is None:
        logdet_precision = precision_logdet(precision)
    half_nu = torch.as_tensor(nu, dtype=precision.dtype, device=precision.device) / 2
    return (-0.5 * gamma * trace + 0.5 * (nu + n + 1) * logdet_precision
            - half_nu * n * math.log(2.0) - torch.special.multigammaln(half_nu, n))


def _latent_terms(Z, precision, nu, gamma, alpha, kernel, jitter, factor) -> torch.Tensor:
    r""":math:`\ell(Z) = \tfrac\nu2\log|\Psi(Z)| - \tfrac12\mathrm{tr}(Z_c^\top\Lambda Z_c)
    - \tfrac\alpha2\langle HKH, \Lambda\rangle`: the log-density's terms in :math:`Z`."""
    Zc = Z - Z.mean(0, keepdim=True)
    quad = ((factor @ Zc).square().sum() if factor is not None
            else (Zc * (precision @ Zc)).sum())
    if _is_zero(alpha):
        logdet = gram_logdet(Zc, gamma)
        trace = quad
        return 0.5 * nu * logdet - 0.5 * trace
    n = Z.shape[0]
    K = _double_centre(kernel_matrix(Zc, kernel))
    Psi = Zc @ Zc.T + alpha * K + gamma * torch.eye(n, dtype=Z.dtype, device=Z.device)
    C, info = torch.linalg.cholesky_ex(Psi)
    if int(info) != 0:
        C = torch.linalg.cholesky(Psi + jitter * gamma * torch.eye(n, dtype=Z.dtype,
                                                                   device=Z.device))
    logdet = 2.0 * torch.log(torch.diagonal(C)).sum()
    # tr(Psi Lambda) = tr(Zc^T Lambda Zc) + alpha <HKH, Lambda> + gamma tr(Lambda) (elsewhere)
    trace = quad + alpha * (K * precision).sum()
    return 0.5 * nu * logdet - 0.5 * trace


#: the choices of ``terms`` in :func:`latent_loglik`
TERMS = ("all", "z")


def latent_loglik(Z: torch.Tensor, precision: torch.Tensor, nu: float | torch.Tensor,
                  gamma: float | torch.Tensor, alpha: float | torch.Tensor = 0.0,
                  kernel="student", jitter: float = 1e-10, factor: torch.Tensor | None = None,
                  terms: str = "all", logdet_precision: float | torch.Tensor | None = None
                  ) -> torch.Tensor:
    r"""The inverse Wishart log-density :math:`\log p(S \mid Z)` of eq. (1) (see the module
    docstring), whole by default:

    .. math::
        \log p(S\mid Z) = \underbrace{\tfrac\nu2\log|\Psi(Z)| - \tfrac12\mathrm{tr}(Z_c^\top
        \Lambda Z_c) - \tfrac\alpha2\langle HK(Z)H, \Lambda\rangle}_{\ell(Z)}
        - \tfrac\gamma2\mathrm{tr}\Lambda + \tfrac{\nu+n+1}2\log|\Lambda|
        - \tfrac{\nu n}2\log 2 - \log\Gamma_n(\tfrac\nu2),

    scipy's ``invwishart.logpdf(S, df=nu, scale=Psi(Z))`` with :math:`S = \Lambda^{-1}`, a
    function of every parameter one can learn: ``Z``, ``gamma``, ``alpha`` and ``nu`` may carry
    gradients (floats or 0-dim tensors), so a Pyro program can put priors on them and add
    ``pyro.factor("S", latent_loglik(...))``.

    Parameters
    ----------
    Z : tensor (n, q)
        The embedding; it is centred here (only :math:`Z_c = HZ` enters).
    precision : tensor (n, n)
        :math:`\Lambda = S^{-1}`, dense and symmetric.
    nu : float or tensor
        Degrees of freedom, :math:`\nu > n - 1` (checked when ``terms="all"``).
    gamma : float or tensor
        :math:`\gamma > 0`.
    alpha : float or tensor
        Weight :math:`\alpha \ge 0` of the double-centred kernel.
    kernel : str or callable
        :math:`k(d^2)`, see :func:`kernel_matrix`.
    jitter : float
        :math:`\alpha > 0` factors :math:`\Psi` by a dense Cholesky; ``jitter`` times
        :math:`\gamma` is added to its diagonal if it is numerically indefinite.
    factor : tensor (r, n), optional
        :math:`W` with :math:`\Lambda = W^\top W` (e.g. :math:`\mathrm{diag}(s+\epsilon)^{-1/2}
        V^\top` for a covariance :math:`S = V\mathrm{diag}(s)V^\top`); the quadratic term is then
        :math:`\|WZ_c\|_F^2`, which does not lose digits when :math:`\Lambda` is ill-conditioned
        (a nearly singular sample covariance), as :math:`\mathrm{tr}(Z_c^\top\Lambda Z_c)` does,
        and :math:`\mathrm{tr}\Lambda = \|W\|_F^2`.
    terms : {"all", "z"}
        ``"all"`` (default): the whole log-density. ``"z"``: only :math:`\ell(Z)`, the terms
        that depend on :math:`Z`, for an optimisation over :math:`Z` alone with ``gamma``,
        ``alpha`` and ``nu`` fixed (what :func:`probdr_general_model` and
        :class:`probdr.estimators.probdr.ProbDR` use). It leaves out
        :math:`-\tfrac\gamma2\mathrm{tr}\Lambda` (large for a nearly singular :math:`S`) and
        the terms in :math:`\nu` and :math:`S`, and needs no :math:`\log|\Lambda|`; it is
        **wrong** as a function of ``gamma`` or ``nu``: do not learn them with it.
    logdet_precision : float or tensor, optional
        :math:`\log|\Lambda|`; computed by :func:`precision_logdet` when not given (one dense
        :math:`O(n^3)` Cholesky per call: compute it once and pass it inside an optimisation
        loop). A singular :math:`\Lambda` (a kNN Laplacian without a ridge) has no
        :math:`\log|\Lambda|` and no density: :func:`precision_logdet` raises ``ValueError``.
        With ``nu`` fixed the term is a constant, so any value (e.g. ``0.0``) gives the
        density up to a constant, still correct in ``Z``, ``gamma`` and ``alpha``.

    Cost: :math:`\alpha = 0` uses the determinant lemma and :math:`\mathrm{tr}(Z_c^\top
    \Lambda Z_c)` (:math:`O(n^2q)`); :math:`\alpha > 0` a dense Cholesky of :math:`\Psi`.
    """
    if terms not in TERMS:
        raise ValueError(f"terms must be one of {TERMS}, got {terms!r}.")
    ell = _latent_terms(Z, precision, nu, gamma, alpha, kernel, jitter, factor)
    if terms == "z":
        return ell
    return ell + _constant_terms(precision, nu, gamma, Z.shape[0], factor, logdet_precision)


def centred_precision_eigh(precision: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Eigenpairs of :math:`\Lambda` restricted to centred vectors, increasing: the eigenpairs
    of :math:`H\Lambda H` on :math:`\mathbf 1^\perp` (the constant direction, an eigenvector of
    :math:`H\Lambda H` with eigenvalue 0, is moved above the spectrum and dropped). Returns
    ``(mu (n-1,), U (n, n-1))``."""
    n = precision.shape[0]
    P = _double_centre(0.5 * (precision + precision.T))
    shift = 2.0 * float(torch.linalg.matrix_norm(P, 2)) + 1.0
    w, V = torch.linalg.eigh(P + shift / n * torch.ones_like(P))
    return w[: n - 1], V[:, : n - 1]


def closed_form(precision: torch.Tensor, n_components: int, nu: float, gamma: float
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""MAP of eq. (1) at :math:`\alpha = 0` over centred :math:`Z`:
    :math:`Z^* = U_q\,\mathrm{diag}(\lambda^*)^{1/2}`, :math:`\lambda^*_i = \max(0, \nu/\mu_i -
    \gamma)` with :math:`(\mu_i, u_i)` the ``n_components`` smallest eigenpairs of
    :math:`\Lambda` on centred vectors (:func:`centred_precision_eigh`);
    :math:`\nu/\mu_i = \nu s_i` when :math:`S\mathbf 1 \propto \mathbf 1`.
    Returns ``(Z (n, q), lambda* (q,), mu (q,))``."""
    mu, U = centred_precision_eigh(precision)
    q = n_components
    mu, U = mu[:q], U[:, :q]
    if not bool((mu > 0).all()):
        raise ValueError("the precision has a null direction among centred vectors (e.g. a "
                         "disconnected kNN graph): the MAP is unbounded; add a ridge.")
    lam = (nu / mu - gamma).clamp_min(0.0)
    return U * torch.sqrt(lam), lam, mu


def probdr_general_model(precision: torch.Tensor, n_components: int, nu: float, gamma: float,
                         alpha: float = 0.0, kernel="student",
                         factor: torch.Tensor | None = None):
    r"""Pyro model of eq. (1): ``Z ~ ImproperUniform`` (flat prior, shape (n, q)) and the
    inverse Wishart likelihood of :math:`S = \Lambda^{-1}` given :math:`\Psi(HZ)` as
    ``pyro.factor("S", latent_loglik(..., terms="z"))``: only its :math:`Z`-dependent terms,
    for MAP over :math:`Z` with the other parameters fixed (to learn ``gamma``, ``alpha`` or
    ``nu``, write a program with the whole density, ``terms="all"``: see the module
    docstring).

    Parameters
    ----------
    precision : tensor (n, n)
        :math:`\Lambda = S^{-1}`, symmetric positive semi-definite on centred vectors.
    n_components : int
        :math:`q`.
    nu : float
        Degrees of freedom :math:`\nu`.
    gamma : float
        Noise level :math:`\gamma > 0` of :math:`\Psi`.
    alpha : float
        Weight :math:`\alpha \ge 0` of the double-centred kernel.
    kernel : str or callable
        :math:`k(d^2)`, see :func:`kernel_matrix`.
    factor : tensor (r, n), optional
        :math:`W` with :math:`\Lambda = W^\top W`, for the quadratic term (see
        :func:`latent_loglik`).
    """
    n = precision.shape[0]
    Z = pyro.sample("Z", dist.ImproperUniform(constraints.real, (), (n, n_components)))
    pyro.factor("S", latent_loglik(Z, precision, nu, gamma, alpha, kernel, factor=factor,
                                   terms="z"))
    return Z
