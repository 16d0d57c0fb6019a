"""Portable save and load of fitted estimators (placeholder: being written)."""

from __future__ import annotations

__all__ = ["save_estimator", "load"]


def save_estimator(est, path, *, include_data: bool = True) -> None:
    raise NotImplementedError


def load(path):
    raise NotImplementedError
