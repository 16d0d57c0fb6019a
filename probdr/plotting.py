r"""Matplotlib plots: labelled embedding scatter, loss curves, R_n(K) curves, and the plots of the
Bayesian workflow.

* :func:`plot_uncertainty` -- the posterior mean embedding as a labelled scatter, with one
  ellipse per point: the ``n_std``-standard-deviation contour of the point's posterior
  covariance :math:`\Sigma_i` estimated from Procrustes-aligned draws.
* :func:`plot_predictive_check` -- the graph statistics of
  :func:`probdr.diagnostics.posterior_predictive_check`, latent versus input draws.
"""

from __future__ import annotations

import numpy as np

from .diagnostics import posterior_of

__all__ = ["plot_embedding", "plot_loss", "plot_rnx", "plot_uncertainty", "plot_predictive_check"]


def _ax(ax, figsize=(6, 6)):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def plot_embedding(Z, y=None, ax=None, title: str | None = None, s: float = 4.0,
                   cmap: str = "tab10", legend: bool = True):
    """Scatter plot of a 2-D embedding coloured by labels ``y``; returns the Axes."""
    Z = np.asarray(Z)
    if Z.ndim != 2 or Z.shape[1] < 2:
        raise ValueError(f"Z must be (n, >=2), got shape {Z.shape}.")
    ax = _ax(ax)
    if y is None:
        ax.scatter(Z[:, 0], Z[:, 1], s=s, c="0.3", linewidths=0)
    else:
        y = np.asarray(y)
        classes = np.unique(y)
        import matplotlib as mpl

        colors = mpl.colormaps[cmap].resampled(max(len(classes), 2))
        for i, c in enumerate(classes):
            m = y == c
            ax.scatter(Z[m, 0], Z[m, 1], s=s, color=colors(i), label=str(c), linewidths=0)
        if legend and len(classes) <= 20:
            ax.legend(markerscale=3, fontsize=8, frameon=False, loc="best")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title)
    return ax


def plot_loss(history, ax=None, title: str = "objective"):
    """Loss per optimisation step."""
    ax = _ax(ax, (6, 3))
    ax.plot(np.asarray(history))
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    return ax


def plot_rnx(Ks, curves: dict, ax=None, logx: bool = True):
    """R_n(K) curves, one per embedding: ``curves = {"t-SNE": rnx_values, ...}``."""
    ax = _ax(ax, (6, 4))
    for name, r in curves.items():
        ax.plot(Ks, r, label=name)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel("K")
    ax.set_ylabel(r"$R_n(K)$")
    ax.legend(frameon=False)
    return ax

def _ellipse_params(C: np.ndarray, n_std: float):
    """Widths, heights (full axes) and angles (degrees) of the n_std contours of 2x2 covariances."""
    vals, vecs = np.linalg.eigh(C)  # ascending
    vals = np.clip(vals, 0.0, None)
    widths = 2.0 * n_std * np.sqrt(vals[:, 1])
    heights = 2.0 * n_std * np.sqrt(vals[:, 0])
    angles = np.degrees(np.arctan2(vecs[:, 1, 1], vecs[:, 0, 1]))
    return widths, heights, angles


def plot_uncertainty(posterior, y=None, ax=None, *, n_std: float = 2.0, alpha: float = 0.15,
                     points=None, s: float = 4.0, cmap: str = "tab10", title: str | None = None,
                     legend: bool = True):
    r"""Posterior mean embedding with per-point uncertainty ellipses.

    Each ellipse is :math:`\{z : (z - \bar z_i)^\top \Sigma_i^{-1} (z - \bar z_i) = c^2\}`,
    :math:`c` = ``n_std``, where :math:`\bar z_i` and :math:`\Sigma_i` are the mean and
    covariance of point i's aligned posterior draws (first two latent dimensions). Their size
    depends on the temperature (``coupling_weight``): read them relative to each other.

    Parameters
    ----------
    posterior : fitted estimator with ``posterior_``, a :class:`~probdr.infer.posterior.Posterior`,
        or draws ``(num_samples, m, q)`` of new points (``sample_transform``)
    y : array (n,), optional
        Labels for colours.
    ax : matplotlib Axes, optional
    n_std : float
        Contour in standard deviations (2 covers about 86% of a 2-D Gaussian, 1 about 39%).
    alpha : float
        Ellipse face opacity.
    points : array of int, optional
        Draw ellipses for these points only (all points are scattered).

    Returns
    -------
    matplotlib Axes
    """
    import matplotlib as mpl
    from matplotlib.collections import EllipseCollection

    from .plotting import plot_embedding

    post = posterior_of(posterior)
    if not (isinstance(n_std, (int, float)) and n_std > 0):
        raise ValueError(f"n_std must be positive, got {n_std!r}.")
    mean = post.mean
    if mean.shape[1] < 2:
        raise ValueError("plot_uncertainty needs an embedding with at least 2 dimensions.")
    n = mean.shape[0]
    if y is not None:
        y = np.asarray(y)
        if y.shape != (n,):
            raise ValueError(f"y must have shape ({n},), got {y.shape}.")
    C = post.point_covariances()[:, :2, :2]
    ax = plot_embedding(mean[:, :2], y, ax=ax, title=title, s=s, cmap=cmap, legend=legend)
    idx = np.arange(n) if points is None else np.asarray(points, dtype=int)
    w, h, a = _ellipse_params(C[idx], float(n_std))
    if y is None:
        colors = np.tile(np.array([[0.3, 0.3, 0.3, 1.0]]), (len(idx), 1))
    else:
        classes, yi = np.unique(y, return_inverse=True)
        cm = mpl.colormaps[cmap].resampled(max(len(classes), 2))
        colors = np.asarray(cm(yi[idx]))
    face = colors.copy()
    face[:, 3] = alpha
    ec = EllipseCollection(w, h, a, units="xy", offsets=mean[idx, :2],
                           offset_transform=ax.transData, facecolors=face,
                           edgecolors=colors, linewidths=0.3, zorder=0)
    # keep the view on the points (plot_embedding set it); huge ellipses are clipped, not zoomed
    ax.add_collection(ec, autolim=False)
    return ax


def plot_predictive_check(check: dict, axes=None):
    """Histograms of ``edge_precision`` and ``n_components`` for latent and input graph draws
    (the output of :func:`probdr.diagnostics.posterior_predictive_check`). Returns the axes."""
    import matplotlib.pyplot as plt

    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(9, 3))
    for ax, key, label in ((axes[0], "edge_precision", f"edge precision vs {check['k']}-NN"),
                           (axes[1], "n_components", "connected components")):
        for name, color in (("input", "0.5"), ("latent", "C0")):
            ax.hist(check[name][key], bins=15, alpha=0.6, color=color,
                    label=r"$W_X$ draws" if name == "input" else r"$W_Z$ posterior predictive")
        ax.set_xlabel(label)
    axes[0].legend(frameon=False, fontsize=8)
    return axes
