"""``device=``: every estimator accepts ``"cpu"`` and ``"auto"``, runs on every device this machine
has (CUDA and MPS tests are skipped where there is none), returns numpy for numpy and a tensor on
the input's device for a tensor, and fails on a bad device before any work."""

import numpy as np
import pytest
import torch
from helpers import ESTIMATOR_CASES

import probdr
from probdr._utils import device_context, resolve_device

#: short fits on tiny data: the shared table of estimator cases
TINY = {name: case["tiny"] for name, case in ESTIMATOR_CASES.items()}

#: the devices of this machine
DEVICES = ["cpu"]
if torch.cuda.is_available():
    DEVICES.append("cuda")
if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
    DEVICES.append("mps")


@pytest.fixture(scope="module")
def X():
    rng = np.random.default_rng(1)
    centers = rng.normal(scale=6.0, size=(3, 6))
    return np.concatenate([c + rng.normal(size=(30, 6)) for c in centers])


def _make(name, **kw):
    return getattr(probdr, name)(**TINY[name], random_state=0, **kw)


@pytest.mark.parametrize("name", sorted(TINY))
def test_cpu_and_auto(name, X):
    Z_cpu = _make(name, device="cpu").fit_transform(X)
    est = _make(name, device="auto")
    Z_auto = est.fit_transform(X)
    assert isinstance(Z_cpu, np.ndarray) and Z_cpu.dtype == np.float64
    assert np.isfinite(Z_cpu).all() and np.isfinite(Z_auto).all()
    assert est.device_ == resolve_device("auto")
    if est.device_.type == "cpu":  # "auto" is the CPU here: the same fit, number for number
        np.testing.assert_array_equal(Z_auto, Z_cpu)
    assert torch.get_default_device().type == "cpu"  # the fit's default device is not left set


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(TINY))
def test_tensor_in_tensor_out_on_every_device(name, device, X):
    Xt = torch.as_tensor(X, device=device, dtype=torch.float32)
    est = _make(name, device=device)
    Z = est.fit_transform(Xt)
    assert isinstance(Z, torch.Tensor) and Z.device.type == Xt.device.type
    assert Z.shape == (X.shape[0], est.n_components) and bool(torch.isfinite(Z).all())
    assert est.device_.type == device
    assert isinstance(est.embedding_, np.ndarray)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["TSNE", "UMAP", "WishartPCA"])
def test_transform_runs_on_the_fit_device(name, device, X):
    est = _make(name, device=device).fit(X[:80])
    new = est.transform(X[80:])
    assert isinstance(new, np.ndarray) and new.shape == (10, est.n_components)
    assert np.isfinite(new).all()
    out = est.transform(torch.as_tensor(X[80:], device=device))
    assert isinstance(out, torch.Tensor) and out.device.type == device


@pytest.mark.parametrize("bad, match", [
    ("tpu", "device must be"), ("gpu0", "device must be"),  # a name: resolve_device
    (3, "'device' parameter of TSNE must be"), (1.5, "'device' parameter")])  # the table
def test_unknown_device_fails_before_work(bad, match, X, monkeypatch):
    est = probdr.TSNE(device=bad)
    monkeypatch.setattr(type(est), "_fit", lambda *a, **k: pytest.fail("fit started"))
    with pytest.raises(ValueError, match=match):
        est.fit(X)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_absent_cuda_fails_with_a_clear_message(X, monkeypatch):
    est = probdr.UMAP(device="cuda:1")
    monkeypatch.setattr(type(est), "_fit", lambda *a, **k: pytest.fail("fit started"))
    with pytest.raises(RuntimeError, match="no CUDA device"):
        est.fit(X)


def test_auto_is_cuda_exactly_when_available():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device(None) == resolve_device("auto")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


def test_device_context_routes_factories_and_restores():
    with device_context(torch.device("meta")):
        assert torch.zeros(2).device.type == "meta"
        assert torch.as_tensor(np.ones(2)).device.type == "meta"
    assert torch.zeros(2).device.type == "cpu"


def test_a_loaded_model_computes_on_the_host(tmp_path, X):
    est = _make("UMAP", device=DEVICES[-1]).fit(X[:80])
    path = tmp_path / "m.npz"
    est.save(path)
    back = probdr.load(path)
    assert back.device_ == torch.device("cpu")
    np.testing.assert_allclose(back.embedding_, est.embedding_)
    assert np.isfinite(back.transform(X[80:])).all()


def _edge_case(q, clip, summed, positive):
    """An edge loss on ``q``-D points (unsorted rows: the scatter path of the gradient)."""
    from probdr._compute.edges import edge_log_kernel, edge_log_kernel_sum
    from probdr.kernels import StudentKernel
    rows, cols = torch.tensor([3, 0, 2, 1, 0]), torch.tensor([1, 2, 3, 0, 3])
    v = torch.tensor([1.0, 0.5, 2.0, 1.0, 0.25], dtype=torch.float64)

    def loss(Z):
        if summed:
            return edge_log_kernel_sum(Z, rows, cols, v if positive else v - 0.6,
                                       StudentKernel(), clip=clip)
        return edge_log_kernel(Z, rows, cols, StudentKernel(), clip=clip).sum()
    return loss


@pytest.mark.parametrize("q", [2, 3])
@pytest.mark.parametrize("clip", [None, 4.0])
@pytest.mark.parametrize("summed, positive", [(False, True), (True, True), (True, False)])
def test_edge_gradients_are_made_on_the_points_device(q, clip, summed, positive, monkeypatch):
    """A backward pass runs outside the fit's device context (torch pops a function mode while
    it handles ``backward``, and CUDA's backward runs on its own thread), so its buffers must
    follow the tensors, not the default device. Emulated here with torch's "meta" device: a
    buffer made on the default device (the CPU) fails as it did on CUDA."""
    import probdr._compute.edges as edges
    monkeypatch.setattr(edges, "all_positive", lambda v: positive)  # meta has no values
    with torch.device("meta"):
        loss = _edge_case(q, clip, summed, positive)
        Z = torch.randn(4, q, dtype=torch.float64).requires_grad_()
        loss(Z).backward()
    assert Z.grad.device.type == "meta" and Z.grad.shape == Z.shape
