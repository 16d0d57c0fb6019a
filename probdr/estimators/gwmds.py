r"""GW-MDS: multidimensional scaling with the Gromov-Wasserstein distance, and its geodesic
variant (Eufrazio, Montesuma & Cavalcante, *A dimensionality reduction technique based on the
Gromov-Wasserstein distance*, [G] Algorithm 1).

.. math::
    Y^\star = \arg\min_{Y\in\mathbb R^{n\times d}} \mathrm{GW}_{L_2}\Big(\tfrac1n\sum_i\delta_{x_i},
    \tfrac1n\sum_j\delta_{y_j}\Big) = \arg\min_Y \min_{\pi\in\Pi(\frac1n\mathbf 1,\frac1n\mathbf 1)}
    \sum_{ijkl}\big(d_{\mathcal X}(x_i,x_j) - \|y_k-y_l\|\big)^2\pi_{ik}\pi_{jl}

(the standard GW index pattern :math:`\pi_{ik}\pi_{jl}`; [G] prints :math:`\pi_{ij}\pi_{kl}`).
Each iteration solves GW for the current Y with POT's conditional-gradient solver (warm-started
from the previous plan), then takes one gradient step on Y with the plan fixed (a MAP step of
probdr's driver :class:`probdr.infer.map.MAPFit` on the Pyro model
:func:`probdr.models.ot_gwmds.gwmds_model`). After the last step the plan is recomputed for the
final Y and the embedding is *aligned* with the data by the barycentric projection
:math:`y^\star_i = \sum_j \pi_{ij} y_j / p_i` (= :math:`n\sum_j\pi_{ij}y_j`), which
restores the correspondence that GW, being invariant to permutations of Y, does not keep.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from sklearn.utils.metaestimators import available_if

from .._utils import generator
from ..infer.map import MAPFit, Phase
from ..init import pad_columns
from ..input.graph import dense_cost, euclidean_distance_matrix, geodesic_distances
from ..models.ot_gwmds import euclidean_distances, gwmds_model
from ..ot.costs import pearson_distance_correlation
from .base import DREstimator, unavailable_because
from .docs import reference
from .params import StrOptions

__all__ = ["GWMDS"]

#: why ``GWMDS`` has no ``transform``
NO_OUT_OF_SAMPLE_MAP = (
    "GW-MDS defines no out-of-sample map: the embedding is matched to the whole dissimilarity "
    "matrix of the training points by a Gromov-Wasserstein plan, and a new point has no place "
    "in that plan. Refit on the training and new points together.")

INITS = ("pca", "random")


def _sandwich(G: np.ndarray, C: np.ndarray) -> np.ndarray:
    r""":math:`G^\top C G` for symmetric C, exploiting the sparsity of exact GW plans (a
    permutation has n non-zeros): O(nnz n) instead of O(n^3) when G is sparse."""
    import scipy.sparse as sp

    if np.count_nonzero(G) > 0.1 * G.size:
        return G.T @ C @ G
    Gs = sp.csr_matrix(G)
    B = np.asarray(Gs.T @ C)  # G^T C, dense (n, n)
    return np.asarray((Gs.T @ B.T).T)


@reference
class GWMDS(DREstimator):
    """Gromov-Wasserstein multidimensional scaling (Eufrazio et al., Algorithm 1), Euclidean or
    geodesic: the embedding Y whose Euclidean distances are closest to the data's
    dissimilarities d_X in the Gromov-Wasserstein sense, with uniform weights on the points::

        min_Y min_π Σ_ijkl (d_X(x_i, x_j) - ‖y_k - y_l‖)² π_ik π_jl

    with π a coupling with uniform marginals 1/n. Each iteration solves GW for the current Y with
    POT's conditional gradient (warm-started), then takes one gradient step on Y with the plan
    fixed; the final embedding is aligned with the data by the barycentric projection
    y*_i = n Σ_j π_ij y_j, which restores the correspondence that GW (invariant to permutations
    of Y) does not keep.

    Parameters
    ----------
    n_components : int
        Dimension d of the embedding, smaller than the number of features.
    geodesic : bool
        Use geodesic distances (shortest paths on the kNN graph) for d_X; the embedding's
        distances stay Euclidean. The paper compares it with Isomap.
    n_neighbors : int or None
        k of the kNN graph (geodesic only). None: the smallest k ≥ 5 that gives a connected
        graph (the paper does not specify k).
    init : {"pca", "random"} or array of shape (n_samples, n_components)
        The paper's two strategies: a prior reduction (PCA scores), or y_i ~ N(0, I_d) (in units
        of the mean input distance). With "pca" or an array the first plan is warm-started at
        the identity coupling (Y starts in correspondence with X); with "random" at the product
        coupling.
    n_iter : int
        Outer iterations (a GW solve and one gradient step each).
    learning_rate : float
        Step η. With ``optimizer="gd"`` (plain gradient descent, as the paper) it applies to the
        per-point gradient n ∇_(y_k) E, with distances scaled to mean 1, so the step is free of
        n and of the data's scale. The paper tested 0.1 and 0.01.
    optimizer : {"gd", "adam"}
        Gradient descent (the paper's) or Adam.
    tol : float
        Stop when the relative change of the GW value between iterations stays below ``tol``
        for 5 iterations.
    align : bool
        Apply the paper's alignment step (the barycentric projection by the final plan).
    gw_max_iter : int
        Iteration cap of POT's GW solver per outer iteration.
    callbacks : callable, list of callables or None
        Called as ``callback(iteration, embedding, loss)`` every ``callbacks_every`` outer
        iterations, with the current positions and the GW value; the fit stops when one
        returns True (``stopped_by_callback_``).
    callbacks_every : int
        Outer iterations between two calls of the callbacks.
    metric : str or callable
        Dissimilarity of the rows (probdr.input.distances; the names are those of
        GraphCoupling), or "precomputed": X is a dense symmetric distance matrix (``init="pca"``
        is then classical MDS).

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components)
        The aligned embedding, in the data's distance units.
    embedding_raw_ : ndarray of shape (n_samples, n_components)
        Y before alignment (row j is the j-th atom of the embedding's measure, not tied to
        x_j).
    plan_ : ndarray of shape (n_samples, n_samples)
        The final GW plan π* (rows sum to 1/n).
    dissimilarity_ : ndarray of shape (n_samples, n_samples)
        d_X (Euclidean or geodesic).
    scale_ : float
        The mean input distance, by which distances are divided during the fit.
    gw_distance_ : float
        The final GW value, distances divided by ``scale_``.
    loss_history_ : ndarray
        GW value at every outer iteration (scaled distances).
    distance_correlation_ : float
        Pearson correlation (the paper's eq. 7) between ``dissimilarity_`` and the distances
        of ``embedding_`` over pairs i < j.
    n_neighbors_ : int or None
        k used (geodesic only).
    n_iter_
    stopped_by_callback_
    n_threads_
    device_
    random_state_

    See Also
    --------
    DistR : Gromov-Wasserstein with a few prototypes: reduction and clustering.
    sklearn.manifold.MDS : metric MDS by stress majorisation.
    sklearn.manifold.Isomap : geodesic distances embedded by classical MDS.

    Notes
    -----
    The paper prints the index pattern π_ij π_kl; the standard GW pattern π_ik π_jl is used.
    Each GW solve costs O(n³) per conditional-gradient step (POT): use a few hundred to a
    thousand points. There is no ``transform``: a new point has no place in the plan; refit on
    the training and new points together.

    References
    ----------
    R. P. Eufrazio, E. F. Montesuma, C. C. Cavalcante. A dimensionality reduction technique
    based on the Gromov-Wasserstein distance.

    Examples
    --------
    >>> import probdr
    >>> X, y = probdr.datasets.load("digits", n_samples=100)
    >>> gw = probdr.GWMDS(n_components=2, n_iter=30, random_state=0)
    >>> Z = gw.fit_transform(X)
    >>> Z.shape
    (100, 2)
    >>> gw.distance_correlation_ > 0.5
    True
    """

    _min_samples = 4
    _constraint_overrides = {"init": [StrOptions(set(INITS)), "array-like"],
                             "optimizer": [StrOptions({"gd", "adam"})]}

    def __init__(
        self,
        n_components: int = 2,
        *,
        geodesic: bool = False,
        n_neighbors: int | None = None,
        init="pca",
        n_iter: int = 200,
        learning_rate: float = 0.1,
        optimizer: str = "gd",
        tol: float = 1e-7,
        align: bool = True,
        gw_max_iter: int = 1000,
        random_state: int | None = None,
        verbose: bool = False,
        callbacks=None,
        callbacks_every: int = 50,
        n_jobs: int | None = None,
        device="auto",
        metric="euclidean",
        metric_params: dict | None = None,
    ):
        self.n_components = n_components
        self.geodesic = geodesic
        self.n_neighbors = n_neighbors
        self.init = init
        self.n_iter = n_iter
        self.learning_rate = learning_rate
        self.optimizer = optimizer
        self.tol = tol
        self.align = align
        self.gw_max_iter = gw_max_iter
        self.random_state = random_state
        self.verbose = verbose
        self.callbacks = callbacks
        self.callbacks_every = callbacks_every
        self.n_jobs = n_jobs
        self.device = device
        self.metric = metric
        self.metric_params = metric_params

    def _check_params_vs_input(self, n: int, p: int) -> None:
        from ..input.distances import check_metric

        if self._precomputed():
            if n != p:
                raise ValueError("metric='precomputed' needs a square (n, n) distance matrix as "
                                 f"X, got ({n}, {p}).")
        else:
            check_metric(self.metric, self.metric_params, n_features=p)
        if self.n_neighbors is not None and self.n_neighbors >= n:
            raise ValueError(f"n_neighbors must be an integer in [1, n-1] = [1, {n - 1}], "
                             f"got {self.n_neighbors!r}.")
        if not isinstance(self.init, str) and np.shape(self.init) != (n, self.n_components):
            raise ValueError(f"init array must have shape ({n}, {self.n_components}), got "
                             f"{np.shape(self.init)}.")

    # ------------------------------------------------------------------------------------------
    def _precomputed(self) -> bool:
        return isinstance(self.metric, str) and self.metric == "precomputed"

    def _dissimilarity(self, X: torch.Tensor) -> tuple[np.ndarray, int | None]:
        """The dissimilarity matrix and the neighbour count of its geodesic graph (``None``
        without one)."""
        if self.geodesic:
            return geodesic_distances(X, self.n_neighbors, metric=self.metric,
                                      metric_params=self.metric_params)
        if isinstance(self.metric, str) and self.metric == "euclidean":
            return euclidean_distance_matrix(X.cpu().numpy()), None
        return dense_cost(X, self.metric, self.metric_params).sqrt().cpu().numpy(), None

    def _initial(self, X: torch.Tensor, scale: float, gen: torch.Generator):
        n, d = X.shape[0], self.n_components
        if isinstance(self.init, str) and self.init == "random":
            return torch.randn(n, d, dtype=torch.float64, generator=gen), False
        if isinstance(self.init, str) and self._precomputed():  # pca of the distances: MDS
            from ..init import classical_mds

            Y = pad_columns(classical_mds(X, d), d, gen)
        elif isinstance(self.init, str):  # pca
            Xc = X - X.mean(0, keepdim=True)
            U, S, Vh = torch.linalg.svd(Xc, full_matrices=False)
            Y = pad_columns(U[:, :d] * S[:d], d, gen)
        else:
            Y = torch.as_tensor(np.asarray(self.init), dtype=torch.float64).clone()
        return Y / scale, True

    def _solve_plan(self, C_X: np.ndarray, Y: torch.Tensor, G0: np.ndarray | None):
        import ot

        n = C_X.shape[0]
        w = np.full(n, 1.0 / n)
        C_Y = euclidean_distances(Y.detach()).cpu().numpy()
        plan, log = ot.gromov.gromov_wasserstein(
            C_X, C_Y, w, w, loss_fun="square_loss", symmetric=True, log=True, G0=G0,
            max_iter=int(self.gw_max_iter))
        return plan, float(log["gw_dist"])

    def _fit(self, X: torch.Tensor, y=None) -> torch.Tensor:
        n, d = X.shape[0], self.n_components
        gen = generator(self.random_state_)
        D, self.n_neighbors_ = self._dissimilarity(X)
        self.dissimilarity_ = D
        off = ~np.eye(n, dtype=bool)
        scale = float(D[off].mean())
        if not scale > 0:
            # all points coincide: the embedding whose distances all vanish matches exactly
            warnings.warn("GWMDS: all points coincide (every pairwise distance is zero); the "
                          "embedding is a single point.", RuntimeWarning,
                          stacklevel=4)  # the user's fit (past _fit_context)
            self.scale_, self.plan_, self.gw_distance_ = 0.0, np.eye(n) / n, 0.0
            self.loss_history_, self.n_iter_ = np.zeros(1), 0
            self.stopped_by_callback_ = False
            self.embedding_raw_ = np.zeros((n, d))
            self.distance_correlation_ = float("nan")
            return torch.zeros(n, d, dtype=torch.float64)
        self.scale_ = scale
        C_X = D / scale
        C_Xt = torch.as_tensor(C_X)
        Y0, in_correspondence = self._initial(X, scale, gen)
        G = np.eye(n) / n if in_correspondence else None

        # one MAP step of the Pyro model per iteration, plan fixed (one optimiser throughout)
        if self.optimizer == "gd":
            name, step = "sgd", Phase(1, float(self.learning_rate) * n, name="Y-step")
        else:
            name, step = "adam", Phase(1, float(self.learning_rate), name="Y-step")
        history = []
        quiet = 0
        Y = Y0
        it = 0
        callback = self._callback()
        self.stopped_by_callback_ = False
        with MAPFit(gwmds_model, {"Y": Y0}, optimizer=name, collapse_floor=None,
                    desc="GW-MDS Y-step", callback=False) as fit:
            for it in range(1, int(self.n_iter) + 1):
                G, gw = self._solve_plan(C_X, Y, G)
                history.append(gw)
                if not np.isfinite(gw):
                    raise FloatingPointError("GW-MDS: the GW value became non-finite; lower the "
                                             "learning rate.")
                kw = dict(C_X=C_Xt, plan=torch.as_tensor(G), n_components=d,
                          A=torch.as_tensor(_sandwich(G, C_X)))
                fit.run(step, kw)
                Y = fit.values(kw)["Y"]
                if self.verbose and (it % 20 == 0 or it == 1):
                    print(f"GW-MDS iteration {it}: GW = {gw:.6g}")
                if callback is not None and it % self.callbacks_every == 0 and callback(
                        it, Y.detach().cpu().numpy(), gw):
                    self.stopped_by_callback_ = True
                    break
                if len(history) >= 2:
                    rel = abs(history[-2] - history[-1]) / max(abs(history[-2]), 1e-300)
                    quiet = quiet + 1 if rel < self.tol else 0
                    if quiet >= 5:
                        break
        # the plan of the final Y (the loop's last plan is one step stale)
        G, gw = self._solve_plan(C_X, Y, G)
        self.plan_ = G
        self.gw_distance_ = gw
        self.loss_history_ = np.asarray(history + [gw])
        self.n_iter_ = it
        Y_raw = Y * scale
        self.embedding_raw_ = Y_raw.cpu().numpy()
        if self.align:
            Pn = torch.as_tensor(G / G.sum(1, keepdims=True))
            Y_out = Pn @ Y_raw
        else:
            Y_out = Y_raw
        self.distance_correlation_ = pearson_distance_correlation(
            D, euclidean_distance_matrix(Y_out.cpu().numpy()))
        return Y_out


    @available_if(unavailable_because(lambda est: NO_OUT_OF_SAMPLE_MAP))
    def transform(self, X):  # never reachable: the declared availability refuses it
        """GW-MDS has no out-of-sample map (:data:`NO_OUT_OF_SAMPLE_MAP`)."""
        raise AttributeError(NO_OUT_OF_SAMPLE_MAP)
