"""One MAP driver for every family, and posteriors of the Wishart family through it.

* :class:`probdr.infer.map.MAPFit` is the only MAP loop: ``run_map`` (graph couplings),
  ``map_estimate`` (Wishart, ccPCA) and the alternating DistR / GW-MDS fits run on it. Its steps
  are checked against the loops it replaced (L-BFGS on an ``AutoDelta`` guide, Pyro's ``SVI``
  with ``pyro.optim.Adam`` / ``SGD``), bit for bit.
* ``WishartPCA``, ``WishartEigenmaps`` and ``LaplacianWishart`` take ``inference="svi"|"mcmc"``:
  the flat prior becomes an isotropic Gaussian (10 x the MAP's RMS) and the likelihood is
  tempered by ``coupling_weight`` (omega). A Laplace approximation predicts a posterior spread
  proportional to omega^{-1/2} and a posterior mean that tends to the MAP; both are measured.
"""

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import AutoDelta
from pyro.infer.autoguide.initialization import init_to_value
from torch.distributions import constraints

import probdr
import probdr.estimators.wishart as wishart_estimators
from probdr.infer import Phase, map_estimate, run_map
from probdr.infer.map import MAPFit, RelativeChange
from probdr.infer.posterior import fit_posterior, procrustes_align
from probdr.laws.wishart import ConjugateWishartPosterior
from probdr.models.wishart_pca import default_dofs, wishart_pca_model

WEIGHTS = (1.0, 10.0, 100.0)
DT = torch.float64


def _rel(A, B):
    """Relative Frobenius distance after aligning A onto B (rotation, reflection, translation)."""
    return float(np.linalg.norm(procrustes_align(A, B) - B) / np.linalg.norm(B))


def _tempered_fits(cls, X, **kw):
    """The MAP, and the SVI posterior at each coupling weight (same random_state)."""
    Z_map = cls(random_state=0, **kw).fit_transform(X)
    fits = [cls(random_state=0, inference="svi", coupling_weight=w, **kw).fit(X) for w in WEIGHTS]
    return Z_map, fits


@pytest.fixture(scope="module")
def digits150():
    from sklearn.datasets import load_digits

    return load_digits().data[:150].astype(np.float64)


def _check_concentration(Z_map, fits, *, first, last, factor):
    rel = [_rel(est.posterior_mean_, Z_map) for est in fits]
    spread = [float(est.posterior_.point_std().mean()) for est in fits]
    # the posterior mean tends to the MAP ...
    assert rel[0] < first and rel[-1] < last, rel
    assert all(a > factor * b for a, b in zip(rel, rel[1:], strict=False)), rel
    # ... and the spread shrinks like omega^{-1/2} (Laplace): a ratio 10^{-1/2} = 0.316 per step
    ratios = [b / a for a, b in zip(spread, spread[1:], strict=False)]
    assert all(0.28 < r < 0.36 for r in ratios), (spread, ratios)
    return rel, spread


# ------------------------------------------------------------------------------------------------
# posteriors of the Wishart family
# ------------------------------------------------------------------------------------------------
def test_wishart_pca_posterior_mean_approaches_the_map(digits150):
    # measured (150 digits, seed 0; seeds 1-3 alike): distances 0.019, 0.0074, 0.0039;
    # mean per-point spreads 2.30, 0.728, 0.230 (ratios 0.316)
    X = digits150
    Z_map, fits = _tempered_fits(probdr.WishartPCA, X)
    _check_concentration(Z_map, fits, first=0.05, last=0.01, factor=1.5)
    est = fits[0]
    post = est.posterior_
    assert post.method == "svi" and est.posterior_samples_.shape == (200, 150, 2)
    assert np.array_equal(est.posterior_mean_, post.mean)
    # SVI starts at (and is aligned to) the MAP, whose prior scale it derives from; no mode
    # search unless asked
    assert _rel(est.map_embedding_, Z_map) < 1e-6
    assert np.array_equal(post.reference, est.map_embedding_)
    assert np.array_equal(est.mode_embedding_, est.map_embedding_) and est.map_converged_ is None
    rms = math.sqrt(float((est.map_embedding_ ** 2).mean()))
    assert est.z_prior_scale_ == pytest.approx(10 * rms, rel=1e-12)
    assert isinstance(est.precision_posterior_, ConjugateWishartPosterior)


def test_wishart_eigenmaps_posterior_mean_approaches_the_map(digits150):
    # measured (150 digits, seed 0; seeds 1-3 alike): distances 0.065, 0.014, 0.0068;
    # mean per-point spreads 0.0221, 0.0070, 0.0022 (ratios 0.316)
    Z_map, fits = _tempered_fits(probdr.WishartEigenmaps, digits150)
    _check_concentration(Z_map, fits, first=0.15, last=0.015, factor=1.5)


def test_laplacian_wishart_posterior_and_nuts_smoke():
    """The ProbDR model (eq. 5) by SVI, and every Wishart estimator by NUTS on a small problem."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5)) * np.array([3.0, 2.0, 1.0, 0.5, 0.2])
    est = probdr.LaplacianWishart(n_neighbors=8, random_state=0, inference="svi",
                                  coupling_weight=10.0,
                                  inference_params={"num_steps": 200, "num_samples": 50}).fit(X)
    assert est.posterior_samples_.shape == (50, 40, 2)
    assert np.all(np.isfinite(est.embedding_)) and est.posterior_.point_std().mean() > 0
    mcmc = dict(num_chains=1, warmup=40, num_samples=30)
    for cls, kw in ((probdr.WishartPCA, {}), (probdr.WishartEigenmaps, {"n_neighbors": 8})):
        est = cls(random_state=0, inference="mcmc", inference_params=mcmc, **kw).fit(X)
        assert est.posterior_.method == "mcmc" and est.posterior_samples_.shape == (30, 40, 2)
        assert np.all(np.isfinite(est.posterior_samples_))
        assert est.posterior_.diagnostics["divergences"] == [0]


def test_map_is_the_default_and_untouched_by_the_new_parameters():
    X = np.random.default_rng(3).normal(size=(50, 5)) * np.array([3, 2, 1, 0.5, 0.1])
    a = probdr.WishartPCA(random_state=7)
    Za = a.fit_transform(X)
    assert a.inference == "map" and not hasattr(a, "posterior_")
    Zb = probdr.WishartPCA(random_state=7, inference="map", inference_params=None, z_prior=None,
                           coupling_weight=1.0).fit_transform(X)
    assert np.array_equal(Za, Zb)
    # a prior in the MAP moves it (a little: a wide prior)
    Zc = probdr.WishartPCA(random_state=7, z_prior=100.0).fit_transform(X)
    assert 0 < _rel(Zc, Za) < 1e-2


@pytest.mark.parametrize("cls, kw", [(probdr.WishartPCA, {}),
                                     (probdr.WishartEigenmaps, {"n_neighbors": 8}),
                                     (probdr.LaplacianWishart, {"n_neighbors": 8})])
@pytest.mark.parametrize("bad, err, match", [
    ({"inference": "nuts"}, ValueError, "inference"),
    ({"coupling_weight": 0.0}, ValueError, "coupling_weight"),
    ({"coupling_weight": float("nan")}, ValueError, "coupling_weight"),
    ({"coupling_weight": True}, ValueError, "coupling_weight"),
    ({"z_prior": -1.0}, ValueError, "z_prior"),
    ({"z_prior": "wide"}, ValueError, "z_prior"),
    ({"z_prior": dist.Normal(0.0, 1.0).expand([3, 2]).to_event(2)}, ValueError, "z_prior"),
    ({"inference": "svi", "inference_params": [1]}, ValueError, "inference_params"),
    ({"inference": "svi", "inference_params": {"steps": 10}}, TypeError, "unknown option"),
    ({"inference": "mcmc", "inference_params": {"max_params": 10}}, ValueError, "NUTS"),
])
def test_posterior_settings_fail_before_the_map(monkeypatch, cls, kw, bad, err, match):
    def boom(*args, **kwargs):
        raise AssertionError("the MAP ran before the parameters were checked")

    monkeypatch.setattr(wishart_estimators, "map_estimate", boom)
    X = np.random.default_rng(0).normal(size=(40, 5))
    with pytest.raises(err, match=match):
        cls(**kw, **bad).fit(X)


def test_closed_form_with_a_prior_is_refused():
    X = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(ValueError, match="z_prior"):
        probdr.WishartPCA(solver="closed_form", z_prior=3.0).fit(X)


# ------------------------------------------------------------------------------------------------
# fit_posterior's linear change of variables
# ------------------------------------------------------------------------------------------------
def test_fit_posterior_reparam_gives_the_same_gaussian_posterior():
    """A conjugate model with an ill-conditioned likelihood: the exact posterior is Gaussian with
    precision I + Lambda per column. Whitening makes the mean-field guide exact."""
    n = 12
    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=DT))
    Lam = Q @ torch.diag(torch.logspace(-1, 3, n, dtype=DT)) @ Q.T
    m = torch.randn(n, 2, generator=g, dtype=DT)
    prior = dist.Normal(torch.zeros((), dtype=DT), torch.ones((), dtype=DT)).expand([n, 2]) \
        .to_event(2)

    def model(z_prior):
        Z = pyro.sample("Z", z_prior)
        pyro.factor("lik", -0.5 * ((Z - m) * (Lam @ (Z - m))).sum())

    prec = torch.eye(n, dtype=DT) + Lam
    cov = torch.linalg.inv(prec)
    mean = cov @ (Lam @ m)
    w, V = torch.linalg.eigh(prec)
    P, P_inv = (V * w.sqrt()) @ V.T, (V / w.sqrt()) @ V.T
    sd = np.sqrt(torch.diagonal(cov).numpy())[:, None]
    whiten = {"Z": (lambda Y: P_inv @ Y, lambda Z: P @ Z)}
    # measured: variance ratios 0.92-1.06, mean error <= 0.11 sd with the change of variables;
    # without it, the mean-field guide in Z finds variances 0.01-0.12 times the exact ones
    for reparam in (whiten, None):
        post = fit_posterior(model, {"z_prior": prior}, mean, method="svi",
                             generator=torch.Generator().manual_seed(1), align=False,
                             reparam=reparam, num_steps=1500, lr=0.05, num_samples=4000)
        ratio = post.samples.var(0) / sd ** 2
        if reparam is None:
            assert ratio.max() < 0.5, ratio
        else:
            assert np.all(np.abs(ratio - 1) < 0.15), ratio
            assert np.all(np.abs(post.mean - mean.numpy()) < 0.25 * sd)
    with pytest.raises(ValueError, match="reparam"):
        fit_posterior(model, {"z_prior": prior}, mean, reparam={"W": (P_inv.__matmul__,
                                                                     P.__matmul__)})


# ------------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------------
def _flat_model(target, scale):
    def model():
        Z = pyro.sample("Z", dist.ImproperUniform(constraints.real, (), tuple(target.shape)))
        pyro.factor("f", -(scale * (Z - target) ** 2).sum() - (Z ** 4).sum() / 4)
    return model


def test_run_map_leaves_the_callers_param_store_alone():
    pyro.clear_param_store()
    w = pyro.param("w", torch.arange(3.0))
    target = torch.randn(6, 2, dtype=DT)
    res = run_map(_flat_model(target, 1.0), {}, torch.zeros(6, 2, dtype=DT),
                  [Phase(20, 0.1)], optimizer="adam")
    assert res.n_iter == 20 and res.Z.shape == (6, 2)
    assert list(pyro.get_param_store().keys()) == ["w"]
    assert pyro.param("w") is w
    map_estimate(_flat_model(target, 1.0), {}, {"Z": torch.zeros(6, 2, dtype=DT)})
    assert list(pyro.get_param_store().keys()) == ["w"]
    pyro.clear_param_store()


def _old_lbfgs(model, kwargs, init, n_iter, lr, tol):
    """The L-BFGS loop ``map_estimate`` ran before the driver (the reference)."""
    with pyro.get_param_store().scope():
        guide = AutoDelta(model, init_loc_fn=init_to_value(values={"Z": init.clone()}))
        elbo = Trace_ELBO()
        guide(**kwargs)
        store = pyro.get_param_store()
        params = [store[name].unconstrained() for name in store.keys()]
        opt = torch.optim.LBFGS(params, lr=lr, max_iter=20, history_size=20,
                                tolerance_grad=1e-300, tolerance_change=1e-300,
                                line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad(set_to_none=True)
            loss = elbo.differentiable_loss(model, guide, **kwargs)
            loss.backward()
            return loss

        history, prev = [], None
        for _ in range(max(1, n_iter // 20)):
            loss = float(opt.step(closure).detach())
            history.append(loss)
            if prev is not None and abs(prev - loss) <= tol * max(1.0, abs(loss)):
                break
            prev = loss
        return guide.median(**kwargs)["Z"].detach(), np.asarray(history)


def test_lbfgs_path_equals_the_old_map_estimate_and_the_closed_form():
    g = torch.Generator().manual_seed(0)
    n, p, q = 60, 6, 2
    X = torch.randn(n, p, generator=g, dtype=DT) * torch.linspace(3, 0.3, p, dtype=DT)
    X = X - X.mean(0)
    nu_x, nu_z = default_dofs(n, p, q)
    kw = dict(X=X, n_components=q, nu_x=nu_x, nu_z=nu_z, posterior=ConjugateWishartPosterior(X, nu_x))
    Z0 = torch.randn(n, q, generator=g, dtype=DT)
    Z_old, h_old = _old_lbfgs(wishart_pca_model, kw, Z0, 400, 1.0, 1e-12)
    vals, h = map_estimate(wishart_pca_model, kw, {"Z": Z0}, n_iter=400, return_history=True)
    assert torch.equal(vals["Z"], Z_old) and np.array_equal(h, h_old)
    res = run_map(wishart_pca_model, kw, Z0, [Phase(20, 1.0, converged=RelativeChange(1e-12))],
                  optimizer="lbfgs")
    assert torch.equal(res.Z, Z_old) and np.array_equal(res.loss_history, h_old)
    # and it is the MAP: Theorem 2's closed form, up to a rotation (3e-6 without the
    # preconditioner; WishartPCA's preconditioned fit reaches 1e-6, tests/models/test_wishart.py)
    Zcf = probdr.WishartPCA(solver="closed_form").fit_transform(X.numpy())
    G, Gcf = Z_old @ Z_old.T, torch.as_tensor(Zcf @ Zcf.T)
    assert float((G - Gcf).norm() / Gcf.norm()) < 1e-5


@pytest.mark.parametrize("name, pyro_optim, lr", [("adam", pyro.optim.Adam, 0.05),
                                                  ("sgd", pyro.optim.SGD, 0.01)])
def test_gradient_steps_equal_pyro_svi(name, pyro_optim, lr):
    """The Adam and SGD steps equal Pyro's SVI with pyro.optim.Adam / SGD, which DistR, GW-MDS
    and the Wishart Adam path used before the driver."""
    target = torch.randn(8, 2, dtype=DT, generator=torch.Generator().manual_seed(2))
    model = _flat_model(target, 3.0)
    Z0 = torch.zeros(8, 2, dtype=DT)
    with pyro.get_param_store().scope():
        guide = AutoDelta(model, init_loc_fn=init_to_value(values={"Z": Z0.clone()}))
        svi = SVI(model, guide, pyro_optim({"lr": lr}), Trace_ELBO())
        losses = [svi.step() for _ in range(60)]
        Z_svi = guide.median()["Z"].detach()
    res = run_map(model, {}, Z0, [Phase(60, lr)], optimizer=name, warn_collapse=False,
                  loss_every=1)
    assert torch.equal(res.Z, Z_svi) and np.array_equal(res.loss_history, losses)


def test_map_fit_carries_the_optimiser_across_runs():
    """Two runs of an open MAPFit are one run (DistR's and GW-MDS's alternations rely on it);
    the model arguments may change between runs."""
    target = torch.randn(8, 2, dtype=DT, generator=torch.Generator().manual_seed(3))
    model = _flat_model(target, 2.0)
    Z0 = torch.zeros(8, 2, dtype=DT)
    with MAPFit(model, {"Z": Z0}, optimizer="adam") as fit:
        assert fit.run(Phase(15, 0.05), {}) == 15
        fit.run(Phase(25, 0.05), {})
        Z_two = fit.values({})["Z"]
        assert fit.n_steps == 40
    res = run_map(model, {}, Z0, [Phase(40, 0.05)], optimizer="adam")
    assert torch.equal(Z_two, res.Z)
    fit = MAPFit(model, {"Z": Z0})
    with pytest.raises(RuntimeError, match="context manager"):
        fit.run(Phase(1, 0.1), {})


def test_driver_refuses_bad_settings_and_non_finite_losses():
    model = _flat_model(torch.zeros(4, 2, dtype=DT), 1.0)
    Z0 = torch.zeros(4, 2, dtype=DT)
    with pytest.raises(ValueError, match="optimizer"):
        run_map(model, {}, Z0, [Phase(1, 0.1)], optimizer="rmsprop")
    with pytest.raises(ValueError, match="grad_clip"):
        run_map(model, {}, Z0, [Phase(1, 0.1)], optimizer="lbfgs", grad_clip=1.0)

    def blows_up():
        Z = pyro.sample("Z", dist.ImproperUniform(constraints.real, (), (4, 2)))
        pyro.factor("f", (Z ** 2).sum() * 1e300 * 1e300)
    with pytest.raises(FloatingPointError, match="non-finite"):
        run_map(blows_up, {}, Z0 + 1, [Phase(3, 0.1)], optimizer="adam")

    calls = []

    def blows_up_later():  # at the third step, one the record skips: still caught there
        Z = pyro.sample("Z", dist.ImproperUniform(constraints.real, (), (4, 2)))
        calls.append(1)
        pyro.factor("f", (Z ** 2).sum() * (math.inf if len(calls) >= 4 else 1.0))
    with pytest.raises(FloatingPointError, match="non-finite at step 2"):
        run_map(blows_up_later, {}, Z0 + 1, [Phase(8, 0.1)], optimizer="adam", loss_every=10)


def test_models_default_to_the_papers_model():
    """z_prior=None and coupling_weight=1 reproduce the MAP models exactly; the weight scales
    the likelihood."""
    g = torch.Generator().manual_seed(4)
    X = torch.randn(20, 4, generator=g, dtype=DT)
    nu_x, nu_z = default_dofs(20, 4, 2)
    Z = torch.randn(20, 2, generator=g, dtype=DT)

    def log_lik(**kw):
        tr = poutine.trace(poutine.condition(wishart_pca_model, {"Z": Z})).get_trace(
            X, 2, nu_x, nu_z, **kw)
        tr.compute_log_prob()
        return tr.nodes["Theta_Z"]["log_prob_sum"], tr.nodes["Z"]["log_prob_sum"]

    base, flat = log_lik()
    same, _ = log_lik(z_prior=None, coupling_weight=1.0)
    assert torch.equal(base, same) and float(flat) == 0.0
    tempered, _ = log_lik(coupling_weight=7.0)
    assert torch.allclose(tempered, 7.0 * base, rtol=1e-14)
    prior = dist.Normal(torch.zeros((), dtype=DT), torch.tensor(2.0, dtype=DT)).expand([20, 2]) \
        .to_event(2)
    _, lp = log_lik(z_prior=prior)
    assert torch.allclose(lp, prior.log_prob(Z))


@pytest.mark.parametrize("cls", [probdr.TSNE, probdr.UMAP])
def test_loss_every_skips_edge_values_only(digits150, cls, monkeypatch):
    """Recording the loss every k-th step changes no number: the embedding is the one of a fit
    that records every step, bit for bit, and the recorded losses are that fit's at those steps
    (each phase's first and last step included). The steps between compute no edge-sum value."""
    import probdr._compute.edges as pairwise
    from probdr import config

    X = digits150
    kw = dict(random_state=0, n_iter=60, early_exaggeration_iter=20) if cls is probdr.TSNE \
        else dict(random_state=0, n_epochs=40)
    config.set_loss_every(1)
    try:
        full = cls(**kw).fit(X)
    finally:
        config.set_loss_every(None)
    from probdr.models import coupling_fused

    calls = []
    real = pairwise.edge_value
    monkeypatch.setattr(pairwise, "edge_value", lambda *a: calls.append(1) or real(*a))
    one_pass = coupling_fused.cauchy_pairs_value_and_grad  # small exact t-SNE's edge values

    def spy(Z, V, g, edges=None):
        if edges is not None:
            calls.append(1)
        return one_pass(Z, V, g, edges)
    monkeypatch.setattr(coupling_fused, "cauchy_pairs_value_and_grad", spy)
    config.set_loss_every(7)
    try:
        thin = cls(**kw).fit(X)
    finally:
        config.set_loss_every(None)
    np.testing.assert_array_equal(thin.embedding_, full.embedding_)
    assert thin.n_iter_ == full.n_iter_ == len(full.loss_history_)
    np.testing.assert_array_equal(full.loss_steps_, np.arange(1, full.n_iter_ + 1))
    steps = thin.loss_steps_
    assert steps[0] == 1 and steps[-1] == thin.n_iter_ and np.all(np.diff(steps) > 0)
    assert 1 < len(steps) < thin.n_iter_ // 3
    np.testing.assert_array_equal(thin.loss_history_, full.loss_history_[steps - 1])
    if cls is probdr.TSNE:  # the edge sum's value, at the recorded steps only (UMAP samples)
        assert len(calls) == len(steps)


def test_loss_every_setting_and_its_default():
    from probdr import config

    assert config.get_loss_every() is None
    assert config.loss_every() == config.LOSS_EVERY_LARGE
    assert config.LOSS_EVERY_LARGE == 50
    with pytest.raises(ValueError, match="positive integer"):
        config.set_loss_every(0)
    with pytest.raises(ValueError, match="positive integer"):
        MAPFit(lambda: None, {"Z": torch.zeros(3, 2)}, loss_every=0)
    config.set_loss_every(3)
    try:
        assert config.loss_every() == 3
    finally:
        config.set_loss_every(None)


def _coupling_kwargs(n=120, seed=0):
    """The model arguments of a TSNE fit on ``n`` digits (exact E law, Student kernel), with
    its kernel's tail learned (a constrained latent site beside Z)."""
    from probdr.kernels import Learn, StudentKernel

    X, _ = probdr.datasets.load("digits")
    est = probdr.TSNE(random_state=seed, n_iter=1, early_exaggeration_iter=1).fit(X[:n])
    kw = dict(est.model_kwargs_)
    kw["kernel"] = StudentKernel(dof=Learn(1.5))
    return kw, torch.as_tensor(est.embedding_, dtype=torch.float32)


def test_point_mass_loss_is_the_elbo_of_a_delta_guide():
    """For a point-mass guide the MAP driver's loss (point_mass_loss, the guide left unscored)
    has Trace_ELBO's gradient, number for number, and its value to float32 rounding."""
    from probdr.infer.schedule import point_mass_loss
    from probdr.models.coupling import graph_coupling_model

    kw, Z = _coupling_kwargs()
    grads, values = [], []
    for loss_of in (point_mass_loss, Trace_ELBO().differentiable_loss):
        with pyro.get_param_store().scope():
            start = {"Z": Z.clone(), "dof": torch.tensor(1.5)}
            guide = AutoDelta(graph_coupling_model, init_loc_fn=init_to_value(values=start))
            guide(**kw)
            params = [pyro.get_param_store()[k].unconstrained()
                      for k in sorted(pyro.get_param_store().keys())]
            loss = loss_of(graph_coupling_model, guide, **kw)
            grads.append(torch.autograd.grad(loss, params))
            values.append(float(loss))
    assert len(grads[0]) == 2  # Z and the learned tail
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
    assert math.isclose(values[0], values[1], rel_tol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: probdr.TSNE(random_state=0, n_iter=150, early_exaggeration_iter=50),
    lambda: probdr.UMAP(random_state=0, n_epochs=60, epoch_steps=3)], ids=["TSNE", "UMAP"])
def test_point_mass_loss_changes_no_embedding(make, monkeypatch):
    """The estimators' MAP fits (TSNE's exact law with early exaggeration, UMAP's negative
    sampling over epochs of three steps) give the same embedding, bit for bit, with the guide
    scored by Trace_ELBO as before."""
    X, _ = probdr.datasets.load("digits")
    fast = make().fit_transform(X[:300])
    monkeypatch.setattr(MAPFit, "_loss", lambda self, kwargs: self._elbo.differentiable_loss(
        self._model, self.guide, **kwargs))
    slow = make().fit_transform(X[:300])
    assert np.array_equal(fast, slow)
