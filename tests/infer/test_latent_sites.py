r"""fit_posterior on models with latent sites beyond Z (probdr.infer.posterior, draws, ArviZ).

The test model is written with plain Pyro on the package's laws: a Student-t kernel whose
degrees of freedom :math:`\nu` and scale :math:`\sigma` are latent,

.. math::
    Z_{ia} \sim \mathcal N(0, 1.5^2),\quad \nu \sim \mathrm{LogNormal}(0, 1),\quad
    \sigma \sim \mathrm{LogNormal}(0, 0.3),\quad
    \log k_{ij} = -\tfrac{\nu+1}{2}\log\big(1 + \|z_i - z_j\|^2/(\nu\sigma^2)\big),

and the observations are :math:`m` draws :math:`W^{(t)}` of the D law (one out-edge per row)
with these weights, a batch of graphs in a ``pyro.plate``. The log-kernel
is written inline (not through ``probdr.kernels``) so that the test depends only on the laws.
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro import poutine

from probdr import diagnostics
from probdr.infer.posterior import (
    MCMC_MAX_PARAMS,
    check_mcmc_setup,
    fit_posterior,
    latent_sites,
)
from probdr.laws.graph import UnitDegreeGraph
from probdr.laws.weights import DenseWeights

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning",
                                        "ignore::RuntimeWarning")
DT = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models: one intra-op thread is faster on a shared machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=DT)


def _log_student(Z, nu, scale):
    d2 = (Z[:, None, :] - Z[None, :, :]).pow(2).sum(-1)
    return -(nu + 1) / 2 * torch.log1p(d2 / (nu * scale ** 2))


def student_model(W, z_prior, coupling_weight=1.0):
    """Z, nu and scale latent; W observed through the D law."""
    Z = pyro.sample("Z", z_prior)
    nu = pyro.sample("nu", dist.LogNormal(_t(0.0), _t(1.0)))
    scale = pyro.sample("scale", dist.LogNormal(_t(0.0), _t(0.3)))
    with poutine.scale(scale=coupling_weight):
        _observe(UnitDegreeGraph(DenseWeights(_log_student(Z, nu, scale))), W)


def _observe(law, W):
    """The m draws W (m, n, n), independent given the weights."""
    with pyro.plate("draws", W.shape[0]):
        pyro.sample("W", law, obs=W)


def zonly_model(W, z_prior, nu=1.0, scale=1.0, coupling_weight=1.0):
    """The same coupling with nu and scale fixed: Z is the only latent site."""
    Z = pyro.sample("Z", z_prior)
    with poutine.scale(scale=coupling_weight):
        _observe(UnitDegreeGraph(DenseWeights(_log_student(Z, nu, scale))), W)


def _problem(n=8, q=2, m=10, seed=0, z_scale=1.5):
    """Observed counts of m D-draws from a Cauchy kernel (nu = scale = 1) at Z ~ N(0, I)."""
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(n, q, generator=g, dtype=DT)
    pyro.set_rng_seed(seed)
    W = UnitDegreeGraph(DenseWeights(_log_student(Z, _t(1.0), _t(1.0)))).sample((m,))
    prior = dist.Normal(_t(0.0), _t(z_scale)).expand([n, q]).to_event(2)
    return dict(W=W, z_prior=prior), Z


def _gen(seed):
    return torch.Generator().manual_seed(seed)


#: a linear change of variables: inference on Z_raw = 2 Z
HALVE = {"Z": (lambda Y: 0.5 * Y, lambda Z: 2.0 * Z)}


@pytest.fixture(scope="module")
def problem():
    return _problem()


@pytest.fixture(scope="module")
def svi_post(problem):
    kw, Z = problem
    return fit_posterior(student_model, kw, Z.clone(), method="svi", generator=_gen(1),
                         num_steps=50, num_samples=40)


@pytest.fixture(scope="module")
def mcmc_post(problem):
    kw, Z = problem
    return fit_posterior(student_model, kw, Z.clone(), method="mcmc", generator=_gen(1),
                         warmup=10, num_samples=8, max_tree_depth=3)


# ------------------------------------------------------------------------------------------
# (a) draws of every latent site
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["svi", "mcmc"])
def test_svi_and_nuts_return_draws_of_every_site(which, svi_post, mcmc_post):
    post = svi_post if which == "svi" else mcmc_post
    C, S = (1, 40) if which == "svi" else (2, 8)
    assert post.site_names == ("Z", "nu", "scale")
    assert post.chains.shape == (C, S, 8, 2)
    for name in ("nu", "scale"):
        assert post.sites[name].shape == (C, S)
        assert post.site_samples(name).shape == (C * S,)
        assert np.all(post.sites[name] > 0)  # drawn in their support
        assert post.sites[name].std() > 0
    assert post.site_chains("Z") is post.chains
    summary = post.summary()
    assert set(summary) == {"Z", "nu", "scale"}
    assert summary["Z"]["mean"].shape == (8, 2)
    assert np.isclose(summary["nu"]["mean"], post.sites["nu"].mean())
    if which == "mcmc":
        assert summary["nu"]["r_hat"].shape == () and np.isfinite(summary["nu"]["ess"])
        assert np.isfinite(post.diagnostics["r_hat_max"])
    else:
        assert summary["nu"]["r_hat"] is None
    assert "sites=['nu', 'scale']" in repr(post)
    with pytest.raises(KeyError, match="no latent site"):
        post.site_chains("tau")


def test_guides_and_nuts_start_at_the_initial_values(problem):
    kw, Z = problem
    # named values are taken; the others start at their prior median (15 prior draws)
    lat = latent_sites(student_model, kw, {"Z": Z, "nu": _t(3.0)}, seed=0)
    assert list(lat.values) == ["Z", "nu", "scale"]
    assert torch.equal(lat.values["Z"], Z) and float(lat.values["nu"]) == 3.0
    assert 0.7 < float(lat.values["scale"]) < 1.4  # LogNormal(0, 0.3): median 1
    assert lat.supports["nu"] is dist.LogNormal(0.0, 1.0).support
    # AutoNormal starts at them: after one step of a tiny learning rate its loc is log 3
    post = fit_posterior(student_model, kw, Z.clone(), method="svi", init_values={"nu": 3.0},
                         num_steps=1, lr=1e-8, num_samples=2, generator=_gen(0))
    loc, _ = post.guide._get_loc_and_scale("nu")
    assert abs(float(loc) - np.log(3.0)) < 1e-6
    for guide in ("lowrank", "mvn"):
        post = fit_posterior(student_model, kw, Z.clone(), method="svi", guide=guide,
                             init_values={"nu": 3.0}, num_steps=2, num_samples=3)
        assert post.sites["nu"].shape == (1, 3) and post.sites["scale"].shape == (1, 3)
        if guide == "lowrank":  # the default rank counts every latent parameter
            assert "rank=5" in post.diagnostics["guide"]  # ceil(sqrt(8 * 2 + 2))


def test_bad_initial_values_and_discrete_sites_are_refused(problem):
    kw, Z = problem
    for bad, msg in [({"tau": 1.0}, "not latent sites"), ({"nu": -1.0}, "outside its support"),
                     ({"nu": torch.ones(2, dtype=DT)}, "has shape"), ({"Z": Z}, "Z_init")]:
        with pytest.raises(ValueError, match=msg):
            fit_posterior(student_model, kw, Z.clone(), init_values=bad, num_steps=1)

    def discrete(W, z_prior):
        pyro.sample("k", dist.Categorical(logits=torch.zeros(3, dtype=DT)))
        zonly_model(W, z_prior)

    with pytest.raises(ValueError, match="discrete"):
        fit_posterior(discrete, kw, Z.clone(), num_steps=1)


def test_nuts_size_limit_counts_every_latent_parameter(problem):
    kw, Z = problem  # 8 x 2 = 16 coordinates of Z, plus nu and scale
    with pytest.raises(ValueError, match="2 other latent parameters = 8\\*2 \\+ 2 = 18"):
        fit_posterior(student_model, kw, Z.clone(), method="mcmc", max_params=17)
    with pytest.raises(ValueError, match="exceeds"):
        check_mcmc_setup(MCMC_MAX_PARAMS // 2, 2, extra_params=1)
    check_mcmc_setup(MCMC_MAX_PARAMS // 2, 2)


@pytest.mark.parametrize("reparam", [None, HALVE])
def test_nuts_samples_a_positive_site_with_its_jacobian(reparam):
    """A model whose posterior is its prior: Z ~ N(0, 1) and nu ~ LogNormal(0, 1), nothing
    observed. NUTS runs in log nu, on Pyro's model path and on the change-of-variables path
    (a hand-built potential over every site); without the log-Jacobian of the exp transform the
    draws of log nu would be N(-1, 1) instead of N(0, 1)."""
    def prior_only(z_prior):
        pyro.sample("Z", z_prior)
        pyro.sample("nu", dist.LogNormal(_t(0.0), _t(1.0)))

    prior = dist.Normal(_t(0.0), _t(1.0)).expand([2, 1]).to_event(2)
    post = fit_posterior(prior_only, {"z_prior": prior}, torch.zeros(2, 1, dtype=DT),
                         method="mcmc", reparam=reparam, align=False, warmup=60,
                         num_samples=150, num_chains=1, max_tree_depth=4, generator=_gen(0))
    log_nu = np.log(post.site_samples("nu"))
    print(f"log nu: mean {log_nu.mean():.3f}, sd {log_nu.std():.3f}")
    assert abs(log_nu.mean()) < 0.25 and abs(log_nu.std() - 1) < 0.2
    assert abs(post.samples.mean()) < 0.25 and abs(post.samples.std() - 1) < 0.2


# ------------------------------------------------------------------------------------------
# (b) ArviZ
# ------------------------------------------------------------------------------------------
def test_to_arviz_has_every_site(svi_post, mcmc_post):
    import arviz as az

    for post in (svi_post, mcmc_post):
        idata = diagnostics.to_arviz(post)
        assert set(idata.posterior.data_vars) == {"Z", "nu", "scale"}
        assert idata.posterior["nu"].dims == ("chain", "draw")
        assert idata.posterior["Z"].dims == ("chain", "draw", "point", "latent_dim")
        np.testing.assert_array_equal(idata.posterior["scale"].values, post.sites["scale"])
    s = az.summary(diagnostics.to_arviz(mcmc_post, points=[0, 1]), var_names=["nu", "scale"])
    assert list(s.index) == ["nu", "scale"] and np.all(np.isfinite(s["r_hat"]))


def test_a_vector_site_gets_its_own_dims(problem):
    """A per-cluster variable: one positive scale per cluster of points."""
    import arviz as az

    kw, Z = problem
    cluster = torch.arange(8) % 3

    def clustered(W, z_prior):
        Z = pyro.sample("Z", z_prior)
        with pyro.plate("clusters", 3):
            s = pyro.sample("s", dist.LogNormal(_t(0.0), _t(0.3)))
        logk = _log_student(Z / s[cluster, None], _t(1.0), _t(1.0))
        _observe(UnitDegreeGraph(DenseWeights(logk)), W)

    post = fit_posterior(clustered, kw, Z.clone(), init_values={"s": torch.ones(3, dtype=DT)},
                         num_steps=5, num_samples=4, generator=_gen(0))
    assert post.sites["s"].shape == (1, 4, 3)
    idata = diagnostics.to_arviz(post)
    assert idata.posterior["s"].dims == ("chain", "draw", "s_dim_0")
    assert isinstance(idata, az.InferenceData)


# ------------------------------------------------------------------------------------------
# (d) a Z-only model
# ------------------------------------------------------------------------------------------
NUTS_TINY = dict(method="mcmc", warmup=10, num_samples=8, num_chains=2, max_tree_depth=4)
RUNS = {
    "svi_normal": dict(method="svi", num_steps=60, num_samples=20),
    "svi_lowrank": dict(method="svi", guide="lowrank", num_steps=60, num_samples=20),
    "mcmc": NUTS_TINY,
    "mcmc_reparam": dict(NUTS_TINY, reparam=HALVE),
    "svi_reparam": dict(method="svi", num_steps=60, num_samples=20, reparam=HALVE),
}


@pytest.mark.parametrize("run", list(RUNS))
def test_a_z_only_model_has_only_z(run):
    """A model whose only latent site is Z: draws of Z alone, repeatable from the generator."""
    kw, Z = _problem(n=5, m=4, z_scale=2.0)
    posts = [fit_posterior(zonly_model, dict(kw, coupling_weight=2.0), Z.clone(),
                           generator=_gen(3), **RUNS[run]) for _ in range(2)]
    assert posts[0].sites == {} and posts[0].site_names == ("Z",)
    assert np.isfinite(posts[0].mean).all()
    np.testing.assert_array_equal(posts[0].mean, posts[1].mean)


# ------------------------------------------------------------------------------------------
# (c) NUTS and SVI agree on nu
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_nuts_and_svi_agree_on_the_degrees_of_freedom(problem):
    """Mean-field SVI (AutoNormal: log nu Gaussian) and NUTS on the same posterior: the means of
    nu agree within two NUTS posterior sds; the chains have mixed."""
    kw, Z = problem
    svi = fit_posterior(student_model, kw, Z.clone(), method="svi", generator=_gen(1),
                        num_steps=1000, lr=0.05, num_particles=2, num_samples=2000)
    mc = fit_posterior(student_model, kw, Z.clone(), method="mcmc", generator=_gen(1),
                       warmup=150, num_samples=150, max_tree_depth=5)
    s_svi, s_mc = svi.summary(), mc.summary()
    a, b = s_svi["nu"], s_mc["nu"]
    print(f"nu: SVI mean {a['mean']:.4f} sd {a['sd']:.4f}; NUTS mean {b['mean']:.4f} "
          f"sd {b['sd']:.4f}, R-hat {float(b['r_hat']):.3f}, ESS {float(b['ess']):.0f}")
    assert s_mc["nu"]["r_hat"] < 1.1 and s_mc["nu"]["ess"] > 50
    assert abs(s_svi["nu"]["mean"] - s_mc["nu"]["mean"]) < 2 * s_mc["nu"]["sd"]
