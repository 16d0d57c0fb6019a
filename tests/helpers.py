"""Helpers shared by several test modules (pytest puts this folder on ``sys.path``)."""

from __future__ import annotations

import collections
import traceback

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class MaxNumel(TorchDispatchMode):
    """Records the largest tensor produced by any torch op inside the context."""

    def __init__(self):
        super().__init__()
        self.max = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):  # storage, not logical size, for sparse tensors
                size = t._nnz() * (t.sparse_dim() + 1) if t.is_sparse else t.numel()
                self.max = max(self.max, size)
        return out


#: tensor methods that make the host wait for the device (a value read on the host, or a result
#: whose shape depends on the data)
_SYNC_FUNCS = {torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__float__,
               torch.Tensor.__int__, torch.Tensor.__index__, torch.Tensor.tolist,
               torch.Tensor.numpy, torch.Tensor.cpu, torch.Tensor.nonzero, torch.nonzero,
               torch.Tensor.unique, torch.unique, torch.masked_select, torch.Tensor.masked_select}


def _on_device(kwargs, *names) -> bool:
    return any(isinstance((kwargs or {}).get(k), torch.Tensor) and kwargs[k].device.type != "cpu"
               for k in names)


def _is_bool_tensor(x) -> bool:
    return isinstance(x, torch.Tensor) and x.dtype == torch.bool


class HostSyncs(TorchFunctionMode):
    """Counts, while ``active``, the torch calls that would synchronise the host with a CUDA
    device: reading a value (``item``, ``bool``, ``float``, ``tolist``, ``cpu``, ``numpy``) or
    computing a shape from the data (``nonzero``, ``unique``, boolean-mask indexing), or summing
    segments whose lengths live on the device (``segment_reduce``). On a CPU
    they cost nothing, so this is how a CPU-only machine checks that a loop would not stall a
    GPU. ``calls`` maps ``(name, file:line)`` to a count."""

    def __init__(self):
        super().__init__()
        self.active = False
        self.calls: collections.Counter = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.active:
            name = getattr(func, "__name__", str(func)) if func in _SYNC_FUNCS else None
            if func is torch.segment_reduce and _on_device(kwargs, "lengths", "offsets"):
                name = "segment_reduce"  # CUDA reads the segment lengths on the host
            if func is torch.Tensor.__getitem__:
                key = args[1] if isinstance(args[1], tuple) else (args[1],)
                name = "boolean index" if any(_is_bool_tensor(k) for k in key) else None
            if name is not None:
                frame = traceback.extract_stack(limit=3)[0]
                self.calls[(name, f"{frame.filename}:{frame.lineno}")] += 1
        return func(*args, **(kwargs or {}))


def random_spd(n: int, seed: int = 0, jitter: float = 0.3) -> torch.Tensor:
    """A random symmetric positive-definite ``(n, n)`` float64 matrix, seeded."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, n, dtype=torch.float64, generator=g)
    return A @ A.T / n + jitter * torch.eye(n, dtype=torch.float64)


#: The one table of estimator cases: every public estimator with the settings of a short fit,
#: on the 150 digits of the module-level tests ("digits") and on scikit-learn's check data of
#: 10 to 30 points ("tiny"). Serialisation, scikit-learn's checks and the property tests read it;
#: tests/estimators/test_sklearn.py checks that it covers every public estimator.
ESTIMATOR_CASES = {
    "SNE": {"digits": dict(perplexity=10, n_iter=100, early_exaggeration_iter=25),
            "tiny": dict(perplexity=3, n_iter=20, early_exaggeration_iter=5)},
    "TSNE": {"digits": dict(perplexity=10, n_iter=100, early_exaggeration_iter=25),
             "tiny": dict(perplexity=3, n_iter=20, early_exaggeration_iter=5)},
    "LargeVis": {"digits": dict(perplexity=10, n_iter=20), "tiny": dict(perplexity=3, n_iter=10)},
    "UMAP": {"digits": dict(n_neighbors=10, n_epochs=20), "tiny": dict(n_neighbors=4, n_epochs=10)},
    "GraphCoupling": {"digits": dict(perplexity=10, n_iter=100, early_exaggeration_iter=25),
                      "tiny": dict(perplexity=3, n_iter=20, early_exaggeration_iter=5)},
    "WishartPCA": {"digits": dict(n_components=2, n_iter=20),
                   "tiny": dict(n_components=1, n_iter=20)},
    "ccPCA": {"digits": dict(n_components=2, perplexity=10, n_samples=5),
              "tiny": dict(n_components=1, perplexity=3, n_samples=5)},
    "LaplacianWishart": {"digits": dict(n_neighbors=10, n_iter=5),
                         "tiny": dict(n_neighbors=3, n_iter=5)},
    "WishartEigenmaps": {"digits": dict(n_neighbors=10, n_iter=20),
                         "tiny": dict(n_neighbors=3, n_iter=20)},
    "SNEkhorn": {"digits": dict(perplexity=10, n_iter=10), "tiny": dict(perplexity=3, n_iter=10)},
    "TSNEkhorn": {"digits": dict(perplexity=10, n_iter=100, early_exaggeration_iter=25),
                  "tiny": dict(perplexity=3, n_iter=20, early_exaggeration_iter=5)},
    "DistR": {"digits": dict(n_prototypes=5, perplexity=10, n_outer=3),
              "tiny": dict(n_prototypes=3, perplexity=3, n_outer=3)},
    "GWMDS": {"digits": dict(n_iter=5), "tiny": dict(n_iter=5)},
    "ProbDR": {"digits": dict(n_neighbors=10, n_iter=10), "tiny": dict(n_neighbors=3, n_iter=10)},
}

