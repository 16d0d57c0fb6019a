"""Fits in several threads of one process: each gives the bits it gives alone, and the process is
left as it was (Pyro's handlers and parameters, the global random streams, torch's thread count,
Pyro's validation switch). probdr._compute.isolation; docs "Services and schedulers"."""

from __future__ import annotations

import threading

import numpy as np
import pyro
import pytest
import torch
from helpers import ESTIMATOR_CASES

import probdr
from probdr._compute import alloc, isolation


def run_together(jobs):
    """Start every job in its own thread at once (a barrier), join them; their results, in
    order; a job's exception is raised here."""
    out, errors = [None] * len(jobs), [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def run(i):
        try:
            start.wait()
            out[i] = jobs[i]()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for exc in errors:
        if exc is not None:
            raise exc
    return out


def assert_alone_bits_in_threads(jobs):
    """Each job run alone, then all at once in threads: the same arrays."""
    alone = [np.asarray(job()) for job in jobs]
    for a, b in zip(alone, run_together(jobs), strict=True):
        np.testing.assert_array_equal(np.asarray(b), a)


@pytest.fixture(scope="module")
def X600(digits):
    return digits[0][:600]


def tsne(seed=0):
    return probdr.TSNE(n_iter=150, early_exaggeration_iter=50, random_state=seed)


def umap(seed=0):
    return probdr.UMAP(n_epochs=100, random_state=seed)


def test_a_tsne_and_a_umap_fit_in_two_threads_give_their_bits(X600):
    assert_alone_bits_in_threads([lambda: tsne().fit_transform(X600),
                                  lambda: umap().fit_transform(X600)])


def test_two_tsne_fits_in_two_threads_give_their_bits(X600):
    assert_alone_bits_in_threads([lambda: tsne(0).fit_transform(X600),
                                  lambda: tsne(1).fit_transform(X600)])


#: one small fit per kind of estimator and verb: (name, job(X) -> array)
JOBS = {
    "LargeVis": lambda X: probdr.LargeVis(n_iter=60, random_state=2).fit_transform(X),
    "GraphCoupling": lambda X: probdr.GraphCoupling(
        "D", "B", "student", n_iter=60, early_exaggeration_iter=20,
        random_state=3).fit_transform(X),
    "sampled repulsion": lambda X: probdr.GraphCoupling(
        repulsion="sampled", n_iter=40, early_exaggeration_iter=10,
        random_state=4).fit_transform(X),
    "WishartPCA": lambda X: probdr.WishartPCA(random_state=5).fit_transform(X),
    "SNEkhorn": lambda X: probdr.SNEkhorn(n_iter=40, random_state=6).fit_transform(X),
    "SVI": lambda X: probdr.TSNE(n_iter=60, early_exaggeration_iter=20, inference="svi",
                                 inference_params={"num_steps": 30, "num_samples": 5},
                                 random_state=7).fit(X).posterior_samples_,
    "Laplace": lambda X: probdr.UMAP(n_epochs=40, inference="laplace",
                                     random_state=8).fit(X).posterior_samples_,
    "transform": lambda X: probdr.UMAP(n_epochs=40, random_state=9).fit(X[:200]).transform(
        X[200:260]),
    "sample_transform": lambda X: probdr.TSNE(
        n_iter=60, early_exaggeration_iter=20, random_state=10).fit(X[:200]).sample_transform(
        X[200:220], num_samples=20, random_state=0),
    "observe=sample": lambda X: probdr.GraphCoupling(
        observe="sample", n_iter=40, early_exaggeration_iter=10,
        random_state=11).fit_transform(X),
}


@pytest.mark.parametrize("name", list(JOBS))
def test_every_kind_of_fit_beside_a_umap_fit_gives_its_bits(name, X600):
    X = X600[:300]
    job = JOBS[name]
    alone = np.asarray(job(X))
    both = run_together([lambda: job(X), lambda: umap(1).fit_transform(X)])
    np.testing.assert_array_equal(np.asarray(both[0]), alone)
    np.testing.assert_array_equal(both[1], umap(1).fit_transform(X))


@pytest.mark.parametrize("name", sorted(ESTIMATOR_CASES))
def test_every_estimator_beside_itself_gives_its_bits(name, X600):
    """Two fits of the same estimator at two seeds in two threads (the digits cases of the
    shared table of estimator cases, 150 points)."""
    X = X600[:150]

    def fit(seed):
        return lambda: getattr(probdr, name)(**ESTIMATOR_CASES[name]["digits"],
                                             random_state=seed).fit_transform(X)

    assert_alone_bits_in_threads([fit(0), fit(1)])


@pytest.mark.filterwarnings("ignore:NUTS")
def test_two_nuts_posteriors_in_two_threads_give_their_bits(X600):
    X = X600[:40]

    def nuts(seed):
        return lambda: probdr.TSNE(perplexity=5, n_iter=40, early_exaggeration_iter=10,
                                   inference="mcmc", random_state=seed,
                                   inference_params={"warmup": 5, "num_samples": 5,
                                                     "max_tree_depth": 3, "num_chains": 1}
                                   ).fit(X).posterior_samples_

    assert_alone_bits_in_threads([nuts(0), nuts(1)])


@pytest.mark.filterwarnings("ignore:HMC")
def test_hmc_posteriors_in_two_threads_give_their_bits(X600):
    """The sampler draws from its own generator, and a stochastic likelihood's held draws come
    from the fit's stream: a t-SNE chain beside another, and a UMAP chain on negative sampling
    beside a t-SNE chain, give the bits they give alone."""
    X = X600[:40]
    params = {"warmup": 10, "num_samples": 5, "max_samples": 5, "max_leapfrog": 4,
              "num_chains": 1, "restarts": 1}  # a restart's MAP draws from the fit's stream too

    def tsne_hmc(seed):
        return lambda: probdr.TSNE(perplexity=10, n_iter=60, early_exaggeration_iter=20,
                                   inference="hmc", random_state=seed, inference_params=params
                                   ).fit(X).posterior_samples_

    def umap_hmc(seed):
        return lambda: probdr.UMAP(n_epochs=30, inference="hmc", random_state=seed,
                                   repulsion="negative_sampling", inference_params=params
                                   ).fit(X).posterior_samples_

    assert_alone_bits_in_threads([tsne_hmc(0), tsne_hmc(1)])
    assert_alone_bits_in_threads([umap_hmc(0), tsne_hmc(0)])


def test_two_posterior_fits_in_two_threads_give_their_bits(X600):
    X = X600[:200]

    def svi(seed):
        return lambda: probdr.UMAP(n_epochs=30, inference="svi", random_state=seed,
                                   inference_params={"num_steps": 30, "num_samples": 5}
                                   ).fit(X).posterior_samples_

    assert_alone_bits_in_threads([svi(0), svi(1)])


def test_posteriors_measuring_their_factor_in_two_threads_give_their_bits(X600):
    """The variance factor measured by simulation (refits, simulated graphs, its own generator)
    is the same in a thread beside another such fit: a Laplace posterior of a given graph
    (three replications) and an SVI posterior asked to measure."""
    from probdr.kernels import get_kernel
    from probdr.laws.simulate import simulate_observed_graph

    g = torch.Generator().manual_seed(0)
    Zt = 3 * torch.randn(80, 2, dtype=torch.float64, generator=g)
    W = simulate_observed_graph("D", Zt, get_kernel("student"), 4.0, g).to_dense().numpy()

    def laplace(seed):
        def job():
            est = probdr.GraphCoupling(
                prior_x="D", prior_z="D", kernel_z="student", affinity="precomputed",
                coupling_weight=4.0, z_prior=3.0, n_iter=200, inference="laplace",
                random_state=seed, inference_params={"calibration_points": 240}).fit(W)
            assert est.calibration_.replications == 3
            return est.posterior_samples_
        return job

    def svi(seed):
        return lambda: probdr.UMAP(n_epochs=30, inference="svi", random_state=seed,
                                   inference_params={"num_steps": 30, "num_samples": 5,
                                                     "calibrate": True}
                                   ).fit(X600[:200]).posterior_samples_

    assert_alone_bits_in_threads([laplace(0), laplace(1)])
    assert_alone_bits_in_threads([laplace(0), svi(0)])


def test_fits_leave_the_process_as_they_found_it(X600):
    X = X600[:200]
    torch.manual_seed(123)
    expected = torch.rand(3)  # a MAP fit neither reads nor moves the global stream
    torch.manual_seed(123)
    threads, validating = torch.get_num_threads(), pyro.infer.is_validation_enabled()
    run_together([lambda: tsne().fit(X), lambda: umap().fit(X),
                  lambda: probdr.TSNE(n_iter=40, early_exaggeration_iter=10,
                                      inference="laplace", random_state=0).fit(X)])
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads
    assert pyro.infer.is_validation_enabled() == validating
    assert alloc._depth == 0 and not alloc._raised
    # a thread started now starts from the process's thread count
    seen = run_together([torch.get_num_threads])
    assert seen == [threads]


def test_pyro_is_unchanged_for_the_users_own_code():
    """The handler stack and parameter store stay the process's outside probdr's blocks: a
    parameter set in one thread is read in another, and a trace sees the user's sites."""
    isolation._install()
    pyro.clear_param_store()
    try:
        pyro.param("shared_a", torch.tensor(2.0))
        assert run_together([lambda: float(pyro.param("shared_a").detach())]) == [2.0]

        def model():
            return pyro.sample("x", pyro.distributions.Normal(0.0, 1.0))

        tr = pyro.poutine.trace(model).get_trace()
        assert "x" in tr.nodes
        with isolation.private_pyro():  # a private block sees neither, and leaves them
            assert "shared_a" not in pyro.get_param_store()
            pyro.param("private_b", torch.tensor(1.0))
        assert "private_b" not in pyro.get_param_store()
        assert float(pyro.param("shared_a").detach()) == 2.0
    finally:
        pyro.clear_param_store()


def test_a_fit_inside_a_users_trace_leaves_it_intact(X600):
    def model():
        pyro.sample("mine", pyro.distributions.Normal(0.0, 1.0))
        tsne().fit(X600[:100])
        pyro.sample("mine_after", pyro.distributions.Normal(0.0, 1.0))

    tr = pyro.poutine.trace(model).get_trace()
    assert {"mine", "mine_after"} <= set(tr.nodes) and "Z" not in tr.nodes


def test_the_fit_generator_gives_the_stream_of_the_seeded_global_one():
    g = probdr._utils.generator(7)
    torch.manual_seed(7)
    assert torch.equal(torch.randint(0, 100, (20,), generator=g), torch.randint(0, 100, (20,)))


def test_validation_off_restores_the_setting_after_overlapping_blocks():
    before = pyro.infer.is_validation_enabled()
    a, b = isolation.validation_off(), isolation.validation_off()
    a.__enter__()
    b.__enter__()
    assert not pyro.infer.is_validation_enabled()
    a.__exit__(None, None, None)  # the first to start ends first: still off
    assert not pyro.infer.is_validation_enabled()
    b.__exit__(None, None, None)
    assert pyro.infer.is_validation_enabled() == before


@pytest.mark.slow
def test_default_tsne_and_umap_fits_of_600_digits_in_two_threads(X600):
    assert_alone_bits_in_threads([lambda: probdr.TSNE(random_state=0).fit_transform(X600),
                                  lambda: probdr.UMAP(random_state=0).fit_transform(X600)])
    assert_alone_bits_in_threads([lambda: probdr.TSNE(random_state=0).fit_transform(X600),
                                  lambda: probdr.TSNE(random_state=1).fit_transform(X600)])


@pytest.mark.slow
def test_eight_threads_of_mixed_fits_give_their_bits_with_flat_memory(digits):
    """8 threads x 20 fits of mixed estimators (each compared with the same fit alone), in
    rounds; the process's resident memory after the last round is within 15 % of the one
    after the first (no growth per round)."""
    import resource

    X = digits[0][:300]
    makers = [lambda s: probdr.TSNE(n_iter=80, early_exaggeration_iter=20, random_state=s),
              lambda s: probdr.UMAP(n_epochs=60, random_state=s),
              lambda s: probdr.LargeVis(n_iter=60, random_state=s),
              lambda s: probdr.GraphCoupling("D", "B", "student", n_iter=60,
                                             early_exaggeration_iter=20, random_state=s),
              lambda s: probdr.WishartPCA(random_state=s)]
    reference = {(m, s): makers[m](s).fit_transform(X) for m in range(len(makers))
                 for s in range(4)}
    rss = []
    for _ in range(20):
        keys = [(i % len(makers), (i * 3) % 4) for i in range(8)]
        outs = run_together([lambda k=k: makers[k[0]](k[1]).fit_transform(X) for k in keys])
        for k, out in zip(keys, outs, strict=True):
            np.testing.assert_array_equal(out, reference[k])
        rss.append(_resident_bytes() or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    assert rss[-1] <= 1.15 * rss[1], rss


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            import os

            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


def test_joblibs_threading_backend_runs_fits_side_by_side(X600):
    """What scikit-learn's and Dask's threaded schedulers do: clones fitted by joblib threads."""
    from joblib import Parallel, delayed
    from sklearn.base import clone

    X = X600[:300]
    base = probdr.UMAP(n_epochs=40)
    ests = [clone(base).set_params(random_state=s) for s in range(4)]
    outs = Parallel(n_jobs=4, backend="threading")(delayed(e.fit_transform)(X) for e in ests)
    for s, out in enumerate(outs):
        np.testing.assert_array_equal(out, clone(base).set_params(random_state=s).fit_transform(X))
