r"""Graph laws B, D, E (Van Assel et al. 2022, §3) as Pyro distributions, and their priors (Proposition 1).

A graph law over directed graphs :math:`W \in \mathbb N^{n \times n}` (no self loops) is set by
log edge weights :math:`\log w_{ij} = \log \pi_{ij} + \log K_{ij}` (diagonal excluded):

=====  ===============================================================  ================================
law    :math:`W \sim`                                                    mean :math:`E[W_{ij}]`
=====  ===============================================================  ================================
B      :math:`W_{ij} \sim \mathcal B(w_{ij}/(1+w_{ij}))` independent     :math:`w_{ij}/(1+w_{ij})`
D      :math:`W_i \sim \mathcal M(1, w_i/w_{i+})` independent rows       :math:`w_{ij}/w_{i+}`
E      :math:`W \sim \mathcal M(n, w/w_{++})`                            :math:`n w_{ij}/w_{++}`
B~     :math:`\mathbb 1[W + W^\top \ge 1]`, W ~ B (UMAP's graph)         :math:`P+P^\top-P\odot P^\top`
=====  ===============================================================  ================================

Every law writes its log-probability in one shape, which is eq. (5) of the paper:

.. math::
    \log p(W) = \underbrace{\sum_{i\ne j} W_{ij}\log w_{ij}}_{\text{attraction}}
    - \underbrace{\mathcal N(W)}_{\text{repulsion}} + \underbrace{c(W)}_{\text{combinatorial}}

with :math:`\mathcal N = \sum_i W_{i+}\log w_{i+}` (D), :math:`W_{++}\log w_{++}` (E),
:math:`\sum_{i\ne j}\log(1+w_{ij})` (B) and :math:`c = \log n! - \sum \log W_{ij}!` (E only).
``log_prob`` accepts an integer graph or an expected graph :math:`E[W]` (dense tensor or sparse
COO); at an expected graph it equals the expected log-likelihood up to :math:`c`, which does not
depend on the weights. :meth:`GraphLaw.cross_entropy` returns the paper's closed forms (§3.1 there).

Each law is a whole Pyro distribution: ``support`` is its :math:`\Omega` of Definition 2 (a
constraint of :mod:`probdr.laws.graph_support`; ``event_shape`` is ``(n, n)``), ``log_prob``
takes a graph or a batch ``(..., n, n)`` and returns one value per graph, ``expand`` puts the law
in a ``pyro.plate`` (one law over a batch of graphs, the weights shared), and ``mean``,
``variance`` (B: :math:`p(1-p)`; D: :math:`P_{ij}(1-P_{ij})`; E: :math:`n q_{ij}(1-q_{ij})`),
``entropy`` and, for tiny n, ``enumerate_support`` are exact.

**Graphs and expected graphs.** ``log_prob`` is linear in W (up to :math:`c`), so the package
also observes expected graphs :math:`\mathbb E[W]` (t-SNE's row-stochastic P, UMAP's fuzzy
union) to get the coupling cross-entropy. The two are told apart by value, per graph:

* an **integer-valued** graph (an integer or bool dtype, or floating entries that are all
  integers) is a graph: outside :math:`\Omega` its ``log_prob`` is :math:`-\infty`, and with
  validation on (``validate_args=True``, or ``None`` under ``pyro.enable_validation(True)``, torch's
  default) it raises ``ValueError``;
* a graph with a **non-integer entry** is an expected graph: ``log_prob`` is the linear
  extension above, never :math:`-\infty`; validation checks only its shape and that its entries
  are non-negative (not NaN).

The rule loses nothing: the integer points of the convex hull of each :math:`\Omega` (where
expected graphs live) are exactly :math:`\Omega`, so an integer-valued expected graph that is
valid is a graph of the support. The verdict is cached on the tensor (an observed graph is the
same tensor at every step); MAP and SVI run with validation off.

Weights come in three representations of one law: :class:`DenseWeights` (n x n),
:class:`SparseWeights` (edge list; absent edges have weight 0) and :class:`KernelWeights`
(implicit :math:`\log k(\|z_i-z_j\|^2)` for all pairs, with exact normalisers and a hand-written
gradient), so the same law serves as the exact oracle and at scale.
"""

from __future__ import annotations

import math

import torch
from pyro.distributions import Bernoulli, TorchDistribution

from .._compute.edges import bernoulli_log_prob
from .._compute.isolation import fit_generator
from .._utils import tensor_cache as _cached
from ..config import check_dense
from .edge_lists import (
    batch_edges,
    edge_terms,
    folded_edges,
    graph_total,
    near_pairs,
    repeat_graph,
    row_sums,
    sum_lgamma1,
    unbind_graphs,
)
from .graph_support import (
    all_entries,
    binary_graphs,
    integer_graphs,
    integer_valued,
    n_edge_graphs,
    symmetric_binary_graphs,
    unit_degree_graphs,
)
from .weights import (
    MAX_LOGIT,
    NEG_INF,
    DenseWeights,
    KernelWeights,
    ReferenceWeights,
    SparseWeights,
    Weights,
    sparse_coo,
)

__all__ = [
    "MAX_ENUMERATED_GRAPHS", "GraphLaw", "BinaryGraph", "UnitDegreeGraph", "NEdgeGraph", "SymmetrizedBinaryGraph",
    "GraphPrior", "BinaryPrior", "UnitDegreePrior", "NEdgePrior", "get_prior",
    "check_coupling", "DEFINED_COUPLINGS",
]


#: the most graphs ``enumerate_support`` lists (B up to 4 nodes, D 6, E 5, B~ 6)
MAX_ENUMERATED_GRAPHS = 2**16


# --------------------------------------------------------------------------------------------
# laws
# --------------------------------------------------------------------------------------------
class GraphLaw(TorchDistribution):
    """Base class of the B, D and E graph laws (see module docstring)."""

    arg_constraints: dict = {}
    support = integer_graphs
    has_enumerate_support = False
    prior = "?"

    def __init__(self, weights: Weights, validate_args=None):
        if not isinstance(weights, Weights):
            weights = DenseWeights(torch.as_tensor(weights))
        self.weights = weights
        self.n = weights.n
        super().__init__(torch.Size(), torch.Size((self.n, self.n)), validate_args=validate_args)

    # the three pieces of eq. (5) -------------------------------------------------------------
    def attraction(self, value) -> torch.Tensor:
        r""":math:`\sum_{i \ne j} W_{ij} \log w_{ij}` (0 where :math:`W_{ij} = 0`).

        With symmetric weights (a kernel without edge prior) the sum runs over unordered pairs
        with weights :math:`W_{ij} + W_{ji}` (fewer terms on a kNN graph)."""
        memo = getattr(self, "_attraction_memo", None)
        if memo is not None and memo[0] is value:  # e.g. the model's exaggeration factor
            return memo[1]
        w = self.weights
        if value.is_sparse and isinstance(w, KernelWeights) and w.log_pi is None:
            r, c, v = folded_edges(value)
            out = w.weighted_sum_at(r, c, v)
        else:
            r, c, v = edge_terms(value)
            keep = r != c
            out = self.weights.weighted_sum_at(r[keep], c[keep], v[keep])
        self._attraction_memo = (value, out)
        return out

    def normaliser(self, value) -> torch.Tensor:
        raise NotImplementedError

    def rows_log_prob(self, edges, nonedge_weight=None) -> torch.Tensor:
        r"""The log-probability of new nodes' rows, one per row ``(..., m)``, under this law
        with weights pinned to reference nodes (:class:`~probdr.laws.weights.ReferenceWeights`):
        eq. (5) restricted to the rows, ``edges = (rows, cols, values)`` their nonzero entries
        :math:`p_{ij}` (an expected row, or a graph's). Each law writes its own (B, D, E)."""
        raise NotImplementedError(f"{type(self).__name__} does not score new rows.")

    def _row_edges(self, edges):
        r"""The new rows' entries in the weights' dtype, and each row's attraction
        :math:`\sum_j p_{ij} \log w_{ij}`'s terms :math:`\log w_{ij}`."""
        w = self.weights
        if not isinstance(w, ReferenceWeights):
            raise TypeError("rows_log_prob scores new rows against reference nodes: the law's "
                            "weights must be ReferenceWeights.")
        rows, cols, p = edges
        return rows, p.to(w.Z.dtype), w.log_at(rows, cols)

    def _near(self, value):
        """The observed pairs that sampled kernel weights sum exactly (their near field), or
        ``None``: passed to the normalisers, the weights are not changed."""
        w = self.weights
        if isinstance(w, KernelWeights) and w.normaliser == "sampled" and value.is_sparse:
            return near_pairs(value)
        return None

    def log_combinatorial(self, value) -> torch.Tensor:
        return torch.zeros(())

    def in_support(self, value) -> bool:
        r"""Whether the graph (every graph of a batch) lies in the support :math:`\Omega`."""
        return bool(self.support.check(value).all())

    # log-probability -------------------------------------------------------------------------
    def log_prob(self, value):
        r"""Eq. (5) at a graph or a batch of graphs ``(..., n, n)`` (dense or sparse COO): one value
        per graph, broadcast with the law's batch shape. An integer-valued graph outside the
        support scores :math:`-\infty` (with validation on, it raises ``ValueError``); an
        expected graph (a non-integer entry) gives the cross-entropy form (module docstring)."""
        if not isinstance(value, torch.Tensor):
            value = torch.as_tensor(value)
        if self._validate_args:
            self._validate_sample(value)
        outside = self._outside_support(value)
        if value.dim() == 2:
            lp = self._graph_log_prob(value)
            if outside:
                lp = torch.where(torch.ones_like(lp, dtype=torch.bool), NEG_INF, lp)
        else:
            lp = torch.stack([self._graph_log_prob(g) for g in unbind_graphs(value)])
            lp = torch.where(outside.to(lp.device), NEG_INF, lp.reshape(value.shape[:-2]))
        shape = torch.broadcast_shapes(lp.shape, self.batch_shape)
        return lp if lp.shape == shape else lp.expand(shape)

    def _graph_log_prob(self, value):
        """Eq. (5) at one graph ``(n, n)``, whatever its support."""
        lp = self.attraction(value) - self.normaliser(value) + self.log_combinatorial(value)
        share = self.weights.share
        if share != 1.0:  # a data-parallel fit: every rank holds the constant, carries its share
            lp = lp + (share - 1.0) * self.log_combinatorial(value)
        return lp

    def _outside_support(self, value):
        """Per graph: integer-valued and outside the support (a Python bool for one graph),
        cached on the tensor: an observed graph is the same tensor at every step."""
        def compute():
            with torch.no_grad():
                integer = integer_valued(value)
                out = integer & ~self.support.check(value) if bool(integer.any()) else integer
            return bool(out) if value.dim() == 2 else out
        if value.is_inference():
            return compute()
        return _cached(value, f"_probdr_outside_{type(self.support).__name__}", compute)

    def _validate_sample(self, value):
        """Raise ``ValueError`` unless ``value`` is a graph (batch) of the law's shape whose
        entries are non-negative and whose integer-valued graphs lie in the support."""
        if not isinstance(value, torch.Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor.")
        name, shape = type(self).__name__, tuple(value.shape)
        if len(shape) < 2 or shape[-2:] != (self.n, self.n):
            raise ValueError(f"{name}: a graph on {self.n} nodes has shape (..., {self.n}, "
                             f"{self.n}), got {shape}.")
        try:
            torch.broadcast_shapes(value.shape[:-2], self.batch_shape)
        except RuntimeError:
            raise ValueError(f"{name}: the batch shape {shape[:-2]} of the graphs does not "
                             f"broadcast with the law's {tuple(self.batch_shape)}.") from None
        if not self._nonnegative(value):
            raise ValueError(f"{name}: a graph, or an expected graph, has non-negative entries; "
                             "found a negative or NaN entry.")
        if bool(torch.as_tensor(self._outside_support(value)).any()):
            raise ValueError(
                f"{name}: the graph lies outside the support of the law, {self.support!r} "
                "(Van Assel et al. 2022, Definition 2). An expected graph E[W] (an entry that "
                "is not an integer) is taken as the cross-entropy form instead.")

    @staticmethod
    def _nonnegative(value) -> bool:
        """Whether every entry is non-negative (NaN is not), cached on the tensor."""
        def compute():
            v = batch_edges(value)[3] if value.is_sparse else value
            return all_entries(v, lambda x: x >= 0)
        return compute() if value.is_inference() else _cached(value, "_probdr_nonneg", compute)

    def cross_entropy(self, P) -> torch.Tensor:
        r""":math:`-\mathbb E_{W\sim P}[\log p(W)]` as Van Assel et al. (2022, §3.1) write it, from the expected
        graph ``P`` (the multinomial coefficient, constant in the weights, is not included)."""
        return -(self.attraction(P) - self.normaliser(P))

    # moments, draws, enumeration ---------------------------------------------------------------
    @property
    def mean(self):
        r""":math:`\mathbb E[W]`, ``(*batch_shape, n, n)``, sparse for sparse weights."""
        return repeat_graph(self._mean_graph(), self.batch_shape)

    @property
    def variance(self):
        r""":math:`\operatorname{Var}[W_{ij}]` cell by cell, ``(*batch_shape, n, n)``."""
        return repeat_graph(self._variance_graph(), self.batch_shape)

    def entropy(self):
        r""":math:`-\mathbb E[\log p(W)]`, one value per batch element."""
        return self._entropy_graph().expand(self.batch_shape)

    def sample(self, sample_shape=torch.Size()):
        """Draws ``(*sample_shape, *batch_shape, n, n)``: long, sparse COO for sparse weights
        when the draws' leading shape has one dimension (dense otherwise)."""
        return self._draw(torch.Size(sample_shape) + self.batch_shape)

    def enumerate_support(self, expand=True):
        """Every graph of the support, ``(K, *batch_shape, n, n)`` long (``(K, 1, ..., 1, n,
        n)`` with ``expand=False``), for tiny n only: at most ``MAX_ENUMERATED_GRAPHS``."""
        K = self.support.size(self.n)
        if K > MAX_ENUMERATED_GRAPHS:
            small = max((m for m in range(1, self.n) if self.support.size(m)
                         <= MAX_ENUMERATED_GRAPHS), default=0)
            raise ValueError(f"{type(self).__name__}.enumerate_support: the support on n={self.n} "
                             f"nodes holds {K} graphs, more than {MAX_ENUMERATED_GRAPHS}; "
                             f"enumeration is for tiny graphs (n <= {small}).")
        W = self.support.enumerate(self.n)
        W = W.reshape((K,) + (1,) * len(self.batch_shape) + self.event_shape)
        return W.expand((K,) + self.batch_shape + self.event_shape) if expand else W

    def expand(self, batch_shape, _instance=None):
        """The same law over a batch of graphs (``pyro.plate``): the weights are shared, and
        ``log_prob`` of a batch ``(*batch_shape, n, n)`` is one value per graph."""
        new = self._get_checked_instance(type(self), _instance)
        new.__dict__.update({k: None if k.endswith("_memo") else v
                             for k, v in self.__dict__.items()})
        TorchDistribution.__init__(new, torch.Size(batch_shape), self.event_shape,
                                   validate_args=self.__dict__.get("_validate_args"))
        return new

    def _mean_graph(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def _variance_graph(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def _entropy_graph(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def _draw(self, shape):  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self):
        kind = "sparse" if self.weights.is_sparse else "dense"
        batch = f", batch_shape={tuple(self.batch_shape)}" if self.batch_shape else ""
        return f"{type(self).__name__}(n={self.n}, {kind}{batch})"


class BinaryGraph(GraphLaw):
    r"""B law: independent Bernoulli edges :math:`W_{ij} \sim \mathcal B(w_{ij}/(1+w_{ij}))`."""

    prior = "B"
    support = binary_graphs
    has_enumerate_support = True

    def normaliser(self, value):
        # log prod (1 + w_ij): does not depend on the graph
        return self.weights.sum_softplus(near=self._near(value))

    def rows_log_prob(self, edges, nonedge_weight=None):
        r"""Independent cells: :math:`\ell_i = \sum_j p_{ij}\log\sigma(\log w_{ij})
        + \sum_j \omega_{ij}\log\sigma(-\log w_{ij})` with :math:`\omega_{ij} = 1 - p_{ij}`
        (the B law), or a weight :math:`\omega_i` of every non-edge term of row :math:`i`
        (``nonedge_weight``, ``(m,)``: the expectation of a fit by negative sampling,
        :mod:`probdr.models.coupling`)."""
        import torch.nn.functional as F

        rows, p, logk = self._row_edges(edges)
        w = self.weights
        attraction = w.row_sums(rows, (logk - F.softplus(logk)) * p)
        repel = -w.row_sum_softplus()  # sum_j log sigma(-log w_ij)
        if nonedge_weight is None:  # (1 - p_ij) on every pair
            return attraction + repel - w.row_sums(rows, -F.softplus(logk) * p)
        return attraction + nonedge_weight * repel

    def _logits(self):
        """:math:`\\log w_{ij}`: the edge list's values, or dense with a ``-inf`` diagonal."""
        w = self.weights
        return w.values if w.is_sparse else w.dense()

    def _mean_graph(self):
        return self._on_graph(torch.sigmoid(self._logits()))

    def _variance_graph(self):
        # p (1 - p) = sigmoid(l) sigmoid(-l), accurate at both ends
        logits = self._logits()
        return self._on_graph(torch.sigmoid(logits) * torch.sigmoid(-logits))

    def _entropy_graph(self):
        r"""The Bernoulli entropies :math:`-p\log p - (1-p)\log(1-p)` summed over the cells."""
        logits = self._logits()
        p, q = torch.sigmoid(logits), torch.sigmoid(-logits)
        return -(torch.special.xlogy(p, p) + torch.special.xlogy(q, q)).sum()

    def _on_graph(self, x):
        """Values on the weights' cells as a graph: sparse on the edge list, or dense."""
        return self.weights.to_sparse(x) if self.weights.is_sparse else x

    def _draw(self, sample_shape):
        w = self.weights
        N = int(torch.Size(sample_shape).numel())
        with torch.no_grad():
            if w.is_sparse:
                p = torch.sigmoid(w.values.clamp(-MAX_LOGIT, MAX_LOGIT))
                draws = torch.bernoulli(p.expand(N, -1), generator=fit_generator())
                return _stack_sparse(w.rows, w.cols, draws, w.n, sample_shape)
            check_dense(w.n, f"{N} dense graph draws", "Use sparse weights.", copies=N + 1)
            p = torch.sigmoid(w.dense().clamp(max=MAX_LOGIT))
            return torch.bernoulli(p.expand(*sample_shape, *p.shape),
                                   generator=fit_generator()).to(torch.long)

    def symmetrized(self) -> SymmetrizedBinaryGraph:
        """The law of :math:`\\tilde W = \\mathbb 1[W + W^\\top \\ge 1]` (UMAP's input graph)."""
        return SymmetrizedBinaryGraph(self)

    def edges_at(self, rows: torch.Tensor, cols: torch.Tensor, mask=None):
        """The law of the edges :math:`W_{r_e c_e}` alone, :math:`\\mathcal B(w/(1+w))` each
        (negative sampling: the sampled edges and non-edges); ``mask``, a boolean per edge,
        leaves those where it is false out of the log-probability."""
        law = EdgeBernoulli(logits=self.weights.log_at(rows, cols), validate_args=False)
        return law if mask is None else law.mask(mask)


class EdgeBernoulli(Bernoulli):
    """The Bernoulli law of sampled edges, its log-prob's gradient independent of the number
    of threads (:func:`probdr._compute.edges.bernoulli_log_prob`)."""

    def log_prob(self, value):
        return bernoulli_log_prob(self.logits, value)


class SymmetrizedBinaryGraph(GraphLaw):
    r"""B~ law: :math:`\tilde W = \mathbb 1[W + W^\top \ge 1]` with W ~ B; symmetric,
    :math:`\tilde W_{ij} \sim \mathcal B(P_{ij} + P_{ji} - P_{ij}P_{ji})` independently for i<j."""

    prior = "B"

    support = symmetric_binary_graphs
    has_enumerate_support = True

    def __init__(self, base: BinaryGraph, validate_args=None):
        self.base = base
        P = base.mean
        if P.is_sparse:
            PT = P.t().coalesce()
            Pt = (P + PT - P * PT).coalesce()
            lw = torch.logit(Pt.values().clamp(0, 1)).clamp(-MAX_LOGIT, MAX_LOGIT)
            weights = SparseWeights(Pt.indices()[0], Pt.indices()[1], lw, base.n)
        else:
            Pt = P + P.T - P * P.T
            weights = DenseWeights(torch.logit(Pt).clamp(-MAX_LOGIT, MAX_LOGIT))
        super().__init__(weights, validate_args=validate_args)

    # the law is a product over unordered pairs i < j, and the symmetric weights list each pair
    # twice (ij and ji): both terms of log p are halved sums over ordered pairs
    def attraction(self, value) -> torch.Tensor:
        return 0.5 * super().attraction(value)

    def normaliser(self, value):
        return 0.5 * self.weights.sum_softplus()

    @classmethod
    def from_mean(cls, P: torch.Tensor) -> SymmetrizedBinaryGraph:
        """The B~ law whose mean is the symmetric matrix ``P`` (a precomputed fuzzy union)."""
        obj = cls.__new__(cls)
        obj.base = None
        if P.is_sparse:
            P = P.coalesce()
            lw = torch.logit(P.values().double().clamp(0, 1)).clamp(-MAX_LOGIT, MAX_LOGIT)
            weights = SparseWeights(P.indices()[0], P.indices()[1], lw, P.shape[0])
        else:
            weights = DenseWeights(torch.logit(P.double().clamp(0, 1)).clamp(-MAX_LOGIT, MAX_LOGIT))
        GraphLaw.__init__(obj, weights)
        return obj

    # one Bernoulli cell per unordered pair: the B law of the symmetric weights, its entropy
    # halved (each pair counted twice)
    def _mean_graph(self):
        return BinaryGraph(self.weights)._mean_graph()

    def _variance_graph(self):
        return BinaryGraph(self.weights)._variance_graph()

    def _entropy_graph(self):
        return 0.5 * BinaryGraph(self.weights)._entropy_graph()

    def _draw(self, sample_shape):
        if self.base is None:  # from_mean: one Bernoulli per unordered pair, mirrored
            W = BinaryGraph(self.weights).sample(sample_shape)
            if W.is_sparse:
                W = W.coalesce()
                idx, val = W.indices(), W.values()
                up = idx[-2] < idx[-1]
                idx, val = idx[:, up], val[up]
                low = idx.clone()
                low[-2], low[-1] = idx[-1], idx[-2]
                return sparse_coo(torch.cat([idx, low], 1), torch.cat([val, val]), W.shape).coalesce()
            U = torch.triu(W, diagonal=1)
            return U + U.transpose(-1, -2)
        W = self.base.sample(sample_shape)
        if W.is_sparse:
            WT = W.transpose(-1, -2).coalesce()
            S = (W + WT).coalesce()
            S = sparse_coo(S.indices(), (S.values() >= 1).to(torch.long), S.shape)
            return S.coalesce()
        return ((W + W.transpose(-1, -2)) >= 1).to(torch.long)


class UnitDegreeGraph(GraphLaw):
    r"""D law: each row has exactly one out-edge, :math:`W_i \sim \mathcal M(1, w_i/w_{i+})`."""

    prior = "D"
    support = unit_degree_graphs
    has_enumerate_support = True

    def normaliser(self, value):
        lse = self.weights.row_logsumexp(near=self._near(value))
        return (row_sums(value, self.n).to(self._dtype()) * lse).sum()

    def rows_log_prob(self, edges, nonedge_weight=None):
        r"""Independent categorical rows: :math:`\ell_i = \sum_j p_{ij}\log w_{ij}
        - p_{i+}\log\sum_j w_{ij}`."""
        rows, p, logk = self._row_edges(edges)
        w = self.weights
        p_tot = w.row_sums(rows, p, batched=False)
        return w.row_sums(rows, logk * p) - p_tot * w.row_logsumexp()

    def _dtype(self):
        w = self.weights
        return (w.values if w.is_sparse else w.Z if isinstance(w, KernelWeights) else w.log_w).dtype

    def _log_probs(self):
        """:math:`\\log (w_{ij} / w_{i+})`: on the edge list, or dense (``-inf`` off the graph)."""
        w = self.weights
        if w.is_sparse:
            return w.values - w.row_logsumexp()[w.rows]
        return torch.log_softmax(w.dense(), 1)

    def _mean_graph(self):
        w = self.weights
        if w.is_sparse:
            return w.to_sparse(torch.exp(self._log_probs()))
        return torch.softmax(w.dense(), 1)

    def _variance_graph(self):
        M = self._mean_graph()
        if M.is_sparse:
            return self.weights.to_sparse(M.values() * (1 - M.values()))
        return M * (1 - M)

    def _entropy_graph(self):
        r"""The rows' categorical entropies :math:`-\sum_j P_{ij}\log P_{ij}`, summed."""
        logp = self._log_probs()
        return -torch.where(logp > NEG_INF, torch.exp(logp) * logp, torch.zeros_like(logp)).sum()

    def _draw(self, sample_shape):
        w = self.weights
        N = int(torch.Size(sample_shape).numel())
        with torch.no_grad():
            if w.is_sparse:
                g = w.values + _gumbel((N, w.values.numel()), w.values.dtype)
                key = w.rows + w.n * torch.arange(N)[:, None]
                best = torch.full((N * w.n,), NEG_INF, dtype=g.dtype).scatter_reduce(
                    0, key.flatten(), g.flatten(), "amax")
                win = (g.flatten() == best[key.flatten()]).to(torch.long).view(N, -1)
                return _stack_sparse(w.rows, w.cols, win, w.n, sample_shape)
            check_dense(w.n, f"{N} dense graph draws", "Use sparse weights.", copies=N + 1)
            L = w.dense()
            # Categorical(logits=L).sample((N,)) with the fit's generator: (N, n)
            probs = torch.softmax(L - L.logsumexp(-1, keepdim=True), -1)
            idx = torch.multinomial(probs, N, True, generator=fit_generator()).T
            W = torch.zeros(N, w.n, w.n, dtype=torch.long)
            W.scatter_(2, idx[:, :, None], 1)
            return W.view(*sample_shape, w.n, w.n)


class NEdgeGraph(GraphLaw):
    r"""E law: n edges in total, :math:`W \sim \mathcal M(n, w / w_{++})` over all off-diagonal
    cells (multi-edges allowed)."""

    prior = "E"
    support = n_edge_graphs
    has_enumerate_support = True

    def normaliser(self, value):
        return graph_total(value) * self.weights.total_logsumexp(near=self._near(value))

    def rows_log_prob(self, edges, nonedge_weight=None):
        r"""A row given its degree: the multinomial of the E law restricted to a row's cells
        and conditioned on their total is the multinomial over them, so the row scores as the
        D law's, :math:`\ell_i = \sum_j p_{ij}\log w_{ij} - p_{i+}\log\sum_j w_{ij}`."""
        return UnitDegreeGraph.rows_log_prob(self, edges)

    def log_combinatorial(self, value):
        def compute():
            r, c, v = edge_terms(value)
            return math.lgamma(self.n + 1) - sum_lgamma1(v)
        return _cached(value, "_probdr_logcomb", compute) if value.is_sparse else compute()

    def _mean_graph(self):
        w = self.weights
        if w.is_sparse:
            return w.to_sparse(self.n * torch.exp(w.values - w.total_logsumexp()))
        L = w.dense()
        return self.n * torch.exp(L - torch.logsumexp(L.flatten(), 0))

    def _variance_graph(self):
        # W_ij ~ Binomial(n, q_ij): n q (1 - q), with n q the mean
        M = self._mean_graph()
        if M.is_sparse:
            return self.weights.to_sparse(M.values() * (1 - M.values() / self.n))
        return M * (1 - M / self.n)

    def _entropy_graph(self):
        w = self.weights
        return _multinomial_entropy(w.values if w.is_sparse else w.dense().flatten(), self.n)

    def _draw(self, sample_shape):
        w = self.weights
        N = int(torch.Size(sample_shape).numel())
        with torch.no_grad():
            if not w.is_sparse:
                check_dense(w.n, f"{N} dense graph draws", "Use sparse weights.", copies=N + 1)
            logits = w.values if w.is_sparse else w.dense().flatten()
            probs = torch.softmax(logits.to(torch.float64), 0)
            # inverse-CDF sampling: torch.multinomial refuses more than 2^24 categories
            cdf = probs.cumsum(0)
            u = torch.rand(N, self.n, dtype=cdf.dtype, generator=fit_generator()) * cdf[-1]
            draws = torch.searchsorted(cdf, u).clamp_max(probs.numel() - 1)
            counts = torch.zeros(N, probs.numel(), dtype=torch.long)
            counts.scatter_add_(1, draws, torch.ones_like(draws))
            if w.is_sparse:
                return _stack_sparse(w.rows, w.cols, counts, w.n, sample_shape)
            return counts.view(*sample_shape, w.n, w.n)


def _multinomial_entropy(logits: torch.Tensor, n: int) -> torch.Tensor:
    r"""The entropy of :math:`\mathcal M(n, q)`, :math:`q = \mathrm{softmax}(\text{logits})` over
    the cells (``-inf``: empty cells), exactly:

    .. math::
        H = -\log n! - n \sum_c q_c \log q_c + \sum_c \mathbb E[\log W_c!],\qquad
        \mathbb E[\log W_c!] = \sum_{k=2}^{n} \binom{n}{k} q_c^k (1-q_c)^{n-k} \log k!,

    as each cell :math:`W_c \sim \mathrm{Bin}(n, q_c)`. The sum over k stops once every cell is
    past its mode :math:`\lfloor (n+1) q_c \rfloor` and its pmf underflows to 0 in floating
    point (a handful of terms when :math:`n q_c \ll 1`): the further terms are exactly 0."""
    logits = logits[logits > NEG_INF]
    log_q = logits - torch.logsumexp(logits, 0)
    q = torch.exp(log_q)
    log_n1 = math.lgamma(n + 1)
    H = -log_n1 - n * (q * log_q).sum()
    mode = int(torch.floor((n + 1) * q).max()) if q.numel() else 0
    for k in range(2, n + 1):
        log_pmf = (log_n1 - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q
                   + torch.special.xlog1py(torch.tensor(float(n - k), dtype=q.dtype), -q))
        pmf = torch.exp(log_pmf)
        H = H + pmf.sum() * math.lgamma(k + 1)
        if k > mode and not bool((pmf > 0).any()):
            break
    return H


def _gumbel(shape, dtype):
    u = torch.rand(shape, dtype=torch.float64, generator=fit_generator()).clamp(1e-300, 1.0)
    return (-torch.log(-torch.log(u))).to(dtype)


def _stack_sparse(rows, cols, draws, n, sample_shape):
    """Sparse COO graphs from per-edge draws (N, nnz); drops zero entries."""
    N = draws.shape[0]
    b, e = torch.nonzero(draws, as_tuple=True)
    vals = draws[b, e].to(torch.long)
    if tuple(sample_shape) == ():
        return sparse_coo(torch.stack([rows[e], cols[e]]), vals, (n, n)).coalesce()
    idx = torch.stack([b, rows[e], cols[e]])
    S = sparse_coo(idx, vals, (N, n, n)).coalesce()
    return S if len(sample_shape) == 1 else S.to_dense().view(*sample_shape, n, n)


# --------------------------------------------------------------------------------------------
# priors (Definition 2 at alpha = 1) and the posterior limits of Proposition 1
# --------------------------------------------------------------------------------------------
class GraphPrior:
    r"""A graph prior :math:`\mathcal P \in \{B, D, E\}` with edge prior :math:`\pi`.

    ``posterior(K)`` returns the limit posterior :math:`\mathbb P_\mathcal P(\cdot; \pi \odot K)`
    of Proposition 1 for the kernel (log-)weights ``K``.

    Parameters
    ----------
    edge_prior : None, array-like (n, n), torch sparse, or an edge-prior object
        :math:`\pi`; ``None`` means all ones. Sparse entries that are absent mean :math:`\pi=1`
        (neutral). Zeros forbid edges. An object with ``log_at(rows, cols)`` and ``dense(n)``
        (returning :math:`\log\pi`) is evaluated only where needed (see ``probdr.laws.edge_priors``).
    """

    kind = "?"
    law: type[GraphLaw]

    def __init__(self, edge_prior=None):
        self.edge_prior = edge_prior

    def log_edge_prior(self):
        """:math:`\\log \\pi`: None, a dense or sparse tensor, or an edge-prior object (anything
        with ``log_at(rows, cols)`` and ``dense(n)`` returning log pi), passed through."""
        pi = self.edge_prior
        if pi is None:
            return None
        if hasattr(pi, "log_at"):
            return pi
        if isinstance(pi, torch.Tensor) and pi.is_sparse:
            pi = pi.coalesce()
            return sparse_coo(pi.indices(), torch.log(pi.values().double()),
                                           pi.shape).coalesce()
        pi = torch.as_tensor(pi, dtype=torch.float64)
        if (pi < 0).any():
            raise ValueError("edge_prior must be non-negative.")
        return torch.log(pi)

    def posterior(self, K: Weights) -> GraphLaw:
        return self.law(K.with_log_prior(self.log_edge_prior()))

    def __repr__(self):
        return f"{type(self).__name__}(edge_prior={'None' if self.edge_prior is None else '...'})"


class BinaryPrior(GraphPrior):
    """B prior: simple graphs with any number of edges."""

    kind, law = "B", BinaryGraph


class UnitDegreePrior(GraphPrior):
    """D prior: every node has exactly one out-edge."""

    kind, law = "D", UnitDegreeGraph


class NEdgePrior(GraphPrior):
    """E prior: exactly n edges in total, multi-edges allowed."""

    kind, law = "E", NEdgeGraph


def get_prior(prior, edge_prior=None) -> GraphPrior:
    if isinstance(prior, GraphPrior):
        return prior
    table = {"B": BinaryPrior, "D": UnitDegreePrior, "E": NEdgePrior}
    key = str(prior).upper().replace("~", "")
    if key not in table:
        raise ValueError(f"Unknown graph prior {prior!r}; choose 'B', 'D', 'E' (or 'B~' on the "
                         "input side for UMAP's symmetrised graph).")
    return table[key](edge_prior)


#: (input prior, latent prior) pairs whose cross-entropy is defined (Van Assel et al. 2022, Table 1):
#: supp(P_X) must lie in supp(P_Z)
DEFINED_COUPLINGS = {("B", "B"): "UMAP (with B~)", ("B~", "B"): "UMAP", ("D", "B"): "LargeVis",
                     ("D", "D"): "SNE", ("D", "E"): "t-SNE / symmetric SNE",
                     ("E", "E"): "Remark 4 (fails at outliers)"}


def check_coupling(prior_x: str, prior_z: str) -> str:
    """Raise a clear error if the cross-entropy of (prior_x, prior_z) is undefined."""
    key = (str(prior_x).upper(), str(prior_z).upper())
    if key not in DEFINED_COUPLINGS:
        ok = ", ".join(f"{a}->{b} ({m})" for (a, b), m in DEFINED_COUPLINGS.items())
        raise ValueError(
            f"The coupling prior_x={prior_x!r}, prior_z={prior_z!r} is undefined: the support of "
            f"the input graph law is not contained in the latent law's (Van Assel et al. 2022, Table 1), so "
            f"the cross-entropy is infinite. Defined pairs: {ok}."
        )
    return DEFINED_COUPLINGS[key]

