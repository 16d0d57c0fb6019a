"""GW-MDS and its geodesic variant (issue 6): energy decomposition against the brute-force
4-tensor, hand-written distance gradient against autograd/finite differences, recovery of
isometric data, comparison with scikit-learn's metric MDS and Isomap's geodesic distances."""

import numpy as np
import pytest
import torch

from probdr.estimators.gwmds import GWMDS
from probdr.input.graph import euclidean_distance_matrix, geodesic_distances
from probdr.models.ot_gwmds import euclidean_distances, gw_energy
from probdr.ot.costs import pearson_distance_correlation


def _s_curve(n, seed=0):
    from sklearn.datasets import make_s_curve

    X, _ = make_s_curve(n, random_state=seed)
    return X


def test_gw_energy_matches_brute_force():
    rng = np.random.default_rng(0)
    n = 5
    CX = torch.from_numpy(euclidean_distance_matrix(rng.normal(size=(n, 3))))
    CY = torch.from_numpy(euclidean_distance_matrix(rng.normal(size=(n, 2))))
    T = torch.from_numpy(rng.uniform(size=(n, n)))
    T = T / T.sum()
    brute = sum((CX[i, j] - CY[k, l]) ** 2 * T[i, k] * T[j, l]
                for i in range(n) for j in range(n) for k in range(n) for l in range(n))
    assert abs(float(gw_energy(CX, CY, T)) - float(brute)) < 1e-12
    import ot

    p = T.sum(1).numpy()
    q = T.sum(0).numpy()
    ref = ot.gromov.gwloss(*ot.gromov.init_matrix(CX.numpy(), CY.numpy(), p, q, "square_loss"),
                           T.numpy())
    assert abs(float(gw_energy(CX, CY, T)) - ref) < 1e-12


def test_distance_gradient():
    Y = torch.randn(12, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(euclidean_distances, (Y,))
    D = euclidean_distances(Y.detach())
    ref = torch.cdist(Y.detach(), Y.detach())
    assert torch.allclose(D, ref, atol=1e-10)
    assert torch.all(D.diagonal() == 0)
    # coincident points: finite (zero) gradient
    Y2 = torch.zeros(4, 2, dtype=torch.float64, requires_grad=True)
    euclidean_distances(Y2).sum().backward()
    assert torch.isfinite(Y2.grad).all()


def test_gwmds_recovers_isometric_data():
    """[G]/spec test: data that already is 2-D (embedded in 3-D) is recovered up to an isometry:
    rho ~ 1, and after alignment the embedding matches X (row order preserved) by Procrustes."""
    from scipy.linalg import orthogonal_procrustes

    rng = np.random.default_rng(0)
    X2 = rng.uniform(-1, 1, size=(40, 2)) * [3.0, 1.0]
    X = np.c_[X2, np.zeros(40)] @ np.linalg.qr(rng.normal(size=(3, 3)))[0]
    m = GWMDS(n_iter=30, random_state=0)
    Z = m.fit_transform(X)
    assert m.distance_correlation_ > 0.999
    A, B = Z - Z.mean(0), X2 - X2.mean(0)
    R, _ = orthogonal_procrustes(A, B)
    assert np.abs(A @ R - B).max() < 0.05
    assert m.plan_.shape == (40, 40)
    assert np.allclose(m.plan_.sum(1), 1 / 40)


def test_gwmds_at_least_as_good_as_sklearn_mds_on_small_s_curve():
    from sklearn.manifold import MDS

    X = _s_curve(80)
    D = euclidean_distance_matrix(X)
    m = GWMDS(n_iter=60, random_state=0)
    Z = m.fit_transform(X)
    rho_gw = pearson_distance_correlation(D, euclidean_distance_matrix(Z))
    Zm = MDS(2, n_init=4, init="random", random_state=0, max_iter=300).fit_transform(X)
    rho_mds = pearson_distance_correlation(D, euclidean_distance_matrix(Zm))
    assert rho_gw == pytest.approx(m.distance_correlation_)
    assert rho_gw >= rho_mds - 0.005
    assert rho_gw > 0.95
    # the GW value decreases along the iterations
    assert m.loss_history_[-1] < m.loss_history_[0]


def test_geodesic_distances_match_isomap():
    from sklearn.datasets import make_swiss_roll
    from sklearn.manifold import Isomap

    X, _ = make_swiss_roll(150, random_state=0)
    D, k = geodesic_distances(X, 8)
    assert k == 8
    iso = Isomap(n_neighbors=8).fit(X)
    assert np.allclose(D, iso.dist_matrix_, atol=1e-8)
    D_auto, k_auto = geodesic_distances(X, None)
    assert k_auto >= 5 and np.isfinite(D_auto).all()


def test_geodesic_disconnected_graph_raises():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(20, 3)), rng.normal(size=(20, 3)) + 100])
    with pytest.raises(ValueError, match="connected components"):
        GWMDS(geodesic=True, n_neighbors=3, n_iter=2).fit(X)
    # n_neighbors=None increases k until the graph is connected
    m = GWMDS(geodesic=True, n_iter=2, random_state=0).fit(X)
    assert m.n_neighbors_ >= 20


def test_gwmds_random_state_repeatable():
    X = _s_curve(40)
    a = GWMDS(init="random", n_iter=10, random_state=3).fit_transform(X)
    b = GWMDS(init="random", n_iter=10, random_state=3).fit_transform(X)
    c = GWMDS(init="random", n_iter=10, random_state=4).fit_transform(X)
    assert np.array_equal(a, b)
    assert not np.allclose(a, c)


def test_gwmds_no_align_keeps_raw():
    X = _s_curve(30)
    m = GWMDS(n_iter=5, align=False, random_state=0).fit(X)
    assert np.allclose(m.embedding_, m.embedding_raw_)


@pytest.mark.parametrize("bad, match", [
    (dict(n_components=0), "n_components"),
    (dict(init="spectral"), "init"),
    (dict(init=np.zeros((5, 2))), "shape"),
    (dict(n_iter=0), "n_iter"),
    (dict(learning_rate=-1.0), "learning_rate"),
    (dict(optimizer="lbfgs"), "optimizer"),
    (dict(n_neighbors=0), "n_neighbors"),
])
def test_gwmds_parameter_validation(bad, match):
    with pytest.raises(ValueError, match=match):
        GWMDS(**bad).fit(_s_curve(20))


def test_gwmds_input_validation():
    X = _s_curve(20)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        GWMDS().fit(Xn)
    with pytest.raises(ValueError, match="2D array"):
        GWMDS().fit(X[:, 0])
    with pytest.raises(ValueError, match="0 sample"):
        GWMDS().fit(np.empty((0, 3)))
