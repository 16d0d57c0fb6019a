"""DistR and semi-relaxed GW (issue 6): the decomposition of E_L against the brute-force sum,
its gradient against autograd, POT's srGW objective, blob recovery, outputs and validation."""

import numpy as np
import pytest
import torch

from probdr.estimators.distr import DistR
from probdr.models.ot_distr import prototype_affinity, srgw_energy
from probdr.ot.srgw import srgw_gradient, srgw_objective


def _blobs(n=90, seed=0, sep=30.0):
    from sklearn.datasets import make_blobs

    centers = np.array([[0, 0, 0, 0], [sep, 0, 0, 0], [0, sep, 0, 0]], dtype=float)
    return make_blobs(n_samples=n, centers=centers, cluster_std=1.0, random_state=seed)


def _brute(C, Cb, T, loss):
    N, n = T.shape
    tot = 0.0
    for i in range(N):
        for j in range(N):
            for k in range(n):
                for m in range(n):
                    a, b = C[i, j], Cb[k, m]
                    L = (a - b) ** 2 if loss == "square" else a * np.log(a / b) - a + b
                    tot += L * T[i, k] * T[j, m]
    return tot


@pytest.mark.parametrize("loss", ["square", "kl"])
def test_srgw_decomposition_and_gradient(loss):
    rng = np.random.default_rng(0)
    N, n = 5, 3
    A = rng.uniform(0.1, 2.0, size=(N, N))
    C = torch.from_numpy(A + A.T)
    B = rng.uniform(0.1, 2.0, size=(n, n))
    Cb = torch.from_numpy(B + B.T)
    T = torch.from_numpy(rng.uniform(size=(N, n)))
    T = T / T.sum(1, keepdim=True) / N
    E = srgw_objective(C, Cb, T, loss)
    assert abs(float(E) - _brute(C.numpy(), Cb.numpy(), T.numpy(), loss)) < 1e-12
    # POT's srGW value at the same coupling
    import ot

    lf = "square_loss" if loss == "square" else "kl_loss"
    constC, hC1, hC2, fC2t = ot.gromov.init_matrix_semirelaxed(C.numpy(), Cb.numpy(),
                                                                T.sum(1).numpy(), lf)
    marginal = np.outer(np.ones(N), T.sum(0).numpy() @ fC2t)
    ref = ot.gromov.gwloss(constC + marginal, hC1, hC2, T.numpy())
    assert abs(float(E) - ref) < 1e-12
    # analytic gradient of F (eq. 8.78) vs autograd of E_L: they differ by the gradient of the
    # constant <f1(C), h h^T>, h = T 1, i.e. by 2 f1(C) h on every column (a row-wise shift that
    # is orthogonal to the feasible set T 1 = h)
    Tg = T.clone().requires_grad_(True)
    srgw_objective(C, Cb, Tg, loss).backward()
    f1 = C * C if loss == "square" else torch.special.xlogy(C, C) - C
    shift = 2.0 * f1 @ T.sum(1)
    assert torch.allclose(srgw_gradient(C, Cb, T, loss) + shift[:, None], Tg.grad, atol=1e-12)


@pytest.mark.parametrize("loss, kind", [("kl", "student"), ("square", "student"),
                                        ("square", "gram")])
def test_model_energy_is_srgw_objective(loss, kind):
    """The Pyro model's factor equals E_L(C_X, C_Z(Z), T) (with the constant)."""
    rng = np.random.default_rng(1)
    N, n = 8, 3
    A = rng.uniform(0.1, 2.0, size=(N, N))
    C = torch.from_numpy(A + A.T)
    T = torch.from_numpy(rng.uniform(size=(N, n)))
    T = T / T.sum(1, keepdim=True) / N
    Z = torch.from_numpy(rng.normal(size=(n, 2)))
    h = T.sum(1)
    f1 = C * C if loss == "square" else torch.special.xlogy(C, C) - C
    const = float((f1 * h[:, None] * h[None, :]).sum())
    E = srgw_energy(Z, T.T @ C @ T, T.sum(0), kind, loss, const)
    ref = srgw_objective(C, prototype_affinity(Z, kind), T, loss)
    assert abs(float(E - ref)) < 1e-10
    if kind != "gram":
        assert abs(float(prototype_affinity(Z, kind).mean()) - 1.0) < 1e-12


def test_distr_recovers_blobs():
    from sklearn.metrics import adjusted_rand_score

    X, y = _blobs()
    m = DistR(n_prototypes=3, n_components=2, perplexity=10, n_outer=10, random_state=0)
    S = m.fit_transform(X)
    Z = m.prototypes_
    assert Z.shape == (3, 2) and S.shape == (90, 2)
    assert np.allclose(S, Z[m.labels_])  # one row per sample, on its prototype
    assert adjusted_rand_score(y, m.labels_) == 1.0
    assert m.n_effective_ == 3
    assert np.allclose(m.weights_, 1 / 3, atol=1e-9)
    # conditional gradient returns a membership matrix: one non-zero per row
    assert np.all((m.assignment_ > 0).sum(1) == 1)
    assert np.allclose(m.assignment_.sum(1), 1 / 90)
    # prototypes of different blobs are apart
    assert np.min(np.linalg.norm(Z[:, None] - Z[None], axis=-1)[np.triu_indices(3, 1)]) > 1.0


def test_distr_extra_prototypes_keep_blobs_pure():
    """With more prototypes than blobs, every prototype's samples come from a single blob
    (homogeneity 1) and prototype weights sum to one."""
    from sklearn.metrics import homogeneity_score

    X, y = _blobs()
    m = DistR(n_prototypes=6, perplexity=10, n_outer=10, random_state=0).fit(X)
    assert homogeneity_score(y, m.labels_) == pytest.approx(1.0)
    assert m.weights_.sum() == pytest.approx(1.0)
    assert np.all(m.medoids_[m.weights_ > 0] >= 0)


def test_distr_square_loss_and_mirror_descent_run():
    X, y = _blobs(60)
    m = DistR(n_prototypes=3, loss="square", solver="md", md_epsilon=1.0, perplexity=10,
              n_outer=5, random_state=0).fit(X)
    assert np.isfinite(m.prototypes_).all()
    assert np.allclose(m.assignment_.sum(1), 1 / 60, atol=1e-8)
    assert m.loss_history_.shape[0] >= 1


def test_distr_random_state_repeatable():
    X, _ = _blobs(60)
    kw = dict(n_prototypes=4, perplexity=10, n_outer=3, init="random", init_T="random")
    a = DistR(random_state=1, **kw).fit_transform(X)
    b = DistR(random_state=1, **kw).fit_transform(X)
    c = DistR(random_state=2, **kw).fit_transform(X)
    assert np.array_equal(a, b)
    assert not np.allclose(a, c)


@pytest.mark.parametrize("bad, match", [
    (dict(n_prototypes=1), "n_prototypes"),
    (dict(n_prototypes=500), "n_prototypes"),
    (dict(n_components=0), "n_components"),
    (dict(affinity_out="gram"), "positive affinities"),
    (dict(loss="l1"), "loss"),
    (dict(solver="bfgs"), "solver"),
    (dict(perplexity=90), "perplexity"),
    (dict(init_T="product"), "init_T"),
])
def test_distr_parameter_validation(bad, match):
    X, _ = _blobs(60)
    with pytest.raises(ValueError, match=match):
        DistR(**{"n_prototypes": 3, **bad}).fit(X)


def test_distr_input_validation():
    X, _ = _blobs(30)
    Xn = X.copy()
    Xn[2, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        DistR(3).fit(Xn)
    with pytest.raises(ValueError, match="2D array"):
        DistR(3).fit(X[:, 0])
    with pytest.raises(ValueError, match="0 sample"):
        DistR(3).fit(np.empty((0, 4)))
