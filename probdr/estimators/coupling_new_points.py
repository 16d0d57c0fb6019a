r"""New points in a fitted graph coupling (SNE, t-SNE, LargeVis, UMAP, GraphCoupling, SNEkhorn): ``transform`` (MAP) and ``sample_transform``
(draws from each new point's conditional posterior).

The model is :mod:`probdr.models.out_of_sample`: each new point is a new node whose input row
against the training points is closed-form (same calibration as in ``fit``) and whose position,
given the fitted embedding, has the density :math:`p(z_i) e^{\beta \ell_i(z_i)}`. The problem
factorises over new points, so both are computed in batches of rows:

* ``transform``: MAP through the one driver (:func:`probdr.infer.map.run_map`, Adam with a linear
  decay to 0) from the neighbour-weighted start :math:`\sum_j p_{ij} z_j / p_{i+}` (umap-learn's
  and openTSNE's ``"weighted"`` start);
* ``sample_transform``: exact per-point Markov chains (vectorised random-walk Metropolis, two
  chains per point started at the MAP, the step size of each point adapted during warm-up towards
  an acceptance rate of 0.35), under a proper prior.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .._compute.fft import CauchyField
from .._compute.pair_field import ReferenceField, kernel_length, non_edge_term
from .._utils import check_number, generator
from ..infer.map import Phase, run_map
from ..infer.metropolis import random_walk_metropolis
from ..input.neighbors import knn_query
from ..models.out_of_sample import new_point_log_likelihood, new_points_model
from .fitted import FittedCoupling

__all__ = ["auto_coupling_weight", "attraction_mass", "NewPoints", "check_n_iter",
           "check_sampling_options"]

#: transform's Adam learning rate, in units of the embedding's median nearest-neighbour distance
#: (decaying linearly to 0 over ``n_iter`` steps). On mnist5k (4,000 fitted, 1,000 placed),
#: 100 steps at 2 reach the 5-NN accuracy of 250 steps at 0.5 (t-SNE 0.915, UMAP 0.921; measured
#: with benchmarks/transform.py's data)
TRANSFORM_LR = 2.0
#: pairs (new point x reference point) per batch of rows
BATCH_PAIRS = 2**22
#: with ``z_prior=None`` the draws use an isotropic Gaussian prior centred on the embedding with
#: this many times its RMS spread as scale (weak, but proper)
SAMPLE_PRIOR_SCALE = 10.0
#: with at least this many training points, 2-D new points take their all-pairs sums from the
#: training points' field, built once per call: the normaliser of Cauchy rows
#: (:class:`probdr._compute.fft.CauchyField`), the non-edge sum of Bernoulli rows
#: (:class:`probdr._compute.pair_field.ReferenceField`)
FIELD_MIN_N = 1000


def check_n_iter(n_iter) -> None:
    """``transform``'s ``n_iter``: an integer >= 0."""
    check_number(n_iter, "n_iter", integer=True, low=0)


def _batches(m: int, n: int, chains: int = 1):
    size = max(1, BATCH_PAIRS // max(n * chains, 1))
    for s in range(0, m, size):
        yield s, min(m, s + size)


def _nn_scale(Z: torch.Tensor, gen: torch.Generator) -> float:
    """Median distance of (up to 1,000 sampled) points to their nearest distinct point (1 if
    all points coincide)."""
    n = Z.shape[0]
    sample = torch.randperm(n, generator=gen)[: min(n, 1000)]
    idx, d2 = knn_query(Z, Z[sample], min(n, 16))
    # other points only (the expansion leaves a rounding residue on a point's own distance),
    # and distinct ones (duplicates are at distance 0)
    other = (idx != sample[:, None]) & (d2 > 1e-12 * float(d2.max().clamp_min(1e-300)))
    d2 = torch.where(other, d2, torch.full_like(d2, float("inf"))).amin(1)
    d2 = d2[torch.isfinite(d2)]
    return float(d2.sqrt().median()) if d2.numel() else 1.0


def auto_coupling_weight(kernel, n_components: int, mass) -> float:
    r"""The automatic coupling weight (inverse temperature) :math:`\beta` of the posterior.

    The tail argument of :mod:`probdr.infer.posterior`: far from its neighbours a point's
    likelihood decays like :math:`k(d^2)^{\beta m_i} \sim d^{-2\beta m_i\tau}`, where
    :math:`m_i` is its attraction mass (the observed graph's weight on its edges) and
    :math:`\tau` the kernel's tail index (1 for t-SNE's Cauchy kernel, :math:`b` for UMAP's
    curve, :math:`\infty` for the Gaussian). Its posterior variance in :math:`q` dimensions is
    finite when :math:`2\beta m_i\tau > q + 2`; the automatic weight doubles that bound for the
    least attached point, :math:`\beta = \max(1, (q + 2)/(\tau \min_i m_i))` (4 for 2-D
    t-SNE's new points, whose rows have mass 1), and is 1 for light-tailed kernels."""
    tau = float(getattr(kernel, "tail_index", float("inf")))
    m = float(torch.as_tensor(mass).min()) if torch.as_tensor(mass).numel() else 1.0
    if not math.isfinite(tau) or m <= 0:
        return 1.0
    return max(1.0, (n_components + 2.0) / (tau * m))


def attraction_mass(W: torch.Tensor) -> torch.Tensor:
    r"""Each node's attraction mass :math:`m_i = \sum_{j \ne i} (W_{ij} + W_{ji})` in an observed
    graph (dense or sparse)."""
    W = W.coalesce() if W.is_sparse else W
    if W.is_sparse:
        (r, c), v = W.indices(), W.values().double()
        keep = r != c
        mass = torch.zeros(W.shape[0], dtype=torch.float64)
        return mass.index_add_(0, r[keep], v[keep]).index_add_(0, c[keep], v[keep])
    Wd = W.double().clone()
    Wd.fill_diagonal_(0.0)
    return Wd.sum(0) + Wd.sum(1)


class NewPoints:
    """New points in a fitted graph coupling: MAP positions (:meth:`place`, ``transform``) and
    draws from their conditional posteriors (:meth:`sample`, ``sample_transform``), given the
    fitted embedding ``embedding`` (numpy, ``(n, q)``), the fitted coupling (its kernel and its
    row model), the fit's dtype and the estimator's ``coupling_weight`` and ``z_prior``."""

    def __init__(self, coupling: FittedCoupling, embedding: np.ndarray, dtype, *,
                 coupling_weight, z_prior, verbose: bool = False, name: str = "GraphCoupling"):
        self.coupling, self.kernel = coupling, coupling.kernel
        self.embedding, self.n_components = embedding, embedding.shape[1]
        self.dtype, self.coupling_weight, self.z_prior = dtype, coupling_weight, z_prior
        self.verbose, self.name = verbose, name

    def field(self, Z_ref: torch.Tensor):
        """The training points' field for new points in 2-D with at least ``FIELD_MIN_N``
        training points: for categorical rows with the Cauchy kernel, the interpolated
        normaliser (:class:`~probdr._compute.fft.CauchyField`); for Bernoulli rows (UMAP,
        LargeVis; any kernel), the non-edge sum's near pairs and far field
        (:class:`~probdr._compute.pair_field.ReferenceField`). ``None`` otherwise."""
        k = self.kernel
        n, q = Z_ref.shape
        if q != 2 or n < FIELD_MIN_N:
            return None
        row_law = self.coupling.row_model(n)[0]
        if row_law == "bernoulli":
            return ReferenceField(Z_ref, non_edge_term(k), kernel_length(k))
        if getattr(k, "name", "") == "student" and getattr(k, "dof", None) == 1.0:
            return CauchyField(Z_ref.to(torch.float64))
        return None

    def batch_kwargs(self, P: torch.Tensor, s: int, e: int, Z_ref: torch.Tensor, dtype,
                     field=None) -> dict:
        """The arguments of :func:`~probdr.models.out_of_sample.new_points_model` for the new
        points ``s:e`` (their rows of ``P``)."""
        n = Z_ref.shape[0]
        row_law, factor = self.coupling.row_model(n)
        Pb = P.index_select(0, torch.arange(s, e)).coalesce()
        (rows, cols), vals = Pb.indices(), Pb.values().to(dtype)
        omega = None
        if factor is not None:
            omega = factor * torch.zeros(e - s, dtype=dtype).index_add_(0, rows, vals)
        return dict(edges=(rows, cols, vals), Z_ref=Z_ref, kernel=self.kernel,
                    n_components=self.n_components, n_new=e - s, row_law=row_law,
                    nonedge_weight=omega, coupling_weight=self.weight(vals, rows, e - s),
                    field=field)

    def weight(self, vals: torch.Tensor, rows: torch.Tensor, m: int) -> float:
        """``coupling_weight`` for new points; ``"auto"``: the tail rule
        (:func:`auto_coupling_weight`) on the new rows' masses."""
        cw = self.coupling_weight
        if not (isinstance(cw, str) and cw == "auto"):
            return float(cw)
        mass = torch.zeros(m, dtype=torch.float64).index_add_(0, rows, vals.double())
        return auto_coupling_weight(self.kernel, self.n_components, mass)

    def place(self, P: torch.Tensor, match: torch.Tensor, n_iter: int,
              field=False) -> torch.Tensor:
        """MAP positions of new points from their input rows (training matches keep their fitted
        positions), ``(m, q)`` in the fit's dtype. ``field``: the training points' field if
        the caller has built it (``False``: build it here when it applies)."""
        dtype = self.dtype
        Z_ref = torch.as_tensor(self.embedding).to(dtype)
        out = self.weighted_start(P, Z_ref)
        new = (match < 0).nonzero().flatten()
        if n_iter > 0 and new.numel():
            P = P.index_select(0, new).coalesce()
            Z0 = out[new]
            lr = TRANSFORM_LR * _nn_scale(Z_ref, generator(0))
            if field is False:
                field = self.field(Z_ref)
            n_pairs = 1 if field is not None else Z_ref.shape[0]  # per new point and step
            for s, e in _batches(Z0.shape[0], n_pairs):
                kw = self.batch_kwargs(P, s, e, Z_ref, dtype, field)
                kw["z_prior"] = self.prior(e - s, dtype, for_map=True)
                res = run_map(new_points_model, kw, Z0[s:e],
                              [Phase(n_iter, lr, final_learning_rate=0.0, name="transform")],
                              optimizer="adam", collapse_floor=None, warn_collapse=False,
                              verbose=self.verbose, desc=f"{self.name}.transform")
                out[new[s:e]] = res.Z
        seen = match >= 0
        out[seen] = Z_ref[match[seen]]
        return out

    @staticmethod
    def weighted_start(P: torch.Tensor, Z_ref: torch.Tensor) -> torch.Tensor:
        """:math:`\\sum_j p_{ij} z_j / p_{i+}`: the neighbour-weighted start."""
        Pf = P.to(Z_ref.dtype)
        num = torch.sparse.mm(Pf, Z_ref)
        return num / torch.sparse.sum(Pf, 1).to_dense().clamp_min(1e-300)[:, None]

    def prior(self, m: int, dtype, *, for_map: bool):
        """The prior on new points' positions: flat for MAP unless ``z_prior`` is a scale; for
        draws an isotropic Gaussian (``z_prior`` a scale, else centred on the embedding with
        ``SAMPLE_PRIOR_SCALE`` times its RMS spread)."""
        import pyro.distributions as dist

        zp = self.z_prior
        if zp is None and for_map:
            return None
        q = self.n_components
        if zp is None:
            Z = self.embedding
            loc = torch.as_tensor(Z.mean(0), dtype=dtype).expand(m, q)
            scale = SAMPLE_PRIOR_SCALE * float(np.sqrt(((Z - Z.mean(0)) ** 2).sum(1).mean() / q))
        elif isinstance(zp, (int, float)):
            loc, scale = torch.zeros(m, q, dtype=dtype), float(zp)
        else:
            raise ValueError(
                "z_prior is a distribution over the training embedding (n, q); it does not "
                "extend to new points. Pass a float scale as z_prior (or None) to place new "
                "points.")
        return dist.Normal(loc, torch.tensor(scale, dtype=dtype)).to_event(2)

    def sample(self, P: torch.Tensor, match: torch.Tensor, num_samples: int, num_warmup: int,
               thin: int, n_iter: int, seed: int) -> tuple[torch.Tensor, int]:
        """Draws ``(num_samples, m, q)`` (the fit's dtype) from each new point's conditional
        posterior by :func:`~probdr.infer.metropolis.random_walk_metropolis`, started at the
        MAP (:meth:`place`), and the number of points whose acceptance rate stayed below 5 %."""
        dtype = self.dtype
        field = self.field(torch.as_tensor(self.embedding))  # built once, for both steps
        Z_map = self.place(P, match, int(n_iter), field)
        Z_ref = torch.as_tensor(self.embedding).to(dtype)
        gen = generator(seed)
        m, q = Z_map.shape
        draws = torch.empty(num_samples, m, q, dtype=dtype)
        low_accept = 0
        for s, e in _batches(m, 1 if field is not None else Z_ref.shape[0], chains=2):
            kw = self.batch_kwargs(P, s, e, Z_ref, dtype, field)
            prior = self.prior(e - s, dtype, for_map=False).base_dist
            beta = float(kw["coupling_weight"])

            def log_density(Z, kw=kw, prior=prior, beta=beta):
                ll = new_point_log_likelihood(Z, kw["edges"], Z_ref, self.kernel, kw["row_law"],
                                              kw["nonedge_weight"], kw["field"])
                return beta * ll + prior.log_prob(Z).sum(-1)

            d, acc = random_walk_metropolis(log_density, Z_map[s:e], num_samples, num_warmup,
                                            thin, gen, _nn_scale(Z_ref, gen))
            draws[:, s:e] = d
            low_accept += int((acc < 0.05).sum())
        return draws, low_accept


def check_sampling_options(num_samples, num_warmup, thin, n_iter) -> None:
    """``sample_transform``'s counts: integers, at least 1 (``num_warmup``, ``n_iter``: 0)."""
    for name, v, lo in (("num_samples", num_samples, 1), ("num_warmup", num_warmup, 0),
                        ("thin", thin, 1)):
        if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= lo):
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}.")
    check_n_iter(n_iter)
