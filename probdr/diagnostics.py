r"""Bayesian diagnostics: posterior predictive graphs and the ArviZ export.

Posterior predictive graphs
    The graph-coupling model is generative in the latent graph: given an embedding draw
    :math:`Z^{(s)} \sim p(Z \mid \cdot)`, a replicated graph is
    :math:`W_Z^{(s)} \sim \mathbb P_{\mathcal P_Z}(\cdot;\ \pi \odot K_Z(Z^{(s)}))` (the latent law's
    ``sample()``). Comparing statistics of these graphs with the same statistics of draws of the
    input graph :math:`W_X \sim \mathbb P_{\mathcal P_X}(\cdot;\ \pi \odot K_X)` is a posterior
    predictive check of the coupling: an embedding that preserves neighbourhoods places its
    latent edges on input neighbours (high *edge precision* against the kNN graph of the data)
    and has as many connected components as the input graphs.

ArviZ
    :func:`to_arviz` exports Procrustes-aligned draws with dimensions
    ``(chain, draw, point, latent_dim)`` so that ``az.summary``, ``az.ess`` and ``az.rhat`` apply,
    and the draws of the model's other latent sites (a kernel's degrees of freedom, a scale) as
    posterior variables of their own. It is built on ``az.from_dict`` and works with ArviZ 0.x
    (``InferenceData``) and 1.x (``xarray.DataTree``).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from ._compute.isolation import fit_stream
from .infer.posterior import Posterior
from .laws.components import connected_components

__all__ = ["posterior_predictive_graphs", "input_graph_draws", "compare_graphs",
           "knn_reference_graph", "posterior_predictive_check", "to_arviz"]

#: largest n for which latent graphs are drawn (each draw needs dense n x n kernel weights)
PREDICTIVE_MAX_N = 10_000


# --------------------------------------------------------------------------------------------
# graph helpers
# --------------------------------------------------------------------------------------------
def _edges(g) -> tuple[np.ndarray, np.ndarray, int]:
    """(rows, cols, n) of the non-zero off-diagonal entries of a graph in any representation."""
    from .laws.edge_priors import graph_edges

    r, c, n, _ = graph_edges(g)
    keep = r != c
    return r[keep], c[keep], n


def _undirected_keys(g, n: int | None = None) -> tuple[np.ndarray, int]:
    r, c, m = _edges(g)
    if n is not None and m != n:
        raise ValueError(f"graphs must all have {n} nodes, got one with {m}.")
    lo, hi = np.minimum(r, c), np.maximum(r, c)
    return np.unique(lo.astype(np.int64) * m + hi), m


def _n_components(g) -> int:
    if isinstance(g, torch.Tensor):
        return connected_components(g)[0]
    r, c, n = _edges(g)
    import scipy.sparse as sp

    return connected_components(sp.coo_matrix((np.ones(len(r)), (r, c)), shape=(n, n)))[0]


def _sparse(W: torch.Tensor) -> torch.Tensor:
    return W.coalesce() if W.is_sparse else W.to_sparse().coalesce()


def _seeded(random_state) -> torch.Generator | None:
    """A CPU generator seeded with ``random_state`` (``None``: none, torch's global stream)."""
    return None if random_state is None else torch.Generator().manual_seed(int(random_state))


def _check_fitted(est) -> None:
    if not hasattr(est, "input_graph_"):
        raise RuntimeError(f"{type(est).__name__} is not fitted (or is not a graph-coupling "
                           "estimator): call fit(X) first.")


# --------------------------------------------------------------------------------------------
# posterior predictive graphs
# --------------------------------------------------------------------------------------------
def _draw_indices(total: int, num: int) -> np.ndarray:
    return np.linspace(0, total - 1, num).round().astype(int) if num <= total else \
        np.arange(num) % total


def posterior_predictive_graphs(est, num_samples: int = 20, *,
                                random_state: int | None = 0) -> list[torch.Tensor]:
    r"""Replicated latent graphs :math:`W_Z^{(s)} \sim \mathbb P_{\mathcal P_Z}(\cdot;
    \pi \odot K_Z(Z^{(s)}))`, one per posterior draw :math:`Z^{(s)}`.

    Parameters
    ----------
    est : fitted GraphCoupling (TSNE, SNE, LargeVis, UMAP, ...)
        With ``inference="svi"`` or ``"mcmc"`` the draws :math:`Z^{(s)}` are spread evenly over
        ``est.posterior_samples_``; with MAP every graph is drawn at ``est.embedding_`` (the
        plug-in predictive).
    num_samples : int
        Number of graphs.
    random_state : int or None
        Seeds the graph draws (the global torch state is left untouched).

    Returns
    -------
    list of sparse COO long tensors (n, n)
    """
    _check_fitted(est)
    if not (isinstance(num_samples, (int, np.integer)) and num_samples >= 1):
        raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}.")
    n = est.input_graph_.n
    if n > PREDICTIVE_MAX_N:
        raise ValueError(f"drawing latent graphs needs dense {n} x {n} kernel weights per draw; "
                         f"this is limited to n <= {PREDICTIVE_MAX_N}. Subsample the data.")
    draws = getattr(est, "posterior_samples_", None)
    if draws is None:
        draws = est.embedding_[None]
    idx = _draw_indices(len(draws), int(num_samples))
    out = []
    with fit_stream(_seeded(random_state)):
        for s in idx:
            W = est.latent_law(draws[s]).sample()
            out.append(_sparse(W))
    return out


def input_graph_draws(est, num_samples: int = 20, *,
                      random_state: int | None = 0) -> list[torch.Tensor]:
    r"""Draws of the input graph :math:`W_X \sim \mathbb P_{\mathcal P_X}(\cdot;\ \pi\odot K_X)`
    (``est.input_graph_.sample()``), as sparse COO tensors."""
    _check_fitted(est)
    if not (isinstance(num_samples, (int, np.integer)) and num_samples >= 1):
        raise ValueError(f"num_samples must be a positive integer, got {num_samples!r}.")
    out = []
    with fit_stream(_seeded(random_state)):
        for _ in range(int(num_samples)):
            out.append(_sparse(est.input_graph_.sample()))
    return out


def knn_reference_graph(est=None, k: int = 15, X=None) -> torch.Tensor:
    r"""A symmetric k-nearest-neighbour graph to compare replicated graphs with.

    With ``X``: the exact kNN graph of the data. Otherwise, the ``k`` heaviest edges of each
    row of the input affinities :math:`\mathbb E[W_X]` (``est.input_graph_.mean``), which are
    the ``k`` nearest neighbours for the entropic and UMAP affinities when no edge prior
    reorders them. Returned as a sparse COO 0/1 tensor, symmetrised.
    """
    if not (isinstance(k, (int, np.integer)) and k >= 1):
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    if X is not None:
        from ._utils import check_array
        from .input.graph import knn_edges

        Xt = check_array(X)
        n = Xt.shape[0]
        if k >= n:
            raise ValueError(f"k={k} must be smaller than n={n}.")
        rows, cols, _ = knn_edges(Xt, int(k))
    else:
        if est is None:
            raise ValueError("pass a fitted estimator or the data X.")
        _check_fitted(est)
        P = est.input_graph_.mean
        P = P.coalesce() if P.is_sparse else P.to_sparse().coalesce()
        r, c = P.indices().cpu().numpy()
        v = P.values().double().cpu().numpy()
        keep = r != c
        r, c, v = r[keep], c[keep], v[keep]
        order = np.lexsort((-v, r))
        r, c = r[order], c[order]
        first = np.searchsorted(r, r, side="left")
        rank = np.arange(len(r)) - first
        sel = rank < k
        rows, cols = torch.as_tensor(r[sel]), torch.as_tensor(c[sel])
        n = P.shape[0]
    idx = torch.stack([torch.cat([rows, cols]), torch.cat([cols, rows])])
    S = torch.sparse_coo_tensor(idx, torch.ones(idx.shape[1], dtype=torch.long), (n, n),
                                check_invariants=False).coalesce()
    return torch.sparse_coo_tensor(S.indices(), torch.ones_like(S.values()), (n, n),
                                   check_invariants=False).coalesce()


def compare_graphs(graphs, reference) -> dict[str, Any]:
    r"""Compare graphs with a reference graph, as undirected edge sets.

    For each graph :math:`G` (edges :math:`E_G`, multi-edges and directions merged) and the
    reference :math:`R`:

    * ``edge_recall`` :math:`= |E_G \cap E_R| / |E_R|` (how much of the reference is recovered),
    * ``edge_precision`` :math:`= |E_G \cap E_R| / |E_G|` (how many of G's edges are reference
      edges, e.g. true input neighbours),
    * ``n_components``: connected components of :math:`G + G^\top` (igraph),
    * ``n_edges``: :math:`|E_G|`.

    Also ``union_recall`` (recall of the union of all graphs), ``reference_n_components`` and
    ``reference_n_edges``.

    Parameters
    ----------
    graphs : graph or list of graphs
        torch dense/sparse, scipy sparse, numpy arrays or igraph graphs, all on n nodes.
    reference : graph
        Same representations.

    Returns
    -------
    dict of numpy arrays (one value per graph) and scalars
    """
    if not isinstance(graphs, (list, tuple)):
        graphs = [graphs]
    if len(graphs) == 0:
        raise ValueError("graphs is empty.")
    ref_keys, n = _undirected_keys(reference)
    if ref_keys.size == 0:
        raise ValueError("the reference graph has no edges.")
    rec, prec, ncc, ne = [], [], [], []
    union = np.zeros(0, dtype=np.int64)
    for g in graphs:
        keys, _ = _undirected_keys(g, n)
        hit = np.isin(keys, ref_keys, assume_unique=True).sum()
        rec.append(hit / ref_keys.size)
        prec.append(hit / keys.size if keys.size else np.nan)
        ncc.append(_n_components(g))
        ne.append(keys.size)
        union = np.union1d(union, keys)
    return {
        "edge_recall": np.asarray(rec), "edge_precision": np.asarray(prec),
        "n_components": np.asarray(ncc), "n_edges": np.asarray(ne),
        "union_recall": float(np.isin(ref_keys, union, assume_unique=True).mean()),
        "reference_n_components": _n_components(reference),
        "reference_n_edges": int(ref_keys.size),
    }


def posterior_predictive_check(est, num_samples: int = 20, *, k: int = 15, X=None,
                               random_state: int | None = 0) -> dict[str, Any]:
    r"""Posterior predictive check of a fitted coupling on graph statistics.

    Draws ``num_samples`` latent graphs (:func:`posterior_predictive_graphs`) and as many input
    graphs (:func:`input_graph_draws`), and compares both with the kNN graph of the data
    (:func:`knn_reference_graph`, ``k`` neighbours) by :func:`compare_graphs`.

    Returns
    -------
    dict
        ``{"latent": compare_graphs(W_Z draws), "input": compare_graphs(W_X draws),
        "k": k, "n": n}``. Under a good fit, the latent and input rows have similar
        ``edge_precision`` and ``n_components``.
    """
    ref = knn_reference_graph(est, k=k, X=X)
    latent = compare_graphs(posterior_predictive_graphs(est, num_samples,
                                                        random_state=random_state), ref)
    inp = compare_graphs(input_graph_draws(est, num_samples,
                                           random_state=None if random_state is None
                                           else random_state + 1), ref)
    return {"latent": latent, "input": inp, "k": int(k), "n": int(est.input_graph_.n)}


# --------------------------------------------------------------------------------------------
# ArviZ
# --------------------------------------------------------------------------------------------
def posterior_of(obj) -> Posterior:
    """The :class:`Posterior` of a fitted estimator, of draws (num_samples, m, q) of new points,
    or the posterior itself."""
    if isinstance(obj, Posterior):
        return obj
    if isinstance(obj, np.ndarray) or (hasattr(obj, "shape") and len(obj.shape) == 3):
        D = np.asarray(obj.detach().cpu() if hasattr(obj, "detach") else obj, dtype=np.float64)
        if D.ndim != 3:
            raise ValueError(f"draws must have shape (num_samples, m, q), got {D.shape}.")
        # draws of new points given the fitted embedding (sample_transform): no alignment
        return Posterior("transform", D[None], D.mean(0))
    post = getattr(obj, "posterior_", None)
    if post is None:
        raise ValueError(f"{type(obj).__name__} has no posterior: fit it with inference='svi', "
                         "'laplace', 'hmc' or 'mcmc' (MAP gives a single embedding, not draws).")
    return post


def to_arviz(est, *, points=None, include_raw: bool = False):
    r"""Export posterior draws of the embedding and of the model's other latent sites to ArviZ.

    The draws of Z are Procrustes-aligned (:func:`probdr.infer.posterior.procrustes_align`, to
    the MAP) before export: raw coordinates are not identified (rotations, reflections), so
    R-hat and ESS of raw draws are meaningless. The other latent sites
    (:attr:`~probdr.infer.posterior.Posterior.sites`) are exported as drawn.

    Parameters
    ----------
    est : fitted estimator with ``posterior_`` (``inference="svi"`` or ``"mcmc"``), or a
        :class:`~probdr.infer.posterior.Posterior`
    points : array-like of int, optional
        Export only these points (``az.summary`` on all :math:`n q` coordinates of a large
        embedding is slow).
    include_raw : bool
        Also export the unaligned draws as variable ``Z_raw``.

    Returns
    -------
    arviz.InferenceData (ArviZ 0.x) or xarray.DataTree (ArviZ >= 1)
        Group ``posterior`` with variable ``Z``, dims ``(chain, draw, point, latent_dim)``, and
        one variable per other latent site, dims ``(chain, draw, <site>_dim_0, ...)`` (none
        beyond ``(chain, draw)`` for a scalar site); group ``sample_stats`` with ``diverging``
        for MCMC.
    """
    import arviz as az

    post = posterior_of(est)
    C, S, n, q = post.chains.shape
    if points is None:
        pts = np.arange(n)
    else:
        pts = np.asarray(points)
        if pts.ndim != 1 or not np.issubdtype(pts.dtype, np.integer) or pts.size == 0 or \
                pts.min() < 0 or pts.max() >= n:
            raise ValueError(f"points must be a non-empty 1-D array of indices in [0, {n}).")
    posterior = {"Z": post.chains[:, :, pts, :]}
    dims = {"Z": ["point", "latent_dim"]}
    if include_raw and post.raw_chains is not None:
        posterior["Z_raw"] = post.raw_chains[:, :, pts, :]
        dims["Z_raw"] = ["point", "latent_dim"]
    coords = {"point": pts, "latent_dim": np.arange(q)}
    for name, draws in post.sites.items():
        if name in posterior:
            raise ValueError(f"the latent site {name!r} clashes with an exported variable.")
        posterior[name] = draws
        dims[name] = [f"{name}_dim_{i}" for i in range(draws.ndim - 2)]
        coords.update({d: np.arange(k) for d, k in zip(dims[name], draws.shape[2:], strict=True)})
    sample_stats = None
    if post.method in ("mcmc", "hmc") and "divergent_draws" in post.diagnostics:
        div = np.zeros((C, S), dtype=bool)
        for c, bad in enumerate(post.diagnostics["divergent_draws"]):
            bad = np.asarray(bad, dtype=int)
            div[c, bad[(bad >= 0) & (bad < S)]] = True
        sample_stats = {"diverging": div}
    attrs = {"inference_library": "pyro", "method": post.method,
             "alignment": "orthogonal Procrustes to the MAP embedding"}
    if "posterior" in inspect.signature(az.from_dict).parameters:  # ArviZ 0.x
        return az.from_dict(posterior=posterior, sample_stats=sample_stats, coords=coords,
                            dims=dims, attrs=attrs)
    groups = {"posterior": posterior}  # ArviZ >= 1: {group: {var: array}}
    if sample_stats is not None:
        groups["sample_stats"] = sample_stats
    return az.from_dict(groups, coords=coords, dims=dims, attrs=attrs)
