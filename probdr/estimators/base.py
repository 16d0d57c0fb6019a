"""sklearn-style estimator base shared by every probdr method."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from .._utils import as_output, check_array, check_random_state, resolve_dtype, seed_everything


class DREstimator:
    """Base class: ``get_params``/``set_params`` from the ``__init__`` signature, ``fit_transform``,
    and the input checks every method shares.

    Subclasses implement ``_fit(X: torch.Tensor) -> torch.Tensor`` (the embedding, float tensor)
    and may override ``_check_params(n, p)``; ``fit`` validates input, seeds everything from
    ``random_state`` and stores ``embedding_`` (numpy) and ``random_state_`` (the seed used).
    """

    #: smallest number of samples the method accepts
    _min_samples = 3

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._param_names()}

    def set_params(self, **params) -> DREstimator:
        valid = set(self._param_names())
        for k, v in params.items():
            if k not in valid:
                raise ValueError(f"Invalid parameter {k!r} for {type(self).__name__}; "
                                 f"valid: {sorted(valid)}.")
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
        args = []
        for k in self._param_names():
            v = getattr(self, k)
            d = defaults.get(k, inspect.Parameter.empty)
            try:
                same = v is d or (not isinstance(v, (np.ndarray, torch.Tensor)) and v == d)
            except Exception:  # pragma: no cover
                same = False
            if not same:
                args.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(args)})"

    # -- shared checks ---------------------------------------------------------------------------
    def _check_input(self, X) -> torch.Tensor:
        dtype = resolve_dtype(getattr(self, "dtype", "float64"))
        Xt = check_array(X, min_samples=self._min_samples, dtype=torch.float64)
        n, p = Xt.shape
        q = getattr(self, "n_components", None)
        if q is not None:
            if not (isinstance(q, (int, np.integer)) and q >= 1):
                raise ValueError(f"n_components must be a positive integer, got {q!r}.")
            if q >= p:
                raise ValueError(f"n_components={q} must be smaller than the number of features "
                                 f"p={p}: dimensionality reduction needs q < p.")
        self._check_params(n, p)
        self._fit_dtype = dtype
        return Xt

    def _check_params(self, n: int, p: int) -> None:
        """Validate hyper-parameters against the data size (override)."""

    def _fit(self, X: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def fit(self, X, y=None) -> DREstimator:
        """Fit the model to ``X`` of shape ``(n_samples, n_features)``."""
        Xt = self._check_input(X)
        self.random_state_ = check_random_state(getattr(self, "random_state", None))
        seed_everything(self.random_state_)
        Z = self._fit(Xt)
        if not torch.isfinite(Z).all():
            raise FloatingPointError(
                f"{type(self).__name__} produced a non-finite embedding; try a smaller learning "
                "rate, float64 (dtype='float64') or another initialisation.")
        self.embedding_ = Z.detach().to(torch.float64).cpu().numpy()
        self.n_samples_, self.n_features_in_ = Xt.shape
        return self

    def fit_transform(self, X, y=None):
        """Fit and return the embedding, ``(n_samples, n_components)``; numpy in -> numpy out,
        torch in -> torch out."""
        self.fit(X, y)
        return as_output(torch.from_numpy(self.embedding_), X)
