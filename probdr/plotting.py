"""Matplotlib plots: labelled embedding scatter, loss curves, R_n(K) curves."""

from __future__ import annotations

import numpy as np

__all__ = ["plot_embedding", "plot_loss", "plot_rnx"]


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
