r"""Structured Wishart pieces: log-determinants, traces and laws without :math:`n \times n` matrices.

Three Wishart objects appear in probdr's Wishart couplings (Van Assel et al.
2022, §4.1-4.2 and App. A.3; Ravuri & Lawrence 2025):

* the **X-side posterior** of PCA as a Wishart coupling (Van Assel et al. 2022, A.3),
  :math:`\Theta_X \mid X \sim \mathcal W(\nu_X + p, (I_n + XX^\top)^{-1})`, whose mean is the
  structured matrix :math:`c\,(I_n + XX^\top)^{-1}` (:class:`WoodburyInverse`);
* the **Z-side law** :math:`\mathcal W(\nu, (\beta I_n + ZZ^\top)^{-1})`, i.e. a Wishart with
  precision matrix :math:`\beta I_n + ZZ^\top` (:class:`LowRankPrecisionWishart`), the law observed in
  Theorem 2, Corollary 1 and ProbDR's eq. (2);
* the **kNN graph Laplacian** :math:`\hat L = D - A` of ProbDR (Ravuri & Lawrence 2025), kept as an
  edge list (:class:`KNNLaplacian`).

Everything uses the Woodbury identity and the matrix determinant lemma,

.. math::
    (I_n + XX^\top)^{-1} = I_n - U\,\mathrm{diag}\!\big(\tfrac{s^2}{1+s^2}\big) U^\top,\qquad
    \log|\beta I_n + ZZ^\top| = n\log\beta + \log|I_q + Z^\top Z/\beta|,

(:math:`X = U\,\mathrm{diag}(s)\,V^\top` thin SVD), so costs are :math:`O(np\min(n,p))` once and
:math:`O(nq\,r)` per evaluation, never :math:`O(n^2)` memory. Each class has a ``dense()`` method
that builds the :math:`n\times n` matrix: it is the test oracle, not the computation path.

Wishart convention: :math:`\mathcal W(\nu, V)` = (degrees of freedom, scale), mean :math:`\nu V`,
density

.. math::
    \log p(S) = \tfrac{\nu-n-1}{2}\log|S| - \tfrac12\mathrm{tr}(V^{-1}S) - \tfrac{\nu n}{2}\log 2
    - \tfrac{\nu}{2}\log|V| - \log\Gamma_n(\nu/2).

References
----------
H. Van Assel, T. Espinasse, J. Chiquet, F. Picard. *A Probabilistic Graph Coupling View of
Dimension Reduction*. NeurIPS 2022.
A. Ravuri, N. D. Lawrence. *Towards One Model for Classical Dimensionality Reduction: A
Probabilistic Perspective on UMAP and t-SNE*. AABI 2025.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from pyro.distributions import TorchDistribution
from torch.distributions import constraints

__all__ = [
    "mvdigamma",
    "gram_logdet",
    "WoodburyInverse",
    "ConjugateWishartPosterior",
    "LowRankPrecisionWishart",
    "KNNLaplacian",
    "theorem2_eigenvalues",
    "theorem2_solution",
    "laplacian_eigenmaps",
    "probdr_epsilon",
]


# --------------------------------------------------------------------------------------------
# scalar helpers
# --------------------------------------------------------------------------------------------
def mvdigamma(a: torch.Tensor | float, n: int) -> torch.Tensor:
    r"""Multivariate digamma :math:`\psi_n(a) = \sum_{i=1}^n \psi(a + (1-i)/2)`."""
    a = torch.as_tensor(a, dtype=torch.float64)
    i = torch.arange(n, dtype=torch.float64)
    return torch.special.digamma(a[..., None] - i / 2).sum(-1)


def gram_logdet(Z: torch.Tensor, beta: float = 1.0, jitter: float = 0.0) -> torch.Tensor:
    r""":math:`\log|\beta I_n + ZZ^\top| = n\log\beta + \log|I_q + Z^\top Z/\beta|` (determinant
    lemma): :math:`O(nq^2)`, no :math:`n\times n` matrix. Differentiable in ``Z``, and in
    ``beta`` when it is a tensor."""
    n, q = Z.shape
    G = Z.T @ Z / beta
    G = G + torch.eye(q, dtype=Z.dtype) * (1.0 + jitter)
    L = torch.linalg.cholesky(G)
    log_beta = torch.log(beta) if torch.is_tensor(beta) else math.log(beta)
    return n * log_beta + 2.0 * torch.log(torch.diagonal(L)).sum()


# --------------------------------------------------------------------------------------------
# structured matrices
# --------------------------------------------------------------------------------------------
class WoodburyInverse:
    r"""The symmetric PD matrix :math:`S = c\,(I_n + XX^\top)^{-1}` kept in factored form.

    With the thin SVD :math:`X = U\,\mathrm{diag}(s)V^\top`,
    :math:`S = c\,(I_n - U\,\mathrm{diag}(h)\,U^\top)`, :math:`h = s^2/(1+s^2)`, so

    * :math:`\log|S| = n\log c - \sum_k \log(1+s_k^2)`,
    * :math:`\mathrm{tr}(S) = c\,(n - \sum_k h_k)`,
    * :math:`\mathrm{tr}(Z^\top S Z) = c\,(\|Z\|_F^2 - \|\mathrm{diag}(\sqrt h)\,U^\top Z\|_F^2)`.

    The factorisation costs :math:`O(np\min(n,p))`; it uses the eigendecomposition of the
    :math:`p\times p` Gram matrix :math:`X^\top X` when :math:`n \ge 2p` (faster) and the SVD of
    :math:`X` otherwise. Directions with :math:`s_k^2 \le 10^{-13}\max s^2` are dropped
    (their :math:`h_k` are below double precision relative to the others).

    Parameters
    ----------
    X : tensor (n, p)
    scale : float
        The factor :math:`c`.
    """

    def __init__(self, X: torch.Tensor, scale: float = 1.0):
        X = X.to(torch.float64)
        n, p = X.shape
        self.n, self.scale = n, float(scale)
        if n >= 2 * p:
            evals, V = torch.linalg.eigh(X.T @ X)
            s2 = evals.clamp_min(0.0).flip(0)
            V = V.flip(1)
            keep = s2 > 1e-13 * s2.max().clamp_min(1e-300)
            s2, V = s2[keep], V[:, keep]
            U = (X @ V) / torch.sqrt(s2)
            # one re-orthonormalisation pass keeps U orthonormal to machine precision
            U, R = torch.linalg.qr(U)
            # R is close to diag(+-1); fold its signs into U
            U = U * torch.sign(torch.diagonal(R))
        else:
            U, s, _ = torch.linalg.svd(X, full_matrices=False)
            s2 = s**2
            keep = s2 > 1e-13 * s2.max().clamp_min(1e-300)
            s2, U = s2[keep], U[:, keep]
        self.U = U
        self.s2 = s2
        self.h = s2 / (1.0 + s2)

    @property
    def eigenvalues_xxt(self) -> torch.Tensor:
        """Non-zero eigenvalues :math:`d_k = s_k^2` of :math:`XX^\\top`, decreasing."""
        return self.s2

    def logdet(self) -> torch.Tensor:
        return self.n * math.log(self.scale) - torch.log1p(self.s2).sum()

    def trace(self) -> torch.Tensor:
        return self.scale * (self.n - self.h.sum())

    def quad_trace(self, Z: torch.Tensor) -> torch.Tensor:
        r""":math:`\mathrm{tr}(Z^\top S Z)`, differentiable in ``Z``."""
        UZ = self.U.to(Z.dtype).T @ Z
        return self.scale * ((Z * Z).sum() - (self.h.to(Z.dtype)[:, None] * UZ * UZ).sum())

    def matmul(self, B: torch.Tensor) -> torch.Tensor:
        U = self.U.to(B.dtype)
        return self.scale * (B - U @ (self.h.to(B.dtype)[:, None] * (U.T @ B)))

    def matpow(self, B: torch.Tensor, t: float) -> torch.Tensor:
        r""":math:`S^t B` (e.g. ``t = -1/2`` gives :math:`c^{-1/2}(I + XX^\top)^{1/2}B`)."""
        U = self.U.to(B.dtype)
        f = (1.0 + self.s2.to(B.dtype)) ** (-t) - 1.0
        return self.scale**t * (B + U @ (f[:, None] * (U.T @ B)))

    def dense(self) -> torch.Tensor:
        """The :math:`n\\times n` matrix (oracle only)."""
        return self.matmul(torch.eye(self.n, dtype=torch.float64))

    def __repr__(self) -> str:
        return f"WoodburyInverse(n={self.n}, rank={self.U.shape[1]}, scale={self.scale:.4g})"


class ConjugateWishartPosterior:
    r"""Posterior of the among-row precision in Theorem 2's X-side model.

    Model (Van Assel et al. 2022, App. A.3): :math:`\Theta_X \sim \mathcal W(\nu, I_n)`,
    :math:`\mathrm{vec}(X) \mid \Theta_X \sim \mathcal N(0, \Theta_X^{-1}\otimes I_p)`; by
    conjugacy :math:`\Theta_X \mid X \sim \mathcal W(\nu + p, (I_n + XX^\top)^{-1})`.

    Parameters
    ----------
    X : tensor (n, p)
    nu : float
        Prior degrees of freedom :math:`\nu > n - 1`.
    eps : float
        Precision multiplier: with :math:`X \mid \Theta \sim \mathcal N(0, (\varepsilon\Theta)^{-1}
        \otimes I_p)` the posterior scale is :math:`(I + \varepsilon XX^\top)^{-1}` (hierarchical
        coupling, Van Assel et al. 2022, Corollary 1). Default 1.
    """

    def __init__(self, X: torch.Tensor, nu: float, eps: float = 1.0):
        n, p = X.shape
        if not nu > n - 1:
            raise ValueError(f"Wishart degrees of freedom must exceed n - 1 = {n - 1}, got {nu}.")
        self.n, self.p, self.nu, self.eps = n, p, float(nu), float(eps)
        self.df = self.nu + p
        self._scale_inv = WoodburyInverse(math.sqrt(eps) * X.to(torch.float64), scale=1.0)

    @property
    def mean(self) -> WoodburyInverse:
        r""":math:`\mathbb E[\Theta_X \mid X] = (\nu+p)(I + \varepsilon XX^\top)^{-1}` (structured)."""
        m = WoodburyInverse.__new__(WoodburyInverse)
        m.__dict__.update(self._scale_inv.__dict__)
        m.scale = self.df
        return m

    def expected_logdet(self) -> torch.Tensor:
        r""":math:`\mathbb E\log|\Theta_X| = \psi_n(\mathrm{df}/2) + n\log 2 + \log|V|`."""
        return mvdigamma(self.df / 2, self.n) + self.n * math.log(2.0) + self._scale_inv.logdet()

    def dense(self) -> torch.distributions.Wishart:
        """The posterior as a dense ``torch.distributions.Wishart`` (oracle, small n)."""
        return torch.distributions.Wishart(
            df=torch.tensor(self.df, dtype=torch.float64),
            covariance_matrix=self._scale_inv.dense())


class LowRankPrecisionWishart(TorchDistribution):
    r"""Wishart law with precision :math:`P = \beta I_n + ZZ^\top`:
    :math:`S \sim \mathcal W(\nu, (\beta I_n + ZZ^\top)^{-1})` (scale :math:`P^{-1}`, mean
    :math:`\nu P^{-1}`).

    ``log_prob`` accepts a dense ``(n, n)`` tensor or a structured matrix with ``logdet()``,
    ``trace()`` and ``quad_trace(Z)`` (e.g. :class:`WoodburyInverse`), and evaluates

    .. math::
        \log p(S) = \tfrac{\nu-n-1}{2}\log|S|
        - \tfrac12\big(\beta\,\mathrm{tr}\,S + \mathrm{tr}(Z^\top S Z)\big)
        + \tfrac{\nu}{2}\log|\beta I_n + ZZ^\top| - \tfrac{\nu n}{2}\log 2 - \log\Gamma_n(\nu/2)

    exactly (the full log-density), with :math:`\log|\beta I_n + ZZ^\top|` from the determinant
    lemma: :math:`O(nqr)` for a rank-:math:`r` structured value, no :math:`n\times n` matrix. ``dense()`` returns the equivalent ``torch.distributions.Wishart``.

    Parameters
    ----------
    df : float
        Degrees of freedom :math:`\nu > n - 1`.
    Z : tensor (n, q)
    beta : float
        Ridge :math:`\beta > 0` of the precision.
    """

    arg_constraints: dict = {}
    support = constraints.positive_definite
    has_rsample = False

    def __init__(self, df: float, Z: torch.Tensor, beta: float = 1.0, validate_args=None):
        n, q = Z.shape
        if not df > n - 1:
            raise ValueError(f"Wishart degrees of freedom must exceed n - 1 = {n - 1}, got {df}.")
        if not beta > 0:
            raise ValueError(f"beta must be positive, got {beta}.")
        self.df, self.Z, self.beta, self.n = float(df), Z, float(beta), n
        super().__init__(torch.Size(), torch.Size((n, n)), validate_args=False)

    def precision_logdet(self) -> torch.Tensor:
        return gram_logdet(self.Z, self.beta)

    def log_prob(self, value) -> torch.Tensor:
        n, df = self.n, self.df
        Z = self.Z
        if isinstance(value, torch.Tensor):
            S = value.to(Z.dtype)
            logdet_S = torch.linalg.slogdet(S)[1]
            tr_S = torch.diagonal(S).sum()
            quad = (Z * (S @ Z)).sum()
        else:
            logdet_S, tr_S, quad = value.logdet(), value.trace(), value.quad_trace(Z)
        const = -0.5 * df * n * math.log(2.0) - torch.special.multigammaln(
            torch.tensor(df / 2, dtype=torch.float64), n)
        return (0.5 * (df - n - 1) * logdet_S - 0.5 * (self.beta * tr_S + quad)
                + 0.5 * df * self.precision_logdet() + const)

    def latent_terms(self, value) -> torch.Tensor:
        r"""The terms of :meth:`log_prob` that depend on :math:`Z`,
        :math:`-\tfrac12\mathrm{tr}(Z^\top S Z) + \tfrac{\nu}{2}\log|\beta I_n + ZZ^\top|`.

        Needs only ``value.quad_trace(Z)``, so it is defined for singular observations (a graph
        Laplacian), whose :math:`\log|S| = -\infty` is constant in :math:`Z` but lies outside
        the Wishart support."""
        Z = self.Z
        quad = (Z * (value @ Z)).sum() if isinstance(value, torch.Tensor) else value.quad_trace(Z)
        return -0.5 * quad + 0.5 * self.df * self.precision_logdet()

    def expected_log_prob(self, posterior: ConjugateWishartPosterior) -> torch.Tensor:
        r""":math:`\mathbb E_{S\sim\text{posterior}}[\log p(S)]` in closed form: the log-density is
        linear in :math:`S` except for :math:`\log|S|`, whose expectation is
        :meth:`ConjugateWishartPosterior.expected_logdet`."""
        M = posterior.mean
        at_mean = self.log_prob(M)
        return at_mean + 0.5 * (self.df - self.n - 1) * (posterior.expected_logdet() - M.logdet())

    def dense(self) -> torch.distributions.Wishart:
        """Equivalent dense ``torch.distributions.Wishart`` (oracle, small n)."""
        P = self.beta * torch.eye(self.n, dtype=self.Z.dtype) + self.Z @ self.Z.T
        return torch.distributions.Wishart(df=torch.tensor(self.df, dtype=self.Z.dtype),
                                           precision_matrix=P)

    def sample(self, sample_shape=torch.Size()):
        with torch.no_grad():
            return self.dense().sample(sample_shape)

    @property
    def mean(self):
        return self.dense().mean

    def expand(self, batch_shape, _instance=None):  # pragma: no cover - unbatched
        if tuple(batch_shape) != ():
            raise NotImplementedError("LowRankPrecisionWishart is not batched.")
        return self


# --------------------------------------------------------------------------------------------
# Theorem 2 closed form (Van Assel et al. 2022, §4.1)
# --------------------------------------------------------------------------------------------
def theorem2_eigenvalues(d: torch.Tensor, q: int, gamma: float = 1.0) -> torch.Tensor:
    r""":math:`\lambda_i^* = \max(0, \gamma(1+d_i) - 1)` for the ``q`` largest eigenvalues
    :math:`d_i` of :math:`XX^\top` (sorted decreasingly; missing ones count as 0)."""
    d = torch.sort(torch.as_tensor(d, dtype=torch.float64), descending=True).values
    if d.numel() < q:
        d = torch.cat([d, torch.zeros(q - d.numel(), dtype=torch.float64)])
    return (gamma * (1.0 + d[:q]) - 1.0).clamp_min(0.0)


def theorem2_solution(X: torch.Tensor, q: int, gamma: float = 1.0) -> torch.Tensor:
    r"""Closed-form minimiser of the precision coupling (Van Assel et al. 2022, Theorem 2):
    :math:`Z^* = V_{[:,q]}\,\mathrm{diag}(\lambda^*)^{1/2}` with :math:`XX^\top = VDV^\top` and
    :math:`\lambda^*_i = \max(0, \gamma(1+d_i)-1)`. ``X`` is used as given (centre it first for
    PCA). Signs: the largest-magnitude entry of each column is positive."""
    X = X.to(torch.float64)
    U, s, _ = torch.linalg.svd(X, full_matrices=False)
    d = s**2
    lam = theorem2_eigenvalues(d, q, gamma)
    k = min(q, U.shape[1])
    Z = torch.zeros(X.shape[0], q, dtype=torch.float64)
    Z[:, :k] = U[:, :k] * torch.sqrt(lam[:k])
    return _fix_signs(Z)


def _fix_signs(Z: torch.Tensor) -> torch.Tensor:
    idx = Z.abs().argmax(0, keepdim=True)
    sign = torch.sign(Z.gather(0, idx))
    sign[sign == 0] = 1.0
    return Z * sign


# --------------------------------------------------------------------------------------------
# kNN Laplacian (ProbDR, Ravuri & Lawrence 2025)
# --------------------------------------------------------------------------------------------
class KNNLaplacian:
    r"""Graph Laplacian :math:`\hat L = D - A` of a symmetric binary adjacency, as an edge list.

    ``rows, cols`` list every ordered pair with :math:`A_{ij} = 1` (both directions).

    * :meth:`quad` -- :math:`\mathrm{tr}(Z^\top \hat L Z) = \tfrac12\sum_{ij}A_{ij}\|z_i - z_j\|^2`,
      :math:`O(\mathrm{nnz}\,q)`, differentiable;
    * :meth:`weighted_sum` -- :math:`\sum_{ij}\hat L_{ij}M_{ij}` for a dense or implicit :math:`M`;
    * :meth:`dense`, :meth:`scipy` -- matrix forms.
    """

    def __init__(self, rows: torch.Tensor, cols: torch.Tensor, n: int):
        self.rows, self.cols, self.n = rows, cols, n
        self.degree = torch.zeros(n, dtype=torch.float64).index_add_(
            0, rows, torch.ones(rows.numel(), dtype=torch.float64))

    @property
    def n_edges(self) -> int:
        """Number of undirected edges :math:`\\sum_{i>j} A_{ij}`."""
        return self.rows.numel() // 2

    def trace(self) -> float:
        return float(self.degree.sum())

    def quad(self, Z: torch.Tensor) -> torch.Tensor:
        diff = Z[self.rows] - Z[self.cols]
        return 0.5 * (diff * diff).sum()

    def scaled(self, scale: float = 1.0, ridge: float = 0.0) -> _ScaledLaplacian:
        r"""The observation :math:`c(\hat L + \delta I)` as a structured matrix with
        ``quad_trace`` and ``trace`` (for :meth:`LowRankPrecisionWishart.latent_terms`)."""
        return _ScaledLaplacian(self, scale, ridge)

    def weighted_sum(self, M: torch.Tensor) -> torch.Tensor:
        r""":math:`\sum_{ij}\hat L_{ij}M_{ij} = \sum_i D_{ii}M_{ii} - \sum_{(i,j)\in A}M_{ij}`."""
        return (self.degree.to(M.dtype) * torch.diagonal(M)).sum() - M[self.rows, self.cols].sum()

    def scipy(self):
        import scipy.sparse as sp

        r, c = self.rows.cpu().numpy(), self.cols.cpu().numpy()
        A = sp.coo_matrix((np.ones(r.size), (r, c)), shape=(self.n, self.n)).tocsr()
        return sp.diags(self.degree.cpu().numpy()) - A

    def dense(self) -> torch.Tensor:
        L = torch.diag(self.degree.clone())
        L[self.rows, self.cols] -= 1.0
        return L

    def n_connected_components(self) -> int:
        from scipy.sparse.csgraph import connected_components

        return int(connected_components(self.scipy(), directed=False)[0])

    def default_ridge(self, n_components: int | None = None, *, warn_for: int | None = None,
                      stacklevel: int = 2) -> float:
        r"""The ridge :math:`\delta` of :math:`\hat L + \delta I` when none is given: 0 for a
        connected graph, else :math:`10^{-3}` times the mean degree, so that the component
        indicators (the extra zero eigenvalues) become the smallest non-zero ones
        (Ravuri & Lawrence 2025, fn. 4). Pass the number of components if known; with
        ``warn_for`` (the graph's neighbour count) a positive ridge comes with a warning."""
        k = self.n_connected_components() if n_components is None else n_components
        ridge = 1e-3 * float(self.degree.mean()) if k > 1 else 0.0
        if ridge > 0 and warn_for is not None:
            import warnings

            warnings.warn(
                f"The {warn_for}-NN graph has {k} connected components, so the Laplacian has "
                f"more than one zero eigenvalue; using ridge={ridge:.3g} (pass ridge= or "
                "increase n_neighbors).", RuntimeWarning, stacklevel=stacklevel + 1)
        return ridge


class _ScaledLaplacian:
    r""":math:`c(\hat L + \delta I)` without a matrix."""

    def __init__(self, L: KNNLaplacian, scale: float, ridge: float):
        self.L, self.scale, self.ridge, self.n = L, float(scale), float(ridge), L.n

    def quad_trace(self, Z: torch.Tensor) -> torch.Tensor:
        return self.scale * (self.L.quad(Z) + self.ridge * (Z * Z).sum())

    def trace(self) -> float:
        return self.scale * (self.L.trace() + self.ridge * self.n)

    def logdet(self):  # pragma: no cover - documented limitation
        raise NotImplementedError("log|L + ridge I| is constant in Z and not computed; use "
                                  "LowRankPrecisionWishart.latent_terms.")


def laplacian_eigenmaps(L: KNNLaplacian, q: int, *, dense_max_n: int = 4000) -> tuple[
        torch.Tensor, torch.Tensor]:
    r"""The ``q`` non-trivial smallest eigenpairs of :math:`\hat L` (eigenvectors 2..q+1),
    i.e. Laplacian eigenmaps with the unnormalised Laplacian. Returns ``(eigenvalues (q+1,),
    eigenvectors (n, q))``; the first eigenvalue (0, constant vector) is included in the
    eigenvalues for reference. Dense ``eigh`` up to ``dense_max_n`` nodes, ARPACK shift-invert
    beyond."""
    n = L.n
    if n <= dense_max_n:
        w, V = torch.linalg.eigh(L.dense())
        return w[: q + 1], V[:, 1: q + 1]
    from scipy.sparse.linalg import eigsh

    Ls = L.scipy().tocsc()
    rng = np.random.default_rng(0)
    w, V = eigsh(Ls, k=q + 1, sigma=-1e-3, which="LM", v0=rng.standard_normal(n))
    order = np.argsort(w)
    w, V = w[order], V[:, order]
    return torch.as_tensor(w), torch.as_tensor(np.ascontiguousarray(V[:, 1: q + 1]))


def probdr_epsilon(n: int, n_neg: int = 5, n_neigh: int = 15) -> float:
    r""":math:`\tilde\epsilon = 4\,n_\text{neg}\,n_\text{neigh}/(3n)` (Ravuri and Lawrence 2025, App. B; 100/n with the
    defaults)."""
    return 4.0 * n_neg * n_neigh / (3.0 * n)
