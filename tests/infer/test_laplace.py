"""The per-point Laplace approximation (probdr.infer.laplace) against autograd Hessians of
log-likelihoods written independently here, and its draws and estimator wiring."""

import numpy as np
import pytest
import torch

import probdr
from probdr.infer.laplace import laplace_draws
from probdr.kernels import get_kernel
from probdr.laws.curvature import point_precisions
from probdr.laws.graph import get_prior
from probdr.laws.weights import KernelWeights

N = 12


def _graph(law):
    g = torch.Generator().manual_seed(1)
    W = (torch.rand(N, N, generator=g, dtype=torch.float64) < 0.3).double() \
        * torch.rand(N, N, generator=g, dtype=torch.float64)
    W.fill_diagonal_(0)
    if law == "D":
        W = W / W.sum(1, keepdim=True)
    return W.clamp(max=1) if law == "B" else W


def _oracle(law, kernel, W, ns=None):
    """The coupling log-likelihood in plain torch (dense, all ordered pairs)."""
    off = ~torch.eye(N, dtype=torch.bool)
    sp = torch.nn.functional.softplus

    def ll(zf):
        Z = zf.view(N, 2)
        d2 = (Z[:, None] - Z[None]).square().sum(-1)
        lk = kernel.log_k(torch.where(off, d2, torch.ones_like(d2)))
        if law == "E":
            return (W * lk)[off].sum() - W.sum() * torch.log(torch.exp(lk)[off].sum())
        if law == "D":
            return (W * lk)[off].sum() - (W.sum(1) * torch.log((torch.exp(lk) * off).sum(1))).sum()
        if ns is None:
            return (W * lk)[off].sum() - sp(lk)[off].sum()
        om = ns[1] * ns[0] * W.sum(1) / N
        return (W * (lk - sp(lk)))[off].sum() - (om[:, None] * sp(lk))[off].sum()
    return ll


@pytest.mark.parametrize("law,kern,ns", [("E", "student", None), ("E", "gaussian", None),
                                         ("D", "gaussian", None), ("D", "student", None),
                                         ("B", "umap_odds", None), ("B", "student", None),
                                         ("B", "umap_odds", (5, 1.0))])
def test_blocks_are_the_diagonal_blocks_of_the_hessian(law, kern, ns):
    kernel = get_kernel(kern)
    W = _graph(law)
    Z = 2 * torch.randn(N, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ll = _oracle(law, kernel, W, ns)
    if ns is None:  # the oracle is the law's own log-probability (up to its constant)
        lw = get_prior(law).posterior(KernelWeights(Z, kernel, normaliser="exact"))
        assert float(ll(Z.flatten())) == pytest.approx(float(lw.attraction(W) - lw.normaliser(W)),
                                                       abs=1e-9)
    H = torch.autograd.functional.hessian(ll, Z.flatten()).view(N, 2, N, 2)
    blocks = torch.stack([H[i, :, i, :] for i in range(N)])
    beta, s = 2.5, 3.0
    P = point_precisions(Z, W, law, kernel, coupling_weight=beta, prior_precision=s ** -2,
                         negative_sampling=ns)
    lik = -beta * blocks
    vals, vecs = torch.linalg.eigh(lik)
    # a likelihood block's negative eigenvalues count by their magnitude (the saddle-free
    # curvature), then the prior's precision is added
    want = vecs @ torch.diag_embed(vals.abs()) @ vecs.transpose(1, 2) \
        + torch.eye(2, dtype=torch.float64) / s ** 2
    torch.testing.assert_close(P, want, rtol=1e-10, atol=1e-10)
    pd = vals.min(1).values > 0
    torch.testing.assert_close(P[pd], lik[pd] + torch.eye(2, dtype=torch.float64) / s ** 2,
                               rtol=1e-10, atol=1e-10)
    assert bool((torch.linalg.eigvalsh(P).min(1).values >= 1 / s ** 2 - 1e-12).all())


def test_draws_have_the_blocks_covariance():
    g = torch.Generator().manual_seed(3)
    A = torch.randn(5, 2, 2, dtype=torch.float64, generator=g)
    P = A @ A.transpose(1, 2) + torch.eye(2)
    Z = torch.randn(5, 2, dtype=torch.float64, generator=g)
    d = laplace_draws(Z, P, 40000, inflation=2.0, generator=g)
    dev = d - Z
    cov = torch.einsum("sna,snb->nab", dev, dev) / d.shape[0]
    torch.testing.assert_close(cov, 2.0 * torch.linalg.inv(P), rtol=0.05, atol=0.02)
    with pytest.raises(ValueError, match="inflation"):
        laplace_draws(Z, P, 3, inflation=0.0)


@pytest.fixture(scope="module")
def blobs():
    from sklearn.datasets import make_blobs

    return make_blobs(60, n_features=5, centers=3, cluster_std=1.5, random_state=0)


def test_estimator_laplace_and_reliability(blobs, tmp_path):
    X, _ = blobs
    est = probdr.TSNE(perplexity=10, n_iter=150, early_exaggeration_iter=50, random_state=0,
                      inference="laplace",
                      inference_params={"num_samples": 100}).fit(X)
    n = X.shape[0]
    assert est.posterior_.method == "laplace"
    assert est.posterior_samples_.shape == (100, n, 2)
    assert est.posterior_sd_.shape == (n,) and np.all(est.posterior_sd_ > 0)
    assert est.reliability_.shape == (n,)
    assert np.all((est.reliability_ >= 0) & (est.reliability_ <= 1))
    cov = est.posterior_.diagnostics["covariances"]
    assert cov.shape == (n, 2, 2)
    # repeatable
    again = probdr.TSNE(perplexity=10, n_iter=150, early_exaggeration_iter=50, random_state=0,
                      inference="laplace",
                        inference_params={"num_samples": 100}).fit(X)
    np.testing.assert_array_equal(est.embedding_, again.embedding_)
    # t-SNE's setting: the documented shortcut factor of the Gaussian-blob study
    from probdr.estimators.coupling import CALIBRATED_INFLATION

    assert est.posterior_.diagnostics["inflation"] == CALIBRATED_INFLATION[("laplace", "E",
                                                                            "cauchy")]
    assert est.calibration_ is None and "shortcut" in est.posterior_.diagnostics["calibration"]
    # save and load keep the posterior and its scores
    path = tmp_path / "tsne.probdr"
    est.save(path)
    back = probdr.serialize.load(path)
    np.testing.assert_array_equal(back.reliability_, est.reliability_)
    np.testing.assert_array_equal(back.posterior_sd_, est.posterior_sd_)
    assert back.posterior_.method == "laplace"


def test_laplace_refused_where_no_curvature_is_declared():
    with pytest.raises(ValueError, match="laplace"):
        probdr.WishartPCA(inference="laplace").fit(np.random.default_rng(0).normal(size=(30, 5)))
    with pytest.raises(ValueError, match="unknown option"):
        probdr.TSNE(inference="laplace", inference_params={"num_steps": 3}).fit(
            np.random.default_rng(0).normal(size=(30, 5)))


def test_svi_inflation_scales_the_spread_around_the_mean(blobs):
    X, _ = blobs
    base = dict(perplexity=10, n_iter=150, early_exaggeration_iter=50, random_state=0,
                inference="svi")
    a = probdr.TSNE(**base, inference_params={"num_steps": 100, "inflation": 1.0}).fit(X)
    b = probdr.TSNE(**base, inference_params={"num_steps": 100, "inflation": 4.0}).fit(X)
    np.testing.assert_allclose(b.posterior_.raw_chains.mean(1), a.posterior_.raw_chains.mean(1),
                               atol=1e-6)
    ratio = b.posterior_.raw_chains.std(1) / a.posterior_.raw_chains.std(1)
    np.testing.assert_allclose(ratio, 2.0, rtol=1e-6)


def test_field_sums_match_the_exact_sums():
    import probdr.laws.curvature as lap

    g = torch.Generator().manual_seed(4)
    n = 800
    Z = 6 * torch.randn(n, 2, dtype=torch.float64, generator=g)
    i = torch.arange(n)
    W = torch.sparse_coo_tensor(torch.stack([i, (i + 1) % n]),
                                torch.ones(n, dtype=torch.float64), (n, n)).coalesce()
    kernel = get_kernel("student")
    exact = torch.zeros(n, 2, 2, dtype=torch.float64)
    lap._total_repulsion(exact, Z, W, kernel)
    field_from = lap.FIELD_FROM
    try:
        lap.FIELD_FROM = 10
        field = torch.zeros(n, 2, 2, dtype=torch.float64)
        lap._total_repulsion(field, Z, W, kernel)
    finally:
        lap.FIELD_FROM = field_from
    err = (field - exact).norm(dim=(1, 2)) / exact.norm(dim=(1, 2)).mean()
    assert float(err.median()) < 0.01 and float(err.max()) < 0.05
    assert float(err.max()) > 0  # the field is an interpolation, not the same sums


@pytest.mark.parametrize("surrogate,near_pairs", [(False, 64), (True, 64), (True, 1)])
def test_binary_field_matches_the_exact_sums(surrogate, near_pairs, monkeypatch):
    """The B law's curvature from the near pairs and the far field (UMAP's curve, clustered 2-D
    points as in a UMAP map) against the all-pairs sums, for the exact law and for the negative-sampling surrogate's pair weights, with the grid as it
    comes and made finer to keep few near pairs."""
    import probdr._compute.pair_field as pf
    import probdr.laws.curvature as lap

    monkeypatch.setattr(pf, "NEAR_PAIRS", near_pairs)  # 1: a finer grid, fewer near pairs
    g = torch.Generator().manual_seed(6)
    n = 3000
    centres = 8 * torch.randn(12, 2, dtype=torch.float64, generator=g)
    Z = centres[torch.arange(n) % 12] + torch.randn(n, 2, dtype=torch.float64, generator=g)
    i = torch.arange(n)
    W = torch.sparse_coo_tensor(torch.stack([i, (i + 12) % n]),
                                torch.rand(n, dtype=torch.float64, generator=g), (n, n))
    kernel = get_kernel("umap").fixed()
    ns = (5, 1.0) if surrogate else None
    exact = torch.zeros(n, 2, 2, dtype=torch.float64)
    lap._binary_repulsion(exact, Z, W.coalesce(), kernel, ns)
    field_from = lap.FIELD_FROM
    try:
        lap.FIELD_FROM = 10
        field = torch.zeros(n, 2, 2, dtype=torch.float64)
        lap._binary_repulsion(field, Z, W.coalesce(), kernel, ns)
    finally:
        lap.FIELD_FROM = field_from
    err = (field - exact).norm(dim=(1, 2)) / exact.norm(dim=(1, 2))
    assert float(err.median()) < 0.01 and float(err.max()) < 0.05
    assert float(err.max()) > 0  # the field is an interpolation, not the same sums
    from scipy.spatial import cKDTree

    h = pf.FIELD_SPACING * pf.kernel_length(kernel)
    spacing = pf.near_spacing(Z.numpy(), cKDTree(Z.numpy()), h)
    assert (spacing < h) == (near_pairs == 1)
    near = cKDTree(Z.numpy()).query_pairs(pf.NEAR_NODES * spacing, output_type="ndarray")
    assert 2 * len(near) / n < 1.5 * near_pairs


def test_umap_laplace_from_the_field_agrees_with_the_exact_sums(digits, monkeypatch):
    """UMAP's Laplace posterior on the digits (the negative-sampling surrogate's B law) with
    the near pairs and far field against the all-pairs sums: the same MAP, the precision blocks
    and the per-point spreads within a few per cent."""
    import probdr.laws.curvature as lap

    X, _ = digits
    kw = dict(n_epochs=100, random_state=0, inference="laplace",
              inference_params={"num_samples": 20})
    exact = probdr.UMAP(**kw).fit(X)
    monkeypatch.setattr(lap, "FIELD_FROM", 100)
    field = probdr.UMAP(**kw).fit(X)
    np.testing.assert_array_equal(field.map_embedding_, exact.map_embedding_)
    Pa, Pb = (e.posterior_.diagnostics["precisions"] for e in (exact, field))
    err = np.linalg.norm(Pb - Pa, axis=(1, 2)) / np.linalg.norm(Pa, axis=(1, 2))
    assert np.median(err) < 0.02 and np.quantile(err, 0.99) < 0.06
    # the spreads, where a block is not near-singular (there a 1 % change of the block moves
    # the small eigenvalue, and so the spread, by any factor)
    vals = np.linalg.eigvalsh(Pa)
    well = vals[:, 0] > 0.1 * vals[:, 1]
    a, b = (np.sqrt(np.einsum("nii->n", e.posterior_.diagnostics["covariances"]))
            for e in (exact, field))
    rel = np.abs(b / a - 1)[well]
    assert well.mean() > 0.5 and np.median(rel) < 0.01 and rel.max() < 0.15


def test_laplace_refused_where_it_would_sum_all_pairs(monkeypatch):
    import probdr.laws.curvature as lap

    monkeypatch.setattr(lap, "EXACT_MAX_N", 50)
    X = np.random.default_rng(0).normal(size=(60, 5))
    with pytest.raises(ValueError, match="O\\(n\\^2\\)"):
        probdr.UMAP(inference="laplace").fit(X)


def test_point_reliability_is_the_share_of_neighbours_kept():
    from probdr.infer.draws import Posterior

    # a line of points 1 apart; in half of the draws point 0 jumps to the far end
    M = np.stack([np.arange(8.0), np.zeros(8)], 1)
    draws = np.repeat(M[None], 4, 0)
    draws[:2, 0] = [20.0, 0.0]
    post = Posterior("svi", draws[None], M)
    rel = post.point_reliability(n_neighbors=2, num_draws=4)
    mean = post.mean  # point 0 sits at 10 on average: its neighbours there are 6 and 7
    assert mean[0, 0] == 10.0
    # point 0: neighbours {6, 7} in the mean; {1, 2} in the draws where it stays, {6, 7} where
    # it jumps to 20 -> Jaccard 0 and 1
    assert rel[0] == pytest.approx(0.5)
    # point 3 keeps {2, 4} in every draw
    assert rel[3] == 1.0
    assert np.all((rel >= 0) & (rel <= 1))
    with pytest.raises(ValueError, match="n_neighbors"):
        post.point_reliability(n_neighbors=8)
    # at a tenth of the spread point 0 moves 1 towards 20 (to 11) or 1 towards 0 (to 9): its
    # neighbours {6, 7} stay {6, 7} in every draw
    assert post.point_reliability(n_neighbors=2, num_draws=4, spread=0.1)[0] == 1.0
    with pytest.raises(ValueError, match="spread"):
        post.point_reliability(n_neighbors=2, spread=0.0)


def test_reliability_draws_default_spends_a_budget_of_queries():
    """All the draws on small maps, RELIABILITY_QUERIES / n in between, at least 20; the
    default of point_reliability is that many evenly spaced draws."""
    from probdr.infer.draws import RELIABILITY_QUERIES, Posterior, reliability_draws

    assert reliability_draws(1_797, 200) == 200
    assert reliability_draws(70_000, 200) == 20
    assert reliability_draws(1_000_000, 200) == 20
    assert reliability_draws(10_000, 200) == RELIABILITY_QUERIES // 10_000 == 140
    assert reliability_draws(10_000, 30) == 30
    rng = np.random.default_rng(0)
    M = rng.normal(size=(60, 2))
    post = Posterior("svi", (M + rng.normal(size=(37, 60, 2)))[None], M)
    np.testing.assert_array_equal(post.point_reliability(),
                                  post.point_reliability(num_draws=37))
    assert not np.array_equal(post.point_reliability(), post.point_reliability(num_draws=20))
    for bad in (0, -3, 2.5, True, "20"):
        with pytest.raises(ValueError, match="num_draws"):
            post.point_reliability(num_draws=bad)


def test_point_reliability_matches_brute_force_neighbour_lists():
    """The k-d tree lists against all-pairs distances, on draws made on demand, with a
    duplicated point (its twin, not itself, may come first)."""
    from probdr.infer.draws import GaussianDraws, Posterior

    rng = np.random.default_rng(5)
    n, k = 300, 7
    M = rng.normal(size=(n, 2)) * 3
    lazy = Posterior("laplace", None, M, draws=GaussianDraws(M, np.tile(np.eye(2) * 0.4,
                                                                        (n, 1, 1)), 12, seed=2))
    S = lazy.samples.copy()
    S[:, 1] = S[:, 0]  # point 1 sits on point 0 in every draw, and so in the mean
    for post in (lazy, Posterior("svi", S[None], M)):
        ref = _lists(post.mean, k)
        want = np.zeros(n)
        for s in range(12):
            got = _lists(post.sample(s), k)
            want += [len(a & b) / len(a | b) for a, b in zip(ref, got, strict=True)]
        np.testing.assert_allclose(post.point_reliability(n_neighbors=k, num_draws=12),
                                   want / 12, rtol=0, atol=1e-12)
    # a third of the spread: the lists of the mean plus a third of each draw's deviation
    M3 = lazy.mean
    want = np.zeros(n)
    for s in range(12):
        got = _lists(M3 + (lazy.sample(s) - M3) / 3, k)
        want += [len(a & b) / len(a | b) for a, b in zip(_lists(M3, k), got, strict=True)]
    np.testing.assert_allclose(lazy.point_reliability(n_neighbors=k, num_draws=12, spread=1 / 3),
                               want / 12, rtol=0, atol=1e-12)



def test_point_stability_is_the_probability_of_keeping_a_share_of_neighbours():
    """Stability against brute-force lists: the share of draws in which a point keeps at least
    ceil(keep * k) of the k neighbours it has in the mean; one pass gives both scores."""
    from probdr.infer.draws import GaussianDraws, Posterior

    rng = np.random.default_rng(11)
    n, k = 250, 6
    M = rng.normal(size=(n, 2)) * 3
    post = Posterior("laplace", None, M, draws=GaussianDraws(
        M, np.tile(np.eye(2) * rng.uniform(0.05, 2.0, size=(n, 1, 1)), 1), 16, seed=4))
    ref = _lists(post.mean, k)
    kept = np.array([[len(a & b) for a, b in zip(ref, _lists(post.sample(s), k), strict=True)]
                     for s in range(16)])
    for keep, need in ((1 / 3, 2), (0.5, 3), (1.0, 6), (0.01, 1)):
        np.testing.assert_array_equal(post.point_stability(n_neighbors=k, keep=keep,
                                                           num_draws=16),
                                      (kept >= need).mean(0))
    rel, stab = post.neighbour_scores(n_neighbors=k, num_draws=16)
    np.testing.assert_array_equal(rel, post.point_reliability(n_neighbors=k, num_draws=16))
    np.testing.assert_array_equal(stab, (kept >= 2).mean(0))
    # not a rescaled reliability: points of equal reliability differ in stability
    assert 0 < stab.mean() < 1 and np.unique(stab).size > 3
    for bad in (0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="keep"):
            post.point_stability(n_neighbors=k, keep=bad)
    # the line of the reliability test: point 0 keeps both neighbours in half of the draws
    line = np.stack([np.arange(8.0), np.zeros(8)], 1)
    draws = np.repeat(line[None], 4, 0)
    draws[:2, 0] = [20.0, 0.0]
    one = Posterior("svi", draws[None], line)
    assert one.point_stability(n_neighbors=2, keep=1.0, num_draws=4)[0] == 0.5
    assert one.point_stability(n_neighbors=2, keep=1.0, num_draws=4)[3] == 1.0


def _lists(E, k):
    """Each point's k nearest others by all-pairs distances."""
    d = ((E[:, None] - E[None]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    return [set(r) for r in np.argsort(d, 1, kind="stable")[:, :k]]


def test_the_default_factor_is_the_shortcut_or_measured_and_said_where_it_is_neither(blobs):
    """t-SNE's and UMAP's settings carry the documented shortcut factor; calibrate=True
    measures one for the fit; another curve on features gets none and a warning (a given graph
    gets one measured: test_calibrate); another guide, a user's factor or calibrate=False carry
    none and say why."""
    from probdr.estimators.coupling import CALIBRATED_INFLATION

    X, _ = blobs
    base = dict(perplexity=10, n_iter=100, early_exaggeration_iter=30, random_state=0,
                inference="svi")
    svi = {"num_steps": 20, "calibration_points": 1}
    est = probdr.TSNE(**base, inference_params=svi).fit(X)
    assert est.posterior_.diagnostics["inflation"] == CALIBRATED_INFLATION[("svi", "E", "cauchy")]
    measured = probdr.TSNE(**base, inference_params={**svi, "calibrate": True}).fit(X)
    assert measured.posterior_.diagnostics["inflation"] == measured.calibration_.inflation
    assert measured.calibration_.replications == 1
    low = probdr.TSNE(**base, inference_params={**svi, "guide": "lowrank"}).fit(X)
    assert low.calibration_ is None and low.posterior_.diagnostics["inflation"] == 1.0
    assert "guide" in low.posterior_.diagnostics["calibration"]
    given = probdr.TSNE(**base, inference_params={**svi, "inflation": 3.0}).fit(X)
    assert given.calibration_ is None and given.posterior_.diagnostics["inflation"] == 3.0
    off = probdr.TSNE(**base, inference_params={**svi, "calibrate": False}).fit(X)
    assert off.posterior_.diagnostics["inflation"] == 1.0
    assert "calibrate=False" in off.posterior_.diagnostics["calibration"]
    umap = probdr.UMAP(n_neighbors=10, n_epochs=30, random_state=0, inference="laplace").fit(X)
    assert umap.posterior_.diagnostics["inflation"] == CALIBRATED_INFLATION[("laplace", "B",
                                                                             "umap")]
    # no shortcut for another curve: on features, raw and a warning; calibrate=True measures
    other = dict(n_neighbors=10, n_epochs=30, min_dist=0.5, random_state=0, inference="laplace")
    with pytest.warns(RuntimeWarning, match="no variance factor"):
        raw = probdr.UMAP(**other).fit(X)
    assert raw.calibration_ is None and raw.posterior_.diagnostics["inflation"] == 1.0
    assert "calibrate=True" in raw.posterior_.diagnostics["calibration"]
    asked = probdr.UMAP(**other, inference_params={"calibrate": True,
                                                   "calibration_points": 1}).fit(X)
    assert asked.posterior_.diagnostics["inflation"] == asked.calibration_.inflation
    with pytest.raises(ValueError, match="calibrate must be"):
        probdr.TSNE(**base, inference_params={"calibrate": "yes"}).fit(X)


def test_laplace_draws_in_blocks_are_kept_once_in_the_fits_precision(blobs, monkeypatch):
    """Blocks of draws (as at a million points) give the law of the per-point Gaussians: mean
    at the MAP, covariance the inflated inverse blocks; aligned draws are kept once, in the
    fit's precision, and the block-wise summaries equal numpy's on the same draws."""
    import probdr.infer.draws as draws_mod

    X, _ = blobs
    kw = dict(perplexity=10, n_iter=150, early_exaggeration_iter=50, random_state=0,
              inference="laplace")
    monkeypatch.setattr(draws_mod, "DRAW_BLOCK", 7 * X.shape[0] * 2)  # blocks of 7 draws
    est = probdr.TSNE(**kw, inference_params={"num_samples": 4000, "align": False}).fit(X)
    post = est.posterior_
    assert post.chains.dtype == np.float32 and post.raw_chains is post.chains
    S = post.samples.astype(np.float64)
    cov = post.diagnostics["covariances"]
    sd = np.sqrt(np.einsum("nii->ni", cov))
    assert np.abs((S.mean(0) - est.posterior_mean_) / sd).max() < 5 / np.sqrt(4000) * 1.5
    emp = np.einsum("sni,snj->nij", S - S.mean(0), S - S.mean(0)) / (len(S) - 1)
    assert np.abs(emp / cov - 1)[:, [0, 1], [0, 1]].max() < 0.15
    np.testing.assert_allclose(post.point_covariances(), emp, rtol=1e-10, atol=1e-12)
    aligned = probdr.TSNE(**kw, inference_params={"num_samples": 50}).fit(X).posterior_
    assert aligned.raw_chains is None and aligned.chains.shape == (1, 50, X.shape[0], 2)
    est64 = probdr.TSNE(**kw, dtype="float64", inference_params={"num_samples": 20}).fit(X)
    assert est64.posterior_.chains.dtype == np.float64


def test_gaussian_draws_are_the_same_in_any_blocks_and_have_their_law():
    """Draws made on demand: any draw or block is the same whatever is made before it, and the
    draws have the per-point Gaussians' mean and covariance."""
    from probdr.infer.draws import GaussianDraws

    rng = np.random.default_rng(3)
    n = 40
    mean = rng.normal(size=(n, 2))
    A = rng.normal(size=(n, 2, 2)) * 0.3
    cov = A @ np.swapaxes(A, 1, 2) + 0.05 * np.eye(2)
    law = GaussianDraws(mean, np.linalg.cholesky(cov), 6000, seed=11)
    every = law.block(0, 6000)
    np.testing.assert_array_equal(law.block(2, 5), every[2:5])
    np.testing.assert_array_equal(np.concatenate([law.block(0, 1), law.block(1, 6000)]), every)
    assert not np.array_equal(GaussianDraws(mean, law.scale_tril, 2, seed=12).block(0, 2),
                              every[:2])
    sd = np.sqrt(np.einsum("nii->ni", cov))
    assert np.abs((every.mean(0) - mean) / sd).max() < 5 / np.sqrt(6000)
    R = every - every.mean(0)
    emp = np.einsum("sni,snj->nij", R, R) / (len(every) - 1)
    assert np.abs(emp[:, [0, 1], [0, 1]] / cov[:, [0, 1], [0, 1]] - 1).max() < 0.12
    with pytest.raises(IndexError, match="out of range"):
        law.block(5, 6001)


def test_laplace_posterior_makes_its_draws_only_when_read(blobs, tmp_path, monkeypatch):
    """A Laplace fit holds the per-point Gaussians, not its draws: the mean, spread and
    reliability are summed from draws made block by block and equal numpy's on all the draws
    read afterwards; save and load keep no draws and make the same ones again."""
    import probdr.infer.draws as draws_mod

    X, _ = blobs
    monkeypatch.setattr(draws_mod, "DRAW_BLOCK", 9 * X.shape[0] * 2)  # blocks of 9 draws
    est = probdr.TSNE(perplexity=10, n_iter=150, early_exaggeration_iter=50, random_state=0,
                      inference="laplace", inference_params={"num_samples": 2000}).fit(X)
    post = est.posterior_
    assert post._chains is None and post.shape == (1, 2000, X.shape[0], 2)
    sd, rel = est.posterior_sd_.copy(), est.reliability_.copy()
    S = est.posterior_samples_.astype(np.float64)  # made now
    assert S.shape == (2000, X.shape[0], 2) and post._chains is not None
    np.testing.assert_allclose(est.posterior_mean_, S.mean(0), rtol=0, atol=1e-9)
    emp = np.einsum("sni,snj->nij", S - S.mean(0), S - S.mean(0)) / (len(S) - 1)
    np.testing.assert_allclose(post.point_covariances(), emp, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(sd, np.sqrt(np.einsum("nii->n", emp) / 2), rtol=1e-8)
    post.__dict__.pop("_moments")
    np.testing.assert_array_equal(post.point_reliability(), rel)
    path = tmp_path / "lap.probdr"
    est.save(path)
    assert path.stat().st_size < S.nbytes / 4  # its float32 draws (S.nbytes / 2) are not stored
    back = probdr.serialize.load(path)
    assert back.posterior_._chains is None
    np.testing.assert_array_equal(back.posterior_samples_, est.posterior_samples_)
    np.testing.assert_array_equal(back.posterior_sd_, sd)
