r"""A constant edge prior :math:`\pi` (Proposition 1 of Van Assel et al. 2022): a number or a
0-d tensor is accepted by every representation of the weights (dense, edge list, kernel) and
every law. It cancels in the D and E normalisations and changes only B, whose mean is
:math:`\sigma(\log\pi + \log K)`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from probdr.input.graph import build_input_graph
from probdr.kernels import StudentKernel
from probdr.laws import DenseWeights, KernelWeights, SparseWeights, get_prior

DT = torch.float64


def _weights(representation: str, n: int = 12):
    g = torch.Generator().manual_seed(0)
    Z = torch.randn(n, 2, generator=g, dtype=DT)
    kernel = StudentKernel()
    logK = kernel.log_k(torch.cdist(Z, Z).square())
    if representation == "dense":
        return DenseWeights(logK), logK
    if representation == "kernel":
        return KernelWeights(Z, kernel), logK
    r, c = torch.nonzero(torch.rand(n, n, generator=g) < 0.4, as_tuple=True)
    keep = r != c
    r, c = r[keep], c[keep]
    dense = torch.full((n, n), float("-inf"), dtype=DT)
    dense[r, c] = logK[r, c]
    return SparseWeights(r, c, logK[r, c], n), dense


def _dense_mean(law):
    m = law.mean
    return m.to_dense() if m.is_sparse else m


@pytest.mark.parametrize("representation", ["dense", "sparse", "kernel"])
@pytest.mark.parametrize("pi", [3.0, torch.tensor(3.0), np.float64(3.0), np.array(3.0)],
                         ids=["float", "tensor0d", "numpy_scalar", "numpy0d"])
@pytest.mark.parametrize("kind", ["B", "D", "E"])
def test_constant_edge_prior_is_proposition_1(representation, pi, kind):
    r"""A scalar :math:`\pi` on every representation of the weights and every law: the D and E
    means are unchanged (to 1e-12), the B mean is :math:`\sigma(\log\pi + \log K)`."""
    w, logK = _weights(representation)
    base = _dense_mean(get_prior(kind).posterior(w))
    law = get_prior(kind, edge_prior=pi).posterior(w)
    mean = _dense_mean(law)
    if kind == "B":
        expected = torch.sigmoid(math.log(3.0) + logK)
        expected.fill_diagonal_(0.0)
        torch.testing.assert_close(mean, expected, rtol=1e-12, atol=1e-12)
        assert not torch.allclose(mean, base)
    else:
        torch.testing.assert_close(mean, base, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("representation", ["dense", "sparse", "kernel"])
@pytest.mark.parametrize("log_pi", [math.log(3.0), torch.tensor(math.log(3.0), dtype=DT)],
                         ids=["float", "tensor0d"])
def test_weights_take_a_scalar_log_prior(representation, log_pi):
    r"""``with_log_prior`` (and ``KernelWeights``' own ``log_pi``) take :math:`\log\pi` as a
    number or a 0-d tensor: :math:`\log\pi` is added to every pair's weight."""
    w, logK = _weights(representation)
    off = ~torch.eye(w.n, dtype=torch.bool)
    expected = logK + math.log(3.0)
    for lw in [w.with_log_prior(log_pi)] + (
            [KernelWeights(w.Z, w.kernel, log_pi)] if representation == "kernel" else []):
        torch.testing.assert_close(lw.dense()[off], expected[off], rtol=1e-12, atol=1e-12)
        r, c = torch.nonzero(torch.isfinite(expected) & off, as_tuple=True)
        if representation != "sparse":
            torch.testing.assert_close(lw.log_at(r, c), expected[r, c], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pi", [3.0, torch.tensor(3.0)], ids=["float", "tensor0d"])
@pytest.mark.parametrize("kind, affinity", [("D", "entropic"), ("E", "entropic"),
                                            ("B", "umap"), ("B~", "umap")])
def test_constant_edge_prior_on_the_input_graph(digits_small, pi, kind, affinity):
    r"""On the sparse input laws a scalar :math:`\pi` adds no pair, leaves the D and E means as
    they are and moves the B (and so B~) mean to :math:`\sigma(\log\pi + \mathrm{logit}\,m)`."""
    X = torch.as_tensor(digits_small[0])
    base = build_input_graph(X, kind, affinity, perplexity=10.0).mean.coalesce()
    law = build_input_graph(X, kind, affinity, perplexity=10.0, edge_prior=pi).mean.coalesce()
    assert torch.equal(law.indices(), base.indices())
    if kind in ("D", "E"):
        torch.testing.assert_close(law.values(), base.values(), rtol=1e-12, atol=1e-12)
        return
    if kind == "B":
        expected = torch.sigmoid(math.log(3.0) + torch.logit(base.values()))
        torch.testing.assert_close(law.values(), expected, rtol=1e-12, atol=1e-12)
    assert bool((law.values() >= base.values() - 1e-15).all())
    assert not torch.allclose(law.values(), base.values())
