r"""Independent oracles for the graph laws B, D, E and B~, Proposition 1 with an edge prior, the
graph Laplacian and the attraction / repulsion terms.

Every expected value here is written from Van Assel et al. (2022) ([002]: §2.1 Definition 1, §3
Definition 2, Proposition 1 and Appendix A.2, §3.1-3.2 eq. (5)) with ``torch.distributions``,
scipy or plain dense torch; none calls the code path under test twice.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components
from scipy.sparse.csgraph import laplacian as scipy_laplacian
from torch.distributions import Bernoulli, Categorical, Multinomial, OneHotCategorical

from probdr.kernels import GaussianKernel, StudentKernel
from probdr.laws import (
    DenseWeights,
    KernelWeights,
    LabelPrior,
    SparseWeights,
    get_prior,
    laplacian,
)

DT = torch.float64


# --------------------------------------------------------------------------------------------
# helpers (plain torch)
# --------------------------------------------------------------------------------------------
def _offdiag(n):
    return ~torch.eye(n, dtype=torch.bool)


def _masked_logits(logK):
    L = logK.clone()
    L.fill_diagonal_(-math.inf)
    return L


def _random_sparse(n, density, gen):
    """Edge list (rows, cols, log-values) of a random directed graph without self loops in which
    every row has at least two edges."""
    M = torch.rand(n, n, generator=gen) < density
    M.fill_diagonal_(False)
    for i in range(n):  # at least two out-edges per row (D law needs one)
        M[i, (i + 1) % n] = True
        M[i, (i + 2) % n] = True
    r, c = torch.nonzero(M, as_tuple=True)
    v = torch.randn(r.numel(), generator=gen, dtype=DT)
    return r, c, v


def _to_sparse(W):
    return W.to_sparse().coalesce()


def _pairwise_sq(Z):
    return torch.cdist(Z, Z) ** 2


# --------------------------------------------------------------------------------------------
# log_prob of the laws against torch.distributions
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("as_sparse_value", [False, True])
def test_binary_log_prob_dense_matches_torch_bernoulli(as_sparse_value):
    r"""B law, dense weights ([002] §3, Definition 2 / App. A.2): :math:`W_{ij}\sim
    \mathcal B(K_{ij}/(1+K_{ij}))` independently for :math:`i\ne j`, so
    :math:`\log p(W) = \sum_{i\ne j}\log\mathrm{Bernoulli}(\mathrm{logits}=\log K_{ij})(W_{ij})`."""
    gen = torch.Generator().manual_seed(1)
    n = 7
    logK = 2.0 * torch.randn(n, n, generator=gen, dtype=DT)
    law = get_prior("B").posterior(DenseWeights(logK))
    for _ in range(4):
        W = (torch.rand(n, n, generator=gen) < 0.4).long()
        W.fill_diagonal_(0)
        oracle = Bernoulli(logits=logK[_offdiag(n)]).log_prob(W[_offdiag(n)].to(DT)).sum()
        value = _to_sparse(W) if as_sparse_value else W
        torch.testing.assert_close(law.log_prob(value), oracle, rtol=1e-12, atol=1e-10)


def test_binary_log_prob_sparse_matches_torch_bernoulli():
    r"""B law, sparse weights ([002] App. A.2 with :math:`\kappa_{ij}=0` off the edge list):
    absent pairs are never edges and contribute :math:`\log(1-0) = 0`; listed pairs are
    Bernoulli with logits :math:`\log\kappa_{ij}`."""
    gen = torch.Generator().manual_seed(2)
    n = 9
    r, c, v = _random_sparse(n, 0.3, gen)
    law = get_prior("B").posterior(SparseWeights(r, c, v, n))
    for _ in range(4):
        on = (torch.rand(r.numel(), generator=gen) < 0.5)
        W = torch.zeros(n, n, dtype=torch.long)
        W[r[on], c[on]] = 1
        oracle = Bernoulli(logits=v).log_prob(on.to(DT)).sum()
        torch.testing.assert_close(law.log_prob(_to_sparse(W)), oracle, rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(law.log_prob(W), oracle, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("sparse", [False, True])
def test_unit_degree_log_prob_matches_torch_categorical(sparse):
    r"""D law ([002] App. A.2): rows independent, :math:`W_i\sim\mathcal M(1,\kappa_i/\kappa_{i+})`,
    i.e. one ``Categorical`` per row over :math:`j\ne i` (and ``OneHotCategorical`` on the rows)."""
    gen = torch.Generator().manual_seed(3)
    n = 8
    if sparse:
        r, c, v = _random_sparse(n, 0.35, gen)
        weights = SparseWeights(r, c, v, n)
        logits = torch.full((n, n), -math.inf, dtype=DT)
        logits[r, c] = v
    else:
        logK = 1.5 * torch.randn(n, n, generator=gen, dtype=DT)
        weights = DenseWeights(logK)
        logits = _masked_logits(logK)
    law = get_prior("D").posterior(weights)
    cat = Categorical(logits=logits)
    for _ in range(4):
        j = cat.sample()
        W = torch.zeros(n, n, dtype=torch.long)
        W[torch.arange(n), j] = 1
        oracle = cat.log_prob(j).sum()
        torch.testing.assert_close(law.log_prob(W), oracle, rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(law.log_prob(_to_sparse(W)), oracle, rtol=1e-12, atol=1e-10)
        onehot = OneHotCategorical(logits=logits).log_prob(W.to(DT)).sum()
        torch.testing.assert_close(onehot, oracle, rtol=1e-12, atol=1e-10)


@pytest.mark.parametrize("sparse", [False, True])
def test_nedge_log_prob_matches_torch_multinomial(sparse):
    r"""E law ([002] App. A.2, with the multinomial coefficient :math:`n!/\prod_{ij}W_{ij}!`, the
    printed :math:`\prod(W_{ij})^{-1}` being a typo): :math:`W\sim\mathcal M(n,\kappa/\kappa_{++})`
    over the off-diagonal cells, i.e. ``torch.distributions.Multinomial(total_count=n)``; the
    coefficient is checked separately against :math:`\log n! - \sum\log W_{ij}!`."""
    gen = torch.Generator().manual_seed(4)
    n = 6
    if sparse:
        r, c, v = _random_sparse(n, 0.4, gen)
        weights = SparseWeights(r, c, v, n)
        logits = torch.full((n, n), -math.inf, dtype=DT)
        logits[r, c] = v
    else:
        logK = torch.randn(n, n, generator=gen, dtype=DT)
        weights = DenseWeights(logK)
        logits = _masked_logits(logK)
    law = get_prior("E").posterior(weights)
    mult = Multinomial(total_count=n, logits=logits.flatten())
    draws = [mult.sample() for _ in range(4)]
    # a graph with a multi-edge of multiplicity n on the heaviest cell
    top = torch.zeros(n * n, dtype=DT)
    top[int(torch.argmax(logits.flatten()))] = n
    draws.append(top)
    for w in draws:
        W = w.view(n, n).long()
        oracle = mult.log_prob(w)
        torch.testing.assert_close(law.log_prob(W), oracle, rtol=1e-12, atol=1e-10)
        torch.testing.assert_close(law.log_prob(_to_sparse(W)), oracle, rtol=1e-12, atol=1e-10)
        coef = math.lgamma(n + 1) - sum(math.lgamma(float(x) + 1) for x in w.tolist())
        assert float(law.log_combinatorial(W)) == pytest.approx(coef, abs=1e-12)


def _symmetric_binary_graphs(n):
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    for bits in itertools.product([0, 1], repeat=len(pairs)):
        W = torch.zeros(n, n, dtype=torch.long)
        for b, (i, j) in zip(bits, pairs, strict=True):
            W[i, j] = W[j, i] = b
        yield W


def test_symmetrized_binary_mean_matches_fuzzy_union():
    r"""B~ law ([002] §3.1, UMAP): :math:`\tilde W = \mathbb 1[W+W^\top\ge1]` with W ~ B has
    :math:`\mathbb E\tilde W_{ij} = \tilde P^B_{ij} = P_{ij}+P_{ji}-P_{ij}P_{ji}`, and its draws are
    symmetric 0/1 graphs (Monte Carlo mean within 4 standard errors)."""
    gen = torch.Generator().manual_seed(5)
    n = 6
    logK = torch.randn(n, n, generator=gen, dtype=DT)
    P = torch.sigmoid(logK) * _offdiag(n)
    Pt = P + P.T - P * P.T
    law = get_prior("B").posterior(DenseWeights(logK)).symmetrized()
    torch.testing.assert_close(law.mean * _offdiag(n), Pt, rtol=1e-10, atol=1e-12)
    torch.manual_seed(0)
    S = law.sample((4000,)).to(DT)
    assert torch.equal(S, S.transpose(-1, -2))
    m, se = S.mean(0), S.std(0) / math.sqrt(S.shape[0])
    off = _offdiag(n)
    assert bool(((m - Pt).abs()[off] <= 4 * se[off] + 1e-12).all())


def test_symmetrized_binary_log_prob_is_a_normalised_pmf():
    r"""B~ law ([002] §3.1): :math:`\tilde W_{ij}\sim\mathcal B(\tilde P^B_{ij})` independently for
    :math:`i<j`, so :math:`\log p(\tilde W) = \sum_{i<j}\log\mathcal B(\tilde P^B_{ij})(\tilde
    W_{ij})` (``torch.distributions.Bernoulli``) and the pmf sums to 1 over symmetric graphs."""
    gen = torch.Generator().manual_seed(6)
    n = 3
    logK = torch.randn(n, n, generator=gen, dtype=DT)
    P = torch.sigmoid(logK)
    Pt = P + P.T - P * P.T
    law = get_prior("B").posterior(DenseWeights(logK)).symmetrized()
    iu = torch.triu_indices(n, n, 1)
    total = 0.0
    for W in _symmetric_binary_graphs(n):
        oracle = Bernoulli(probs=Pt[iu[0], iu[1]]).log_prob(W[iu[0], iu[1]].to(DT)).sum()
        lp = law.log_prob(W)
        total += float(torch.exp(lp))
        torch.testing.assert_close(lp, oracle, rtol=1e-10, atol=1e-10)
    assert total == pytest.approx(1.0, abs=1e-10)


# --------------------------------------------------------------------------------------------
# Proposition 1 with an edge prior
# --------------------------------------------------------------------------------------------
def _all_graphs(kind, n):
    """Every graph of the support of Omega_P on n nodes (no self loops)."""
    cells = [(i, j) for i in range(n) for j in range(n) if i != j]
    if kind == "B":
        for bits in itertools.product([0, 1], repeat=len(cells)):
            W = torch.zeros(n, n, dtype=torch.long)
            for b, (i, j) in zip(bits, cells, strict=True):
                W[i, j] = b
            yield W
    elif kind == "D":
        others = [[j for j in range(n) if j != i] for i in range(n)]
        for choice in itertools.product(*others):
            W = torch.zeros(n, n, dtype=torch.long)
            W[torch.arange(n), torch.tensor(choice)] = 1
            yield W
    else:  # E: multisets of n cells
        for combo in itertools.combinations_with_replacement(range(len(cells)), n):
            W = torch.zeros(n, n, dtype=torch.long)
            for k in combo:
                W[cells[k]] += 1
            yield W


@pytest.mark.parametrize("kind", ["B", "D", "E"])
def test_proposition1_posterior_by_enumeration_with_edge_prior(kind):
    r"""Proposition 1 of [002] (eqs. (13)-(14), App. A.2): with edge prior :math:`\pi`, the limit
    posterior is :math:`\propto\Omega_{\mathcal P}(W)\prod_{i\ne j}(\pi_{ij}K_{ij})^{W_{ij}}`
    (:math:`\Omega_E` carrying :math:`1/\prod W_{ij}!`). On 3 nodes every graph of the support is
    enumerated and normalised by brute force; ``log_prob`` must equal it and the mean must equal
    :math:`\sum_W W\,p(W)` (:math:`\pi K/(1+\pi K)` for B)."""
    gen = torch.Generator().manual_seed(7)
    n = 3
    logK = torch.randn(n, n, generator=gen, dtype=DT)
    pi = torch.exp(torch.randn(n, n, generator=gen, dtype=DT))
    pi[0, 2] = 0.0  # a forbidden edge
    law = get_prior(kind, edge_prior=pi).posterior(DenseWeights(logK))
    kappa = pi * torch.exp(logK) * _offdiag(n)
    graphs = list(_all_graphs(kind, n))
    unnorm = []
    for W in graphs:
        u = torch.prod(kappa ** W.to(DT))
        if kind == "E":
            u = u / math.prod(math.factorial(int(x)) for x in W.flatten())
        unnorm.append(u)
    unnorm = torch.stack(unnorm)
    post = unnorm / unnorm.sum()
    mean = sum(p * W.to(DT) for p, W in zip(post, graphs, strict=True))
    for p, W in zip(post, graphs, strict=True):
        lp = law.log_prob(W)
        if p == 0:
            assert float(lp) == -math.inf
        else:
            torch.testing.assert_close(lp, torch.log(p), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(law.mean * _offdiag(n), mean, rtol=1e-10, atol=1e-12)
    if kind == "B":
        torch.testing.assert_close(mean, kappa / (1 + kappa), rtol=1e-10, atol=1e-12)


def test_proposition1_b_prior_mean_with_label_prior_dense_and_sparse():
    r"""Proposition 1 of [002] under the B prior: posterior weights :math:`\pi\odot K`, so
    :math:`\mathbb E W_{ij} = \pi_{ij}K_{ij}/(1+\pi_{ij}K_{ij})`, with :math:`\pi` from partial
    labels (:math:`e^{s}` same label, :math:`e^{-s}` different, 1 if either is unknown), written
    here from the labels; dense weights, sparse weights, and a dense and a sparse :math:`\pi`."""
    gen = torch.Generator().manual_seed(8)
    n, s = 10, 1.3
    y = np.array([0, 0, 1, 1, 2, -1, 0, 2, -1, 1])
    same = torch.as_tensor(y[:, None] == y[None, :])
    known = torch.as_tensor((y[:, None] >= 0) & (y[None, :] >= 0))
    one = torch.ones(n, n, dtype=DT)
    pi = torch.where(known, torch.where(same, math.exp(s) * one, math.exp(-s) * one), one)
    logK = torch.randn(n, n, generator=gen, dtype=DT)
    K = torch.exp(logK)
    expected = pi * K / (1 + pi * K)
    off = _offdiag(n)
    for edge_prior in (LabelPrior(y, strength=s), pi):
        law = get_prior("B", edge_prior=edge_prior).posterior(DenseWeights(logK))
        torch.testing.assert_close(law.mean[off], expected[off], rtol=1e-12, atol=1e-12)
    r, c, v = _random_sparse(n, 0.3, gen)
    expected_sp = pi[r, c] * torch.exp(v) / (1 + pi[r, c] * torch.exp(v))
    for edge_prior in (LabelPrior(y, strength=s), pi, pi.to_sparse()):
        law = get_prior("B", edge_prior=edge_prior).posterior(SparseWeights(r, c, v, n))
        M = law.mean.to_dense()
        torch.testing.assert_close(M[r, c], expected_sp, rtol=1e-12, atol=1e-12)
        assert float(M.sum()) == pytest.approx(float(expected_sp.sum()), rel=1e-12)


def test_proposition1_build_input_graph_edge_prior_b():
    r"""Proposition 1 of [002] on the input side: ``build_input_graph(..., edge_prior=pi)`` under
    the B prior has mean :math:`\pi K/(1+\pi K)` where :math:`K = m/(1-m)` are the kernel weights
    of the same graph without edge prior (mean :math:`m = K/(1+K)`), i.e.
    :math:`\mathrm{logit}\,\mathbb E[W\mid\pi] = \log\pi + \mathrm{logit}\,\mathbb E[W\mid 1]`."""
    from probdr import build_input_graph

    rng = np.random.default_rng(0)
    X = torch.as_tensor(rng.normal(size=(40, 5)))
    y = rng.integers(0, 3, size=40)
    s = 0.8
    base = build_input_graph(X, "B", "entropic", perplexity=5.0).mean.coalesce()
    law = build_input_graph(X, "B", "entropic", perplexity=5.0,
                            edge_prior=LabelPrior(y, strength=s)).mean.coalesce()
    assert torch.equal(base.indices(), law.indices())
    r, c = base.indices()
    logpi = torch.as_tensor(np.where(y[r.numpy()] == y[c.numpy()], s, -s), dtype=DT)
    m = base.values()
    assert bool(((m > 0) & (m < 1)).all())
    expected = torch.sigmoid(logpi + torch.logit(m))
    torch.testing.assert_close(law.values(), expected, rtol=1e-10, atol=1e-12)
    assert not torch.allclose(law.values(), m)  # the prior does move the mean


# --------------------------------------------------------------------------------------------
# Laplacian, attraction and repulsion
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
def test_laplacian_definition1_matches_scipy(sparse):
    r"""Definition 1 of [002] with its abuse of notation :math:`\mathbf L = L(W+W^\top)`:
    off-diagonal :math:`-\bar W_{ij}`, diagonal :math:`\sum_k\bar W_{ik}`; against
    ``scipy.sparse.csgraph.laplacian``. Also: :math:`\mathbf L\mathbf 1 = 0`, PSD, and
    :math:`\dim\ker\mathbf L` = number of connected components of :math:`\bar W` (§2.1)."""
    gen = torch.Generator().manual_seed(9)
    n = 12
    W = torch.rand(n, n, generator=gen, dtype=DT) * (torch.rand(n, n, generator=gen) < 0.4)
    block = torch.zeros(n, n, dtype=torch.bool)  # blocks {0..4}, {5..10}, {11}: >= 3 components
    block[:5, :5] = True
    block[5:11, 5:11] = True
    W = W * block
    W.fill_diagonal_(0.0)
    Wbar = (W + W.T).numpy()
    oracle = torch.as_tensor(scipy_laplacian(Wbar))
    L = laplacian(_to_sparse(W) if sparse else W)
    L = L.to_dense() if sparse else L
    torch.testing.assert_close(L, oracle, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(L.sum(1), torch.zeros(n, dtype=DT), rtol=0, atol=1e-12)
    ev = torch.linalg.eigvalsh(L)
    assert float(ev.min()) > -1e-10
    n_cc = connected_components(sp.csr_matrix(Wbar), directed=False)[0]
    assert int((ev.abs() < 1e-9).sum()) == n_cc
    assert n_cc >= 3  # disconnected: the test can tell R from 1
    # symmetrize=False on a symmetric matrix is Definition 1 itself
    Wbar_t = torch.as_tensor(Wbar)
    L2 = laplacian(_to_sparse(Wbar_t) if sparse else Wbar_t, symmetrize=False)
    torch.testing.assert_close(L2.to_dense() if sparse else L2, oracle, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_gaussian_attraction_is_half_laplacian_quadratic_form(sparse):
    r"""[002] §3.2 (eq. (5) attraction with a Gaussian kernel, Laplacian-eigenmaps link): with
    :math:`k_z = e^{-\frac12\|\cdot\|^2}`, :math:`-\sum_{i\ne j}P_{ij}\log k_z(z_i-z_j)
    = \tfrac12\mathrm{tr}(Z^\top L(P+P^\top)Z)` (the factor :math:`\tfrac12` and the
    symmetrisation of eq. (2)); the Laplacian is scipy's, and the law's attraction is computed on
    implicit kernel weights."""
    gen = torch.Generator().manual_seed(10)
    n, q = 15, 3
    Z = torch.randn(n, q, generator=gen, dtype=DT)
    P = torch.rand(n, n, generator=gen, dtype=DT) * (torch.rand(n, n, generator=gen) < 0.3)
    P.fill_diagonal_(0.0)
    P = P / P.sum(1, keepdim=True).clamp_min(1e-12)
    Lsym = torch.as_tensor(scipy_laplacian((P + P.T).numpy()))
    oracle = 0.5 * torch.trace(Z.T @ Lsym @ Z)
    direct = 0.5 * (P * _pairwise_sq(Z)).sum()
    torch.testing.assert_close(direct, oracle, rtol=1e-12, atol=1e-12)
    law = get_prior("D").posterior(KernelWeights(Z, GaussianKernel(2.0)))
    value = _to_sparse(P) if sparse else P
    torch.testing.assert_close(-law.attraction(value), oracle, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", ["B", "D", "E"])
@pytest.mark.parametrize("weights", ["dense", "kernel"])
def test_repulsion_terms_match_plain_torch(kind, weights):
    r"""Repulsion of eq. (5) of [002] per latent prior (§3.2, the normaliser of
    :math:`\mathbb P(Z)`), at a row-stochastic expected graph :math:`P` (:math:`P_{i+}=1`,
    :math:`P_{++}=n`): D :math:`\sum_i\log\sum_{j\ne i}K_{ij}`; E :math:`n\log\sum_{i\ne j}K_{ij}`;
    B :math:`\sum_{i\ne j}\log(1+K_{ij})`, with the Cauchy kernel :math:`K=1/(1+d^2)` in plain
    torch; and the cross-entropy is attraction plus repulsion."""
    gen = torch.Generator().manual_seed(11)
    n = 14
    Z = torch.randn(n, 2, generator=gen, dtype=DT)
    K = (1.0 / (1.0 + _pairwise_sq(Z))) * _offdiag(n)
    P = torch.rand(n, n, generator=gen, dtype=DT)
    P.fill_diagonal_(0.0)
    P = P / P.sum(1, keepdim=True)
    expected = {"D": torch.log(K.sum(1)).sum(), "E": n * torch.log(K.sum()),
                "B": torch.log1p(K[_offdiag(n)]).sum()}[kind]
    w = (KernelWeights(Z, StudentKernel(1.0)) if weights == "kernel"
         else DenseWeights(-torch.log1p(_pairwise_sq(Z))))
    law = get_prior(kind).posterior(w)
    torch.testing.assert_close(law.normaliser(P), expected, rtol=1e-10, atol=1e-10)
    attraction = (P[_offdiag(n)] * torch.log(K[_offdiag(n)])).sum()
    torch.testing.assert_close(law.cross_entropy(P), -attraction + expected, rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize("kind", ["B", "D", "E"])
@pytest.mark.parametrize("q", [2, 3])
def test_repulsion_with_latent_edge_prior_value_and_gradient(kind, q):
    r"""Repulsion of eq. (5) of [002] when the latent prior carries an edge prior :math:`\pi`
    (Definition 2, Proposition 1: weights :math:`\pi\odot K_Z`): D :math:`\sum_i\log\sum_{j\ne i}
    \pi_{ij}K_{ij}`, E :math:`n\log\sum_{i\ne j}\pi_{ij}K_{ij}`, B :math:`\sum_{i\ne j}\log(1+
    \pi_{ij}K_{ij})` at a row-stochastic P; value and gradient in Z (the implicit kernel weights
    use a hand-written backward) against autograd on the plain dense formula, Student kernel with
    3 degrees of freedom."""
    gen = torch.Generator().manual_seed(12)
    n = 11
    Z0 = torch.randn(n, q, generator=gen, dtype=DT)
    pi = torch.exp(torch.randn(n, n, generator=gen, dtype=DT))
    pi = 0.5 * (pi + pi.T)
    P = torch.rand(n, n, generator=gen, dtype=DT)
    P.fill_diagonal_(0.0)
    P = P / P.sum(1, keepdim=True)

    def plain(Z):
        K = (1.0 + _pairwise_sq(Z) / 3.0) ** -2.0 * pi * _offdiag(n)
        return {"D": torch.log(K.sum(1)).sum(), "E": n * torch.log(K.sum()),
                "B": torch.log1p(K[_offdiag(n)]).sum()}[kind]

    Za = Z0.clone().requires_grad_(True)
    expected = plain(Za)
    g_expected = torch.autograd.grad(expected, Za)[0]
    Zb = Z0.clone().requires_grad_(True)
    law = get_prior(kind, edge_prior=pi).posterior(KernelWeights(Zb, StudentKernel(3.0)))
    value = law.normaliser(P)
    g = torch.autograd.grad(value, Zb)[0]
    torch.testing.assert_close(value, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(g, g_expected, rtol=1e-8, atol=1e-10)


def test_sampled_b_normaliser_is_unbiased():
    r"""The B law's repulsion :math:`\sum_{i\ne j}\log(1+K_{ij})` ([002] eq. (5)) estimated from
    uniformly drawn partners (``normaliser="sampled"``, documented as unbiased for the B law):
    the mean of 2000 estimates matches the exact dense sum (plain torch) within 4 standard
    errors."""
    gen = torch.Generator().manual_seed(13)
    n = 25
    Z = torch.randn(n, 2, generator=gen, dtype=DT)
    exact = torch.log1p(1.0 / (1.0 + _pairwise_sq(Z)))[_offdiag(n)].sum()
    w = KernelWeights(Z, StudentKernel(1.0), normaliser="sampled", n_samples=3)
    torch.manual_seed(0)
    est = torch.stack([w.sum_softplus() for _ in range(2000)])
    se = est.std() / math.sqrt(est.numel())
    assert float(est.std()) > 0
    assert abs(float(est.mean() - exact)) < 4 * float(se), (float(est.mean()), float(exact))


@pytest.mark.parametrize("kind", ["B", "D", "E"])
def test_in_support_is_omega_of_definition_2(kind):
    r"""Support of the laws, :math:`\Omega_{\mathcal P}` of [002] Definition 2: B simple graphs
    (:math:`W_{ij}\le1`), D exactly one out-edge per node, E exactly n edges (multi-edges
    allowed); ``in_support`` against the definition on every off-diagonal graph of 3 nodes with
    entries in {0, 1, 2}."""
    n = 3
    law = get_prior(kind).posterior(DenseWeights(torch.zeros(n, n, dtype=DT)))
    cells = [(i, j) for i in range(n) for j in range(n) if i != j]
    seen = 0
    for vals in itertools.product([0, 1, 2], repeat=len(cells)):
        W = torch.zeros(n, n, dtype=torch.long)
        for v, (i, j) in zip(vals, cells, strict=True):
            W[i, j] = v
        omega = {"B": bool((W <= 1).all()), "D": bool((W.sum(1) == 1).all()),
                 "E": int(W.sum()) == n}[kind]
        assert law.in_support(W) == omega
        assert law.in_support(_to_sparse(W)) == omega
        seen += omega
    assert seen == {"B": 64, "D": 8, "E": 50}[kind]


def test_symmetrized_binary_sparse_weights_mean_is_fuzzy_union():
    r"""B~ law on sparse (kNN-like) weights ([002] §3.1, UMAP's graph): the mean is
    :math:`P_{ij}+P_{ji}-P_{ij}P_{ji}` on the union of the edge list and its transpose, with
    :math:`P = \sigma(\log\kappa)` on listed pairs and 0 elsewhere (dense plain torch)."""
    gen = torch.Generator().manual_seed(14)
    n = 9
    r, c, v = _random_sparse(n, 0.2, gen)
    P = torch.zeros(n, n, dtype=DT)
    P[r, c] = torch.sigmoid(v)
    expected = P + P.T - P * P.T
    law = get_prior("B").posterior(SparseWeights(r, c, v, n)).symmetrized()
    M = law.mean.to_dense()
    torch.testing.assert_close(M, expected, rtol=1e-10, atol=1e-12)
    assert not torch.equal(P, P.T)  # the input is not symmetric: the union matters


@pytest.mark.parametrize("kind", ["B", "D", "E"])
def test_scoring_a_graph_leaves_the_law_and_its_weights_as_they_were(kind):
    """A law's getters do not write: scoring an observed sparse graph under Monte Carlo
    normalisers (which sum the observed pairs exactly) passes those pairs to the weights, not
    stores them there; the same draws give the same value as the normaliser given them."""
    gen = torch.Generator().manual_seed(3)
    n = 20
    Z = torch.randn(n, 2, generator=gen, dtype=DT)
    w = KernelWeights(Z, StudentKernel(1.0), normaliser="sampled", n_samples=4)
    law = get_prior(kind).posterior(w)
    rows = torch.arange(n)
    W = torch.sparse_coo_tensor(torch.stack([rows, (rows + 1) % n]), torch.ones(n, dtype=DT),
                                (n, n)).coalesce()
    before = dict(vars(w))
    torch.manual_seed(0)
    value = law.normaliser(W)
    assert vars(w).keys() == before.keys() and all(vars(w)[k] is v for k, v in before.items())
    from probdr.laws.edge_lists import near_pairs

    torch.manual_seed(0)
    near = near_pairs(W)
    direct = {"B": lambda: w.sum_softplus(near=near),
              "D": lambda: w.row_logsumexp(near=near).sum(),
              "E": lambda: n * w.total_logsumexp(near=near)}[kind]()
    torch.testing.assert_close(value, direct, rtol=1e-12, atol=0)
