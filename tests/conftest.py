import numpy as np
import pytest
import torch


@pytest.fixture(scope="session")
def digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X.astype(np.float64), y


@pytest.fixture(scope="session")
def digits_small(digits):
    X, y = digits
    idx = np.random.default_rng(0).choice(len(X), 300, replace=False)
    return X[idx], y[idx]


@pytest.fixture(autouse=True)
def _single_thread():
    """Tests run small problems: one intra-op thread is faster for them and immune to
    oversubscription when other processes share the cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def loss_every_step():
    """MAP fits record their loss at every step (the default records every 50th), for tests
    that compare whole loss histories."""
    from probdr import config

    config.set_loss_every(1)
    yield
    config.set_loss_every(None)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(autouse=True)
def _one_calibration_replication(monkeypatch, request):
    """A posterior fit measures its variance factor on simulated replications of itself (up to
    ten on small maps). Tests of other features run one replication, which exercises the same
    path; tests marked ``calibration`` (and any fit given ``calibration_points``) keep the
    package's defaults."""
    if request.node.get_closest_marker("calibration") is None:
        from probdr.estimators import inference

        monkeypatch.setitem(inference.CALIBRATION_POINTS, "laplace", 1)
        monkeypatch.setitem(inference.CALIBRATION_POINTS, "svi", 1)
