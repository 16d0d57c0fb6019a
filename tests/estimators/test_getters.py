"""No estimator method but ``fit`` and its steps sets a fitted attribute: getters of the
configuration (``_make_kernel``, ``_epoch_steps``, ``_latent_prior``, ...), checks, and the
after-fit verbs (``transform``, ``loss``, ...) leave ``vars(est)`` as they found it, on an
unfitted and on a fitted estimator.

Every method whose required arguments this test can supply (the data's sizes ``n`` and ``p``, new
points ``X``, an embedding ``Z``) is called; an error raised is fine (an unfitted estimator
refuses ``transform``), a changed attribute is not."""

import inspect
import warnings

import numpy as np
import pytest
from helpers import ESTIMATOR_CASES

import probdr

#: methods that are steps of ``fit`` or continue it by design: the names ``fit*``/``_fit*``,
#: ``optimize`` (more MAP steps: it updates ``embedding_``), scikit-learn's validation of the
#: training data (``validate_data(reset=True)`` sets ``n_features_in_``), the end-of-fit hook,
#: and the setters of parameters and output
FIT_STEPS = ("fit", "_fit", "optimize", "_validate_X", "_after_fit", "set_", "__")

N, P = 60, 64


def _arguments(method, est, X_new):
    """The required arguments of ``method`` that this test can supply, or ``None``."""
    known = {"n": N, "p": P, "X": X_new, "Z": getattr(est, "embedding_", np.zeros((N, 2)))}
    args = {}
    for name, prm in list(inspect.signature(method).parameters.items())[1:]:
        if prm.kind in (prm.VAR_POSITIONAL, prm.VAR_KEYWORD) or prm.default is not prm.empty:
            continue
        if name not in known:
            return None
        args[name] = known[name]
    return args


def _callable_methods(cls):
    for name in sorted(dir(cls)):
        if name.startswith(FIT_STEPS):
            continue
        static = inspect.getattr_static(cls, name, None)
        if isinstance(static, (property, staticmethod, classmethod, type)) \
                or not inspect.isfunction(static):
            continue
        yield name, static


@pytest.fixture(scope="module")
def digits60(digits_small):
    X, _ = digits_small
    return X[:N], X[N:N + 5]


@pytest.mark.parametrize("fitted", [False, True], ids=["unfitted", "fitted"])
@pytest.mark.parametrize("name", sorted(ESTIMATOR_CASES))
def test_no_method_but_fit_sets_an_attribute(name, fitted, digits60):
    X, X_new = digits60
    est = getattr(probdr, name)(**ESTIMATOR_CASES[name]["digits"], random_state=0)
    if fitted:
        est.fit(X)
    called, writers = [], []
    for mname, func in _callable_methods(type(est)):
        args = _arguments(func, est, X_new)
        if args is None:
            continue
        before = dict(vars(est))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                getattr(est, mname)(**args)
            except Exception:  # noqa: BLE001 - refusing is fine; writing is not
                pass
        after = vars(est)
        changed = sorted(k for k in before.keys() | after.keys()
                         if k not in before or k not in after or before[k] is not after[k])
        called.append(mname)
        if changed:
            writers.append((mname, changed))
    assert not writers, writers
    assert len(called) >= 8, called
