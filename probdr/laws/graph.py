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

Weights come in three representations of one law: :class:`DenseWeights` (n x n),
:class:`SparseWeights` (edge list; absent edges have weight 0) and :class:`KernelWeights`
(implicit :math:`\log k(\|z_i-z_j\|^2)` for all pairs, with exact normalisers and a hand-written
gradient), so the same law serves as the exact oracle and at scale.
"""

from __future__ import annotations

import math

import torch
from pyro.distributions import Bernoulli, TorchDistribution
from torch.distributions import constraints

from .._compute.edges import bernoulli_log_prob
from .._utils import tensor_cache as _cached
from ..config import check_dense
from .edge_lists import edge_terms, folded_edges, graph_total, near_pairs, row_sums, sum_lgamma1
from .weights import (
    MAX_LOGIT,
    NEG_INF,
    DenseWeights,
    KernelWeights,
    SparseWeights,
    Weights,
    sparse_coo,
)

__all__ = [
    "GraphLaw", "BinaryGraph", "UnitDegreeGraph", "NEdgeGraph", "SymmetrizedBinaryGraph",
    "GraphPrior", "BinaryPrior", "UnitDegreePrior", "NEdgePrior", "get_prior",
    "check_coupling", "DEFINED_COUPLINGS",
]


# --------------------------------------------------------------------------------------------
# laws
# --------------------------------------------------------------------------------------------
class GraphLaw(TorchDistribution):
    """Base class of the B, D and E graph laws (see module docstring)."""

    arg_constraints: dict = {}
    support = constraints.independent(constraints.nonnegative_integer, 2)
    has_enumerate_support = False
    prior = "?"

    def __init__(self, weights: Weights, validate_args=None):
        if not isinstance(weights, Weights):
            weights = DenseWeights(torch.as_tensor(weights))
        self.weights = weights
        self.n = weights.n
        super().__init__(torch.Size(), torch.Size((self.n, self.n)), validate_args=False)

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

    def _with_near(self, value):
        """Give sampled kernel weights the observed pairs as their exactly-summed near field."""
        w = self.weights
        if isinstance(w, KernelWeights) and w.normaliser == "sampled" and value.is_sparse:
            w.near = near_pairs(value)

    def log_combinatorial(self, value) -> torch.Tensor:
        return torch.zeros(())

    def in_support(self, value) -> bool:
        return True

    def log_prob(self, value):
        lp = self.attraction(value) - self.normaliser(value) + self.log_combinatorial(value)
        share = self.weights.share
        if share != 1.0:  # a data-parallel fit: every rank holds the constant, carries its share
            lp = lp + (share - 1.0) * self.log_combinatorial(value)
        return lp

    def cross_entropy(self, P) -> torch.Tensor:
        r""":math:`-\mathbb E_{W\sim P}[\log p(W)]` as Van Assel et al. (2022, §3.1) write it, from the expected
        graph ``P`` (the multinomial coefficient, constant in the weights, is not included)."""
        return -(self.attraction(P) - self.normaliser(P))

    # helpers ----------------------------------------------------------------------------------
    def _mean_values(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def expand(self, batch_shape, _instance=None):  # pragma: no cover - graphs are unbatched
        if tuple(batch_shape) != ():
            raise NotImplementedError("graph laws are not batched; use sample(sample_shape).")
        return self

    def __repr__(self):
        kind = "sparse" if self.weights.is_sparse else "dense"
        return f"{type(self).__name__}(n={self.n}, {kind})"


class BinaryGraph(GraphLaw):
    r"""B law: independent Bernoulli edges :math:`W_{ij} \sim \mathcal B(w_{ij}/(1+w_{ij}))`."""

    prior = "B"

    def normaliser(self, value):
        # log prod (1 + w_ij): does not depend on the graph
        self._with_near(value)
        return self.weights.sum_softplus()

    def in_support(self, value):
        r, c, v = edge_terms(value)
        return bool(((v == 0) | (v == 1)).all())

    @property
    def mean(self):
        w = self.weights
        if w.is_sparse:
            return w.to_sparse(torch.sigmoid(w.values))
        return torch.sigmoid(w.dense())

    def sample(self, sample_shape=torch.Size()):
        w = self.weights
        N = int(torch.Size(sample_shape).numel())
        with torch.no_grad():
            if w.is_sparse:
                p = torch.sigmoid(w.values.clamp(-MAX_LOGIT, MAX_LOGIT))
                draws = torch.bernoulli(p.expand(N, -1))
                return _stack_sparse(w.rows, w.cols, draws, w.n, sample_shape)
            check_dense(w.n, f"{N} dense graph draws", "Use sparse weights.", copies=N + 1)
            p = torch.sigmoid(w.dense().clamp(max=MAX_LOGIT))
            return torch.bernoulli(p.expand(*sample_shape, *p.shape)).to(torch.long)

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

    def __init__(self, base: BinaryGraph):
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
        super().__init__(weights)

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

    @property
    def mean(self):
        return BinaryGraph(self.weights).mean

    def sample(self, sample_shape=torch.Size()):
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

    def normaliser(self, value):
        self._with_near(value)
        return (row_sums(value, self.n).to(self._dtype()) * self.weights.row_logsumexp()).sum()

    def _dtype(self):
        w = self.weights
        return (w.values if w.is_sparse else w.Z if isinstance(w, KernelWeights) else w.log_w).dtype

    def in_support(self, value):
        rs = row_sums(value, self.n)
        return bool(torch.all(rs == 1))

    @property
    def mean(self):
        w = self.weights
        if w.is_sparse:
            lse = w.row_logsumexp()
            return w.to_sparse(torch.exp(w.values - lse[w.rows]))
        return torch.softmax(w.dense(), 1)

    def sample(self, sample_shape=torch.Size()):
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
            idx = torch.distributions.Categorical(logits=L).sample((N,))  # (N, n)
            W = torch.zeros(N, w.n, w.n, dtype=torch.long)
            W.scatter_(2, idx[:, :, None], 1)
            return W.view(*sample_shape, w.n, w.n)


class NEdgeGraph(GraphLaw):
    r"""E law: n edges in total, :math:`W \sim \mathcal M(n, w / w_{++})` over all off-diagonal
    cells (multi-edges allowed)."""

    prior = "E"

    def normaliser(self, value):
        self._with_near(value)
        return graph_total(value) * self.weights.total_logsumexp()

    def log_combinatorial(self, value):
        def compute():
            r, c, v = edge_terms(value)
            return math.lgamma(self.n + 1) - sum_lgamma1(v)
        return _cached(value, "_probdr_logcomb", compute) if value.is_sparse else compute()

    def in_support(self, value):
        return bool(graph_total(value) == self.n)

    @property
    def mean(self):
        w = self.weights
        if w.is_sparse:
            return w.to_sparse(self.n * torch.exp(w.values - w.total_logsumexp()))
        L = w.dense()
        return self.n * torch.exp(L - torch.logsumexp(L.flatten(), 0))

    def sample(self, sample_shape=torch.Size()):
        w = self.weights
        N = int(torch.Size(sample_shape).numel())
        with torch.no_grad():
            if not w.is_sparse:
                check_dense(w.n, f"{N} dense graph draws", "Use sparse weights.", copies=N + 1)
            logits = w.values if w.is_sparse else w.dense().flatten()
            probs = torch.softmax(logits.to(torch.float64), 0)
            # inverse-CDF sampling: torch.multinomial refuses more than 2^24 categories
            cdf = probs.cumsum(0)
            u = torch.rand(N, self.n, dtype=cdf.dtype) * cdf[-1]
            draws = torch.searchsorted(cdf, u).clamp_max(probs.numel() - 1)
            counts = torch.zeros(N, probs.numel(), dtype=torch.long)
            counts.scatter_add_(1, draws, torch.ones_like(draws))
            if w.is_sparse:
                return _stack_sparse(w.rows, w.cols, counts, w.n, sample_shape)
            return counts.view(*sample_shape, w.n, w.n)


def _gumbel(shape, dtype):
    u = torch.rand(shape, dtype=torch.float64).clamp(1e-300, 1.0)
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

