"""Initialisations of the embedding: random, PCA, spectral (Laplacian eigenmaps), ccPCA.

Every initialiser returns an ``(n, q)`` float64 tensor; :func:`initialize` then rescales it so
that the first coordinate has standard deviation ``scale`` (openTSNE uses 1e-4) or, with
``scale="umap"``, to the box [0, 10] as umap-learn does.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ._utils import one_thread
from .laws.components import sample_memberships
from .laws.graph import GraphLaw, SymmetrizedBinaryGraph, UnitDegreeGraph
from .laws.weights import DenseWeights, SparseWeights

__all__ = ["pca", "classical_mds", "spectral", "initialize", "initial_embedding", "INITS", "cc_means", "cc_mean_average", "pca_scores",
           "ccpca_embedding"]


def pca(X, n_components: int) -> torch.Tensor:
    """PCA scores of column-centred ``X`` (signs fixed: the entry of largest magnitude on each
    axis is positive). A scipy sparse ``X`` is centred implicitly (randomised PCA on the sparse
    matrix, never densified)."""
    import scipy.sparse as sp

    if sp.issparse(X):
        return _sign_fix(_sparse_pca_scores(sp.csr_matrix(X, dtype=np.float64), n_components))
    Xc = X.to(torch.float64) - X.to(torch.float64).mean(0, keepdim=True)
    with one_thread():  # LAPACK's and BLAS's last bits depend on the thread count
        if min(Xc.shape) > 500:
            U, S, V = torch.pca_lowrank(Xc, q=n_components + 10, center=False, niter=6)
        else:
            U, S, Vh = torch.linalg.svd(Xc, full_matrices=False)
    Z = U[:, :n_components] * S[:n_components]
    return _sign_fix(Z)


def _sparse_pca_scores(A, n_components: int, oversample: int = 10, n_iter: int = 6,
                       seed: int = 0) -> torch.Tensor:
    r"""PCA scores of the column-centred sparse matrix :math:`A - \mathbb 1\mu^\top` by the
    randomised range finder with power iterations (Halko et al. 2011), never forming the centred
    (dense) matrix: every product is :math:`A v - \mathbb 1 (\mu^\top v)` or
    :math:`A^\top u - \mu (\mathbb 1^\top u)`."""
    n, p = A.shape
    rng = np.random.default_rng(seed)
    mu = np.asarray(A.mean(0)).ravel()
    AT = A.T.tocsr()
    ell = min(n_components + oversample, n, p)

    def right(V):  # (A - 1 mu^T) V
        return A @ V - np.outer(np.ones(n), mu @ V)

    def left(U):  # (A - 1 mu^T)^T U
        return AT @ U - np.outer(mu, U.sum(0))

    Y = right(rng.standard_normal((p, ell)))
    for _ in range(n_iter):
        Q, _ = np.linalg.qr(Y)
        Q2, _ = np.linalg.qr(left(Q))
        Y = right(Q2)
    Q, _ = np.linalg.qr(Y)
    B = left(Q).T  # Q^T (A - 1 mu^T), ell x p
    Ub, S, _ = np.linalg.svd(B, full_matrices=False)
    U = Q @ Ub[:, :n_components]
    return torch.as_tensor(np.ascontiguousarray(U * S[:n_components]))


def _sign_fix(Z: torch.Tensor) -> torch.Tensor:
    """Flip each column so that its entry of largest magnitude is positive."""
    sign = torch.sign(Z.gather(0, Z.abs().argmax(0, keepdim=True)))
    return Z * sign


def classical_mds(D, n_components: int) -> torch.Tensor:
    r"""Classical (Torgerson) MDS of a distance matrix: the top eigenvectors of
    :math:`B = -\tfrac12 J D^{\odot 2} J` scaled by the square roots of their eigenvalues
    (negative ones clipped), signs fixed as :func:`pca`. For Euclidean distances of X these are
    X's PCA scores."""
    D = torch.as_tensor(np.asarray(D) if not isinstance(D, torch.Tensor) else D,
                        dtype=torch.float64)
    D2 = D.square()
    B = -0.5 * (D2 - D2.mean(0, keepdim=True) - D2.mean(1, keepdim=True) + D2.mean())
    B = 0.5 * (B + B.T)
    vals, vecs = torch.linalg.eigh(B)
    top = torch.argsort(vals, descending=True)[:n_components]
    Z = vecs[:, top] * vals[top].clamp_min(0).sqrt()
    return _sign_fix(Z)


def pad_columns(Z: torch.Tensor, n_components: int, generator=None) -> torch.Tensor:
    """Pad ``Z`` (n, r) with random columns, scaled like its last one, up to ``n_components``
    (fewer directions than components: e.g. PCA of data with fewer features)."""
    if Z.shape[1] >= n_components:
        return Z
    pad = torch.randn(Z.shape[0], n_components - Z.shape[1], dtype=Z.dtype, generator=generator)
    scale = Z[:, -1].std().clamp_min(1e-12) if Z.shape[1] else torch.tensor(1.0, dtype=Z.dtype)
    return torch.cat([Z, pad * scale], 1)


def spectral(graph: torch.Tensor, n_components: int, random_state: int = 0) -> torch.Tensor:
    r"""Laplacian eigenmaps of a symmetric affinity graph: the eigenvectors 2..q+1 of the
    normalised Laplacian :math:`I - D^{-1/2} A D^{-1/2}` (largest of :math:`D^{-1/2}AD^{-1/2}`),
    mapped back by :math:`D^{-1/2}`."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components
    from scipy.sparse.linalg import eigsh

    G = graph.coalesce() if graph.is_sparse else graph.to_sparse().coalesce()
    r, c = G.indices().cpu().numpy()
    A = sp.coo_matrix((G.values().double().cpu().numpy(), (r, c)), shape=G.shape).tocsr()
    A = 0.5 * (A + A.T)
    n = A.shape[0]
    deg = np.asarray(A.sum(1)).ravel()
    dinv = 1.0 / np.sqrt(np.maximum(deg, 1e-12))
    N = sp.diags(dinv) @ A @ sp.diags(dinv)
    k = n_components + 1
    rng = np.random.default_rng(random_state)
    # a disconnected graph has the top eigenvalue 1 once per component: ARPACK returns an
    # arbitrary, run-dependent basis of that eigenspace, so small graphs take the dense solver;
    # so do tiny graphs, whose symmetries often make the last eigenvalue kept a repeated one
    # (ARPACK's vector in that eigenspace then changes from run to run, the dense solver's not)
    n_parts = connected_components(A, directed=False)[0]
    dense = n <= DENSE_SPECTRAL_ALWAYS_N or (
        n <= DENSE_SPECTRAL_MAX_N and (n_parts > 1 or k >= n - 1))
    try:
        if dense:
            raise ValueError("dense")
        vals, vecs = eigsh(N, k=k, which="LA", tol=1e-6, v0=rng.standard_normal(n),
                           maxiter=max(1000, 5 * n))
    except Exception:  # ARPACK failure, or the dense path: dense solver for small n
        if n > DENSE_SPECTRAL_MAX_N:
            raise
        vals, vecs = np.linalg.eigh(N.toarray())
    order = np.argsort(-vals, kind="stable")
    vecs = vecs[:, order[1:k]] * dinv[:, None]
    return torch.as_tensor(np.ascontiguousarray(vecs))


INITS = ("random", "pca", "spectral", "ccpca")
#: spectral initialisation of a disconnected graph (or one with fewer nodes than ARPACK needs)
#: uses the dense eigensolver up to this many nodes
DENSE_SPECTRAL_MAX_N = 5000
#: and of any graph up to this many nodes (a dense eigensolver's milliseconds)
DENSE_SPECTRAL_ALWAYS_N = 100


def initialize(
    init,
    X: torch.Tensor,
    n_components: int,
    *,
    graph=None,
    input_graph=None,
    scale: float | str = 1e-4,
    generator: torch.Generator | None = None,
    ccpca_samples: int = 100,
) -> torch.Tensor:
    """Initial embedding from a name in :data:`INITS` or an array of shape ``(n, q)``."""
    n = X.shape[0]
    if isinstance(init, (np.ndarray, torch.Tensor)):
        Z = torch.as_tensor(np.asarray(init) if isinstance(init, np.ndarray) else init,
                            dtype=torch.float64)
        if tuple(Z.shape) != (n, n_components):
            raise ValueError(f"init array must have shape ({n}, {n_components}), got "
                             f"{tuple(Z.shape)}.")
        if not torch.isfinite(Z).all():
            raise ValueError("init array contains NaN or infinite values.")
        return Z.clone()
    if init == "random":
        Z = torch.randn(n, n_components, dtype=torch.float64, generator=generator)
    elif init == "pca":
        Z = pca(X, n_components)
        Z = pad_columns(Z, n_components, generator)
    elif init == "spectral":
        if graph is None:
            raise ValueError("init='spectral' needs the input graph.")
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator).item())
        Z = spectral(graph, n_components, random_state=seed)
    elif init == "ccpca":
        if input_graph is None:
            raise ValueError("init='ccpca' needs the input graph law.")
        Z = ccpca_embedding(X.to(torch.float64), _ccpca_law(input_graph), n_components,
                            n_samples=ccpca_samples, generator=generator)
    else:
        raise ValueError(f"init must be one of {INITS} or an (n, q) array, got {init!r}.")
    return rescale(Z, scale, generator)


def initial_embedding(init, X, mean, input_graph, n_components: int, init_scale,
                      precomputed: str | None, gen: torch.Generator) -> torch.Tensor:
    """The initial embedding ``init`` (a name or an array) of a graph-coupling fit of ``X``,
    for every kind of input: features (dense or sparse), precomputed distances, neighbour lists
    or affinities, a graph law (no features: the initialisers need the size only); ``mean`` is
    the input graph's mean, ``input_graph`` its law (:func:`initialize`). Without features
    (``precomputed`` input) ``"pca"`` is classical MDS of dense distances, else spectral."""
    data, given = X, False
    if isinstance(X, GraphLaw):
        data = torch.empty(X.n, 0, dtype=torch.float64)
    if isinstance(init, str) and init == "pca" and precomputed is not None:
        import scipy.sparse as sp

        if precomputed == "distances" and not sp.issparse(X):
            data, given = classical_mds(X, n_components), True
        else:
            init = "spectral"
    if given:
        Z = pad_columns(data, n_components, gen)
        return rescale(Z, init_scale, gen)
    return initialize(init, data, n_components, graph=mean, input_graph=input_graph,
                      scale=init_scale, generator=gen)


def _ccpca_law(law):
    """The graph law whose draws ccPCA decomposes into connected components.

    Draws of a B (binary) law on a kNN graph -- UMAP's fuzzy memberships -- keep most edges and
    are connected, so their component means are the global mean and ccPCA would reduce to PCA.
    For B laws, ccPCA therefore samples the unit-out-degree (D) law on the same expected edges:
    node i keeps one neighbour j with probability proportional to its membership P_ij (for the
    symmetrised B~ law, the directed memberships before symmetrisation). D and E laws are used
    as they are."""
    if getattr(law, "prior", None) != "B":
        return law
    P = (law.base if isinstance(law, SymmetrizedBinaryGraph) else law).mean
    if P.is_sparse:
        P = P.coalesce()
        keep = P.values() > 0
        r, c = P.indices()[:, keep]
        weights = SparseWeights(r, c, torch.log(P.values()[keep]), P.shape[0])
    else:
        weights = DenseWeights(torch.log(P))
    return UnitDegreeGraph(weights)


def rescale(Z, scale, generator):
    Z = Z - Z.mean(0, keepdim=True)
    if scale == "umap":
        span = (Z.max(0).values - Z.min(0).values).clamp_min(1e-12)
        Z = 10.0 * (Z - Z.min(0).values) / span
        return Z + 1e-4 * torch.randn(Z.shape, dtype=Z.dtype, generator=generator)
    sd = Z[:, 0].std().clamp_min(1e-12)
    return Z / sd * float(scale)


def cc_means(X: torch.Tensor, membership: torch.Tensor) -> torch.Tensor:
    r""":math:`U_{[R]}U_{[R]}^\top X` for one partition: row :math:`i` replaced by the mean of
    :math:`X` over :math:`i`'s component. ``membership``: ``(n,)`` labels ``0..R-1``."""
    R = int(membership.max()) + 1
    membership = membership.to(X.device)
    sums = torch.zeros(R, X.shape[1], dtype=X.dtype, device=X.device).index_add_(0, membership, X)
    counts = torch.bincount(membership, minlength=R).to(X.dtype)
    return (sums / counts[:, None])[membership]


def cc_mean_average(X: torch.Tensor, memberships: torch.Tensor) -> torch.Tensor:
    r""":math:`\frac1N\sum_\ell U^\ell_{[R]}U^{\ell\top}_{[R]}X` from ``(N, n)`` labels, in
    :math:`O(Nnp)` time and :math:`O(np)` memory."""
    acc = torch.zeros_like(X)
    for m in memberships:
        acc += cc_means(X, m)
    return acc / memberships.shape[0]


def pca_scores(M: torch.Tensor, n_components: int) -> torch.Tensor:
    """Unscaled PCA scores ``U_q S_q`` of column-centred ``M`` (signs: the largest-magnitude entry of each
    column positive)."""
    Mc = M - M.mean(0, keepdim=True)
    with one_thread():  # the last bits of LAPACK's SVD depend on the thread count
        U, S, _ = torch.linalg.svd(Mc, full_matrices=False)
    k = min(n_components, S.numel())
    Z = torch.zeros(M.shape[0], n_components, dtype=M.dtype)
    Z[:, :k] = U[:, :k] * S[:k]
    idx = Z.abs().argmax(0, keepdim=True)
    sign = torch.sign(Z.gather(0, idx))
    sign[sign == 0] = 1.0
    return Z * sign


def _validate(X, n_components, n_samples):
    if not isinstance(X, torch.Tensor) or X.ndim != 2:
        raise ValueError("X must be a 2-D torch.Tensor of shape (n_samples, n_features).")
    n, p = X.shape
    if n == 0 or p == 0:
        raise ValueError(f"X is empty: shape {tuple(X.shape)}.")
    if not torch.isfinite(X).all():
        raise ValueError("X contains NaN or infinite values.")
    if not (isinstance(n_components, (int, np.integer)) and 1 <= n_components < p):
        raise ValueError(f"n_components must be an integer in [1, p - 1] = [1, {p - 1}], got "
                         f"{n_components!r}.")
    if not (isinstance(n_samples, (int, np.integer)) and n_samples >= 1):
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}.")


def ccpca_embedding(
    X: torch.Tensor,
    graph_law: GraphLaw,
    n_components: int,
    n_samples: int = 100,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""ccPCA embedding (Algorithm 1): PCA scores of the data averaged over the CC means of
    ``n_samples`` draws of ``graph_law``.

    Parameters
    ----------
    X : tensor (n, p), float64
        Data.
    graph_law : probdr.laws.GraphLaw
        Posterior law of the input graph, :math:`\mathbb P_{\mathcal P_X}(\cdot; K_X)` (B, D, E or
        the symmetrised B~), with ``.sample(sample_shape)``.
    n_components : int
        Number of PCA components :math:`q < p`.
    n_samples : int
        Monte Carlo draws :math:`N` (Van Assel et al. 2022: about 100 suffice for n = 10 000).
    generator : torch.Generator, optional
        Source of randomness (the global torch RNG is left untouched when given).

    Returns
    -------
    Z : tensor (n, q), float64
        Unscaled PCA scores :math:`U_qS_q` of the column-centred averaged matrix :math:`\bar X`
        (signs fixed: the largest-magnitude entry of each column is positive). Columns beyond the
        rank of :math:`\bar X - \mathbf 1\bar x^\top` are zero (e.g. one component in every draw).
    """
    _validate(X, n_components, n_samples)
    if graph_law.n != X.shape[0]:
        raise ValueError(f"graph_law has {graph_law.n} nodes but X has {X.shape[0]} rows.")
    X = X.to(torch.float64)
    memberships = sample_memberships(graph_law, int(n_samples), generator)
    Z = pca_scores(cc_mean_average(X, memberships), n_components)
    if (Z.abs().amax(0) == 0).any():
        warnings.warn("ccPCA: the CC-mean-averaged data has rank below n_components (the "
                      "posterior graphs are connected); the last columns are zero.",
                      RuntimeWarning, stacklevel=2)
    return Z

