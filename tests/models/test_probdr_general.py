"""ProbDR's unifying model, eq. (1) of Ravuri & Lawrence (2025): log-density oracle, closed form
at alpha = 0, and the reductions to PCA (dual PPCA), eq. (2) and eq. (5)."""

from __future__ import annotations

import time

import numpy as np
import pyro
import pytest
import torch
from helpers import random_spd
from pyro import poutine
from scipy.linalg import orthogonal_procrustes, subspace_angles
from scipy.stats import invwishart

from probdr.estimators.probdr import ProbDR
from probdr.estimators.wishart import LaplacianWishart, WishartEigenmaps
from probdr.metrics import trustworthiness
from probdr.models.probdr_general import (
    closed_form,
    latent_loglik,
    latent_scale,
    probdr_general_model,
)

DT = torch.float64
_spd = random_spd


def _low_rank_data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 8)) @ np.diag([5, 3, 2, 1, 1, .5, .5, .3])


# ----------------------------------------------------------------------------- log-density
@pytest.mark.parametrize("alpha, kernel", [(0.0, "student"), (0.5, "student"),
                                           (0.8, "gaussian")])
def test_loglik_differences_equal_scipy_invwishart(alpha, kernel):
    n, nu, gamma = 7, 9.5, 0.7
    S = _spd(n)
    Lam = torch.linalg.inv(S)
    g = torch.Generator().manual_seed(1)
    diffs = []
    for _ in range(3):
        Z1, Z2 = (torch.randn(n, 2, dtype=DT, generator=g) for _ in range(2))
        ours = float(latent_loglik(Z1, Lam, nu, gamma, alpha, kernel)
                     - latent_loglik(Z2, Lam, nu, gamma, alpha, kernel))
        ref = (invwishart.logpdf(S.numpy(), df=nu,
                                 scale=latent_scale(Z1, gamma, alpha, kernel).numpy())
               - invwishart.logpdf(S.numpy(), df=nu,
                                   scale=latent_scale(Z2, gamma, alpha, kernel).numpy()))
        assert ours == pytest.approx(ref, rel=1e-9, abs=1e-9)
        diffs.append(ref)
    assert np.ptp(diffs) > 1e-3  # the two Z's really differ in log-density


def test_factor_path_and_pyro_model_give_the_same_density():
    n, nu, gamma = 9, 12.0, 0.4
    S = _spd(n, seed=2)
    s, V = torch.linalg.eigh(S)
    Lam, W = (V / s) @ V.T, (V / s.sqrt()).T
    Z = torch.randn(n, 3, dtype=DT)
    for alpha in (0.0, 0.3):
        dense = latent_loglik(Z, Lam, nu, gamma, alpha, terms="z")
        assert float(latent_loglik(Z, Lam, nu, gamma, alpha, factor=W, terms="z")
                     ) == pytest.approx(float(dense), rel=1e-12)
        tr = poutine.trace(poutine.condition(probdr_general_model, data={"Z": Z})).get_trace(
            Lam, 3, nu, gamma, alpha)
        assert isinstance(tr.nodes["Z"]["fn"], pyro.distributions.ImproperUniform)
        assert float(tr.log_prob_sum()) == pytest.approx(float(dense), rel=1e-12)
    # only HZ enters: translations do not change the density
    shifted = Z + torch.tensor([1.0, -2.0, 3.0], dtype=DT)
    assert float(latent_loglik(shifted, Lam, nu, gamma, 0.3)) == pytest.approx(
        float(latent_loglik(Z, Lam, nu, gamma, 0.3)), rel=1e-12)


def test_closed_form_is_the_maximum_for_a_precision_not_commuting_with_H():
    """alpha = 0, a generic SPD precision: the eigen-solution on centred vectors is stationary
    and beats perturbations; eigenvalues max(0, nu/mu_i - gamma)."""
    n, q, nu, gamma = 12, 2, 14.0, 0.5
    Lam = torch.linalg.inv(_spd(n, seed=3))
    Z, lam, mu = closed_form(Lam, q, nu, gamma)
    assert torch.allclose(lam, (nu / mu - gamma).clamp_min(0))
    assert (lam > 0).all()
    Zr = Z.clone().requires_grad_(True)
    f = latent_loglik(Zr, Lam, nu, gamma)
    (grad,) = torch.autograd.grad(f, Zr)
    assert float(grad.abs().max()) < 1e-9 * float(Z.abs().max())
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        P = Z + 0.05 * torch.randn(n, q, dtype=DT, generator=g)
        assert float(latent_loglik(P, Lam, nu, gamma)) < float(f.detach())
    # the naive answer, the top eigenvectors of S, is worse: centring matters
    s, V = torch.linalg.eigh(torch.linalg.inv(Lam))
    naive = V[:, -q:] * torch.sqrt((nu * s[-q:] - gamma).clamp_min(0))
    assert float(latent_loglik(naive, Lam, nu, gamma)) < float(f.detach()) - 1e-6


# ------------------------------------------------------------------------ dual PPCA / PCA
def test_sample_covariance_alpha0_is_pca_with_the_closed_form_eigenvalues():
    X = _low_rank_data()
    n, p = X.shape
    q, gamma = 2, 1.0
    m = ProbDR(q, covariance="sample", alpha=0.0, gamma=gamma, init="random",
               random_state=0).fit(X)
    Xc = X - X.mean(0)
    U, sv, _ = np.linalg.svd(Xc, full_matrices=False)
    angle = subspace_angles(m.embedding_, U[:, :q]).max()
    assert angle < 1e-3  # measured 6e-12
    s = sv[:q] ** 2 / p  # eigenvalues of S = Y_c Y_c^T / d
    exact = np.maximum(0.0, n * (s + m.ridge_) - gamma)
    np.testing.assert_allclose(m.gram_eigenvalues_, exact, rtol=1e-4)  # measured 1e-12
    np.testing.assert_allclose(m.gram_eigenvalues_, np.maximum(0, n * s - gamma), rtol=1e-4)
    np.testing.assert_allclose(m.closed_form_eigenvalues_, exact, rtol=1e-6)
    # and the solver="closed_form" path agrees with the MAP
    cf = ProbDR(q, covariance="sample", alpha=0.0, gamma=gamma, solver="closed_form").fit(X)
    assert subspace_angles(cf.embedding_, m.embedding_).max() < 1e-6


def test_sample_covariance_clips_axes_below_gamma():
    X = _low_rank_data()
    n, p = X.shape
    s = np.linalg.svd(X - X.mean(0), compute_uv=False) ** 2 / p
    gamma = n * 0.5 * (s[0] + s[1])  # between nu s_2 and nu s_1
    m = ProbDR(2, covariance="sample", alpha=0.0, gamma=gamma, init="random",
               random_state=0).fit(X)
    assert m.closed_form_eigenvalues_[1] == 0.0
    assert m.gram_eigenvalues_[0] == pytest.approx(n * s[0] - gamma, rel=1e-4)
    assert m.gram_eigenvalues_[1] < 1e-4 * m.gram_eigenvalues_[0]


def test_precomputed_covariance_equals_sample():
    X = _low_rank_data(60)
    Xc = X - X.mean(0)
    S = Xc @ Xc.T / X.shape[1]
    a = ProbDR(2, covariance="sample", alpha=0.0, gamma=1.0, ridge=1e-3,
               solver="closed_form").fit(X)
    b = ProbDR(2, covariance=S, alpha=0.0, gamma=1.0, ridge=1e-3, solver="closed_form").fit(X)
    np.testing.assert_allclose(a.precision_, b.precision_, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(a.gram_eigenvalues_, b.gram_eigenvalues_, rtol=1e-8)
    with pytest.raises(ValueError, match="positive definite"):
        ProbDR(2, covariance=S, alpha=0.0, gamma=1.0).fit(X)  # rank 8 < 60, no ridge


# ----------------------------------------------------------------------------- eq. (2)
def test_laplacian_alpha0_is_eq2_wishart_eigenmaps(digits_small):
    X, _ = digits_small
    n, beta = X.shape[0], 1e-3
    we = WishartEigenmaps(2, n_neighbors=15, beta=beta, random_state=0).fit(X)
    # eq. (2) exactly: Lambda = nu L, gamma = beta
    m = ProbDR(2, "laplacian", random_state=0, alpha=0.0, gamma=beta, nu=n,
               precision_scale=n, init="random").fit(X)
    assert subspace_angles(m.embedding_, we.embedding_).max() < 1e-2  # measured ~1e-6
    l = we.eigenvalues_[1:3]
    np.testing.assert_allclose(m.gram_eigenvalues_, 1.0 / l - beta, rtol=1e-4)
    # the default scaling (Lambda = L) has the same span, eigenvalues nu / l - gamma
    m1 = ProbDR(2, "laplacian", random_state=0, alpha=0.0, gamma=beta).fit(X)
    assert subspace_angles(m1.embedding_, we.embedding_).max() < 1e-2
    np.testing.assert_allclose(m1.gram_eigenvalues_, n / l - beta, rtol=1e-4)


# ----------------------------------------------------------------------------- eq. (5)
def _eq5_comparison(X):
    t0 = time.perf_counter()
    lw = LaplacianWishart(2, random_state=0).fit(X)
    t_lw = time.perf_counter() - t0
    t0 = time.perf_counter()
    pd = ProbDR(2, random_state=0).fit(X)  # the defaults are eq. (5)'s parameters
    t_pd = time.perf_counter() - t0
    T_lw, T_pd = trustworthiness(X, lw.embedding_, 15), trustworthiness(X, pd.embedding_, 15)
    return lw, pd, T_lw, T_pd, t_lw, t_pd


def test_eq5_parameters_match_laplacian_wishart():
    from probdr.datasets import load

    X, _ = load("digits")
    X = X[:400]
    n = X.shape[0]
    lw, pd, T_lw, T_pd, *_ = _eq5_comparison(X)
    assert pd.gamma_ == pytest.approx(0.5 / lw.eps_tilde_)
    assert pd.nu_ == n
    # the log-likelihoods differ by a Z-independent constant
    from probdr.models.probdr_wishart import laplacian_wishart_loglik

    Lam = torch.as_tensor(pd.precision_)
    g = torch.Generator().manual_seed(0)
    Z1, Z2 = (torch.randn(n, 2, dtype=DT, generator=g) for _ in range(2))
    ours = (latent_loglik(Z1, Lam, n, pd.gamma_, 0.5, terms="z")
            - latent_loglik(Z2, Lam, n, pd.gamma_, 0.5, terms="z"))
    ref = (laplacian_wishart_loglik(Z1 - Z1.mean(0), lw.laplacian_, lw.eps_tilde_)
           - laplacian_wishart_loglik(Z2 - Z2.mean(0), lw.laplacian_, lw.eps_tilde_))
    assert float(ours) == pytest.approx(float(ref), rel=1e-9)
    assert abs(T_pd - T_lw) < 0.01
    # same init, optimiser and objective: the same embedding up to a rotation
    A = lw.embedding_ - lw.embedding_.mean(0)
    R, _ = orthogonal_procrustes(pd.embedding_, A)
    assert np.abs(pd.embedding_ @ R - A).max() < 1e-6 * np.abs(A).max()


@pytest.mark.slow
def test_eq5_parameters_match_laplacian_wishart_on_all_digits():
    from probdr.datasets import load

    X, _ = load("digits")
    lw, pd, T_lw, T_pd, t_lw, t_pd = _eq5_comparison(X)
    print(f"digits n={len(X)}: T@15 LaplacianWishart {T_lw:.4f} ({t_lw:.1f} s), "
          f"ProbDR {T_pd:.4f} ({t_pd:.1f} s)")
    assert abs(T_pd - T_lw) < 0.01


# ----------------------------------------------------------------------------- estimator
def test_kernel_callable_and_gaussian_kernel_run():
    X = _low_rank_data(40)
    a = ProbDR(2, n_neighbors=5, random_state=0, n_iter=5).fit(X)
    b = ProbDR(2, n_neighbors=5, random_state=0, n_iter=5,
               kernel=lambda d2: 1.0 / (1.0 + d2)).fit(X)
    np.testing.assert_allclose(a.embedding_, b.embedding_, rtol=1e-10, atol=1e-10)
    c = ProbDR(2, n_neighbors=5, random_state=0, n_iter=5, kernel="gaussian",
               optimizer="lbfgs").fit(X)
    assert np.isfinite(c.embedding_).all() and c.closed_form_eigenvalues_ is None


@pytest.mark.parametrize("params, name", [
    (dict(covariance="cov"), "covariance"),
    (dict(covariance=np.eye(3)), "covariance"),
    (dict(alpha=-1.0), "alpha"),
    (dict(alpha=float("nan")), "alpha"),
    (dict(kernel="rbf"), "kernel"),
    (dict(gamma=0.0), "gamma"),
    (dict(nu=10.0), "nu"),
    (dict(n_neighbors=0), "n_neighbors"),
    (dict(n_neighbors=40), "n_neighbors"),
    (dict(n_neg=0), "n_neg"),
    (dict(ridge=-1.0), "ridge"),
    (dict(precision_scale=0.0), "precision_scale"),
    (dict(solver="eigen"), "solver"),
    (dict(solver="closed_form"), "alpha=0"),
    (dict(optimizer="sgd"), "optimizer"),
    (dict(init="spectral"), "init"),
    (dict(init=np.zeros((5, 2))), "init"),
    (dict(n_iter=0), "n_iter"),
    (dict(learning_rate=-1.0), "learning_rate"),
    (dict(max_n=10), "max_n"),
    (dict(neighbors="fast"), "neighbors"),
    (dict(n_components=40), "n_components"),
])
def test_parameters_are_validated(params, name):
    X = _low_rank_data(40)
    with pytest.raises(ValueError, match=name):
        ProbDR(**{"n_neighbors": 5, **params}).fit(X)
