r"""Posterior draws of an embedding and of a model's other latent sites (:class:`Posterior`),
their alignment by orthogonal Procrustes (:func:`procrustes_align`) and their convergence
statistics (:func:`chain_statistics`): the results of
:func:`probdr.infer.posterior.fit_posterior`.

The likelihoods of probdr's models see the embedding only up to rotations and reflections (and,
for most, translations), so draws of Z are summarised after aligning each one to a reference, by
default the MAP embedding. The other latent sites of a model (a kernel's degrees of freedom, a
scale, per-cluster parameters) are kept as drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Posterior", "GaussianDraws", "procrustes_align", "chain_statistics",
           "chain_diagnostics", "PointSummary", "point_summary", "reliability_draws", "RELIABILITY_QUERIES"]


# --------------------------------------------------------------------------------------------
# Procrustes alignment
# --------------------------------------------------------------------------------------------
def procrustes_align(draws, reference, *, reflection: bool = True,
                     translation: bool = True) -> np.ndarray:
    r"""Align embeddings to a reference by orthogonal Procrustes.

    For each draw :math:`A` (and reference :math:`B`, both centred when ``translation``),
    :math:`R^\star = \arg\min_{R \in O(q)} \|A R - B\|_F = U V^\top` with
    :math:`U S V^\top = A^\top B`; the aligned draw is :math:`A R^\star + \bar B`. With
    ``reflection=False`` the minimisation is over rotations :math:`SO(q)` only.

    Parameters
    ----------
    draws : array (..., n, q)
    reference : array (n, q)

    Returns
    -------
    ndarray (..., n, q), float64
    """
    A = np.asarray(draws, dtype=np.float64)
    B = np.asarray(reference, dtype=np.float64)
    if B.ndim != 2 or A.shape[-2:] != B.shape:
        raise ValueError(f"draws (..., n, q) and reference (n, q) must match, got {A.shape} and "
                         f"{B.shape}.")
    if not np.all(np.isfinite(B)):
        raise ValueError("draws or reference contain NaN or inf.")
    lead = A.shape[:-2]
    A = A.reshape(-1, *B.shape)
    muB = B.mean(0, keepdims=True) if translation else np.zeros((1, B.shape[1]))
    Bc = B - muB
    out = np.empty_like(A)
    for s0, s1 in draw_blocks(len(A), B.size):  # blocks of draws: the temporaries stay small
        _align_block(A[s0:s1], Bc, muB, reflection, translation, out[s0:s1])
    return out.reshape(*lead, *B.shape)


def _align_block(A, Bc, muB, reflection: bool, translation: bool, out) -> None:
    """:func:`procrustes_align` of draws ``A (s, n, q)`` to the centred reference ``Bc``, into
    ``out``: :math:`A R + (\bar B - \bar A R)`, the cross-products :math:`A^\top B_c` (equal to
    the centred draws' as :math:`B_c` sums to 0) and the means as BLAS products."""
    if not np.all(np.isfinite(A)):
        raise ValueError("draws or reference contain NaN or inf.")
    M = np.matmul(A.transpose(0, 2, 1), Bc)  # (s, q, q)
    U, _, Vt = np.linalg.svd(M)
    if not reflection:
        d = np.sign(np.linalg.det(U @ Vt))
        U[:, :, -1] *= d[:, None]
    R = U @ Vt
    np.matmul(A, R, out=out)
    if translation:
        muA = np.matmul(np.full(A.shape[1], 1.0 / A.shape[1]), A)[:, None]  # (s, 1, q)
        out += muB - muA @ R
    else:
        out += muB


#: draws are generated, aligned and summed in blocks of about this many numbers (32 MB in
#: float64): a posterior at a million points never holds a second copy of all its draws
DRAW_BLOCK = 1 << 22


def draw_blocks(num_draws: int, per_draw: int) -> list[tuple[int, int]]:
    """``[(start, stop)]``: blocks of draws of about :data:`DRAW_BLOCK` numbers each (at least
    one draw)."""
    step = max(1, DRAW_BLOCK // max(int(per_draw), 1))
    return [(s, min(s + step, num_draws)) for s in range(0, num_draws, step)]


def chain_statistics(chains) -> tuple[np.ndarray, np.ndarray]:
    r"""Split R-hat (Pyro's estimator, ``pyro.ops.stats``; Gelman et al., *Bayesian Data
    Analysis*, 3rd ed., §11.4-5) and bulk effective sample size (ArviZ's rank-normalised
    estimator, Vehtari et al. 2021: never negative, unlike the plain autocorrelation estimate
    on anticorrelated chains) of each coordinate of draws per chain.

    Parameters
    ----------
    chains : array (num_chains, num_draws, ...)

    Returns
    -------
    r_hat, ess : ndarray (...)
        NaN everywhere when there are fewer than 4 draws per chain.
    """
    import arviz as az
    import torch
    from pyro.ops.stats import split_gelman_rubin

    x = np.asarray(chains, dtype=np.float64)
    if x.ndim < 2:
        raise ValueError(f"chains must have shape (num_chains, num_draws, ...), got {x.shape}.")
    if x.shape[1] < 4:
        return np.full(x.shape[2:], np.nan), np.full(x.shape[2:], np.nan)
    r_hat = split_gelman_rubin(torch.as_tensor(x), chain_dim=0, sample_dim=1).numpy()
    ess = az.ess(az.convert_to_dataset({"x": x}), method="bulk")["x"].values
    return r_hat, np.asarray(ess, dtype=np.float64).reshape(x.shape[2:])


def _cross_products(D: np.ndarray) -> np.ndarray:
    r""":math:`\sum_s D_{sni} D_{snj}`, ``(n, q, q)``, of deviations ``D (s, n, q)``: one
    contraction per coordinate pair (the same sums as ``einsum("sni,snj->nij")``, several
    times faster for the small q of an embedding)."""
    q = D.shape[-1]
    out = np.empty((D.shape[1], q, q))
    for i in range(q):
        for j in range(i, q):
            out[:, i, j] = out[:, j, i] = np.einsum("sn,sn->n", D[..., i], D[..., j])
    return out


#: neighbour queries (points times draws) the default reliability spends: all the draws (200
#: by default) up to 7,000 points, 20 from 70,000. With more draws its Monte Carlo error is
#: smaller and it ranks points better: on MNIST-5k (UMAP, SVI) Spearman 0.58 with probdr's own
#: seeds' neighbourhood change from 20 draws, 0.61 from 50, 0.62 from 200
RELIABILITY_QUERIES = 1_400_000
#: the fewest draws of the default reliability
RELIABILITY_MIN_DRAWS = 20


#: the share of its nearest neighbours a point keeps in a draw to count as stable in it
#: (:meth:`Posterior.point_stability`): a third, 5 of 15
STABLE_SHARE = 1.0 / 3.0


def reliability_draws(n: int, available: int) -> int:
    """The default number of draws of :meth:`Posterior.point_reliability` for ``n`` points and
    ``available`` draws: :data:`RELIABILITY_QUERIES` ``// n``, at least
    :data:`RELIABILITY_MIN_DRAWS`, at most ``available``."""
    return int(min(available, max(RELIABILITY_MIN_DRAWS, RELIABILITY_QUERIES // max(n, 1))))


def _drop_self(idx: np.ndarray) -> np.ndarray:
    """Each point's ``k + 1`` nearest (``idx (n, k + 1)``, the point itself usually first)
    without the point itself, ``(n, k)``; where a duplicate at distance 0 hid the point from
    its ``k + 1`` nearest, the farthest is dropped instead."""
    me = np.arange(len(idx))
    out = idx[:, 1:].copy()
    odd = np.flatnonzero(idx[:, 0] != me)  # a duplicate came first, or the point is missing
    if len(odd):
        sub = idx[odd]
        own = sub == me[odd, None]
        own[~own.any(1), -1] = True
        out[odd] = sub[~own].reshape(len(odd), -1)
    return out


# --------------------------------------------------------------------------------------------
# draws made on demand
# --------------------------------------------------------------------------------------------
@dataclass
class GaussianDraws:
    r"""Draws of independent per-point Gaussians :math:`z_i \sim \mathcal N(\mu_i, L_i
    L_i^\top)`, made when they are read rather than stored: draw ``s`` comes from its own random
    stream (numpy's ``default_rng([seed, s])``), so any draw, block or all of them are the same
    whenever and in whatever order they are made. Each draw is aligned to ``reference`` by
    :func:`procrustes_align` when one is given.

    The Laplace posterior (:mod:`probdr.infer.laplace`) keeps its draws this way: at a million
    points its 200 draws would be 1.6 GB in float32; the law they come from is 5 numbers a
    point.

    Attributes
    ----------
    mean : ndarray (n, q)
        :math:`\mu`, in the draws' dtype.
    scale_tril : ndarray (n, q, q)
        :math:`L_i`, lower-triangular, same dtype.
    num_draws : int
    seed : int
    reference : ndarray (n, q) or None
    """

    mean: np.ndarray
    scale_tril: np.ndarray
    num_draws: int
    seed: int
    reference: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return (int(self.num_draws), *self.mean.shape)

    def block(self, start: int, stop: int) -> np.ndarray:
        """Draws ``start:stop``, ``(stop - start, n, q)`` in the draws' dtype."""
        if not 0 <= start <= stop <= self.num_draws:
            raise IndexError(f"draws {start}:{stop} out of range [0, {self.num_draws}].")
        out = np.empty((stop - start, *self.mean.shape), dtype=self.mean.dtype)
        for j, s in enumerate(range(start, stop)):
            eps = np.random.default_rng([int(self.seed), s]).standard_normal(
                self.mean.shape, dtype=self.mean.dtype)
            out[j] = self.mean + np.einsum("nab,nb->na", self.scale_tril, eps)
        if self.reference is not None and len(out):
            out[...] = procrustes_align(out, self.reference)
        return out


# --------------------------------------------------------------------------------------------
# the result
# --------------------------------------------------------------------------------------------
class Posterior:
    r"""Posterior draws of an embedding, Procrustes-aligned to ``reference``, and of the model's
    other latent sites. The constructor takes the attributes, in this order (``draws`` by
    keyword).

    Attributes
    ----------
    method : {"svi", "laplace", "hmc", "mcmc", "transform"}
    chains : ndarray (num_chains, num_draws, n, q)
        Aligned draws of Z per chain (SVI: one "chain" of independent guide draws). A posterior
        whose draws are made on demand (``draws``) makes them all on the first read of
        ``chains`` or ``samples`` and keeps them; its summaries (``mean``,
        :meth:`point_covariances`, :meth:`point_reliability`) never hold them all.
    reference : ndarray (n, q)
        The alignment reference (the MAP embedding unless given).
    diagnostics : dict
        SVI: ``elbo`` (loss per recorded step, ``elbo_steps``), ``guide``, ``num_steps``,
        ``seconds``. Laplace: ``precisions`` and ``covariances`` (n, q, q) of the per-point
        Gaussians (:mod:`probdr.infer.laplace`), ``inflation``, ``seconds``.
        MCMC: ``divergences`` (counts) and ``divergent_draws`` (indices), ``accept_prob``
        (Pyro's acceptance rate), ``step_size`` (per chain), ``r_hat_max``, ``ess_min`` (split
        R-hat and ESS over the aligned coordinates of Z and every coordinate of the other
        sites), ``seconds``.
    raw_chains : ndarray (num_chains, num_draws, n, q) or None
        The draws of Z before alignment (None where they are not kept: an aligned Laplace
        posterior, whose draws are the MAP plus independent noise).
    guide : the fitted Pyro guide (SVI); None for MCMC (the ``pyro.infer.MCMC`` runs are not
        kept, so that fitted estimators stay picklable).
    sites : dict of str to ndarray (num_chains, num_draws, \*shape)
        Draws of the latent sites other than Z, as drawn (in their own support: a positive
        site has positive draws), in the model's order; empty for a model whose only latent
        site is Z.
    draws : GaussianDraws or None
        The law the draws of Z are made from on demand (one chain; the Laplace posterior), in
        place of stored ``chains``.
    """

    def __init__(self, method: str, chains: np.ndarray | None, reference: np.ndarray,
                 diagnostics: dict | None = None, raw_chains: np.ndarray | None = None,
                 guide: Any = None, sites: dict | None = None, *,
                 draws: GaussianDraws | None = None):
        if (chains is None) == (draws is None):
            raise ValueError("a Posterior takes its draws of Z as chains or as a law to draw "
                             "them from (draws), one of the two.")
        self.method = method
        self._chains = chains
        self.reference = reference
        self.diagnostics = {} if diagnostics is None else diagnostics
        self._raw_chains = raw_chains
        self.guide = guide
        self.sites = {} if sites is None else sites
        self.draws = draws

    def __getattr__(self, name: str):
        # a Posterior saved before an attribute existed (probdr.serialize restores __dict__):
        # the dataclass of earlier versions stored chains and raw_chains by those names
        d = self.__dict__
        defaults = {"sites": {}, "draws": None, "_chains": d.get("chains"),
                    "_raw_chains": d.get("raw_chains")}
        if name in defaults:
            return defaults[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __getstate__(self) -> dict:
        """The attributes to save or pickle: draws made on demand are not stored (nor the
        summaries of them); they are made again from ``draws``."""
        state = dict(self.__dict__)
        if state.get("draws") is not None:
            state["_chains"] = None
        state.pop("_moments", None)
        return state

    @property
    def chains(self) -> np.ndarray:
        """Aligned draws of Z per chain, ``(num_chains, num_draws, n, q)``."""
        if self._chains is None:
            self._chains = self.draws.block(0, self.draws.num_draws)[None]
        return self._chains

    @property
    def raw_chains(self) -> np.ndarray | None:
        if self._raw_chains is None and self.draws is not None and self.draws.reference is None:
            return self.chains  # draws made without alignment: they are the raw draws
        return self._raw_chains

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(num_chains, num_draws, n, q)``, without making any draw."""
        if self._chains is None:
            return (1, *self.draws.shape)
        return tuple(self._chains.shape)

    @property
    def samples(self) -> np.ndarray:
        """All aligned draws, chains concatenated: ``(num_chains * num_draws, n, q)``."""
        return self.chains.reshape(-1, *self.chains.shape[2:])

    def sample_blocks(self):
        """The aligned draws, chains concatenated, in blocks of about :data:`DRAW_BLOCK`
        numbers: ``(start, stop, draws[start:stop])``; draws made on demand are made block by
        block and not kept."""
        C, S, n, q = self.shape
        for s0, s1 in draw_blocks(C * S, n * q):
            if self._chains is None:
                yield s0, s1, self.draws.block(s0, s1)
            else:
                yield s0, s1, self.samples[s0:s1]

    def sample(self, index: int) -> np.ndarray:
        """Aligned draw ``index`` (chains concatenated), ``(n, q)``."""
        if self._chains is None:
            return self.draws.block(index, index + 1)[0]
        return self.samples[index]

    def _point_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """The draws' per-point mean ``(n, q)`` and covariance ``(n, q, q)`` in float64: the
        mean over all draws, then the centred cross-products summed block by block (draws made
        on demand: one pass, centred at the reference, so no draw is made twice); kept."""
        got = self.__dict__.get("_moments")
        if got is not None:
            return got
        C, S, n, q = self.shape
        total = C * S
        if self._chains is not None:
            M = self.samples.mean(0, dtype=np.float64)
            cov = np.zeros((n, q, q))
            for _, _, B in self.sample_blocks():
                cov += _cross_products(B.astype(np.float64) - M)
        else:
            ref = np.asarray(self.reference, dtype=np.float64)
            first, cross = np.zeros((n, q)), np.zeros((n, q, q))
            for _, _, B in self.sample_blocks():
                D = B.astype(np.float64) - ref
                first += D.sum(0)
                cross += _cross_products(D)
            d = first / total
            M = ref + d
            cov = cross - total * np.einsum("ni,nj->nij", d, d)
        self._moments = (M, cov / max(total - 1, 1))
        return self._moments

    @property
    def mean(self) -> np.ndarray:
        """Posterior mean embedding ``(n, q)``: the mean of the aligned draws (float64)."""
        return self._point_moments()[0].copy()

    @property
    def num_chains(self) -> int:
        return int(self.shape[0])

    @property
    def num_draws(self) -> int:
        return int(self.shape[1])

    @property
    def site_names(self) -> tuple[str, ...]:
        """``"Z"`` then the names of the other latent sites."""
        return ("Z", *self.sites)

    def site_chains(self, name: str = "Z") -> np.ndarray:
        """Draws of one latent site per chain, ``(num_chains, num_draws, *shape)`` (Z
        aligned)."""
        if name == "Z":
            return self.chains
        if name not in self.sites:
            raise KeyError(f"no latent site {name!r}; the sites are {list(self.site_names)}.")
        return self.sites[name]

    def site_samples(self, name: str = "Z") -> np.ndarray:
        """Draws of one latent site, chains concatenated: ``(num_chains * num_draws, *shape)``."""
        c = self.site_chains(name)
        return c.reshape(-1, *c.shape[2:])

    def summary(self) -> dict[str, dict[str, np.ndarray | None]]:
        """Per-site, per-coordinate summaries of the draws (Z aligned).

        Returns
        -------
        dict
            ``{site: {"mean", "sd", "r_hat", "ess"}}``, arrays of the site's shape; ``r_hat``
            and ``ess`` (:func:`chain_statistics`) for the samplers (HMC, NUTS), None for SVI
            (independent draws).
        """
        out = {}
        for name in self.site_names:
            c = self.site_chains(name)
            s = c.reshape(-1, *c.shape[2:])
            r, e = chain_statistics(c) if self.method in ("mcmc", "hmc") else (None, None)
            out[name] = {"mean": s.mean(0), "sd": s.std(0, ddof=1) if len(s) > 1 else
                         np.zeros(s.shape[1:]), "r_hat": r, "ess": e}
        return out

    def point_covariances(self) -> np.ndarray:
        """Per-point posterior covariance of the aligned draws, ``(n, q, q)``, float64 (summed
        over blocks of draws: no copy of all the draws)."""
        return self._point_moments()[1].copy()

    def point_coordinate_sd(self) -> np.ndarray:
        """Per-point, per-coordinate posterior sd of the aligned draws, ``(n, q)``."""
        return np.sqrt(np.einsum("nii->ni", self._point_moments()[1]))

    def point_std(self) -> np.ndarray:
        r"""Per-point spread :math:`\sqrt{\mathrm{tr}\,\Sigma_i / q}` of the aligned draws, ``(n,)``."""
        C = self._point_moments()[1]
        return np.sqrt(np.trace(C, axis1=1, axis2=2) / C.shape[-1])

    def point_reliability(self, n_neighbors: int = 15, num_draws: int | None = None,
                          spread: float = 1.0) -> np.ndarray:
        r"""Per-point reliability in [0, 1]: the share of its neighbourhood that the posterior
        keeps. For each of ``num_draws`` draws (evenly spaced), the Jaccard similarity
        :math:`|A \cap B| / |A \cup B|` of the point's ``n_neighbors`` nearest neighbours in the
        draw (:math:`B`) and in the posterior mean (:math:`A`), averaged over the draws. 1: the
        data pin the point among the same neighbours; near 0: its neighbours in the map are
        not determined by the data. ``num_draws`` (default: :func:`reliability_draws`, all the
        draws on small maps, 20 on large ones) sets the Monte Carlo error of the average.
        ``spread`` scales each draw's deviation from the mean (1: the posterior's draws; less:
        a local score that does not saturate where the spreads exceed the neighbours'
        distances, see the docs' "How sure is the map?"). A relative score: rank points by it;
        :meth:`point_stability` is the probability with an absolute meaning."""
        return self.neighbour_scores(n_neighbors, num_draws, spread)[0]

    def point_stability(self, n_neighbors: int = 15, keep: float = STABLE_SHARE,
                        num_draws: int | None = None) -> np.ndarray:
        r"""Per-point stability in [0, 1]: the posterior probability that the point keeps at
        least ``keep`` of its ``n_neighbors`` nearest neighbours (those of the posterior mean;
        default a third: 5 of 15), estimated on ``num_draws`` draws as
        :meth:`point_reliability`. Below 0.5, the point more likely than not loses most of its
        neighbourhood: the cut of the estimators' ``stability_`` and of ``probdr embed``'s
        ``unstable_points`` (with t-SNE on digits, pbmc68k and MNIST-5k, such points' 5-NN
        labels are wrong 1.4 to 20 times as often as the rest's: docs, "Which points should I
        not trust?")."""
        return self.neighbour_scores(n_neighbors, num_draws, keep=keep)[1]

    def neighbour_scores(self, n_neighbors: int = 15, num_draws: int | None = None,
                         spread: float = 1.0, keep: float = STABLE_SHARE):
        """``(point_reliability, point_stability)`` from one pass over the draws."""
        k = int(n_neighbors)
        if not 1 <= k < self.mean.shape[0]:
            raise ValueError(f"n_neighbors must be in [1, {self.mean.shape[0] - 1}], "
                             f"got {n_neighbors!r}.")
        keep = float(keep)
        if not (np.isfinite(keep) and 0 < keep <= 1):
            raise ValueError(f"keep must be a share in (0, 1], got {keep!r}.")
        need = int(np.ceil(keep * k - 1e-9))
        jaccard, stable, draws = 0.0, 0.0, 0
        for shared in self._shared_neighbours(k, num_draws, spread):
            jaccard = jaccard + shared / (2 * k - shared)
            stable = stable + (shared >= need)
            draws += 1
        return jaccard / draws, stable / draws

    def _shared_neighbours(self, k: int, num_draws: int | None, spread: float):
        """For each of ``num_draws`` evenly spaced draws: how many of each point's ``k`` nearest
        neighbours in the draw (its deviation from the mean scaled by ``spread``) are among its
        ``k`` nearest in the posterior mean, ``(n,)``."""
        from scipy.spatial import cKDTree

        M = self.mean
        spread = float(spread)
        if not (np.isfinite(spread) and spread > 0):
            raise ValueError(f"spread must be a positive number, got {spread!r}.")

        import torch

        threads = torch.get_num_threads()  # the fit's (governed) thread count

        def knn(E):  # exact (a k-d tree) on the threads, the queries in the tree's order
            E = np.asarray(E, dtype=np.float64)  # (neighbouring queries share cached nodes)
            tree = cKDTree(E)
            order = tree.indices
            idx = np.empty((len(E), k + 1), dtype=np.intp)
            idx[order] = tree.query(E[order], k=k + 1, workers=threads)[1]
            return _drop_self(idx)

        ref = knn(M).astype(np.int32)
        count = self.num_chains * self.num_draws
        if num_draws is None:
            num_draws = reliability_draws(M.shape[0], count)
        elif (isinstance(num_draws, bool) or not isinstance(num_draws, (int, np.integer))
              or num_draws < 1):
            raise ValueError(f"num_draws must be a positive integer, got {num_draws!r}.")
        picks = np.unique(np.linspace(0, count - 1, min(int(num_draws), count)).astype(int))
        for s in picks:
            draw = self.sample(s)
            got = knn(draw if spread == 1.0 else M + spread * (draw - M))
            # |A ∩ B| per point: the two lists (no repeats within either) side by side,
            # sorted; each shared neighbour is one pair of equal neighbours in the row
            both = np.concatenate([got.astype(np.int32), ref], axis=1)
            both.sort(axis=1)
            yield np.count_nonzero(both[:, 1:] == both[:, :-1], axis=1)

    def __repr__(self) -> str:
        n, q = self.shape[2:]
        more = f", sites={list(self.sites)}" if self.sites else ""
        return (f"Posterior(method={self.method!r}, chains={self.num_chains}, "
                f"draws={self.num_draws}, n={n}, q={q}{more})")


# --------------------------------------------------------------------------------------------
# per-point summaries of draws (new points: sample_transform)
# --------------------------------------------------------------------------------------------
@dataclass
class PointSummary:
    r"""Per-point summaries of draws ``(num_samples, m, q)`` (:func:`point_summary`).

    The credible region of point i at ``level`` is the ellipsoid
    :math:`\{z : (z - \bar z_i)^\top \Sigma_i^{-1} (z - \bar z_i) \le r_i^2\}`, where
    :math:`\bar z_i, \Sigma_i` are the draws' mean and covariance and :math:`r_i^2` the
    ``level`` quantile of the draws' own squared Mahalanobis distances: it holds that fraction
    of the draws whatever the shape of the posterior's radial law (no Gaussian assumption).

    Attributes
    ----------
    mean : ndarray (m, q)
    cov : ndarray (m, q, q)
    std : ndarray (m,)
        :math:`\sqrt{\mathrm{tr}\,\Sigma_i / q}`.
    radius2 : ndarray (m,)
        :math:`r_i^2`.
    level : float
    """

    mean: np.ndarray
    cov: np.ndarray
    std: np.ndarray
    radius2: np.ndarray
    level: float

    def mahalanobis2(self, points) -> np.ndarray:
        """Squared Mahalanobis distance of ``points`` (m, q) to each point's draws."""
        P = np.asarray(points, dtype=np.float64)
        if P.shape != self.mean.shape:
            raise ValueError(f"points must have shape {self.mean.shape}, got {P.shape}.")
        D = P - self.mean
        return np.einsum("ni,nij,nj->n", D, np.linalg.pinv(self.cov), D)

    def contains(self, points) -> np.ndarray:
        """Whether each of ``points`` (m, q) lies in its point's credible region, ``(m,)``."""
        return self.mahalanobis2(points) <= self.radius2

    def ellipses(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Full widths, heights and angles (degrees) of the regions' first two axes (q >= 2)."""
        if self.mean.shape[1] < 2:
            raise ValueError("ellipses need at least 2 dimensions.")
        vals, vecs = np.linalg.eigh(self.cov[:, :2, :2])
        vals = np.clip(vals, 0.0, None)
        r = np.sqrt(self.radius2)
        return (2 * r * np.sqrt(vals[:, 1]), 2 * r * np.sqrt(vals[:, 0]),
                np.degrees(np.arctan2(vecs[:, 1, 1], vecs[:, 0, 1])))


def point_summary(draws, level: float = 0.9) -> PointSummary:
    """Per-point mean, covariance, spread and ``level`` credible region of draws
    ``(num_samples, m, q)``, e.g. from ``sample_transform`` (:class:`PointSummary`)."""
    D = np.asarray(draws, dtype=np.float64)
    if D.ndim != 3 or D.shape[0] < 2:
        raise ValueError(f"draws must have shape (num_samples >= 2, m, q), got {D.shape}.")
    if not np.all(np.isfinite(D)):
        raise ValueError("draws contain NaN or inf.")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}.")
    mean = D.mean(0)
    R = D - mean
    cov = np.einsum("sni,snj->nij", R, R) / (D.shape[0] - 1)
    md2 = np.einsum("sni,nij,snj->sn", R, np.linalg.pinv(cov), R)
    std = np.sqrt(np.trace(cov, axis1=1, axis2=2) / D.shape[2])
    return PointSummary(mean, cov, std, np.quantile(md2, level, axis=0), float(level))


def chain_diagnostics(aligned: np.ndarray, sites: dict,
                      gen: np.random.Generator) -> dict:
    """Split R-hat and bulk ESS of the aligned coordinates and the other sites (the worst), the
    median point's ESS, and the same on a rotation-invariant quantity: each point's distance to
    a random partner."""
    out = {}
    if aligned.shape[1] < 4:
        return {"r_hat_max": float("nan"), "ess_min": float("nan"),
                "ess_median": float("nan"), "r_hat_max_distances": float("nan"),
                "ess_min_distances": float("nan")}
    r, e = chain_statistics(aligned)
    stats = [chain_statistics(v) for v in sites.values()]
    r_all = np.concatenate([np.ravel(r)] + [np.ravel(s[0]) for s in stats])
    e_all = np.concatenate([np.ravel(e)] + [np.ravel(s[1]) for s in stats])
    out["r_hat_max"] = float(np.nan_to_num(r_all, nan=1.0).max())
    out["ess_min"] = float(np.nan_to_num(e_all, nan=0.0).min())
    out["ess_median"] = float(np.median(np.nan_to_num(e, nan=0.0)))
    n = aligned.shape[2]
    partner = (np.arange(n) + 1 + gen.integers(0, max(n - 1, 1), n)) % n
    d = np.linalg.norm(aligned - aligned[:, :, partner], axis=-1)
    rd, ed = chain_statistics(d)
    out["r_hat_max_distances"] = float(np.nan_to_num(rd, nan=1.0).max())
    out["ess_min_distances"] = float(np.nan_to_num(ed, nan=0.0).min())
    return out
