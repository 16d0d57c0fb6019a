r"""Custom edge priors :math:`\pi` for the graph priors of Definition 2.

The graph priors B, D and E of Van Assel et al. (2022, Definition 2) carry an **edge prior**
:math:`\pi \in \mathbb R_+^{n \times n}`:

.. math::
    \mathbb P^\varepsilon_{\mathcal P,k}(W; \pi, \alpha) \propto
    \mathcal C_k^\varepsilon(W)^\alpha\, \Omega_{\mathcal P}(W) \prod_{i \ne j} \pi_{ij}^{W_{ij}},

and Proposition 1 says that, in the limit :math:`\varepsilon \to 0` that gives SNE, t-SNE,
LargeVis and UMAP, the posterior of the graph given the points is the same law with weights
:math:`\pi \odot K`:

.. math::
    W \mid X \;\sim\; \mathbb P_{\mathcal P}(\cdot;\ \pi \odot K_X),
    \qquad \log w_{ij} = \log \pi_{ij} + \log k(\|x_i - x_j\|^2).

So :math:`\pi_{ij} > 1` makes the edge :math:`i \to j` more likely a priori, :math:`\pi_{ij} < 1`
less likely, :math:`\pi_{ij} = 1` is neutral and :math:`\pi_{ij} = 0` forbids it. The posterior
means (the affinities the embedding is fitted to) are, with :math:`\kappa = \pi \odot K`,
:math:`\kappa_{ij}/(1+\kappa_{ij})` (B), :math:`\kappa_{ij}/\kappa_{i+}` (D) and
:math:`n\kappa_{ij}/\kappa_{++}` (E).

Every estimator of the graph-coupling family takes an edge prior on either graph:

* ``edge_prior=`` on the **input** graph :math:`W_X`: it changes the affinities
  :math:`\mathbb E[W_X \mid X]`, i.e. the **attraction** of the embedding (this is where label
  information belongs);
* ``latent_edge_prior=`` on the **latent** graph :math:`W_Z`: it enters only the normaliser of
  :math:`\mathbb P_{\mathcal P_Z}(\cdot; \pi \odot K_Z)`, i.e. the **repulsion** (Van Assel et al.
  2022, §3.2: the prior of :math:`W_Z` only affects repulsion). A latent prior that *expects* an edge explains it by
  itself, so the kernel has to do less: pairs with :math:`\pi_{ij} > 1` are **pushed apart** and
  pairs with :math:`\pi_{ij} < 1` are allowed closer. Use it with that sign in mind.

The objects here are *edge-prior objects*: anything with

``log_at(rows, cols) -> Tensor``
    :math:`\log \pi` at the given ordered pairs (1-D long tensors), in ``O(len(rows))``;
``dense(n) -> Tensor``
    the full ``(n, n)`` matrix of :math:`\log \pi` (diagonal arbitrary: it is always masked);
``pairs() -> (rows, cols) or None`` (optional)
    the pairs an observed network singles out (see below); ``None``, or no such method, for a
    prior defined alike on every pair.

:mod:`probdr.laws` calls ``log_at`` on sparse (kNN) graphs and ``dense`` only when the law is
dense anyway (the exact latent law), so an edge prior never costs :math:`n^2` memory unless a
dense law needs it. Priors multiply (their logs add): ``from_labels(y) * from_graph(g)``.

**An observed network joins the input graph.** The sparse input laws hold each point's nearest
neighbours (:math:`K_X` is 0 off the lists), and a prior can only act where :math:`K_X > 0`.
A prior from an observed network -- :func:`from_graph`, a sparse torch tensor of :math:`\pi`
(its stored entries), or a product with one -- names its pairs (:meth:`EdgePrior.pairs`,
:func:`network_pairs`), and the input side adds those that the neighbour lists miss to the edge
list at :math:`\pi_{ij} K_{X,ij}`: the input kernel at the pair, computed from the data with
the per-point calibration made on the neighbour lists (entropic bandwidths, UMAP's
:math:`\rho_i, \sigma_i`) and applied to the union. Every edge of the network is then an edge
of the input graph, under the D, E, B and B~ priors alike
(:func:`probdr.input.graph.build_input_graph`). Priors defined on every pair
(:func:`from_labels`, a number, a dense array) re-weight the neighbour lists only; so does any
prior on a precomputed affinity, which is 0 off its entries.

**A constant prior.** A number :math:`\pi` multiplies every weight: the D and E posteriors
normalise it away (their means do not change), the B posterior's mean becomes
:math:`\sigma(\log\pi + \log K)`. A prior that differs between pairs is what moves D and E.

**Writing a new prior class.** Subclass :class:`EdgePrior`, set ``self.n`` and implement ``log_at`` (``dense`` has a blocked
default built on ``log_at``). Return :math:`\log\pi` in float64; ``-inf`` forbids an edge; never
return NaN. For example, a prior favouring pairs close in time :math:`t`:

.. code-block:: python

    class TemporalPrior(EdgePrior):
        def __init__(self, t, scale):
            self.t = torch.as_tensor(t, dtype=torch.float64)
            self.n, self.scale = len(self.t), float(scale)

        def log_at(self, rows, cols):
            self.check_index(rows, cols)
            return -((self.t[rows] - self.t[cols]).abs() / self.scale)

    est = probdr.TSNE(edge_prior=TemporalPrior(t, scale=5.0)).fit(X)
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["EdgePrior", "LabelPrior", "GraphEdgePrior", "ProductPrior", "from_labels",
           "from_graph", "network_pairs", "check_edge_prior"]


class EdgePrior:
    r"""Base class of edge-prior objects: :math:`\log \pi_{ij}` evaluated lazily.

    Subclasses set ``n`` (number of nodes) and implement :meth:`log_at`.
    """

    n: int

    def log_at(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        r""":math:`\log \pi_{ij}` at the pairs ``(rows[k], cols[k])``, float64, shape ``rows.shape``."""
        raise NotImplementedError

    def pairs(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        r"""The ordered pairs ``(rows, cols)`` this prior singles out -- an observed network's
        edges -- which the sparse input laws add to their neighbour lists (see the module
        docstring); ``None`` for a prior defined alike on every pair (labels, a function of
        the points), which acts on the neighbour lists only. This default returns ``None``."""
        return None

    def dense(self, n: int | None = None) -> torch.Tensor:
        r"""The ``(n, n)`` matrix of :math:`\log\pi` (float64). ``n`` must equal ``self.n``."""
        n = self.n if n is None else int(n)
        if n != self.n:
            raise ValueError(f"{type(self).__name__} is defined on {self.n} nodes but the graph has "
                             f"{n}: build the prior from the same samples as the data.")
        out = torch.empty((n, n), dtype=torch.float64)
        bs = max(1, min(n, 2**22 // max(n, 1)))
        cols = torch.arange(n)
        for s in range(0, n, bs):
            e = min(n, s + bs)
            r = torch.arange(s, e).repeat_interleave(n)
            out[s:e] = self.log_at(r, cols.repeat(e - s)).view(e - s, n)
        return out

    def check_index(self, rows: torch.Tensor, cols: torch.Tensor) -> None:
        """Raise a ``ValueError`` naming the prior when a node index is outside ``[0, n)``."""
        if rows.numel() and (int(rows.max()) >= self.n or int(cols.max()) >= self.n
                             or int(rows.min()) < 0 or int(cols.min()) < 0):
            raise ValueError(
                f"{type(self).__name__} is defined on {self.n} nodes but was asked about node "
                f"{max(int(rows.max()), int(cols.max()))}: build the prior from the same samples "
                "as the data.")

    def __mul__(self, other: EdgePrior) -> ProductPrior:
        if not isinstance(other, EdgePrior):
            return NotImplemented
        return ProductPrior(self, other)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n})"


class LabelPrior(EdgePrior):
    r"""Edge prior from partial labels: :math:`\log\pi_{ij} = +s` if :math:`y_i = y_j`,
    :math:`-s` if :math:`y_i \ne y_j` (both labels known), :math:`0` if either is unknown.

    Equivalently :math:`\pi_{ij} = e^{s}` (same label), :math:`e^{-s}` (different labels),
    :math:`1` (unknown). See :func:`from_labels`.
    """

    def __init__(self, y, strength: float = 1.0, unknown: int = -1):
        y = np.asarray(y)
        if y.ndim != 1 or y.size == 0:
            raise ValueError(f"labels y must be a non-empty 1-D array, got shape {y.shape}.")
        if not np.issubdtype(y.dtype, np.integer):
            if np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and \
                    np.all(y == np.round(y)):
                y = y.astype(np.int64)
            else:
                raise ValueError("labels y must be integers (use -1 for unknown); encode string "
                                 "labels first, e.g. with np.unique(y, return_inverse=True).")
        if not (isinstance(strength, (int, float, np.floating, np.integer))
                and math.isfinite(strength) and strength >= 0):
            raise ValueError(f"strength must be a finite number >= 0, got {strength!r}.")
        known = y != unknown
        if not known.any():
            raise ValueError("every label is unknown: the prior would be neutral everywhere.")
        self.y = torch.as_tensor(y, dtype=torch.long)
        self.known = torch.as_tensor(known)
        self.n = int(y.size)
        self.strength = float(strength)
        self.unknown = unknown

    def log_at(self, rows, cols):
        self.check_index(rows, cols)
        yr, yc = self.y[rows], self.y[cols]
        both = self.known[rows] & self.known[cols]
        sign = torch.where(yr == yc, 1.0, -1.0).to(torch.float64)
        return torch.where(both, sign * self.strength, torch.zeros((), dtype=torch.float64))

    def dense(self, n=None):
        n = self.n if n is None else int(n)
        if n != self.n:
            return super().dense(n)  # raises with a clear message
        same = (self.y[:, None] == self.y[None, :]).to(torch.float64) * 2.0 - 1.0
        both = (self.known[:, None] & self.known[None, :]).to(torch.float64)
        return same * both * self.strength

    def __repr__(self):
        return (f"LabelPrior(n={self.n}, strength={self.strength}, "
                f"known={int(self.known.sum())})")


class GraphEdgePrior(EdgePrior):
    r"""Edge prior from an observed graph: :math:`\pi_{ij} = w` on its edges, 1 elsewhere.

    Optionally :math:`\pi_{ij} = w_\text{off}` off the graph (``off_weight``), e.g. ``0`` to
    restrict the law to the observed network. See :func:`from_graph`.
    """

    def __init__(self, rows, cols, n: int, weight: float = 2.0, off_weight: float = 1.0,
                 symmetric: bool = True):
        for name, v in (("weight", weight), ("off_weight", off_weight)):
            if not (isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v)
                    and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}.")
        rows = torch.as_tensor(np.asarray(rows), dtype=torch.long).flatten()
        cols = torch.as_tensor(np.asarray(cols), dtype=torch.long).flatten()
        if rows.numel() and (int(rows.max()) >= n or int(cols.max()) >= n or
                             int(rows.min()) < 0 or int(cols.min()) < 0):
            raise ValueError(f"edge indices must lie in [0, {n}).")
        if symmetric:
            rows, cols = torch.cat([rows, cols]), torch.cat([cols, rows])
        keep = rows != cols
        keys = torch.unique(rows[keep] * n + cols[keep])  # sorted
        self.keys = keys
        self.n = int(n)
        self.weight = float(weight)
        self.off_weight = float(off_weight)
        self.symmetric = symmetric
        self._log_on = math.log(weight) if weight > 0 else float("-inf")
        self._log_off = math.log(off_weight) if off_weight > 0 else float("-inf")

    @property
    def n_edges(self) -> int:
        """Number of ordered pairs with :math:`\\pi = w` (each undirected edge counts twice)."""
        return int(self.keys.numel())

    def contains(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Boolean mask: is ``(rows[k], cols[k])`` an edge of the graph."""
        q = rows.to(torch.long) * self.n + cols.to(torch.long)
        if self.keys.numel() == 0:
            return torch.zeros(q.shape, dtype=torch.bool)
        pos = torch.searchsorted(self.keys, q).clamp_max(self.keys.numel() - 1)
        return self.keys[pos] == q

    def pairs(self):
        """The graph's edges as ordered pairs, sorted (none when ``weight`` is 0: the prior then
        forbids them)."""
        keys = self.keys if self.weight > 0 else self.keys[:0]
        return keys // self.n, keys % self.n

    def log_at(self, rows, cols):
        self.check_index(rows, cols)
        hit = self.contains(rows, cols)
        return torch.where(hit, torch.tensor(self._log_on, dtype=torch.float64),
                           torch.tensor(self._log_off, dtype=torch.float64))

    def dense(self, n=None):
        n = self.n if n is None else int(n)
        if n != self.n:
            return super().dense(n)
        out = torch.full((n * n,), self._log_off, dtype=torch.float64)
        out[self.keys] = self._log_on
        return out.view(n, n)

    def __repr__(self):
        return (f"GraphEdgePrior(n={self.n}, edges={self.n_edges}, weight={self.weight}, "
                f"off_weight={self.off_weight})")


class ProductPrior(EdgePrior):
    r"""Product of edge priors: :math:`\pi = \prod_m \pi^{(m)}` (log priors add)."""

    def __init__(self, *priors: EdgePrior):
        flat = []
        for p in priors:
            flat.extend(p.priors if isinstance(p, ProductPrior) else [p])
        ns = {p.n for p in flat}
        if len(ns) != 1:
            raise ValueError(f"edge priors on different numbers of nodes cannot be combined: {ns}.")
        self.priors = flat
        self.n = ns.pop()

    def log_at(self, rows, cols):
        return sum(p.log_at(rows, cols) for p in self.priors)

    def dense(self, n=None):
        return sum(p.dense(n) for p in self.priors)

    def pairs(self):
        r"""The union of the factors' pairs, less those that another factor forbids
        (:math:`\pi = 0`); ``None`` if no factor singles out pairs."""
        parts = [p for p in (network_pairs(q) for q in self.priors) if p is not None]
        if not parts:
            return None
        keys = torch.unique(torch.cat([r * self.n + c for r, c in parts]))
        rows, cols = keys // self.n, keys % self.n
        keep = ~torch.isneginf(self.log_at(rows, cols))
        return rows[keep], cols[keep]

    def __repr__(self):
        return " * ".join(repr(p) for p in self.priors)


def from_labels(y, strength: float = 1.0, *, unknown: int = -1) -> LabelPrior:
    r"""Edge prior from (partial) labels.

    .. math::
        \log \pi_{ij} = \begin{cases} +s & y_i = y_j \\ -s & y_i \ne y_j \\
        0 & y_i \text{ or } y_j \text{ unknown} \end{cases}

    With the D input prior (SNE, t-SNE, LargeVis) the affinities become
    :math:`P_{ij} \propto \pi_{ij} K_{X,ij}` on each row: among a labelled point's neighbours,
    same-label ones gain weight :math:`e^{s}` and other-label ones lose :math:`e^{-s}`, relative
    to neighbours with unknown labels. The neighbour lists themselves (which pairs have an edge)
    are unchanged; unlabelled points keep their affinities up to the row normalisation.

    Parameters
    ----------
    y : array-like of int, shape (n,)
        Labels; ``unknown`` (default -1) marks an unknown label.
    strength : float
        :math:`s \ge 0`, in nats; ``0`` is neutral. On digits (t-SNE, half of the labels),
        ``s = 1`` gave the best 5-NN accuracy on the unlabelled points; larger values separate
        the labelled classes more but did not help the unlabelled ones further.
    unknown : int
        The code of an unknown label.

    Returns
    -------
    LabelPrior
        An edge-prior object for ``edge_prior=`` or ``latent_edge_prior=``.

    Examples
    --------
    >>> y_half = np.where(np.arange(len(y)) % 2 == 0, y, -1)   # doctest: +SKIP
    >>> probdr.TSNE(edge_prior=probdr.laws.edge_priors.from_labels(y_half, strength=2.0)).fit(X)  # doctest: +SKIP
    """
    return LabelPrior(y, strength=strength, unknown=unknown)


def graph_edges(g) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """(rows, cols, n, directed) of an igraph Graph, scipy sparse matrix, dense array or tensor."""
    try:
        import igraph as ig
    except ImportError:  # pragma: no cover - igraph is a dependency
        ig = None
    if ig is not None and isinstance(g, ig.Graph):
        el = np.asarray(g.get_edgelist(), dtype=np.int64).reshape(-1, 2)
        return el[:, 0], el[:, 1], g.vcount(), g.is_directed()
    import scipy.sparse as sp

    if isinstance(g, torch.Tensor):
        if g.is_sparse:
            g = g.coalesce()
            idx, v = g.indices().cpu().numpy(), g.values().cpu().numpy()
            if g.ndim != 2 or g.shape[0] != g.shape[1]:
                raise ValueError(f"the graph must be a square (n, n) matrix, got {tuple(g.shape)}.")
            if not np.all(np.isfinite(v)):
                raise ValueError("the graph's weights contain NaN or inf.")
            nz = v != 0
            return idx[0][nz], idx[1][nz], g.shape[0], True
        g = g.detach().cpu().numpy()
    if sp.issparse(g):
        S = sp.coo_matrix(g)
        if S.shape[0] != S.shape[1]:
            raise ValueError(f"the graph must be a square (n, n) matrix, got {S.shape}.")
        if not np.all(np.isfinite(S.data)):
            raise ValueError("the graph's weights contain NaN or inf.")
        nz = S.data != 0
        return S.row[nz].astype(np.int64), S.col[nz].astype(np.int64), S.shape[0], True
    A = np.asarray(g)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError("the graph must be an igraph Graph, a scipy sparse matrix or a square "
                         f"(n, n) array, got shape {A.shape}.")
    if not np.issubdtype(A.dtype, np.number) and A.dtype != bool:
        raise ValueError(f"the graph must be numeric, got dtype {A.dtype}.")
    if not np.all(np.isfinite(A)):
        raise ValueError("the graph's weights contain NaN or inf.")
    r, c = np.nonzero(A)
    return r.astype(np.int64), c.astype(np.int64), A.shape[0], True


def from_graph(g, weight: float = 2.0, *, off_weight: float = 1.0,
               symmetric: bool = True) -> GraphEdgePrior:
    r"""Edge prior from an observed network: edges of ``g`` get :math:`\pi_{ij} = w`.

    .. math::
        \pi_{ij} = \begin{cases} w & (i, j) \in E(g) \\ w_\text{off} & \text{otherwise}
        \end{cases}

    This is the use of :math:`\pi` the paper suggests ("when a network is observed",
    Definition 2). Edge weights of ``g`` are ignored; only its support is used. On the sparse
    input laws the edges of ``g`` join the neighbour lists, at :math:`w K_{X,ij}` (see the
    module docstring), so every edge of ``g`` is an edge of the input graph.

    Parameters
    ----------
    g : igraph.Graph, scipy sparse matrix, dense array or torch tensor (n, n)
        The observed graph. Non-zero entries are edges.
    weight : float
        :math:`w \ge 0` on the edges (``> 1`` favours them).
    off_weight : float
        :math:`w_\text{off} \ge 0` off the graph (default 1, neutral; 0 forbids non-edges, which
        the sparse input laws then drop).
    symmetric : bool
        Treat every edge as undirected (:math:`\pi_{ij} = \pi_{ji}`). Default True; an
        undirected igraph graph is always symmetric.

    Returns
    -------
    GraphEdgePrior
    """
    rows, cols, n, directed = graph_edges(g)
    if n == 0:
        raise ValueError("from_graph needs a graph with at least one node; got an empty graph "
                         "(0 nodes).")
    return GraphEdgePrior(rows, cols, n, weight=weight, off_weight=off_weight,
                          symmetric=symmetric or not directed)


def network_pairs(prior) -> tuple[torch.Tensor, torch.Tensor] | None:
    r"""The pairs an edge prior takes from an observed network, which the sparse input laws add
    to their neighbour lists: ``(rows, cols)`` (1-D long tensors, off the diagonal), or ``None``.

    * an edge-prior object: its :meth:`EdgePrior.pairs` (a :class:`GraphEdgePrior`'s edges,
      the union of a product's; ``None`` for :class:`LabelPrior` and for objects without
      ``pairs``);
    * a sparse torch tensor of :math:`\pi`: its stored entries with :math:`\pi_{ij} > 0`
      (the absent ones are neutral, :math:`\pi = 1`);
    * ``None``, a number or a dense array: ``None`` (a dense :math:`\pi` is defined on every
      pair; it re-weights the neighbour lists only).
    """
    if prior is None:
        return None
    if hasattr(prior, "log_at"):
        pairs = getattr(prior, "pairs", None)
        return pairs() if callable(pairs) else None
    if isinstance(prior, torch.Tensor) and prior.is_sparse:
        S = prior.coalesce()
        (rows, cols), v = S.indices(), S.values()
        keep = (rows != cols) & (v > 0)
        return rows[keep], cols[keep]
    return None


def check_edge_prior(prior, n: int, name: str = "edge_prior") -> None:
    r"""Raise a clear error unless ``prior`` is an edge prior :math:`\pi` on ``n`` nodes: None,
    an :class:`EdgePrior` (``log_at``) built on ``n`` nodes, a number :math:`> 0`, or an
    ``(n, n)`` array (numpy, dense or sparse torch) of finite weights :math:`\ge 0`."""
    if prior is None:
        return
    if hasattr(prior, "log_at"):
        m = getattr(prior, "n", None)
        if m is not None and int(m) != int(n):
            raise ValueError(f"{name} is defined on {m} nodes but the data have {n} samples: "
                             "build the prior from the same samples as the data.")
        return
    if isinstance(prior, torch.Tensor) and prior.is_sparse:
        shape, values = tuple(prior.shape), prior.coalesce().values()
    else:
        try:
            values = torch.as_tensor(np.asarray(prior, dtype=np.float64)
                                     if not isinstance(prior, torch.Tensor) else prior)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be None, an edge prior (probdr.laws.edge_priors), a "
                            f"number or an (n, n) array of weights; got {prior!r:.80}.") from None
        shape = tuple(values.shape)
    if shape not in ((), (n, n)):
        raise ValueError(f"{name} must be a number or an ({n}, {n}) array, got shape {shape}.")
    if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
        raise ValueError(f"{name} must hold finite weights >= 0 (a prior probability ratio per "
                         "pair); it has NaN, inf or negative entries.")
    if shape == () and float(values) == 0.0:
        raise ValueError(f"{name}=0 forbids every edge; give a positive number.")


def check_support(prior, graph, name: str = "latent_edge_prior") -> None:
    r"""Raise a clear ``ValueError`` if the edge prior :math:`\pi` is 0 on a pair where the
    observed ``graph`` (dense or sparse, e.g. :math:`\mathbb E[W_X]`) has an edge: the coupling's
    cross-entropy is then infinite (:math:`\log \pi = -\infty` on an observed edge)."""
    if prior is None:
        return
    g = graph.coalesce() if graph.is_sparse else graph
    if g.is_sparse:
        rows, cols = g.indices()
        vals = g.values()
    else:
        rows, cols = torch.nonzero(g, as_tuple=True)
        vals = g[rows, cols]
    keep = (rows != cols) & (vals > 0)
    rows, cols = rows[keep], cols[keep]
    if hasattr(prior, "log_at"):
        log_pi = prior.log_at(rows, cols)
    else:
        pi = prior.coalesce().to_dense() if isinstance(prior, torch.Tensor) and prior.is_sparse \
            else torch.as_tensor(np.asarray(prior, dtype=np.float64) if not isinstance(
                prior, torch.Tensor) else prior, dtype=torch.float64)
        if pi.ndim == 0:
            return
        log_pi = torch.log(pi.to(torch.float64)[rows, cols])
    bad = torch.isneginf(log_pi)
    if bool(bad.any()):
        i = int(bad.nonzero()[0, 0])
        raise ValueError(
            f"{name} is 0 on {int(bad.sum())} pair(s) that the input graph has as edges (e.g. "
            f"({int(rows[i])}, {int(cols[i])})): the latent graph cannot have them, so the "
            "coupling's cross-entropy is infinite. Give those pairs a positive prior.")
