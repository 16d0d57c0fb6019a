r"""Independent oracles for the Pyro models: the (E, E) coupling (Van Assel et al. 2022 [002],
§3.1 Remark 4), the hierarchical coupling's terms (8) + (9) ([002] §4.2, Corollary 1, App. A.4),
the Monte Carlo graph coupling ([002] §3.1: the cross-entropy is an expectation over
:math:`W_X`), and ProbDR (Ravuri & Lawrence 2025 [004]: eq. (3) CNE energy, eq. (4) Bernoulli
model, Appendix A law of squared distances).

Expected values come from the papers' formulas in plain torch, ``torch.distributions`` and
scipy, never from a second call of the code path under test.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats
import torch
from pyro import poutine
from scipy.sparse.csgraph import connected_components
from torch.distributions import Categorical, Multinomial, Wishart

from probdr.kernels import StudentKernel
from probdr.laws import DenseWeights, KernelWeights, get_prior
from probdr.laws.wishart import KNNLaplacian, probdr_epsilon
from probdr.models.coupling import graph_coupling_model
from probdr.models.hierarchical import global_coupling_objective, hierarchical_coupling_model
from probdr.models.probdr_wishart import bernoulli_adjacency_model, cne_energy, cne_model

DT = torch.float64


def _offdiag(n):
    return ~torch.eye(n, dtype=torch.bool)


def _sq(Z):
    return torch.cdist(Z, Z) ** 2


def _cauchy_logK(Z):
    L = -torch.log1p(_sq(Z))
    L = L.clone()
    L.fill_diagonal_(-math.inf)
    return L


def _trace(model, Z, **kw):
    tr = poutine.trace(poutine.condition(model, data={"Z": Z})).get_trace(**kw)
    tr.compute_log_prob()
    return tr


# --------------------------------------------------------------------------------------------
# (E, E) coupling, Remark 4
# --------------------------------------------------------------------------------------------
def test_ee_coupling_loss_is_closed_form():
    r"""[002] §3.1, Remark 4: with :math:`W_X\sim\mathcal M(n, P^E)`,
    :math:`\mathbb E W_X = nP^E` and the coupling loss (cross-entropy without the multinomial
    coefficient, which is free of Z) is :math:`-n\sum_{i\ne j}P^E_{ij}\log Q^E_{ij}` with
    :math:`Q^E = K_Z/K_{Z,++}` (Cauchy kernel); checked on implicit kernel weights and on dense
    weights."""
    gen = torch.Generator().manual_seed(0)
    n = 12
    logKX = torch.randn(n, n, generator=gen, dtype=DT)
    PE = torch.softmax(torch.where(_offdiag(n), logKX, -math.inf).flatten(), 0).view(n, n)
    P = n * PE
    for scale in (0.1, 1.0, 5.0):
        Z = scale * torch.randn(n, 2, generator=gen, dtype=DT)
        logQ = torch.log_softmax(_cauchy_logK(Z).flatten(), 0).view(n, n)
        closed = -n * (PE[_offdiag(n)] * logQ[_offdiag(n)]).sum()
        for w in (KernelWeights(Z, StudentKernel(1.0)), DenseWeights(-torch.log1p(_sq(Z)))):
            H = get_prior("E").posterior(w).cross_entropy(P)
            torch.testing.assert_close(H, closed, rtol=1e-10, atol=1e-10)


def test_ee_coupling_exact_cross_entropy_by_enumeration():
    r"""[002] §3.1 definition of :math:`\mathcal H_{E,E} = -\mathbb E_{W_X}[\log
    \mathbb P_E(W_Z = W_X; K_Z)]`, computed exactly on 3 nodes by enumerating the 56 graphs with
    ``torch.distributions.Multinomial`` for both laws, equals the closed form
    :math:`-n\sum P^E\log Q^E - \log n! + \mathbb E\sum\log W_{ij}!` (Remark 4) and the law's
    cross-entropy plus that Z-free constant; the Pyro model's log joint at
    :math:`W_X = \mathbb E W_X` is :math:`-\mathcal H` up to the same kind of constant."""
    gen = torch.Generator().manual_seed(1)
    n = 3
    logKX = torch.randn(n, n, generator=gen, dtype=DT)
    logits_x = torch.where(_offdiag(n), logKX, -math.inf).flatten()
    PE = torch.softmax(logits_x, 0).view(n, n)
    cells = [(i, j) for i in range(n) for j in range(n) if i != j]
    graphs = []
    for combo in itertools.combinations_with_replacement(range(len(cells)), n):
        W = torch.zeros(n * n, dtype=DT)
        for k in combo:
            W[cells[k][0] * n + cells[k][1]] += 1
        graphs.append(W)
    mx = Multinomial(n, logits=logits_x)
    px = torch.stack([mx.log_prob(W).exp() for W in graphs])
    assert float(px.sum()) == pytest.approx(1.0, abs=1e-12)
    Elogfact = sum(p * torch.lgamma(W + 1).sum() for p, W in zip(px, graphs, strict=True))
    for scale in (0.3, 2.0):
        Z = scale * torch.randn(n, 2, generator=gen, dtype=DT)
        mz = Multinomial(n, logits=_cauchy_logK(Z).flatten())
        H = -sum(p * mz.log_prob(W) for p, W in zip(px, graphs, strict=True))
        logQ = torch.log_softmax(_cauchy_logK(Z).flatten(), 0).view(n, n)
        closed = -n * (PE[_offdiag(n)] * logQ[_offdiag(n)]).sum()
        const = -math.lgamma(n + 1) + Elogfact
        torch.testing.assert_close(H, closed + const, rtol=1e-10, atol=1e-10)
        law = get_prior("E").posterior(KernelWeights(Z, StudentKernel(1.0)))
        torch.testing.assert_close(law.cross_entropy(n * PE) + const, H, rtol=1e-10, atol=1e-10)
        tr = _trace(graph_coupling_model, Z, W_X=n * PE, prior_z=get_prior("E"),
                    kernel=StudentKernel(1.0), n_components=2)
        # log joint = attraction - normaliser + log n! - sum lgamma(P + 1) at the expected graph
        c_model = math.lgamma(n + 1) - torch.lgamma(n * PE + 1).sum()
        torch.testing.assert_close(tr.log_prob_sum(), -closed + c_model, rtol=1e-10,
                                   atol=1e-10)


def test_ee_graph_coupling_estimator_loss_and_log_joint():
    r"""[002] §3.1, Remark 4, through ``probdr.GraphCoupling(prior_x="E", prior_z="E")``: the
    fitted input graph's mean P has :math:`P_{++} = n`, ``loss(Z)`` is
    :math:`-\sum_{i\ne j}P_{ij}\log Q^E_{ij}` (plain torch, Cauchy kernel) and ``log_joint(Z)``
    is minus the loss plus a constant that does not depend on Z."""
    import probdr

    rng = np.random.default_rng(0)
    n = 50
    X = rng.normal(size=(n, 6))
    est = probdr.GraphCoupling(prior_x="E", prior_z="E", perplexity=8.0, n_iter=5,
                               early_exaggeration_iter=0, random_state=0).fit(X)
    P = est.input_graph_.mean.to_dense().to(DT)
    assert float(P.sum()) == pytest.approx(n, rel=1e-12)
    off = _offdiag(n)
    consts = []
    for scale in (0.2, 1.0, 3.0):
        Z = scale * torch.as_tensor(rng.normal(size=(n, 2)))
        logQ = torch.log_softmax(_cauchy_logK(Z).flatten(), 0).view(n, n)
        closed = float(-(P[off] * logQ[off]).sum())
        assert est.loss(Z.numpy()) == pytest.approx(closed, rel=1e-10)
        consts.append(est.log_joint(Z.numpy()) + closed)
    assert max(consts) - min(consts) < 1e-8 * abs(consts[0])


# --------------------------------------------------------------------------------------------
# hierarchical coupling: terms (8) + (9)
# --------------------------------------------------------------------------------------------
class _FixedGraph:
    """Stands in for the input law: ``sample()`` returns one fixed graph."""

    def __init__(self, W):
        self.W = W

    def sample(self, sample_shape=torch.Size()):
        return self.W


def _clustered_draw(gen, n_per=6, centres=((0, 0, 0), (30, 0, 0), (0, 30, 0))):
    X = torch.cat([torch.tensor(c, dtype=DT) + torch.randn(n_per, 3, generator=gen, dtype=DT)
                   for c in centres])
    n = X.shape[0]
    logKX = torch.where(_offdiag(n), -_sq(X), -math.inf)
    j = Categorical(logits=logKX).sample()
    W = torch.zeros(n, n, dtype=DT)
    W[torch.arange(n), j] = 1.0
    return X - X.mean(0), W, j


def _cc_basis(W):
    n = W.shape[0]
    R, lab = connected_components((W + W.T).numpy(), directed=False)
    U = torch.zeros(n, R, dtype=DT)
    U[torch.arange(n), torch.as_tensor(lab)] = 1.0
    return U / U.sum(0).sqrt(), R


def test_hierarchical_terms_8_and_9_match_closed_forms():
    r"""[002] §4.2 (hierarchical model) and App. A.4: for a fixed draw :math:`W_X`, the model's
    term (8) is :math:`\log\mathbb P_D(W_Z = W_X\mid Z)` (one ``Categorical`` per row on the
    Cauchy kernel) and term (9) is :math:`\log\mathcal W(\Theta; \nu_Z+q, (I_R+\varepsilon\bar Z
    \bar Z^\top)^{-1})` at :math:`\mathbb E[\Theta_X\mid X] = (\nu_X+p)(I_R+\varepsilon\bar X\bar
    X^\top)^{-1}` (``torch.distributions.Wishart``), with :math:`\bar X = U_{[R]}^\top X` from
    scipy's connected components, :math:`\nu_X = R`, :math:`\nu_Z = \nu_X + p - q`. Its Z-dependent
    part is minus eq. (22) with the :math:`\varepsilon` factor on the trace."""
    gen = torch.Generator().manual_seed(2)
    X, W, j = _clustered_draw(gen)
    n, p = X.shape
    q, eps = 2, 0.7
    U, R = _cc_basis(W)
    assert R >= 3
    Xbar = U.T @ X
    nu_x = float(R)
    nu_z = nu_x + p - q
    I = torch.eye(R, dtype=DT)
    M = (nu_x + p) * torch.linalg.inv(I + eps * Xbar @ Xbar.T)
    values = []
    for _ in range(3):
        Z = 3.0 * torch.randn(n, q, generator=gen, dtype=DT)
        tr = _trace(hierarchical_coupling_model, Z, X=X, input_law=_FixedGraph(W),
                    latent_prior=get_prior("D"), kernel=StudentKernel(1.0), n_components=q,
                    eps=eps)
        t8 = Categorical(logits=_cauchy_logK(Z)).log_prob(j).sum()
        torch.testing.assert_close(tr.nodes["W_Z"]["log_prob_sum"], t8, rtol=1e-10, atol=1e-10)
        Zbar = U.T @ Z
        t9 = Wishart(df=torch.tensor(nu_z + q, dtype=DT),
                     precision_matrix=I + eps * Zbar @ Zbar.T).log_prob(M)
        torch.testing.assert_close(tr.nodes["Theta_Z"]["log_prob_sum"], t9, rtol=1e-9,
                                   atol=1e-8)
        torch.testing.assert_close(tr.log_prob_sum(), t8 + t9, rtol=1e-9, atol=1e-8)
        obj22 = (0.5 * (nu_x + p) * eps * torch.trace(Zbar.T @ torch.linalg.solve(
            I + eps * Xbar @ Xbar.T, Zbar)) - 0.5 * (nu_z + q) * torch.logdet(
            I + eps * Zbar @ Zbar.T))
        torch.testing.assert_close(global_coupling_objective(Zbar, Xbar, eps, nu_x, nu_z),
                                   obj22, rtol=1e-10, atol=1e-10)
        values.append((float(t9), float(obj22)))
    # (9) + objective (22) is the same constant for every Z
    s = [a + b for a, b in values]
    assert max(s) - min(s) < 1e-8 * max(1.0, abs(s[0]))
    assert max(a for a, _ in values) - min(a for a, _ in values) > 1e-3  # (9) does depend on Z


# --------------------------------------------------------------------------------------------
# Monte Carlo coupling
# --------------------------------------------------------------------------------------------
def _input_law_and_mean(kind, logKX):
    n = logKX.shape[0]
    masked = torch.where(_offdiag(n), logKX, -math.inf)
    if kind == "D":
        return get_prior("D").posterior(DenseWeights(logKX)), torch.softmax(masked, 1)
    if kind == "E":
        P = n * torch.softmax(masked.flatten(), 0).view(n, n)
        return get_prior("E").posterior(DenseWeights(logKX)), P
    P = torch.sigmoid(masked)
    return get_prior("B").posterior(DenseWeights(logKX)).symmetrized(), P + P.T - P * P.T


def _closed_form_H(Z, P, prior_z):
    logK = _cauchy_logK(Z)
    off = _offdiag(Z.shape[0])
    attraction = (P[off] * logK[off]).sum()
    if prior_z == "D":
        rep = (P.sum(1) * torch.logsumexp(logK, 1)).sum()
    elif prior_z == "E":
        rep = P.sum() * torch.logsumexp(logK.flatten(), 0)
    else:
        rep = torch.nn.functional.softplus(logK[off]).sum()
    return -attraction + rep


@pytest.mark.parametrize("pair", [("D", "D"), ("D", "E"), ("D", "B"), ("B~", "B"), ("E", "E")])
def test_monte_carlo_coupling_gradient_is_unbiased(pair):
    r"""[002] §3.1: :math:`\mathcal H_{\mathcal P_X,\mathcal P_Z} = -\mathbb E_{W_X}[\log
    \mathbb P_{\mathcal P_Z}(W_Z = W_X; K_Z)]`, so the gradient of the Pyro model's log joint at
    a posterior draw of :math:`W_X` is an unbiased estimate of :math:`-\nabla_Z\mathcal H`. Over
    300 draws (n = 30, q = 2) the mean gradient matches the exact gradient of the closed form
    (plain torch, eq. (5) with :math:`P = \mathbb E W_X`) within 3 Monte Carlo standard errors in
    every coordinate (measured max |z| 1.87-2.45 over the five pairs), while a 10% weaker
    expected graph is rejected (max |z| 4.8-8.0)."""
    prior_x, prior_z = pair
    gen = torch.Generator().manual_seed(3)
    n, q, N = 30, 2, 300
    X = torch.randn(n, 4, generator=gen, dtype=DT)
    logKX = -_sq(X)
    law_x, P = _input_law_and_mean(prior_x, logKX)
    Z0 = torch.randn(n, q, generator=gen, dtype=DT)
    Zr = Z0.clone().requires_grad_(True)
    exact = -torch.autograd.grad(_closed_form_H(Zr, P, prior_z), Zr)[0]
    Zr = Z0.clone().requires_grad_(True)
    wrong = -torch.autograd.grad(_closed_form_H(Zr, 0.9 * P, prior_z), Zr)[0]
    prior = get_prior(prior_z)
    kern = StudentKernel(1.0)
    torch.manual_seed(4)
    draws = law_x.sample((N,)).to(DT)
    grads = []
    for W in draws:
        Z = Z0.clone().requires_grad_(True)
        tr = poutine.trace(poutine.condition(graph_coupling_model, data={"Z": Z})).get_trace(
            W_X=W, prior_z=prior, kernel=kern, n_components=q)
        grads.append(torch.autograd.grad(tr.log_prob_sum(), Z)[0])
    G = torch.stack(grads)
    mean, se = G.mean(0), G.std(0) / math.sqrt(N)
    assert bool((se > 0).all())
    zscores = (mean - exact) / se
    assert float(zscores.abs().max()) < 3.0, float(zscores.abs().max())
    # the check has power: the exact gradient is far from zero in MC units, and the gradient of
    # a coupling with a 10% weaker expected graph (0.9 P) is rejected
    assert float((exact / se).abs().max()) > 10.0
    assert float(((mean - wrong) / se).abs().max()) > 3.0


# --------------------------------------------------------------------------------------------
# ProbDR [004]
# --------------------------------------------------------------------------------------------
def _knn_adjacency(X, k):
    from sklearn.neighbors import kneighbors_graph

    A = kneighbors_graph(X.numpy(), k, include_self=False).toarray()
    A = np.maximum(A, A.T)
    return torch.as_tensor(A, dtype=DT)


def _laplacian_from_adjacency(A):
    r, c = torch.nonzero(A, as_tuple=True)
    return KNNLaplacian(r, c, A.shape[0])


def test_knn_laplacian_is_degree_minus_adjacency():
    r"""[004] §2 (Laplacian eigenmaps' graph): :math:`\hat L = D - A` of the symmetrised binary
    15-NN adjacency; ``knn_laplacian`` against scikit-learn's ``kneighbors_graph``."""
    from probdr.input.graph import knn_laplacian

    X = torch.as_tensor(np.random.default_rng(0).normal(size=(60, 4)))
    A = _knn_adjacency(X, 15)
    L = knn_laplacian(X, 15).dense()
    torch.testing.assert_close(L, torch.diag(A.sum(1)) - A, rtol=0, atol=0)


def test_cne_energy_eq3_matches_plain_formula():
    r"""[004] eq. (3), the CNE energy with the diagonal excluded:
    :math:`\sum_{i\ne j}A_{ij}\log\frac{1}{1+d_{ij}^2} + \frac{4n_\text{neg}n_\text{neigh}}{3n}
    \sum_{i\ne j}(1-A_{ij})\log\big(1-\frac1{1+d_{ij}^2}\big)`, with
    :math:`4\cdot5\cdot15/(3n) = 100/n`; the ``cne`` factor of the Pyro model carries the same
    value."""
    n = 80
    X = torch.as_tensor(np.random.default_rng(1).normal(size=(n, 5)))
    A = _knn_adjacency(X, 15)
    L = _laplacian_from_adjacency(A)
    eps = probdr_epsilon(n)
    assert eps == pytest.approx(100.0 / n, rel=1e-15)
    gen = torch.Generator().manual_seed(5)
    off = _offdiag(n)
    for scale in (0.05, 1.0, 4.0):
        Z = scale * torch.randn(n, 2, generator=gen, dtype=DT)
        pu = 1.0 / (1.0 + _sq(Z))
        oracle = ((A * torch.log(pu))[off].sum()
                  + eps * ((1 - A) * torch.log1p(-pu))[off].sum())
        torch.testing.assert_close(cne_energy(Z, L, eps).sum(), oracle, rtol=1e-9, atol=1e-9)
        tr = _trace(cne_model, Z, L=L, n_components=2, eps_tilde=eps)
        torch.testing.assert_close(tr.log_prob_sum(), oracle, rtol=1e-9, atol=1e-9)


def test_cne_model_row_subsampling_is_unbiased():
    r"""[004] eq. (3) as a Pyro factor with rows subsampled by ``pyro.plate`` (the factor is
    scaled by :math:`n/m`): over 2000 random subsets of m = 10 rows the mean of the model's log
    density equals the full CNE energy (plain torch) within 4 standard errors."""
    n, m = 60, 10
    X = torch.as_tensor(np.random.default_rng(3).normal(size=(n, 4)))
    A = _knn_adjacency(X, 10)
    L = _laplacian_from_adjacency(A)
    eps = 0.5
    Z = torch.randn(n, 2, generator=torch.Generator().manual_seed(8), dtype=DT)
    pu = 1.0 / (1.0 + _sq(Z))
    off = _offdiag(n)
    full = ((A * torch.log(pu))[off].sum() + eps * ((1 - A) * torch.log1p(-pu))[off].sum())
    torch.manual_seed(0)
    vals = torch.stack([_trace(cne_model, Z, L=L, n_components=2, eps_tilde=eps,
                               subsample_size=m).log_prob_sum() for _ in range(2000)])
    se = vals.std() / math.sqrt(vals.numel())
    assert float(vals.std()) > 0
    assert abs(float(vals.mean() - full)) < 4 * float(se)


def test_cne_lower_bounds_bernoulli_likelihood():
    r"""[004] §3 (from eq. (3) to eq. (4)): :math:`\mathcal E(Z)\le\sum_{i\ne j}A_{ij}\log(\tilde
    \epsilon P^u_{ij}) + \sum_{i\ne j}(1-A_{ij})\log(1-\tilde\epsilon P^u_{ij}) + c` with
    :math:`c = -\sum_{i\ne j}A_{ij}\log\tilde\epsilon` (Bernoulli's inequality
    :math:`(1-p)^{\tilde\epsilon}\le 1-\tilde\epsilon p`), checked on random Z at several scales
    (n = 150, :math:`\tilde\epsilon = 100/n`). The Bernoulli log-likelihood of eq. (4) is the Pyro
    model's, and ``torch.distributions.Bernoulli``'s."""
    n = 150
    X = torch.as_tensor(np.random.default_rng(2).normal(size=(n, 6)))
    A = _knn_adjacency(X, 15)
    L = _laplacian_from_adjacency(A)
    eps = probdr_epsilon(n)
    assert 0 < eps < 1
    off = _offdiag(n)
    c = -float(A[off].sum()) * math.log(eps)
    gen = torch.Generator().manual_seed(6)
    gaps = []
    for scale in (0.01, 0.3, 1.0, 3.0, 30.0):
        Z = scale * torch.randn(n, 2, generator=gen, dtype=DT)
        pu = 1.0 / (1.0 + _sq(Z))
        bern = torch.distributions.Bernoulli(probs=(eps * pu)[off]).log_prob(A[off]).sum()
        tr = _trace(bernoulli_adjacency_model, Z, L=L, n_components=2, eps_tilde=eps)
        torch.testing.assert_close(tr.log_prob_sum(), bern, rtol=1e-9, atol=1e-8)
        cne = float(cne_energy(Z, L, eps).sum())
        gaps.append(float(bern) + c - cne)
    assert min(gaps) >= -1e-8, gaps
    assert max(gaps) > 1.0  # the bound is not an identity


def test_appendix_a_gamma_law_and_covariance_of_squared_distances():
    r"""[004] Appendix A, Theorem A.1: for :math:`Y\sim\mathcal{MN}(0, K, I_d)`,
    :math:`d_{ij}^2\sim\Gamma(d/2, 2\tilde k_{ij})` with :math:`\tilde k_{ij} = k_{ii}+k_{jj}-2k_{ij}`
    (Kolmogorov-Smirnov against ``scipy.stats.gamma``; mean :math:`d\tilde k` and variance
    :math:`2d\tilde k^2`), and :math:`\mathrm{Cov}(d^2_{ij}, d^2_{mn}) = 2d(k_{im}+k_{jn}-k_{in}-
    k_{jm})^2` for disjoint and for overlapping pairs, by Monte Carlo (100,000 draws, within 4
    standard errors)."""
    from probdr._compute.allpairs import pairwise_sq_distances

    gen = torch.Generator().manual_seed(7)
    n, d, N = 5, 6, 100000
    B = torch.randn(n, n, generator=gen, dtype=DT)
    K = B @ B.T / n + 0.3 * torch.eye(n, dtype=DT)
    C = torch.linalg.cholesky(K)
    draws = torch.Generator().manual_seed(100)
    Y = C @ torch.randn(N, n, d, generator=draws, dtype=DT)  # each column ~ N(0, K)
    D2 = torch.stack([pairwise_sq_distances(y) for y in Y[:500]])
    d2_ref = ((Y[:500, :, None, :] - Y[:500, None, :, :]) ** 2).sum(-1)
    torch.testing.assert_close(D2, d2_ref, rtol=1e-8, atol=1e-10)

    def d2(i, j):
        return ((Y[:, i] - Y[:, j]) ** 2).sum(-1)

    def kt(i, j):
        return float(K[i, i] + K[j, j] - 2 * K[i, j])

    for i, j in ((0, 1), (2, 4)):
        x = d2(i, j).numpy()
        law = scipy.stats.gamma(a=d / 2, scale=2 * kt(i, j))
        assert scipy.stats.kstest(x, law.cdf).pvalue > 1e-3
        assert abs(x.mean() - d * kt(i, j)) < 4 * x.std() / math.sqrt(N)
        var_se = np.std((x - x.mean()) ** 2) / math.sqrt(N)
        assert abs(x.var() - 2 * d * kt(i, j) ** 2) < 4 * var_se
        # the wrong scale (theta = k~ instead of 2 k~) is rejected
        assert scipy.stats.kstest(x, scipy.stats.gamma(a=d / 2, scale=kt(i, j)).cdf).pvalue < 1e-6
    for (i, j), (m, l) in (((0, 1), (2, 3)), ((0, 1), (0, 2)), ((1, 3), (3, 4))):
        x, y = d2(i, j), d2(m, l)
        prod = (x - x.mean()) * (y - y.mean())
        cov, se = float(prod.mean()), float(prod.std()) / math.sqrt(N)
        expected = 2 * d * float(K[i, m] + K[j, l] - K[i, l] - K[j, m]) ** 2
        assert abs(cov - expected) < 4 * se, (cov, expected, se)
        if expected > 20 * se:  # where the test has power, half the constant (d, not 2d) fails
            assert abs(cov - expected / 2) > 4 * se
