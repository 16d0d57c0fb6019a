"""loss(Z) against the spec's closed forms (§4.2), computed independently in numpy from
input_graph_.mean; the Pyro log joint is -loss + const; the custom gradients agree with autograd
through the dense closed form."""

import numpy as np
import pytest
import torch

import probdr
from probdr.kernels import find_ab_params


def _dense(P):
    return (P.to_dense() if P.is_sparse else P).double().numpy()


def _sqdist(Z):
    return ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)


def closed_form(name, P, Z, a=None, b=None):
    n = len(Z)
    off = ~np.eye(n, dtype=bool)
    d2 = _sqdist(Z)
    if name == "sne":  # -sum P^D log Q^D, Q^D row-normalised exp(-d2)
        logits = np.where(off, -d2, -np.inf)
        logQ = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1,
                                keepdims=True)) - logits.max(1, keepdims=True)
        return -(P[off] * logQ[off]).sum()
    if name == "tsne":  # -sum P^D log Q^E, Q^E = K / K_{++}, K = 1/(1+d2)
        K = np.where(off, 1.0 / (1.0 + d2), 0.0)
        Q = K / K.sum()
        return -(P[off] * np.log(Q[off])).sum()
    if name == "largevis":  # -sum [P^D log Q^B + (1-P^D) log(1-Q^B)], Q^B = K/(1+K)
        K = 1.0 / (1.0 + d2)
        Q = K / (1.0 + K)
        return -(P[off] * np.log(Q[off]) + (1 - P[off]) * np.log(1 - Q[off])).sum()
    if name == "umap":  # -2 sum_{i<j} [P~ log w + (1-P~) log(1-w)], w = 1/(1 + a d^{2b})
        w = 1.0 / (1.0 + a * d2 ** b)
        iu = np.triu_indices(n, 1)
        return -2 * (P[iu] * np.log(w[iu]) + (1 - P[iu]) * np.log(1 - w[iu])).sum()
    raise KeyError(name)


PRESETS = {
    "sne": lambda: probdr.SNE(n_iter=2, early_exaggeration_iter=1, random_state=0),
    "tsne": lambda: probdr.TSNE(n_iter=2, early_exaggeration_iter=1, random_state=0),
    "largevis": lambda: probdr.LargeVis(n_iter=2, random_state=0),
    "umap": lambda: probdr.UMAP(n_epochs=2, random_state=0),
}


@pytest.fixture(scope="module")
def fitted(digits_small):
    X, _ = digits_small
    return {k: make().fit(X) for k, make in PRESETS.items()}


@pytest.mark.parametrize("name", list(PRESETS))
def test_loss_equals_spec_closed_form(fitted, name):
    est = fitted[name]
    P = _dense(est.input_graph_.mean)
    rng = np.random.default_rng(1)
    for scale in (0.1, 1.0, 5.0):
        Z = rng.normal(scale=scale, size=(P.shape[0], 2))
        a, b = (est.a_, est.b_) if name == "umap" else (None, None)
        ref = closed_form(name, P, Z, a, b)
        got = est.loss(Z)
        assert got == pytest.approx(ref, rel=1e-6), (name, scale, got, ref)


@pytest.mark.parametrize("name", list(PRESETS))
def test_log_joint_is_minus_loss_plus_constant(fitted, name):
    est = fitted[name]
    rng = np.random.default_rng(2)
    consts = []
    for _ in range(3):
        Z = rng.normal(size=(est.input_graph_.n, 2))
        consts.append(est.log_joint(Z) + est.loss(Z))
    assert np.ptp(consts) < 1e-6 * max(1.0, abs(consts[0]))


@pytest.mark.parametrize("name", list(PRESETS))
def test_gradients_match_dense_autograd(fitted, name):
    est = fitted[name]
    P = torch.from_numpy(_dense(est.input_graph_.mean))
    n = P.shape[0]
    Z = torch.randn(n, 2, dtype=torch.float64, requires_grad=True)
    # ours: sparse attraction + exact normaliser with the hand-written backward
    g_ours, = torch.autograd.grad(est.latent_law(Z).cross_entropy(
        est.input_graph_.mean.double()), Z)
    # reference: the closed form in dense torch, differentiated by autograd
    Z2 = Z.detach().clone().requires_grad_(True)
    d2 = ((Z2[:, None] - Z2[None]) ** 2).sum(-1)
    off = ~torch.eye(n, dtype=torch.bool)
    if name == "sne":
        logQ = torch.log_softmax(torch.where(off, -d2, -torch.inf), 1)
        H = -(P[off] * logQ[off]).sum()
    elif name == "tsne":
        K = 1 / (1 + d2[off])
        H = -(P[off] * torch.log(K / K.sum())).sum()
    elif name == "largevis":
        K = 1 / (1 + d2[off])
        H = -(P[off] * torch.log(K / (1 + K)) + (1 - P[off]) * torch.log(1 / (1 + K))).sum()
    else:
        w = 1 / (1 + est.a_ * d2[off] ** est.b_)
        H = -(P[off] * torch.log(w) + (1 - P[off]) * torch.log(1 - w)).sum()
    g_ref, = torch.autograd.grad(H, Z2)
    assert torch.allclose(g_ours, g_ref, rtol=1e-7, atol=1e-9 * g_ref.abs().max())


def test_umap_ab_matches_umap_learn():
    umap = pytest.importorskip("umap.umap_")
    for spread, md in [(1.0, 0.1), (1.0, 0.5), (2.0, 0.05)]:
        a, b = find_ab_params(spread, md)
        ra, rb = umap.find_ab_params(spread, md)
        assert a == pytest.approx(ra, rel=1e-4) and b == pytest.approx(rb, rel=1e-4)


def test_undefined_coupling_raises(digits_small):
    X, _ = digits_small
    for px, pz in [("B", "D"), ("B", "E"), ("E", "B"), ("E", "D")]:
        with pytest.raises(ValueError, match="undefined"):
            probdr.GraphCoupling(prior_x=px, prior_z=pz, n_iter=2,
                                 early_exaggeration_iter=1).fit(X)


def test_other_defined_combinations_run(digits_small):
    X, _ = digits_small
    # (E, E) of Remark 4 and (B, B) without symmetrisation are defined
    for px, pz, kern in [("E", "E", "student"), ("B", "B", "umap_odds")]:
        est = probdr.GraphCoupling(prior_x=px, prior_z=pz, kernel_z=kern, n_iter=20,
                                   early_exaggeration_iter=5, random_state=0).fit(X)
        assert np.isfinite(est.embedding_).all()
        assert np.isfinite(est.loss(est.embedding_))


def test_monte_carlo_coupling_runs(digits_small):
    X, _ = digits_small
    est = probdr.TSNE(n_iter=30, early_exaggeration_iter=10, observe="sample",
                      random_state=0).fit(X)
    assert np.isfinite(est.embedding_).all()


def test_tsne_step_is_openTSNE_step_in_our_gradient_scale():
    """One gains step at learning rate 1 from the same start on the same affinities moves every
    point in openTSNE's direction, 4x as far: this gradient keeps t-SNE's factor 4, openTSNE's
    leaves it out. The "auto" learning rate divides openTSNE's rule by exactly this factor."""
    openTSNE = pytest.importorskip("openTSNE")
    from openTSNE import affinity

    X, _ = probdr.datasets.load("digits")
    X = X[:600]
    n = len(X)
    rng = np.random.default_rng(0)
    Y0 = rng.normal(size=(n, 2))
    Y0 = (Y0 - Y0.mean(0)) / Y0[:, 0].std(ddof=1) * 1e-4  # probdr's init scaling is then a no-op
    aff = affinity.PerplexityBasedNN(X, perplexity=30, method="exact", random_state=0,
                                     verbose=False)
    emb = openTSNE.TSNEEmbedding(Y0.copy(), aff, negative_gradient_method="bh", theta=0.0,
                                 random_state=0, verbose=False)
    step_ref = np.asarray(emb.optimize(n_iter=1, learning_rate=1.0, exaggeration=None,
                                       momentum=0.0, max_grad_norm=None,
                                       max_step_norm=None)) - Y0
    Z = probdr.TSNE(init=Y0.copy(), n_iter=1, early_exaggeration_iter=0, learning_rate=1.0,
                    repulsion="exact", dtype="float64", random_state=0).fit_transform(X)
    step = Z - Y0
    cos = (step * step_ref).sum() / np.linalg.norm(step) / np.linalg.norm(step_ref)
    assert cos > 0.9999
    assert np.linalg.norm(step) / np.linalg.norm(step_ref) == pytest.approx(4.0, rel=1e-3)
    # and the automatic schedule is openTSNE's divided by 4
    est = probdr.TSNE()
    phases, _, _, _ = est._phases(20_000)
    assert [ph.learning_rate for ph in phases] == pytest.approx([20_000 / 12 / 4, 20_000 / 4])
