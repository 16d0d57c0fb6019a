"""Portable save and load of fitted estimators, without pickle.

One ``.npz`` file holds every array as a named entry (``a0``, ``a1``, ...) and a JSON header as
the ``uint8`` entry ``__header__.json``: format and versions, the class, ``params``
(``get_params(deep=False)``), ``state`` (the other attributes of ``vars(est)``), both encoded
recursively (JSON values as themselves, anything else as a one-marker object such as
``{"__tuple__": [...]}``, ``{"__ndarray__": "a3"}`` or ``{"__object__": "module:QualName",
"state": {...}}``; an array that is a reshaped view of one already stored, such as a posterior's
``samples`` of its ``chains``, is ``{"__ndarray__": "a3", "shape": [...]}``, stored once), and a
sha256 over the canonical header and every array. :func:`load` reads it with
``np.load(..., allow_pickle=False)`` and imports only classes of ``probdr``,
``pyro.distributions`` and ``torch.distributions``.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import json
import math
import os
import platform
import secrets
import sys
import warnings
import zipfile
import zlib

import numpy as np
import torch

__all__ = ["save_estimator", "load", "ModelFileError", "FORMAT", "FORMAT_VERSION"]

FORMAT = "probdr-model"
#: the newest format version this probdr writes and reads
FORMAT_VERSION = 1
HEADER_KEY = "__header__.json"
#: modules whose classes a file may name (``probdr`` itself and its submodules, distributions)
ALLOWED_MODULES = ("probdr", "pyro.distributions", "torch.distributions")
#: Pyro guides hold the model function and parameter-store names: stored as a marker, loaded
#: as ``None`` (like the MCMC runs, which fitted estimators do not keep)
DROPPED_MODULES = ("pyro.infer.autoguide",)
#: numpy dtype kinds stored as they are (``O`` is encoded element by element, ``V`` refused)
ARRAY_KINDS = set("biufcmMSU")
MARKERS = ("__float__", "__tuple__", "__dict__", "__set__", "__frozenset__", "__complex__",
           "__ndarray__", "__object_array__", "__npscalar__", "__np_dtype__", "__tensor__",
           "__sparse_coo__", "__sparse_csr__", "__scipy_csr__", "__torch_dtype__", "__torch_size__",
           "__torch_device__", "__random_state__", "__generator__", "__object__", "__dropped__")
BIT_GENERATORS = ("MT19937", "PCG64", "PCG64DXSM", "Philox", "SFC64")


class ModelFileError(ValueError):
    """A file that is not a readable probdr model (corrupted, modified, too new, unsafe)."""


def _versions() -> dict:
    import sklearn

    probdr_version = getattr(sys.modules.get("probdr"), "__version__", None)
    if probdr_version is None:  # probdr.serialize imported on its own
        from importlib.metadata import version

        probdr_version = version("probdr")
    return {"probdr_version": probdr_version, "python": platform.python_version(),
            "numpy": np.__version__, "torch": torch.__version__.split("+")[0],
            "scikit_learn": sklearn.__version__}


def _class_name(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _module_allowed(module: str, prefixes=ALLOWED_MODULES) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


# -- encoding ----------------------------------------------------------------------------------
class _Encoder:
    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}
        self._stack: set[int] = set()
        self._shared: dict[tuple, str] = {}

    def _add(self, arr: np.ndarray, path: str, share: bool = False) -> str:
        """The key of ``arr`` in the archive. ``share``: a contiguous array whose memory an
        array already added holds whole (a reshaped view, as a posterior's ``samples`` of its
        ``chains``) gets that array's key: stored once, and read back as views of one array."""
        if arr.dtype.kind not in ARRAY_KINDS:
            raise TypeError(f"{path}: arrays of dtype {arr.dtype} cannot be saved.")
        ident = (arr.__array_interface__["data"][0], arr.nbytes, arr.dtype.str) \
            if share and arr.flags.c_contiguous and arr.nbytes else None
        if ident in self._shared:
            return self._shared[ident]
        key = f"a{len(self.arrays)}"
        self.arrays[key] = arr
        if ident is not None:
            self._shared[ident] = key
        return key

    def _ndarray(self, arr: np.ndarray, path: str) -> dict:
        key = self._add(arr, path, share=True)
        if self.arrays[key].shape == arr.shape:
            return {"__ndarray__": key}
        return {"__ndarray__": key, "shape": list(arr.shape)}  # a view of a shared array

    def _tensor(self, t: torch.Tensor, path: str) -> dict:
        t = t.detach().cpu()
        if t.layout == torch.sparse_coo:
            return {"__sparse_coo__": list(t.shape), "coalesced": bool(t.is_coalesced()),
                    "indices": self._tensor(t._indices(), path + "._indices()"),
                    "values": self._tensor(t._values(), path + "._values()")}
        if t.layout == torch.sparse_csr:
            return {"__sparse_csr__": list(t.shape),
                    "crow": self._tensor(t.crow_indices(), path + ".crow_indices()"),
                    "col": self._tensor(t.col_indices(), path + ".col_indices()"),
                    "values": self._tensor(t.values(), path + ".values()")}
        if t.layout != torch.strided:
            raise TypeError(f"{path}: torch tensors of layout {t.layout} cannot be saved.")
        t = t.resolve_conj().resolve_neg().contiguous()
        name = str(t.dtype).removeprefix("torch.")
        try:
            arr = t.detach().cpu().numpy()
        except TypeError:  # bfloat16, float8: stored as raw integers of the same width
            arr = t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32,
                          8: torch.int64}[t.element_size()]).cpu().numpy()
        return {"__tensor__": self._add(arr, path), "dtype": name}

    def encode(self, v, path: str):
        t = type(v)
        if v is None or t in (bool, int, str):
            return v
        if t is float:
            return v if np.isfinite(v) else {"__float__": repr(v)}
        if t is complex:
            return {"__complex__": [self.encode(v.real, path), self.encode(v.imag, path)]}
        if isinstance(v, np.generic) and v.dtype.kind in ARRAY_KINDS:
            return {"__npscalar__": self._add(np.asarray(v), path)}
        if isinstance(v, torch.dtype):
            return {"__torch_dtype__": str(v).removeprefix("torch.")}
        if t is torch.Size:
            return {"__torch_size__": list(v)}
        if t is torch.device:
            return {"__torch_device__": str(v)}
        if isinstance(v, np.dtype) and v.kind in ARRAY_KINDS:
            return {"__np_dtype__": v.str}
        if id(v) in self._stack:
            raise TypeError(f"{path}: a reference cycle ({t.__name__}) cannot be saved.")
        self._stack.add(id(v))
        try:
            return self._container(v, path)
        finally:
            self._stack.discard(id(v))

    def _dict(self, d: dict, path: str, attrs: bool = False):
        def sub(k):  # the path of an item, for error messages
            return f"{path}.{k}" if attrs else f"{path}[{k!r}]"

        if all(type(k) is str for k in d) and not any(m in d for m in MARKERS):
            return {k: self.encode(x, sub(k)) for k, x in d.items()}
        return {"__dict__": [[self.encode(k, f"{path}.keys()"), self.encode(x, sub(k))]
                             for k, x in d.items()]}

    def _container(self, v, path: str):
        t = type(v)
        if t is list:
            return [self.encode(x, f"{path}[{i}]") for i, x in enumerate(v)]
        if t is tuple:
            return {"__tuple__": [self.encode(x, f"{path}[{i}]") for i, x in enumerate(v)]}
        if t in (set, frozenset):
            items = [self.encode(x, f"{path}{{...}}") for x in v]
            return {"__set__" if t is set else "__frozenset__": items}
        if t is dict:
            return self._dict(v, path)
        if t is np.ndarray or t is np.memmap:
            if v.dtype.kind == "O":
                flat = [self.encode(x, f"{path}[{i}]") for i, x in enumerate(v.ravel())]
                return {"__object_array__": flat, "shape": list(v.shape)}
            return self._ndarray(np.asarray(v), path)
        if isinstance(v, torch.Tensor):
            return self._tensor(v, path)
        if _is_scipy_sparse(v):  # e.g. sparse training data: stored as CSR arrays
            import scipy.sparse as sp

            C = sp.csr_matrix(v)
            return {"__scipy_csr__": list(C.shape),
                    "data": self._add(np.asarray(C.data), path + ".data"),
                    "indices": self._add(np.asarray(C.indices), path + ".indices"),
                    "indptr": self._add(np.asarray(C.indptr), path + ".indptr")}
        if t is np.random.RandomState:
            return {"__random_state__": self.encode(v.get_state(legacy=False), path)}
        if t is np.random.Generator and type(v.bit_generator).__name__ in BIT_GENERATORS:
            return {"__generator__": type(v.bit_generator).__name__,
                    "state": self.encode(v.bit_generator.state, path)}
        if _module_allowed(t.__module__, DROPPED_MODULES):
            return {"__dropped__": _class_name(t)}
        if (_module_allowed(t.__module__) and isinstance(t, type) and "<locals>" not in
                t.__qualname__ and not isinstance(v, (type, torch.nn.Module))
                and _resolve(t.__module__, t.__qualname__) is t):
            out = {"__object__": _class_name(t),
                   "state": self._dict(_object_state(v), path, attrs=True)}
            slots = {s: getattr(v, s) for s in _slot_names(t) if hasattr(v, s)}
            if slots:
                out["slots"] = self._dict(slots, path, attrs=True)
            return out
        raise TypeError(f"{path}: values of type {t.__module__}.{t.__qualname__} cannot be saved "
                        "(supported: None, bool, int, float, complex, str, list, tuple, set, "
                        "dict, numpy arrays and scalars, torch tensors, dtypes and sizes, and "
                        "objects of probdr, pyro.distributions or torch.distributions classes).")


def _object_state(v) -> dict:
    """The attributes of ``v`` to store: its ``__getstate__()`` where its class defines one
    (e.g. leaving out what it makes again on demand), else its ``__dict__``."""
    if type(v).__getstate__ is not object.__getstate__:
        state = v.__getstate__()
        if isinstance(state, dict):
            return state
    return getattr(v, "__dict__", {})


def _slot_names(cls) -> list[str]:
    names = []
    for c in cls.__mro__:
        slots = c.__dict__.get("__slots__", ())
        for s in (slots,) if isinstance(slots, str) else slots:
            if s not in ("__dict__", "__weakref__") and s not in names:
                names.append(s)
    return names


def _resolve(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# -- decoding ----------------------------------------------------------------------------------
def _class_names(node, out: set) -> set:
    """Every class a header names, collected before anything is imported."""
    if isinstance(node, dict):
        if "__object__" in node:
            out.add(node["__object__"])
        for v in node.values():
            _class_names(v, out)
    elif isinstance(node, list):
        for v in node:
            _class_names(v, out)
    return out


def _check_class_name(name, path: str) -> tuple[str, str]:
    """``(module, qualname)`` of a class a file names, refused (before any import) unless its
    module is ``probdr``'s or a distributions module."""
    if not isinstance(name, str) or name.count(":") != 1:
        raise ModelFileError(f"{path}: malformed class name {name!r} in the header.")
    module, qualname = name.split(":")
    if not _module_allowed(module) or "<locals>" in qualname:
        raise ModelFileError(f"{path}: refusing to load the class {name!r}: only classes from "
                             f"modules {', '.join(ALLOWED_MODULES)} may be named in a probdr "
                             "file.")
    return module, qualname


def _import_class(name, path: str):
    module, qualname = _check_class_name(name, path)
    try:
        cls = _resolve(module, qualname)
    except (ImportError, AttributeError) as e:
        raise ModelFileError(f"{path}: the class {name!r} named in the file does not exist in "
                             f"this installation ({e}).") from None
    # defined there under that name (not a class another module's attribute leads to)
    if not isinstance(cls, type) or _class_name(cls) != name:
        raise ModelFileError(f"{path}: {name!r} is not a class defined in {module}.")
    return cls


class _Decoder:
    def __init__(self, arrays: dict, path: str):
        self.arrays, self.path = arrays, path

    def _array(self, key) -> np.ndarray:
        if key not in self.arrays:
            raise ModelFileError(f"{self.path}: the header names a missing array {key!r}.")
        return self.arrays[key]

    def _torch_dtype(self, name) -> torch.dtype:
        dtype = getattr(torch, name, None) if isinstance(name, str) else None
        if not isinstance(dtype, torch.dtype):
            raise ModelFileError(f"{self.path}: unknown torch dtype {name!r}.")
        return dtype

    def _tensor(self, node) -> torch.Tensor:
        arr, dtype = self._array(node["__tensor__"]), self._torch_dtype(node["dtype"])
        if not arr.dtype.isnative:  # written on a machine of the other byte order
            arr = arr.astype(arr.dtype.newbyteorder("="))
        t = torch.from_numpy(arr if arr.flags.writeable else arr.copy())
        return t if t.dtype == dtype else t.view(dtype)  # bfloat16 and float8 as raw bits

    def _ndarray(self, node) -> np.ndarray:
        arr = self._array(node["__ndarray__"])
        if "shape" not in node:
            return arr
        shape = node["shape"]
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
                and math.prod(shape) == arr.size):
            raise ModelFileError(f"{self.path}: malformed shape {shape!r} of an array view.")
        return arr.reshape(shape)

    def _object_array(self, node) -> np.ndarray:
        out = np.empty(len(node["__object_array__"]), dtype=object)
        for i, x in enumerate(node["__object_array__"]):
            out[i] = self.decode(x)
        return out.reshape(node["shape"])

    def _sparse(self, node) -> torch.Tensor:
        if "__sparse_coo__" in node:
            return torch.sparse_coo_tensor(
                self._tensor(node["indices"]), self._tensor(node["values"]),
                node["__sparse_coo__"], is_coalesced=bool(node["coalesced"]),
                check_invariants=True)  # a hand-made file cannot index out of bounds
        return torch.sparse_csr_tensor(self._tensor(node["crow"]), self._tensor(node["col"]),
                                       self._tensor(node["values"]), node["__sparse_csr__"],
                                       check_invariants=True)

    def _scipy_csr(self, node):
        import scipy.sparse as sp

        shape = tuple(int(x) for x in node["__scipy_csr__"])
        C = sp.csr_matrix((self._array(node["data"]), self._array(node["indices"]),
                           self._array(node["indptr"])), shape=shape)
        C.check_format(full_check=True)  # a hand-made file cannot index out of bounds
        return C

    def _random(self, node):
        if "__random_state__" in node:
            rs = np.random.RandomState()
            rs.set_state(self.decode(node["__random_state__"]))
            return rs
        if node["__generator__"] not in BIT_GENERATORS:
            raise ModelFileError(f"{self.path}: unknown bit generator {node['__generator__']!r}.")
        bg = getattr(np.random, node["__generator__"])()
        bg.state = self.decode(node["state"])
        return np.random.Generator(bg)

    def _object(self, node):
        obj = object.__new__(_import_class(node["__object__"], self.path))
        state = self.decode(node.get("state", {}))
        if state:  # no __init__, no __setstate__
            obj.__dict__.update(state)
        for k, v in self.decode(node.get("slots", {})).items():
            object.__setattr__(obj, k, v)
        return obj

    def decode(self, node):
        if node is None or type(node) in (bool, int, float, str):
            return node
        if type(node) is list:
            return [self.decode(x) for x in node]
        if type(node) is not dict:
            raise ModelFileError(f"{self.path}: malformed header value {node!r}.")
        marker = next((m for m in MARKERS if m in node), None)
        if marker is None:
            return {k: self.decode(v) for k, v in node.items()}
        val, dec = node[marker], self.decode
        simple = {
            "__float__": float, "__np_dtype__": np.dtype, "__torch_size__": torch.Size,
            "__torch_device__": torch.device, "__torch_dtype__": self._torch_dtype,
            "__npscalar__": lambda k: self._array(k)[()],
            "__tuple__": lambda v: tuple(map(dec, v)), "__set__": lambda v: set(map(dec, v)),
            "__frozenset__": lambda v: frozenset(map(dec, v)),
            "__complex__": lambda v: complex(dec(v[0]), dec(v[1])),
            "__dict__": lambda v: {dec(k): dec(x) for k, x in v}, "__dropped__": lambda v: None}
        if marker in simple:
            return simple[marker](val)
        return {"__ndarray__": self._ndarray, "__object_array__": self._object_array,
                "__tensor__": self._tensor,
                "__sparse_coo__": self._sparse, "__sparse_csr__": self._sparse,
                "__scipy_csr__": self._scipy_csr, "__random_state__": self._random, "__generator__": self._random,
                "__object__": self._object}[marker](node)


# -- the file ----------------------------------------------------------------------------------
def _canonical(header: dict) -> bytes:
    body = {k: v for k, v in header.items() if k != "sha256"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()


def _digest(header: dict, arrays: dict) -> str:
    """sha256 of the canonical header (without the digest) and of every array's name, dtype,
    shape and bytes, in sorted order of names."""
    h = hashlib.sha256(_canonical(header))
    for name in sorted(arrays):
        a = arrays[name]
        h.update(f"\0{name}\0{a.dtype.str}\0{list(a.shape)}\0{a.nbytes}\0".encode())
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))  # no copy if contiguous
    return h.hexdigest()


def _write(path: str, header: dict, arrays: dict) -> None:
    """Write exactly ``path``, atomically: a temporary file beside it, then ``os.replace``."""
    text = json.dumps(header, separators=(",", ":"), allow_nan=False)  # dict order kept
    blob = np.frombuffer(text.encode(), dtype=np.uint8)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{HEADER_KEY: blob}, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def save_estimator(est, path, *, include_data: bool = True) -> None:
    """Write ``est`` (parameters and fitted state) to ``path`` (exactly that name, ``.npz``
    suffix or not). A value that cannot be stored portably raises ``TypeError`` naming it."""
    path = os.fspath(path)
    cls = type(est)
    params = est.get_params(deep=False)
    skip = set() if include_data else set(getattr(cls, "_data_attributes", ()))
    state = {k: v for k, v in vars(est).items() if k not in params and k not in skip}
    for name in skip:  # "owner.attr": the fitted object owner without its attribute attr
        owner, _, attr = name.partition(".")
        if attr and hasattr(state.get(owner), attr):
            state[owner] = copy.copy(state[owner])
            setattr(state[owner], attr, None)
    enc = _Encoder()
    header = {"format": FORMAT, "format_version": FORMAT_VERSION, **_versions(),
              "class": _class_name(cls),
              "params": {k: enc.encode(v, f"params.{k}") for k, v in params.items()},
              "state": {k: enc.encode(v, f"state.{k}") for k, v in state.items()},
              "data_included": bool(include_data)}
    header["sha256"] = _digest(header, enc.arrays)
    _write(path, header, enc.arrays)


def _read(path: str) -> tuple[dict, dict]:
    with open(path, "rb") as f:  # a missing file raises FileNotFoundError as it is
        magic = f.read(4)
    if magic != b"PK\x03\x04":
        raise ModelFileError(f"{path} is not a probdr model file (not a .npz archive).")
    try:
        with np.load(path, allow_pickle=False) as npz:
            if HEADER_KEY not in npz.files:
                raise ModelFileError(f"{path} is not a probdr model file (no {HEADER_KEY}).")
            try:
                raw = npz[HEADER_KEY]
                if raw.dtype != np.uint8 or raw.ndim != 1:
                    raise ValueError(f"a {raw.dtype} array of shape {raw.shape}")
                header = json.loads(raw.tobytes().decode())
            except (ValueError, UnicodeDecodeError) as e:
                raise ModelFileError(f"{path} is not a probdr model file (unreadable "
                                     f"header: {e}).") from None
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                fmt = header.get("format") if isinstance(header, dict) else None
                raise ModelFileError(f"{path} is not a probdr model file (format {fmt!r}, "
                                     f"expected {FORMAT!r}).")
            version = header.get("format_version")
            if type(version) is not int or version < 1:
                raise ModelFileError(f"{path}: invalid format_version {version!r}.")
            if version > FORMAT_VERSION:
                raise ModelFileError(
                    f"{path} was written by a newer probdr ({header.get('probdr_version')}, "
                    f"format version {version}); this probdr ({_versions()['probdr_version']}) "
                    f"reads format version {FORMAT_VERSION} at most: upgrade probdr.")
            arrays = {}
            for name in npz.files:
                if name == HEADER_KEY:
                    continue
                try:
                    arr = npz[name]
                except ValueError as e:
                    if "pickle" in str(e):
                        raise ModelFileError(
                            f"{path}: the entry {name!r} is an object array (it would need "
                            "pickle); probdr files never contain one, so it was not loaded."
                        ) from None
                    raise
                if not isinstance(arr, np.ndarray) or arr.dtype.kind not in ARRAY_KINDS:
                    raise ModelFileError(f"{path}: unexpected entry {name!r} in the archive.")
                arrays[name] = arr
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError, ValueError) as e:
        raise ModelFileError(f"{path} is corrupted (truncated or modified) or not a probdr "
                             f"model file ({type(e).__name__}: {e}).") from None
    if header.get("sha256") != _digest(header, arrays):
        raise ModelFileError(f"{path} is corrupted or was modified after it was saved "
                             "(sha256 mismatch).")
    return header, arrays


def load(path):
    """Read an estimator written by :meth:`DREstimator.save`. Only ``np.load(...,
    allow_pickle=False)`` reads the file, and only classes from ``probdr.``,
    ``pyro.distributions`` and ``torch.distributions`` are imported."""
    path = os.fspath(path)
    header, arrays = _read(path)
    running = _versions()["probdr_version"]
    saved = str(header.get("probdr_version", "unknown"))
    if saved.split(".")[0] != running.split(".")[0]:
        warnings.warn(f"{path} was written by probdr {saved}; this is probdr {running} (another "
                      "major version): check the loaded model.", UserWarning, stacklevel=2)
    names = _class_names([header.get("params"), header.get("state")], {header.get("class")})
    for name in names:  # every class name checked before anything is imported
        _check_class_name(name, path)
    from sklearn.base import BaseEstimator

    cls = _import_class(header["class"], path)
    if not (issubclass(cls, BaseEstimator) and _module_allowed(cls.__module__, ("probdr",))):
        raise ModelFileError(f"{path}: {header['class']!r} is not a probdr estimator.")
    dec = _Decoder(arrays, path)
    try:
        params = {k: dec.decode(v) for k, v in header["params"].items()}
        state = {k: dec.decode(v) for k, v in header["state"].items()}
    except ModelFileError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        raise ModelFileError(f"{path}: malformed header ({type(e).__name__}: {e}).") from None
    try:
        est = cls(**params)
    except TypeError as e:
        raise ModelFileError(f"{path}: the saved parameters do not fit {cls.__name__} of "
                             f"this probdr ({e}).") from None
    for k, v in state.items():
        setattr(est, k, v)
    if "device_" in state:  # tensors are read onto the host: a loaded model computes there
        est.device_ = torch.device("cpu")
    return est


def _is_scipy_sparse(v) -> bool:
    mod = type(v).__module__
    if not mod.startswith("scipy.sparse"):
        return False
    import scipy.sparse as sp

    return sp.issparse(v)
