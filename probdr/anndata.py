"""An AnnData entry point: embed the cells of an :class:`anndata.AnnData` with a probdr estimator,
scanpy style.

:func:`embed` reads a representation (``adata.obsm["X_pca"]`` by default, or ``adata.X``), or
reuses a neighbour graph computed by scanpy (``neighbors_key``), fits one of probdr's estimators
and writes the embedding to ``adata.obsm``, its posterior spread (when the estimator was fitted
with ``inference="svi"``, ``"laplace"`` or ``"mcmc"``) beside it, and the settings to ``adata.uns``. Everything
written is plain arrays, strings and numbers, so the object still saves with
``adata.write_h5ad``.

``anndata`` is an optional dependency (``pip install probdr[anndata]``), imported when
:func:`embed` is called: ``import probdr`` does not import it.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = ["embed", "METHODS"]

#: the method names of :func:`embed` and the estimators they stand for (classes of
#: :mod:`probdr.estimators`)
METHODS = {
    "umap": "UMAP",
    "tsne": "TSNE",
    "sne": "SNE",
    "largevis": "LargeVis",
    "tsnekhorn": "TSNEkhorn",
    "snekhorn": "SNEkhorn",
}

#: scanpy embeds ``adata.X`` directly, when there is no ``X_pca``, up to this many variables
MAX_VARS_WITHOUT_PCA = 50
#: the largest perplexity chosen from a reused neighbour graph (t-SNE's usual 30)
MAX_GRAPH_PERPLEXITY = 30.0


def _warn_if_replacing(adata, key: str) -> None:
    """Warn before replacing an embedding that probdr did not write (e.g. scanpy's X_umap)."""
    record = adata.uns.get(key)
    if key in adata.obsm and not (isinstance(record, dict) and "probdr_version" in record):
        warnings.warn(f"replacing adata.obsm[{key!r}], which probdr did not write (scanpy's own "
                      f"embedding, for example); pass key_added='X_probdr_{key.removeprefix('X_')}'"
                      " to keep both.", UserWarning, stacklevel=3)


def _require_anndata():
    try:
        import anndata
    except ImportError as exc:  # pragma: no cover - the tests skip without anndata
        raise ImportError("probdr.anndata needs the anndata package: "
                          "pip install probdr[anndata]") from exc
    return anndata


def embed(adata, method="umap", *, use_rep: str = "X_pca", neighbors_key: str | None = None,
          key_added: str | None = None, copy: bool = False, random_state=0,
          return_estimator: bool = False, **params):
    r"""Embed the observations of ``adata`` with a probdr estimator and store the result, as
    ``scanpy.tl.umap`` does.

    Parameters
    ----------
    adata : anndata.AnnData
    method : str, estimator class or estimator instance
        ``"umap"``, ``"tsne"``, ``"sne"``, ``"largevis"``, ``"tsnekhorn"`` or ``"snekhorn"``
        (:class:`probdr.UMAP`, :class:`probdr.TSNE`, ... see :data:`METHODS`); or a probdr
        estimator class (instantiated with ``params``) or instance (a clone of it is fitted,
        with ``params`` set on the clone; the instance itself is left unfitted).
    use_rep : str
        The representation to embed: a key of ``adata.obsm``, or ``"X"`` for ``adata.X`` (dense
        or scipy sparse; a sparse matrix is passed as it is to the estimators that take one,
        the graph-coupling family, and made dense for the others). When ``"X_pca"`` is
        missing, ``adata.X`` is used if it has at most 50 variables (scanpy's rule); otherwise,
        as for any missing key, a ``KeyError`` lists the keys of ``adata.obsm``. Not read when
        ``neighbors_key`` is given.
    neighbors_key : str, optional
        Reuse the neighbour graph stored by ``scanpy.pp.neighbors``: ``adata.uns[neighbors_key]``
        names the distance matrix (its ``"distances_key"``; by default ``"distances"`` for the key
        ``"neighbors"`` and ``"<key>_distances"`` otherwise) in ``adata.obsp``, whose rows store
        each observation's nearest-neighbour distances. The estimator is then fitted with
        ``metric="precomputed"`` on that matrix. Each row of scanpy's matrix stores
        ``k = n_neighbors - 1`` neighbours (the point itself is not stored; ``k`` is the fewest
        any row stores); when the user does
        not set the neighbour count, it is taken from the graph: UMAP's ``n_neighbors`` is
        ``k + 1`` (UMAP counts the point itself), and the perplexity methods use
        ``perplexity = min(30, k / 3)`` (so that their ``3 * perplexity`` neighbours are the
        ``k`` stored), noted in ``uns``. A perplexity (or ``n_neighbors``) given by the user is
        used as given, and the estimator says so when the graph holds too few neighbours.
        ``None`` (default): the estimator computes the neighbours of ``use_rep`` itself.
    key_added : str, optional
        Where to write: ``adata.obsm[key_added]``, ``adata.uns[key_added]``. Default
        ``"X_<method>"``, scanpy's own key (``"X_umap"``, ``"X_tsne"``; the lower-cased class
        name for a class or instance), so that ``scanpy.pl.umap`` and ``scanpy.pl.tsne`` plot it
        with scanpy's axis names. Replacing an embedding another tool wrote there (for example
        ``scanpy.tl.umap``'s) warns; pass ``key_added="X_probdr_umap"`` to keep both.
    copy : bool
        Return a modified copy of ``adata``; by default ``adata`` is modified in place and
        ``None`` is returned.
    random_state : int, numpy generator or None
        The estimator's ``random_state`` (default 0, as scanpy).
    return_estimator : bool
        Also return the fitted estimator (for its ``input_graph_``, ``loss_history_``,
        ``transform``, ``save``, ...): ``estimator`` when ``copy=False``, ``(adata_copy,
        estimator)`` when ``copy=True``.
    **params
        Parameters of the estimator (``n_epochs``, ``perplexity``, ``inference``, ...).

    Returns
    -------
    adata : anndata.AnnData or None
        The modified copy with ``copy=True``; ``None`` otherwise (``adata`` is modified in
        place). With ``return_estimator=True``: the fitted estimator, or ``(copy, estimator)``.

    Notes
    -----
    What is written, under ``key = key_added or "X_<method>"``:

    ``adata.obsm[key]``
        The embedding, ``(n_obs, n_components)``, in the estimator's ``dtype`` (float32 by
        default).
    ``adata.obsm[key + "_std"]``, ``adata.obs[key + "_reliability"]``, ``adata.obs[key + "_stability"]``
        With ``inference="svi"``, ``"laplace"`` or ``"mcmc"``: the posterior standard deviation
        of every coordinate over ``posterior_samples_`` (the embedding stays the MAP), each
        cell's reliability in [0, 1] (``reliability_``: the share of its 15 nearest neighbours
        that the posterior keeps, a relative score) and its stability (``stability_``: the
        posterior probability that it keeps at least 5 of them; below 0.5 the cell more likely
        than not loses its neighbourhood; colour a UMAP by it with
        ``sc.pl.umap(adata, color="X_umap_stability")``). A MAP fit under
        the same key removes earlier ones.
    ``adata.uns[key]``
        ``method``; ``params``, the estimator's ``get_params()`` reduced to what HDF5 stores
        (strings, numbers, booleans; ``None``, arrays, callables and other objects are left
        out); ``use_rep``, the representation actually read (absent when a graph was reused);
        ``neighbors_key`` and ``graph_neighbors`` (the graph's ``k``), only when a graph was
        reused; ``note``, when probdr chose the neighbour count or perplexity from the graph;
        ``probdr_version``.

    Every value is a plain array, string or number: ``adata.write_h5ad`` saves it and
    ``anndata.read_h5ad`` reads it back. The fitted estimator itself is not stored (save it
    with its own ``save``).

    For an estimator instance, the parameters that differ from its class's defaults count as
    set by the user (a reused graph does not change them); ``random_state`` is always set from
    the argument of this function.

    Examples
    --------
    >>> import probdr.anndata
    >>> probdr.anndata.embed(adata, "umap")                      # doctest: +SKIP
    >>> adata.obsm["X_umap"].shape                               # doctest: +SKIP
    (3000, 2)
    >>> import scanpy as sc; sc.pl.umap(adata, color="louvain")  # doctest: +SKIP
    >>> # reuse scanpy's graph (scanpy.pp.neighbors(adata)):
    >>> probdr.anndata.embed(adata, "tsne", neighbors_key="neighbors")  # doctest: +SKIP
    """
    anndata = _require_anndata()
    if not isinstance(adata, anndata.AnnData):
        raise TypeError(f"adata must be an anndata.AnnData, got {type(adata).__name__}.")
    est, name = _estimator(method)
    explicit = set(params) | _non_default_params(est, method)
    if neighbors_key is not None and "metric" in explicit:
        metric = params.get("metric", getattr(est, "metric", None))
        if not (isinstance(metric, str) and metric == "precomputed"):
            raise ValueError(f"metric={metric!r} conflicts with neighbors_key: a reused graph is "
                             "fitted with metric='precomputed'.")
    available = est.get_params(deep=False)
    bad = sorted(set(params) - set(available))
    if bad:
        raise ValueError(f"{type(est).__name__} has no parameter(s) {bad}; its parameters are "
                         f"{sorted(available)}.")
    if "random_state" in available:
        params = {"random_state": random_state, **params}
    key = key_added if key_added is not None else f"X_{name}"
    if not (isinstance(key, str) and key):
        raise ValueError(f"key_added must be a non-empty string, got {key_added!r}.")
    _warn_if_replacing(adata, key)

    info: dict[str, Any] = {"method": name}
    if neighbors_key is not None:
        data, k = _neighbor_distances(adata, neighbors_key, est)
        params.update(_graph_neighbor_params(est, k, explicit, info))
        params["metric"] = "precomputed"
        info["neighbors_key"] = neighbors_key
        info["graph_neighbors"] = int(k)
    else:
        data, info["use_rep"] = _representation(adata, use_rep, est)
    est.set_params(**params)

    if copy:
        adata = adata.copy()
    Z = np.asarray(est.fit_transform(data))
    if Z.ndim != 2 or Z.shape[0] != adata.n_obs:  # pragma: no cover - an estimator's contract
        raise RuntimeError(f"{type(est).__name__} returned an embedding of shape {Z.shape} for "
                           f"{adata.n_obs} observations.")
    out_dtype = np.float32 if str(getattr(est, "dtype", "float64")) == "float32" else np.float64
    adata.obsm[key] = Z.astype(out_dtype)
    post = getattr(est, "posterior_", None) if getattr(est, "inference", "map") != "map" else None
    if post is not None:  # each coordinate's sd over the draws, without holding them all
        adata.obsm[key + "_std"] = post.point_coordinate_sd().astype(out_dtype)
        adata.obs[key + "_reliability"] = np.asarray(est.reliability_, dtype=np.float64)
        adata.obs[key + "_stability"] = np.asarray(est.stability_, dtype=np.float64)
    else:  # a stale spread of an earlier posterior fit
        adata.obsm.pop(key + "_std", None)
        for score in ("_reliability", "_stability"):
            if (key + score) in adata.obs:
                del adata.obs[key + score]
    from . import __version__

    adata.uns[key] = {**info, "params": _hdf5_params(est.get_params(deep=False)),
                      "probdr_version": __version__}
    if return_estimator:
        return (adata, est) if copy else est
    return adata if copy else None


# -- the estimator -------------------------------------------------------------------------------
def _estimator(method):
    """A fresh (unfitted) estimator and the method's name for the default key."""
    from sklearn.base import BaseEstimator, clone

    from . import estimators

    if isinstance(method, str):
        cls_name = METHODS.get(method.lower())
        if cls_name is None:
            raise ValueError(f"unknown method {method!r}: use one of {sorted(METHODS)}, or pass "
                             "a probdr estimator class or instance.")
        return getattr(estimators, cls_name)(), method.lower()
    if isinstance(method, type) and issubclass(method, BaseEstimator):
        return method(), method.__name__.lower()
    if isinstance(method, BaseEstimator):
        return clone(method), type(method).__name__.lower()
    raise TypeError("method must be a method name, an estimator class or an estimator instance; "
                    f"got {method!r}.")


def _non_default_params(est, method) -> set[str]:
    """For an estimator instance, the parameters it was given away from its class's defaults
    (they count as set by the user); nothing for a name or a class."""
    from sklearn.base import BaseEstimator

    if not isinstance(method, BaseEstimator):
        return set()
    try:
        defaults = type(est)().get_params(deep=False)
    except TypeError:  # pragma: no cover - a class without defaults for every parameter
        return set(est.get_params(deep=False))
    out = set()
    for name, value in est.get_params(deep=False).items():
        default = defaults.get(name)
        try:
            same = bool(value == default) if type(value) is type(default) else False
        except (TypeError, ValueError):  # arrays and objects without a plain ==
            same = value is default
        if not same:
            out.add(name)
    return out


# -- the input -----------------------------------------------------------------------------------
def _representation(adata, use_rep: str, est):
    """``(matrix, name)``: the representation to embed, ``(n_obs, features)``; a scipy sparse
    matrix stays sparse for an estimator that takes one (``_accepts_sparse``), else is made
    dense."""
    if not isinstance(use_rep, str):
        raise TypeError(f"use_rep must be a string (a key of adata.obsm, or 'X'), got "
                        f"{use_rep!r}.")
    if use_rep != "X" and use_rep not in adata.obsm:
        if use_rep == "X_pca" and adata.n_vars <= MAX_VARS_WITHOUT_PCA:
            use_rep = "X"  # scanpy's rule: few variables are embedded directly
        else:
            keys = sorted(adata.obsm.keys())
            raise KeyError(
                f"adata.obsm has no {use_rep!r} (its keys: {keys}). Compute it (e.g. "
                "scanpy.pp.pca), pass use_rep= one of its keys, or use_rep='X' to embed adata.X "
                f"({adata.n_vars} variables).")
    M = adata.X if use_rep == "X" else adata.obsm[use_rep]
    if M is None:
        raise ValueError("adata.X is None: pass use_rep= a key of adata.obsm.")
    if sp.issparse(M):
        M = sp.csr_matrix(M) if getattr(est, "_accepts_sparse", False) else M.toarray()
    elif hasattr(M, "to_numpy"):  # a DataFrame in obsm
        M = M.to_numpy()
    else:
        M = np.asarray(M)
    if M.ndim != 2 or M.shape[0] != adata.n_obs:
        raise ValueError(f"the representation {use_rep!r} has shape {M.shape}; expected "
                         f"({adata.n_obs}, n_features).")
    return M, use_rep


def _default_distances(neighbors_key: str) -> str:
    """scanpy's ``obsp`` key of a graph's distances when its ``uns`` entry names none."""
    return "distances" if neighbors_key == "neighbors" else f"{neighbors_key}_distances"


def _is_graph_entry(adata, key: str, entry) -> bool:
    """``adata.uns[key]`` describes a scanpy neighbour graph: a mapping that names its
    distances, or holds scanpy's ``params`` (older files), or whose default distances exist."""
    if not hasattr(entry, "get"):
        return False
    return ("distances_key" in entry or "params" in entry
            or _default_distances(key) in adata.obsp)


def _neighbor_distances(adata, neighbors_key: str, est):
    """The distance matrix of a scanpy neighbour graph (CSR, or dense square) and the number of
    neighbours ``k`` every row stores (``n_obs - 1`` for a dense matrix)."""
    if not isinstance(neighbors_key, str):
        raise TypeError(f"neighbors_key must be a string, got {neighbors_key!r}.")
    entry = adata.uns.get(neighbors_key)
    if entry is None or not hasattr(entry, "get"):
        found = sorted(k for k, v in adata.uns.items() if _is_graph_entry(adata, k, v))
        raise KeyError(f"adata.uns has no neighbour graph {neighbors_key!r} (graphs found: "
                       f"{found}). Compute one (scanpy.pp.neighbors), or leave "
                       "neighbors_key=None to compute the neighbours of use_rep.")
    dkey = entry.get("distances_key", _default_distances(neighbors_key))
    if dkey not in adata.obsp:
        raise KeyError(f"adata.uns[{neighbors_key!r}] names the distances "
                       f"adata.obsp[{dkey!r}], which does not exist (obsp keys: "
                       f"{sorted(adata.obsp.keys())}).")
    if "metric" not in est.get_params(deep=False):
        raise ValueError(f"{type(est).__name__} has no 'metric' parameter, so it cannot be "
                         "fitted on a precomputed neighbour graph (neighbors_key); leave "
                         "neighbors_key=None to compute the neighbours of use_rep.")
    D = adata.obsp[dkey]
    n = adata.n_obs
    if D.shape != (n, n):
        raise ValueError(f"adata.obsp[{dkey!r}] has shape {D.shape}; expected ({n}, {n}).")
    if not sp.issparse(D):
        return np.asarray(D), n - 1
    D = sp.csr_matrix(D)
    per_row = np.diff(D.indptr)
    k = int(per_row.min()) if n else 0
    if k < 1:
        raise ValueError(f"adata.obsp[{dkey!r}] has rows that store no neighbour (row "
                         f"{int(np.argmin(per_row))}).")
    declared = (entry.get("params") or {}).get("n_neighbors")
    if isinstance(declared, numbers.Integral) and k < int(declared) - 1:
        warnings.warn(
            f"{int((per_row < int(declared) - 1).sum())} rows of adata.obsp[{dkey!r}] store "
            f"fewer than the n_neighbors - 1 = {int(declared) - 1} neighbours of the graph's "
            f"parameters (the fewest: {k}); the neighbour count is taken from k={k}.",
            UserWarning, stacklevel=3)
    return D, k


def _graph_neighbor_params(est, k: int, explicit: set[str], info: dict) -> dict:
    """The neighbour count taken from a graph of ``k`` stored neighbours per row, for the
    parameters the user did not set (see :func:`embed`)."""
    params = est.get_params(deep=False)
    perplexity_method = "perplexity" in params and _affinity(est) not in ("umap", "binary")
    out: dict[str, Any] = {}
    if perplexity_method:
        if explicit & {"perplexity", "n_neighbors"}:
            return out
        perplexity = _perplexity_for(k)
        out["perplexity"] = perplexity
        if "n_neighbors" in params:
            out["n_neighbors"] = int(k)
        info["note"] = (f"perplexity={perplexity:.6g} (min(30, k/3)) chosen from the graph's "
                        f"k={k} stored neighbours per observation")
        if perplexity < 30:
            warnings.warn(f"probdr.anndata.embed: {info['note']}, below t-SNE's usual 30. Pass "
                          "perplexity=... (at most k/3), or rebuild the graph with more "
                          "neighbours, e.g. sc.pp.neighbors(adata, n_neighbors=90).",
                          UserWarning, stacklevel=4)
    elif "n_neighbors" in params and "n_neighbors" not in explicit:
        out["n_neighbors"] = int(k) + 1
        info["note"] = (f"n_neighbors={k + 1} (the graph's k={k} stored neighbours per "
                        "observation, plus the point itself)")
    return out


def _affinity(est) -> str:
    """The input affinity of a graph-coupling estimator (``"entropic"``, ``"umap"``, ...)."""
    resolve = getattr(est, "_affinity", None)
    return str(resolve() if callable(resolve) else getattr(est, "affinity", "entropic"))


def _perplexity_for(k: int) -> float:
    """``min(30, k / 3)``, nudged down so that ``ceil(3 * perplexity) <= k`` in floating point
    (the perplexity methods take ``ceil(3 * perplexity)`` neighbours)."""
    p = min(MAX_GRAPH_PERPLEXITY, k / 3.0)
    while math.ceil(3.0 * p) > k:
        p = math.nextafter(p, 0.0)
    return p


# -- the output ----------------------------------------------------------------------------------
def _hdf5_params(params: dict) -> dict:
    """``get_params()`` reduced to what HDF5 (and ``write_h5ad``) stores: strings, booleans and
    finite or infinite numbers, as Python scalars; ``None``, arrays, callables, dicts and other
    objects are left out."""
    out = {}
    for name, value in params.items():
        if isinstance(value, (bool, np.bool_)):
            out[name] = bool(value)
        elif isinstance(value, numbers.Integral):
            out[name] = int(value)
        elif isinstance(value, numbers.Real):
            out[name] = float(value)
        elif isinstance(value, str):
            out[name] = value
    return out
