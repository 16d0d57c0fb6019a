"""A kernel's numbers learned by MAP with the embedding: the MAP driver's per-site Adam, and
``TSNE(dof="learn")`` / ``kernel_params={"dof": "learn"}`` end to end."""

import math

import numpy as np
import pyro
import pytest
import torch
from scipy.optimize import minimize_scalar

import probdr
from probdr.infer.map import Phase, run_map
from probdr.kernels import Learn, StudentKernel
from probdr.laws.graph import NEdgeGraph
from probdr.laws.weights import KernelWeights


def _graph_from_student(n=60, dof=0.5, seed=0):
    """Z* and 15 E-law graphs (n edges each) drawn under the Student kernel of ``dof``: a batch,
    so that the likelihood in dof is well curved."""
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(n, 2, dtype=torch.float64, generator=g) * 3.0
    law = NEdgeGraph(KernelWeights(Z, StudentKernel(dof=dof)))
    torch.manual_seed(seed)
    return Z, law.sample((15,)).double()


def _nll(Z, W, dof):
    return -float(NEdgeGraph(KernelWeights(Z, StudentKernel(dof=dof))).log_prob(W).sum())


def test_map_driver_learns_a_kernel_number_to_the_exact_maximiser():
    """Z held fixed (observed), the site ``dof`` stepped by its own Adam: the driver reaches the
    maximum-likelihood dof found by scipy on the exact likelihood."""
    Z, W = _graph_from_student()

    def model(W):
        kernel = StudentKernel(dof=Learn()).sampled()
        with pyro.plate("graphs", W.shape[0]):
            pyro.sample("W", NEdgeGraph(KernelWeights(Z, kernel)), obs=W)

    # a site the driver needs: a dummy Z-like parameter stepped by the main optimiser
    def with_dummy(W):
        pyro.sample("Z", pyro.distributions.Normal(0.0, 1.0).expand([2]).to_event(1))
        model(W)

    res = run_map(with_dummy, {"W": W}, {"Z": torch.zeros(2, dtype=torch.float64),
                                          "dof": torch.tensor(1.0, dtype=torch.float64)},
                  [Phase(250, 0.01)], optimizer="adam", site_lr={"dof": 0.1},
                  collapse_floor=None, warn_collapse=False)
    best = minimize_scalar(lambda lv: _nll(Z, W, math.exp(lv)), bounds=(-4, 3),
                           method="bounded", options={"xatol": 1e-8}).x
    assert abs(math.log(float(res.values["dof"])) - best) < 0.01
    assert abs(math.exp(best) - 0.5) < 0.15  # and the maximiser is near the truth


def test_site_lr_names_must_be_sites_and_not_lbfgs():
    def model():
        pyro.sample("Z", pyro.distributions.Normal(0.0, 1.0).expand([2]).to_event(1))

    with pytest.raises(ValueError, match="not latent sites"):
        run_map(model, {}, torch.zeros(2), [Phase(2, 0.1)], optimizer="adam",
                site_lr={"nu": 0.1}, collapse_floor=None, warn_collapse=False)
    with pytest.raises(ValueError, match="lbfgs"):
        run_map(model, {}, torch.zeros(2), [Phase(2, 0.1)], optimizer="lbfgs",
                site_lr={"Z": 0.1}, collapse_floor=None, warn_collapse=False)


@pytest.fixture(scope="module")
def learned(digits_small):
    X, y = digits_small
    return probdr.TSNE(dof="learn", perplexity=10, n_iter=300, early_exaggeration_iter=100,
                       random_state=0, dtype="float64").fit(X), X


def test_tsne_learns_dof_at_a_stationary_point(learned):
    """The learned dof maximises the t-SNE likelihood at the final embedding (within Adam's
    last steps: 3 % in dof), and the kernel used afterwards is the learned one."""
    est, X = learned
    dof = est.learned_kernel_params_["dof"]
    assert est.kernel_.dof == dof and isinstance(est.kernel_.dof, float)
    Z = torch.as_tensor(est.embedding_)
    P = est.input_graph_.mean.double()

    def ce(lv):
        return float(est._latent_prior().posterior(
            KernelWeights(Z, StudentKernel(dof=math.exp(lv)))).cross_entropy(P))
    best = minimize_scalar(ce, bounds=(-4, 4), method="bounded").x
    assert abs(math.log(dof) - best) < 0.03, (dof, math.exp(best))
    assert ce(math.log(dof)) <= ce(0.0)  # at least as good as t-SNE's dof = 1 at this Z


def test_learned_kernel_places_new_points_saves_and_continues(learned, tmp_path):
    est, X = learned
    Y = est.transform(X[:5])
    assert Y.shape == (5, 2) and np.isfinite(Y).all()
    est.save(tmp_path / "m.probdr")
    back = probdr.load(tmp_path / "m.probdr")
    assert back.learned_kernel_params_ == est.learned_kernel_params_
    np.testing.assert_allclose(back.transform(X[:5]), Y)
    dof0 = est.learned_kernel_params_["dof"]
    est.optimize(20)
    assert est.learned_kernel_params_["dof"] != dof0  # still learned while continuing


def test_kernel_params_learn_in_graph_coupling(digits_small):
    X, _ = digits_small
    est = probdr.GraphCoupling(prior_z="E", kernel_z="student", kernel_params={"dof": "learn"},
                               perplexity=10, n_iter=60, early_exaggeration_iter=20,
                               random_state=0).fit(X)
    assert set(est.learned_kernel_params_) == {"dof"} and est.learned_kernel_params_["dof"] > 0
    fixed = probdr.GraphCoupling(prior_z="E", kernel_z="student", perplexity=10, n_iter=60,
                                 early_exaggeration_iter=20, random_state=0).fit(X)
    assert fixed.learned_kernel_params_ == {}


def test_sites_step_every_site_every_steps_and_not_in_held_phases():
    """Block-coordinate steps: with site_every=3 the site moves at steps 0, 3, 6 only; in a
    phase with learn_sites=False it does not move."""
    seen = []

    def model():
        pyro.sample("Z", pyro.distributions.Normal(0.0, 1.0).expand([2]).to_event(1))
        dof = pyro.sample("dof", pyro.distributions.LogNormal(0.0, 1.0))
        seen.append(float(dof.detach()))
        pyro.factor("pull", -(dof - 3.0) ** 2)

    init = {"Z": torch.zeros(2), "dof": torch.tensor(1.0)}
    run_map(model, {}, init, [Phase(7, 0.1)], optimizer="adam", site_lr={"dof": 0.1},
            site_every=3, collapse_floor=None, warn_collapse=False)
    steps = seen[-7:]  # the guide's setup runs the model first
    moved = [i for i in range(1, 7) if steps[i] != steps[i - 1]]
    assert moved == [1, 4]  # the values after the steps 0 and 3
    seen.clear()
    res = run_map(model, {}, init, [Phase(5, 0.1, learn_sites=False)], optimizer="adam",
                  site_lr={"dof": 0.1}, collapse_floor=None, warn_collapse=False)
    assert float(res.values["dof"]) == 1.0


def test_posterior_temperature_follows_the_learned_tail(digits_small):
    """With inference="svi" and the automatic coupling weight, the tail rule uses the learned
    dof, not its starting value."""
    from probdr.estimators.coupling_new_points import attraction_mass, auto_coupling_weight

    X, _ = digits_small
    est = probdr.TSNE(dof="learn", perplexity=10, n_iter=60, early_exaggeration_iter=20,
                      inference="svi", inference_params={"num_steps": 5, "num_samples": 4},
                      random_state=0).fit(X[:120])
    W = est.model_kwargs_["W_X"]
    assert est.coupling_weight_ == auto_coupling_weight(est.kernel_, 2, attraction_mass(W))
    assert est.model_kwargs_["coupling_weight"] == est.coupling_weight_
    assert est.kernel_.dof == est.learned_kernel_params_["dof"] != 1.0
