r"""Edge weights of a graph law: :math:`\log w_{ij} = \log \pi_{ij} + \log K_{ij}` (diagonal
excluded), in three representations of one law: :class:`DenseWeights` (n x n),
:class:`SparseWeights` (edge list; absent edges have weight 0) and :class:`KernelWeights`
(implicit :math:`\log k(\|z_i-z_j\|^2)` for all pairs, with exact normalisers and a hand-written
gradient), so the same law serves as the exact oracle and at scale (see :mod:`probdr.laws.graph`).
"""

from __future__ import annotations

import torch

from .. import config
from .._compute.allpairs import pair_reduce, pairwise_sq_distances
from .._compute.distributed import current_shard
from .._compute.edges import edge_log_kernel, edge_log_kernel_sum, optimiser_pair_grad_clip
from .._compute.isolation import fit_generator
from .._utils import tensor_cache
from ..config import check_dense
from .edge_lists import edge_terms

__all__ = ["Weights", "DenseWeights", "SparseWeights", "KernelWeights", "ReferenceWeights",
           "MAX_LOGIT", "sparse_to"]

NEG_INF = float("-inf")


def sparse_coo(indices, values, size, coalesced: bool = False):
    """Sparse COO tensor (invariant checks off: indices are built here, in range); with
    ``coalesced=True`` the indices are known sorted and unique, and are shared, not copied."""
    if coalesced:
        return torch.sparse_coo_tensor(indices, values, size, check_invariants=False,
                                       is_coalesced=True)
    return torch.sparse_coo_tensor(indices, values, size, check_invariants=False)


def sparse_to(S: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The sparse tensor ``S`` coalesced, its values cast to ``dtype``, sharing its indices
    (``S.to(dtype)`` copies them: gigabytes on a million-point graph)."""
    S = S.coalesce()
    return sparse_coo(S.indices(), S.values().to(dtype), S.shape, coalesced=True)


def _coalesced_off_diagonal(rows, cols, n: int) -> bool:
    """Whether the edge list is sorted by (row, col) without repeats and off the diagonal (the
    form ``coalesce`` returns), checked in blocks of edges to bound the temporaries."""
    m = rows.numel()
    if m == 0:
        return False
    step = 2**22
    for s in range(0, m, step):
        e = min(m, s + step + 1)
        r, c = rows[s:e], cols[s:e]
        if bool((r == c).any()):
            return False
        dr = r[1:] - r[:-1]
        if bool((dr < 0).any()) or bool(((dr == 0) & (c[1:] <= c[:-1])).any()):
            return False
    return True
#: logits are clamped here so that probability-1 edges (UMAP's nearest neighbour) stay finite
MAX_LOGIT = 50.0


# --------------------------------------------------------------------------------------------
# weights
# --------------------------------------------------------------------------------------------
class Weights:
    """Log edge weights of a graph law over n nodes, diagonal excluded."""

    n: int
    is_sparse = False
    #: the part of its log-probability that a law on these weights carries: 1, or a rank's
    #: share in a data-parallel fit (:class:`KernelWeights`)
    share = 1.0

    def log_at(self, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def weighted_sum_at(self, rows, cols, v) -> torch.Tensor:
        """:math:`\\sum_e v_e \\log w_{r_e c_e}` (terms with :math:`v_e = 0` are dropped)."""
        lw = self.log_at(rows, cols)
        return torch.where(v > 0, v.to(lw.dtype) * lw, torch.zeros_like(lw)).sum()

    def dense(self) -> torch.Tensor:
        raise NotImplementedError

    # the normalisers; ``near``: an observed graph's pairs (:func:`~probdr.laws.edge_lists.near_pairs`)
    # that a Monte Carlo normaliser sums exactly (:class:`KernelWeights`); exact ones ignore it
    def row_logsumexp(self, near=None) -> torch.Tensor:
        return torch.logsumexp(self.dense(), 1)

    def total_logsumexp(self, near=None) -> torch.Tensor:
        return torch.logsumexp(self.dense().flatten(), 0)

    def sum_softplus(self, near=None) -> torch.Tensor:
        return torch.nn.functional.softplus(self.dense()).sum()

    def with_log_prior(self, log_pi) -> Weights:
        """Weights :math:`\\log \\pi + \\log K` (Proposition 1)."""
        raise NotImplementedError


def _mask_diag(M: torch.Tensor) -> torch.Tensor:
    M = M.clone()
    M.diagonal(dim1=-2, dim2=-1).fill_(NEG_INF)
    return M


class DenseWeights(Weights):
    """Dense ``(n, n)`` log-weights; the diagonal is set to ``-inf``."""

    def __init__(self, log_w: torch.Tensor):
        if log_w.ndim != 2 or log_w.shape[0] != log_w.shape[1]:
            raise ValueError(f"log-weights must be square (n, n), got {tuple(log_w.shape)}.")
        check_dense(log_w.shape[0], "a dense graph law", "Use sparse (edge-list) weights.")
        self.log_w = _mask_diag(log_w)
        self.n = log_w.shape[0]

    def log_at(self, rows, cols):
        return self.log_w[rows, cols]

    def dense(self):
        return self.log_w

    def with_log_prior(self, log_pi):
        return DenseWeights(self.log_w + _as_dense_log_pi(log_pi, self.n, self.log_w))


class SparseWeights(Weights):
    """Edge-list log-weights: ``rows``, ``cols``, ``values`` (absent pairs have weight 0)."""

    is_sparse = True

    def __init__(self, rows, cols, values, n: int):
        if _coalesced_off_diagonal(rows, cols, n):  # e.g. kNN lists sorted within rows: no copy
            self.indices = torch.stack([rows, cols])
            self.values = values
        else:
            keep = rows != cols
            t = sparse_coo(torch.stack([rows[keep], cols[keep]]), values[keep], (n, n)).coalesce()
            self.indices, self.values = t.indices(), t.values()
        self.rows, self.cols = self.indices  # views: the sparse tensors below share them
        self.n = n

    @classmethod
    def from_sparse(cls, S: torch.Tensor, log: bool = False):
        S = S.coalesce()
        v = S.values() if log else torch.log(S.values())
        return cls(S.indices()[0], S.indices()[1], v, S.shape[0])

    def log_at(self, rows, cols):  # pragma: no cover - rarely needed
        D = self.dense()
        return D[rows, cols]

    def dense(self):
        check_dense(self.n, "densifying a sparse graph law", "Work with the edge list.")
        D = torch.full((self.n, self.n), NEG_INF, dtype=self.values.dtype)
        D[self.rows, self.cols] = self.values
        return D

    def row_logsumexp(self, near=None):
        m = torch.full((self.n,), NEG_INF, dtype=self.values.dtype)
        m = m.scatter_reduce(0, self.rows, self.values, "amax")
        m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        s = torch.zeros(self.n, dtype=self.values.dtype).index_add(
            0, self.rows, torch.exp(self.values - m_safe[self.rows]))
        return torch.log(s) + m_safe

    def total_logsumexp(self, near=None):
        return torch.logsumexp(self.values, 0)

    def sum_softplus(self, near=None):
        return torch.nn.functional.softplus(self.values).sum()

    def with_log_prior(self, log_pi):
        if log_pi is None:
            return self
        if hasattr(log_pi, "log_at"):  # an edge-prior object evaluated on the edge list
            lp = log_pi.log_at(self.rows, self.cols).to(self.values.dtype)
        elif isinstance(log_pi, torch.Tensor) and log_pi.is_sparse:
            lp = _sparse_lookup(log_pi.coalesce(), self.rows, self.cols, self.n)
        else:  # (n, n), or a scalar: the same on every pair
            lp = _as_dense_log_pi(log_pi, self.n, self.values)
            lp = lp if lp.ndim == 0 else lp[self.rows, self.cols]
        return SparseWeights(self.rows, self.cols, self.values + lp, self.n)

    def to_sparse(self, values=None):
        """The sparse COO tensor of the edge list (coalesced; it shares the index tensor)."""
        v = self.values if values is None else values
        return sparse_coo(self.indices, v, (self.n, self.n), coalesced=True)


class KernelWeights(Weights):
    r"""Implicit weights :math:`\log w_{ij} = \log\pi_{ij} + \log k(\|z_i - z_j\|^2)` for all pairs.

    Edge terms are evaluated only where the observed graph has edges. The all-pairs normalisers
    are computed according to ``normaliser``:

    * ``"exact"`` -- every pair, blocked, hand-written gradient (:math:`O(n^2)` per step);
    * ``"fft"`` -- grid interpolation + FFT, :math:`O(n)`, in 2-D: the E law's normaliser
      (Student kernels: t-SNE) and the B law's :math:`\sum \log(1 + w_{ij})` (any fixed kernel:
      the pairs within a few grid spacings summed exactly, :mod:`probdr._compute.pair_field`);
    * ``"sampled"`` -- Monte Carlo: ``n_samples`` uniform partners per node,
      :math:`\hat S_i = \frac{n-1}{m}\sum_{k} w_{ik}` (a consistent, slightly biased estimate of
      the log-normaliser; unbiased for the B law's sum).

    With a ``shard`` (a rank of a data-parallel fit, :mod:`probdr._compute.distributed`; by
    default the shard current where the weights are made, inside such a fit) the edge sums
    and the normalisers return this rank's *share*, the shares of all ranks summing to the
    value: :meth:`weighted_sum_at` sums the rank's chunk of the edges; :meth:`row_logsumexp`
    gives the rank's block of rows (0 elsewhere); :meth:`sum_softplus` sums the pairs of the
    rank's rows; :meth:`total_logsumexp` combines the ranks' partial sums by an all-reduce and
    returns ``1 / world_size`` of the log-total. The Monte Carlo normalisers are not split: each
    rank computes them whole and carries ``1 / world_size`` (:attr:`share`) of them; so does a
    law of these weights with its combinatorial constant. :meth:`observed_edges` gives the
    rank's chunk of an observed graph's edges and :attr:`generator` its random stream.
    """

    NORMALISERS = ("exact", "fft", "sampled")

    def __init__(self, Z: torch.Tensor, kernel, log_pi: torch.Tensor | float | None = None,
                 normaliser: str = "exact", n_samples: int = 10,
                 pair_grad_clip: float | None = None, shard=None):
        if normaliser not in self.NORMALISERS:
            raise ValueError(f"normaliser must be one of {self.NORMALISERS}, got {normaliser!r}.")
        if kernel.sites():
            raise ValueError(f"the kernel's parameters {sorted(kernel.sites())} are latent sites "
                             "(Learn): draw them first, kernel.sampled() inside a Pyro model.")
        self.Z, self.kernel, self.n = Z, kernel, Z.shape[0]
        #: :math:`\log\pi`: None, a 0-d tensor (the same on every pair) or ``(n, n)``; a number
        #: is taken as a 0-d tensor
        self.log_pi = log_pi if log_pi is None or isinstance(log_pi, torch.Tensor) else \
            torch.as_tensor(log_pi, dtype=Z.dtype)
        self.normaliser, self.n_samples = normaliser, int(n_samples)
        #: clamp each pair's gradient (w.r.t. z_i - z_j) to [-c, c], as umap-learn does: given,
        #: or the optimiser's where a handler of the driver sets it (a Pyro effect)
        self.pair_grad_clip = pair_grad_clip if pair_grad_clip is not None \
            else optimiser_pair_grad_clip()
        #: this rank's shard in a data-parallel fit (None: the whole sums)
        self.shard = shard if shard is not None else current_shard()

    @property
    def share(self) -> float:
        return 1.0 if self.shard is None else self.shard.share

    @property
    def generator(self) -> torch.Generator | None:
        """The random stream of draws that differ between the ranks of a data-parallel fit
        (``None``: torch's global stream): the shard's, else the fit's
        (:func:`probdr._compute.isolation.fit_generator`)."""
        return fit_generator() if self.shard is None else self.shard.generator

    def observed_edges(self, W: torch.Tensor):
        """The off-diagonal edges of an observed graph ``W`` as ``(rows, cols, values, largest
        value)``, the values in Z's dtype (cached on ``W``); in a data-parallel fit this rank's
        chunk of them (the largest value is over all)."""
        def compute():
            rows, cols, v = edge_terms(W)
            keep = rows != cols
            v = v[keep].to(self.Z.dtype)
            return rows[keep], cols[keep], v, float(v.max())
        rows, cols, v, vmax = tensor_cache(W, "_probdr_ns_edges", compute)
        if self.shard is not None:
            rows, cols, v = self.shard.chunk(rows, cols, v)
        return rows, cols, v, vmax

    def weighted_sum_at(self, rows, cols, v):
        if self.shard is not None:
            rows, cols, v = self.shard.chunk(rows, cols, v)
        # fused gather / kernel / scatter with a hand-written gradient (about 2x autograd's speed
        # on kNN graphs); the edge prior, constant in Z, is added by autograd
        out = edge_log_kernel_sum(self.Z, rows, cols, v, self.kernel, self.pair_grad_clip)
        if self.log_pi is not None:
            lp = self._log_pi_at(rows, cols).to(out.dtype)
            out = out + torch.where(v > 0, v.to(out.dtype) * lp, torch.zeros_like(lp)).sum()
        return out

    def log_at(self, rows, cols):
        # fused gather / kernel with a hand-written, deterministic gradient
        lw = edge_log_kernel(self.Z, rows, cols, self.kernel, self.pair_grad_clip)
        if self.log_pi is not None:
            lw = lw + self._log_pi_at(rows, cols).to(lw.dtype)
        return lw

    def _log_pi_at(self, rows, cols):
        """The edge prior at the pairs (a scalar prior is the same on every pair)."""
        return self.log_pi if self.log_pi.ndim == 0 else self.log_pi[rows, cols]

    def dense(self):
        check_dense(self.n, "the dense latent kernel matrix",
                    "Evaluate on an edge list (log_at) or use the normalisers.", copies=2)
        lw = self.kernel.log_k(pairwise_sq_distances(self.Z))
        if self.log_pi is not None:
            lw = lw + self.log_pi.to(lw.dtype)
        return _mask_diag(lw)

    # -- stratified Monte Carlo normalisers ---------------------------------------------------
    # near field: the observed graph's pairs (symmetrised; ``near``, given by the law that
    # observes the graph), summed exactly; far field: uniform partners, rejected when near,
    # reweighted by the number of far pairs.
    def _far_samples(self, near=None):
        m, n = self.n_samples, self.n
        rows = torch.arange(n).repeat_interleave(m)
        cols = (rows + torch.randint(1, n, (rows.numel(),), generator=self.generator)) % n
        far = torch.ones(rows.numel(), dtype=torch.bool)
        n_far_row = torch.full((n,), float(n - 1), dtype=self.Z.dtype)
        if near is not None:
            keys, deg = near[2], near[3]
            q = rows * n + cols
            pos = torch.searchsorted(keys, q).clamp_max(keys.numel() - 1)
            far = keys[pos] != q
            n_far_row = n_far_row - deg.to(self.Z.dtype)
        return rows, cols, far, n_far_row

    def _near_log_w(self, near=None):
        if near is None:
            return None, None, None
        r, c = near[0], near[1]
        return r, c, self.log_at(r, c)

    def _rows(self):
        return None if self.shard is None else self.shard.block(self.n)

    def _replicated(self, value):
        return value if self.shard is None else value * self.share

    def row_logsumexp(self, near=None):
        if self.normaliser == "sampled":
            return self._replicated(self._sampled_row_logsumexp(near))
        if self.normaliser == "fft":
            raise ValueError("the FFT normaliser covers the E law (t-SNE) and the B law (UMAP, "
                             "LargeVis); use repulsion='sampled' or 'exact' for the D law.")
        rows = self._rows()
        out = pair_reduce(self.Z, "row", self.kernel, self.log_pi, rows)
        if rows is not None:  # the rank's block of rows; 0 elsewhere
            out = torch.nn.functional.pad(out, (rows[0], self.n - rows[1]))
        return out

    def _sampled_row_logsumexp(self, near):
        n, m = self.n, self.n_samples
        rows, cols, far, n_far = self._far_samples(near)
        lw = self.log_at(rows, cols).masked_fill(~far, NEG_INF).view(n, m)
        hits = far.view(n, m).sum(1).clamp_min(1).to(lw.dtype)
        parts = [torch.logsumexp(lw, 1) + torch.log(n_far.clamp_min(1e-12) / hits)]
        r, _, lwn = self._near_log_w(near)
        if r is not None:
            mx = torch.full((n,), NEG_INF, dtype=lwn.dtype).scatter_reduce(
                0, r, lwn.detach(), "amax")
            mx = torch.where(torch.isfinite(mx), mx, torch.zeros_like(mx))
            s = torch.zeros(n, dtype=lwn.dtype).index_add(0, r, torch.exp(lwn - mx[r]))
            parts.append(torch.log(s) + mx)
        return torch.logsumexp(torch.stack(parts), 0)

    def total_logsumexp(self, near=None):
        if self.normaliser == "sampled":
            return self._replicated(self._sampled_total_logsumexp(near))
        rows = self._rows()
        if self.normaliser == "fft":
            from .._compute.fft import kernel_log_total

            k = self.kernel
            if not (k.has_fft and self.log_pi is None and self.Z.shape[1] == 2):
                raise ValueError("repulsion='fft' needs a Student kernel (t-SNE's, any dof and "
                                 "scale), a 2-D embedding and no latent edge prior; use "
                                 "'sampled'.")
            if rows is None:
                return kernel_log_total(self.Z, k)
            partial = kernel_log_total(self.Z, k, rows=rows, reduce=self.shard.all_reduce_)
        elif rows is None:
            return pair_reduce(self.Z, "total", self.kernel, self.log_pi)
        else:
            partial = pair_reduce(self.Z, "total", self.kernel, self.log_pi, rows)
        return self.shard.logsumexp(partial) * self.shard.share

    def _sampled_total_logsumexp(self, near):
        rows, cols, far, n_far = self._far_samples(near)
        lw = self.log_at(rows, cols)
        if config.sync_free_for(lw.device):  # the near samples at weight 0: fixed shapes
            lw, hits = lw.masked_fill(~far, NEG_INF), far.sum().clamp_min(1)
        else:
            lw = lw[far]
            hits = max(lw.numel(), 1)
        parts = [torch.logsumexp(lw, 0) + torch.log(n_far.sum() / hits)]
        r, _, lwn = self._near_log_w(near)
        if r is not None:
            parts.append(torch.logsumexp(lwn, 0))
        return torch.logsumexp(torch.stack(parts), 0)

    def sum_softplus(self, near=None):
        if self.normaliser == "sampled":
            return self._replicated(self._sampled_sum_softplus(near))
        if self.normaliser == "fft":
            return self._replicated(self._field_sum_softplus())
        return pair_reduce(self.Z, "softplus", self.kernel, self.log_pi, self._rows())

    def _field_sum_softplus(self):
        """The B law's :math:`\\sum_{i \\ne j} \\log(1 + w_{ij})` from the points' own field
        (:func:`probdr._compute.pair_field.pair_sum`, 2-D, fixed kernel, no edge prior)."""
        from .._compute.pair_field import kernel_length, non_edge_term, pair_sum

        if self.Z.ndim != 2 or self.Z.shape[1] != 2 or self.log_pi is not None \
                or self.kernel.learnable():
            raise ValueError("repulsion='fft' for the B law needs a 2-D embedding, a fixed kernel "
                             "(no learned numbers) and no latent edge prior; use 'sampled' or "
                             "'exact'.")
        kernel = self.kernel
        return -pair_sum(self.Z, non_edge_term(kernel), kernel_length(kernel))

    def _sampled_sum_softplus(self, near):
        rows, cols, far, n_far = self._far_samples(near)
        sp = torch.nn.functional.softplus(self.log_at(rows, cols))
        if config.sync_free_for(sp.device):  # the near samples at weight 0: fixed shapes
            out = (sp * far).sum() / far.sum().clamp_min(1) * n_far.sum()
        else:
            sp = sp[far]
            out = sp.mean() * n_far.sum() if sp.numel() else self.Z.new_zeros(())
        r, _, lwn = self._near_log_w(near)
        if r is not None:
            out = out + torch.nn.functional.softplus(lwn).sum()
        return out

    def with_log_prior(self, log_pi):
        if log_pi is None:
            return self
        lp = _as_dense_log_pi(log_pi, self.n, self.Z)
        return KernelWeights(self.Z, self.kernel, lp if self.log_pi is None else self.log_pi + lp,
                             self.normaliser, self.n_samples, self.pair_grad_clip, self.shard)


class ReferenceWeights(Weights):
    r"""The weights of new nodes' rows against ``n`` reference nodes pinned at ``Z_ref``:
    :math:`\log w_{ij} = \log k(\|z_i - z^{\rm ref}_j\|^2)`, :math:`i` over the ``m`` new
    nodes at ``Z`` (``(..., m, q)``; leading dimensions a batch of positions, e.g. a sampler's
    proposals), :math:`j` over the reference nodes (a fitted embedding, held fixed).

    A law on these weights scores the new rows alone (:meth:`GraphLaw.rows_log_prob`): each
    normaliser is per new row, ``(..., m)``, over the reference nodes only (the new nodes are
    independent given the reference). ``field``: in 2-D, the reference points' field, computed
    once for many evaluations -- :class:`~probdr._compute.fft.CauchyField` (the row
    log-normaliser of the Cauchy kernel, interpolated) or
    :class:`~probdr._compute.pair_field.ReferenceField` of :math:`-\log(1 + w)` (near pairs
    exact, the far part interpolated); ``None``: every pair is summed.
    """

    def __init__(self, Z: torch.Tensor, Z_ref: torch.Tensor, kernel, field=None):
        self.Z, self.Z_ref, self.kernel, self.field = Z, Z_ref, kernel, field
        self.n, self.m = Z_ref.shape[0], Z.shape[-2]

    def log_at(self, rows, cols):
        r""":math:`\log w` at (new row, reference column) pairs, ``(..., len(rows))``."""
        return self.kernel.log_k((self.Z[..., rows, :] - self.Z_ref[cols]).square().sum(-1))

    def row_sums(self, rows, v, batched: bool = True):
        r""":math:`\sum_e v_e` per new row (``rows`` in ``[0, m)``), ``(..., m)`` (``(m,)``
        unless ``batched``)."""
        lead = self.Z.shape[:-2] if batched else ()
        return torch.zeros(*lead, self.m, dtype=self.Z.dtype).index_add_(-1, rows, v)

    def _sq_distances(self):
        m, q = self.Z.shape[-2:]
        return pairwise_sq_distances(self.Z.reshape(-1, q), self.Z_ref).reshape(
            *self.Z.shape[:-2], m, -1)

    def row_logsumexp(self, near=None):
        r""":math:`\log \sum_j w_{ij}` per new row, ``(..., m)``."""
        if self.field is not None:
            return self.field.log_sum(self.Z)
        d2 = self._sq_distances()
        if self.kernel.heavy_tailed:  # no underflow: sum the kernel itself
            return torch.log(self.kernel.k_and_dlog_k(d2)[0].sum(-1))
        return torch.logsumexp(self.kernel.log_k(d2), dim=-1)

    def row_sum_softplus(self):
        r""":math:`\sum_j \log(1 + w_{ij})` per new row, ``(..., m)``."""
        if self.field is not None:
            return -self.field.sum(self.Z)
        d2 = self._sq_distances()
        if self.kernel.heavy_tailed:
            return torch.log1p(self.kernel.k_and_dlog_k(d2)[0]).sum(-1)
        return torch.nn.functional.softplus(self.kernel.log_k(d2)).sum(-1)


def _as_dense_log_pi(log_pi, n, like):
    if log_pi is None:
        return torch.zeros((), dtype=like.dtype)
    if hasattr(log_pi, "log_at"):
        return log_pi.dense(n).to(like.dtype)
    if isinstance(log_pi, torch.Tensor) and log_pi.is_sparse:
        log_pi = log_pi.to_dense()
    lp = torch.as_tensor(log_pi, dtype=like.dtype)
    if lp.ndim != 0 and tuple(lp.shape) != (n, n):
        raise ValueError(f"edge prior must be a scalar or ({n}, {n}), got {tuple(lp.shape)}.")
    return lp


def _sparse_lookup(S: torch.Tensor, rows, cols, n):
    """Values of coalesced sparse ``S`` at (rows, cols); 0 where absent."""
    keys = S.indices()[0] * n + S.indices()[1]
    q = rows * n + cols
    pos = torch.searchsorted(keys, q).clamp_max(max(keys.numel() - 1, 0))
    hit = keys.numel() > 0 and True
    out = torch.zeros(q.shape, dtype=S.values().dtype)
    if hit:
        found = keys[pos] == q
        out[found] = S.values()[pos[found]]
    return out


