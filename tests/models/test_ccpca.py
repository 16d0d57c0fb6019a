"""ccPCA (Algorithm 1), Corollary 1 and the hierarchical coupling model (spec §7)."""

from __future__ import annotations

import numpy as np
import pyro
import pytest
import torch
from helpers import MaxNumel
from sklearn.datasets import make_blobs

from probdr.estimators.ccpca import ccPCA
from probdr.infer.map import map_estimate
from probdr.init import cc_mean_average, cc_means, ccpca_embedding, pca_scores
from probdr.laws.components import sample_memberships
from probdr.laws.graph import get_prior
from probdr.laws.weights import DenseWeights, SparseWeights
from probdr.laws.wishart import WoodburyInverse
from probdr.models.hierarchical import (
    cc_coordinates,
    corollary1_solution,
    from_cc_coordinates,
    global_coupling_model,
    global_coupling_objective,
    hierarchical_coupling_model,
)

DT = torch.float64



def _rel(A, B):
    return float(torch.linalg.norm(A - B) / torch.linalg.norm(B))


def _blobs(n=600, centers=6, p=10, seed=0):
    X, y = make_blobs(n_samples=n, centers=centers, n_features=p, cluster_std=1.0,
                      center_box=(-30, 30), random_state=seed)
    return torch.from_numpy(X), torch.from_numpy(y)


def _knn_law(X, k=20, prior="D"):
    """A sparse input-graph law on k-NN lists (Gaussian kernel, per-row bandwidth)."""
    from probdr.input.affinities import entropic_bandwidths
    from probdr.input.neighbors import knn

    n = X.shape[0]
    idx, d2 = knn(X, k)
    eps = entropic_bandwidths(d2, perplexity=min(10.0, k - 1))
    logk = -(d2 - d2.min(1, keepdim=True).values) / eps[:, None]
    w = SparseWeights(torch.arange(n).repeat_interleave(k), idx.flatten(), logk.flatten(), n)
    return get_prior(prior).posterior(w)


# ---------------------------------------------------------------------------- the algorithm
def test_ccpca_blobs_is_pca_of_cluster_means():
    """Done-when: on well-separated blobs ccPCA equals, up to rotation, the PCA of the cluster
    means placed at each point (Gram error under 5%)."""
    X, y = _blobs()
    Z = ccPCA(n_components=2, n_samples=50, random_state=0).fit_transform(X.numpy())
    R = pca_scores(cc_means(X, y), 2).numpy()
    err = np.linalg.norm(Z @ Z.T - R @ R.T) / np.linalg.norm(R @ R.T)
    assert err < 0.05, err


def test_ccpca_embedding_equals_dense_algorithm_1():
    """The O(Nnp) average equals PCA of (N^-1 sum_l U_l U_l^T) X built densely."""
    X, _ = _blobs(n=120, centers=3, p=5, seed=1)
    law = _knn_law(X, k=8)
    N = 12
    Z = ccpca_embedding(X, law, 2, N, torch.Generator().manual_seed(3))
    memb = sample_memberships(law, N, torch.Generator().manual_seed(3))
    P = torch.zeros(120, 120, dtype=DT)
    for m in memb:
        same = (m[:, None] == m[None, :]).to(DT)
        P += same / same.sum(1, keepdim=True)  # U U^T: 1/n_r on the block of C_r
    Xbar = (P / N) @ X
    ref = pca_scores(Xbar, 2)
    assert torch.allclose(Z, ref, atol=1e-9)
    assert torch.allclose(cc_mean_average(X, memb), Xbar, atol=1e-10)
    # column sums preserved: 1 in ker L, so centring Xbar = centring X
    assert torch.allclose(Xbar.sum(0), X.sum(0), atol=1e-8)


def test_ccpca_embedding_never_builds_n_by_n():
    n = 3000
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 6, dtype=DT, generator=g)
    law = _knn_law(X, k=10)
    with MaxNumel() as mode:
        Z = ccpca_embedding(X, law, 2, n_samples=10, generator=torch.Generator().manual_seed(1))
    assert Z.shape == (n, 2)
    assert mode.max < n * n / 10, mode.max


def test_ccpca_embedding_signature_generator_and_rng():
    X, _ = _blobs(n=90, centers=3, p=4, seed=2)
    law = _knn_law(X, k=8)
    torch.manual_seed(11)
    state = torch.get_rng_state()
    a = ccpca_embedding(X, law, 2, n_samples=5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.get_rng_state(), state)
    b = ccpca_embedding(X, law, n_components=2, n_samples=5,
                        generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.dtype == DT and a.shape == (90, 2)
    # columns centred, signs fixed
    assert torch.allclose(a.mean(0), torch.zeros(2, dtype=DT), atol=1e-9)
    assert torch.all(a.gather(0, a.abs().argmax(0, keepdim=True)) > 0)


def test_ccpca_embedding_validation():
    X, _ = _blobs(n=60, centers=2, p=3, seed=3)
    law = _knn_law(X, k=6)
    with pytest.raises(ValueError, match="n_components"):
        ccpca_embedding(X, law, 3)
    with pytest.raises(ValueError, match="2-D"):
        ccpca_embedding(X[:, 0], law, 1)
    with pytest.raises(ValueError, match="nodes"):
        ccpca_embedding(X[:50], law, 2)
    Xn = X.clone()
    Xn[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        ccpca_embedding(Xn, law, 2)
    with pytest.raises(ValueError, match="n_samples"):
        ccpca_embedding(X, law, 2, n_samples=0)


def test_ccpca_connected_graphs_warn_rank_deficiency():
    """A complete graph in every draw: CC means = global mean, the averaged data is constant."""
    X = torch.randn(10, 3, dtype=DT, generator=torch.Generator().manual_seed(0))
    law = get_prior("B").posterior(DenseWeights(torch.full((10, 10), 50.0, dtype=DT)))
    with pytest.warns(RuntimeWarning, match="rank"):
        Z = ccpca_embedding(X, law, 2, n_samples=3)
    assert torch.all(Z == 0)


# ---------------------------------------------------------------------------- estimator
@pytest.mark.parametrize("bad, msg", [
    (np.array([[1.0, np.nan, 0.0]] * 40), "NaN"),
    (np.arange(40.0), "2D array"),
    (np.empty((0, 3)), "0 sample"),
])
def test_ccpca_input_validation(bad, msg):
    with pytest.raises(ValueError, match=msg):
        ccPCA(perplexity=5).fit(bad)


def test_ccpca_param_validation():
    X, _ = _blobs(n=40, centers=2, p=3, seed=4)
    X = X.numpy()
    with pytest.raises(ValueError, match="at most the number of features"):
        ccPCA(n_components=4).fit(X)
    with pytest.raises(ValueError, match="perplexity"):
        ccPCA(perplexity=39).fit(X)
    with pytest.raises(ValueError, match="prior_x"):
        ccPCA(prior_x="Q", perplexity=5).fit(X)
    with pytest.raises(ValueError, match="n_samples"):
        ccPCA(n_samples=0, perplexity=5).fit(X)


@pytest.mark.parametrize("prior", ["D", "E", "B"])
def test_ccpca_random_state_repeatable(prior):
    X, _ = _blobs(n=150, centers=3, p=5, seed=5)
    a = ccPCA(prior_x=prior, perplexity=10, n_samples=10, random_state=3)
    Za = a.fit_transform(X.numpy())
    Zb = ccPCA(prior_x=prior, perplexity=10, n_samples=10, random_state=3).fit_transform(
        X.numpy())
    assert np.array_equal(Za, Zb)
    assert a.input_graph_.prior == prior
    assert a.component_stats_.n_samples == 10
    assert a.averaged_data_.shape == (150, 5)


# ---------------------------------------------------------------------------- Corollary 1
def _fixed_graph_problem():
    X, y = _blobs(n=300, centers=8, p=6, seed=1)
    return X - X.mean(0), y


def _preconditioner(Xbar, eps):
    """Zbar = (I + eps Xbar Xbar^T)^{1/2} Y: same minimiser, well-conditioned in Y."""
    W = WoodburyInverse(eps**0.5 * Xbar)
    return (lambda Y: W.matpow(Y, -0.5)), (lambda Zb: W.matpow(Zb, 0.5))


def _minimise_global(Xbar, eps, eps_factor, seed=0):
    R, p = Xbar.shape
    to_z, _ = _preconditioner(Xbar, eps)
    Y = torch.randn(R, 2, dtype=DT, generator=torch.Generator().manual_seed(seed))
    Y.requires_grad_()
    opt = torch.optim.LBFGS([Y], max_iter=500, tolerance_grad=1e-13, tolerance_change=1e-16,
                            line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = global_coupling_objective(to_z(Y), Xbar, eps, R, R + p - 2, eps_factor)
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    return to_z(Y.detach())


def test_corollary1_minimiser_independent_of_eps():
    """Done-when: with the epsilon factor (spec Appendix Z #11) the minimiser of (21) is the PCA
    of the CC means for every epsilon; without it, it moves with epsilon."""
    X, memb = _fixed_graph_problem()
    ref = corollary1_solution(X, memb, 2)
    G = ref @ ref.T
    assert _rel(pca_scores(cc_means(X, memb), 2) @ pca_scores(cc_means(X, memb), 2).T, G) < 1e-10
    Xbar = cc_coordinates(X, memb)
    errs = {}
    for eps in (0.01, 1.0, 100.0):
        Z = from_cc_coordinates(_minimise_global(Xbar, eps, True), memb)
        errs[eps] = _rel(Z @ Z.T, G)
    assert max(errs.values()) < 1e-5, errs
    Zs = from_cc_coordinates(_minimise_global(Xbar, 0.01, False), memb)
    Zl = from_cc_coordinates(_minimise_global(Xbar, 100.0, False), memb)
    assert _rel(Zs @ Zs.T, G) > 0.5 and _rel(Zl @ Zl.T, G) > 0.5


def test_global_coupling_pyro_model_map():
    X, memb = _fixed_graph_problem()
    R = int(memb.max()) + 1
    ref = corollary1_solution(X, memb, 2)
    for eps in (0.1, 10.0):
        vals = map_estimate(global_coupling_model,
                            dict(X=X, membership=memb, n_components=2, eps=eps),
                            {"Zbar": torch.randn(R, 2, dtype=DT,
                                                 generator=torch.Generator().manual_seed(0))},
                            reparam={"Zbar": _preconditioner(cc_coordinates(X, memb), eps)})
        Z = from_cc_coordinates(vals["Zbar"], memb)
        assert _rel(Z @ Z.T, ref @ ref.T) < 1e-4


def test_cc_coordinates_roundtrip():
    X, memb = _fixed_graph_problem()
    Xbar = cc_coordinates(X, memb)
    # U_R U_R^T X = CC means
    assert torch.allclose(from_cc_coordinates(Xbar, memb), cc_means(X, memb), atol=1e-10)


def test_hierarchical_coupling_model_runs_with_graph_laws():
    """Terms (8) + (9) with a Monte Carlo input graph: finite loss, gradients, SVI steps."""
    from probdr.kernels import get_kernel

    X, _ = _blobs(n=80, centers=3, p=4, seed=6)
    X = X - X.mean(0)
    law = _knn_law(X, k=8, prior="D")
    kw = dict(X=X, input_law=law, latent_prior=get_prior("E"), kernel=get_kernel("student"),
              n_components=2, eps=1.0)
    Z0 = pca_scores(X, 2) / 10
    torch.manual_seed(0)
    vals, hist = map_estimate(hierarchical_coupling_model, kw, {"Z": Z0}, optimizer="adam",
                              n_iter=15, lr=0.05, return_history=True)
    assert np.all(np.isfinite(hist)) and vals["Z"].shape == (80, 2)
    pyro.clear_param_store()


def test_ccpca_with_lead_input_graph_digits_smoke():
    """The estimator builds its law with probdr.input.graph.build_input_graph (D prior)."""
    from sklearn.datasets import load_digits

    X = load_digits().data[:400]
    est = ccPCA(n_samples=20, random_state=0)
    Z = est.fit_transform(X)
    assert Z.shape == (400, 2) and np.isfinite(Z).all()
    s = est.component_stats_.summary()
    assert s["n_components_min"] > 1  # D draws split the 10 digits into many components


def test_ccpca_init_for_binary_input_laws_uses_unit_degree_draws():
    """UMAP's input law (B~ on fuzzy memberships) has connected draws on digits, so ccPCA on its
    draws would carry no structure; the init samples the D law on the same memberships instead
    and keeps the clusters apart (5-NN accuracy of the initial embedding well above PCA's)."""
    import probdr
    from probdr import datasets
    from probdr.init import _ccpca_law, initialize
    from probdr.laws.graph import UnitDegreeGraph
    from probdr.metrics import knn_accuracy

    X, y = datasets.load("digits")
    law = probdr.UMAP(n_epochs=1, init="pca", random_state=0).fit(X).input_graph_
    assert isinstance(_ccpca_law(law), UnitDegreeGraph)
    Xt = torch.as_tensor(X, dtype=DT)
    Zc = initialize("ccpca", Xt, 2, input_graph=law, generator=torch.Generator().manual_seed(0))
    Zp = initialize("pca", Xt, 2)
    assert torch.isfinite(Zc).all() and (Zc.std(0) > 0).all()
    acc_c, acc_p = knn_accuracy(Zc.numpy(), y, 5), knn_accuracy(Zp.numpy(), y, 5)
    assert acc_c > acc_p + 0.1, (acc_c, acc_p)
    # D and E laws are used as they are
    d_law = _knn_law(torch.from_numpy(_blobs()[0].numpy()), prior="D")
    assert _ccpca_law(d_law) is d_law
