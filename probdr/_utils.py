"""Input validation, random state and tensor conversion shared by every public entry point."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}.") from None


def check_array(
    X: Any,
    *,
    name: str = "X",
    min_samples: int = 2,
    min_features: int = 1,
    dtype: torch.dtype | None = torch.float64,
    nonnegative: bool = False,
    square: bool = False,
    shape: str = "(n_samples, n_features)",
) -> torch.Tensor:
    """Validate a 2-D finite numeric array (numpy, torch or a nested list) and return it as a
    contiguous torch tensor of ``dtype`` (``None``: a floating tensor keeps its dtype, and its
    device; other input becomes float64). ``nonnegative``: no entry below 0 (distances);
    ``square``: ``(n, n)``.

    Raises ``TypeError`` (not numeric) or ``ValueError`` (shape, emptiness, NaN/inf, negative
    entries) with a message that names the argument, before any work.
    """
    if isinstance(X, torch.Tensor):
        if X.is_complex():
            raise ValueError(f"{name} is complex; probdr needs real data.")
        T = X.detach()
    else:
        try:
            arr = np.asarray(X)
        except Exception as exc:  # pragma: no cover - exotic inputs
            raise TypeError(f"{name} could not be converted to an array: {exc}") from exc
        if np.iscomplexobj(arr):
            raise ValueError(f"{name} is complex; probdr needs real data (take .real or abs "
                             "yourself if that is what you mean).")
        if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
            raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}.")
        T = torch.from_numpy(np.ascontiguousarray(arr))
    if T.ndim != 2:
        hint = " Reshape 1-D data with X.reshape(-1, 1)." if name == "X" and T.ndim == 1 else ""
        raise ValueError(f"{name} must be a 2-D array of shape {shape}, got {T.ndim}-D input of "
                         f"shape {tuple(T.shape)}.{hint}")
    n, p = T.shape
    if n == 0 or p == 0:
        raise ValueError(f"{name} is empty: shape {tuple(T.shape)}.")
    if square and n != p:
        raise ValueError(f"{name} must be square (n, n), got shape {tuple(T.shape)}.")
    if n < min_samples:
        raise ValueError(f"{name} has {n} samples; at least {min_samples} are needed.")
    if p < min_features:
        raise ValueError(f"{name} has {p} features; at least {min_features} are needed.")
    if dtype is None:
        dtype = T.dtype if T.is_floating_point() else torch.float64
    T = T.to(dtype)
    if not torch.isfinite(T).all():
        bad = (~torch.isfinite(T)).sum().item()
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s); remove or impute them.")
    if nonnegative and bool((T < 0).any()):
        raise ValueError(f"{name} has negative entries (min {T.min().item():.3g}); it must hold "
                         "squared distances or weights, all >= 0.")
    return T.contiguous()


def check_data(X: Any, name: str = "X", min_samples: int = 2) -> Any:
    """Data rows for a function of the modelling layer: a dense array (numpy, torch or a list)
    is checked by :func:`check_array` and returned as a tensor of its own floating dtype and
    device; a sparse matrix (scipy or torch) is passed through for the caller's sparse path."""
    if hasattr(X, "tocsr") or getattr(X, "is_sparse", False):
        return X
    return check_array(X, name=name, min_samples=min_samples, dtype=None)


def check_number(x: Any, name: str, *, integer: bool = False, low: float | None = None,
                 high: float | None = None, low_open: bool = False,
                 high_open: bool = False) -> int | float:
    """A real (or, with ``integer``, an integral) finite number in the given range, as a Python
    number: numpy scalars and 0-dim arrays are numbers too, booleans and strings are not.
    ``TypeError`` for a wrong type, ``ValueError`` out of range, each naming ``name``."""
    import numbers

    if isinstance(x, (np.ndarray, torch.Tensor)) and x.ndim == 0:
        x = x.item()
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, kind):
        raise TypeError(f"{name} must be {'an integer' if integer else 'a real number'}, got "
                        f"{x!r} of type {type(x).__name__}.")
    x = int(x) if integer else float(x)
    if not np.isfinite(x):
        raise ValueError(f"{name} must be finite, got {x!r}.")
    below = low is not None and (x <= low if low_open else x < low)
    above = high is not None and (x >= high if high_open else x > high)
    if below or above:
        lo = "" if low is None else f"{'(' if low_open else '['}{low}, "
        hi = "inf)" if high is None else f"{high}{')' if high_open else ']'}"
        lo = lo or "(-inf, "
        raise ValueError(f"{name} must lie in {lo}{hi}, got {x!r}.")
    return x


def as_output(Z: torch.Tensor, like: Any) -> Any:
    """numpy in -> numpy out, torch in -> torch out."""
    if isinstance(like, torch.Tensor):
        return Z.detach().to(like.dtype if like.is_floating_point() else Z.dtype)
    return Z.detach().cpu().numpy()


def dense_bytes(n: int, dtype: torch.dtype = torch.float32, copies: int = 1) -> int:
    return n * n * torch.empty((), dtype=dtype).element_size() * copies


def check_dense_budget(n: int, budget_gb: float | None, what: str, alternative: str) -> None:
    """Fail before heavy work if an n x n computation would exceed the memory budget."""
    if budget_gb is None:
        return
    need = dense_bytes(n, torch.float64, copies=1) / 2**30
    if need > budget_gb:
        raise MemoryError(
            f"{what} needs an n x n matrix ({n} x {n}, {need:.2f} GiB in float64), more than the "
            f"memory budget of {budget_gb:.2f} GiB. {alternative}"
        )


def _without_view_bases(out):
    """``out`` with each tensor that is a view (``_base`` set) and needs no gradient replaced by
    its ``detach()`` (the same memory, no copy). A view holds its base in C++: a view of a
    tensor kept in that tensor's own attributes (``W.values()`` cached on a sparse ``W``) would
    make a cycle that Python's garbage collector cannot see, and the tensor and its caches would
    outlive every fit that made them."""
    if isinstance(out, torch.Tensor):
        return out.detach() if out._base is not None and not out.requires_grad else out
    if isinstance(out, tuple):
        items = [_without_view_bases(o) for o in out]
        return type(out)(*items) if hasattr(out, "_fields") else tuple(items)
    if isinstance(out, list):
        return [_without_view_bases(o) for o in out]
    return out


def tensor_cache(value: torch.Tensor, name: str, compute):
    """Per-tensor cache for quantities of a tensor that is reused across optimisation steps
    (an observed graph, an edge index): stored as an attribute of the tensor, recomputed when
    the tensor was modified in place (its version counter changed)."""
    hit = getattr(value, name, None)
    version = value._version
    if hit is not None and hit[0] == version:
        return hit[1]
    out = _without_view_bases(compute())
    try:
        setattr(value, name, (version, out))
    except (AttributeError, RuntimeError):  # pragma: no cover - tensors accept attributes
        pass
    return out


@contextmanager
def one_thread():
    """Run a block on one intra-op thread of torch (restored after). torch splits a reduction
    of a long tensor to one number (``sum``, ``dot``) and LAPACK calls into one chunk per
    thread, so their last bits depend on the thread count; on one thread they are the numbers
    of ``n_jobs=1`` whatever the count outside. Toggling costs about a microsecond."""
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def fixed_sum(x: torch.Tensor, **kwargs) -> torch.Tensor:
    """``x.sum(**kwargs)`` whose rounding does not depend on torch's thread count: on the CPU
    the one-thread sum (:func:`one_thread`); elsewhere torch's."""
    if x.device.type != "cpu":
        return x.sum(**kwargs)
    with one_thread():
        return x.sum(**kwargs)


#: the values ``device=`` accepts besides a ``torch.device`` or a device string
DEVICE_HELP = ('"auto" (CUDA if available, else CPU), "cpu", "cuda", "cuda:N", "mps" or a '
               "torch.device")


def resolve_device(device) -> torch.device:
    """The ``torch.device`` of ``device=``: ``"auto"`` (or ``None``) is a CUDA device if one is
    available (the local rank's under torch's launcher, else the first), else the CPU; ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"`` or a
    ``torch.device`` are taken as they are, after checking that this process can use them.
    Raises ``ValueError`` for an unknown name and ``RuntimeError`` for a device that is absent,
    before any work."""
    if device is None or (isinstance(device, str) and device == "auto"):
        if not torch.cuda.is_available():
            return torch.device("cpu")
        import os  # one GPU per local rank under torch's launcher (LOCAL_RANK), else the first

        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))
                            % torch.cuda.device_count())
    if not isinstance(device, (str, torch.device)):
        raise ValueError(f"device must be {DEVICE_HELP}; got {device!r}.")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device must be {DEVICE_HELP}; got {device!r}.") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device={device!r}: this torch build sees no CUDA device "
                               f"(torch {torch.__version__}); use device='cpu' or 'auto'.")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise RuntimeError(f"device={device!r}: only {count} CUDA device(s) are visible.")
    elif dev.type == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise RuntimeError(f"device={device!r}: MPS is not available on this machine; use "
                               "device='cpu' or 'auto'.")
    elif dev.type != "cpu":
        raise ValueError(f"device must be {DEVICE_HELP}; got {device!r}.")
    return dev


def device_context(device: torch.device):
    """A context in which torch's factory functions (``zeros``, ``arange``, ``rand``,
    ``as_tensor``, ...) create tensors on ``device`` (``torch.device`` as a context manager), so
    that every tensor of a fit lives there without a device argument at each call. On the CPU it
    is a no-op (no per-operation dispatch cost)."""
    import contextlib

    if device.type == "cpu":
        return contextlib.nullcontext()
    return torch.device(device)


def generator(seed: int) -> torch.Generator:
    """A ``torch.Generator`` seeded with ``seed`` on the current default device (the fit's device
    inside :func:`device_context`): random draws of a fit are made where its tensors live. The
    CPU stream is the one of ``torch.Generator().manual_seed(seed)``."""
    return torch.Generator(device=torch.get_default_device()).manual_seed(int(seed))
