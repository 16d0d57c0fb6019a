"""A fit's state kept to the fit: Pyro's effect handlers and parameters, random streams and
Pyro's validation switch, so that fits in several threads of one process run at once and each
gives the bits it gives alone.

Pyro keeps its runtime process-wide: the stack of effect handlers that ``pyro.sample`` consults
(``pyro.poutine.runtime._PYRO_STACK``), the parameter store (``pyro.get_param_store()``) and
the allocators of plate and enumeration dimensions. Two fits in two threads would push their
traces onto one stack (``Multiple sample sites named 'Z'``), clear each other's parameters and
claim the same plate (``duplicate plate 'edges'``). :func:`private_pyro` gives the calling
thread all of these of its own for the duration of a block: the first time it runs, it puts a
thin proxy in place of Pyro's stack and turns the fields of the store and the allocators into
properties, which read the shared objects in every thread that is not inside such a block. Pyro therefore
behaves exactly as before for the user's own code, in any thread; only probdr's fits (and the
functional :func:`probdr.infer.run_map`, :func:`probdr.infer.fit_posterior`) see private state.

Random numbers: a fit draws from a ``torch.Generator`` of its own, the thread's
:func:`fit_generator` (set by :func:`fit_stream`), never from torch's global generator, so a fit
in another thread cannot shift its stream. Seeded with the fit's seed, that generator gives the
stream that ``torch.manual_seed(seed)`` gives the global one. Pyro's own samplers (an ELBO
guide's draws, NUTS's momenta) have no generator argument and draw from torch's global
generator: :func:`global_stream` runs such a block seeded, with the global state forked and
restored, under one process-wide lock (:data:`GLOBAL_STREAM_LOCK`), so that two posterior fits
take turns on it while MAP fits go on beside them.

Pyro's validation switch (argument and support checks) is process-wide: :func:`validation_off`
turns it off while any probdr loop runs and restores the setting when the last one ends (it
changes no number, only what is checked).
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import MutableSequence
from contextvars import ContextVar

import numpy as np
import torch

__all__ = ["private_pyro", "is_private", "fit_stream", "fit_generator", "global_stream",
           "GLOBAL_STREAM_LOCK", "validation_off"]


class _PrivateState:
    """One thread's Pyro state: a handler stack, and the fields of Pyro's process-wide objects
    (the parameter store's dictionaries, the plate and enumeration dimension allocators)."""

    def __init__(self):
        self.stack: list = []
        self.fields: dict = {}


_PRIVATE: ContextVar[_PrivateState | None] = ContextVar("probdr_pyro_state", default=None)
_install_lock = threading.Lock()
_installed = False


class _ThreadStack(MutableSequence):
    """Pyro's handler stack as the calling thread sees it: its private stack inside
    :func:`private_pyro`, else the process's shared list (Pyro's own, unchanged)."""

    def __init__(self, shared: list):
        self._shared = shared

    def _list(self) -> list:
        state = _PRIVATE.get()
        return self._shared if state is None else state.stack

    def __getitem__(self, i):
        return self._list()[i]

    def __setitem__(self, i, value):
        self._list()[i] = value

    def __delitem__(self, i):
        del self._list()[i]

    def __len__(self):
        return len(self._list())

    def __iter__(self):
        return iter(self._list())

    def __reversed__(self):
        return reversed(self._list())

    def __contains__(self, item):
        return item in self._list()

    def insert(self, i, value):
        self._list().insert(i, value)

    def append(self, value):
        self._list().append(value)

    def pop(self, i=-1):
        return self._list().pop(i)

    def index(self, value, *args):
        return self._list().index(value, *args)

    def __repr__(self):
        return repr(self._list())


def _private_field(key: str, name: str, factory) -> property:
    """An attribute of one of Pyro's process-wide objects: the thread's own value inside
    :func:`private_pyro` (made by ``factory`` at first use; ``None``: unset until assigned),
    else the object's (kept in its ``__dict__`` under the same name)."""

    def get(self):
        state = _PRIVATE.get()
        values = self.__dict__ if state is None else state.fields
        at = name if state is None else key
        if at not in values:
            if state is None or factory is None:
                raise AttributeError(name)
            values[at] = factory()
        return values[at]

    def set(self, value):
        state = _PRIVATE.get()
        if state is None:
            self.__dict__[name] = value
        else:
            state.fields[key] = value

    return property(get, set)


def _make_thread_aware(obj, key: str, fields: dict) -> None:
    """Give ``obj`` (one of Pyro's process-wide objects) a subclass of its class whose
    ``fields`` (``{name: factory}``) are :func:`_private_field` properties."""
    cls = type(obj)
    props = {name: _private_field(f"{key}.{name}", name, factory)
             for name, factory in fields.items()}
    obj.__class__ = type(f"Thread{cls.__name__}", (cls,), props)


def _install() -> None:
    """Put the thread-aware stack in place of Pyro's and make its parameter store and dimension
    allocators thread-aware (once per process)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        import sys

        import pyro.poutine.runtime as runtime

        shared = runtime._PYRO_STACK
        proxy = _ThreadStack(shared)
        for module in list(sys.modules.values()):  # every module that imported the list by name
            names = getattr(module, "__dict__", None) or {}
            if names.get("_PYRO_STACK") is shared:
                module._PYRO_STACK = proxy
        _make_thread_aware(runtime._PYRO_PARAM_STORE, "params",
                           {"_params": dict, "_param_to_name": dict, "_constraints": dict})
        _make_thread_aware(runtime._DIM_ALLOCATOR, "plates", {"_stack": list})
        _make_thread_aware(runtime._ENUM_ALLOCATOR, "enum",
                           {"next_available_dim": None, "next_available_id": None,
                            "dim_to_id": None})
        _installed = True


def is_private() -> bool:
    """Whether the calling thread is inside :func:`private_pyro`."""
    return _PRIVATE.get() is not None


@contextlib.contextmanager
def private_pyro():
    """Run a block with a Pyro handler stack and parameter store of the calling thread's own
    (empty at entry, dropped at exit); inside a block that already has them, a no-op."""
    if _PRIVATE.get() is not None:
        yield
        return
    _install()
    token = _PRIVATE.set(_PrivateState())
    try:
        yield
    finally:
        _PRIVATE.reset(token)


# -- random streams ----------------------------------------------------------------------------
_GENERATOR: ContextVar[torch.Generator | None] = ContextVar("probdr_generator", default=None)
#: held while a block draws from torch's, numpy's and Python's global generators
#: (:func:`global_stream`)
GLOBAL_STREAM_LOCK = threading.RLock()


def fit_generator() -> torch.Generator | None:
    """The random stream of the fit running in this thread (:func:`fit_stream`), or ``None``
    (torch's global generator) outside a fit or inside :func:`global_stream`."""
    return _GENERATOR.get()


@contextlib.contextmanager
def fit_stream(generator: torch.Generator | None):
    """Run a block whose random draws (negative samples, sampled normalisers, graph draws) come
    from ``generator``."""
    token = _GENERATOR.set(generator)
    try:
        yield generator
    finally:
        _GENERATOR.reset(token)


@contextlib.contextmanager
def global_stream(seed: int | None = None):
    """Run a block that draws from the global generators (Pyro's samplers): under
    :data:`GLOBAL_STREAM_LOCK`, with torch's (CPU and initialised CUDA devices), numpy's and
    Python's global states saved, seeded from ``seed`` (``None``: left as they are) and restored
    afterwards, also on error; inside it :func:`fit_generator` is ``None``."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with GLOBAL_STREAM_LOCK, torch.random.fork_rng(devices=devices), fit_stream(None):
        np_state, py_state = np.random.get_state(), random.getstate()
        try:
            if seed is not None:
                torch.manual_seed(int(seed))
                np.random.seed(int(seed) % 2**32)
                random.seed(int(seed))
            yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)


# -- Pyro's validation switch ------------------------------------------------------------------
_validation_lock = threading.Lock()
_validation_users = 0
_validation_saved: tuple | None = None


@contextlib.contextmanager
def validation_off():
    """Run a block with Pyro's validation off (``pyro.validation_enabled(False)``): the first
    of any concurrent blocks saves the process's setting, the last one to end restores it."""
    global _validation_users, _validation_saved
    import pyro
    from pyro import distributions as dist
    from pyro import infer, poutine

    with _validation_lock:
        if _validation_users == 0:
            _validation_saved = (dist.is_validation_enabled(), infer.is_validation_enabled(),
                                 poutine.is_validation_enabled())
            pyro.enable_validation(False)
        _validation_users += 1
    try:
        yield
    finally:
        with _validation_lock:
            _validation_users -= 1
            if _validation_users == 0:
                saved, _validation_saved = _validation_saved, None
                dist.enable_validation(saved[0])
                infer.enable_validation(saved[1])
                poutine.enable_validation(saved[2])
