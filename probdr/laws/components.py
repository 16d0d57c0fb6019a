r"""Monte Carlo over posterior graphs: connected components of many draws at once.

The input-graph posteriors of the graph-coupling view (Van Assel et al. 2022, Proposition 1 and
App. A.2) are the B, D and E laws of :mod:`probdr.laws.graph`. ccPCA (§4.3 there) and the discussion of
MRF degeneracy need, for :math:`N` draws :math:`W^{(1)}, \dots, W^{(N)}`, the connected components
(CCs) of each symmetrised graph :math:`W^{(\ell)} + W^{(\ell)\top}`:

* :func:`sample_memberships` -- CC labels of ``N`` draws, ``(N, n)``, computed in **one** call of
  ``scipy.sparse.csgraph.connected_components`` on the block-diagonal union of the draws
  (vectorised; cross-checked against igraph in the tests);
* :func:`component_statistics` -- per-draw number of components and size distribution;
* :func:`monte_carlo_edge_mean` -- Monte Carlo mean and standard error of :math:`W_{ij}`, to check
  the samplers against the closed-form posterior means :math:`\kappa/(1+\kappa)` (B),
  :math:`\kappa_{ij}/\kappa_{i+}` (D), :math:`n\kappa_{ij}/\kappa_{++}` (E).

Randomness: the graph laws draw from the fit's generator
(:func:`probdr._compute.isolation.fit_generator`), by default torch's global one. Every function
here takes an optional ``torch.Generator``; when given, one seed is drawn from it and the draws
come from a generator of their own seeded with it, so results are reproducible from the
generator and the global state is left untouched.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch

from .._compute.isolation import fit_stream
from .._utils import check_array, check_number
from ..config import check_dense
from .graph import GraphLaw
from .weights import sparse_coo

__all__ = [
    "laplacian",
    "connected_components",
    "rng_from",
    "draw_graphs",
    "batch_memberships",
    "sample_memberships",
    "ComponentStatistics",
    "component_statistics",
    "posterior_component_statistics",
    "monte_carlo_edge_mean",
]

#: target number of (draw x edge) entries held at once when sampling in chunks
_CHUNK_ENTRIES = 2 * 10**7


@contextlib.contextmanager
def rng_from(generator: torch.Generator | None):
    """Run the enclosed graph draws from a generator seeded by one draw of ``generator`` (the
    global torch RNG untouched); a no-op when ``generator`` is None."""
    if generator is None:
        yield
        return
    seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
    with fit_stream(torch.Generator(device=generator.device).manual_seed(seed)):
        yield


def _support_size(law: GraphLaw) -> int:
    w = law.weights
    return int(w.values.numel()) if getattr(w, "is_sparse", False) else law.n * law.n


def _chunk_size(law: GraphLaw, n_samples: int) -> int:
    return int(max(1, min(n_samples, _CHUNK_ENTRIES // max(_support_size(law), 1))))


def draw_graphs(law: GraphLaw, n_samples: int, generator: torch.Generator | None = None,
                chunk_size: int | None = None):
    """Yield batches of posterior draws, each a ``(b, n, n)`` tensor (sparse COO for sparse
    weights, dense otherwise), ``n_samples`` draws in all, in chunks bounding memory."""
    _check_law(law)
    n_samples = check_number(n_samples, "n_samples", integer=True, low=1)
    if chunk_size is not None:
        chunk_size = check_number(chunk_size, "chunk_size", integer=True, low=1)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got "
                        f"{type(generator).__name__}.")
    chunk = chunk_size or _chunk_size(law, n_samples)
    with rng_from(generator):
        done = 0
        while done < n_samples:
            b = min(chunk, n_samples - done)
            yield law.sample((b,))
            done += b


def _check_law(law) -> None:
    if not isinstance(law, GraphLaw):
        raise TypeError(f"law must be a graph law (probdr.laws.GraphLaw, e.g. an estimator's "
                        f"input_graph_ or a prior's posterior), got {type(law).__name__}.")


def _check_batch(W):
    """``W`` as a torch ``(b, n, n)`` batch (a ``(n, n)`` graph is a batch of one)."""
    if not isinstance(W, torch.Tensor):
        W = torch.as_tensor(check_array(W, name="W", min_samples=1, square=True)
                            if np.ndim(W) == 2 else np.asarray(W, dtype=np.float64))
    if W.ndim not in (2, 3) or W.shape[-1] != W.shape[-2] or W.shape[-1] == 0:
        raise ValueError(f"W must be a graph (n, n) or a batch of graphs (b, n, n) with n >= 1, "
                         f"got shape {tuple(W.shape)}.")
    if W.ndim == 2:
        W = W.unsqueeze(0) if not W.is_sparse else torch.stack([W])
    return W


def _check_graph(W) -> torch.Tensor:
    """A square ``(n, n)`` graph of finite weights: a torch sparse tensor is passed through."""
    if isinstance(W, torch.Tensor) and W.is_sparse:
        if W.ndim != 2 or W.shape[0] != W.shape[1]:
            raise ValueError(f"W must be a square (n, n) graph, got shape {tuple(W.shape)}.")
        return W
    return check_array(W, name="W", min_samples=1, square=True, dtype=None, shape="(n, n)")


def _edges_of_batch(W: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(draw, row, col) indices of the non-zero entries of a (b, n, n) batch."""
    if W.is_sparse:
        W = W.coalesce()
        keep = W.values() != 0
        b, r, c = W.indices()[:, keep]
        return b, r, c
    b, r, c = torch.nonzero(W, as_tuple=True)
    return b, r, c


def batch_memberships(W: torch.Tensor) -> torch.Tensor:
    r"""CC labels of each graph of a batch ``(b, n, n)`` (dense or sparse), for the undirected
    graphs :math:`W + W^\top`. Returns ``(b, n)`` long labels in ``0..R_l - 1`` per draw, numbered
    by first appearance (node 0 is in component 0)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    W = _check_batch(W)
    nb, n = W.shape[0], W.shape[-1]
    b, r, c = (t.cpu().numpy() for t in _edges_of_batch(W))
    N = nb * n
    A = sp.coo_matrix((np.ones(b.size, dtype=np.int8), (b * n + r, b * n + c)), shape=(N, N))
    _, lab = connected_components(A.tocsr(), directed=True, connection="weak")
    lab = lab.reshape(nb, n)
    # relabel per draw by order of first appearance
    out = np.empty_like(lab)
    for i in range(nb):
        _, first, inv = np.unique(lab[i], return_index=True, return_inverse=True)
        rank = np.empty_like(first)
        rank[np.argsort(first)] = np.arange(first.size)
        out[i] = rank[inv]
    return torch.as_tensor(out.astype(np.int64))


def sample_memberships(law: GraphLaw, n_samples: int, generator: torch.Generator | None = None,
                       chunk_size: int | None = None) -> torch.Tensor:
    """CC labels of ``n_samples`` posterior draws of ``law``: ``(n_samples, n)`` long tensor."""
    return torch.cat([batch_memberships(W) for W in
                      draw_graphs(law, n_samples, generator, chunk_size)])


@dataclass
class ComponentStatistics:
    """Connected-component statistics of ``N`` graph draws.

    Attributes
    ----------
    memberships : tensor (N, n)
        CC labels per draw.
    n_components : tensor (N,)
        Number of components :math:`R_\\ell` per draw.
    sizes : list of tensors
        Component sizes :math:`n_r` of each draw (sorted decreasingly).
    """

    memberships: torch.Tensor
    n_components: torch.Tensor
    sizes: list

    @property
    def n_samples(self) -> int:
        return int(self.n_components.numel())

    @property
    def n_nodes(self) -> int:
        return int(self.memberships.shape[1])

    @property
    def largest_fraction(self) -> torch.Tensor:
        """Fraction of the nodes in the largest component, per draw."""
        return torch.stack([s[0] for s in self.sizes]).double() / self.n_nodes

    @property
    def singleton_fraction(self) -> torch.Tensor:
        """Fraction of isolated nodes, per draw."""
        return torch.stack([(s == 1).sum() for s in self.sizes]).double() / self.n_nodes

    def size_histogram(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled size distribution over draws: ``(sizes, counts)``, the number of components of
        each size, averaged over draws."""
        allsizes = torch.cat(self.sizes)
        vals, counts = torch.unique(allsizes, return_counts=True)
        return vals, counts.double() / self.n_samples

    def node_weighted_mean_size(self) -> torch.Tensor:
        r"""Mean size of the component a uniformly drawn node belongs to,
        :math:`\sum_r n_r^2 / n`, per draw."""
        return torch.stack([(s.double() ** 2).sum() for s in self.sizes]) / self.n_nodes

    def summary(self) -> dict:
        nc = self.n_components.double()
        return {
            "n_samples": self.n_samples,
            "n_components_mean": float(nc.mean()),
            "n_components_std": float(nc.std()) if self.n_samples > 1 else 0.0,
            "n_components_min": int(nc.min()),
            "n_components_max": int(nc.max()),
            "largest_fraction_mean": float(self.largest_fraction.mean()),
            "singleton_fraction_mean": float(self.singleton_fraction.mean()),
            "node_weighted_mean_size": float(self.node_weighted_mean_size().mean()),
        }


def component_statistics(memberships: torch.Tensor) -> ComponentStatistics:
    """Statistics of CC labels ``(N, n)`` (as returned by :func:`sample_memberships`): labels
    ``>= 0``, one row per draw (``labels[None]`` for a single draw)."""
    m = memberships
    if not isinstance(m, torch.Tensor):
        m = np.asarray(m)
        if m.dtype.kind not in "iu" and m.size:
            raise TypeError(f"memberships must hold integer labels, got dtype {m.dtype}.")
    elif m.is_floating_point() or m.is_complex():
        raise TypeError(f"memberships must hold integer labels, got dtype {m.dtype}.")
    memberships = torch.as_tensor(m).to(torch.long)
    if memberships.ndim != 2 or 0 in memberships.shape:
        raise ValueError("memberships must be (n_draws, n_nodes) labels with both sizes >= 1 "
                         f"(labels[None] for one draw), got shape {tuple(memberships.shape)}.")
    if bool((memberships < 0).any()):
        raise ValueError("memberships must be labels >= 0, got negative entries.")
    sizes = [torch.sort(torch.bincount(m), descending=True).values for m in memberships]
    ncomp = torch.tensor([s.numel() for s in sizes])
    return ComponentStatistics(memberships, ncomp, sizes)


def posterior_component_statistics(law: GraphLaw, n_samples: int = 100,
                                   generator: torch.Generator | None = None
                                   ) -> ComponentStatistics:
    """Draw ``n_samples`` graphs from ``law`` and summarise their connected components."""
    return component_statistics(sample_memberships(law, n_samples, generator))


def monte_carlo_edge_mean(law: GraphLaw, n_samples: int,
                          generator: torch.Generator | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Monte Carlo mean and standard error of :math:`W_{ij}` over ``n_samples`` draws, dense
    ``(n, n)`` (for checking samplers against ``law.mean`` on small graphs)."""
    n = law.n
    s1 = torch.zeros(n, n, dtype=torch.float64)
    s2 = torch.zeros(n, n, dtype=torch.float64)
    for W in draw_graphs(law, n_samples, generator):
        D = (W.to_dense() if W.is_sparse else W).double()
        s1 += D.sum(0)
        s2 += (D * D).sum(0)
    m = s1 / n_samples
    var = (s2 / n_samples - m * m).clamp_min(0.0) * n_samples / max(n_samples - 1, 1)
    return m, torch.sqrt(var / n_samples)


# --------------------------------------------------------------------------------------------
# graph utilities
# --------------------------------------------------------------------------------------------
def laplacian(W: torch.Tensor, symmetrize: bool = True) -> torch.Tensor:
    r"""Graph Laplacian :math:`L(\bar W)` of Definition 1, with :math:`\bar W = W + W^\top` when
    ``symmetrize``. Dense or sparse in, same out (numpy in: a dense tensor)."""
    W = _check_graph(W)
    if W.is_sparse:
        W = W.coalesce()
        A = (W + W.t()).coalesce() if symmetrize else W
        deg = torch.sparse.sum(A, 1).to_dense()
        n = W.shape[0]
        idx = torch.arange(n)
        D = sparse_coo(torch.stack([idx, idx]), deg, (n, n))
        return (D - A).coalesce()
    check_dense(W.shape[0], "a dense Laplacian", "Pass a sparse graph.")
    A = W + W.T if symmetrize else W
    A = A - torch.diag(torch.diagonal(A))
    return torch.diag(A.sum(1)) - A


def connected_components(W) -> tuple[int, torch.Tensor]:
    """Connected components of the undirected graph :math:`W + W^\\top` (igraph).

    Returns ``(n_components, membership)`` with membership an ``(n,)`` long tensor.
    """
    import igraph as ig

    if not hasattr(W, "tocsr"):
        W = _check_graph(W)
    if isinstance(W, torch.Tensor):
        if W.is_sparse:
            W = W.coalesce()
            r, c = W.indices()
            keep = W.values() != 0
            edges = torch.stack([r[keep], c[keep]], 1).tolist()
        else:
            edges = torch.nonzero(W).tolist()
        n = W.shape[0]
    else:  # scipy sparse or numpy
        import scipy.sparse as sp

        S = sp.coo_matrix(W)
        edges = list(zip(S.row[S.data != 0].tolist(), S.col[S.data != 0].tolist(), strict=True))
        n = S.shape[0]
    g = ig.Graph(n=n, edges=edges, directed=False)
    memb = g.connected_components().membership
    m = torch.tensor(memb, dtype=torch.long)
    return int(m.max().item()) + 1 if n else 0, m
