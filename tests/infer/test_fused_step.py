"""The fused MAP step (probdr.models.coupling_fused, MAPFit._fused_form): explicit gradients of
the graph coupling's likelihood, checked against autograd through the Pyro program at the same
Z with the same random draws, whole fits on and off, and the fits that keep the Pyro path."""

import numpy as np
import pyro
import pyro.distributions as dist
import pytest
import torch

import probdr
from probdr import config
from probdr._compute import edges
from probdr._compute.isolation import fit_stream
from probdr.infer import map as map_module
from probdr.infer.schedule import HookedModel, OptimiserHooks, point_mass_loss, with_hooks
from probdr.kernels import StudentKernel, UMAPKernel
from probdr.laws.graph import get_prior
from probdr.models.coupling import graph_coupling_model

N = 150


def _graph(seed: int, k: int = 8, total: float | None = None) -> torch.Tensor:
    """A sparse symmetric graph of N nodes (k random partners each, uniform weights in (0, 1]),
    its values scaled to sum to ``total`` when given (t-SNE's P sums to n)."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.arange(N).repeat_interleave(k)
    cols = (rows + torch.randint(1, N, (N * k,), generator=g)) % N
    v = torch.rand(N * k, generator=g, dtype=torch.float64).clamp_min(1e-3)
    W = torch.sparse_coo_tensor(torch.stack([rows, cols]), v, (N, N))
    W = ((W + W.t()) * 0.5).coalesce()
    if total is not None:
        W = torch.sparse_coo_tensor(W.indices(), W.values() * (total / W.values().sum()),
                                    W.shape).coalesce()
    return W


def _copy(W: torch.Tensor) -> torch.Tensor:
    """A fresh tensor of the same graph: its own caches (edge lists, epoch schedule)."""
    return torch.sparse_coo_tensor(W.indices().clone(), W.values().clone(), W.shape).coalesce()


def _model(clip, epoch_steps, index):
    """The driver's model: the fit's heuristics, then the step's number (MAPFit's nesting)."""
    inner = with_hooks(graph_coupling_model, pair_grad_clip=clip, epoch_steps=epoch_steps)
    return HookedModel(inner, OptimiserHooks(step=index))


def _pyro_path(Z0, kwargs, clip, epoch_steps, index, loss_scale, seed, record):
    """Autograd's gradient of ``loss_scale`` times the Pyro path's loss (point_mass_loss, as the
    driver runs it), the loss, and the edges the step scheduled (recorded)."""
    Z = Z0.clone().requires_grad_(True)

    def guide(*args, **kw):
        pyro.sample("Z", dist.Delta(Z, event_dim=2))

    gen = torch.Generator().manual_seed(seed)
    with fit_stream(gen):
        loss = point_mass_loss(_model(clip, epoch_steps, index), guide, **kwargs)
    (loss * loss_scale).backward()
    return loss.detach(), Z.grad, gen.get_state(), record[-1] if record else None


def _fused_path(Z0, kwargs, clip, epoch_steps, index, loss_scale, seed, record):
    step = _model(clip, epoch_steps, index).fused_step(Z0, **kwargs)
    assert step is not None
    gen = torch.Generator().manual_seed(seed)
    with fit_stream(gen), torch.no_grad():
        loss, grad = step(Z0, loss_scale, True)
    return loss, grad, gen.get_state(), record[-1] if record else None


@pytest.fixture
def scheduled(monkeypatch):
    """The edges each step schedules, recorded."""
    seen = []
    original = edges.scheduled_edges

    def spy(*args, **kwargs):
        out = original(*args, **kwargs)
        seen.append(tuple(t.clone() for t in out[:3]))
        return out
    monkeypatch.setattr(edges, "scheduled_edges", spy)
    return seen


NS_CASES = {
    # name: (kernel, negatives, negative weight, clip, epoch steps, steps, exaggeration, q, c)
    "umap": (UMAPKernel(1.577, 0.8951, odds=True), 5, 1.0, 4.0, 1, (0, 1), 1.0, 2, 1.0),
    # the Cauchy kernel's forces are bounded: a clip below LargeVis's 5 to make it act
    "largevis": (StudentKernel(), 5, 7.0, 0.5, 1, (0, 3), 1.0, 2, 1.0),
    "umap_epoch_steps": (UMAPKernel(1.577, 0.8951, odds=True), 5, 1.0, 4.0, 3, (0, 1, 2, 3, 7),
                         1.0, 2, 1.0),
    "umap_3d_exaggerated": (UMAPKernel(1.6, 0.9, odds=True), 3, 1.0, 4.0, 1, (0,), 4.0, 3, 0.7),
    "no_clip": (UMAPKernel(1.6, 0.9), 5, 2.0, None, 2, (0, 1), 1.0, 2, 1.0),
}


@pytest.mark.parametrize("case", sorted(NS_CASES))
def test_negative_sampling_gradient_is_autograds(case, scheduled):
    """Negative sampling (UMAP, LargeVis): the same edges and negatives (the schedule's edges
    and the streams' final states agree), the loss and the gradient of the Pyro path."""
    kernel, m, gamma, clip, epoch_steps, indices, ex, q, cw = NS_CASES[case]
    W = _graph(1)
    Z0 = torch.randn(N, q, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    Z0 = Z0 * 3.0  # spread over the kernel's scale, a third of the points in a tight clump:
    Z0[: N // 3] = Z0[0] + 0.01 * Z0[: N // 3]  # their pairs' forces pass the clip, others not
    Wp, Wf = W, _copy(W)
    for index in indices:
        base = dict(prior_z=get_prior("B"), kernel=kernel, n_components=q,
                    repulsion="negative_sampling", negative_samples=m, negative_weight=gamma,
                    coupling_weight=cw, exaggeration=ex)
        seed = 10 + index
        lp, gp, sp, ep = _pyro_path(Z0, dict(base, W_X=Wp), clip, epoch_steps, index, 0.3,
                                    seed, scheduled)
        lf, gf, sf, ef = _fused_path(Z0, dict(base, W_X=Wf), clip, epoch_steps, index, 0.3,
                                     seed, scheduled)
        for a, b in zip(ep, ef, strict=True):
            assert torch.equal(a, b)
        assert ep[0].numel() > 0
        assert torch.equal(sp, sf)  # the same draws, negatives included
        torch.testing.assert_close(gf, gp, rtol=1e-10, atol=1e-12 * float(gp.abs().max()))
        torch.testing.assert_close(lf, lp, rtol=1e-12, atol=0.0)
        if clip is not None:  # the clip acts on some pairs: the unclipped gradient differs
            free = _fused_path(Z0, dict(base, W_X=_copy(W)), None, epoch_steps, index, 0.3,
                               seed, [])[1]
            assert float((free - gp).abs().max()) > 1e-3 * float(gp.abs().max())


E_CASES = {
    "cauchy": (StudentKernel(), 1.0, 1.0, "exact"),
    "cauchy_exaggerated": (StudentKernel(), 12.0, 1.0, "exact"),
    "dof_half": (StudentKernel(dof=0.5), 1.0, 1.0, "exact"),
    "dof_half_exaggerated_weighted": (StudentKernel(dof=0.5), 12.0, 0.6, "exact"),
    "fft_cauchy_exaggerated": (StudentKernel(), 12.0, 1.0, "fft"),
    "fft_dof_half_weighted": (StudentKernel(dof=0.5), 1.0, 0.6, "fft"),
}


@pytest.mark.parametrize("dense", [True, False], ids=["one_pass", "edge_list"])
@pytest.mark.parametrize("case", sorted(E_CASES))
def test_e_law_gradient_is_autograds(case, dense, monkeypatch):
    """The E law with its exact or FFT normaliser (t-SNE): loss and gradient of the Pyro path,
    with early exaggeration's factor and a coupling weight; the exact Cauchy normaliser with
    its attraction in the same n x n pass (``dense``) or over the edge list."""
    from probdr.models import coupling_fused

    monkeypatch.setattr(coupling_fused, "DENSE_PAIRS_MAX_N", N if dense else 0)
    kernel, ex, cw, repulsion = E_CASES[case]
    W = _graph(3, total=float(N))
    Z0 = torch.randn(N, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    kw = dict(W_X=W, prior_z=get_prior("E"), kernel=kernel, n_components=2,
              repulsion=repulsion, exaggeration=ex, coupling_weight=cw)
    lp, gp, _, _ = _pyro_path(Z0, kw, None, 1, 0, 1.0 / N, 0, [])
    lf, gf, _, _ = _fused_path(Z0, kw, None, 1, 0, 1.0 / N, 0, [])
    torch.testing.assert_close(gf, gp, rtol=1e-10, atol=1e-12 * float(gp.abs().max()))
    torch.testing.assert_close(lf, lp, rtol=1e-12, atol=0.0)


def test_one_pass_takes_a_dense_asymmetric_graph(monkeypatch):
    """A dense observed graph, W_ij != W_ji: the one-pass attraction's weights W + W^T give the
    edge list's loss and gradient (float64), with exaggeration and a coupling weight."""
    from probdr.models import coupling_fused

    g = torch.Generator().manual_seed(11)
    W = torch.rand(N, N, generator=g, dtype=torch.float64) * (torch.rand(N, N, generator=g) < 0.1)
    W.fill_diagonal_(0.0)
    Z0 = torch.randn(N, 2, generator=g, dtype=torch.float64) * 3
    kw = dict(W_X=W, prior_z=get_prior("E"), kernel=StudentKernel(), n_components=2,
              repulsion="exact", exaggeration=4.0, coupling_weight=0.7)
    out = {}
    for limit in (N, 0):
        monkeypatch.setattr(coupling_fused, "DENSE_PAIRS_MAX_N", limit)
        out[limit] = _fused_path(Z0, kw, None, 1, 0, 1.0 / N, 0, [])[:2]
    torch.testing.assert_close(out[N][1], out[0][1], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out[N][0], out[0][0], rtol=1e-12, atol=0.0)


def test_exact_e_gradient_is_the_closed_form():
    """The t-SNE gradient in closed form, 4 sum_j (alpha p_ij - q_ij) w_ij (z_i - z_j) over the
    KL's scale: the fused step's gradient at loss scale 1 / n (t-SNE's) is its n-th part."""
    W = _graph(5, total=float(N))
    Z = torch.randn(N, 2, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    kw = dict(W_X=W, prior_z=get_prior("E"), kernel=StudentKernel(), n_components=2,
              repulsion="exact", exaggeration=4.0)
    _, grad, _, _ = _fused_path(Z, kw, None, 1, 0, 1.0, 0, [])
    P = W.to_dense() / N
    d2 = torch.cdist(Z, Z).square()
    w = 1.0 / (1.0 + d2)
    w.fill_diagonal_(0.0)
    Q = w / w.sum()
    M = (4.0 * P - Q) * w
    closed = 4.0 * (M.sum(1, keepdim=True) * Z - M @ Z) * N
    torch.testing.assert_close(grad, closed, rtol=1e-10, atol=1e-12 * float(closed.abs().max()))


def test_no_fused_form_outside_its_cases():
    """The model offers a fused step for negative sampling of the B law and the exact E law
    only, with a flat prior, a fixed kernel and no latent edge prior (else the Pyro path)."""
    from probdr.kernels import Learn
    from probdr.laws.doubly_stochastic import DoublyStochasticPrior
    from probdr.models.coupling_fused import coupling_fused_step

    W, Z = _graph(7, total=float(N)), torch.zeros(N, 2, dtype=torch.float64)
    ok = dict(W_X=W, prior_z=get_prior("E"), kernel=StudentKernel(), repulsion="exact")
    assert coupling_fused_step(Z, **ok) is not None
    assert coupling_fused_step(Z, **dict(ok, prior_z=get_prior("B"),
                                         repulsion="negative_sampling")) is not None
    for change in [dict(repulsion="sampled"), dict(kernel=UMAPKernel(), repulsion="fft"),
                   dict(prior_z=get_prior("D")), dict(prior_z=get_prior("B")),
                   dict(prior_z=get_prior("E", edge_prior=torch.ones(N, N))),
                   dict(prior_z=DoublyStochasticPrior()),
                   dict(kernel=StudentKernel(dof=Learn())),
                   dict(z_prior=dist.Normal(0.0, 1.0).expand((N, 2)).to_event(2)),
                   dict(W_X=torch.stack([W.to_dense()] * 2))]:
        assert coupling_fused_step(Z, **dict(ok, **change)) is None, change


# ------------------------------------------------------------------------------------------
# whole fits, on and off
# ------------------------------------------------------------------------------------------
@pytest.fixture
def fused_steps(monkeypatch):
    """Each MAP fit's (fused steps, steps, had a z_prior), recorded by the driver's run_map."""
    seen = []
    original = map_module.MAPFit.run

    def spy(self, phase, model_kwargs, **kw):
        before = self.fused_steps
        done = original(self, phase, model_kwargs, **kw)
        prior = {**model_kwargs, **phase.model_kwargs}.get("z_prior")
        seen.append((self.fused_steps - before, done, prior is not None))
        return done
    monkeypatch.setattr(map_module.MAPFit, "run", spy)
    return seen


def _fit(make, X, on: bool):
    before = config.get_fused_step()
    config.set_fused_step(on)
    try:
        est = make()
        return est, est.fit_transform(X)
    finally:
        config.set_fused_step(before)


PRESETS = {
    "umap": lambda: probdr.UMAP(n_epochs=60, random_state=0, dtype="float64"),
    "umap_epoch_steps": lambda: probdr.UMAP(n_epochs=20, epoch_steps=3, random_state=0),
    "largevis": lambda: probdr.LargeVis(n_iter=60, random_state=0),
    "tsne": lambda: probdr.TSNE(n_iter=90, random_state=0, dtype="float64"),
    "tsne_dof": lambda: probdr.TSNE(n_iter=90, dof=0.5, random_state=0, dtype="float64"),
    "tsne_fft": lambda: probdr.TSNE(n_iter=90, repulsion="fft", random_state=0),
}


@pytest.mark.parametrize("name", sorted(PRESETS) + ["tsne_edge_list"])
def test_whole_fit_on_and_off(name, digits_small, fused_steps, monkeypatch):
    """A whole fit with the fused step ends where the Pyro path ends (within 1e-6 relative of
    the embedding's scale; the paths form the same numbers, so in practice the same bits; exact
    t-SNE's one n x n pass sums in another order, within rounding in float64), every step fused;
    switched off, none is."""
    make = PRESETS.get(name)
    if name == "tsne_edge_list":  # float32, the attraction over the edge list: the same bits
        from probdr.models import coupling_fused

        monkeypatch.setattr(coupling_fused, "DENSE_PAIRS_MAX_N", 0)
        make = lambda: probdr.TSNE(n_iter=90, random_state=0)  # noqa: E731
    X = digits_small[0][:200]
    est_on, Z_on = _fit(make, X, True)
    on = list(fused_steps)
    fused_steps.clear()
    est_off, Z_off = _fit(make, X, False)
    assert sum(f for f, _, _ in on) == est_on.n_iter_ > 0
    assert all(f == 0 for f, _, _ in fused_steps)
    np.testing.assert_allclose(Z_on, Z_off, rtol=0, atol=1e-6 * np.abs(Z_off).max())
    np.testing.assert_allclose(est_on.loss_history_, est_off.loss_history_, rtol=1e-6)


def test_switch_reads_the_environment(monkeypatch):
    """``PROBDR_FUSED=0`` turns the fused step off when probdr.config is loaded."""
    import importlib

    monkeypatch.setenv("PROBDR_FUSED", "0")
    fresh = importlib.reload(config)
    try:
        assert fresh.get_fused_step() is False
        with pytest.raises(ValueError, match="True or False"):
            fresh.set_fused_step(1)
    finally:
        monkeypatch.delenv("PROBDR_FUSED")
        importlib.reload(config)
    assert config.get_fused_step() is True


FALLBACKS = {
    "learned_kernel": lambda: probdr.TSNE(n_iter=30, dof="learn", random_state=0),
    "z_prior": lambda: probdr.TSNE(n_iter=30, z_prior=1.0, random_state=0),
    "observe_sample": lambda: probdr.UMAP(n_epochs=20, observe="sample", random_state=0),
    "sampled": lambda: probdr.TSNE(n_iter=30, repulsion="sampled", random_state=0),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_fallbacks_run_the_pyro_path(name, digits_small, fused_steps):
    """A learned kernel, a prior on Z, sampled graphs and the Monte Carlo normaliser have no
    fused form: every step runs the Pyro program."""
    _fit(FALLBACKS[name], digits_small[0][:120], True)
    assert fused_steps and all(f == 0 and done > 0 for f, done, _ in fused_steps)


def test_posterior_runs_the_pyro_path(digits_small, fused_steps):
    """A Laplace posterior: the plain MAP before it may be fused; every fit with the posterior's
    prior on Z runs the Pyro program."""
    _fit(lambda: probdr.TSNE(n_iter=30, inference="laplace", random_state=0),
         digits_small[0][:100], True)
    with_prior = [f for f, _, prior in fused_steps if prior]
    assert with_prior and all(f == 0 for f in with_prior)
    assert any(f > 0 for f, _, prior in fused_steps if not prior)


# -- the small-data passes: the same numbers as the passes they replace ----------------------
@pytest.mark.parametrize("q", [2, 3])
@pytest.mark.parametrize("label", [0.0, 1.0])
def test_bernoulli_pairs_number_label_is_the_tensors(label, q):
    """A label given as one number (fewer passes: log_sigmoid written out, the subtraction of a
    number, no copy of the differences) gives the bits of a tensor of it."""
    from probdr._compute.fused import bernoulli_pairs_value_and_grad

    g = torch.Generator().manual_seed(3)
    Z = torch.randn(N, q, dtype=torch.float64, generator=g)
    rows = torch.randint(0, N, (600,), generator=g).sort()[0]
    cols = (rows + torch.randint(1, N, (600,), generator=g)) % N
    kernel, gs = UMAPKernel(a=1.2, b=0.9, odds=True), torch.tensor(-0.7, dtype=torch.float64)
    y = torch.full((600,), label, dtype=torch.float64)
    for clip in (None, 4.0):
        ref = bernoulli_pairs_value_and_grad(Z, rows, cols, y, kernel, clip, 0.3, gs)
        out = bernoulli_pairs_value_and_grad(Z, rows, cols, label, kernel, clip, 0.3, gs)
        assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])
    with pytest.raises(ValueError, match="y must be"):
        bernoulli_pairs_value_and_grad(Z, rows, cols, 0.5, kernel, None, 0.3, gs)


@pytest.mark.parametrize("odds", [True, False])
def test_umap_log_k_and_dlog_k_are_the_separate_passes(odds):
    d2 = torch.cat([torch.rand(500, dtype=torch.float64) * 30, torch.zeros(3, dtype=torch.float64)])
    k = UMAPKernel(a=1.577, b=0.8951, odds=odds)
    lk, dk = k.log_k_and_dlog_k(d2.clone())
    assert torch.equal(lk, k.log_k(d2)) and torch.equal(dk, k.dlog_k(d2))


def test_negative_columns_and_positions_are_torchs():
    from probdr._compute.edges import _flat_nonzero
    from probdr.models.coupling_fused import _shifted

    g = torch.Generator().manual_seed(0)
    for n in (2, 7, 569, 5000):
        rows = torch.randint(0, n, (4000,), generator=g)
        shift = torch.randint(1, n, (4000,), generator=g)
        assert torch.equal(_shifted(rows, shift.clone(), n), (rows + shift) % n)
    mask = torch.rand(3001, generator=g) < 0.3
    assert torch.equal(_flat_nonzero(mask), mask.nonzero().squeeze(1))
    assert _flat_nonzero(torch.zeros(0, dtype=torch.bool)).shape == (0,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cauchy_normaliser_columns_form_is_the_closed_form(dtype):
    """The exact Cauchy normaliser's gradient over all rows at once (the columns' form, M's rows
    summed in Z's dtype) against the closed form in float64 (the rows' form that blocks of rows
    take: tests/compute/test_distributed.py)."""
    from probdr._compute import allpairs

    Z = torch.randn(569, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 5
    g = torch.tensor(0.7, dtype=torch.float64)
    T, grad = allpairs.log_total_value_and_grad(Z.to(dtype), StudentKernel(), g.to(dtype))
    w = 1.0 / (1.0 + torch.cdist(Z, Z).square())
    w.fill_diagonal_(0.0)
    S = w.sum()
    M = w * w
    closed = -4.0 * 0.7 / S * (M.sum(1, keepdim=True) * Z - M @ Z)
    tol = dict(rtol=1e-5, atol=1e-5 * float(closed.abs().max())) if dtype == torch.float32 \
        else dict(rtol=1e-10, atol=1e-12 * float(closed.abs().max()))
    torch.testing.assert_close(grad.double(), closed, **tol)
    torch.testing.assert_close(T.double(), torch.log(S), rtol=1e-6 if dtype == torch.float32
                               else 1e-12, atol=0.0)
