"""Entropic, symmetric entropic (SEA) and Sinkhorn affinities; OT helpers (issue 6).

References used as oracles: the Lagrangian dual (zero duality gap certifies optimality), POT's
``ot.sinkhorn``, probdr's kNN entropic affinities, finite differences.
"""

import math
import warnings

import numpy as np
import pytest
import torch

from probdr.ot.costs import pearson_distance_correlation, stress
from probdr.ot.entropic import SEAConvergenceWarning, entropic_affinity_matrix, row_perplexity
from probdr.ot.sea import _sea_eval, symmetric_entropic
from probdr.ot.sinkhorn import sinkhorn_affinity, symmetric_sinkhorn


def _data(n=60, p=5, seed=0):
    return np.random.default_rng(seed).normal(size=(n, p))


def _sqdist(X):
    X = np.asarray(X)
    return ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)


# ----------------------------------------------------------------------------------------------
# entropic affinities
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("exclude_self", [False, True])
def test_ea_rows_stochastic_and_calibrated(exclude_self):
    X = _data()
    P = entropic_affinity_matrix(X, 10, exclude_self=exclude_self)
    assert np.allclose(P.sum(1), 1.0, atol=1e-12)
    H = -(P * np.log(np.where(P > 0, P, 1.0))).sum(1)  # Shannon entropy
    assert np.abs(H - math.log(10)).max() < 1e-6
    if exclude_self:
        assert np.all(np.diag(P) == 0)
    else:  # self-loop: the diagonal is the largest entry of its row
        assert np.all(np.diag(P) >= P.max(1) - 1e-15)


def test_ea_matches_knn_entropic_affinity():
    """Independent implementation: probdr.affinities on all n-1 neighbours (self excluded)."""
    from probdr.input.affinities import entropic_affinity
    from probdr.input.neighbors import knn

    X = torch.from_numpy(_data(50))
    idx, d2 = knn(X, 49, method="exact")
    P_knn = entropic_affinity(d2, 8.0)
    P_dense = torch.zeros(50, 50, dtype=torch.float64)
    P_dense.scatter_(1, idx, P_knn)
    P = entropic_affinity_matrix(X, 8.0, exclude_self=True)
    assert torch.allclose(P, P_dense, atol=1e-5)


def test_ea_bandwidth_increases_with_perplexity():
    X = _data()
    pp = [row_perplexity(entropic_affinity_matrix(X, xi)) for xi in (5, 10, 20)]
    for xi, p in zip((5, 10, 20), pp, strict=True):
        assert torch.allclose(p, torch.full_like(p, float(xi)), rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# SEA
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("exclude_self", [False, True])
def test_sea_symmetric_doubly_stochastic_calibrated(exclude_self):
    X = _data(80)
    tol = 1e-6
    P, info = symmetric_entropic(X, 12, exclude_self=exclude_self, tol=tol, return_info=True)
    assert info["converged"]
    assert np.abs(P - P.T).max() < 1e-12
    assert np.abs(P.sum(1) - 1).max() < tol
    assert np.abs(P.sum(0) - 1).max() < tol
    perp = info["perplexity"].numpy()
    # Prop. 4.2: at least n - 1 rows saturated
    assert (np.abs(perp / 12 - 1) > 1e-4).sum() <= 1
    assert info["n_unsaturated"] <= 1
    if exclude_self:
        assert np.all(np.diag(P) == 0)


def test_sea_is_not_the_symmetrised_ea():
    """Table 4.1: (P^e + P^e^T)/2 is symmetric but neither stochastic nor calibrated; SEA is."""
    X = np.concatenate([_data(40, 3, 0) * 0.2, _data(40, 3, 1) * 3 + 10])
    Pe = entropic_affinity_matrix(X, 10)
    Pbar = 0.5 * (Pe + Pe.T)
    P = symmetric_entropic(X, 10)
    assert np.abs(Pbar.sum(1) - 1).max() > 1e-2
    assert np.abs(row_perplexity(Pbar).numpy() / 10 - 1).max() > 1e-2
    assert np.abs(P.sum(1) - 1).max() < 1e-5
    assert np.abs(row_perplexity(P).numpy() / 10 - 1).max() < 1e-4


def test_sea_zero_duality_gap():
    """Strong duality (Prop. 4.3): at the returned duals, q(gamma, lambda) = <P, C> (a certificate
    of optimality for the feasible P), and P has the closed form (4.2) with a division."""
    X = _data(50)
    C = _sqdist(X)
    P, info = symmetric_entropic(X, 10, tol=1e-8, return_info=True)
    g, lam = info["gamma"].numpy(), info["lambda"].numpy()
    primal = (P * C).sum()
    dual = (math.log(10) + 1) * g.sum() + lam.sum() - (g * P.sum(1)).sum()
    assert abs(primal - dual) < 1e-6 * abs(primal)
    closed = np.exp((lam[:, None] + lam[None, :] - 2 * C) / (g[:, None] + g[None, :]))
    assert np.allclose(closed, P, rtol=1e-8, atol=1e-14)


def test_sea_dual_gradient_matches_finite_differences():
    """Danskin: grad_gamma q = log(xi)+1 - H, grad_lambda q = 1 - P1."""
    rng = np.random.default_rng(1)
    n = 12
    C = torch.from_numpy(_sqdist(_data(n, 3)))
    C = C / C.median()
    target = math.log(4) + 1
    gamma = torch.from_numpy(rng.uniform(0.5, 2.0, n))
    lam = torch.from_numpy(rng.normal(size=n) * 0.3)
    for excl in (False, True):
        q, gg, gl, _ = _sea_eval(gamma, lam, 2 * C, target, excl)
        h = 1e-6
        for i in (0, 5):
            e = torch.zeros(n, dtype=torch.float64)
            e[i] = h
            num_g = (_sea_eval(gamma + e, lam, 2 * C, target, excl)[0]
                     - _sea_eval(gamma - e, lam, 2 * C, target, excl)[0]) / (2 * h)
            num_l = (_sea_eval(gamma, lam + e, 2 * C, target, excl)[0]
                     - _sea_eval(gamma, lam - e, 2 * C, target, excl)[0]) / (2 * h)
            assert abs(float(num_g - gg[i])) < 1e-6
            assert abs(float(num_l - gl[i])) < 1e-6


def test_sea_stopping_rule_is_enforced():
    """The dual ascent stops only when both violations are below tol; a tiny budget must
    report non-convergence (with a warning) and violations above tol."""
    X = _data(60)
    for opt in ("adam", "newton"):
        with pytest.warns(SEAConvergenceWarning, match="did not meet tol"):
            P, info = symmetric_entropic(X, 10, tol=1e-12, max_iter=1, optimizer=opt,
                                         return_info=True)
        assert not info["converged"]
        assert max(info["entropy_violation"], info["marginal_violation"]) >= 1e-12
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        P, info = symmetric_entropic(X, 10, tol=1e-7, return_info=True)
    assert info["converged"]
    assert info["entropy_violation"] < 1e-7 and info["marginal_violation"] < 1e-7
    # what the rule certifies, recomputed independently from P
    H = -(P * (np.log(P) - 1)).sum(1)
    assert np.abs(H - (math.log(10) + 1)).max() < 1e-7
    assert np.abs(P.sum(1) - 1).max() < 1e-7


def test_sea_unique_whatever_the_init_and_optimizer():
    X = _data(40)
    P1 = symmetric_entropic(X, 8, init="ea", tol=1e-8)
    P2 = symmetric_entropic(X, 8, init="ones", tol=1e-8)
    assert np.abs(P1 - P2).max() < 1e-6
    P3 = symmetric_entropic(X, 8, optimizer="lbfgs", tol=1e-8)
    assert np.abs(P1 - P3).max() < 1e-6
    P3 = symmetric_entropic(X, 8, optimizer="adam", lr=0.05, tol=1e-4, max_iter=20000)
    assert np.abs(P1 - P3).max() < 1e-3


def test_sea_scale_invariant_and_torch_in_torch_out():
    X = _data(40)
    P = symmetric_entropic(X, 8, tol=1e-8)
    P10 = symmetric_entropic(torch.from_numpy(X * 10.0), 8, tol=1e-8)
    assert isinstance(P10, torch.Tensor)
    assert np.abs(P - P10.numpy()).max() < 1e-6


def test_sea_precomputed_cost():
    X = _data(40)
    C = _sqdist(X)
    assert np.abs(symmetric_entropic(C, 8, precomputed=True) - symmetric_entropic(X, 8)).max() < 1e-9
    with pytest.raises(ValueError, match="symmetric"):
        symmetric_entropic(C + np.triu(np.ones_like(C)), 8, precomputed=True)
    with pytest.raises(ValueError, match="zero diagonal"):
        symmetric_entropic(C + np.eye(40), 8, precomputed=True)


def test_sea_three_clusters_laplacian():
    """Fig. 4.2 analogue: three well separated Gaussians, xi = 5: the Laplacian of P^se has three
    (near-)zero eigenvalues, the fourth is clearly positive."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(30, 2)) * s + c for s, c in
                        [(0.5, (0, 0)), (1.0, (40, 0)), (2.0, (0, 60))]])
    P = symmetric_entropic(X, 5)
    L = np.diag(P.sum(1)) - P
    ev = np.sort(np.linalg.eigvalsh(L))
    assert ev[2] < 1e-8
    assert ev[3] > 1e-3


@pytest.mark.slow
def test_sea_digits_done_when(digits):
    """Issue 6 done-when: SEA on digits symmetric to 1e-6, rows sum to 1 within 1e-4, every row
    but at most one at the target perplexity within 1%."""
    X, _ = digits
    P, info = symmetric_entropic(X, 30, return_info=True)
    assert np.abs(P - P.T).max() < 1e-6
    assert np.abs(P.sum(1) - 1).max() < 1e-4
    assert (np.abs(info["perplexity"].numpy() / 30 - 1) > 0.01).sum() <= 1


def _kkt_rows_ok(P, info, perplexity, rel=0.01):
    """Each row at the target perplexity within ``rel``, or unsaturated as complementary
    slackness allows: its entropy dual at the lower bound and its perplexity above the target."""
    perp = info["perplexity"].numpy()
    at_bound = (info["gamma"] / info["cost_scale"]).numpy() <= 2e-10
    off = np.abs(perp / perplexity - 1) > rel
    return bool(np.all(~off | (at_bound & (perp > perplexity)))), int(off.sum())


def test_sea_low_perplexity_lbfgs_is_newton_s_fixed_point(digits):
    """Above n = 500 the "auto" optimiser is L-BFGS-B (+ Newton polish) instead of the damped
    Newton ascent (faster at low perplexity); both reach the same SEA. Without self-loops,
    Prop. 4.2's at-most-one unsaturated row does not apply: several rows sit at the bound."""
    X, _ = digits
    X = X[np.random.default_rng(0).permutation(len(X))[:600]]
    P1, i1 = symmetric_entropic(X, 10, exclude_self=True, tol=1e-8, optimizer="newton",
                                return_info=True)
    P2, i2 = symmetric_entropic(X, 10, exclude_self=True, tol=1e-8, return_info=True)
    assert i1["converged"] and i2["converged"]
    assert np.abs(P1 - P2).max() < 1e-6
    ok, n_off = _kkt_rows_ok(P2, i2, 10)
    assert ok and n_off == i2["n_unsaturated"] > 1


def test_sea_digits_perplexity_10(digits):
    """Issue 6 done-when rule at perplexity 10 on all the digits (thesis convention, self-loops):
    symmetric to 1e-6, rows sum to 1 within 1e-4, every row but at most one at the target
    perplexity within 1%."""
    X, _ = digits
    P, info = symmetric_entropic(X, 10, return_info=True)
    assert info["converged"]
    assert np.abs(P - P.T).max() < 1e-6
    assert np.abs(P.sum(1) - 1).max() < 1e-4
    assert (np.abs(info["perplexity"].numpy() / 10 - 1) > 0.01).sum() <= 1


@pytest.mark.slow
def test_sea_digits_perplexity_10_without_self_loops(digits):
    """SNEkhorn's input (diagonal excluded) at perplexity 10 on the digits: symmetric, rows sum
    to 1, every row at the target within 1% or unsaturated at its bound (complementary
    slackness; without self-loops more than one row may be)."""
    X, _ = digits
    P, info = symmetric_entropic(X, 10, exclude_self=True, return_info=True)
    assert info["converged"]
    assert np.abs(P - P.T).max() < 1e-6
    assert np.abs(P.sum(1) - 1).max() < 1e-4
    assert np.all(np.diag(P) == 0)
    assert _kkt_rows_ok(P, info, 10)[0]


# ----------------------------------------------------------------------------------------------
# Sinkhorn
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nu", [0.3, 2.0])
def test_sinkhorn_matches_pot(nu):
    import ot

    X = _data(40, 3)
    C = _sqdist(X)
    P = sinkhorn_affinity(X, nu, tol=1e-10)
    ref = ot.sinkhorn(np.ones(40), np.ones(40), C, nu, numItermax=100000, stopThr=1e-12)
    assert np.abs(P - P.T).max() < 1e-12
    assert np.abs(P.sum(1) - 1).max() < 1e-9
    assert np.abs(P.sum(0) - 1).max() < 1e-9
    assert np.abs(P - ref).max() < 1e-7


def test_sinkhorn_domains_agree_and_warm_start():
    rng = np.random.default_rng(0)
    L = torch.from_numpy(-rng.uniform(0, 20, size=(80, 80)))
    L = 0.5 * (L + L.T)
    L.fill_diagonal_(float("-inf"))
    lq1, g1, it1, e1 = symmetric_sinkhorn(L, tol=1e-10, domain="log")
    lq2, g2, it2, e2 = symmetric_sinkhorn(L, tol=1e-10, domain="auto")
    assert e1 < 1e-10 and e2 < 1e-10
    assert torch.allclose(g1, g2, atol=1e-9)
    Q = torch.exp(lq1)
    assert torch.all(Q.diagonal() == 0)
    _, _, it3, _ = symmetric_sinkhorn(L, g1, tol=1e-10)
    assert it3 == 1  # warm start at the fixed point: converged on the first check


def test_sinkhorn_unrolled_gradient_matches_envelope():
    """d/dC [<P, C> - 2<f, 1>] = P - Q at convergence (envelope theorem): unrolled autograd
    through the Sinkhorn iterations gives the same."""
    rng = np.random.default_rng(0)
    n = 15
    C = torch.from_numpy(_sqdist(rng.normal(size=(n, 2)))).requires_grad_(True)
    P = torch.from_numpy(symmetric_entropic(rng.normal(size=(n, 4)), 4, tol=1e-10))
    _, g, _, err = symmetric_sinkhorn(-C, tol=1e-13, max_iter=5000)
    loss = (P * C).sum() - 2 * g.sum()
    loss.backward()
    Q = torch.exp(g[:, None] + g[None, :] - C).detach()
    assert err < 1e-12
    assert torch.allclose(C.grad, P - Q, atol=1e-8)


def test_sinkhorn_perplexity_matches_mean_entropy():
    X = _data(50)
    P, info = sinkhorn_affinity(X, perplexity=10, return_info=True)
    H = -(P * (np.log(P) - 1)).sum(1)
    assert abs(H.mean() - (math.log(10) + 1)) < 1e-6
    # a global constraint: per-point perplexities spread (unlike SEA's)
    perp = row_perplexity(P).numpy()
    assert perp.max() / perp.min() > 1.05


# ----------------------------------------------------------------------------------------------
# metrics and validation
# ----------------------------------------------------------------------------------------------
def test_pearson_and_stress_against_numpy():
    rng = np.random.default_rng(0)
    A = _sqdist(rng.normal(size=(20, 3))) ** 0.5
    B = _sqdist(rng.normal(size=(20, 2))) ** 0.5
    iu = np.triu_indices(20, 1)
    assert abs(pearson_distance_correlation(A, B) - np.corrcoef(A[iu], B[iu])[0, 1]) < 1e-12
    assert abs(stress(A, B) - ((A[iu] - B[iu]) ** 2).sum()) < 1e-9
    assert pearson_distance_correlation(A, 2 * A) == pytest.approx(1.0)


@pytest.mark.parametrize("fn", [symmetric_entropic, entropic_affinity_matrix,
                                lambda X, xi: sinkhorn_affinity(X, perplexity=xi)])
def test_affinity_input_validation(fn):
    X = _data(20)
    Xnan = X.copy()
    Xnan[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        fn(Xnan, 5)
    with pytest.raises(ValueError, match="2-D"):
        fn(X[:, 0], 5)
    with pytest.raises(ValueError, match="empty"):
        fn(np.empty((0, 3)), 5)
    with pytest.raises(ValueError, match="perplexity"):
        fn(X, 20)
    with pytest.raises(ValueError, match="perplexity"):
        fn(X, 1)


@pytest.mark.parametrize("exclude_self", [False, True])
def test_sea_blocked_evaluation_equals_dense(exclude_self):
    # the dual ascent evaluates q and its gradient block by block (128 rows, n = 300 is not a
    # multiple); it must equal the dense evaluation that also returns log P
    from probdr.ot.sea import _sea_eval

    gen = torch.Generator().manual_seed(0)
    X = torch.randn(300, 5, generator=gen, dtype=torch.float64)
    C = torch.cdist(X, X) ** 2
    Cs2 = 2.0 * C / C[C > 0].median()
    gamma = 0.5 + torch.rand(300, generator=gen, dtype=torch.float64)
    lam = -torch.rand(300, generator=gen, dtype=torch.float64)
    dense = _sea_eval(gamma, lam, Cs2, math.log(30) + 1, exclude_self)
    blocked = _sea_eval(gamma, lam, Cs2, math.log(30) + 1, exclude_self, need_lp=False)
    assert blocked[3] is None and dense[3].shape == (300, 300)
    for a, b in zip(dense[:3], blocked[:3], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_sea_newton_stops_when_it_stalls():
    """280 points on a line at perplexity 5 (the fuzz case that kept TSNEkhorn busy for minutes):
    the Newton ascent makes no progress; it stops after STALL_ITER iterations without a 1% fall
    of the violation, warns and names the stall, and keeps the duals of the smallest violation
    seen (here the first iterate's, the ascent never improving on it by 1%)."""
    from probdr.ot import sea

    r = np.random.default_rng(2879)
    X = r.normal(size=(280, 1)) @ r.normal(size=(1, 2))
    seen = []
    newton = sea._sea_newton

    def recording(*args):
        violations = args[-1]
        out = newton(*args[:-1], lambda g, gg, gl: seen.append(violations(g, gg, gl)) or seen[-1])
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sea, "_sea_newton", recording)
        with pytest.warns(SEAConvergenceWarning, match="stalled.*larger tol or perplexity"):
            P, info = symmetric_entropic(X, 5, exclude_self=True, return_info=True)
    assert not info["converged"] and "stalled" in info["message"]
    assert info["n_iter"] <= sea.STALL_ITER + 20  # not max_iter (3000)
    best = min(max(v) for v in seen)
    assert max(info["entropy_violation"], info["marginal_violation"]) == pytest.approx(best)
    assert np.isfinite(P).all()


def test_tsnekhorn_on_collinear_points_finishes_with_a_warning():
    """The fuzz case itself, through the estimator: a finite embedding and the SEA's warning."""
    r = np.random.default_rng(2879)
    X = r.normal(size=(280, 1)) @ r.normal(size=(1, 2))
    from probdr import TSNEkhorn

    with pytest.warns(SEAConvergenceWarning, match="stalled"):
        Z = TSNEkhorn(perplexity=5, n_iter=30, early_exaggeration_iter=10,
                      random_state=0).fit_transform(X)
    assert np.isfinite(Z).all() and Z.shape == (280, 2)
