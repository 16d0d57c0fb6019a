"""Every estimator parameter is declared with its type and range (one shared table,
``probdr.estimators.params``) and checked at the start of ``fit`` by scikit-learn's
``_fit_context``, before any work: strings where a number is due, booleans where an integer is
due, infinities where a finite step is due, an ``init`` array with NaN, data whose squared scale
overflows (one test per case the fuzz of the public surface found). Every rule that needs no data
-- a choice, a range, a relation between parameters -- fails before X is even looked at, with
scikit-learn's ``InvalidParameterError``; ``_check_params_vs_input(n, p)`` keeps only the rules
that need the data."""

import inspect

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

import probdr
from probdr.estimators.base import DREstimator
from probdr.estimators.coupling import GraphCoupling
from probdr.estimators.params import TABLE
from probdr.kernels import get_kernel

X = np.random.default_rng(0).normal(size=(60, 5))

ESTIMATORS = sorted(n for n in probdr.__all__ if isinstance(getattr(probdr, n), type)
                    and issubclass(getattr(probdr, n), DREstimator))


@pytest.fixture(autouse=True)
def no_heavy_work(monkeypatch):
    """Reaching ``_fit`` fails the test: every refusal below happens before it."""
    def refuse(*a, **k):
        raise AssertionError("_fit was reached")
    for name in ESTIMATORS:
        monkeypatch.setattr(getattr(probdr, name), "_fit", refuse)


@pytest.mark.parametrize("name, params, match", [
    ("WishartPCA", dict(learning_rate="fast"), "'learning_rate' parameter of WishartPCA"),
    ("LaplacianWishart", dict(learning_rate="fast"), "'learning_rate' parameter"),
    ("GraphCoupling", dict(n_neighbors="5"), "'n_neighbors' parameter of GraphCoupling"),
    ("WishartPCA", dict(learning_rate=float("inf")), "must be a finite float"),
    ("GWMDS", dict(n_neighbors=True), "'n_neighbors' parameter of GWMDS must be an int"),
    ("LaplacianWishart", dict(init=None), "'init' parameter of LaplacianWishart"),
    ("TSNE", dict(learning_rate=float("inf")), "'learning_rate' parameter of TSNE"),
    ("UMAP", dict(learning_rate=float("nan")), "'learning_rate' parameter of UMAP"),
    ("LargeVis", dict(negative_samples=2.5), "'negative_samples' parameter"),
    ("SNE", dict(momentum=1.0), "'momentum' parameter of SNE"),
    ("ProbDR", dict(solver="exact"), "'solver' parameter of ProbDR"),
    ("DistR", dict(n_prototypes=0), "'n_prototypes' parameter of DistR"),
    ("ccPCA", dict(n_samples=True), "'n_samples' parameter of ccPCA"),
])
def test_bad_parameter_is_refused_before_work(name, params, match):
    est = getattr(probdr, name)(**params)
    with pytest.raises(InvalidParameterError, match=match) as err:
        est.fit(X)
    assert isinstance(err.value, ValueError) and isinstance(err.value, TypeError)


def test_init_array_with_nan_is_refused():
    init = np.full((60, 2), np.nan)
    with pytest.raises(ValueError, match="init must name a method or be a 2-D array of finite"):
        probdr.LaplacianWishart(init=init).fit(X)


def test_data_near_the_float64_limit_is_refused_with_advice():
    with pytest.raises(ValueError, match="Rescale X"):
        probdr.WishartPCA().fit(X * 1e150)


@pytest.mark.parametrize("name, params", [("DistR", dict(perplexity=np.float32(5))),
                                          ("TSNE", dict(perplexity=np.float64(5), n_iter=np.int64(20),
                                                        early_exaggeration_iter=np.int32(5)))])
def test_numpy_scalars_are_numbers(name, params):
    with pytest.raises(AssertionError, match="_fit was reached"):  # passed every check
        getattr(probdr, name)(**params).fit(X)


def test_every_declared_name_is_a_parameter_of_some_estimator():
    """The one table holds no stale rows; each estimator's table covers its numbers."""
    names = set().union(*(inspect.signature(getattr(probdr, n).__init__).parameters
                          for n in ESTIMATORS))
    assert set(TABLE) <= names
    for n in ESTIMATORS:
        cls = getattr(probdr, n)
        for k in ("learning_rate", "n_iter", "n_neighbors", "perplexity", "n_components"):
            if k in cls._get_param_names():
                assert k in cls._parameter_constraints, (n, k)


@pytest.fixture
def data_untouched(monkeypatch):
    """Looking at X fails the test: the refusals below need no data."""
    def refuse(*a, **k):
        raise AssertionError("X was looked at")
    monkeypatch.setattr(DREstimator, "_validate_X", refuse)


#: one bad value per data-independent rule: each parameter alone (the table) ...
ALONE = [
    ("GraphCoupling", dict(repulsion="fast"), "repulsion"),
    ("TSNE", dict(observe="draw"), "observe"),
    ("SNE", dict(inference="vi"), "inference"),
    ("UMAP", dict(neighbors="annoy"), "neighbors"),
    ("LaplacianWishart", dict(neighbors="annoy"), "neighbors"),
    ("GraphCoupling", dict(optimizer="lbfgs"), "optimizer"),
    ("WishartPCA", dict(optimizer="gains"), "optimizer"),
    ("GWMDS", dict(optimizer="sgd"), "optimizer"),
    ("TSNE", dict(init="umap"), "init"),
    ("GWMDS", dict(init="spectral"), "init"),
    ("DistR", dict(init="spectral"), "init"),
    ("GraphCoupling", dict(kernel_z="cosine"), "kernel_z"),
    ("SNEkhorn", dict(kernel_z="umap"), "kernel_z"),
    ("SNEkhorn", dict(perplexity=1.0), "perplexity"),
    ("SNEkhorn", dict(sinkhorn_tol=0.0), "sinkhorn_tol"),
    ("UMAP", dict(epoch_steps=0), "epoch_steps"),
    ("UMAP", dict(epoch_steps=True), "epoch_steps"),
    ("UMAP", dict(n_epochs=1.5), "n_epochs"),
    ("TSNE", dict(z_prior=-1.0), "z_prior"),
    ("WishartPCA", dict(z_prior="wide"), "z_prior"),
    ("WishartEigenmaps", dict(inference_params=[("num_steps", 5)]), "inference_params"),
    ("WishartEigenmaps", dict(ridge=-1.0), "ridge"),
    ("ccPCA", dict(prior_x="B~"), "prior_x"),
    ("ccPCA", dict(perplexity=0.5), "perplexity"),
    ("DistR", dict(n_prototypes=1), "n_prototypes"),
    ("DistR", dict(affinity_in="cosine"), "affinity_in"),
    ("DistR", dict(affinity_out="cauchy"), "affinity_out"),
    ("DistR", dict(loss="l1"), "loss"),
    ("DistR", dict(solver="exact"), "solver"),
    ("DistR", dict(init_T="uniform"), "init_T"),
    ("GWMDS", dict(gw_max_iter=0), "gw_max_iter"),
    ("LargeVis", dict(n_jobs=0), "n_jobs"),
    ("TSNE", dict(random_state=-1), "random_state"),
    ("ProbDR", dict(random_state=2**32), "random_state"),
    ("TSNE", dict(dtype="float16"), "dtype"),
    ("WishartPCA", dict(device=0), "device"),
    ("TSNE", dict(callbacks=3), "callbacks"),
    ("TSNE", dict(callbacks=print, callbacks_every=0), "callbacks_every"),
]

#: ... and what the table cannot state: relations between parameters, contents of arrays
TOGETHER = [
    ("GraphCoupling", dict(repulsion="negative_sampling", prior_z="E"), "B latent prior"),
    ("TSNE", dict(n_iter=100, early_exaggeration_iter=200), "exceeds n_iter"),
    ("UMAP", dict(min_dist=2.0, spread=1.0), "min_dist"),
    ("GraphCoupling", dict(kernel_z="student", kernel_params={"dof": -1.0}), "dof"),
    ("TSNE", dict(inference="svi", inference_params={"num_steps": 0}), "num_steps"),
    ("SNE", dict(inference="svi", inference_params={"steps": 10}), "unknown option"),
    ("WishartPCA", dict(inference="mcmc", inference_params={"warmup": -1}), "warmup"),
    ("WishartPCA", dict(solver="closed_form", z_prior=3.0), "z_prior needs solver='map'"),
    ("WishartEigenmaps", dict(solver="closed_form", z_prior=3.0), "z_prior needs solver"),
    ("ProbDR", dict(solver="closed_form", alpha=0.5), "alpha=0"),
    ("ProbDR", dict(covariance=np.triu(np.ones((60, 60)))), "symmetric"),
    ("ProbDR", dict(covariance=np.full((60, 60), np.nan)), "non-finite"),
    ("DistR", dict(loss="kl", affinity_in="gram"), "positive affinities"),
    ("DistR", dict(perplexity=0.5), "perplexity must exceed 1"),
    ("DistR", dict(n_prototypes=4, init=np.zeros((3, 2))), r"shape \(n_prototypes"),
    ("TSNE", dict(init=np.full((60, 2), np.inf)), "finite numbers"),
]


@pytest.mark.parametrize("name, params, match", ALONE + TOGETHER)
def test_data_independent_rules_fail_in_fit_before_the_data_is_read(name, params, match,
                                                                   data_untouched):
    with pytest.raises(InvalidParameterError, match=match):
        getattr(probdr, name)(**params).fit(X)


def test_ccpca_refuses_precomputed_distances_before_the_fit(data_untouched):
    D = np.abs(np.subtract.outer(np.arange(60.0), np.arange(60.0)))
    with pytest.raises(InvalidParameterError, match="ccPCA does not take metric='precomputed'"):
        probdr.ccPCA(metric="precomputed").fit(D)


#: the perplexity's whole range, [1, n - 1) (SEA: (1, n - 2]), is the input object's to check
#: against the data, the one place of the input side's rules: not a mistake the data hook lets by
INPUT_SIDE_RANGES = [c for c in ALONE if "perplexity" in c[1] and c[0] in ("SNEkhorn", "ccPCA")]


def data_rules(est, n: int, p: int):
    """The hook of an estimator's data-dependent rules: a graph coupling resolves its whole
    configuration for the data once (``_configure``), the others check
    (``_check_params_vs_input``)."""
    if isinstance(est, GraphCoupling):
        return est._configure(n, p)
    return est._check_params_vs_input(n, p)


#: a graph coupling's configuration makes its latent kernel and its MAP prior from the
#: parameters, so a kernel or a prior that the table or ``_check_params_together`` refused is
#: refused there too
MADE = {"kernel_z", "kernel_params", "min_dist", "spread", "dof", "z_prior"}
KERNEL_MADE = [c for c in ALONE + TOGETHER
               if issubclass(getattr(probdr, c[0]), GraphCoupling) and MADE & c[1].keys()]


@pytest.mark.parametrize("name, params, match",
                         [c for c in ALONE + TOGETHER
                          if c not in INPUT_SIDE_RANGES and c not in KERNEL_MADE])
def test_check_params_vs_input_holds_no_data_independent_rule(name, params, match):
    """The hook of the data-dependent rules lets every data-independent mistake through (they
    are caught earlier, by the table or ``_check_params_together``)."""
    est = getattr(probdr, name)(**params)
    n, p = X.shape
    data_rules(est, n, p)


@pytest.mark.parametrize("name, params, n, p, match", [
    ("TSNE", dict(perplexity=30.0), 20, 5, "too large for n=20"),
    ("SNEkhorn", dict(perplexity=30.0), 31, 5, "n - 2"),
    ("UMAP", dict(n_neighbors=15), 10, 5, "n_neighbors=15 is too large"),
    ("TSNE", dict(inference="mcmc"), 300, 5, "MCMC_MAX_PARAMS"),
    ("WishartPCA", dict(z_prior=get_kernel("student")), 60, 5, None),  # not a distribution
    ("WishartEigenmaps", dict(n_components=4, n_neighbors=3), 5, 5, "needs at least 6"),
    ("LaplacianWishart", dict(max_n=50), 60, 5, "max_n=50"),
    ("DistR", dict(n_prototypes=10), 8, 5, "n_prototypes"),
    ("GWMDS", dict(init=np.zeros((10, 2))), 60, 5, r"shape \(60, 2\)"),
    ("ProbDR", dict(covariance=np.eye(10)), 60, 5, r"shape \(60, 60\)"),
    ("ccPCA", dict(perplexity=30.0), 25, 5, "too large"),
])
def test_check_params_vs_input_holds_the_data_dependent_rules(name, params, n, p, match):
    est = getattr(probdr, name)(**params)
    if match is None:  # the table refuses this one; the data hook does not see it
        with pytest.raises(InvalidParameterError, match="z_prior"):
            est.fit(X)
        return
    with pytest.raises(ValueError, match=match):
        data_rules(est, n, p)


def test_fit_runs_in_scikit_learns_fit_context():
    """``fit`` is wrapped by ``sklearn.base._fit_context``: with scikit-learn's parameter
    validation switched off globally, the table is not consulted (and nested estimators skip
    theirs during a fit)."""
    import sklearn

    est = probdr.TSNE(repulsion="fast")
    with sklearn.config_context(skip_parameter_validation=True):
        with pytest.raises(AssertionError, match="_fit was reached"):
            est.fit(X)
    assert DREstimator.fit.__wrapped__ is not None
