r"""The graph laws B, D, E and B~ as whole Pyro distributions: their support :math:`\Omega` of
Van Assel et al. (2022, Definition 2) as a constraint (dense and sparse graphs, batches), the
validation of ``log_prob`` (``ValueError`` with validation on, :math:`-\infty` without) and its
rule for expected graphs, batching (``log_prob`` of a batch, ``expand`` inside ``pyro.plate``),
and ``enumerate_support``, ``mean``, ``variance`` and ``entropy`` against brute-force enumeration
and Monte Carlo."""

from __future__ import annotations

import math

import pyro
import pytest
import torch
from pyro import poutine

from probdr.kernels import StudentKernel
from probdr.laws import DenseWeights, KernelWeights, SparseWeights, get_prior
from probdr.laws.graph import (
    MAX_ENUMERATED_GRAPHS,
    BinaryGraph,
    NEdgeGraph,
    SymmetrizedBinaryGraph,
    UnitDegreeGraph,
)
from probdr.laws.graph_support import (
    binary_graphs,
    n_edge_graphs,
    symmetric_binary_graphs,
    unit_degree_graphs,
)

DT = torch.float64
KINDS = ["B", "D", "E", "B~"]
LAWS = {"B": BinaryGraph, "D": UnitDegreeGraph, "E": NEdgeGraph}


def _sparse_weights(n, gen):
    """A random edge list in which every row has at least two out-edges."""
    M = torch.rand(n, n, generator=gen) < 0.3
    M.fill_diagonal_(False)
    idx = torch.arange(n)
    M[idx, (idx + 1) % n] = True
    M[idx, (idx + 2) % n] = True
    r, c = torch.nonzero(M, as_tuple=True)
    return SparseWeights(r, c, torch.randn(r.numel(), generator=gen, dtype=DT), n)


def _law(kind, n=7, sparse=False, seed=0, validate_args=None):
    gen = torch.Generator().manual_seed(seed)
    w = _sparse_weights(n, gen) if sparse else DenseWeights(torch.randn(n, n, generator=gen,
                                                                        dtype=DT))
    if kind == "B~":
        return SymmetrizedBinaryGraph(get_prior("B").posterior(w), validate_args=validate_args)
    return LAWS[kind](w, validate_args=validate_args)


def _outside(kind, n):
    """An integer graph outside the law's support, but in the others' where it can be."""
    W = torch.zeros(n, n, dtype=torch.long)
    idx = torch.arange(n)
    W[idx, (idx + 1) % n] = 1  # a cycle: in every support but B~'s
    if kind == "B":
        W[0, 2] = 2  # a double edge
    elif kind == "D":
        W[0, 2] = 1  # a node with two out-edges
    elif kind == "E":
        W = torch.zeros(n, n, dtype=torch.long)
        W[0, 1] = 5  # 5 edges on n != 5 nodes
    return W


# --------------------------------------------------------------------------------------------
# the support and validation
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sparse_value", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_log_prob_outside_the_support_raises_or_is_minus_inf(kind, sparse_value):
    n = 7
    W = _outside(kind, n)
    W = W.to_sparse() if sparse_value else W
    with pyro.validation_enabled(True):
        law = _law(kind, n)
        assert law._validate_args
        assert not law.in_support(W)
        with pytest.raises(ValueError, match="outside the support"):
            law.log_prob(W)
        assert float(_law(kind, n, validate_args=False).log_prob(W)) == -math.inf
    with pyro.validation_enabled(False):
        assert float(_law(kind, n).log_prob(W)) == -math.inf
        assert float(_law(kind, n).log_prob(W.double())) == -math.inf  # integral floats too
        with pytest.raises(ValueError, match="outside the support"):
            _law(kind, n, validate_args=True).log_prob(W)


@pytest.mark.parametrize("kind", KINDS)
def test_a_self_loop_is_outside_every_support(kind):
    law = _law(kind, 5, validate_args=False)
    W = law.sample()
    assert law.in_support(W)
    W = W.clone()
    W[0, 0] = 0 if kind == "E" else 1
    if kind == "E":  # keep n edges: move one onto the diagonal
        r, c = torch.nonzero(W, as_tuple=True)
        W[r[0], c[0]] -= 1
        W[0, 0] = 1
    assert not law.in_support(W)
    assert float(law.log_prob(W)) == -math.inf


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_draws_lie_in_the_support(kind, sparse):
    law = _law(kind, 8, sparse=sparse)
    one, batch = law.sample(), law.sample((4,))
    assert one.is_sparse == sparse and batch.is_sparse == sparse
    assert law.support.check(one).shape == ()
    assert bool(law.support.check(one))
    flags = law.support.check(batch)
    assert flags.shape == (4,) and bool(flags.all())
    assert bool(law.support.check(batch.to_dense() if sparse else batch.to_sparse()).all())
    with pyro.validation_enabled(True):
        assert torch.isfinite(law.log_prob(batch)).all()


def test_supports_against_their_definitions_on_a_sparse_batch():
    r"""Each constraint checks every graph of a sparse batch on its own: a D graph, a B~ graph
    with a double edge, an E graph with a self loop."""
    n = 4
    D = torch.zeros(n, n, dtype=torch.long)
    D[torch.arange(n), (torch.arange(n) + 1) % n] = 1
    S = ((D + D.T) > 0).long()
    S[0, 2] = S[2, 0] = 2
    E = D.clone()
    E[1, 2] = 0
    E[1, 1] = 1
    batch = torch.stack([D, S, E]).to_sparse()
    assert unit_degree_graphs.check(batch).tolist() == [True, False, False]
    assert binary_graphs.check(batch).tolist() == [True, False, False]
    assert symmetric_binary_graphs.check(batch).tolist() == [False, False, False]
    assert n_edge_graphs.check(batch).tolist() == [True, False, False]
    S[0, 2] = S[2, 0] = 1
    assert symmetric_binary_graphs.check(torch.stack([S, D]).to_sparse()).tolist() == [True, False]


@pytest.mark.parametrize("kind", ["B", "D", "E"])
def test_expected_graph_keeps_the_cross_entropy_form(kind):
    r"""An expected graph :math:`\mathbb E[W]` (non-integer entries) is no graph of the support,
    yet ``log_prob`` at it is the linear form of eq. (5), with validation on too; a negative
    entry is no expected graph: validation refuses it."""
    law = _law(kind, 9, validate_args=True)
    P = law.mean
    assert not law.in_support(P)
    expected = law.attraction(P) - law.normaliser(P) + law.log_combinatorial(P)
    torch.testing.assert_close(law.log_prob(P), expected, rtol=1e-12, atol=1e-12)
    assert torch.isfinite(law.log_prob(P.to_sparse()))
    Q = P.clone()
    Q[0, 1] = -0.5
    with pytest.raises(ValueError, match="non-negative"):
        law.log_prob(Q)


@pytest.mark.parametrize("kind", ["D", "E", "B"])
def test_coupling_site_observes_an_expected_graph_under_validation(kind):
    """The model's site ``pyro.sample("W_Z", law, obs=E[W_X])`` with kernel weights, traced
    under validation: no error, a finite log joint."""
    gen = torch.Generator().manual_seed(3)
    n = 12
    Z = torch.randn(n, 2, generator=gen, dtype=DT)
    P = _law("D", n).mean

    def model():
        law = get_prior(kind).posterior(KernelWeights(Z, StudentKernel()))
        pyro.sample("W_Z", law, obs=P)

    with pyro.validation_enabled(True):
        assert torch.isfinite(poutine.trace(model).get_trace().log_prob_sum())


# --------------------------------------------------------------------------------------------
# batches and plates
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_log_prob_of_a_batch_is_per_graph(kind, sparse):
    law = _law(kind, 8, sparse=sparse)
    W3 = law.sample((3,))
    graphs = [W3[i] for i in range(3)]
    lp = law.log_prob(W3)
    assert lp.shape == (3,)
    torch.testing.assert_close(lp, torch.stack([law.log_prob(g) for g in graphs]),
                               rtol=0, atol=1e-10)
    dense = W3.to_dense() if sparse else W3
    torch.testing.assert_close(law.log_prob(dense), lp, rtol=0, atol=1e-10)
    W23 = dense[:2, None].expand(2, 3, 8, 8)  # a (2, 3) batch
    torch.testing.assert_close(law.log_prob(W23), lp[:2, None].expand(2, 3), rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_law_in_a_plate_scores_each_graph(kind):
    law = _law(kind, 8)
    W3 = law.sample((3,))
    W3[1] = _outside(kind, 8) if kind != "B~" else W3[1]

    def model():
        with pyro.plate("conditions", 3):
            pyro.sample("W", law, obs=W3)

    with pyro.validation_enabled(False):
        tr = poutine.trace(model).get_trace()
        site = tr.nodes["W"]
        assert site["fn"].batch_shape == (3,)
        per_graph = torch.stack([law.log_prob(W3[i]) for i in range(3)])
        torch.testing.assert_close(site["fn"].log_prob(W3), per_graph, rtol=0, atol=1e-10)
        if kind == "B~":
            torch.testing.assert_close(tr.log_prob_sum(), per_graph.sum(), rtol=0, atol=1e-10)
        else:
            assert float(tr.log_prob_sum()) == -math.inf
    W3 = law.sample((3,))
    with pyro.validation_enabled(True):
        tr = poutine.trace(model).get_trace()
        expected = sum(law.log_prob(W3[i]) for i in range(3))
        torch.testing.assert_close(tr.log_prob_sum(), expected, rtol=0, atol=1e-10)


def test_expanded_law_moments_and_draws_carry_the_batch_shape():
    law = _law("D", 5).expand((2, 3))
    assert law.mean.shape == law.variance.shape == (2, 3, 5, 5)
    assert law.entropy().shape == (2, 3)
    assert law.sample().shape == (2, 3, 5, 5)
    assert law.sample((4,)).shape == (4, 2, 3, 5, 5)
    sparse = _law("E", 6, sparse=True).expand((3,))
    assert sparse.mean.is_sparse and sparse.mean.shape == (3, 6, 6)
    W = sparse.sample()
    assert W.is_sparse and W.shape == (3, 6, 6)
    assert sparse.log_prob(W).shape == (3,)
    assert _law("B", 3).enumerate_support(expand=False).shape == (64, 3, 3)
    assert _law("B", 3).expand((2,)).enumerate_support(expand=False).shape == (64, 1, 3, 3)
    assert _law("B", 3).expand((2,)).enumerate_support().shape == (64, 2, 3, 3)


# --------------------------------------------------------------------------------------------
# enumeration, moments, entropy
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("kind,n", [("B", 3), ("D", 4), ("E", 4), ("B~", 4)])
def test_enumeration_sums_to_one_and_gives_the_moments(kind, n, sparse):
    law = _law(kind, n, sparse=sparse, seed=4)
    assert law.has_enumerate_support
    W = law.enumerate_support()
    assert W.shape[0] == law.support.size(n)
    assert bool(law.support.check(W).all())
    assert len({tuple(w.flatten().tolist()) for w in W}) == W.shape[0]  # no repeats
    lp = law.log_prob(W)
    assert abs(float(torch.logsumexp(lp, 0).exp()) - 1.0) < 1e-10
    p = torch.exp(lp)[:, None, None]
    Wd = W.to(DT)
    mean = (p * Wd).sum(0)
    dense = (lambda M: M.to_dense()) if sparse else (lambda M: M)
    torch.testing.assert_close(dense(law.mean), mean, rtol=0, atol=1e-10)
    var = (p * (Wd - mean) ** 2).sum(0)
    torch.testing.assert_close(dense(law.variance), var, rtol=0, atol=1e-10)
    H = -(torch.exp(lp) * torch.where(lp > -math.inf, lp, torch.zeros_like(lp))).sum()
    torch.testing.assert_close(law.entropy(), H, rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", ["D", "E"])
def test_entropy_and_variance_against_monte_carlo(kind):
    r"""At n = 30 (no enumeration): the entropy within 4 standard errors of
    :math:`-\frac1N\sum\log p(W_s)` and the variance of a few cells within 5 standard errors of
    the draws' (the E entropy's binomial sum stops early there)."""
    law = _law(kind, 30, seed=5)
    torch.manual_seed(1)
    W = law.sample((4000,))
    lp = law.log_prob(W)
    se = float(lp.std()) / math.sqrt(lp.numel())
    assert abs(float(law.entropy() + lp.mean())) < 4 * se
    Wd = W.to(DT)
    m, v = law.mean, law.variance
    emp = ((Wd - m) ** 2).mean(0)
    se_v = ((Wd - m) ** 2).std(0) / math.sqrt(W.shape[0])
    top = torch.topk(v.flatten(), 5).indices
    assert bool(((emp.flatten() - v.flatten())[top].abs() <= 5 * se_v.flatten()[top]).all())


def test_enumerate_support_refuses_large_graphs():
    for kind, n in [("B", 5), ("D", 7), ("E", 6), ("B~", 7)]:
        law = _law(kind, n)
        assert law.support.size(n) > MAX_ENUMERATED_GRAPHS
        with pytest.raises(ValueError, match="tiny graphs"):
            law.enumerate_support()
