"""The scikit-learn base of every probdr estimator.

:class:`DREstimator` is a real :class:`sklearn.base.BaseEstimator` (parameters from the
``__init__`` signature, ``clone``, nested ``set_params``, tags, ``check_is_fitted``), with
``fit_transform``, ``get_feature_names_out`` and ``set_output`` from scikit-learn's mixins, the
parameters validated by scikit-learn's machinery (``_parameter_constraints`` checked by
``_fit_context`` when ``fit`` starts; :mod:`probdr.estimators.params`), input validation by
:func:`sklearn.utils.validation.validate_data`, and a ``fit`` that touches no global state: it
runs with a Pyro handler stack and parameter store of its own and draws from a random stream of
its own seeded from ``random_state``, so that fits in several threads of one process run at once
(:mod:`probdr._compute.isolation`).
"""

from __future__ import annotations

import contextlib
import secrets

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.utils._available_if import _AvailableIfDescriptor, available_if
from sklearn.utils.validation import check_is_fitted, validate_data

from .._compute.isolation import fit_stream, private_pyro
from .._compute.threads import governed
from .._utils import as_output, device_context, generator, resolve_device, resolve_dtype
from ..infer.map import fit_callbacks
from .params import MAX_SEED, InvalidParameterError, constraints_for
from .tables import check_table, reword_nonfinite

__all__ = ["DREstimator", "resolve_seed", "resolve_n_jobs", "thread_limit", "fit_environment",
           "isolated_random_state", "unavailable_because"]


def resolve_seed(random_state) -> int:
    """An integer seed from ``random_state``: an int in ``[0, 2**32 - 1]`` is used as it is; a
    ``numpy.random.RandomState`` or ``numpy.random.Generator`` gives one draw; ``None`` takes
    fresh entropy from the operating system (numpy's global generator is not touched)."""
    if random_state is None:
        return secrets.randbits(31)
    if isinstance(random_state, (bool, np.bool_)):
        raise TypeError("random_state must be None, an int, a numpy RandomState or Generator; "
                        f"got the bool {random_state!r}.")
    if isinstance(random_state, (int, np.integer)):
        if not 0 <= int(random_state) <= MAX_SEED:
            raise ValueError(f"random_state must lie in [0, 2**32 - 1], got {random_state}.")
        return int(random_state)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(np.iinfo(np.int32).max))
    raise TypeError("random_state must be None, an int, a numpy RandomState or Generator; got "
                    f"{type(random_state).__name__}.")


def resolve_n_jobs(n_jobs) -> int | None:
    """Threads for ``n_jobs``: ``None`` keeps the process's setting (torch's default is every
    core); a positive int is that many; ``-1`` every core this process may use, ``-2`` all but
    one, ... (scikit-learn's convention). Raises ``ValueError`` on 0 or a non-integer."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, (bool, np.bool_)) or not isinstance(n_jobs, (int, np.integer)) \
            or n_jobs == 0:
        raise ValueError(f"n_jobs must be None, a positive integer or a negative one (-1: all "
                         f"cores), got {n_jobs!r}.")
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = max(1, int(cores or 1))
    return int(n_jobs) if n_jobs > 0 else max(1, cores + 1 + int(n_jobs))


@contextlib.contextmanager
def thread_limit(n_jobs):
    """Run a block on at most ``n_jobs`` threads of torch (:func:`resolve_n_jobs`; ``None``: the
    process's setting), fewer while other processes hold cores
    (:func:`probdr._compute.threads.governed`), restored afterwards, also on error."""
    with governed(resolve_n_jobs(n_jobs)):
        yield


@contextlib.contextmanager
def fit_environment(est):
    """Where an estimator computes: torch's thread count (``n_threads_``, resolved from
    ``n_jobs`` once in ``fit``; before a fit, ``n_jobs``; :func:`thread_limit`) and its device
    (``device_`` once fitted, else ``device``) as the default device of torch's factory
    functions (:func:`probdr._utils.device_context`); both restored afterwards. New points are
    placed with the fit's threads and device."""
    dev = getattr(est, "device_", None)
    if dev is None:
        dev = resolve_device(getattr(est, "device", "cpu"))
    threads = getattr(est, "n_threads_", None)
    with thread_limit(threads if threads is not None else getattr(est, "n_jobs", None)), \
            device_context(dev):
        yield dev


def in_fit_environment(method):
    """Decorate an estimator method (``transform``, ...) to run in its
    :func:`fit_environment`: the fit's threads and device."""
    import functools

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with fit_environment(self):
            return method(self, *args, **kwargs)
    return wrapper


@contextlib.contextmanager
def isolated_random_state(seed: int):
    """Run a block with a Pyro handler stack and parameter store of the thread's own
    (:func:`probdr._compute.isolation.private_pyro`) and its random draws from a generator of its
    own seeded with ``seed`` (on the default device: the fit's), the stream that
    ``torch.manual_seed(seed)`` gives torch's global generator. The global generators are not
    touched, so fits in other threads do not shift this one's stream."""
    with private_pyro(), fit_stream(generator(seed)):
        yield


#: the largest entry of X below which its squared distances and their sums lose their digits to
#: float64's underflow (within a factor 1e16 of the smallest normal number, about 1.5e-146)
TINY_ENTRY = float(np.sqrt(np.finfo(np.float64).tiny * 1e16))


def _check_magnitude(X) -> None:
    """Refuse data whose Gram and distance sums come within a factor 1e6 of float64's largest
    number (entries near 1e150), which would end in a failed Cholesky or a NaN far from the
    cause, and data whose squared distances come near float64's underflow (every entry below
    :data:`TINY_ENTRY`, but not all zero: coinciding points are data)."""
    if not isinstance(X, torch.Tensor) or X.numel() == 0 or X.is_sparse:
        return
    top = float(X.abs().max())
    if not top * top * X.shape[0] * X.shape[1] < np.finfo(np.float64).max / 1e6:
        raise ValueError(f"X has entries up to {top:.3g}: its squared distances come too close "
                         "to float64's limit. Rescale X (for example with sklearn's StandardScaler).")
    if 0 < top < TINY_ENTRY:
        raise ValueError(f"X has entries of at most {top:.3g}: its squared distances come too "
                         "close to float64's underflow. Rescale X (for example with sklearn's "
                         "StandardScaler).")


class DREstimator(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Base class of the probdr estimators.

    Subclasses store their parameters in ``__init__`` (one assignment each) and nothing else,
    keep fixed choices as class attributes, and implement ``_fit(X: torch.Tensor, y=None) ->
    torch.Tensor`` (the embedding; ``y`` the labels that ``_check_labels`` validated, ``None``
    where the estimator uses none). ``fit`` checks the parameters before any work, in three
    steps (:mod:`probdr.estimators.params`): each parameter against its declared constraint
    (scikit-learn's ``_validate_params``, run by ``_fit_context``), then
    ``_check_params_together()`` (relations between parameters; no data), then, once ``X`` is
    validated, ``_check_params_vs_input(n, p)`` (the rules that need the data); subclasses
    override the two hooks (a graph coupling checks its data rules where it resolves its
    configuration for the data, at the start of its ``_fit``, before any work). ``fit`` resolves ``random_state`` to the integer ``random_state_``
    and stores ``embedding_`` (numpy, float64), ``n_features_in_`` (and ``feature_names_in_``
    for a DataFrame) and ``n_samples_``.
    """

    #: smallest number of samples the method accepts
    _min_samples = 3
    #: the method keeps at most as many components as features (PCA-like methods)
    _components_at_most_features = False
    #: ``fit`` keeps the training data as ``_X_fit`` (what ``transform`` needs)
    _keeps_training_data = False
    #: ``fit`` accepts scipy sparse X (CSR/CSC; the input side never densifies it)
    _accepts_sparse = False
    #: named initialisations that need dense X (with one of them sparse X is refused)
    _dense_inits: tuple[str, ...] = ()
    #: constraints that differ from the shared table (:data:`probdr.estimators.params.TABLE`)
    _constraint_overrides: dict = {}
    _parameter_constraints: dict = {}

    def __init_subclass__(cls, **kwargs):
        # a ``transform`` declared with scikit-learn's ``available_if`` in the class body: the
        # set_output wrapper goes inside the availability check (it would otherwise replace
        # the descriptor by a plain function, and ``hasattr(est, "transform")`` be always True)
        declared = cls.__dict__.get("transform")
        if isinstance(declared, _AvailableIfDescriptor):
            cls.transform = declared.fn
        super().__init_subclass__(**kwargs)
        if isinstance(declared, _AvailableIfDescriptor):
            cls.transform = available_if(declared.check)(cls.__dict__["transform"])
        cls._parameter_constraints = constraints_for(cls)
        _wrap_mixin_transform(cls)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.transformer_tags.preserves_dtype = []
        tags.input_tags.sparse = self._sparse_ok()
        return tags

    @property
    def _n_features_out(self) -> int:
        return self.embedding_.shape[1]

    # -- shared checks ---------------------------------------------------------------------------
    def _sparse_ok(self) -> bool:
        """Whether this configuration takes scipy sparse X: the class does
        (``_accepts_sparse``) and ``init`` names none of its ``_dense_inits``."""
        init = getattr(self, "init", None)
        return self._accepts_sparse and not (isinstance(init, str) and init in self._dense_inits)

    def _takes_graph_law(self) -> bool:
        """Whether this configuration takes a :class:`~probdr.laws.graph.GraphLaw` as X, the
        input graph itself (override)."""
        return False

    def _validate_X(self, X):
        """scikit-learn's validation (2-D, finite, numeric, not complex, enough samples), then a
        float64 tensor; a scipy sparse matrix (where the estimator takes one) stays sparse, as
        float64 CSR; a graph law (where the estimator takes one) as it is, its nodes counted as
        the features."""
        import scipy.sparse as sp

        from ..laws.graph import GraphLaw

        if isinstance(X, GraphLaw) and self._takes_graph_law():
            self.n_features_in_ = X.n
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            return X
        if sp.issparse(X) or (isinstance(X, torch.Tensor) and X.is_sparse):
            if not self._sparse_ok():
                raise TypeError(
                    f"{type(self).__name__} does not take sparse X with these parameters; "
                    "pass a dense array (X.toarray()), or use an estimator of the graph-coupling "
                    "family (SNE, TSNE, LargeVis, UMAP, GraphCoupling), which takes sparse input.")
            if isinstance(X, torch.Tensor):
                X = _torch_sparse_to_scipy(X)
            A = validate_data(self, X, accept_sparse=["csr", "csc", "coo"], dtype=np.float64,
                              ensure_min_samples=self._min_samples, reset=True)
            return sp.csr_matrix(A)
        data = X.detach().cpu().numpy() if isinstance(X, torch.Tensor) else X
        if hasattr(data, "columns"):  # a DataFrame: name its bad columns
            check_table(data, type(self).__name__)
        try:
            A = validate_data(self, data, accept_sparse=False, dtype=np.float64,
                              ensure_min_samples=self._min_samples, reset=True)
        except ValueError as exc:
            raise reword_nonfinite(exc, type(self).__name__) from None
        if not A.flags.writeable:  # a read-only memmap: torch needs writable memory
            A = A.copy()
        return torch.from_numpy(np.ascontiguousarray(A))

    def _check_n_components(self, p: int) -> None:
        """``n_components <= p`` for the PCA-like methods (its type and range: the table)."""
        q = self.n_components
        if self._components_at_most_features and q > p:
            raise ValueError(f"n_components={q} must be at most the number of features p={p} "
                             f"for {type(self).__name__}.")

    def _check_params_together(self) -> None:
        """The data-independent rules the constraint table cannot state: relations between
        parameters, the contents of array parameters (here: an ``init`` array holds finite
        numbers, 2-D; its shape against the data is :meth:`_check_init_shape`'s). Runs after the
        table, before ``X`` is looked at; raises ``InvalidParameterError`` (override, calling
        ``super()``)."""
        init = getattr(self, "init", None)
        if init is None or isinstance(init, str):
            return
        a = np.asarray(init.detach().cpu() if hasattr(init, "detach") else init)
        if a.ndim != 2 or not np.issubdtype(a.dtype, np.number) or not np.isfinite(a).all():
            raise InvalidParameterError(
                f"init must name a method or be a 2-D array of finite numbers, got an array of "
                f"shape {a.shape} and dtype {a.dtype}"
                f"{' with NaN or inf' if a.dtype.kind in 'fc' else ''}.")

    def _check_params_vs_input(self, n: int, p: int):
        """The rules that depend on the data: ``n`` samples, ``p`` features, the kind of X
        (override). Every data-independent rule lives in the constraint table or in
        :meth:`_check_params_together`. Returns the input side checked against the data (an
        :class:`~probdr.input.InputGraph`, which ``fit`` keeps as ``input_``), or ``None``
        for an estimator without one; sets nothing."""
        return None

    def _check_init_shape(self, n: int) -> None:
        """An ``init`` array has one row per sample and ``n_components`` columns (an estimator
        whose ``init`` is of another shape overrides this); before any work."""
        init = getattr(self, "init", None)
        if init is None or isinstance(init, str):
            return
        shape = tuple(init.shape) if hasattr(init, "shape") else np.shape(init)
        if shape != (n, self.n_components):
            raise InvalidParameterError(f"init array must have shape ({n}, "
                                        f"{self.n_components}), got {shape}.")

    def _fit(self, X: torch.Tensor, y=None) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def _keeps_data_now(self) -> bool:
        """Whether this fit keeps its X for ``transform`` (not a precomputed matrix)."""
        return True

    def _check_labels(self, y, n: int):
        """Validate ``y`` for a supervised fit (override); ``None`` where the estimator does
        not use labels (``_fit`` then gets ``y=None``)."""
        return None

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None):
        """Fit the model to ``X`` of shape ``(n_samples, n_features)``. ``y``: labels, used by
        the estimators that support supervision (the graph-coupling family, ``target_weight``);
        ignored by the others."""
        # _fit_context has checked every parameter against its constraint: no work done yet
        self._check_params_together()
        callback = self._callback()
        self.device_ = resolve_device(getattr(self, "device", "cpu"))  # a bad device, too
        self.n_threads_ = resolve_n_jobs(getattr(self, "n_jobs", None))
        Xt = self._validate_X(X)
        from ..laws.graph import GraphLaw

        n, p = (Xt.n, Xt.n) if isinstance(Xt, GraphLaw) else Xt.shape  # a law: n nodes
        _check_magnitude(Xt)
        self._check_n_components(p)
        self._fit_dtype = resolve_dtype(getattr(self, "dtype", "float64"))
        side = self._check_params_vs_input(n, p)
        if side is not None:
            self.input_ = side
        self._check_init_shape(n)
        labels = self._check_labels(y, n) if y is not None else None
        self.random_state_ = resolve_seed(self.random_state)
        with fit_environment(self) as device, \
                isolated_random_state(self.random_state_), \
                fit_callbacks(callback, getattr(self, "callbacks_every", 50)):
            if isinstance(Xt, torch.Tensor):
                Xt = Xt.to(device)
            Z = self._fit(Xt, labels)
        if not torch.isfinite(Z).all():
            raise FloatingPointError(
                f"{type(self).__name__} produced a non-finite embedding; try a smaller learning "
                "rate, float64 (dtype='float64') or another initialisation.")
        self.embedding_ = Z.detach().to(torch.float64).cpu().numpy()
        self.n_samples_ = n
        if self._keeps_training_data and self._keeps_data_now():
            self._X_fit = Xt if sp.issparse(Xt) else Xt.cpu().numpy()
        with fit_environment(self):
            self._after_fit()
        return self

    def _callback(self):
        """One callable from the ``callbacks`` parameter (a callable or a list of them; all are
        called, and the fit stops if any returns True), checked before any work (the type of
        ``callbacks`` and ``callbacks_every``: the table; here, the items of a list); ``None``
        if the estimator has no callbacks."""
        cbs = getattr(self, "callbacks", None)
        if cbs is None:
            return None
        cbs = list(cbs) if isinstance(cbs, (list, tuple)) else [cbs]
        bad = [c for c in cbs if not callable(c)]
        if bad:
            raise InvalidParameterError(
                f"The 'callbacks' parameter of {type(self).__name__} must be a callable or a "
                f"list of callables (step, embedding, loss) -> bool; got the item {bad[0]!r}.")

        def callback(step, Z, loss) -> bool:
            stop = False
            for c in cbs:
                stop = bool(c(step, Z, loss)) or stop
            return stop

        return callback

    def _after_fit(self) -> None:
        """Called at the end of ``fit``, once ``embedding_`` is set (override)."""

    def fit_transform(self, X, y=None, **fit_params):
        """Fit and return the embedding, ``(n_samples, n_components)``: numpy in -> numpy out,
        torch in -> torch out (on its device)."""
        self.fit(X, y, **fit_params)
        return self._output(torch.from_numpy(self.embedding_), X)

    def _check_fitted(self) -> None:
        check_is_fitted(self, "embedding_")

    # -- new points ------------------------------------------------------------------------------
    def _validate_new(self, X):
        """Validate new points against the fit (fitted, same number and names of features,
        finite, numeric) before any work; a float64 tensor (float64 CSR for sparse input,
        where the fit took sparse input)."""
        self._check_fitted()
        if sp.issparse(X) or (isinstance(X, torch.Tensor) and X.is_sparse):
            if not self._sparse_ok():
                raise TypeError(f"{type(self).__name__} does not take sparse X with these "
                                "parameters; pass a dense array.")
            if isinstance(X, torch.Tensor):
                X = _torch_sparse_to_scipy(X)
            A = validate_data(self, X, accept_sparse=["csr", "csc", "coo"], dtype=np.float64,
                              reset=False, ensure_min_samples=1)
            return sp.csr_matrix(A)
        data = X.detach().cpu().numpy() if isinstance(X, torch.Tensor) else X
        if hasattr(data, "columns"):  # a DataFrame: name its bad columns
            check_table(data, type(self).__name__)
        try:
            A = validate_data(self, data, accept_sparse=False, dtype=np.float64, reset=False,
                              ensure_min_samples=1)
        except ValueError as exc:
            raise reword_nonfinite(exc, type(self).__name__) from None
        # as_tensor: on the default device (the fit's, inside ``fit_environment``)
        return torch.as_tensor(np.array(A, dtype=np.float64, order="C", copy=True))

    def _make_input(self):
        """The estimator's input side, unfitted (:class:`probdr.input.InputGraph`), from its
        parameters: the one place where they reach the input side (override)."""
        raise NotImplementedError

    def _fitted_input(self):
        """The fitted input side (``input_``): the calibration and the reference points that
        new points are placed against. A model saved by probdr 0.1.0 has none; it is rebuilt
        from the parameters and the training data kept then (``_X_fit``), at each call (not
        stored: no getter writes a fitted attribute)."""
        self._check_fitted()
        side = getattr(self, "input_", None)
        if side is None:
            side = self._make_input().check(self.n_samples_, self.n_features_in_)
            X = getattr(self, "_X_fit", None)
            side.n_ = int(self.n_samples_)
            if X is not None:
                side.reference(X if sp.issparse(X) else torch.as_tensor(X))
        return side

    @staticmethod
    def _output(Z: torch.Tensor, X):
        """numpy in -> numpy out (float64); torch in -> torch out on the input's device."""
        Z = Z.detach().to(torch.float64).cpu()
        if isinstance(X, torch.Tensor):
            return as_output(Z, X).to(X.device)
        return Z.cpu().numpy()

    # -- persistence -----------------------------------------------------------------------------
    #: fitted attributes that hold training data (what ``transform`` needs), an attribute of
    #: a fitted attribute written with a dot; ``save(..., include_data=False)`` leaves them out
    _data_attributes: tuple[str, ...] = ("_X_fit", "input_._X")

    def save(self, path, *, include_data: bool = True) -> None:
        """Write the estimator (parameters and fitted state) to ``path`` in probdr's portable
        format: arrays in a ``.npz`` container and a JSON header with the parameters and the
        versions; no pickle, so :func:`probdr.load` never executes code from the file.
        ``include_data=False`` leaves out the training data (``transform`` then raises)."""
        from ..serialize import save_estimator

        save_estimator(self, path, include_data=include_data)


def _torch_sparse_to_scipy(X: torch.Tensor):
    """A torch sparse tensor (COO or CSR) as a scipy CSR matrix (float64, on the host)."""
    C = X.detach().cpu().to_sparse_coo().coalesce()
    (r, c), v = C.indices().cpu().numpy(), C.values().double().cpu().numpy()
    return sp.csr_matrix((v, (r, c)), shape=tuple(C.shape))


def _wrap_mixin_transform(cls) -> None:
    """Honour ``set_output`` in a ``transform`` that ``cls`` inherits from a plain mixin:
    scikit-learn wraps only the methods written in the classes of its ``_SetOutputMixin``."""
    from sklearn.utils._set_output import _SetOutputMixin, _wrap_method_output

    owner = next((k for k in cls.__mro__ if "transform" in vars(k)), None)
    if owner is not None and not issubclass(owner, _SetOutputMixin):
        cls.transform = _wrap_method_output(vars(owner)["transform"], "transform")


def unavailable_because(reason):
    """A check for scikit-learn's ``available_if`` from ``reason(est)``, the reason why the
    method does not apply to ``est`` (``None`` where it does): declared in the class body,
    ``@available_if(unavailable_because(reason))``, the method exists only where the reason is
    ``None``; otherwise accessing it raises an ``AttributeError`` whose cause says why
    (``hasattr(est, "transform")`` is then False, as scikit-learn's meta-estimators expect)."""

    def check(est) -> bool:
        why = reason(est)
        if why is not None:
            raise AttributeError(why)
        return True

    return check
