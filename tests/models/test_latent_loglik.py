"""The whole inverse Wishart log-density of ProbDR's eq. (1), ``latent_loglik``: equal to
scipy's ``invwishart.logpdf`` in every parameter (Z, gamma, alpha, nu), differentiable in
gamma, alpha and nu, ``terms="z"`` the old Z-only factor, and gamma recovered from a simulated
S by MAP in a Pyro program."""

from __future__ import annotations

import math

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch
from helpers import random_spd
from scipy.stats import invwishart, norm

from probdr.infer.map import map_estimate
from probdr.laws.wishart import gram_logdet
from probdr.models.probdr_general import (
    kernel_matrix,
    latent_loglik,
    latent_scale,
    precision_logdet,
)

DT = torch.float64
_spd = random_spd


def _latents(n, q=2, seed=1):
    return torch.randn(n, q, dtype=DT, generator=torch.Generator().manual_seed(seed))


def _scipy(S, Z, nu, gamma, alpha, kernel="student"):
    return invwishart.logpdf(S.numpy(), df=nu,
                             scale=latent_scale(Z, gamma, alpha, kernel).numpy())


def _factor(S):
    s, V = torch.linalg.eigh(S)
    return (V / s) @ V.T, (V / s.sqrt()).T


def _old_latent_loglik(Z, precision, nu, gamma, alpha=0.0, kernel="student", jitter=1e-10,
                       factor=None):
    """The function at 4f99db2 (before the whole density), copied as the reference of
    ``terms="z"``."""
    Zc = Z - Z.mean(0, keepdim=True)
    quad = ((factor @ Zc).square().sum() if factor is not None
            else (Zc * (precision @ Zc)).sum())
    if alpha == 0.0:
        return 0.5 * nu * gram_logdet(Zc, gamma) - 0.5 * quad
    n = Z.shape[0]
    M = kernel_matrix(Zc, kernel)
    K = M - M.mean(0, keepdim=True) - M.mean(1, keepdim=True) + M.mean()
    Psi = Zc @ Zc.T + alpha * K + gamma * torch.eye(n, dtype=Z.dtype)
    C, info = torch.linalg.cholesky_ex(Psi)
    if int(info) != 0:
        C = torch.linalg.cholesky(Psi + jitter * gamma * torch.eye(n, dtype=Z.dtype))
    logdet = 2.0 * torch.log(torch.diagonal(C)).sum()
    return 0.5 * nu * logdet - 0.5 * (quad + alpha * (K * precision).sum())


# ------------------------------------------------------------------- against scipy's density
@pytest.mark.parametrize("n", [6, 9, 12])
@pytest.mark.parametrize("alpha, kernel", [(0.0, "student"), (0.5, "student"),
                                           (1.3, "gaussian")])
@pytest.mark.parametrize("use_factor", [False, True])
def test_whole_density_equals_scipy_invwishart(n, alpha, kernel, use_factor):
    S = _spd(n, seed=n)
    Lam, W = _factor(S)
    Z = _latents(n, seed=n + 1)
    checked = []
    for gamma in (0.05, 0.7, 4.0):
        for nu in (n - 0.5, n + 3.0, 5.0 * n):
            ours = float(latent_loglik(Z, Lam, nu, gamma, alpha, kernel,
                                       factor=W if use_factor else None))
            ref = _scipy(S, Z, nu, gamma, alpha, kernel)
            assert ours == pytest.approx(ref, rel=1e-8, abs=1e-8)
            checked.append(ref)
    assert np.ptp(checked) > 1.0  # the parameters really move the density


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_differences_across_gamma_and_nu_equal_scipy(alpha):
    n = 8
    S = _spd(n, seed=5)
    Lam = torch.linalg.inv(S)
    Z = _latents(n, q=3, seed=6)
    nu = n + 2.5
    g0, nu0 = 0.9, n + 1.0
    base = float(latent_loglik(Z, Lam, nu, g0, alpha))
    for gamma in (0.1, 2.0, 30.0):
        ours = float(latent_loglik(Z, Lam, nu, gamma, alpha)) - base
        ref = _scipy(S, Z, nu, gamma, alpha) - _scipy(S, Z, nu, g0, alpha)
        assert ours == pytest.approx(ref, rel=1e-8)
        assert abs(ref) > 0.1
    base = float(latent_loglik(Z, Lam, nu0, g0, alpha))
    for nu in (n - 0.9, n + 7.0, 40.0):
        ours = float(latent_loglik(Z, Lam, nu, g0, alpha)) - base
        ref = _scipy(S, Z, nu, g0, alpha) - _scipy(S, Z, nu0, g0, alpha)
        assert ours == pytest.approx(ref, rel=1e-8)
        assert abs(ref) > 0.1


def test_z_only_terms_grow_without_bound_in_gamma_the_whole_density_does_not():
    """The bug of the Z-only factor: it rises with gamma forever; the whole density peaks."""
    n = 10
    S = _spd(n, seed=7)
    Lam = torch.linalg.inv(S)
    Z = _latents(n, seed=8)
    nu = n + 4.0
    gammas = [0.1, 1.0, 10.0, 100.0, 1000.0]
    z_only = [float(latent_loglik(Z, Lam, nu, g, terms="z")) for g in gammas]
    whole = [float(latent_loglik(Z, Lam, nu, g)) for g in gammas]
    assert np.all(np.diff(z_only) > 0)
    assert whole[-1] < whole[0] and np.argmax(whole) not in (0, len(gammas) - 1)


# ------------------------------------------------------------------- terms="z": the old value
@pytest.mark.parametrize("alpha, kernel", [(0.0, "student"), (0.5, "student"),
                                           (0.8, "gaussian")])
def test_terms_z_is_exactly_the_old_factor(alpha, kernel):
    n, nu, gamma = 11, 14.0, 0.4
    S = _spd(n, seed=9)
    Lam, W = _factor(S)
    Z = _latents(n, q=3, seed=10)
    for fac in (None, W):
        new = latent_loglik(Z, Lam, nu, gamma, alpha, kernel, factor=fac, terms="z")
        old = _old_latent_loglik(Z, Lam, nu, gamma, alpha, kernel, factor=fac)
        assert float(new) == float(old)  # bit for bit
        # and the rest is the constant -gamma/2 tr(Lam) + terms in nu and S (scipy)
        whole = latent_loglik(Z, Lam, nu, gamma, alpha, kernel, factor=fac)
        rest = float(whole - new)
        ref = (_scipy(S, Z, nu, gamma, alpha, kernel) - float(old))
        assert rest == pytest.approx(ref, rel=1e-9)


def test_terms_z_needs_no_logdet_of_a_singular_laplacian_and_all_refuses_it():
    # the Laplacian of a path graph: singular (L 1 = 0)
    n = 12
    A = torch.diag(torch.ones(n - 1, dtype=DT), 1)
    A = A + A.T
    L = torch.diag(A.sum(1)) - A
    Z = _latents(n, seed=11)
    assert torch.isfinite(latent_loglik(Z, L, n + 1.0, 0.5, terms="z"))
    with pytest.raises(ValueError, match="singular"):
        latent_loglik(Z, L, n + 1.0, 0.5)
    with pytest.raises(ValueError, match="singular"):
        precision_logdet(L)
    # a ridge makes it a density; any logdet_precision shifts it by a constant
    eps = 1e-3
    Lr = L + eps * torch.eye(n, dtype=DT)
    ref = invwishart.logpdf(torch.linalg.inv(Lr).numpy(), df=n + 1.0,
                            scale=latent_scale(Z, 0.5).numpy())
    assert float(latent_loglik(Z, Lr, n + 1.0, 0.5)) == pytest.approx(ref, rel=1e-8)
    ld = float(torch.linalg.slogdet(Lr)[1])
    a, b = (float(latent_loglik(Z, Lr, n + 1.0, g, logdet_precision=0.0)) for g in (0.5, 2.0))
    assert a - b == pytest.approx(ref - invwishart.logpdf(
        torch.linalg.inv(Lr).numpy(), df=n + 1.0, scale=latent_scale(Z, 2.0).numpy()),
        rel=1e-8)
    assert float(latent_loglik(Z, Lr, n + 1.0, 0.5, logdet_precision=ld)) == pytest.approx(
        ref, rel=1e-10)


def test_bad_terms_and_nu_are_refused():
    n = 6
    Lam = torch.linalg.inv(_spd(n))
    Z = _latents(n)
    with pytest.raises(ValueError, match="terms"):
        latent_loglik(Z, Lam, 9.0, 1.0, terms="Z-only")
    with pytest.raises(ValueError, match="nu > n - 1"):
        latent_loglik(Z, Lam, n - 1.0, 1.0)
    with pytest.raises(ValueError, match="nu > n - 1"):
        latent_loglik(Z, Lam, torch.tensor(2.0, dtype=DT), 1.0)


# ----------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("alpha", [0.0, 0.4])
def test_gradients_in_gamma_nu_alpha_pass_gradcheck(alpha):
    n = 5
    S = _spd(n, seed=12)
    Lam = torch.linalg.inv(S)
    Z = _latents(n, seed=13)

    def f(log_gamma, nu, a):
        return latent_loglik(Z, Lam, nu, log_gamma.exp(), a)

    inputs = (torch.tensor(math.log(0.7), dtype=DT, requires_grad=True),
              torch.tensor(n + 1.5, dtype=DT, requires_grad=True),
              torch.tensor(alpha, dtype=DT, requires_grad=True))
    assert torch.autograd.gradcheck(f, inputs)
    # the alpha gradient exists even at alpha = 0 (a tensor alpha skips the shortcut)
    (g_alpha,) = torch.autograd.grad(f(*inputs), inputs[2])
    assert abs(float(g_alpha)) > 1e-6
    # tensor parameters give the float parameters' value
    assert float(f(*inputs).detach()) == pytest.approx(
        float(latent_loglik(Z, Lam, n + 1.5, 0.7, alpha)), rel=1e-13)


# ------------------------------------------------------- recovering gamma from a simulated S
def _simulate(n=40, q=2, nu=70.0, gamma=0.8, seed=0):
    Z = 2.0 * _latents(n, q, seed=seed + 100)
    Psi = latent_scale(Z, gamma).numpy()
    S = invwishart.rvs(df=nu, scale=Psi, random_state=np.random.default_rng(seed))
    return Z, torch.as_tensor(S)


def _gamma_model(Z, precision, nu, logdet_precision):
    u = pyro.sample("log_gamma", dist.Normal(torch.tensor(0.0, dtype=DT),
                                             torch.tensor(3.0, dtype=DT)))
    pyro.factor("S", latent_loglik(Z, precision, nu, u.exp(),
                                   logdet_precision=logdet_precision))


def test_gamma_is_recovered_by_map_with_a_laplace_interval():
    """S ~ IW(Z Z^T + gamma I, nu) with known Z and gamma = 0.8: the MAP of log gamma under a
    weak prior, by L-BFGS on the Pyro program, and the Laplace 90% interval cover the truth;
    a grid posterior from latent_loglik agrees."""
    nu, gamma = 70.0, 0.8
    Z, S = _simulate(nu=nu, gamma=gamma)
    Lam = torch.linalg.inv(S)
    ld = precision_logdet(Lam)
    kwargs = dict(Z=Z, precision=Lam, nu=nu, logdet_precision=ld)
    vals = map_estimate(_gamma_model, kwargs, {"log_gamma": torch.tensor(math.log(1.5), dtype=DT)},
                        n_iter=200)
    u_map = vals["log_gamma"].detach().clone().requires_grad_(True)

    def log_post(u):
        return (latent_loglik(Z, Lam, nu, u.exp(), logdet_precision=ld)
                + dist.Normal(0.0, 3.0).log_prob(u))

    (g,) = torch.autograd.grad(log_post(u_map), u_map, create_graph=True)
    (h,) = torch.autograd.grad(g, u_map)
    assert abs(float(g)) < 1e-6  # a stationary point
    sd = float((-h) ** -0.5)
    z90 = norm.ppf(0.95)
    assert sd < 0.1  # the interval is informative
    assert abs(float(u_map) - math.log(gamma)) < z90 * sd
    # grid posterior over log gamma
    grid = torch.linspace(float(u_map) - 8 * sd, float(u_map) + 8 * sd, 801, dtype=DT)
    lp = torch.stack([log_post(u) for u in grid]).detach().numpy()
    w = np.exp(lp - lp.max())
    cdf = np.cumsum(w) / w.sum()
    lo, hi = np.interp([0.05, 0.95], cdf, grid.numpy())
    assert lo < math.log(gamma) < hi
    assert (hi - lo) == pytest.approx(2 * z90 * sd, rel=0.05)


def test_gamma_and_nu_are_recovered_jointly():
    """The nu terms matter: learning log gamma and log(nu - n + 1) together, the Laplace 90%
    intervals of both cover the truth (Z known)."""
    n, nu, gamma = 40, 70.0, 0.8
    Z, S = _simulate(n=n, nu=nu, gamma=gamma, seed=3)
    Lam = torch.linalg.inv(S)
    ld = precision_logdet(Lam)

    def model():
        u = pyro.sample("log_gamma", dist.Normal(torch.tensor(0.0, dtype=DT),
                                                 torch.tensor(3.0, dtype=DT)))
        v = pyro.sample("log_dof", dist.Normal(torch.tensor(3.0, dtype=DT),
                                               torch.tensor(3.0, dtype=DT)))
        pyro.factor("S", latent_loglik(Z, Lam, n - 1 + v.exp(), u.exp(), logdet_precision=ld))

    init = {"log_gamma": torch.tensor(0.0, dtype=DT), "log_dof": torch.tensor(3.0, dtype=DT)}
    vals = map_estimate(model, {}, init, n_iter=400)
    theta = torch.stack([vals["log_gamma"], vals["log_dof"]]).detach()

    def log_post(t):
        return (latent_loglik(Z, Lam, n - 1 + t[1].exp(), t[0].exp(), logdet_precision=ld)
                + dist.Normal(0.0, 3.0).log_prob(t[0]) + dist.Normal(3.0, 3.0).log_prob(t[1]))

    H = torch.autograd.functional.hessian(log_post, theta)
    cov = torch.linalg.inv(-H)
    sd = cov.diagonal().sqrt()
    truth = torch.tensor([math.log(gamma), math.log(nu - n + 1)], dtype=DT)
    z90 = norm.ppf(0.95)
    assert bool((sd < 0.3).all())
    assert bool(((theta - truth).abs() < z90 * sd).all())
