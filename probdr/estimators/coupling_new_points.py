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
import warnings

import numpy as np
import torch
from sklearn.utils.metadata_routing import UNUSED

from .._compute.fft import CauchyField
from .._compute.pair_field import ReferenceField, kernel_length, non_edge_term
from .._utils import check_number, generator
from ..infer.map import Phase, run_map
from ..infer.metropolis import random_walk_metropolis
from ..input.neighbors import knn_query
from ..models.out_of_sample import new_point_log_likelihood, new_points_model
from .base import in_fit_environment

__all__ = ["auto_coupling_weight", "attraction_mass", "NewPointsMixin"]

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


def _check_n_iter(n_iter) -> None:
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


class NewPointsMixin:
    """``transform`` and ``sample_transform`` of the graph-coupling estimators."""

    #: ``transform``'s ``n_iter`` is an option, not metadata that a meta-estimator routes:
    #: scikit-learn then adds no ``set_transform_request`` method
    __metadata_request__transform = {"n_iter": UNUSED}

    # -- the model of a new row ---------------------------------------------------------------
    def _row_model(self, n: int) -> tuple[str, float | None]:
        """``(row_law, nonedge weight factor)``: the factor multiplies :math:`p_{i+}` (the
        fitted coupling's, :meth:`~probdr.estimators.fitted.FittedCoupling.row_model`)."""
        return self._fitted_coupling().row_model(n)

    def _new_rows(self, X_new) -> tuple[torch.Tensor, torch.Tensor]:
        """The new points' input rows and, for each, the index of a training point it is (-1
        if none): the fit's input side (:class:`probdr.input.InputGraph`), which keeps the
        calibration and the reference points (with a precomputed input, ``X_new`` holds the new
        points' distances or affinities to the training points). ``X_new``: validated by
        ``_validate_new``, not scanned again."""
        side = self._fitted_input()
        return side.rows(X_new, validated=True), side.matches(X_new, validated=True)

    def _field(self, Z_ref: torch.Tensor):
        """The training points' field for new points in 2-D with at least ``FIELD_MIN_N``
        training points: for categorical rows with the Cauchy kernel, the interpolated
        normaliser (:class:`~probdr._compute.fft.CauchyField`); for Bernoulli rows (UMAP,
        LargeVis; any kernel), the non-edge sum's near pairs and far field
        (:class:`~probdr._compute.pair_field.ReferenceField`). ``None`` otherwise."""
        k = self.kernel_
        n, q = Z_ref.shape
        if q != 2 or n < FIELD_MIN_N:
            return None
        row_law = self._row_model(n)[0]
        if row_law == "bernoulli":
            return ReferenceField(Z_ref, non_edge_term(k), kernel_length(k))
        if getattr(k, "name", "") == "student" and getattr(k, "dof", None) == 1.0:
            return CauchyField(Z_ref.to(torch.float64))
        return None

    def _batch_kwargs(self, P: torch.Tensor, s: int, e: int, Z_ref: torch.Tensor, dtype,
                      field=None):
        n = Z_ref.shape[0]
        row_law, factor = self._row_model(n)
        Pb = P.index_select(0, torch.arange(s, e)).coalesce()
        (rows, cols), vals = Pb.indices(), Pb.values().to(dtype)
        omega = None
        if factor is not None:
            omega = factor * torch.zeros(e - s, dtype=dtype).index_add_(0, rows, vals)
        return dict(edges=(rows, cols, vals), Z_ref=Z_ref, kernel=self.kernel_,
                    n_components=self.n_components, n_new=e - s, row_law=row_law,
                    nonedge_weight=omega, coupling_weight=self._new_points_weight(vals, rows, e - s),
                    field=field)

    def _new_points_weight(self, vals: torch.Tensor, rows: torch.Tensor, m: int) -> float:
        """``coupling_weight`` for new points; ``"auto"``: the tail rule
        (:func:`auto_coupling_weight`) on the new rows' masses."""
        cw = self.coupling_weight
        if not (isinstance(cw, str) and cw == "auto"):
            return float(cw)
        mass = torch.zeros(m, dtype=torch.float64).index_add_(0, rows, vals.double())
        return auto_coupling_weight(self.kernel_, self.n_components, mass)

    # -- transform ----------------------------------------------------------------------------
    @in_fit_environment
    def transform(self, X, *, n_iter: int = 100):
        r"""Place new points into the fitted embedding (MAP of each new point's position given
        the fitted embedding, which is not changed).

        Parameters
        ----------
        X : array (m, n_features)
        n_iter : int
            Adam steps per batch of new points (learning rate ``TRANSFORM_LR`` times the
            embedding's median nearest-neighbour distance, decaying linearly to 0).

        Returns
        -------
        array (m, n_components): numpy in -> numpy out, torch in -> torch out.
        """
        Xt = self._validate_new(X)
        _check_n_iter(n_iter)
        P, match = self._new_rows(Xt)
        return self._output(self._place(P, match, int(n_iter)), X)

    def _place(self, P: torch.Tensor, match: torch.Tensor, n_iter: int,
               field=False) -> torch.Tensor:
        """MAP positions of new points from their input rows (training matches keep their fitted
        positions), ``(m, q)`` in the fit's dtype. ``field``: the training points' field if
        the caller has built it (``False``: build it here when it applies)."""
        dtype = self._fit_dtype
        Z_ref = torch.as_tensor(self.embedding_).to(dtype)
        out = self._weighted_start(P, Z_ref)
        new = (match < 0).nonzero().flatten()
        if n_iter > 0 and new.numel():
            P = P.index_select(0, new).coalesce()
            Z0 = out[new]
            lr = TRANSFORM_LR * _nn_scale(Z_ref, generator(0))
            if field is False:
                field = self._field(Z_ref)
            n_pairs = 1 if field is not None else Z_ref.shape[0]  # per new point and step
            for s, e in _batches(Z0.shape[0], n_pairs):
                kw = self._batch_kwargs(P, s, e, Z_ref, dtype, field)
                kw["z_prior"] = self._new_points_prior(e - s, dtype, for_map=True)
                res = run_map(new_points_model, kw, Z0[s:e],
                              [Phase(n_iter, lr, final_learning_rate=0.0, name="transform")],
                              optimizer="adam", collapse_floor=None, warn_collapse=False,
                              verbose=self.verbose, desc=f"{type(self).__name__}.transform")
                out[new[s:e]] = res.Z
        seen = match >= 0
        out[seen] = Z_ref[match[seen]]
        return out

    @staticmethod
    def _weighted_start(P: torch.Tensor, Z_ref: torch.Tensor) -> torch.Tensor:
        """:math:`\\sum_j p_{ij} z_j / p_{i+}`: the neighbour-weighted start."""
        Pf = P.to(Z_ref.dtype)
        num = torch.sparse.mm(Pf, Z_ref)
        return num / torch.sparse.sum(Pf, 1).to_dense().clamp_min(1e-300)[:, None]

    def _new_points_prior(self, m: int, dtype, *, for_map: bool):
        """The prior on new points' positions: flat for MAP unless ``z_prior`` is a scale; for
        draws an isotropic Gaussian (``z_prior`` a scale, else centred on the embedding with
        ``SAMPLE_PRIOR_SCALE`` times its RMS spread)."""
        import pyro.distributions as dist

        zp = self.z_prior
        if zp is None and for_map:
            return None
        q = self.n_components
        if zp is None:
            Z = self.embedding_
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

    # -- sample_transform ---------------------------------------------------------------------
    @in_fit_environment
    def sample_transform(self, X, num_samples: int = 200, random_state=None, *,
                         num_warmup: int = 300, thin: int = 4, n_iter: int = 100):
        """Draws from each new point's conditional posterior given the fitted embedding,
        p(z_i | ·) ∝ p(z_i) exp(β ℓ_i(z_i)), ℓ_i its coupling log-likelihood, at the
        estimator's ``coupling_weight`` β; "auto" (the default) applies the tail rule of
        :func:`auto_coupling_weight` to the new rows (4 for 2-D t-SNE), so that spreads reflect
        the data rather than the prior.

        Exact per-point Markov chains: two random-walk Metropolis chains per new point, started
        at the MAP (:meth:`transform`), each point's step adapted during ``num_warmup`` steps,
        then every ``thin``-th state kept. The prior: ``z_prior`` as a scale, or (``None``) an
        isotropic Gaussian centred on the embedding with ``SAMPLE_PRIOR_SCALE`` times its RMS
        spread. Summaries: :func:`probdr.infer.draws.point_summary`; plot with
        :func:`probdr.plotting.plot_uncertainty`.

        Returns
        -------
        array (num_samples, m, n_components)
        """
        from .base import resolve_seed

        for name, v, lo in (("num_samples", num_samples, 1), ("num_warmup", num_warmup, 0),
                            ("thin", thin, 1)):
            if not (isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= lo):
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}.")
        _check_n_iter(n_iter)
        Xt = self._validate_new(X)
        seed = resolve_seed(random_state)
        dtype = self._fit_dtype
        P, match = self._new_rows(Xt)
        field = self._field(torch.as_tensor(self.embedding_))  # built once, for both steps
        Z_map = self._place(P, match, int(n_iter), field)
        Z_ref = torch.as_tensor(self.embedding_).to(dtype)
        gen = generator(seed)
        m, q = Z_map.shape
        draws = torch.empty(num_samples, m, q, dtype=dtype)
        low_accept = 0
        for s, e in _batches(m, 1 if field is not None else Z_ref.shape[0], chains=2):
            kw = self._batch_kwargs(P, s, e, Z_ref, dtype, field)
            prior = self._new_points_prior(e - s, dtype, for_map=False).base_dist
            beta = float(kw["coupling_weight"])

            def log_density(Z, kw=kw, prior=prior, beta=beta):
                ll = new_point_log_likelihood(Z, kw["edges"], Z_ref, self.kernel_, kw["row_law"],
                                              kw["nonedge_weight"], kw["field"])
                return beta * ll + prior.log_prob(Z).sum(-1)

            d, acc = random_walk_metropolis(log_density, Z_map[s:e], num_samples, num_warmup, thin, gen,
                                  _nn_scale(Z_ref, gen))
            draws[:, s:e] = d
            low_accept += int((acc < 0.05).sum())
        if low_accept:
            warnings.warn(f"{low_accept} new point(s) had an acceptance rate below 5% in "
                          "sample_transform: raise num_warmup.", RuntimeWarning, stacklevel=2)
        out = draws.to(torch.float64).cpu().numpy()
        if isinstance(X, torch.Tensor):
            return torch.from_numpy(out).to(X.device)
        return out

