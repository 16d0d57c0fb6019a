"""Helpers shared by several test modules (pytest puts this folder on ``sys.path``)."""

from __future__ import annotations

import torch
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
