"""Every verb after a fit uses what the fit resolved -- the fitted kernel with its learned numbers,
the fitted latent law -- and not the parameters again: after ``TSNE(dof="learn").fit(X)`` (a
kernel whose number is a latent site until the fit draws it) and after :func:`probdr.load`.
Small data, few steps: the verbs are what is tested, not the embeddings."""

import numpy as np
import pytest
import torch

import probdr
from probdr.laws.graph import GraphLaw
from probdr.laws.weights import KernelWeights


def _fit(X, **kw):
    return probdr.TSNE(perplexity=8, dof="learn", n_iter=40, early_exaggeration_iter=10,
                       random_state=0, **kw).fit(X)


@pytest.fixture(scope="module")
def data(digits_small):
    X, _ = digits_small
    return X[:80], X[80:90]


@pytest.fixture(scope="module", params=["fitted", "loaded"])
def learned(request, data, tmp_path_factory):
    """A TSNE whose dof was learned, as fitted and as read back by ``probdr.load``."""
    est = _fit(data[0])
    if request.param == "loaded":
        path = tmp_path_factory.mktemp("after_fit") / "tsne.probdr"
        est.save(path)
        est = probdr.load(path)
    return est


def test_latent_law_uses_the_learned_kernel(learned):
    Z = learned.embedding_
    law = learned.latent_law(Z)
    assert isinstance(law, GraphLaw)
    dof = learned.learned_kernel_params_["dof"]
    assert dof != 1.0
    ref = learned.model_kwargs_["prior_z"].posterior(
        KernelWeights(torch.as_tensor(Z), probdr.kernels.StudentKernel(dof=dof)))
    P = learned.input_graph_.mean.double()
    assert float(law.cross_entropy(P)) == pytest.approx(float(ref.cross_entropy(P)), rel=1e-12)


def test_loss_is_the_cross_entropy_at_the_learned_kernel(learned):
    Z = learned.embedding_
    loss = learned.loss(Z)
    assert np.isfinite(loss)
    assert loss == pytest.approx(float(learned.latent_law(Z).cross_entropy(
        learned.input_graph_.mean.double())), rel=1e-12)


def test_log_joint(learned):
    assert np.isfinite(learned.log_joint(learned.embedding_))


def test_transform_and_sample_transform(learned, data):
    Y = learned.transform(data[1], n_iter=5)
    assert Y.shape == (10, 2) and np.isfinite(Y).all()
    S = learned.sample_transform(data[1], num_samples=4, num_warmup=4, n_iter=5, random_state=0)
    assert S.shape == (4, 10, 2) and np.isfinite(S).all()


def test_optimize_then_the_other_verbs(data):
    est = _fit(data[0]).optimize(5)
    assert est.n_iter_ == 45
    assert np.isfinite(est.loss(est.embedding_))
    assert isinstance(est.latent_law(est.embedding_), GraphLaw)


def test_optimize_after_load(data, tmp_path):
    est = _fit(data[0])
    est.save(tmp_path / "m.probdr")
    back = probdr.load(tmp_path / "m.probdr").optimize(5)
    est.optimize(5)
    np.testing.assert_array_equal(back.embedding_, est.embedding_)
    assert np.isfinite(back.loss(back.embedding_))


@pytest.mark.parametrize("inference", ["svi", "laplace"])
def test_posterior_fit_then_every_verb(inference, data, tmp_path):
    params = {"num_steps": 20} if inference == "svi" else {}
    est = _fit(data[0], inference=inference, inference_params=params)
    assert est.posterior_samples_.shape[1:] == (80, 2)
    est.save(tmp_path / "m.probdr")
    for e in (est, probdr.load(tmp_path / "m.probdr")):
        Z = e.embedding_
        assert np.isfinite(e.loss(Z)) and np.isfinite(e.log_joint(Z))
        assert isinstance(e.latent_law(Z), GraphLaw)
        assert np.isfinite(e.transform(data[1], n_iter=5)).all()


@pytest.mark.parametrize("make, verb", [
    (lambda: probdr.TSNE(perplexity=8, n_iter=30, random_state=0), "transform"),
    (lambda: probdr.TSNE(perplexity=8, n_iter=30, random_state=0), "sample_transform"),
    (lambda: probdr.UMAP(n_neighbors=8, n_epochs=10, random_state=0), "transform"),
    (lambda: probdr.ccPCA(perplexity=8, n_samples=3, random_state=0), "transform"),
    (lambda: probdr.WishartEigenmaps(n_neighbors=8, n_iter=5, random_state=0), "transform"),
    (lambda: probdr.DistR(n_prototypes=4, perplexity=8, n_outer=2, random_state=0), "transform"),
], ids=["TSNE", "TSNE.sample", "UMAP", "ccPCA", "WishartEigenmaps", "DistR"])
def test_new_points_are_validated_once(make, verb, data, monkeypatch):
    """``fit(X).transform(X_new)``: scikit-learn's validation of X_new (features, finiteness,
    names) runs once, and the input side does not scan the validated rows again."""
    import probdr.estimators.base as base
    import probdr.input.calibration as calibration

    est = make().fit(data[0])
    calls = []

    def counted(f, name):
        def wrapper(*args, **kwargs):
            calls.append(name)
            return f(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(base, "validate_data", counted(base.validate_data, "validate_data"))
    monkeypatch.setattr(calibration, "check_data", counted(calibration.check_data, "check_data"))
    kwargs = {"num_samples": 2, "num_warmup": 2, "n_iter": 3} if verb == "sample_transform" else {}
    getattr(est, verb)(data[1], **kwargs)
    assert calls == ["validate_data"]


@pytest.mark.parametrize("make", [
    lambda: probdr.SNE(perplexity=8, n_iter=30, random_state=0),
    lambda: probdr.TSNE(perplexity=8, n_iter=30, random_state=0),
    lambda: probdr.TSNE(perplexity=8, dof="learn", n_iter=30, random_state=0),
    lambda: probdr.UMAP(n_neighbors=8, n_epochs=10, repulsion="exact", random_state=0),
    lambda: probdr.LargeVis(perplexity=8, n_iter=10, repulsion="exact", random_state=0),
], ids=["SNE", "TSNE", "TSNE-dof", "UMAP", "LargeVis"])
def test_new_points_log_density_is_the_fit_laws_conditional(make, data):
    """The log density that ``transform`` and ``sample_transform`` put on a new point is the
    fitted law's conditional of the new node's row given the fitted embedding: the graph over
    the n training nodes and the new one, with the fit's kernel (``kernel_``, learned numbers
    included), scored by the fit's law (D: the row's term of the D law; E: the row given its
    degree, the D law's; B: the B law on the row's cells), to 1e-10."""
    from probdr.laws.graph import BinaryGraph, UnitDegreeGraph
    from probdr.laws.weights import SparseWeights
    from probdr.models.out_of_sample import new_point_log_likelihood

    est = make().fit(data[0])
    Xn = data[1]
    P = est._fitted_input().rows(Xn)
    n, m = est.n_samples_, Xn.shape[0]
    Z_ref = torch.as_tensor(est.embedding_, dtype=torch.float64)
    kw = est._new_points().batch_kwargs(P, 0, m, Z_ref, torch.float64)
    assert kw["nonedge_weight"] is None  # the exact laws (no negative-sampling surrogate)
    Z_new = torch.as_tensor(est.transform(Xn, n_iter=5), dtype=torch.float64)
    got = new_point_log_likelihood(Z_new, kw["edges"], Z_ref, est.kernel_, kw["row_law"])
    kind = est.model_kwargs_["prior_z"].kind
    rows, cols, p = kw["edges"]
    for i in range(m):
        Z_full = torch.cat([Z_ref, Z_new[i:i + 1]])
        mine = rows == i
        c, v = cols[mine], p[mine].double()
        r = torch.full_like(c, n)
        W = torch.sparse_coo_tensor(torch.stack([r, c]), v, (n + 1, n + 1),
                                    check_invariants=True).coalesce()
        weights = KernelWeights(Z_full, est.kernel_)
        if kind in ("D", "E"):
            want = UnitDegreeGraph(weights, validate_args=False).log_prob(W)
        else:  # the B law's cells of the new row: every (new node, training node) pair
            cells = torch.arange(n)
            row_law = BinaryGraph(SparseWeights(torch.full_like(cells, n), cells,
                                                weights.log_at(torch.full_like(cells, n), cells),
                                                n + 1), validate_args=False)
            want = row_law.log_prob(W)
        assert float(got[i]) == pytest.approx(float(want), rel=1e-10, abs=1e-10), (i, kind)


def test_a_model_saved_before_the_fitted_coupling_was_kept_continues_the_same(data):
    """Files written before ``_coupling`` kept the schedule as ``_schedule``: the fitted
    coupling is then made from the fitted attributes, and ``optimize`` goes on bit for bit."""
    import copy

    est = _fit(data[0])
    old = copy.deepcopy(est)
    old._schedule = list(old._coupling.schedule)
    del old._coupling
    made, kept = old._fitted_coupling(), est._fitted_coupling()
    for field in ("repulsion", "schedule", "loss_scale", "grad_clip", "negative_samples"):
        assert getattr(made, field) == getattr(kept, field), field
    assert made.kernel.dof == kept.kernel.dof and made.prior_z.kind == kept.prior_z.kind
    assert "_coupling" not in vars(old)  # made on demand, not stored by the getter
    np.testing.assert_array_equal(old.optimize(5).embedding_, est.optimize(5).embedding_)
