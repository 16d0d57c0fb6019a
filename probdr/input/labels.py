r"""Supervision: labels as a second observed graph.

``fit(X, y)`` on the graph-coupling family couples the latent graph :math:`W_Z` with two
observed graphs, the data's :math:`W_X` and the labels' :math:`W_Y`, each likelihood tempered by
its weight:

.. math::
    \log p(Z \mid X, y) = \text{const} + \sum_i \Big[(1 - \alpha_i)\,
    \mathbb E_{W_X}\log p(W_{Z,i\cdot} = W_{X,i\cdot} \mid Z)
    + \alpha_i\, \mathbb E_{W_Y}\log p(W_{Z,i\cdot} = m_i W_{Y,i\cdot} \mid Z)\Big]

with :math:`\alpha_i = \alpha` (``target_weight``) for a labelled point and 0 for an unlabelled
one (``y_i = -1``), and :math:`m_i = \sum_j \mathbb E[W_{X,ij}]` the point's mass in the data
graph, so that labels take the share :math:`\alpha` of each labelled row whatever the input
prior. The label graph links each labelled point to points of its own label: under the D law,
uniformly among them, :math:`\mathbb E[W_{Y,ij}] = 1/(n_c - 1)`, estimated by ``k`` partners
drawn once per fit (``k`` = the data graph's median out-degree), so the row stays sparse.

Because the coupling's cross-entropy is linear in the observed graph, the two tempered
likelihoods equal one coupling with the mixture :math:`(1 - \alpha_i) W_{X,i\cdot} +
\alpha_i m_i W_{Y,i\cdot}` (:func:`supervised_mean`): the same model and MAP driver fit it. The
labels add attraction between same-label points that are not data neighbours, and take the
share :math:`\alpha` away from a labelled point's data edges, including those to other labels;
unlabelled points are placed by their data edges alone. Different labels repel through the
latent graph's normaliser, as any non-edge.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["check_labels", "label_graph", "supervised_mean"]


def check_labels(y, n: int) -> np.ndarray:
    """Labels as integer codes, ``-1`` for unknown: integers (``-1`` unknown), integer-valued
    floats (NaN unknown) or any hashable labels (strings; ``None``, ``""`` and NaN unknown).
    Raises ``ValueError`` on a wrong length, non-integer numbers or no known label."""
    y = np.asarray(y.detach().cpu() if isinstance(y, torch.Tensor) else y)
    if y.ndim != 1 or y.shape[0] != n:
        raise ValueError(f"y must be a 1-D array of {n} labels (one per sample), got shape "
                         f"{y.shape}.")
    if y.dtype.kind in "iub":
        codes = y.astype(np.int64)
        if (codes < -1).any():
            raise ValueError("integer labels must be >= 0, with -1 for an unknown label.")
    elif y.dtype.kind == "f":
        known = np.isfinite(y)
        if not np.all(y[known] == np.round(y[known])):
            raise ValueError("labels must be classes (integers, or strings); got non-integer "
                             "numbers. For a continuous target, bin it first.")
        codes = np.where(known, y, -1).astype(np.int64)
        if (codes < -1).any():
            raise ValueError("integer labels must be >= 0, with -1 for an unknown label.")
    else:
        unknown = np.array([v is None or v == "" or (isinstance(v, float) and np.isnan(v))
                            or (isinstance(v, (int, np.integer)) and v == -1) for v in y])
        codes = np.full(n, -1, dtype=np.int64)
        if (~unknown).any():
            _, inv = np.unique(y[~unknown].astype(str), return_inverse=True)
            codes[~unknown] = inv
    if (codes < 0).all():
        raise ValueError("every label is unknown (-1): fit without y for an unsupervised "
                         "embedding.")
    return codes


def _row_degrees(W: torch.Tensor) -> torch.Tensor:
    n = W.shape[0]
    if W.is_sparse:
        r = W.coalesce().indices()[0]
        return torch.bincount(r, minlength=n)
    return (W != 0).sum(1)


def label_graph(y: np.ndarray, W_X: torch.Tensor, *, k: int | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    r"""The label graph's mean on sampled edges, ``(n, n)`` sparse: each labelled point ``i``
    gets ``k`` partners drawn uniformly (with replacement) among the other points of its label,
    each edge with weight :math:`1/k` (rows of labelled points sum to 1; a label held by one
    point gives that point no edge). ``k`` defaults to the median out-degree of ``W_X``."""
    n = len(y)
    if k is None:
        deg = _row_degrees(W_X)
        k = max(1, int(deg.double().median()))
    yt = torch.as_tensor(y, dtype=torch.long)
    lab = (yt >= 0).nonzero().flatten()
    rows, cols = [], []
    for c in torch.unique(yt[lab]).tolist():
        members = lab[yt[lab] == c]
        nc = members.numel()
        if nc < 2:
            continue
        # k draws among the nc - 1 others: draw in [0, nc - 1) and skip the point itself
        pick = torch.randint(0, nc - 1, (nc, k), generator=generator)
        pick = pick + (pick >= torch.arange(nc)[:, None]).long()
        rows.append(members.repeat_interleave(k))
        cols.append(members[pick].flatten())
    if not rows:
        return torch.sparse_coo_tensor(torch.zeros(2, 0, dtype=torch.long),
                                       torch.zeros(0, dtype=torch.float64), (n, n)).coalesce()
    r, c = torch.cat(rows), torch.cat(cols)
    v = torch.full((r.numel(),), 1.0 / k, dtype=torch.float64)
    return torch.sparse_coo_tensor(torch.stack([r, c]), v, (n, n), check_invariants=False).coalesce()


def supervised_mean(W_X: torch.Tensor, W_Y: torch.Tensor, y: np.ndarray,
                    target_weight: float) -> torch.Tensor:
    r"""The observed graph of a supervised fit, row by row
    :math:`(1 - \alpha_i) W_{X,i\cdot} + \alpha_i m_i W_{Y,i\cdot}` with :math:`\alpha_i =`
    ``target_weight`` for labelled rows that have label edges (else 0) and :math:`m_i` the row's
    mass in ``W_X``. Sparse in, sparse out (float64)."""
    n = W_X.shape[0]
    alpha = float(target_weight)
    WX = W_X.double().coalesce() if W_X.is_sparse else W_X.double().to_sparse().coalesce()
    (r, c), v = WX.indices(), WX.values()
    mass = torch.zeros(n, dtype=torch.float64).index_add_(0, r, v)
    WY = W_Y.double().coalesce()
    (ry, cy), vy = WY.indices(), WY.values()
    has = torch.zeros(n, dtype=torch.bool)
    has[ry] = True
    a = torch.where(has & torch.as_tensor(y >= 0), alpha, 0.0).double()
    vals = torch.cat([(1.0 - a[r]) * v, a[ry] * mass[ry] * vy])
    idx = torch.cat([torch.stack([r, c]), torch.stack([ry, cy])], 1)
    out = torch.sparse_coo_tensor(idx, vals, (n, n), check_invariants=False).coalesce()
    keep = out.values() > 0
    return torch.sparse_coo_tensor(out.indices()[:, keep], out.values()[keep], (n, n),
                                   check_invariants=False).coalesce()
