"""ProbDR Laplacian--Wishart models (Ravuri & Lawrence 2025; spec §9)."""

from __future__ import annotations

import math

import numpy as np
import pyro
import pytest
import torch
from pyro import poutine

from probdr._compute.allpairs import pairwise_sq_distances
from probdr.estimators.wishart import LaplacianWishart, WishartEigenmaps
from probdr.input.graph import knn_laplacian
from probdr.laws.wishart import laplacian_eigenmaps, probdr_epsilon
from probdr.models.probdr_wishart import (
    bernoulli_adjacency_model,
    centred,
    cne_energy,
    cne_model,
    double_centre,
    eigenmaps_model,
    eigenmaps_solution,
    laplacian_wishart_loglik,
    laplacian_wishart_model,
    student_affinity,
    wishart_matrix,
)

DT = torch.float64



def _digits(n=None):
    from sklearn.datasets import load_digits

    X = load_digits().data
    return X if n is None else X[:n]


def _principal_angle(A, B) -> float:
    """Largest principal angle between the column spaces of centred A and B (arcsin form,
    accurate for small angles)."""
    Qa, _ = np.linalg.qr(A - A.mean(0))
    Qb, _ = np.linalg.qr(B - B.mean(0))
    s = np.linalg.norm(Qa - Qb @ (Qb.T @ Qa), 2)
    return float(np.arcsin(min(s, 1.0)))


def _small_graph(n=60, k=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 5, dtype=DT, generator=g)
    return X, knn_laplacian(X, k)


# ---------------------------------------------------------------------------- Laplacian pieces
def test_knn_laplacian_structure():
    X, L = _small_graph()
    D = L.dense()
    assert torch.allclose(D, D.T)
    assert torch.allclose(D.sum(1), torch.zeros(60, dtype=DT))
    A = -(D - torch.diag(torch.diagonal(D)))
    assert set(A.unique().tolist()) <= {0.0, 1.0}
    # symmetrised union of the 6-NN lists: every node keeps >= 6 neighbours
    assert (L.degree >= 6).all()
    Z = torch.randn(60, 2, dtype=DT)
    assert math.isclose(float(L.quad(Z)), float(torch.trace(Z.T @ D @ Z)), rel_tol=1e-12)
    M = torch.randn(60, 60, dtype=DT)
    assert math.isclose(float(L.weighted_sum(M)), float((D * M).sum()), rel_tol=1e-12)
    assert np.allclose(L.scipy().toarray(), D.numpy())


def test_edge_count_factor_1_5_on_digits():
    """[004] App. B: sum_{i>j} A_ij ~ n n_neigh / 1.5 for the symmetrised 15-NN graph."""
    X = torch.from_numpy(_digits())
    L = knn_laplacian(X, 15)
    ratio = L.n_edges / (X.shape[0] * 15 / 1.5)
    assert 0.9 < ratio < 1.1, ratio
    assert probdr_epsilon(X.shape[0]) == pytest.approx(100 / X.shape[0])


def test_probdr_identities():
    """tr(L H P^u H) = sum L_ij P^u_ij; -0.5 H[1 + d^2]H = H Z Z^T H; ansatz at P = eps."""
    X, L = _small_graph(seed=1)
    n = L.n
    Z = torch.randn(n, 2, dtype=DT, generator=torch.Generator().manual_seed(2))
    Pu = student_affinity(Z)
    H = torch.eye(n, dtype=DT) - 1.0 / n
    Ld = L.dense()
    assert math.isclose(float(torch.trace(Ld @ H @ Pu @ H)), float(L.weighted_sum(Pu)),
                        rel_tol=1e-10)
    D1 = 1.0 + pairwise_sq_distances(Z)
    assert torch.allclose(-0.5 * H @ D1 @ H, H @ Z @ Z.T @ H, atol=1e-10)
    assert torch.allclose(double_centre(Pu), H @ Pu @ H, atol=1e-12)
    eps = 0.05
    P = torch.tensor(eps, dtype=DT, requires_grad=True)
    ansatz = P / (2 * eps) - eps / (2 * P) + math.log(eps)
    (g,) = torch.autograd.grad(ansatz, P)
    assert math.isclose(float(ansatz), math.log(eps), rel_tol=1e-12)
    assert math.isclose(float(g), 1 / eps, rel_tol=1e-12)


# ---------------------------------------------------------------------------- eq. (2): eigenmaps
def test_eigenmaps_model_matches_dense_wishart_terms():
    X, L = _small_graph(seed=3)
    n, beta, nu = L.n, 0.01, 70.0
    Ld = L.dense()
    lps = []
    for seed in (4, 5):
        Z = torch.randn(n, 2, dtype=DT, generator=torch.Generator().manual_seed(seed))
        tr = poutine.trace(poutine.condition(eigenmaps_model, data={"Z": Z})).get_trace(
            L, 2, beta, nu)
        Zc = centred(Z)
        P = Zc @ Zc.T + beta * torch.eye(n, dtype=DT)
        # full torch Wishart log-density of nu (L + delta I) with a tiny ridge, Z-dependent part
        dense = 0.5 * nu * (torch.logdet(P) - torch.trace(P @ Ld))
        lps.append((float(tr.log_prob_sum()), float(dense)))
    # equal up to a Z-free constant
    assert math.isclose(lps[0][0] - lps[1][0], lps[0][1] - lps[1][1], rel_tol=1e-9)


def test_eigenmaps_closed_form_is_laplacian_eigenmaps():
    X, L = _small_graph(n=80, seed=6)
    Z, w = eigenmaps_solution(L, 2, beta=1e-3)
    evals, V = np.linalg.eigh(L.dense().numpy())
    assert np.allclose(w.numpy(), evals[:3], atol=1e-10)
    assert _principal_angle(Z.numpy(), V[:, 1:3]) < 1e-8
    # scipy shift-invert branch agrees with the dense branch
    w2, U2 = laplacian_eigenmaps(L, 2, dense_max_n=10)
    assert np.allclose(w2.numpy(), evals[:3], atol=1e-8)
    assert _principal_angle(U2.numpy(), V[:, 1:3]) < 1e-6


def test_wishart_eigenmaps_map_subspace_digits_subset():
    """Done-when (fast version, 500 digits): the MAP spans eigenvectors 2..q+1 of the kNN
    Laplacian, largest principal angle < 1e-2 rad."""
    X = _digits(500)
    est = WishartEigenmaps(n_components=2, random_state=0)
    Z = est.fit_transform(X)
    L = knn_laplacian(torch.from_numpy(X), 15)
    evals, V = np.linalg.eigh(L.dense().numpy())
    assert est.n_graph_components_ == 1 and est.ridge_ == 0.0
    assert _principal_angle(Z, V[:, 1:3]) < 1e-2
    assert np.allclose(Z.mean(0), 0, atol=1e-8)  # constant vector excluded


@pytest.mark.slow
def test_wishart_eigenmaps_map_subspace_digits():
    """Done-when on all 1797 digits."""
    X = _digits()
    Z = WishartEigenmaps(n_components=2, random_state=0).fit_transform(X)
    Zcf = WishartEigenmaps(n_components=2, solver="closed_form").fit_transform(X)
    L = knn_laplacian(torch.from_numpy(X), 15)
    evals, V = np.linalg.eigh(L.dense().numpy())
    assert _principal_angle(Z, V[:, 1:3]) < 1e-2
    assert _principal_angle(Zcf, V[:, 1:3]) < 1e-8


def test_wishart_eigenmaps_disconnected_graph_uses_ridge():
    g = np.random.default_rng(0)
    X = np.vstack([g.normal(size=(30, 3)), g.normal(size=(30, 3)) + 100])
    with pytest.warns(RuntimeWarning, match="connected components"):
        est = WishartEigenmaps(n_neighbors=5, solver="closed_form").fit(X)
    assert est.n_graph_components_ == 2 and est.ridge_ > 0
    Z = est.embedding_
    # the first axis separates the two components
    assert np.ptp(np.sign(Z[:30, 0])) == 0 and np.ptp(np.sign(Z[30:, 0])) == 0
    assert np.sign(Z[0, 0]) != np.sign(Z[30, 0])


# ---------------------------------------------------------------------------- eq. (5)
def test_laplacian_wishart_loglik_matches_dense():
    X, L = _small_graph(n=50, seed=7)
    n = L.n
    eps = probdr_epsilon(n) / 10  # keep eps < 1 for a meaningful scale
    Ld = L.dense()
    vals = []
    for seed in (8, 9):
        Z = centred(torch.randn(n, 2, dtype=DT, generator=torch.Generator().manual_seed(seed)))
        M = wishart_matrix(Z, eps)
        dense = -0.5 * torch.trace(Ld @ M) + 0.5 * n * torch.logdet(M)
        # torch Wishart at L + delta I: same Z-dependence up to delta * tr(M) / 2
        delta = 1e-9
        W = torch.distributions.Wishart(torch.tensor(float(n), dtype=DT), precision_matrix=M)
        tw = W.log_prob(Ld + delta * torch.eye(n, dtype=DT))
        vals.append((float(laplacian_wishart_loglik(Z, L, eps)), float(dense), float(tw)))
    d_mine = vals[0][0] - vals[1][0]
    assert math.isclose(d_mine, vals[0][1] - vals[1][1], rel_tol=1e-9)
    assert math.isclose(d_mine, vals[0][2] - vals[1][2], rel_tol=1e-6)


def test_laplacian_wishart_centring_removes_translation():
    X, L = _small_graph(n=40, seed=10)
    Z = torch.randn(40, 2, dtype=DT, generator=torch.Generator().manual_seed(11))
    lp = []
    for shift in (0.0, 50.0):
        tr = poutine.trace(poutine.condition(laplacian_wishart_model, data={"Z": Z + shift})
                           ).get_trace(L, 2, 0.1)
        lp.append(float(tr.log_prob_sum()))
    assert math.isclose(lp[0], lp[1], rel_tol=1e-12)


def test_bernoulli_model_log_prob_and_subsampling():
    X, L = _small_graph(n=200, k=5, seed=12)
    n, eps = L.n, 0.3
    Z = torch.randn(n, 2, dtype=DT, generator=torch.Generator().manual_seed(13))
    tr = poutine.trace(poutine.condition(bernoulli_adjacency_model, data={"Z": Z})).get_trace(
        L, 2, eps)
    A = (L.dense() < 0).to(DT)
    P = eps / (1 + pairwise_sq_distances(Z))
    off = ~torch.eye(n, dtype=torch.bool)
    manual = (A * P.log() + (1 - A) * torch.log1p(-P))[off].sum()
    assert math.isclose(float(tr.log_prob_sum()), float(manual), rel_tol=1e-10)
    # subsampled rows are rescaled: the estimator is unbiased (mean over many subsamples)
    torch.manual_seed(0)
    est = np.mean([float(poutine.trace(poutine.condition(bernoulli_adjacency_model,
                                                          data={"Z": Z})).get_trace(
        L, 2, eps, subsample_size=50).log_prob_sum()) for _ in range(200)])
    assert abs(est - float(manual)) < 0.02 * abs(float(manual))
    with pytest.raises(ValueError, match="eps_tilde"):
        poutine.trace(bernoulli_adjacency_model).get_trace(L, 2, 1.5)


def test_cne_energy_finite_with_duplicates():
    X, L = _small_graph(n=30, seed=14)
    Z = torch.randn(30, 2, dtype=DT, generator=torch.Generator().manual_seed(15))
    Z[1] = Z[0]  # duplicated point: d_01 = 0
    Z.requires_grad_()
    e = cne_energy(Z, L, 0.1).sum()
    e.backward()
    assert torch.isfinite(e) and torch.isfinite(Z.grad).all()
    tr = poutine.trace(poutine.condition(cne_model, data={"Z": Z.detach()})).get_trace(L, 2, 0.1)
    assert math.isclose(float(tr.log_prob_sum()), float(e), rel_tol=1e-12)


# ---------------------------------------------------------------------------- estimators
@pytest.mark.parametrize("Est", [WishartEigenmaps, LaplacianWishart])
@pytest.mark.parametrize("bad, msg", [
    (np.array([[1.0, np.nan, 0.0]] * 40), "NaN"),
    (np.arange(40.0), "2D array"),
    (np.empty((0, 3)), "0 sample"),
])
def test_input_validation(Est, bad, msg):
    with pytest.raises(ValueError, match=msg):
        Est(n_neighbors=5).fit(bad)


@pytest.mark.parametrize("Est", [WishartEigenmaps, LaplacianWishart])
def test_param_validation(Est):
    X = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(ValueError, match="n_components"):
        Est(n_components=0, n_neighbors=5).fit(X)
    with pytest.raises(ValueError, match="n_neighbors=15 is too large for n=12"):
        Est(n_neighbors=15).fit(X[:12])


def test_laplacian_wishart_param_validation():
    X = np.random.default_rng(1).normal(size=(60, 4))
    with pytest.raises(ValueError, match="eps_tilde < 1"):  # 4*5*15/(3*60) > 1
        LaplacianWishart(n_neighbors=15, model="bernoulli").fit(X)
    with pytest.raises(ValueError, match="max_n"):
        LaplacianWishart(n_neighbors=5, max_n=50).fit(X)
    with pytest.raises(ValueError, match="model"):
        LaplacianWishart(n_neighbors=5, model="tsne").fit(X)
    with pytest.raises(ValueError, match="init"):
        LaplacianWishart(n_neighbors=5, init="umap").fit(X)


@pytest.mark.parametrize("model", ["wishart", "bernoulli", "cne"])
def test_laplacian_wishart_runs_and_is_repeatable(model):
    X = _digits(300)
    kw = dict(n_neighbors=10, model=model, n_iter=10, random_state=4)
    if model == "bernoulli":
        kw["eps_tilde"] = 0.2
    a = LaplacianWishart(**kw).fit_transform(X)
    b = LaplacianWishart(**kw).fit_transform(X)
    assert a.shape == (300, 2) and np.isfinite(a).all()
    assert np.array_equal(a, b)
    assert np.allclose(a.mean(0), 0, atol=1e-8)
    pyro.clear_param_store()


def test_wishart_eigenmaps_random_state_repeatable():
    X = _digits(200)
    a = WishartEigenmaps(random_state=1, n_iter=200).fit_transform(X)
    b = WishartEigenmaps(random_state=1, n_iter=200).fit_transform(X)
    assert np.array_equal(a, b)


def _knn_overlap(A, B, k=15):
    from sklearn.neighbors import NearestNeighbors

    ia = NearestNeighbors(n_neighbors=k + 1).fit(A).kneighbors(A, return_distance=False)[:, 1:]
    ib = NearestNeighbors(n_neighbors=k + 1).fit(B).kneighbors(B, return_distance=False)[:, 1:]
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(ia, ib, strict=True)]))


@pytest.mark.slow
def test_laplacian_wishart_digits_quality_and_fig1_claim():
    """Done-when: trustworthiness@15 >= 0.95 on digits, and the embedding is closer to UMAP's
    than PCA's is, in 15-NN overlap ([004] Fig. 1, measured)."""
    from sklearn.decomposition import PCA
    from sklearn.manifold import trustworthiness

    import probdr

    X = _digits()
    Z = LaplacianWishart(random_state=0).fit_transform(X)
    assert trustworthiness(X, Z, n_neighbors=15) >= 0.95
    U = probdr.UMAP(random_state=0).fit_transform(X)
    P = PCA(2).fit_transform(X)
    assert _knn_overlap(Z, U) > _knn_overlap(P, U) + 0.2
