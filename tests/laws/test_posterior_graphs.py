"""Posterior-graph Monte Carlo: sampler means vs closed forms, connected components per draw."""

from __future__ import annotations

import pytest
import torch

from probdr.laws.components import (
    batch_memberships,
    component_statistics,
    connected_components,
    draw_graphs,
    monte_carlo_edge_mean,
    posterior_component_statistics,
    sample_memberships,
)
from probdr.laws.graph import BinaryGraph, NEdgeGraph, UnitDegreeGraph
from probdr.laws.weights import DenseWeights, SparseWeights

DT = torch.float64



def _log_kernel(n=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 2, dtype=DT, generator=g)
    return -torch.cdist(X, X) ** 2  # Gaussian kernel, unit bandwidth


def _closed_form(kind, logK):
    """Posterior means of spec §3.4 with pi = 1, diagonal excluded."""
    K = logK.exp().clone()
    K.fill_diagonal_(0.0)
    n = K.shape[0]
    if kind == "B":
        return K / (1 + K)
    if kind == "D":
        return K / K.sum(1, keepdim=True)
    return n * K / K.sum()


def _closed_form_se(kind, mean, N, n):
    if kind == "E":  # W_ij ~ Binomial(n, pi_ij)
        pi = mean / n
        return torch.sqrt(n * pi * (1 - pi) / N)
    return torch.sqrt(mean * (1 - mean) / N)  # Bernoulli cells (B, D)


LAWS = {"B": BinaryGraph, "D": UnitDegreeGraph, "E": NEdgeGraph}


@pytest.mark.parametrize("kind", ["B", "D", "E"])
@pytest.mark.parametrize("sparse", [False, True])
def test_monte_carlo_means_match_closed_form(kind, sparse):
    """Done-when: MC means of the B, D, E samplers within 3 standard errors of the closed-form
    edge probabilities. z-scores use the closed-form variances; with 72 cells a few |z| > 3 are
    expected by chance (0.27% each), so we require >= 95% of the cells within 3 SE, none beyond
    4 SE (Bonferroni) and a mean z^2 near 1 (calibrated spread)."""
    n, N = 9, 20_000
    logK = _log_kernel(n)
    if sparse:  # all off-diagonal pairs as an edge list
        r, c = torch.nonzero(~torch.eye(n, dtype=torch.bool), as_tuple=True)
        w = SparseWeights(r, c, logK[r, c], n)
    else:
        w = DenseWeights(logK)
    law = LAWS[kind](w)
    ref = _closed_form(kind, logK)
    mean = law.mean.to_dense() if sparse else law.mean
    assert torch.allclose(mean, ref, atol=1e-12)  # the lead's .mean
    m, _ = monte_carlo_edge_mean(law, N, torch.Generator().manual_seed(123))
    se = _closed_form_se(kind, ref, N, n)
    off = ~torch.eye(n, dtype=torch.bool)
    z = ((m - ref)[off] / se[off]).abs()
    assert float((z <= 3).double().mean()) >= 0.95
    assert float(z.max()) < 4.0, float(z.max())
    assert 0.6 < float((z**2).mean()) < 1.5
    assert torch.all(m.diagonal() == 0)


def test_batch_memberships_match_igraph():
    logK = _log_kernel(40, seed=1)
    law = UnitDegreeGraph(DenseWeights(logK))
    torch.manual_seed(0)
    W = law.sample((5,))
    memb = batch_memberships(W)
    for b in range(5):
        k, m = connected_components(W[b])
        assert int(memb[b].max()) + 1 == k
        same_lead = m[:, None] == m[None, :]
        same_mine = memb[b][:, None] == memb[b][None, :]
        assert torch.equal(same_lead, same_mine)
    # sparse batches give the same labels
    r, c = torch.nonzero(~torch.eye(40, dtype=torch.bool), as_tuple=True)
    Ws = torch.stack([W[b].to_sparse() for b in range(5)]).coalesce()
    assert torch.equal(batch_memberships(Ws), memb)


def test_component_statistics_known_graph():
    # two draws on 6 nodes: {0,1,2},{3,4},{5} and {0..5}
    m = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 0, 0, 0, 0, 0]])
    st = component_statistics(m)
    assert st.n_components.tolist() == [3, 1]
    assert st.sizes[0].tolist() == [3, 2, 1]
    assert torch.allclose(st.largest_fraction, torch.tensor([0.5, 1.0], dtype=DT))
    assert torch.allclose(st.singleton_fraction, torch.tensor([1 / 6, 0.0], dtype=DT))
    assert torch.allclose(st.node_weighted_mean_size(), torch.tensor([14 / 6, 6.0], dtype=DT))
    sizes, counts = st.size_histogram()
    assert sizes.tolist() == [1, 2, 3, 6] and counts.tolist() == [0.5, 0.5, 0.5, 0.5]
    s = st.summary()
    assert s["n_components_mean"] == 2.0 and s["n_components_max"] == 3


def test_memberships_are_labelled_by_first_appearance():
    logK = _log_kernel(30, seed=2)
    memb = sample_memberships(UnitDegreeGraph(DenseWeights(logK)), 4,
                              torch.Generator().manual_seed(0))
    for m in memb:
        first = [int(m[(m == r).nonzero()[0]]) for r in range(int(m.max()) + 1)]
        order = [int((m == r).nonzero()[0]) for r in range(int(m.max()) + 1)]
        assert first == list(range(len(first))) and order == sorted(order)


def test_generator_reproducible_and_global_rng_untouched():
    law = NEdgeGraph(DenseWeights(_log_kernel(20, seed=3)))
    torch.manual_seed(5)
    state = torch.get_rng_state()
    a = sample_memberships(law, 7, torch.Generator().manual_seed(1))
    assert torch.equal(torch.get_rng_state(), state)
    b = sample_memberships(law, 7, torch.Generator().manual_seed(1))
    c = sample_memberships(law, 7, torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_chunked_draws_cover_n_samples():
    law = UnitDegreeGraph(DenseWeights(_log_kernel(12, seed=4)))
    sizes = [W.shape[0] for W in draw_graphs(law, 10, chunk_size=3)]
    assert sizes == [3, 3, 3, 1]
    with pytest.raises(ValueError, match="n_samples"):
        list(draw_graphs(law, 0))


def test_posterior_component_statistics_separated_clusters():
    """Two far-apart clusters under the D law never share a component."""
    g = torch.Generator().manual_seed(0)
    X = torch.cat([torch.randn(15, 2, dtype=DT, generator=g),
                   torch.randn(15, 2, dtype=DT, generator=g) + 50.0])
    law = UnitDegreeGraph(DenseWeights(-torch.cdist(X, X) ** 2))
    st = posterior_component_statistics(law, 20, torch.Generator().manual_seed(1))
    assert int(st.n_components.min()) >= 2
    for m in st.memberships:
        assert not (set(m[:15].tolist()) & set(m[15:].tolist()))
