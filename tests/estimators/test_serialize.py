"""Portable save and load (``est.save`` / ``probdr.load``): every estimator round-trips exactly,
and damaged, too new or unsafe files are refused with a clear error, without unpickling."""

import importlib
import io
import json
import pickle
import zipfile

import numpy as np
import pytest
import torch
from helpers import ESTIMATOR_CASES

import probdr
from probdr import serialize

#: small fits on 150 digits (each well under a second): the shared table of estimator cases
FITS = {name: case["digits"] for name, case in ESTIMATOR_CASES.items()}


@pytest.fixture(scope="module")
def X():
    from sklearn.datasets import load_digits

    return load_digits().data[:150].astype(np.float64)


@pytest.fixture(scope="module")
def tsne(X):
    return probdr.TSNE(random_state=0, **FITS["TSNE"]).fit(X)


def assert_same(a, b, path="x"):
    """Recursive equality: arrays and tensors exactly (dtype, shape, values, NaN at the same
    places), containers item by item, objects through their ``__dict__``."""
    assert type(a) is type(b), f"{path}: {type(a)} != {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.layout == b.layout, path
        if a.layout == torch.sparse_coo:
            assert a.is_coalesced() == b.is_coalesced(), path
            assert_same(a._indices(), b._indices(), path + "._indices()")
            assert_same(a._values(), b._values(), path + "._values()")
        else:
            assert_same(a.detach().cpu().numpy(), b.numpy(), path)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, path
        if a.dtype.kind == "O":
            for i, (x, y) in enumerate(zip(a.ravel(), b.ravel(), strict=True)):
                assert_same(x, y, f"{path}[{i}]")
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), path
    elif hasattr(a, "__dict__") and type(a).__module__.startswith(("probdr", "pyro", "torch")):
        assert_same(vars(a), vars(b), path)
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def _transform_or_error(est, X):
    """``transform(X)``, or the type of the error it raises (NotImplementedError or
    AttributeError where an estimator has no out-of-sample extension)."""
    try:
        return est.transform(X), None
    except Exception as e:  # noqa: BLE001 - the loaded model must raise the same
        return None, type(e)


@pytest.mark.parametrize("name", sorted(FITS))
def test_every_estimator_round_trips(name, X, tmp_path):
    est = getattr(probdr, name)(random_state=0, **FITS[name]).fit(X)
    path = tmp_path / "model.npz"
    est.save(path)
    loaded = probdr.load(path)
    assert type(loaded) is type(est)
    assert_same(est.get_params(), loaded.get_params(), "params")
    assert loaded.embedding_.dtype == est.embedding_.dtype
    assert loaded.embedding_.tobytes() == est.embedding_.tobytes()
    assert_same(vars(est), vars(loaded), "vars")
    Z, err = _transform_or_error(est, X[:20])
    if err is None:
        np.testing.assert_allclose(loaded.transform(X[:20]), Z, rtol=0, atol=1e-6)
    else:
        with pytest.raises(err):
            loaded.transform(X[:20])
    # pickling keeps working next to the portable format
    assert np.array_equal(pickle.loads(pickle.dumps(est)).embedding_, est.embedding_)


def test_include_data_false_leaves_out_the_data_attributes(X, tmp_path, monkeypatch):
    # loss_history_ stands in for training data, so that the test holds whatever estimators
    # keep for transform
    data_attrs = tuple(probdr.TSNE._data_attributes) + ("loss_history_",)
    monkeypatch.setattr(probdr.TSNE, "_data_attributes", data_attrs)
    est = probdr.TSNE(random_state=0, **FITS["TSNE"]).fit(X)
    est.save(tmp_path / "full.npz")
    est.save(tmp_path / "nodata.npz", include_data=False)
    full, nodata = probdr.load(tmp_path / "full.npz"), probdr.load(tmp_path / "nodata.npz")
    for name in data_attrs:  # "owner.attr": the fitted owner is kept, its attribute left out
        owner, _, attr = name.partition(".")
        if attr:
            assert getattr(getattr(nodata, owner), attr) is None
            assert getattr(getattr(full, owner), attr) is not None
            assert getattr(getattr(est, owner), attr) is not None  # the estimator keeps it
        else:
            assert not hasattr(nodata, name)
            assert hasattr(full, name) == hasattr(est, name)
    assert np.array_equal(nodata.embedding_, est.embedding_)
    with np.load(tmp_path / "nodata.npz", allow_pickle=False) as npz:
        header = json.loads(bytes(npz["__header__.json"]))
    assert header["data_included"] is False and header["format"] == "probdr-model"
    assert header["class"] == "probdr.estimators.presets:TSNE"
    assert "loss_history_" not in header["state"] and "embedding_" in header["state"]
    Z, err = _transform_or_error(est, X[:20])
    if err is None:  # transform needs the data left out
        with pytest.raises(Exception):  # noqa: B017
            nodata.transform(X[:20])


def test_svi_posterior_with_a_pyro_distribution_round_trips(X, tmp_path):
    est = probdr.TSNE(random_state=0, inference="svi",
                      inference_params={"num_steps": 20, "num_samples": 10},
                      **FITS["TSNE"]).fit(X)
    z_prior = est.model_kwargs_["z_prior"]
    assert type(z_prior).__module__.startswith("pyro.distributions")
    est.save(tmp_path / "svi.npz")
    loaded = probdr.load(tmp_path / "svi.npz")
    assert loaded.embedding_.tobytes() == est.embedding_.tobytes()
    got = loaded.model_kwargs_["z_prior"]
    assert type(got) is type(z_prior) and got.event_shape == z_prior.event_shape
    Z = torch.zeros(z_prior.event_shape)
    assert torch.equal(got.log_prob(Z), z_prior.log_prob(Z))
    # the posterior draws come back; the Pyro guide (it holds the model function) does not
    assert np.array_equal(loaded.posterior_.chains, est.posterior_.chains)
    assert np.array_equal(loaded.posterior_.mean, est.posterior_.mean)
    assert est.posterior_.guide is not None and loaded.posterior_.guide is None
    assert_same(est.posterior_.diagnostics, loaded.posterior_.diagnostics, "diagnostics")
    assert_same(est.model_kwargs_, loaded.model_kwargs_, "model_kwargs_")


def test_posterior_draws_are_stored_once_and_read_back_as_views(X, tmp_path):
    """``posterior_samples_`` is a reshaped view of ``posterior_.chains``: the file holds the
    draws once, and the loaded estimator's two attributes share one array again; a Laplace
    posterior, whose draws are made on demand, stores none."""
    est = probdr.TSNE(random_state=0, inference="svi", inference_params={"num_steps": 20},
                      **FITS["TSNE"]).fit(X)
    chains = est.posterior_.chains
    assert np.shares_memory(est.posterior_samples_, chains)
    est.save(tmp_path / "svi.npz")
    with np.load(tmp_path / "svi.npz", allow_pickle=False) as npz:
        sizes = [npz[k].nbytes for k in npz.files if k != "__header__.json"]
    assert sizes.count(chains.nbytes) == 2  # the aligned and the raw draws, not a third copy
    loaded = probdr.load(tmp_path / "svi.npz")
    assert np.array_equal(loaded.posterior_.chains, chains)
    assert loaded.posterior_samples_.shape == est.posterior_samples_.shape
    assert np.shares_memory(loaded.posterior_samples_, loaded.posterior_.chains)
    assert np.array_equal(loaded.posterior_sd_, est.posterior_sd_)
    assert np.array_equal(loaded.reliability_, est.reliability_)
    assert np.array_equal(loaded.stability_, est.stability_)
    lap = probdr.TSNE(random_state=0, inference="laplace", **FITS["TSNE"]).fit(X)
    lap.save(tmp_path / "lap.npz")
    with np.load(tmp_path / "lap.npz", allow_pickle=False) as npz:
        sizes = [npz[k].nbytes for k in npz.files if k != "__header__.json"]
    assert lap.posterior_.chains.nbytes not in sizes  # made again from the per-point laws
    again = probdr.load(tmp_path / "lap.npz")
    assert np.array_equal(again.posterior_samples_, lap.posterior_samples_)


def test_a_malformed_view_shape_is_refused(tsne, tmp_path):
    tsne.save(tmp_path / "t.npz")
    with np.load(tmp_path / "t.npz", allow_pickle=False) as npz:
        header = json.loads(bytes(npz["__header__.json"]))
        entries = {k: npz[k] for k in npz.files}
    header["state"]["embedding_"]["shape"] = [7, 3]  # not the stored array's size
    header["sha256"] = serialize._digest({k: v for k, v in header.items() if k != "sha256"},
                                         {k: v for k, v in entries.items()
                                          if k != "__header__.json"})
    entries["__header__.json"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(tmp_path / "t.npz", "wb") as f:
        np.savez(f, **entries)
    with pytest.raises(ValueError, match="malformed shape"):
        probdr.load(tmp_path / "t.npz")


def test_values_of_every_supported_kind_round_trip(tsne, tmp_path):
    values = {
        "floats": [float("nan"), float("inf"), -float("inf"), -0.0, 0.1, 1e308, 5e-324],
        "ints": [0, -1, 2**70, True, False, None], "text": "é\n\"}",
        "tuple": (1, (2.5, "a")), "nested": {"__tuple__": 1, 3: "int key", (1, 2): [1]},
        "sets": ({1, 2}, frozenset({"a"})), "complex": 1 + 2j,
        "np": [np.float32(1.5), np.int8(-3), np.bool_(True), np.float64("nan"), np.uint64(7)],
        "arrays": [np.arange(6, dtype=np.int16).reshape(2, 3), np.asfortranarray(
            np.random.rand(3, 4)), np.array([True, False]), np.zeros((0, 3), np.float32),
            np.array(["a", "bc"]), np.array(["x", None, 1.0], dtype=object),
            np.array([1 + 1j], np.complex64)],
        "tensors": [torch.arange(5), torch.rand(3, 2, dtype=torch.float64, requires_grad=True),
                    torch.tensor([True, False]), torch.rand(2).to(torch.bfloat16),
                    torch.rand(4, 4)[:, ::2]],
        "sparse": [torch.eye(3).to_sparse(), torch.sparse_coo_tensor(
            torch.tensor([[0, 0], [1, 1]]), torch.tensor([1.0, 2.0]), (2, 2),
            check_invariants=True),
            torch.eye(3, dtype=torch.float64).to_sparse_csr()],
        "torch": [torch.float32, torch.int64, torch.Size([2, 3]), torch.device("cpu")],
        "dtypes": np.dtype("<f4"),
        "rng": [np.random.RandomState(3), np.random.default_rng(4)],
        "kernel": probdr.kernels.StudentKernel(),
    }
    tsne.extra_ = values
    try:
        tsne.save(tmp_path / "m.npz")
    finally:
        del tsne.extra_
    got = probdr.load(tmp_path / "m.npz").extra_
    assert_same(values["floats"][1:], got["floats"][1:], "floats")
    assert np.isnan(got["floats"][0]) and str(got["floats"][3]) == "-0.0"
    for k in ("ints", "text", "tuple", "nested", "sets", "complex", "torch", "dtypes"):
        assert got[k] == values[k], k
    for a, b in zip(values["np"], got["np"], strict=True):
        assert type(a) is type(b) and a.tobytes() == b.tobytes()
    assert_same(values["arrays"], got["arrays"], "arrays")
    for a, b in zip(values["tensors"], got["tensors"], strict=True):
        assert a.dtype == b.dtype and torch.equal(a.detach(), b) and not b.requires_grad
    assert_same(values["sparse"][:2], got["sparse"][:2], "sparse")
    assert torch.equal(values["sparse"][2].to_dense(), got["sparse"][2].to_dense())
    assert got["rng"][0].randint(1000) == np.random.RandomState(3).randint(1000)
    assert got["rng"][1].integers(1000) == np.random.default_rng(4).integers(1000)
    assert_same(values["kernel"], got["kernel"], "kernel")


def test_path_without_suffix_and_str_paths(tsne, tmp_path):
    tsne.save(str(tmp_path / "model"))
    assert (tmp_path / "model").exists() and not (tmp_path / "model.npz").exists()
    assert np.array_equal(probdr.load(str(tmp_path / "model")).embedding_, tsne.embedding_)
    tsne.save(tmp_path / "model")  # overwrite in place, no temporary file left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_unsupported_attribute_is_refused_with_its_path(tsne, tmp_path):
    tsne.foo_ = lambda: 1
    try:
        with pytest.raises(TypeError, match=r"state\.foo_.*function"):
            tsne.save(tmp_path / "m.npz")
    finally:
        del tsne.foo_
    tsne.model_kwargs_["bad"] = open  # noqa: SIM115 - a builtin function, never called
    try:
        with pytest.raises(TypeError, match=r"state\.model_kwargs_\['bad'\]"):
            tsne.save(tmp_path / "m.npz")
    finally:
        del tsne.model_kwargs_["bad"]
    assert not (tmp_path / "m.npz").exists()


# -- damaged and unsafe files -------------------------------------------------------------------
def _rewrite(path, mutate_header=None, arrays=None):
    """Re-save a file with a changed header or arrays, the digest recomputed."""
    with np.load(path, allow_pickle=False) as npz:
        header = json.loads(bytes(npz["__header__.json"]))
        entries = {k: npz[k] for k in npz.files if k != "__header__.json"}
    if mutate_header:
        mutate_header(header)
    entries.update(arrays or {})
    header["sha256"] = serialize._digest(header, entries)
    blob = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **{"__header__.json": blob}, **entries)


@pytest.fixture
def saved(tsne, tmp_path):
    path = tmp_path / "model.npz"
    tsne.save(path)
    return path


@pytest.fixture
def no_unpickling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pickle was called")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    imported = []
    real = importlib.import_module
    monkeypatch.setattr(importlib, "import_module",
                        lambda name, *a: imported.append(name) or real(name, *a))
    return imported


def test_truncated_and_non_zip_files(saved, tmp_path, no_unpickling):
    data = saved.read_bytes()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.npz.*(corrupted|truncated)"):
        probdr.load(cut)
    text = tmp_path / "text.npz"
    text.write_text("not a model\n")
    with pytest.raises(ValueError, match=r"text\.npz is not a probdr model file"):
        probdr.load(text)
    npy = tmp_path / "array.npy"
    np.save(npy, np.arange(3))
    with pytest.raises(ValueError, match="not a probdr model file"):
        probdr.load(npy)
    plain = tmp_path / "plain.npz"
    np.savez(plain, x=np.arange(3))
    with pytest.raises(ValueError, match=r"plain\.npz is not a probdr model file.*header"):
        probdr.load(plain)
    with pytest.raises(FileNotFoundError):
        probdr.load(tmp_path / "missing.npz")


def test_newer_format_version_is_refused(saved):
    _rewrite(saved, lambda h: h.update(format_version=999))
    with pytest.raises(ValueError, match=r"newer probdr.*format version 999.*version 1 at most"):
        probdr.load(saved)


def test_older_and_other_major_probdr_versions(saved):
    _rewrite(saved, lambda h: h.update(probdr_version="0.0.1"))
    probdr.load(saved)  # older, same major version: accepted silently
    _rewrite(saved, lambda h: h.update(probdr_version="7.0.0"))
    with pytest.warns(UserWarning, match="major version"):
        probdr.load(saved)


def test_modified_files_fail_the_integrity_check(saved, tsne):
    # a flipped byte inside an array entry (the zip CRC or the sha256 catches it)
    data = bytearray(saved.read_bytes())
    needle = tsne.embedding_.tobytes()[:64]
    at = bytes(data).find(needle)
    assert at > 0
    data[at + 10] ^= 0x01
    saved.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="corrupted|modified"):
        probdr.load(saved)
    # a consistent archive (valid CRCs) whose array no longer matches the stored digest
    tsne.save(saved)
    with np.load(saved, allow_pickle=False) as npz:
        header = json.loads(bytes(npz["__header__.json"]))
        entries = {k: npz[k] for k in npz.files}
    key = header["state"]["embedding_"]["__ndarray__"]
    entries[key] = entries[key] + 1.0
    with open(saved, "wb") as f:
        np.savez(f, **entries)
    with pytest.raises(ValueError, match="corrupted or was modified"):
        probdr.load(saved)
    # a changed header value, digest unchanged
    header["params"]["perplexity"] = 11.0
    entries["__header__.json"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(saved, "wb") as f:
        np.savez(f, **entries)
    with pytest.raises(ValueError, match="corrupted or was modified"):
        probdr.load(saved)


def test_object_arrays_are_never_unpickled(saved, no_unpickling):
    with np.load(saved, allow_pickle=False) as npz:
        entries = {k: npz[k] for k in npz.files}
    entries["evil"] = np.array([{"a": 1}, None], dtype=object)
    buf = io.BytesIO()
    np.savez(buf, **entries)  # numpy pickles the object array here, while writing
    saved.write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="'evil' is an object array"):
        probdr.load(saved)


@pytest.mark.parametrize("where", ["class", "nested"])
def test_classes_outside_probdr_are_refused_before_import(saved, no_unpickling, where):
    def mutate(h):
        if where == "class":
            h["class"] = "os:system"
        else:
            h["state"]["evil_"] = {"__object__": "os:system", "state": {}}

    _rewrite(saved, mutate)
    no_unpickling.clear()
    with pytest.raises(ValueError, match="refusing to load the class 'os:system'"):
        probdr.load(saved)
    assert "os" not in no_unpickling
    assert not any(m.split(".")[0] not in ("probdr", "pyro", "torch") for m in no_unpickling)


def test_top_level_class_must_be_a_probdr_estimator(saved):
    _rewrite(saved, lambda h: h.update({"class": "probdr.kernels:StudentKernel"}))
    with pytest.raises(ValueError, match="not a probdr estimator"):
        probdr.load(saved)


def test_saved_file_is_a_plain_npz(saved):
    with zipfile.ZipFile(saved) as z:
        names = z.namelist()
    assert "__header__.json.npy" in names and all(n.endswith(".npy") for n in names)
    with np.load(saved, allow_pickle=False) as npz:
        header = json.loads(bytes(npz["__header__.json"]))
    for key in ("format", "format_version", "probdr_version", "python", "numpy", "torch",
                "scikit_learn", "class", "params", "state", "data_included", "sha256"):
        assert key in header
    assert header["format_version"] == 1 and header["probdr_version"] == probdr.__version__
