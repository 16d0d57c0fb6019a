"""New points in the Wishart family: the linear map of Wishart PCA and of ProbDR with the
sample covariance (:class:`LinearMapMixin`), and the kNN-graph row of the Laplacian models
(:class:`GraphRowMixin`)."""

from __future__ import annotations

import numpy as np
import torch

from .base import in_fit_environment

__all__ = ["LinearMapMixin", "GraphRowMixin"]


class LinearMapMixin:
    r"""``transform`` of the families whose embedding is linear in the (centred) data: Wishart
    PCA (Theorem 2: :math:`Z = X_c V_q\,\mathrm{diag}(\sqrt{\lambda^*_i/d_i})` up to a rotation)
    and ProbDR with the sample covariance (dual PPCA). The map :math:`W` (p, q) is the
    least-squares solution of :math:`X_c W = Z` on the training data within the span of the top
    q principal directions (``projection_``), so that the training points map onto
    ``embedding_``; ``components_`` (q, p) are its unit-norm
    columns (the principal axes, as scikit-learn's PCA) and ``mean_`` the centring vector. The
    map needs no training data after ``fit``, and none is kept."""

    _keeps_training_data = True  # for _after_fit, which then drops it

    def _after_fit(self) -> None:
        X = self._X_fit
        mean = X.mean(0) if getattr(self, "center", True) else np.zeros(X.shape[1])
        # least squares on the top-q principal directions of X_c, where the MAP lies (a full
        # least-squares fit would also fit the optimiser's residual with the smallest ones)
        U, s, Vt = np.linalg.svd(X - mean, full_matrices=False)
        q = min(self.embedding_.shape[1], int((s > s[0] * 1e-12).sum()))
        self.projection_ = Vt[:q].T @ ((U[:, :q].T @ self.embedding_) / s[:q, None])
        self.mean_ = mean
        self._X_fit = None  # the map is all transform needs

    def _linear_map(self) -> tuple[np.ndarray, np.ndarray]:
        self._check_fitted()
        return self.projection_, self.mean_

    @property
    def components_(self) -> np.ndarray:
        """Principal axes in feature space, ``(n_components, n_features)``, unit norm."""
        W, _ = self._linear_map()
        return (W / np.linalg.norm(W, axis=0).clip(1e-300)).T

    @in_fit_environment
    def transform(self, X):
        """Project new points with the fitted linear map: ``(X - mean_) @ W``."""
        Xt = self._validate_new(X)
        W, mean = self._linear_map()
        return self._output(torch.as_tensor((Xt.cpu().numpy() - mean) @ W), X)


class GraphRowMixin:
    r"""``transform`` of the Laplacian (Wishart) family by the new node's row of the kNN graph:
    the new node is joined to its ``n_neighbors`` nearest training points (:math:`a_{ij} = 1`,
    degree :math:`k`), and with the fitted embedding fixed its position is the conditional mean of
    the Gaussian Markov random field whose precision is the Laplacian,
    :math:`z_i = \sum_j a_{ij} z_j / (k - \lambda_c)` per column :math:`c`. For eigenmaps
    :math:`\lambda_c` is the column's Laplacian eigenvalue (the Nystrom extension: an eigenvector
    of :math:`\hat L` satisfies it exactly at every node); for the other Laplacian models
    :math:`\lambda_c = 0`, the neighbours' mean. The neighbours and the matches with training
    points come from the fit's input side (``input_``, :class:`probdr.input.InputGraph`)."""

    def _column_eigenvalues(self) -> np.ndarray:
        return np.zeros(self.embedding_.shape[1])

    @in_fit_environment
    def transform(self, X):
        """Place new points by their kNN-graph rows (class docstring)."""
        Xt = self._validate_new(X)
        side = self._fitted_input()
        idx = side.nearest(Xt, validated=True)
        Z_ref = torch.as_tensor(self.embedding_)
        lam = torch.as_tensor(self._column_eigenvalues(), dtype=torch.float64)
        Z = Z_ref[idx].sum(1) / (idx.shape[1] - lam)
        match = side.matches(Xt, validated=True)
        seen = match >= 0
        Z[seen] = Z_ref[match[seen]]
        return self._output(Z, X)
