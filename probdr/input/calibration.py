r"""One object for the input side of a fit: :class:`InputGraph`.

An estimator does not pass its input parameters (prior, affinity, perplexity or neighbour count,
metric, precomputed inputs, edge prior) to the input side field by field, once for ``fit`` and
again for every new-point path. It builds one :class:`InputGraph` from them, which

* validates them once, against the data's size (:meth:`InputGraph.check`), with the metric made
  canonical there (aliases resolved, parameters checked);
* builds the input law of the fit (:meth:`InputGraph.fit`): Proposition 1's posterior of
  :math:`W_X` on kNN lists (:func:`probdr.input.graph.build_input_graph`), the symmetric
  entropic affinity of SNEkhorn (:func:`~probdr.input.graph.sea_input_graph`), the Laplacian
  of the kNN graph of the Wishart family (:func:`~probdr.input.graph.knn_laplacian`), or a
  user's affinity;
* keeps the reference (training) points, and gives new points the same calibration:
  their input rows (:meth:`~InputGraph.rows`), their nearest reference points (:meth:`~InputGraph.nearest`),
  averages of training quantities over their rows (:meth:`~InputGraph.averaged`), and which of
  them are training points (:meth:`~InputGraph.matches`).

The fitted object is what an estimator's ``transform``, ``sample_transform``, ``save`` and
``load`` keep (its ``input_`` attribute). openTSNE's affinity objects (``Affinities.to_new``)
have the same shape.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from .._utils import check_data
from ..laws.graph import GraphLaw
from .graph import (
    AFFINITIES,
    build_input_graph,
    knn_laplacian,
    new_point_rows,
    precomputed_rows,
    prior_kind,
    query_lists,
    sea_input_graph,
)

__all__ = ["InputGraph", "training_matches", "zero_distance_matches"]

#: what :meth:`InputGraph.fit` builds, by ``affinity``
KINDS = (*AFFINITIES, "sea", "knn", "precomputed")


class InputGraph:
    r"""The input side of a fit: how the rows of X become the input law, for the training points
    and for new ones.

    Parameters
    ----------
    prior : {"D", "B", "B~", "E"} or GraphPrior
        Prior of the input graph :math:`W_X`.
    affinity : {"auto", "entropic", "umap", "binary", "sea", "knn", "precomputed"}
        The calibration of :math:`K_X` (:func:`~probdr.input.graph.build_input_graph`);
        ``"auto"`` is ``"umap"`` under the B and B~ priors, else ``"entropic"``. ``"sea"``: the
        symmetric entropic affinity (SNEkhorn; new points get their entropic rows at the same
        perplexity). ``"knn"``: the Laplacian of the symmetrised binary kNN graph with
        ``n_neighbors`` neighbours, self excluded (the Wishart family). ``"precomputed"``: X is
        the affinity itself.
    perplexity : float
        Perplexity of the entropic affinities.
    n_neighbors : int, optional
        Neighbours per row (UMAP's convention for ``"umap"`` and ``"binary"``: the point itself
        counted; ``"entropic"``: ``3 * perplexity`` unless given).
    metric, metric_params : str or callable, dict
        Dissimilarity of the rows (:mod:`probdr.input.distances`), or ``"precomputed"``: X holds
        distances.
    edge_prior : number, array, sparse or edge-prior object, optional
        Edge prior :math:`\pi` of the input graph (Proposition 1). One from an observed network
        (:func:`~probdr.laws.edge_priors.from_graph`, a sparse :math:`\pi`) also adds the
        network's pairs to the neighbour lists (:func:`~probdr.input.graph.build_input_graph`).
    neighbors : {"auto", "exact", "approximate", "pynndescent"}
        The neighbour search (:func:`probdr.input.neighbors.knn`).
    precomputed_knn : tuple (indices, distances), optional
        Neighbour lists computed elsewhere, used instead of the search.
    tol : float
        Tolerance of the symmetric entropic affinity (``affinity="sea"``).

    Attributes
    ----------
    n_ : int
        Number of reference (training) points (set by :meth:`fit` or :meth:`reference`).
    law_ : GraphLaw or KNNLaplacian
        The input law of the fit (:meth:`fit` only).
    """

    def __init__(self, prior="D", affinity: str = "auto", *, perplexity: float = 30.0,
                 n_neighbors: int | None = None, metric="euclidean", metric_params=None,
                 edge_prior=None, neighbors: str = "auto", precomputed_knn=None,
                 tol: float = 1e-5):
        self.prior = prior
        self.kind = prior_kind(prior)
        if affinity == "auto":
            affinity = "umap" if self.kind in ("B", "B~") else "entropic"
        if affinity not in KINDS:
            raise ValueError(f"affinity must be 'auto' or one of {KINDS}, got {affinity!r}.")
        self.affinity = affinity
        self.perplexity = perplexity
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.metric_params = metric_params
        self.edge_prior = edge_prior
        self.neighbors = neighbors
        self.precomputed_knn = precomputed_knn
        self.tol = tol
        self.n_ = None
        self._X = None

    def __repr__(self) -> str:
        return (f"InputGraph(prior={self.prior!r}, affinity={self.affinity!r}, "
                f"perplexity={self.perplexity!r}, n_neighbors={self.n_neighbors!r}, "
                f"metric={self.metric!r})")

    @property
    def precomputed(self) -> str | None:
        """``"affinity"`` (X is the affinity), ``"distances"`` (X holds distances) or ``None``
        (X holds features)."""
        if self.affinity == "precomputed":
            return "affinity"
        if isinstance(self.metric, str) and self.metric == "precomputed":
            return "distances"
        return None

    # -- validation, once ------------------------------------------------------------------------
    def check(self, n: int, p: int) -> InputGraph:
        """Validate the calibration against data of ``n`` rows and ``p`` columns, before any
        work, and make the metric canonical; returns ``self``. Raises ``ValueError`` naming
        the parameter. The perplexity's whole range is checked here, [1, n - 1) for entropic
        rows and (1, n - 2] for SEA: the one place of the input side's rules (an estimator's
        parameter table may refuse a value below the range earlier)."""
        self._check_input_kind(n, p)
        u, k = self.perplexity, self.n_neighbors
        number = isinstance(u, (int, float, np.integer, np.floating)) and not isinstance(u, bool)
        if self.affinity == "entropic" and not (number and u >= 1):
            raise ValueError(f"perplexity must be a number >= 1, got {u!r}.")
        if self.affinity == "entropic" and u >= n - 1:
            raise ValueError(
                f"perplexity={u} is too large for n={n} samples: it must be smaller than "
                f"n - 1 = {n - 1} (use a smaller perplexity or more data).")
        if self.affinity == "entropic" and number and k is not None and k < u:
            raise ValueError(f"n_neighbors={k} must be >= perplexity {u}.")
        if self.affinity == "sea" and not (number and 1 < u <= n - 2):
            raise ValueError(f"perplexity must lie in (1, n - 2] = (1, {n - 2}] for SEA without "
                             f"self-loops (n={n}), got {u!r}.")
        limit = n if self.affinity in ("umap", "binary") else n - 1
        if self.affinity in ("entropic", "umap", "binary") and k is not None and k > limit:
            raise ValueError(f"n_neighbors={k} is too large for n={n} samples (at most {limit}).")
        if self.affinity == "knn" and self.n_neighbors > n - 1:
            raise ValueError(
                f"n_neighbors={self.n_neighbors} is too large for n={n} samples: the kNN graph "
                f"needs n_neighbors <= n - 1 = {n - 1} (use fewer neighbours or more data).")
        return self

    def _check_input_kind(self, n: int, p: int) -> None:
        from .distances import check_knn, check_metric

        kind = self.precomputed
        if kind is None:
            self.metric, self.metric_params = check_metric(self.metric, self.metric_params,
                                                           n_features=p)
        elif n != p:
            raise ValueError(f"{'metric' if kind == 'distances' else 'affinity'}='precomputed' "
                             f"needs a square (n, n) matrix as X, got ({n}, {p}).")
        if kind == "affinity" and not (isinstance(self.metric, str)
                                       and self.metric in ("euclidean", "precomputed")):
            raise ValueError("affinity='precomputed' takes the affinity itself: metric does not "
                             "apply.")
        if self.precomputed_knn is not None:
            if kind == "affinity":
                raise ValueError("precomputed_knn does not apply to affinity='precomputed'.")
            check_knn(self.precomputed_knn, n, 1)

    # -- the fit ---------------------------------------------------------------------------------
    def reference(self, X) -> InputGraph:
        """Keep ``X`` (n rows) as the reference points of new ones, without building a law (a
        precomputed matrix is not kept: new points then come with their own distances or
        affinities to the reference points); returns ``self``."""
        return self._keep(self._rows(X, "X", 2))

    def _keep(self, X) -> InputGraph:
        """:meth:`reference` for ``X`` already validated."""
        self.n_ = int(X.n if isinstance(X, GraphLaw) else X.shape[0])
        self._X = None
        if self.precomputed is None:
            self._X = X if sp.issparse(X) else X.detach().cpu().numpy()
            self.n_features_ = int(X.shape[1])
        return self

    @staticmethod
    def _rows(X, name: str, min_samples: int):
        """``X`` validated (finite, 2-D, enough rows): a float64 tensor, a scipy sparse matrix
        as CSR, or a graph law as it is."""
        if isinstance(X, GraphLaw):
            return X
        X = check_data(X, name, min_samples=min_samples)
        return sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else X.to(torch.float64)

    def _new_rows(self, X_new, validated: bool = False):
        """New points validated against the reference points (columns: the reference points'
        features, or their number with a precomputed input). ``validated``: the caller has
        validated the rows already (an estimator's ``_validate_new``: a float64 tensor or CSR
        matrix), only their columns are checked here."""
        if not validated:
            X_new = self._rows(X_new, "X_new", 1)
        if self.n_ is None:
            raise RuntimeError("this InputGraph is not fitted: call fit(X) or reference(X).")
        want = self.n_ if self.precomputed else getattr(self, "n_features_", None)
        if want is not None and X_new.shape[1] != want:
            what = {"distances": "distances to the", "affinity": "affinities to the"}.get(
                self.precomputed, "features of the")
            raise ValueError(f"X_new must have {want} columns (the {what} reference points), got "
                             f"{X_new.shape[1]}.")
        return X_new

    def fit(self, X, random_state: int = 0):
        """The input law of ``X`` (and keep ``X`` as the reference points; ``random_state``
        seeds an approximate neighbour search): a
        :class:`~probdr.laws.graph.GraphLaw` for ``"entropic"``, ``"umap"``, ``"binary"``,
        ``"sea"`` and ``"precomputed"``; a :class:`~probdr.laws.wishart.KNNLaplacian` for
        ``"knn"``. Also stored as ``law_``."""
        X = self._rows(X, "X", 2)
        if self.affinity == "sea":
            law = sea_input_graph(X, self.perplexity, self.tol, metric=self.metric,
                                  metric_params=self.metric_params)
        elif self.affinity == "knn":
            law = knn_laplacian(X, self.n_neighbors, neighbors=self.neighbors,
                                random_state=random_state, metric=self.metric,
                                metric_params=self.metric_params)
        else:
            law = build_input_graph(
                X, self.prior, self.affinity, perplexity=self.perplexity,
                n_neighbors=self.n_neighbors, edge_prior=self.edge_prior,
                neighbors=self.neighbors, random_state=random_state, metric=self.metric,
                metric_params=self.metric_params, precomputed_knn=self.precomputed_knn)
        self._keep(X)  # validated above: the data are scanned once
        self.law_ = law
        return law

    # -- new points ------------------------------------------------------------------------------
    def reference_data(self):
        """The reference points kept by :meth:`fit`: a float64 tensor (on torch's default
        device), or a CSR matrix for sparse input. Raises ``RuntimeError`` if they were left out
        (a model saved with ``include_data=False``)."""
        if self.n_ is None:
            raise RuntimeError("this InputGraph is not fitted: call fit(X) or reference(X).")
        if self._X is None:
            raise RuntimeError(
                "this model has no training data: it was saved with include_data=False, so it "
                "cannot place new points. Save it with include_data=True (the default) to use "
                "transform.")
        return self._X if sp.issparse(self._X) else torch.as_tensor(
            np.asarray(self._X, dtype=np.float64))

    def rows(self, X_new, *, validated: bool = False) -> torch.Tensor:
        r"""The new points' input rows against the reference points, ``(m, n)`` sparse COO,
        float64: :math:`\mathbb E[W_{X,i\cdot} \mid X]` of each new node under the same prior
        and calibration (:func:`~probdr.input.graph.new_point_rows`; ``"sea"``: the entropic row
        at the same perplexity). With a precomputed input ``X_new`` holds the new points'
        distances or affinities to the reference points. ``validated``: ``X_new`` is already
        validated (the rows are then not scanned again; their columns are checked)."""
        if self.affinity == "knn":
            raise ValueError("the kNN Laplacian has no row law of new points; use nearest().")
        X_new = self._new_rows(X_new, validated)
        kind = self.precomputed
        X_ref = None if kind is not None else self.reference_data()
        if kind == "affinity":
            return precomputed_rows(X_new, self.kind, self.n_)
        return new_point_rows(X_new, X_ref, self.prior,
                              "entropic" if self.affinity == "sea" else self.affinity,
                              perplexity=self.perplexity, n_neighbors=self.n_neighbors,
                              metric=self.metric, metric_params=self.metric_params,
                              n_ref=self.n_)

    def matches(self, X_new, *, validated: bool = False) -> torch.Tensor:
        """For each new point, the reference point it is (``-1`` if none): a row equal to a
        training row, or a distance of exactly 0 with precomputed distances; none with a
        precomputed affinity. A new point that is a training point is that node of the fit."""
        X_new = self._new_rows(X_new, validated)
        kind = self.precomputed
        if kind == "affinity":
            return torch.full((X_new.shape[0],), -1, dtype=torch.long)
        if kind == "distances":
            return zero_distance_matches(X_new)
        return training_matches(X_new, self.reference_data())

    def nearest(self, X_new, k: int | None = None, *, validated: bool = False) -> torch.Tensor:
        """The ``k`` nearest reference points of each new point (default ``n_neighbors``, at
        most n), ``(m, k)``, nearest first, under the fit's metric."""
        X_new = self._new_rows(X_new, validated)
        k = min(int(self.n_neighbors if k is None else k), self.n_)
        idx, _ = query_lists(None if self.precomputed else self.reference_data(), X_new, k,
                             metric=self.metric, metric_params=self.metric_params)
        return idx

    def averaged(self, X_new, M, *, validated: bool = False) -> np.ndarray:
        r""":math:`\sum_j p_{ij} M_j / p_{i+}` for each new point: its entropic input row (the
        fit's prior, at the fit's perplexity, at most n) averaging the rows of ``M`` (n, d), a
        quantity of the training points."""
        X_new = self._new_rows(X_new, validated)
        X_ref = self.reference_data()
        P = new_point_rows(X_new, X_ref, self.kind, "entropic",
                           perplexity=float(min(self.perplexity, self.n_)), metric=self.metric,
                           metric_params=self.metric_params).double()
        num = torch.sparse.mm(P, torch.as_tensor(M, dtype=torch.float64))
        den = torch.sparse.sum(P, 1).to_dense().clamp_min(1e-300)
        return (num / den[:, None]).cpu().numpy()


def training_matches(X_new, X_ref) -> torch.Tensor:
    """For each new row, the index of a training row it equals exactly, else -1. A new point
    that is a training point is that node of the fitted model: its position is the fitted one
    (so ``fit(X).transform(X)`` returns ``fit_transform(X)``). Dense tensors or scipy sparse
    matrices."""
    from .neighbors import knn_query

    if sp.issparse(X_ref):
        from .distances import knn_query_metric

        idx, d = knn_query_metric(X_ref, X_new, 1, "sqeuclidean")
        j = idx[:, 0]
        diff = (sp.csr_matrix(X_new) - X_ref[j.cpu().numpy()]).tocsr()
        diff.eliminate_zeros()
        same = torch.as_tensor(np.diff(diff.indptr) == 0)
        return torch.where(same, j, torch.full_like(j, -1))
    idx, d2 = knn_query(X_ref, X_new, 1)
    j = idx[:, 0]
    same = (d2[:, 0] <= 1e-9 * (1.0 + X_ref.square().sum(1).max())) & (X_new == X_ref[j]).all(1)
    return torch.where(same, j, torch.full_like(j, -1))


def zero_distance_matches(D) -> torch.Tensor:
    """For each row of new-to-training distances, a training point at distance exactly 0
    (the first), else -1."""
    m = D.shape[0]
    out = torch.full((m,), -1, dtype=torch.long)
    if sp.issparse(D):
        C = sp.coo_matrix(D)
        hit = C.data == 0
        r, c = C.row[hit], C.col[hit]
        first = np.full(m, -1)
        for i, j in zip(r[::-1], c[::-1], strict=True):  # the first stored zero of each row
            first[i] = j
        return torch.as_tensor(first.astype(np.int64))
    Dt = torch.as_tensor(np.asarray(D) if not isinstance(D, torch.Tensor) else D)
    z = Dt == 0
    has = z.any(1)
    out[has] = z[has].to(torch.int8).argmax(1)
    return out

