r"""Bayesian workflow (issue 5): edge priors, posterior inference, predictive graphs, ArviZ, plots.

Default-suite tests (fast). The slow ones (NUTS R-hat, digits label prior, tight SVI tolerances)
are in ``tests/infer/test_bayes_slow.py``.

The known-Gaussian-posterior oracle used below (derivation)
-----------------------------------------------------------
Take the Gaussian kernel :math:`k(d^2) = e^{-d^2/h}` and a weighted graph :math:`W`. The pairwise
MRF of eq. (1) is :math:`\log f_k(Z, W) = \sum_{i \ne j} W_{ij}\log k(\|z_i - z_j\|^2)
= -\frac1h \sum_{i\ne j} W_{ij}\|z_i - z_j\|^2 = -\frac1h\,\mathrm{tr}(Z^\top L(\bar W) Z)` with
:math:`\bar W = W + W^\top` (spec §2.2). With the prior :math:`Z_{ia} \sim \mathcal N(M_{ia}, s^2)`
and the MRF as a likelihood factor tempered by :math:`\beta`,

.. math::
    \log p(Z \mid W) = -\tfrac{1}{2 s^2}\|Z - M\|_F^2 - \tfrac{\beta}{h}\mathrm{tr}(Z^\top L Z)
    + c = -\tfrac12 \mathrm{tr}\big((Z-\mu)^\top \Lambda (Z - \mu)\big) + c',

:math:`\Lambda = s^{-2} I_n + (2\beta/h) L(\bar W)`, :math:`\mu = \Lambda^{-1} M / s^2`: the
columns of Z are independent :math:`\mathcal N(\mu_{:a}, \Lambda^{-1})`, i.e.
:math:`\mathrm{Cov}(\mathrm{vec}_\text{row}(Z)) = \Lambda^{-1} \otimes I_q`. The best
mean-field Gaussian (AutoNormal) for a Gaussian target has the exact means and variances
:math:`1/\Lambda_{ii}` (the precision's diagonal); a full-covariance guide is exact.
"""

from __future__ import annotations

import argparse

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine

import probdr
from probdr import diagnostics
from probdr.infer.posterior import (
    MCMC_MAX_PARAMS,
    Posterior,
    check_inference,
    fit_posterior,
    procrustes_align,
)
from probdr.input.graph import build_input_graph
from probdr.kernels import get_kernel
from probdr.laws import edge_priors as priors
from probdr.laws.components import laplacian
from probdr.laws.graph import get_prior
from probdr.laws.weights import KernelWeights
from probdr.models.coupling import graph_coupling_model

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


# ------------------------------------------------------------------------------------------
# fixtures
# ------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These models are tiny: one intra-op thread is faster, and far faster on a loaded machine
    (two spinning threads per process on 2 shared cores cost 5-10x here)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def blobs():
    from sklearn.datasets import make_blobs

    X, y = make_blobs(60, n_features=5, centers=3, cluster_std=1.5, random_state=0)
    return X, y


def _tsne(**kw):
    base = dict(perplexity=10, n_iter=150, early_exaggeration_iter=50, random_state=0)
    base.update(kw)
    return probdr.TSNE(**base)


@pytest.fixture(scope="module")
def svi_fit(blobs):
    X, _ = blobs
    return _tsne(inference="svi", inference_params={"num_steps": 150, "num_samples": 40}).fit(X)


@pytest.fixture(scope="module")
def mcmc_fit(blobs):
    X, _ = blobs
    X = X[:20]
    est = _tsne(perplexity=5, dtype="float64", inference="mcmc",
                inference_params={"num_chains": 2, "warmup": 15, "num_samples": 12,
                                  "max_tree_depth": 4})
    # 24 draws cannot reach 100 effective draws: NUTS says the chains may not have converged
    with pytest.warns(RuntimeWarning, match="may not have converged.*effective sample size"):
        est.fit(X)
    return est


# ------------------------------------------------------------------------------------------
# edge priors
# ------------------------------------------------------------------------------------------
def _pairs(n, m=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (m,), generator=g), torch.randint(0, n, (m,), generator=g)


def test_from_labels_values_and_dense_agree():
    y = np.array([0, 0, 1, 1, -1, 2])
    p = priors.from_labels(y, strength=1.5)
    D = p.dense(6)
    assert D.shape == (6, 6) and D.dtype == torch.float64
    assert D[0, 1] == 1.5 and D[0, 2] == -1.5 and D[2, 3] == 1.5
    assert D[0, 4] == 0 and D[4, 5] == 0 and D[4, 0] == 0  # unknown: neutral
    r, c = _pairs(6)
    assert torch.equal(p.log_at(r, c), D[r, c])
    # the blocked default of the base class gives the same matrix
    assert torch.equal(priors.EdgePrior.dense(p, 6), D)


@pytest.mark.parametrize("bad, msg", [
    (dict(y=np.zeros((3, 2), int)), "1-D"),
    (dict(y=np.array([0, 1, 2]), strength=-1.0), "strength"),
    (dict(y=np.array([0, 1, 2]), strength=float("nan")), "strength"),
    (dict(y=np.array([-1, -1])), "unknown"),
    (dict(y=np.array([0.5, 1.0])), "integers"),
    (dict(y=np.array(["a", "b"])), "integers"),
])
def test_from_labels_validation(bad, msg):
    with pytest.raises(ValueError, match=msg):
        priors.from_labels(**bad)


def test_from_labels_float_integers_accepted():
    p = priors.from_labels(np.array([0.0, 1.0, -1.0]))
    assert p.n == 3


@pytest.mark.parametrize("kind", ["igraph", "scipy", "dense", "torch_sparse"])
def test_from_graph_representations(kind):
    import igraph as ig
    import scipy.sparse as sp

    n, edges = 7, [(0, 1), (1, 2), (4, 6)]
    A = np.zeros((n, n))
    for i, j in edges:
        A[i, j] = 1.0
    g = {"igraph": ig.Graph(n=n, edges=edges), "scipy": sp.csr_matrix(A), "dense": A,
         "torch_sparse": torch.as_tensor(A).to_sparse()}[kind]
    p = priors.from_graph(g, weight=3.0)
    assert p.n == n and p.n_edges == 6  # symmetrised: 3 undirected edges, both directions
    D = p.dense()
    for i, j in edges:
        assert D[i, j] == pytest.approx(np.log(3.0)) and D[j, i] == pytest.approx(np.log(3.0))
    assert D[0, 2] == 0 and D[3, 5] == 0
    r, c = _pairs(n)
    assert torch.equal(p.log_at(r, c), D[r, c])


def test_from_graph_directed_and_off_weight():
    A = np.zeros((4, 4))
    A[0, 1] = 1
    p = priors.from_graph(A, weight=2.0, off_weight=0.0, symmetric=False)
    D = p.dense()
    assert D[0, 1] == pytest.approx(np.log(2.0))
    assert D[1, 0] == float("-inf") and D[2, 3] == float("-inf")


@pytest.mark.parametrize("g, msg", [
    (np.zeros((3, 4)), "square"),
    (np.array([[0, np.nan], [1, 0]]), "NaN"),
    (np.zeros((3, 3)), None),
])
def test_from_graph_validation(g, msg):
    if msg is None:
        assert priors.from_graph(g).n_edges == 0
        return
    with pytest.raises(ValueError, match=msg):
        priors.from_graph(g)
    with pytest.raises(ValueError, match="weight"):
        priors.from_graph(np.eye(3), weight=-1.0)


def test_product_prior_adds_logs_and_checks_sizes():
    y = np.array([0, 0, 1, -1])
    A = np.zeros((4, 4))
    A[0, 3] = 1
    p = priors.from_labels(y, 1.0) * priors.from_graph(A, 2.0)
    assert isinstance(p, priors.ProductPrior)
    D = p.dense(4)
    assert torch.allclose(D, priors.from_labels(y, 1.0).dense() + priors.from_graph(A, 2.0).dense())
    r, c = _pairs(4)
    assert torch.allclose(p.log_at(r, c), D[r, c])
    with pytest.raises(ValueError, match="different numbers of nodes"):
        priors.from_labels(y) * priors.from_labels(np.array([0, 1]))


def test_prior_size_mismatch_is_a_clear_error(blobs):
    X, y = blobs
    with pytest.raises(ValueError, match="defined on 10 nodes"):
        _tsne(n_iter=5, early_exaggeration_iter=0,
              edge_prior=priors.from_labels(y[:10])).fit(X)
    with pytest.raises(ValueError, match="defined on 10 nodes"):
        priors.from_labels(y[:10]).dense(60)
    with pytest.raises(ValueError, match="10 nodes"):
        priors.check_edge_prior(priors.from_labels(y[:10]), 60)


def test_proposition_1_input_posterior_is_pi_times_K(blobs):
    """D input prior: E[W_X]_ij = pi_ij K_ij / sum_l pi_il K_il on the kNN lists."""
    X, y = blobs
    Xt = torch.as_tensor(X)
    y_half = np.where(np.arange(len(y)) % 2 == 0, y, -1)
    prior = priors.from_labels(y_half, strength=1.3)
    P0 = build_input_graph(Xt, "D", perplexity=10).mean.to_dense()
    P1 = build_input_graph(Xt, "D", perplexity=10, edge_prior=prior).mean.to_dense()
    expected = P0 * torch.exp(prior.dense(len(y)))
    expected = expected / expected.sum(1, keepdim=True)
    assert torch.allclose(P1, expected, atol=1e-10)
    assert torch.allclose(P1.sum(1), torch.ones(len(y), dtype=P1.dtype))


def test_sparse_input_prior_never_densified(blobs, monkeypatch):
    """An edge-prior object on the (sparse, kNN) input graph is only evaluated at the edges."""
    X, y = blobs

    def boom(self, n=None):
        raise AssertionError("dense() called on an input edge prior")

    monkeypatch.setattr(priors.LabelPrior, "dense", boom)
    est = _tsne(n_iter=10, early_exaggeration_iter=0, edge_prior=priors.from_labels(y, 1.0))
    est.fit(X)
    assert np.isfinite(est.embedding_).all()


def test_latent_edge_prior_enters_the_latent_law(blobs):
    X, y = blobs
    prior = priors.from_labels(y, 0.7)
    est = _tsne(n_iter=10, early_exaggeration_iter=0, latent_edge_prior=prior, dtype="float64")
    est.fit(X)
    law = est.latent_law(est.embedding_)
    K = get_kernel("student", dof=1.0)
    Zt = torch.as_tensor(est.embedding_)
    logK = K.log_k(torch.cdist(Zt, Zt) ** 2)
    off = ~torch.eye(len(y), dtype=torch.bool)
    assert torch.allclose(law.weights.dense()[off], (logK + prior.dense())[off], atol=1e-8)
    # E law mean n * kappa / kappa_{++}
    kappa = torch.exp(logK + prior.dense()) * off
    assert torch.allclose(law.mean, len(y) * kappa / kappa.sum(), atol=1e-10)


@pytest.mark.parametrize("cls, kw", [
    (probdr.SNE, dict(perplexity=10, n_iter=20, early_exaggeration_iter=5)),
    (probdr.TSNE, dict(perplexity=10, n_iter=20, early_exaggeration_iter=5)),
    (probdr.LargeVis, dict(perplexity=10, n_iter=20)),
    (probdr.UMAP, dict(n_neighbors=10, n_epochs=20)),
])
def test_every_coupling_estimator_takes_both_priors(blobs, cls, kw):
    X, y = blobs
    y_half = np.where(np.arange(len(y)) % 2 == 0, y, -1)
    est = cls(random_state=0, edge_prior=priors.from_labels(y_half, 1.0),
              latent_edge_prior=priors.from_graph(np.eye(len(y), k=1), 2.0), **kw)
    Z = est.fit_transform(X)
    assert Z.shape == (60, 2) and np.isfinite(Z).all()


# ------------------------------------------------------------------------------------------
# Procrustes
# ------------------------------------------------------------------------------------------
def test_procrustes_recovers_rotation_reflection_translation():
    rng = np.random.default_rng(0)
    B = rng.normal(size=(30, 2))
    th = 0.7
    R = np.array([[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]]) @ np.diag([1, -1])
    draws = np.stack([B @ R + np.array([3.0, -2.0]), B @ R.T - 1.0])
    out = procrustes_align(draws, B)
    assert np.allclose(out, B[None], atol=1e-10)
    # rotations only: a reflected copy cannot be undone
    out_rot = procrustes_align(B @ np.diag([1, -1]), B, reflection=False)
    assert not np.allclose(out_rot, B, atol=1e-3)
    with pytest.raises(ValueError, match="must match"):
        procrustes_align(np.zeros((2, 5, 2)), B)
    with pytest.raises(ValueError, match="NaN"):
        procrustes_align(np.full((30, 2), np.nan), B)


def test_procrustes_matches_scipy_on_noisy_draws():
    """Each draw's rotation is scipy's orthogonal Procrustes of the centred draw on the centred
    reference (3-D, noisy, so no rotation makes them equal)."""
    from scipy.linalg import orthogonal_procrustes

    rng = np.random.default_rng(1)
    B = rng.normal(size=(50, 3)) + 2.0
    draws = rng.normal(size=(4, 50, 3)) + B @ np.linalg.qr(rng.normal(size=(3, 3)))[0]
    out = procrustes_align(draws, B)
    Bc = B - B.mean(0)
    for A, got in zip(draws, out, strict=True):
        Ac = A - A.mean(0)
        R, _ = orthogonal_procrustes(Ac, Bc)
        np.testing.assert_allclose(got, Ac @ R + B.mean(0), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------
# SVI against a known Gaussian posterior (see the module docstring)
# ------------------------------------------------------------------------------------------
def _gaussian_mrf_problem(n=12, q=2, h=1.0, s=1.0, beta=0.5, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = (torch.rand(n, n, generator=g, dtype=torch.float64) < 0.3).double()
    A.fill_diagonal_(0)
    W = A * torch.rand(n, n, generator=g, dtype=torch.float64)
    M = 2.0 * torch.randn(n, q, generator=g, dtype=torch.float64)

    def mrf_model(W, kernel, z_prior, coupling_weight=1.0):
        Z = pyro.sample("Z", z_prior)
        law = get_prior("D").posterior(KernelWeights(Z, kernel))
        with poutine.scale(scale=coupling_weight):
            pyro.factor("mrf", law.attraction(W))  # log f_k(Z, W): an MRF term, not a law

    kw = dict(W=W, kernel=get_kernel("gaussian", bandwidth=h),
              z_prior=dist.Normal(M, s).to_event(2), coupling_weight=beta)
    Lam = torch.eye(n, dtype=torch.float64) / s**2 + (2 * beta / h) * laplacian(W)
    Sigma = torch.linalg.inv(Lam)
    mu = Sigma @ M / s**2
    return mrf_model, kw, M, Lam, Sigma, mu


#: default-suite SVI budget and tolerances (the slow suite runs 3000 steps x 4 particles with
#: tolerances 0.1 sd / 4% / 6%)
SVI_FAST = dict(num_steps=1500, lr=0.1, lr_decay=0.01, num_particles=2, num_samples=200)


@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_svi_autonormal_matches_exact_gaussian_posterior(beta):
    """Also the temperature: the exact posterior precision is s^-2 I + (2 beta / h) L."""
    model, kw, M, Lam, Sigma, mu = _gaussian_mrf_problem(beta=beta)
    post = fit_posterior(model, kw, M.clone(), method="svi", align=False,
                         generator=torch.Generator().manual_seed(1), guide="normal", **SVI_FAST)
    loc, scale = post.guide._get_loc_and_scale("Z")
    sd = Sigma.diagonal().sqrt()[:, None]
    assert ((loc.detach() - mu).abs() / sd).max() < 0.15  # mean within 0.15 posterior sd
    mf_sd = (1.0 / Lam.diagonal().sqrt())[:, None]  # mean-field optimum: 1/sqrt(Lambda_ii)
    assert ((scale.detach() / mf_sd) - 1).abs().max() < 0.08  # sd within 8%
    assert post.samples.shape == (200, 12, 2)


def test_svi_iterate_average_cuts_the_last_steps_jitter():
    """At the defaults (one particle, lr 0.2 -> 0.01), the last iterate's means jitter around
    the exact posterior mean; averaging the last fifth of the steps brings them closer."""
    model, kw, M, Lam, Sigma, mu = _gaussian_mrf_problem(beta=2.0)
    sd = Sigma.diagonal().sqrt()[:, None]
    err = {}
    for average in (0.0, 0.2):
        e = []
        for seed in range(4):
            post = fit_posterior(model, kw, M.clone(), method="svi", align=False,
                                 average=average, generator=torch.Generator().manual_seed(seed))
            loc, _ = post.guide._get_loc_and_scale("Z")
            e.append(((loc.detach() - mu).abs() / sd).median().item())
            assert post.diagnostics["averaged_snapshots"] == (20 if average else 0)
        err[average] = np.mean(e)
    assert err[0.2] < 0.8 * err[0.0]
    assert err[0.2] < 0.04  # median coordinate within 0.04 posterior sd


def test_iterate_average_takes_the_window_mean():
    from probdr.infer.posterior import IterateAverage

    guide = torch.nn.Linear(2, 1)
    avg = IterateAverage(guide, num_steps=100, fraction=0.2)
    assert avg.every == 1 and avg.start == 80
    seen = []
    for step in range(1, 101):
        with torch.no_grad():
            guide.bias.fill_(float(step))
        if step % avg.every == 0:
            avg.callback(step, None, 0.0)
        if step > 80:
            seen.append(step)
    avg.apply()
    assert avg.count == 20
    assert guide.bias.item() == pytest.approx(np.mean(seen))
    # no window, or a plain callable guide: nothing to average
    assert IterateAverage(guide, 100, 0.0).callback is None
    assert IterateAverage(lambda *a, **k: None, 100, 0.2).callback is None


def test_svi_full_covariance_guide_matches_exact_gaussian_posterior():
    from pyro.infer.autoguide import AutoMultivariateNormal

    model, kw, M, Lam, Sigma, mu = _gaussian_mrf_problem()
    # an AutoGuide class is accepted as a user guide
    post = fit_posterior(model, kw, M.clone(), method="svi", align=False,
                         generator=torch.Generator().manual_seed(2),
                         guide=AutoMultivariateNormal, **SVI_FAST)
    q = post.guide.get_posterior()
    sd = Sigma.diagonal().sqrt()[:, None]
    assert ((q.loc.detach().view(12, 2) - mu).abs() / sd).max() < 0.15
    exact = torch.kron(Sigma.contiguous(), torch.eye(2, dtype=torch.float64))
    C = q.covariance_matrix.detach()
    assert torch.linalg.norm(C - exact) / torch.linalg.norm(exact) < 0.2


def test_svi_lowrank_and_function_guides_run():
    model, kw, M, *_ = _gaussian_mrf_problem(n=6)
    post = fit_posterior(model, kw, M.clone(), method="svi", guide="lowrank", rank=2,
                         num_steps=20, num_samples=5, generator=torch.Generator().manual_seed(0))
    assert "rank=2" in post.diagnostics["guide"]
    from pyro.infer.autoguide import AutoDelta

    guide = AutoDelta(model)
    post = fit_posterior(model, kw, M.clone(), method="svi", guide=guide, num_steps=5,
                         num_samples=3)
    assert post.samples.shape == (3, 6, 2)


# ------------------------------------------------------------------------------------------
# posterior inference through the estimators
# ------------------------------------------------------------------------------------------
def test_svi_through_estimator(svi_fit):
    est = svi_fit
    post = est.posterior_
    assert isinstance(post, Posterior) and post.method == "svi"
    assert est.posterior_samples_.shape == (40, 60, 2)
    assert np.allclose(est.posterior_mean_, post.mean)
    assert np.array_equal(est.embedding_, est.map_embedding_.astype(np.float64))
    assert np.allclose(post.mean, post.samples.mean(0))
    steps = post.diagnostics["num_steps"]  # 150, then more while the ELBO still fell
    assert steps >= 150 and post.diagnostics["elbo"].shape == (steps,)
    assert post.diagnostics["guide"] == "AutoNormal"
    C = post.point_covariances()
    assert C.shape == (60, 2, 2) and np.all(np.linalg.eigvalsh(C) >= -1e-9)
    assert post.point_std().shape == (60,) and np.all(post.point_std() > 0)


def test_svi_is_repeatable(blobs):
    X, _ = blobs
    kw = dict(inference="svi", inference_params={"num_steps": 20, "num_samples": 5})
    a = _tsne(n_iter=20, early_exaggeration_iter=5, **kw).fit(X).posterior_samples_
    b = _tsne(n_iter=20, early_exaggeration_iter=5, **kw).fit(X).posterior_samples_
    assert np.array_equal(a, b)


def test_graph_coupling_and_wishart_resolve_the_default_prior_by_one_rule(blobs):
    """One z-prior policy: the MAP fit keeps the flat prior (``z_prior=None``), and the posterior
    takes the isotropic Gaussian of scale 10 x the RMS of the MAP embedding
    (:func:`probdr.estimators.inference.default_z_prior_scale`), stored as ``z_prior_scale_``,
    for the graph couplings as for the Wishart family; a number is the scale for both."""
    from probdr.estimators.inference import DEFAULT_Z_PRIOR_RMS_FACTOR, default_z_prior_scale

    X, _ = blobs
    svi = dict(inference="svi", inference_params={"num_steps": 5, "num_samples": 4})
    short = dict(n_iter=30, early_exaggeration_iter=10)
    tsne = _tsne(**short, **svi).fit(X)
    wpca = probdr.WishartPCA(random_state=0, **svi).fit(X)
    for est in (tsne, wpca):
        Z = est.map_embedding_
        assert est.z_prior_scale_ == default_z_prior_scale(torch.as_tensor(Z))
        rms = float(np.sqrt(np.mean(Z.astype(np.float64) ** 2)))
        assert est.z_prior_scale_ == pytest.approx(DEFAULT_Z_PRIOR_RMS_FACTOR * rms, rel=1e-12)
    prior = tsne.model_kwargs_["z_prior"]  # the posterior's prior, in the fit's dtype
    scale = prior.base_dist.scale.unique()
    assert scale.numel() == 1 and float(scale) == pytest.approx(tsne.z_prior_scale_, rel=1e-6)
    assert prior.event_shape == (60, 2) and scale.dtype == torch.float32
    # the MAP part of a posterior fit is the plain (flat-prior, weight 1) MAP
    flat = _tsne(**short).fit(X)
    np.testing.assert_array_equal(tsne.map_embedding_, flat.embedding_.astype(np.float32))
    np.testing.assert_array_equal(tsne.embedding_, flat.embedding_)
    # a number is the prior's scale, for both
    for est in (_tsne(z_prior=7.0, **short, **svi).fit(X),
                probdr.WishartPCA(random_state=0, z_prior=7.0, **svi).fit(X)):
        assert est.z_prior_scale_ == 7.0


def test_temperature_is_the_likelihood_scale(svi_fit):
    """coupling_weight multiplies the log-likelihood: log p = log prior + beta * log lik."""
    kw = dict(svi_fit.model_kwargs_)
    Z = torch.as_tensor(svi_fit.embedding_, dtype=torch.float32)

    def parts(beta):
        tr = poutine.trace(poutine.condition(graph_coupling_model, data={"Z": Z})).get_trace(
            **{**kw, "coupling_weight": beta})
        tr.compute_log_prob()
        return float(tr.nodes["Z"]["log_prob_sum"]), float(tr.nodes["W_Z"]["log_prob_sum"])

    p1, l1 = parts(1.0)
    p3, l3 = parts(3.0)
    assert p1 == pytest.approx(p3)
    assert l3 == pytest.approx(3.0 * l1, rel=1e-5)


def test_mcmc_smoke(mcmc_fit):
    post = mcmc_fit.posterior_
    assert post.method == "mcmc"
    assert post.chains.shape == (2, 12, 20, 2)
    assert mcmc_fit.posterior_samples_.shape == (24, 20, 2)
    d = post.diagnostics
    for key in ("divergences", "accept_prob", "step_size", "r_hat_max", "ess_min", "seconds"):
        assert key in d
    assert len(d["divergences"]) == 2 and np.isfinite(d["r_hat_max"])
    assert post.raw_chains.shape == post.chains.shape
    assert len(d["divergent_draws"]) == 2


def test_fitted_estimators_pickle(svi_fit, mcmc_fit):
    import pickle

    for est in (svi_fit, mcmc_fit):
        again = pickle.loads(pickle.dumps(est))
        assert np.array_equal(again.posterior_samples_, est.posterior_samples_)


@pytest.mark.parametrize("kw, err, msg", [
    (dict(repulsion="negative_sampling"), ValueError, "stochastic"),
    (dict(repulsion="sampled"), ValueError, "stochastic"),
    (dict(max_params=10), ValueError, "exceeds the limit"),
    (dict(z_prior=None), ValueError, "proper prior"),
    (dict(bogus=1), TypeError, "unknown option"),
    (dict(num_chains=0), ValueError, "num_chains"),
])
def test_mcmc_refuses_invalid_setups(svi_fit, kw, err, msg):
    mk = dict(svi_fit.model_kwargs_)
    opts = {}
    for k, v in kw.items():
        (mk if k in ("repulsion", "z_prior") else opts)[k] = v
    with pytest.raises(err, match=msg):
        fit_posterior(graph_coupling_model, mk, torch.as_tensor(svi_fit.embedding_),
                      method="mcmc", **opts)


def test_mcmc_size_limit_message(blobs):
    X, _ = blobs
    Xb = np.tile(X, (4, 1)) + np.random.default_rng(0).normal(scale=0.01, size=(240, 5))
    assert 240 * 2 > MCMC_MAX_PARAMS
    with pytest.raises(ValueError, match="MCMC_MAX_PARAMS"):
        _tsne(n_iter=5, early_exaggeration_iter=0, inference="mcmc").fit(Xb)


def test_check_inference_fails_fast():
    assert check_inference("svi", 10, 2)["guide"] == "normal"
    assert check_inference("mcmc", 200, 2)["num_chains"] == 2
    with pytest.raises(ValueError, match="MCMC_MAX_PARAMS"):
        check_inference("mcmc", 201, 2)
    assert check_inference("mcmc", 201, 2, max_params=1000)["max_params"] == 1000
    with pytest.raises(ValueError, match="interpolation"):
        check_inference("mcmc", 10, 2, repulsion="fft")
    with pytest.raises(ValueError, match="warmup"):
        check_inference("mcmc", 10, 2, warmup=-1)
    with pytest.raises(ValueError, match="num_steps"):
        check_inference("svi", 10, 2, num_steps=0)
    with pytest.raises(TypeError, match="valid options"):
        check_inference("svi", 10, 2, num_chains=2)


def test_fit_posterior_validation(svi_fit):
    Z = torch.as_tensor(svi_fit.embedding_)
    with pytest.raises(ValueError, match="method"):
        fit_posterior(graph_coupling_model, svi_fit.model_kwargs_, Z, method="vi")
    with pytest.raises(ValueError, match="NaN"):
        fit_posterior(graph_coupling_model, svi_fit.model_kwargs_, Z * np.nan)
    with pytest.raises(ValueError, match="guide"):
        fit_posterior(graph_coupling_model, svi_fit.model_kwargs_, Z, guide="delta")
    with pytest.raises(ValueError, match="lr"):
        fit_posterior(graph_coupling_model, svi_fit.model_kwargs_, Z, lr=-1.0)
    with pytest.raises(ValueError, match="average"):
        fit_posterior(graph_coupling_model, svi_fit.model_kwargs_, Z, average=1.5)
    with pytest.raises(ValueError, match="reference"):
        fit_posterior(graph_coupling_model, svi_fit.model_kwargs_, Z, reference=np.zeros(3),
                      num_steps=1)


# ------------------------------------------------------------------------------------------
# posterior predictive graphs
# ------------------------------------------------------------------------------------------
def test_posterior_predictive_graphs_follow_the_latent_law(svi_fit):
    graphs = diagnostics.posterior_predictive_graphs(svi_fit, num_samples=4)
    assert len(graphs) == 4
    for W in graphs:
        assert W.is_sparse and W.shape == (60, 60)
        assert int(W.values().sum()) == 60  # E law: n edges in total
        assert not (W.indices()[0] == W.indices()[1]).any()
    again = diagnostics.posterior_predictive_graphs(svi_fit, num_samples=4)
    assert all(torch.equal(a.to_dense(), b.to_dense()) for a, b in zip(graphs, again, strict=True))


def test_input_graph_draws_are_d_law(svi_fit):
    for W in diagnostics.input_graph_draws(svi_fit, 3):
        assert torch.equal(W.to_dense().sum(1), torch.ones(60, dtype=W.dtype))


def test_compare_graphs_known_values():
    import igraph as ig
    import scipy.sparse as sp

    n = 6
    ref = ig.Graph(n=n, edges=[(0, 1), (1, 2), (3, 4), (4, 5)])  # 2 components
    A = np.zeros((n, n))
    A[0, 1] = A[2, 1] = 1  # 2 of the 4 reference edges, in both directions
    A[0, 5] = 1  # one edge outside the reference
    out = diagnostics.compare_graphs([sp.csr_matrix(A), torch.as_tensor(A)], ref)
    assert np.allclose(out["edge_recall"], 0.5)
    assert np.allclose(out["edge_precision"], 2 / 3)
    assert list(out["n_components"]) == [3, 3]  # {0,1,2,5}, {3}, {4}
    assert out["reference_n_components"] == 2 and out["reference_n_edges"] == 4
    assert out["union_recall"] == 0.5
    with pytest.raises(ValueError, match="no edges"):
        diagnostics.compare_graphs([A], np.zeros((n, n)))
    with pytest.raises(ValueError, match="nodes"):
        diagnostics.compare_graphs([np.zeros((3, 3))], ref)


def test_knn_reference_graph_from_estimator_matches_data(blobs):
    X, _ = blobs
    est = _tsne(n_iter=5, early_exaggeration_iter=0).fit(X)
    a = diagnostics.knn_reference_graph(est, k=5).to_dense()
    b = diagnostics.knn_reference_graph(k=5, X=X).to_dense()
    assert torch.equal(a, a.T) and torch.equal(a, b)


def test_posterior_predictive_check_on_map_and_posterior(blobs, svi_fit):
    X, _ = blobs
    est = _tsne(n_iter=100, early_exaggeration_iter=30).fit(X)  # MAP: plug-in predictive
    for e in (est, svi_fit):
        chk = diagnostics.posterior_predictive_check(e, num_samples=5, k=5)
        for side in ("latent", "input"):
            assert chk[side]["edge_precision"].shape == (5,)
            assert np.all((chk[side]["edge_recall"] >= 0) & (chk[side]["edge_recall"] <= 1))
        # input draws put their edges on input neighbours far more often than the latent law
        assert chk["input"]["edge_precision"].mean() > chk["latent"]["edge_precision"].mean()


# ------------------------------------------------------------------------------------------
# ArviZ
# ------------------------------------------------------------------------------------------
def test_to_arviz_dims_and_summary(svi_fit, mcmc_fit):
    import arviz as az

    idata = diagnostics.to_arviz(mcmc_fit)
    Z = idata.posterior["Z"]
    assert Z.dims == ("chain", "draw", "point", "latent_dim")
    assert Z.shape == (2, 12, 20, 2)
    assert np.allclose(Z.values, mcmc_fit.posterior_.chains)
    assert "diverging" in idata.sample_stats
    s = az.summary(idata)
    assert len(s) == 40 and "r_hat" in s.columns and "ess_bulk" in s.columns
    assert np.isfinite(az.ess(idata)["Z"].values).all()
    assert np.isfinite(az.rhat(idata)["Z"].values).all()
    sub = diagnostics.to_arviz(svi_fit, points=[0, 5, 7], include_raw=True)
    assert sub.posterior["Z"].shape == (1, 40, 3, 2)
    assert list(sub.posterior["point"].values) == [0, 5, 7]
    assert "Z_raw" in sub.posterior
    assert len(az.summary(sub, var_names=["Z"])) == 6


def test_to_arviz_errors(blobs, svi_fit):
    X, _ = blobs
    est = _tsne(n_iter=5, early_exaggeration_iter=0).fit(X)
    with pytest.raises(ValueError, match="no posterior"):
        diagnostics.to_arviz(est)
    with pytest.raises(ValueError, match="points"):
        diagnostics.to_arviz(svi_fit, points=[100])


def test_to_arviz_uses_the_arviz_1_api_when_present(svi_fit, monkeypatch):
    """ArviZ >= 1: from_dict({group: {var: array}}, dims=, coords=) returning a DataTree."""
    import arviz as az

    seen = {}

    def from_dict(data, *, dims=None, coords=None, attrs=None, **kwargs):
        seen.update(data=data, dims=dims, coords=coords)
        return "datatree"

    monkeypatch.setattr(az, "from_dict", from_dict)
    assert diagnostics.to_arviz(svi_fit) == "datatree"
    assert seen["data"]["posterior"]["Z"].shape == (1, 40, 60, 2)
    assert seen["dims"] == {"Z": ["point", "latent_dim"]}


# ------------------------------------------------------------------------------------------
# plots and CLI helpers
# ------------------------------------------------------------------------------------------
def test_ellipse_parameters():
    from probdr.plotting import _ellipse_params

    C = np.array([[[4.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 9.0]]])
    w, h, a = _ellipse_params(C, 1.0)
    assert np.allclose(w, [4.0, 6.0]) and np.allclose(h, [2.0, 2.0])
    assert np.isclose(abs(a[0]) % 180, 0.0) and np.isclose(abs(a[1]) % 180, 90.0)


def test_plot_uncertainty(svi_fit, blobs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import EllipseCollection

    from probdr.plotting import plot_predictive_check, plot_uncertainty

    _, y = blobs
    ax = plot_uncertainty(svi_fit, y)
    ec = [c for c in ax.collections if isinstance(c, EllipseCollection)]
    assert len(ec) == 1 and len(ec[0].get_offsets()) == 60
    ax2 = plot_uncertainty(svi_fit.posterior_, points=[1, 2, 3])
    assert len([c for c in ax2.collections if isinstance(c, EllipseCollection)][0]
               .get_offsets()) == 3
    with pytest.raises(ValueError, match="y must have shape"):
        plot_uncertainty(svi_fit, y[:5])
    chk = diagnostics.posterior_predictive_check(svi_fit, num_samples=3, k=5)
    axes = plot_predictive_check(chk)
    assert len(axes) == 2
    plt.close("all")


def test_cli_helpers(blobs, tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    from probdr.cli.bayes import add_bayes_arguments, bayes_estimator_kwargs, run_bayes_outputs

    X, y = blobs
    p = argparse.ArgumentParser()
    p.add_argument("--plot", default=None)
    p.add_argument("--method", default="tsne")
    add_bayes_arguments(p)
    assert bayes_estimator_kwargs(p.parse_args([])) == {}
    args = p.parse_args(["--inference", "svi", "--num-steps", "30", "--num-samples", "10",
                         "--plot", str(tmp_path / "emb.png")])
    kw = bayes_estimator_kwargs(args)
    assert kw["inference"] == "svi" and kw["inference_params"]["num_steps"] == 30
    est = _tsne(n_iter=30, early_exaggeration_iter=10, **kw).fit(X)
    summary = run_bayes_outputs(est, args, y)
    assert (tmp_path / "emb_uncertainty.png").exists()
    assert summary["draws"] == 10
    assert "posterior" in capsys.readouterr().out
    mc = bayes_estimator_kwargs(p.parse_args(["--inference", "mcmc"]))
    assert mc["repulsion"] == "exact" and mc["inference_params"]["num_chains"] == 2


def test_auto_coupling_weight_follows_the_tail_rule():
    """coupling_weight="auto": 1 for MAP; for SVI (q + 2) / (tau min_i m_i), with the attraction
    mass m_i = sum_j (W_ij + W_ji) of the observed graph (computed here from the dense mean) and
    tau the kernel's tail index; the MAP does not depend on the weight at all."""
    from sklearn.datasets import load_digits

    import probdr

    X = load_digits().data[:150]
    fast = dict(random_state=0, n_iter=60, early_exaggeration_iter=20)
    m = probdr.TSNE(**fast).fit(X)
    assert m.coupling_weight_ == 1.0
    np.testing.assert_array_equal(m.embedding_,
                                  probdr.TSNE(coupling_weight=7.0, **fast).fit(X).embedding_)
    s = probdr.TSNE(inference="svi", inference_params={"num_steps": 5, "num_samples": 4},
                    **fast).fit(X)
    W = s.input_graph_.mean
    W = (W.to_dense() if W.is_sparse else W).double().numpy().copy()
    np.fill_diagonal(W, 0.0)
    mass = W.sum(0) + W.sum(1)
    assert s.coupling_weight_ == pytest.approx(max(1.0, 4.0 / mass.min()))
    assert s.model_kwargs_["coupling_weight"] == s.coupling_weight_
    # light tails (SNE's Gaussian kernel): 1
    sne = probdr.SNE(inference="svi", inference_params={"num_steps": 5, "num_samples": 4},
                     **fast).fit(X)
    assert sne.coupling_weight_ == 1.0
