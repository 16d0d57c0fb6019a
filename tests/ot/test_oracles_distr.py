r"""Independent oracles for DistR and the semi-relaxed Gromov-Wasserstein energy (Van Assel's
thesis [T], ch. 5 and App. 8: Theorem 5.2(i), Lemma 8.3, Theorem 5.3 / Prop. 8.6, App. 8.2.1).

The energy :math:`E_L(\mathbf C,\bar{\mathbf C},\mathbf T) = \sum_{ijkl}L(C_{ij},\bar C_{kl})
T_{ik}T_{jl}` is written here as the explicit 4-tensor sum (small sizes), and couplings,
permutations and barycentres are built with plain torch, scipy and POT; ``srgw_objective``,
``srgw_gradient`` and ``DistR`` are the code under test.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

import probdr
from probdr.ot import srgw_gradient, srgw_objective

DT = torch.float64


def _brute_energy(C, Cbar, T, L):
    """sum_{ijkl} L(C_ij, Cbar_kl) T_ik T_jl with the full 4-tensor."""
    Lt = L(C[:, :, None, None], Cbar[None, None, :, :])  # (N, N, n, n): i j k l
    return torch.einsum("ijkl,ik,jl->", Lt, T, T)


def _square(a, b):
    return (a - b) ** 2


def _gen_kl(a, b):
    return a * torch.log(a / b) - a + b


def _cross_entropy(a, b):
    return -a * torch.log(b)


def _random_coupling(N, n, h, gen):
    T = torch.rand(N, n, generator=gen, dtype=DT) + 0.05
    return T / T.sum(1, keepdim=True) * h[:, None]


def _random_doubly_stochastic(N, gen, iters=500):
    T = torch.rand(N, N, generator=gen, dtype=DT) + 0.01
    for _ in range(iters):
        T = T / T.sum(1, keepdim=True)
        T = T / T.sum(0, keepdim=True)
    return T / N


def _blobs(n_per, centres, gen, scale=0.3):
    X = torch.cat([torch.tensor(c, dtype=DT) + scale * torch.randn(n_per, len(c), generator=gen,
                                                                   dtype=DT) for c in centres])
    return X


# --------------------------------------------------------------------------------------------
# the energy itself
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("loss", ["square", "kl"])
def test_srgw_objective_and_gradient_match_the_four_tensor_sum(loss):
    r"""[T] eq. (srGW) and App. 8.4 (8.76)-(8.78): ``srgw_objective`` is :math:`\sum_{ijkl}
    L(C_{ij},\bar C_{kl})T_{ik}T_{jl}` (:math:`L = (a-b)^2` or the generalised KL
    :math:`a\log(a/b)-a+b`), and ``srgw_gradient`` is the gradient of that sum without the
    :math:`\langle f_1(\mathbf C),\mathbf h\mathbf h^\top\rangle` term, for symmetric
    :math:`\mathbf C,\bar{\mathbf C}` (autograd of the 4-tensor sum, h held fixed)."""
    gen = torch.Generator().manual_seed(0)
    N, n = 7, 3
    A = torch.rand(N, N, generator=gen, dtype=DT) + 0.1
    C = A + A.T
    B = torch.rand(n, n, generator=gen, dtype=DT) + 0.1
    Cbar = B + B.T
    h = torch.full((N,), 1.0 / N, dtype=DT)
    T = _random_coupling(N, n, h, gen).requires_grad_(True)
    L = _square if loss == "square" else _gen_kl
    E = _brute_energy(C, Cbar, T, L)
    torch.testing.assert_close(srgw_objective(C, Cbar, T.detach(), loss), E.detach(),
                               rtol=1e-12, atol=1e-12)
    f1 = C * C if loss == "square" else C * torch.log(C) - C
    F = E - (f1 * T.sum(1)[:, None] * T.sum(1)[None, :]).sum()
    g = torch.autograd.grad(F, T)[0]
    torch.testing.assert_close(srgw_gradient(C, Cbar, T.detach(), loss), g, rtol=1e-10,
                               atol=1e-12)


# --------------------------------------------------------------------------------------------
# Theorem 5.2 (i): spectral methods are GW problems
# --------------------------------------------------------------------------------------------
def _pca_problem(N=9, p=5, d=2, seed=1):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(N, p, generator=gen, dtype=DT) * torch.tensor([3.0, 2.0, 1.0, 0.5, 0.2],
                                                                    dtype=DT)[:p]
    Xc = X - X.mean(0)
    C = Xc @ Xc.T
    lam, V = torch.linalg.eigh(C)
    lam, V = lam.flip(0), V.flip(1)
    Zs = V[:, :d] * lam[:d].sqrt()
    return C, Zs, lam, gen


def test_theorem_5_2_i_value_at_the_pca_solution():
    r"""[T] Theorem 5.2 (i) (:math:`N=n`, uniform weights, :math:`L=L_2`,
    :math:`\mathbf C_Z = \mathbf Z\mathbf Z^\top`): at the PCA embedding :math:`\mathbf Z^*` and
    the identity coupling :math:`\mathbf I/N`, the GW energy equals
    :math:`\frac1{N^2}\|\mathbf X\mathbf X^\top - \mathbf Z^*\mathbf Z^{*\top}\|_F^2 =
    \frac1{N^2}\sum_{k>d}\lambda_k^2` (Eckart-Young: the minimum of the DR problem). No
    coupling in :math:`\mathcal U(\frac1N\mathbf 1,\frac1N\mathbf 1)` and no embedding goes
    below it: random doubly stochastic couplings and permutations with random or optimal Z, POT's
    ``gromov_wasserstein2`` from random starts, and the first-order condition of the identity
    (``srgw_gradient`` against the assignment LP solved by scipy)."""
    import ot

    C, Zs, lam, gen = _pca_problem()
    N, d = C.shape[0], Zs.shape[1]
    I = torch.eye(N, dtype=DT) / N
    best = float((lam[d:] ** 2).sum()) / N**2
    frob = float(((C - Zs @ Zs.T) ** 2).sum()) / N**2
    assert frob == pytest.approx(best, rel=1e-10)
    Cz = Zs @ Zs.T
    assert float(srgw_objective(C, Cz, I, "square")) == pytest.approx(best, rel=1e-10)
    for _ in range(20):
        T = _random_doubly_stochastic(N, gen)
        perm = torch.eye(N, dtype=DT)[torch.randperm(N, generator=gen)] / N
        Zr = torch.randn(N, d, generator=gen, dtype=DT) * lam[:d].sqrt() / 2
        for TT in (T, perm):
            assert float(srgw_objective(C, Cz, TT, "square")) >= best - 1e-10
            assert float(srgw_objective(C, Zr @ Zr.T, TT, "square")) >= best - 1e-10
    h = np.full(N, 1.0 / N)
    for seed in range(3):
        G0 = _random_doubly_stochastic(N, torch.Generator().manual_seed(seed)).numpy()
        val = ot.gromov.gromov_wasserstein2(C.numpy(), Cz.numpy(), h, h, "square_loss", G0=G0)
        assert float(val) >= best - 1e-9
    # first-order optimality of I/N over the Birkhoff polytope: <grad, S - I/N> >= 0
    g = srgw_gradient(C, Cz, I, "square").numpy()
    r, c = linear_sum_assignment(g)
    lp = g[r, c].sum() / N
    assert float((g * I.numpy()).sum()) <= lp + 1e-9 * max(1.0, abs(lp))


def test_theorem_5_2_i_distr_reaches_the_pca_value():
    r"""[T] Theorem 5.2 (i) through ``probdr.DistR`` with :math:`n = N` prototypes, Gram
    affinities and the square loss: the fitted energy equals
    :math:`\frac1{N^2}\sum_{k>d}\lambda_k^2` of its (mean-1 scaled) Gram matrix, the coupling is a
    permutation divided by N and the prototype Gram matrix is PCA's
    :math:`\mathbf V_{[:,d]}\mathrm{diag}(\lambda_{1..d})\mathbf V_{[:,d]}^\top` up to that
    permutation (measured relative error of the energy about 1e-7)."""
    rng = np.random.default_rng(0)
    N, d = 12, 2
    X = rng.normal(size=(N, 5)) * np.array([3, 2, 1, 0.5, 0.2])
    est = probdr.DistR(n_prototypes=N, n_components=d, affinity_in="gram", affinity_out="gram",
                       loss="square", random_state=0, n_outer=10).fit(X)
    Xc = X - X.mean(0)
    G = Xc @ Xc.T
    C = G / np.abs(G).mean()
    lam, V = np.linalg.eigh(C)
    lam, V = lam[::-1], V[:, ::-1]
    best = (lam[d:] ** 2).sum() / N**2
    assert est.loss_history_[-1] == pytest.approx(best, rel=1e-5)
    T = est.assignment_ * N
    assert np.allclose(np.sort(T, 1)[:, -1], 1.0) and np.allclose(T.sum(0), 1.0)
    perm = T.argmax(1)  # sample i -> prototype perm[i]
    Z = est.prototypes_[perm]
    pca_gram = (V[:, :d] * lam[:d]) @ V[:, :d].T
    np.testing.assert_allclose(Z @ Z.T, pca_gram, rtol=0, atol=2e-3 * np.abs(pca_gram).max())


# --------------------------------------------------------------------------------------------
# Lemma 8.3 and Theorem 5.3
# --------------------------------------------------------------------------------------------
def _barycentre(C, T):
    q = T.sum(0)
    Dq = torch.diag(1.0 / q)
    return Dq @ T.T @ C @ T @ Dq


@pytest.mark.parametrize("kind", ["gram", "sqdist"])
def test_lemma_8_3_barycentre_minimises_the_energy(kind):
    r"""[T] Lemma 8.3 (eq. (8.39)/(8.62)): for :math:`L = L_2`, symmetric :math:`\mathbf C` and
    :math:`\mathbf T\in\mathcal U_n(\mathbf h)`, :math:`\bar{\mathbf C}(\mathbf T) =
    D(\mathbf T)\mathbf T^\top\mathbf C\mathbf T D(\mathbf T)` zeroes the gradient of
    :math:`\bar{\mathbf C}\mapsto E_{L_2}`, every perturbation increases the energy, and the
    minimum is :math:`\sum_{ik}C_{ik}^2h_ih_k - \|\mathrm{diag}(\mathbf q)^{-1/2}\mathbf T^\top
    \mathbf C\mathbf T\,\mathrm{diag}(\mathbf q)^{-1/2}\|_F^2`."""
    gen = torch.Generator().manual_seed(2)
    N, n = 10, 3
    X = torch.randn(N, 3, generator=gen, dtype=DT)
    C = X @ X.T if kind == "gram" else torch.cdist(X, X) ** 2
    h = torch.rand(N, generator=gen, dtype=DT) + 0.2
    h = h / h.sum()
    T = _random_coupling(N, n, h, gen)
    Cb = _barycentre(C, T).requires_grad_(True)
    E = srgw_objective(C, Cb, T, "square")
    g = torch.autograd.grad(E, Cb)[0]
    assert float(g.abs().max()) < 1e-12 * max(1.0, float(C.abs().max()) ** 2)
    q = T.sum(0)
    M = T.T @ C @ T / torch.sqrt(q[:, None] * q[None, :])
    closed = (C * C * h[:, None] * h[None, :]).sum() - (M * M).sum()
    torch.testing.assert_close(E.detach(), closed, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(E.detach(), _brute_energy(C, Cb.detach(), T, _square),
                               rtol=1e-10, atol=1e-12)
    for _ in range(10):
        P = torch.randn(n, n, generator=gen, dtype=DT)
        assert float(srgw_objective(C, Cb.detach() + 1e-2 * (P + P.T), T, "square")) > float(
            E.detach())


def _G(C, T):
    """min over Cbar of E_L2(C, Cbar, T) (Lemma 8.3), all columns of T non-zero."""
    return float(srgw_objective(C, _barycentre(C, T), T, "square"))


def test_theorem_5_3_membership_matrix_is_optimal_for_cnd_input():
    r"""[T] Theorem 5.3 and Prop. 8.6: with :math:`L = L_2` and a CND :math:`\mathbf C_X`
    (squared Euclidean distances), :math:`G(\mathbf T) = \min_{\bar{\mathbf C}}E_{L_2}` is concave
    on :math:`\mathcal U_n(\mathbf h_X)` (midpoint inequality on random pairs), so srGWB has a
    membership matrix among its minimisers: the best of the :math:`3^7` membership matrices
    (enumerated) is below every random soft coupling, and it satisfies the first-order condition
    :math:`\langle\nabla G,\mathbf T^*\rangle\le\min_{\mathbf S\in\mathcal U_n(\mathbf h)}
    \langle\nabla G,\mathbf S\rangle` with :math:`\nabla G` from ``srgw_gradient`` at
    :math:`\bar{\mathbf C}(\mathbf T^*)` (envelope theorem)."""
    gen = torch.Generator().manual_seed(3)
    X = _blobs(3, ((0.0, 0.0), (3.0, 0.0)), gen, scale=0.6)
    X = torch.cat([X, torch.tensor([[1.5, 2.5]], dtype=DT)])  # N = 7, an ambiguous point
    N, n = X.shape[0], 3
    C = torch.cdist(X, X) ** 2
    # CND: x^T C x <= 0 for x orthogonal to 1
    H = torch.eye(N, dtype=DT) - 1.0 / N
    assert float(torch.linalg.eigvalsh(H @ C @ H).max()) < 1e-10
    h = torch.full((N,), 1.0 / N, dtype=DT)
    for _ in range(30):
        T1, T2 = _random_coupling(N, n, h, gen), _random_coupling(N, n, h, gen)
        assert _G(C, 0.5 * (T1 + T2)) >= 0.5 * (_G(C, T1) + _G(C, T2)) - 1e-12
    best, Tbest = math.inf, None
    for lab in itertools.product(range(n), repeat=N):
        if len(set(lab)) < n:
            continue
        T = torch.zeros(N, n, dtype=DT)
        T[torch.arange(N), torch.tensor(lab)] = 1.0 / N
        v = _G(C, T)
        if v < best:
            best, Tbest = v, T
    soft = [_G(C, _random_coupling(N, n, h, gen)) for _ in range(300)]
    assert min(soft) >= best - 1e-12
    assert min(soft) > best + 1e-6  # soft couplings are strictly worse here
    grad = srgw_gradient(C, _barycentre(C, Tbest), Tbest, "square")
    lmo = float((h * grad.min(1).values).sum())
    assert float((grad * Tbest).sum()) <= lmo + 1e-10 * max(1.0, abs(lmo))


def test_distr_couplings_are_membership_matrices():
    r"""[T] §5.3.2 after Theorem 5.3: "the couplings obtained by DistR are always membership
    matrices" (conditional gradient T-step); on three blobs with 5 prototypes the fitted
    coupling has one non-zero per row, rows summing to :math:`1/N`, and every prototype holds
    samples of one blob only (homogeneity 1; with 5 prototypes some blobs are split)."""
    from sklearn.metrics import homogeneity_score

    gen = torch.Generator().manual_seed(4)
    X = _blobs(15, ((0, 0, 0), (6, 0, 0), (0, 6, 0)), gen, scale=0.5).numpy()
    y = np.repeat(np.arange(3), 15)
    for loss, ain, aout in (("kl", "sea", "student"), ("square", "gram", "gram")):
        est = probdr.DistR(n_prototypes=5, n_components=2, affinity_in=ain, affinity_out=aout,
                           loss=loss, perplexity=10.0, random_state=0, n_outer=10).fit(X)
        T = est.assignment_
        N = X.shape[0]
        np.testing.assert_allclose(T.sum(1), 1.0 / N, rtol=1e-8)
        assert int((T > 1e-12).sum(1).max()) == 1
        assert homogeneity_score(y, est.labels_) == pytest.approx(1.0)  # every prototype is pure


# --------------------------------------------------------------------------------------------
# App. 8.2.1: collapse of srGW under the bare cross-entropy
# --------------------------------------------------------------------------------------------
def test_bare_cross_entropy_collapses_srgw_but_proper_divergences_do_not():
    r"""[T] App. 8.2.1 (eqs. (8.34)-(8.37)), in its mirrored form for the bare cross-entropy
    :math:`L(a,b) = -a\log b` (convex and non-increasing in b, so the target's **maximum** on
    the diagonal plays the role of the minimum): with a 2-cluster input affinity and the target
    :math:`\bar{\mathbf C}` equal to the clusters' generalised-KL barycentre (diagonal maximal),
    the coupling sending all mass to one prototype attains the Jensen lower bound
    :math:`\sum_{ij}L(C_{ij},\max\bar C)h_ih_j` and beats every other coupling, the true clusters
    included. With the proper divergences of DistR (generalised KL, :math:`L_2`; ``srgw_objective``)
    the cluster membership is strictly better than the collapse, and ``DistR`` refuses any other
    loss."""
    gen = torch.Generator().manual_seed(5)
    X = _blobs(4, ((0.0, 0.0), (4.0, 0.0)), gen, scale=0.4)
    N, n = X.shape[0], 2
    C = torch.exp(-torch.cdist(X, X) ** 2 / 2.0)
    C = C / C.mean()
    h = torch.full((N,), 1.0 / N, dtype=DT)
    Ttrue = torch.zeros(N, n, dtype=DT)
    Ttrue[torch.arange(N), torch.arange(N) // 4] = 1.0 / N
    q = Ttrue.sum(0)
    Cbar = (Ttrue.T @ C @ Ttrue) / (q[:, None] * q[None, :])  # KL barycentre of the clusters
    assert float(Cbar.diagonal().min()) > float(Cbar[0, 1])  # the maximum is on the diagonal
    Tcol = torch.zeros(N, n, dtype=DT)
    Tcol[:, int(Cbar.diagonal().argmax())] = h
    ce_col = float(_brute_energy(C, Cbar, Tcol, _cross_entropy))
    jensen = float((_cross_entropy(C, Cbar.max()) * h[:, None] * h[None, :]).sum())
    assert ce_col == pytest.approx(jensen, rel=1e-12)
    ce_true = float(_brute_energy(C, Cbar, Ttrue, _cross_entropy))
    assert ce_col < ce_true
    for _ in range(50):
        T = _random_coupling(N, n, h, gen)
        assert float(_brute_energy(C, Cbar, T, _cross_entropy)) >= ce_col - 1e-12
    for loss in ("kl", "square"):
        Cb = Cbar if loss == "kl" else _barycentre(C, Ttrue)
        e_true = float(srgw_objective(C, Cb, Ttrue, loss))
        for k in range(n):
            Tk = torch.zeros(N, n, dtype=DT)
            Tk[:, k] = h
            assert e_true < float(srgw_objective(C, Cb, Tk, loss)) - 1e-3
    with pytest.raises(ValueError, match="loss"):
        probdr.DistR(n_prototypes=2, loss="cross_entropy").fit(X.numpy())
