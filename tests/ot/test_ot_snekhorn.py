"""SNEkhorn / t-SNEkhorn as graph couplings (issue 6): the DS latent law is doubly stochastic,
its cross-entropy is the reduced SNEkhorn objective, its gradient is the envelope gradient
(checked against autograd through unrolled Sinkhorn iterations), and the presets fit."""

import math

import numpy as np
import pytest
import torch

from probdr.estimators.snekhorn import SNEkhorn, TSNEkhorn
from probdr.input.graph import sea_input_graph
from probdr.kernels import get_kernel
from probdr.laws.doubly_stochastic import DoublyStochasticPrior
from probdr.laws.weights import KernelWeights
from probdr.ot.sea import symmetric_entropic
from probdr.ot.sinkhorn import symmetric_sinkhorn


def _data(n=40, p=6, seed=0):
    return np.random.default_rng(seed).normal(size=(n, p))


@pytest.mark.parametrize("kernel", ["gaussian", "student"])
def test_ds_law_mean_is_doubly_stochastic(kernel):
    Z = torch.randn(50, 2, dtype=torch.float64)
    prior = DoublyStochasticPrior(tol=1e-10)
    law = prior.posterior(KernelWeights(Z, get_kernel(kernel)))
    Q = law.mean
    assert torch.allclose(Q, Q.T, atol=1e-12)
    assert (Q.sum(1) - 1).abs().max() < 1e-9
    assert torch.all(Q.diagonal() == 0)
    assert law.marginal_error < 1e-10
    # warm start: the second call at the same Z converges immediately
    prior.posterior(KernelWeights(Z, get_kernel(kernel)))
    assert prior.n_sinkhorn_iter_[-1] == 1


def test_ds_cross_entropy_is_reduced_snekhorn_objective():
    """H(P, Q^ds) = <P, C_Z> - 2 <f, 1> + n log n with C_Z = -log k, P = P^se (mass n)."""
    n = 40
    X = _data(n)
    P = torch.from_numpy(symmetric_entropic(X, 8, exclude_self=True, tol=1e-7))
    Z = torch.randn(n, 2, dtype=torch.float64)
    kern = get_kernel("student")
    law = DoublyStochasticPrior(tol=1e-12).posterior(KernelWeights(Z, kern))
    f = law.potentials
    d2 = ((Z[:, None] - Z[None]) ** 2).sum(-1)
    CZ = torch.log1p(d2)
    # -sum_ij P_ij (f_i + f_j) = -2 <f, P 1>, and sum_ij w_ij = n at Sinkhorn convergence
    reduced = (P * CZ).sum() - 2 * (f * P.sum(1)).sum() + P.sum() * math.log(n)
    assert abs(float(law.cross_entropy(P)) - float(reduced)) < 1e-8
    assert abs(float(P.sum(1).sub(1).abs().max())) < 1e-7  # so this is <P,C> - 2<f,1> + n log n
    # = KL(P | Q) + const: cross-entropy minus the entropy term of P
    Q = law.mean
    off = ~torch.eye(n, dtype=torch.bool)
    kl = (torch.special.xlogy(P[off], P[off]) - P[off] * torch.log(Q[off])).sum()
    ent = -torch.special.xlogy(P[off], P[off]).sum()
    assert abs(float(kl) - float(law.cross_entropy(P) - ent - P.sum() * math.log(n))) < 1e-8


def test_ds_gradient_is_envelope_gradient():
    """Gradient of the law's cross-entropy (potentials detached) = autograd through the
    unrolled Sinkhorn iterations of <P, C_Z> - 2<f, 1>, at convergence."""
    n = 30
    X = _data(n)
    P = torch.from_numpy(symmetric_entropic(X, 6, exclude_self=True, tol=1e-7))
    Z0 = torch.randn(n, 2, dtype=torch.float64)
    kern = get_kernel("gaussian")

    Z1 = Z0.clone().requires_grad_(True)
    law = DoublyStochasticPrior(tol=1e-13, max_iter=10000).posterior(KernelWeights(Z1, kern))
    law.cross_entropy(P).backward()

    Z2 = Z0.clone().requires_grad_(True)
    d2 = ((Z2[:, None] - Z2[None]) ** 2).sum(-1)
    L = torch.where(torch.eye(n, dtype=torch.bool), torch.full_like(d2, float("-inf")), -d2)
    _, g, _, err = symmetric_sinkhorn(L, tol=1e-13, max_iter=10000)
    assert err < 1e-12
    ((P * d2).sum() - 2 * g.sum()).backward()
    assert torch.allclose(Z1.grad, Z2.grad, atol=1e-7)


def test_sea_input_graph_mean_is_sea():
    X = torch.from_numpy(_data(40))
    G = sea_input_graph(X, 8, tol=1e-7)
    P = symmetric_entropic(X, 8, exclude_self=True, tol=1e-7)
    assert torch.allclose(G.mean, P, atol=1e-6)


# (t-SNE's "auto" learning rate, max(200, n/alpha), is far too large for n = 60: any preset
# then needs thousands of steps; these settings keep the test fast)
@pytest.mark.parametrize("cls, kw", [
    (SNEkhorn, {}),
    (TSNEkhorn, {"optimizer": "adam", "learning_rate": 0.5, "early_exaggeration": 1.0,
                 "early_exaggeration_iter": 0}),
])
def test_presets_fit_and_loss_decreases(cls, kw):
    from sklearn.datasets import make_blobs
    from sklearn.metrics import silhouette_score

    X, y = make_blobs(60, n_features=6, centers=3, cluster_std=1.0, random_state=0)
    m = cls(perplexity=8, n_iter=80, random_state=0, **kw)
    Z = m.fit_transform(X)
    assert Z.shape == (60, 2) and np.isfinite(Z).all()
    assert m.loss(Z) < m.loss(np.random.default_rng(0).normal(size=Z.shape))
    Q = m.latent_law(Z).mean
    assert (Q.sum(1) - 1).abs().max() < 1e-4
    assert silhouette_score(Z, y) > 0.5
    # same data, same seed: same embedding
    Z2 = cls(perplexity=8, n_iter=80, random_state=0, **kw).fit_transform(X)
    assert np.allclose(Z, Z2)


def test_snekhorn_params_and_validation():
    m = TSNEkhorn(perplexity=7)
    assert m.get_params()["perplexity"] == 7
    assert m.kernel_z == "student"
    X = _data(20)
    with pytest.raises(ValueError, match="perplexity"):
        TSNEkhorn(perplexity=19).fit(X)
    with pytest.raises(ValueError, match="kernel_z"):
        SNEkhorn(kernel_z="umap").fit(X)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        TSNEkhorn(perplexity=5).fit(Xn)
    with pytest.raises(ValueError, match="n_components"):
        TSNEkhorn(perplexity=5, n_components=0).fit(X)


def test_run_map_relative_loss_tolerance_stops_early():
    """Phase(tol=...) stops at the thesis' rule |l_t - l_{t-1}| < tol |l_{t-1} + offset|."""
    import pyro
    import pyro.distributions as dist

    from probdr.infer import Phase, run_map

    def model():
        pyro.sample("Z", dist.Normal(0.0, 1.0).expand([6, 2]).to_event(2))

    Z0 = 3.0 + 0.1 * torch.arange(12, dtype=torch.float64).reshape(6, 2)
    full = run_map(model, {}, Z0, [Phase(400, 0.05)], optimizer="adam", loss_every=1)
    assert full.n_iter == 400 and len(full.loss_history) == 400
    res = run_map(model, {}, Z0, [Phase(400, 0.05, tol=1e-3, tol_offset=5.0)], optimizer="adam")
    h = res.loss_history
    assert 2 <= res.n_iter < 400 and len(h) == res.n_iter
    assert abs(h[-1] - h[-2]) < 1e-3 * abs(h[-2] + 5.0)
    rel = np.abs(np.diff(h[:-1])) / np.abs(h[:-2] + 5.0)
    assert np.all(rel >= 1e-3)
    np.testing.assert_allclose(h, full.loss_history[:res.n_iter])


@pytest.mark.parametrize("omega", [0.5, 0.7])
def test_kernel_domain_sinkhorn_matches_log_domain(omega):
    """The kernel-domain iteration (matrix-vector products on K = 1/(1+d^2)), averaged or
    relaxed, and the log-domain one reach the same potentials."""
    from probdr.ot.sinkhorn import sinkhorn_kernel_domain

    n = 60
    Z = torch.randn(n, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 3
    d2 = ((Z[:, None] - Z[None]) ** 2).sum(-1)
    K = 1.0 / (1.0 + d2)
    K.fill_diagonal_(0.0)
    L = -torch.log1p(d2)
    L.fill_diagonal_(float("-inf"))
    u, s, it, err = sinkhorn_kernel_domain(K, torch.ones(n, dtype=torch.float64), tol=1e-12,
                                           max_iter=10000, omega=omega)
    _, g, _, err_log = symmetric_sinkhorn(L, tol=1e-12, max_iter=10000, domain="log")
    assert err < 1e-12 and err_log < 1e-12
    assert torch.allclose(torch.log(u), g, atol=1e-8)
    assert torch.allclose(s, K @ u) and abs(float(u @ s) - n) < 1e-9
    # scalings out of range: no answer (the caller falls back to the log domain)
    assert sinkhorn_kernel_domain(K, torch.zeros(n, dtype=torch.float64)) is None


def _reference_ds_law(Z, kern, f):
    """The DS law without the fused path: dense log-weights f_i + f_j + log k (autograd) and the
    blocked all-pairs normaliser."""
    from probdr.laws.doubly_stochastic import DoublyStochasticGraph

    return DoublyStochasticGraph(KernelWeights(Z, kern).with_log_prior(f[:, None] + f[None, :]))


@pytest.mark.parametrize("kernel", ["student", "gaussian"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("fallback", [False, True])
def test_fused_ds_log_prob_and_gradient_match_dense_autograd(kernel, symmetric, fallback,
                                                            monkeypatch):
    """The fused log-likelihood (one Sinkhorn solve, hand-written gradient) equals the generic
    evaluation through the dense weights, also when the attraction enters twice (early
    exaggeration), for an asymmetric observed graph, and on the float64 log-domain fallback."""
    import probdr.laws.doubly_stochastic as sk

    if fallback:
        monkeypatch.setattr(sk, "sinkhorn_kernel_domain", lambda *a, **k: None)
    n = 45
    g = torch.Generator().manual_seed(3)
    Z0 = torch.randn(n, 2, dtype=torch.float64, generator=g) * 2
    V = torch.rand(n, n, dtype=torch.float64, generator=g)
    if symmetric:
        V = V + V.T
    V.fill_diagonal_(0.0)
    V = V * (n / V.sum())
    kern = get_kernel(kernel)

    Z1 = Z0.clone().requires_grad_(True)
    law = DoublyStochasticPrior(tol=1e-12, max_iter=10000).posterior(KernelWeights(Z1, kern))
    assert law._state is not None and law.marginal_error < 1e-12
    (law.log_prob(V) + 3.0 * law.attraction(V)).backward()

    Z2 = Z0.clone().requires_grad_(True)
    ref = _reference_ds_law(Z2, kern, law.potentials)
    lp_ref = ref.log_prob(V) + 3.0 * ref.attraction(V)
    lp_ref.backward()
    lp = law.log_prob(V) + 3.0 * law.attraction(V)
    assert abs(float(lp.detach()) - float(lp_ref.detach())) < 1e-8 * abs(float(lp_ref.detach()))
    assert torch.allclose(Z1.grad, Z2.grad, rtol=1e-8, atol=1e-9)


def test_fused_ds_float32_is_doubly_stochastic_in_float64():
    """In float32 (the presets' dtype) the kernel-domain Sinkhorn meets its tolerance when its
    marginals are recomputed in float64 from the same float32 squared distances (the float32
    distances themselves are the model's, as before the fused path)."""
    from probdr.laws.doubly_stochastic import _sq_distances

    n = 300
    tol = 1e-5
    for scale in (1.0, 20.0, 50.0):
        Z = (torch.randn(n, 2, generator=torch.Generator().manual_seed(0)) * scale).float()
        law = DoublyStochasticPrior(tol=tol).posterior(KernelWeights(Z, get_kernel("student")))
        assert law._state is not None and law._state.u is not None  # the kernel-domain path ran
        assert law.marginal_error < tol
        d2 = _sq_distances(Z).double()
        f = law.potentials
        Q = torch.exp(f[:, None] + f[None, :] - torch.log1p(d2))
        Q.fill_diagonal_(0.0)
        assert float((Q.sum(1) - 1).abs().max()) < 1.1 * tol


def test_tsnekhorn_step_scale_and_auto_learning_rate_are_tsne_s():
    """t-SNEkhorn uses the TSNE preset's "auto" learning rate (openTSNE's rule / 4) because its
    gradient has t-SNE's scale: on a configuration whose Student kernel has equal row sums (points
    evenly spaced on a circle) the Sinkhorn scaling is uniform, Q^ds = n K / sum K is t-SNE's Q,
    and one gains step at learning rate 1 from the same start on the same input graph moves every
    point exactly as the TSNE model does. A change of either gradient's scale, or of either
    preset's rule, fails here."""
    import probdr
    from probdr.input import InputGraph

    n = 60
    X = _data(n, p=5, seed=3)
    a = 2 * np.pi * np.arange(n) / n
    Z0 = np.stack([np.cos(a), np.sin(a)], 1)

    class SameInput:
        def _make_input(self):
            return InputGraph("E", "sea", perplexity=10.0, tol=1e-9)

    TSNEsea = type("TSNEsea", (SameInput, probdr.TSNE), {})
    kw = dict(perplexity=10.0, init=Z0, n_iter=1, early_exaggeration_iter=0, learning_rate=1.0,
              dtype="float64", random_state=0)
    Zk = TSNEkhorn(sinkhorn_tol=1e-12, sea_tol=1e-9, **kw).fit_transform(X)
    Zt = TSNEsea(repulsion="exact", **kw).fit_transform(X)
    step_k, step_t = Zk - Z0, Zt - Z0  # an array init is used as given
    assert np.linalg.norm(step_t) > 0
    np.testing.assert_allclose(step_k, step_t, rtol=1e-6, atol=1e-9 * np.abs(step_t).max())
    # hence the same automatic schedule for the same exaggeration
    for n_pts in (500, 1797, 20_000):
        pk = TSNEkhorn(early_exaggeration=12.0)._phases(n_pts)[0]
        pt = probdr.TSNE()._phases(n_pts)[0]
        assert [(p.n_iter, p.learning_rate) for p in pk] == \
            [(p.n_iter, p.learning_rate) for p in pt]
    assert TSNEkhorn()._phases(1797)[0][-1].learning_rate == pytest.approx(1797 / 4)
