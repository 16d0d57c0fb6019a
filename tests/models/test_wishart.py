"""Wishart pieces and PCA as a Wishart precision coupling (spec §6; Theorem 2)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pyro
import pytest
import torch
from helpers import MaxNumel
from pyro import poutine

from probdr.estimators.wishart import WishartPCA
from probdr.infer.map import map_estimate
from probdr.laws.wishart import (
    ConjugateWishartPosterior,
    LowRankPrecisionWishart,
    WoodburyInverse,
    gram_logdet,
    mvdigamma,
    theorem2_eigenvalues,
    theorem2_solution,
)
from probdr.models.wishart_pca import (
    coupling_gamma,
    default_dofs,
    wishart_pca_generative,
    wishart_pca_model,
    wishart_pca_model_dense,
)

DT = torch.float64



def _rng(seed=0):
    return torch.Generator().manual_seed(seed)


def _rel(A, B):
    return float(torch.linalg.norm(A - B) / torch.linalg.norm(B))


# ---------------------------------------------------------------------------- structured pieces
@pytest.mark.parametrize("shape", [(40, 6), (7, 12)])  # Gram-eigh branch and SVD branch
def test_woodbury_inverse_matches_dense(shape):
    X = torch.randn(*shape, dtype=DT, generator=_rng(1))
    n = shape[0]
    W = WoodburyInverse(X, scale=2.5)
    D = 2.5 * torch.linalg.inv(torch.eye(n, dtype=DT) + X @ X.T)
    Z = torch.randn(n, 3, dtype=DT, generator=_rng(2))
    assert torch.allclose(W.dense(), D, atol=1e-12)
    assert math.isclose(float(W.logdet()), float(torch.logdet(D)), rel_tol=1e-12, abs_tol=1e-10)
    assert math.isclose(float(W.trace()), float(D.trace()), rel_tol=1e-12)
    assert math.isclose(float(W.quad_trace(Z)), float((Z * (D @ Z)).sum()), rel_tol=1e-12)
    evals, V = torch.linalg.eigh(D)
    Dh = V @ torch.diag(evals.sqrt()) @ V.T
    assert torch.allclose(W.matpow(Z, 0.5), Dh @ Z, atol=1e-10)
    assert torch.allclose(W.matpow(W.matpow(Z, -0.5), 0.5), Z, atol=1e-10)


def test_gram_logdet_determinant_lemma():
    Z = torch.randn(30, 3, dtype=DT, generator=_rng(3))
    for beta in (1.0, 0.3, 7.0):
        dense = torch.logdet(beta * torch.eye(30, dtype=DT) + Z @ Z.T)
        assert math.isclose(float(gram_logdet(Z, beta)), float(dense), rel_tol=1e-12)


def test_mvdigamma():
    a, n = 7.3, 4
    ref = sum(torch.special.digamma(torch.tensor(a - i / 2, dtype=DT)) for i in range(n))
    assert math.isclose(float(mvdigamma(a, n)), float(ref), rel_tol=1e-14)


def test_low_rank_wishart_log_prob_matches_torch():
    n, p, q = 12, 4, 2
    X = torch.randn(n, p, dtype=DT, generator=_rng(4))
    Z = torch.randn(n, q, dtype=DT, generator=_rng(5))
    law = LowRankPrecisionWishart(n + 3.0, Z, beta=0.7)
    post = ConjugateWishartPosterior(X, nu=n + 1.0)
    S = post.mean
    ref = law.dense().log_prob(S.dense())
    assert math.isclose(float(law.log_prob(S)), float(ref), rel_tol=1e-12)
    assert math.isclose(float(law.log_prob(S.dense())), float(ref), rel_tol=1e-12)
    # latent terms = log_prob up to Z-free terms
    Z2 = torch.randn(n, q, dtype=DT, generator=_rng(6))
    law2 = LowRankPrecisionWishart(n + 3.0, Z2, beta=0.7)
    d_full = law.log_prob(S) - law2.log_prob(S)
    d_lat = law.latent_terms(S) - law2.latent_terms(S)
    assert math.isclose(float(d_full), float(d_lat), rel_tol=1e-10)


def test_expected_log_prob_monte_carlo():
    """E_{Theta ~ posterior}[log W(Theta | Z)] in closed form vs Monte Carlo (4 SE)."""
    n, p, q = 6, 3, 2
    X = torch.randn(n, p, dtype=DT, generator=_rng(7))
    Z = torch.randn(n, q, dtype=DT, generator=_rng(8))
    post = ConjugateWishartPosterior(X, nu=n + 0.5)
    law = LowRankPrecisionWishart(n + p - q + 0.5 + q, Z)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        S = post.dense().sample((20000,))
    lp = law.dense().log_prob(S)
    se = float(lp.std()) / math.sqrt(lp.numel())
    assert abs(float(law.expected_log_prob(post)) - float(lp.mean())) < 4 * se


def test_conjugate_posterior():
    """log p(Theta) + log p(X | Theta) - log p(Theta | X) = log p(X) does not depend on Theta."""
    n, p, nu = 5, 3, 6.0
    X = torch.randn(n, p, dtype=DT, generator=_rng(9))
    post = ConjugateWishartPosterior(X, nu).dense()
    torch.manual_seed(1)
    vals = []
    for _ in range(4):
        Theta = torch.distributions.Wishart(torch.tensor(nu + 2, dtype=DT),
                                            covariance_matrix=torch.eye(n, dtype=DT)).sample()
        tr = poutine.trace(poutine.condition(wishart_pca_generative, data={"Theta_X": Theta})
                           ).get_trace(X, n, p, nu)
        vals.append(float(tr.log_prob_sum() - post.log_prob(Theta)))
    assert np.ptp(vals) < 1e-8 * max(1.0, abs(vals[0]))


def test_structured_model_equals_dense_model():
    n, p, q = 15, 5, 2
    X = torch.randn(n, p, dtype=DT, generator=_rng(10))
    nu_x, nu_z = default_dofs(n, p, q)
    for seed in (11, 12):
        Z = torch.randn(n, q, dtype=DT, generator=_rng(seed))
        lps = []
        for model in (wishart_pca_model, wishart_pca_model_dense):
            tr = poutine.trace(poutine.condition(model, data={"Z": Z})).get_trace(X, q, nu_x, nu_z)
            lps.append(float(tr.log_prob_sum()))
        assert math.isclose(lps[0], lps[1], rel_tol=1e-11)


# ---------------------------------------------------------------------------- Theorem 2
def test_gamma_convention():
    n, p, q = 50, 10, 2
    nu_x, nu_z = default_dofs(n, p, q)
    assert (nu_x, nu_z) == (50.0, 58.0)
    assert coupling_gamma(nu_x, nu_z, p, q) == 1.0
    assert coupling_gamma(60.0, 70.0, p, q) == pytest.approx(72 / 70)


def test_theorem2_closed_form_is_pca():
    from sklearn.decomposition import PCA

    X = np.random.default_rng(0).normal(size=(80, 7)) @ np.diag([5, 4, 3, 1, 1, 0.5, 0.1])
    S = torch.from_numpy(PCA(3).fit_transform(X))
    Xc = torch.from_numpy(X - X.mean(0))
    Z = theorem2_solution(Xc, 3)
    assert _rel(Z @ Z.T, S @ S.T) < 1e-10


def test_theorem2_eigenvalues_clip():
    d = torch.tensor([10.0, 3.0, 0.2])
    lam = theorem2_eigenvalues(d, 3, gamma=0.5)
    assert torch.allclose(lam, torch.tensor([4.5, 1.0, 0.0], dtype=DT))


def test_wishart_pca_map_digits_is_pca():
    """Done-when: gamma = 1 MAP on digits, ZZ^T = Gram of sklearn PCA scores to 1e-4."""
    from sklearn.datasets import load_digits
    from sklearn.decomposition import PCA

    X = load_digits().data
    S = PCA(2).fit_transform(X)
    est = WishartPCA(n_components=2, random_state=0)
    Z = est.fit_transform(X)
    assert est.gamma_ == 1.0
    err = np.linalg.norm(Z @ Z.T - S @ S.T) / np.linalg.norm(S @ S.T)
    assert err < 1e-4, err


def test_wishart_pca_gamma_not_one_eigenvalues():
    """Eigenvalues of Z*Z*^T follow max(0, gamma(1 + d_i) - 1), including the clipped case."""
    rng = np.random.default_rng(1)
    n, p, q = 60, 5, 3
    X = rng.normal(size=(n, p)) * np.array([3.0, 1.5, 0.06, 0.05, 0.04])
    Xc = X - X.mean(0)
    d = np.linalg.svd(Xc, compute_uv=False) ** 2
    for nu_x, nu_z in ((3.0 * n, 2.2 * n), (n, 1.5 * n)):
        est = WishartPCA(n_components=q, nu_x=nu_x, nu_z=nu_z, random_state=0)
        Z = est.fit_transform(X)
        g = (nu_z + q) / (nu_x + p)
        assert est.gamma_ == pytest.approx(g)
        lam = np.sort(np.linalg.eigvalsh(Z.T @ Z))[::-1]
        ref = np.maximum(0.0, g * (1 + d[:q]) - 1)
        assert np.allclose(lam, ref, rtol=1e-4, atol=1e-4 * ref.max()), (lam, ref)
        Zcf = WishartPCA(n_components=q, nu_x=nu_x, nu_z=nu_z, solver="closed_form").fit_transform(X)
        assert np.allclose(Z @ Z.T, Zcf @ Zcf.T, atol=2e-4 * np.abs(Zcf @ Zcf.T).max())


def test_wishart_pca_adam_svi_path():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 4)) * np.array([2.0, 1.0, 0.3, 0.1])
    est = WishartPCA(random_state=0, optimizer="adam", n_iter=1500, learning_rate=0.05)
    Z = est.fit_transform(X)
    Zcf = WishartPCA(solver="closed_form").fit_transform(X)
    assert np.linalg.norm(Z @ Z.T - Zcf @ Zcf.T) / np.linalg.norm(Zcf @ Zcf.T) < 1e-2


def test_wishart_pca_large_n_never_builds_n_by_n():
    """n = 20 000: the structured model (MAP steps) never creates an n x n tensor."""
    n, p, q = 20_000, 8, 2
    X = torch.randn(n, p, dtype=DT, generator=_rng(13)) * torch.linspace(3, 0.5, p, dtype=DT)
    nu_x, nu_z = default_dofs(n, p, q)
    with MaxNumel() as mode:
        post = ConjugateWishartPosterior(X, nu_x)
        W = post._scale_inv
        vals = map_estimate(
            wishart_pca_model, dict(X=X, n_components=q, nu_x=nu_x, nu_z=nu_z, posterior=post),
            {"Z": torch.randn(n, q, dtype=DT, generator=_rng(14))}, n_iter=60,
            reparam={"Z": (lambda Y: W.matpow(Y, -0.5), lambda Z: W.matpow(Z, 0.5))})
    assert n * q <= mode.max <= n * p, mode.max
    Z = vals["Z"]
    ref = theorem2_solution(X, q)
    # Gram comparison without forming n x n: ||ZZ^T - RR^T||_F^2 via q x q products
    a = (Z.T @ Z).pow(2).sum() + (ref.T @ ref).pow(2).sum() - 2 * (Z.T @ ref).pow(2).sum()
    assert float(a.sqrt() / (ref.T @ ref).pow(2).sum().sqrt()) < 1e-3


# ---------------------------------------------------------------------------- estimator contract
@pytest.mark.parametrize("bad, msg", [
    (np.array([[1.0, np.nan], [2.0, 3.0], [0.0, 1.0]]), "NaN"),
    (np.arange(5.0), "2D array"),
    (np.empty((0, 3)), "0 sample"),
])
def test_wishart_pca_input_validation(bad, msg):
    with pytest.raises(ValueError, match=msg):
        WishartPCA(n_components=1).fit(bad)


def test_wishart_pca_param_validation():
    X = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(ValueError, match="at most the number of features"):
        WishartPCA(n_components=4).fit(X)
    with pytest.raises(ValueError, match="must exceed n - 1"):
        WishartPCA(nu_x=10).fit(X)
    with pytest.raises(ValueError, match="solver"):
        WishartPCA(solver="svd").fit(X)


def test_wishart_pca_random_state_repeatable():
    X = np.random.default_rng(3).normal(size=(50, 5)) * np.array([3, 2, 1, 0.5, 0.1])
    a = WishartPCA(random_state=7).fit_transform(X)
    b = WishartPCA(random_state=7).fit_transform(X)
    assert np.array_equal(a, b)
    t = WishartPCA(random_state=7).fit_transform(torch.from_numpy(X))
    assert isinstance(t, torch.Tensor)
    pyro.clear_param_store()
