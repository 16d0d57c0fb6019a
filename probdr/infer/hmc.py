r"""A sampler that scales: Hamiltonian Monte Carlo on the MAP's engine, each point's move
preconditioned by its own curvature.

NUTS (``method="mcmc"``) is exact but builds trees of tens of gradients per draw with a diagonal
mass, and is refused beyond a few hundred parameters. :func:`sample_hmc` runs Metropolis-adjusted
Hamiltonian Monte Carlo (Neal 2011, *MCMC using Hamiltonian dynamics*) on the same Pyro model and
the same compute engine as a MAP step (its edge sums, FFT field or negative samples), in
coordinates whitened by each point's 2x2 block of the Hessian at the mode (the blocks the Laplace
approximation computes, :func:`probdr.laws.curvature.point_precisions`):

.. math:: z_i = \hat z_i + \Lambda_i^{-1/2} x_i ,

so that each point's conditional posterior is about a standard normal in :math:`x_i`. What the
blocks do not see, the collective moves of whole neighbourhoods (wider than a point's conditional
spread by the factor the approximations must be inflated by), sets the length of a trajectory:
the warm-up measures each point's spread in :math:`x` from aligned draws and runs trajectories of
about :math:`\tfrac\pi2` times the widest spread (a quarter period of the widest direction), the
number of leapfrog steps jittered around it and capped at ``max_leapfrog``. The step size is
tuned by dual averaging (Hoffman & Gelman 2014) to an acceptance target. Chains that have not
mixed after ``num_samples`` draws (the caller's test, :func:`sample_hmc`) go on, in blocks sized
by the caller's test (at most ``num_samples``), up to ``max_samples``. Other latent sites (a
learned kernel's degrees of freedom) move in their unconstrained space, scaled by their spread in
the warm-up.

Which density is sampled
    The Metropolis test makes the chain exact for the density whose value the model computes:
    with ``repulsion="exact"`` the chain samples the posterior. The FFT normaliser's value and
    its gradient are two interpolations that do not match (near the mode the value's change
    along a step differs from the gradient's by most of its size), so a test on the value would
    reject every long trajectory; with ``"fft"`` the test measures the potential's change as the
    gradient's work along the trajectory instead (the trapezoidal rule), and the chain samples
    the density of the FFT field, as the MAP and SVI follow it. With the stochastic repulsions
    (``"negative_sampling"``, ``"sampled"``) the random draws are held for a trajectory (both
    ends scored with the same draws) and redrawn for the next, so each transition is exact for
    the surrogate likelihood of its own draws: the chain samples the negative-sampling surrogate
    (as SVI's ELBO does), not the exact likelihood.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch
from pyro import poutine
from torch.distributions import biject_to

from .._compute.isolation import fit_generator, fit_stream, private_pyro, validation_off
from .draws import procrustes_align
from .schedule import OptimiserHooks, random_stream, set_random_stream

__all__ = ["sample_hmc", "HMC_OPTIONS", "STOCHASTIC_REPULSIONS", "likelihood_sampled",
           "fused_energy", "chain_workers"]

#: options of ``method="hmc"`` and their defaults (:func:`probdr.infer.posterior.fit_posterior`)
HMC_OPTIONS = {
    "num_chains": 2, "warmup": 300, "num_samples": 300, "thin": 1, "target_accept_prob": 0.75,
    "max_leapfrog": 64, "init_jitter": 0.1, "reference": None, "align": True,
    "chain_workers": 1, "max_samples": "auto", "target_ess": 400,
}
#: ``max_samples="auto"``: the chains draw up to this many times ``num_samples`` while they
#: have not mixed
AUTO_MAX_SAMPLES = 4
#: repulsions whose log density is a random estimate: their draws are held for a trajectory
STOCHASTIC_REPULSIONS = ("sampled", "negative_sampling")
#: the largest first step size (whitened units, where a point's spread is about 1 at the start)
MAX_FIRST_STEP = 4.0
#: a trajectory whose energy error exceeds this is counted divergent (Stan's threshold)
DIVERGENCE = 1000.0
# dual averaging's constants (Hoffman & Gelman 2014, section 3.2)
_GAMMA, _T0, _KAPPA = 0.05, 10.0, 0.75


def likelihood_sampled(repulsion: str) -> str:
    """Which likelihood the chain samples with this repulsion (see the module docstring)."""
    if repulsion in STOCHASTIC_REPULSIONS:
        return "the negative-sampling surrogate, its draws renewed each trajectory" \
            if repulsion == "negative_sampling" else \
            "the sampled-normaliser surrogate, its draws renewed each trajectory"
    return "the FFT field's likelihood, its changes integrated along each trajectory" \
        if repulsion == "fft" else "the exact likelihood"


class Whitened:
    r"""The latent sites as one flat vector :math:`x` of whitened coordinates, and the potential
    :math:`U(x) = -\log p(\text{sites}(x), \mathcal D) - \log|J|` (the Jacobians of the maps
    from unconstrained space; the affine whitening's is a constant) with its gradient.

    ``name`` is the inference site of shape (n, q) (``"Z"`` or a reparametrised ``"Z_raw"``),
    moved point by point as :math:`z_i = \hat z_i + R_i x_i` with ``roots`` :math:`R_i` (n, q,
    q): first :math:`\Lambda_i^{-1/2}` of the curvature blocks (or the identity), after each
    warm-up window the square root of the point's covariance in the window. Every other site
    moves as :math:`u_0 + s \odot x` in its unconstrained space, ``scale`` :math:`s` (ones until
    a window sets it)."""

    def __init__(self, model: Callable, kwargs: dict, values: dict, supports: dict, name: str,
                 roots: torch.Tensor, stochastic: bool, integrated: bool = False,
                 fused: Callable | None = None):
        self.model, self.kwargs, self.name, self.roots = model, kwargs, name, roots
        self.stochastic, self.integrated, self.fused = stochastic, integrated, fused
        self.bijections = {k: biject_to(c) for k, c in supports.items()}
        centre = {k: self.bijections[k].inv(v.detach()) for k, v in values.items()}
        self.shapes = {k: v.shape for k, v in centre.items()}
        self.centre = torch.cat([v.reshape(-1) for v in centre.values()])
        self.scale = torch.ones_like(self.centre)
        at = 0
        for k, shape in self.shapes.items():
            if k == name:
                self.block = slice(at, at + math.prod(shape))
            at += math.prod(shape)
        self.hooks = OptimiserHooks(step=0)
        self._held = None
        self.evaluations = 0

    def unconstrained(self, x: torch.Tensor) -> torch.Tensor:
        """The flat unconstrained point at ``x``."""
        u = self.centre + self.scale * x
        n_q = self.shapes[self.name]
        moved = torch.einsum("nab,nb->na", self.roots, x[self.block].reshape(n_q))
        return torch.cat([u[:self.block.start], self.centre[self.block] + moved.reshape(-1),
                          u[self.block.stop:]])

    def sites(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The unconstrained value of each site at ``x``."""
        u, out, at = self.unconstrained(x), {}, 0
        for k, shape in self.shapes.items():
            size = math.prod(shape)
            out[k], at = u[at:at + size].reshape(shape), at + size
        return out

    def values(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each site's value (in its support) at ``x``, detached."""
        with torch.no_grad():
            return {k: self.bijections[k](u) for k, u in self.sites(x).items()}

    def whiten(self, u: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`unconstrained`: ``x`` at the flat unconstrained point ``u``."""
        x = (u - self.centre) / self.scale
        n_q = self.shapes[self.name]
        d = (u - self.centre)[self.block].reshape(n_q)
        x[self.block] = torch.linalg.solve(self.roots, d.unsqueeze(-1)).reshape(-1)
        return x

    def energy(self, x: torch.Tensor) -> tuple[float, torch.Tensor]:
        """:math:`U(x)` and :math:`\\nabla U(x)` (``inf`` and zeros where not finite): by the
        model's fused form where it has one (``fused``), else by its Pyro trace and autograd."""
        if self._held is not None:
            set_random_stream(self._held, x.device)
        if self.fused is not None:
            return self._fused_energy(x.detach())
        x = x.detach().requires_grad_(True)
        with validation_off(), self.hooks:
            params = self.sites(x)
            values = {k: self.bijections[k](u) for k, u in params.items()}
            trace = poutine.trace(poutine.condition(self.model, data=values)).get_trace(
                **self.kwargs)
            log_joint = trace.log_prob_sum()
            for k, b in self.bijections.items():
                log_joint = log_joint + b.log_abs_det_jacobian(params[k], values[k]).sum()
        self.evaluations += 1
        U = -log_joint
        if not bool(torch.isfinite(U)):
            return math.inf, torch.zeros_like(x)
        (grad,) = torch.autograd.grad(U, x)
        if not bool(torch.isfinite(grad).all()):
            return math.inf, torch.zeros_like(x)
        return float(U.detach()), grad

    def _fused_energy(self, x: torch.Tensor) -> tuple[float, torch.Tensor]:
        """:meth:`energy` by ``fused(Z) -> (U, dU/dZ)`` at the site ``Z`` (the only one): the
        gradient on :math:`x_i` is :math:`R_i^\\top \\partial U / \\partial z_i`."""
        Z = self.sites(x)[self.name]
        with validation_off(), self.hooks:
            U, gZ = self.fused(Z)
        self.evaluations += 1
        U = float(U)
        if not (math.isfinite(U) and bool(torch.isfinite(gZ).all())):
            return math.inf, torch.zeros_like(x)
        return U, torch.einsum("nab,na->nb", self.roots, gZ).reshape(-1)

    @contextmanager
    def trajectory(self, number: int):
        """A trajectory's potential: a stochastic likelihood's draws (the epoch's edges, the
        negative samples) held fixed inside, from the stream as it stands."""
        self.hooks.step = number
        if self.stochastic:
            self._held = random_stream(self.centre.device)
        try:
            yield
        finally:
            self._held = None


class DualAveraging:
    """The step size of a warm-up (Hoffman & Gelman 2014, algorithm 5): ``update`` takes a
    trajectory's acceptance probability and returns the next step; ``final`` the averaged one."""

    def __init__(self, step: float, target: float):
        self.mu, self.target = math.log(10.0 * step), target
        self.t, self.h_bar, self.log_bar, self.step = 0, 0.0, math.log(step), step

    def update(self, accept: float) -> float:
        self.t += 1
        w = 1.0 / (self.t + _T0)
        self.h_bar = (1 - w) * self.h_bar + w * (self.target - accept)
        log_step = self.mu - math.sqrt(self.t) / _GAMMA * self.h_bar
        eta = self.t ** -_KAPPA
        self.log_bar = eta * log_step + (1 - eta) * self.log_bar
        self.step = math.exp(log_step)
        return self.step

    @property
    def final(self) -> float:
        return math.exp(self.log_bar)


def _transition(target: Whitened, x, U, grad, step: float, n_leap: int,
                gen: torch.Generator) -> tuple:
    """One Metropolis-adjusted trajectory of ``n_leap`` leapfrog steps from ``(x, U, grad)``:
    returns the next ``(x, U, grad)``, the acceptance probability and the energy error. Where
    the target's gradient is not its value's (``target.integrated``: the FFT field), the
    potential's change is the gradient's work along the path (the trapezoidal rule), so the
    test measures the leapfrog's error on the field's own potential."""
    p = torch.randn(x.shape, generator=gen, dtype=x.dtype)
    H0 = U + 0.5 * float(p.square().sum())
    xn, pn = x, p - 0.5 * step * grad
    Un, gn, work = U, grad, 0.0
    for k in range(n_leap):
        x_next = xn + step * pn
        Un, g_next = target.energy(x_next)
        if not math.isfinite(Un):
            return x, U, grad, 0.0, math.inf
        work += 0.5 * float((gn + g_next) @ (x_next - xn))
        xn, gn = x_next, g_next
        pn = pn - (step if k < n_leap - 1 else 0.5 * step) * gn
    if target.integrated:
        Un = U + work
    error = Un + 0.5 * float(pn.square().sum()) - H0
    accept = math.exp(min(0.0, -error)) if math.isfinite(error) else 0.0
    if float(torch.rand((), generator=gen, dtype=torch.float64)) < accept:
        return xn, Un, gn, accept, error
    return x, U, grad, accept, error


def _first_step(target: Whitened, x, U, grad, gen) -> float:
    """A first step size: halved until a one-step trajectory accepts with probability above
    one half, or doubled while it does (the heuristic of Hoffman & Gelman 2014)."""
    step = 0.5
    _, _, _, a, _ = _transition(target, x, U, grad, step, 1, gen)
    up = a > 0.5
    for _ in range(30):
        nxt = step * (2.0 if up else 0.5)
        if nxt > MAX_FIRST_STEP:  # a wide, flat start: leave the rest to the adaptation
            return step
        _, _, _, a, _ = _transition(target, x, U, grad, nxt, 1, gen)
        if (a > 0.5) != up:
            return step if up else nxt
        step = nxt
    return step


def _leapfrogs(length: float, step: float, cap: int, gen: torch.Generator) -> int:
    """The steps of one trajectory: ``length / step`` jittered uniformly by +-50 %, in
    ``[1, cap]``."""
    u = 0.5 + float(torch.rand((), generator=gen, dtype=torch.float64))
    return int(min(cap, max(1, round(u * length / step))))


def _adapt(target: Whitened, window: list[torch.Tensor], reference: np.ndarray | None,
           x: torch.Tensor) -> tuple[torch.Tensor, float]:
    r"""Set the metric from a window's states and return ``x`` in the new coordinates (the same
    state) and the largest variance of the window's states in them (:func:`widest_variance`,
    cross-validated: the widest direction, often a collective move of many points, whose
    quarter period :math:`\tfrac\pi2\sqrt{\lambda}` is the trajectory's length). Each point's block
    becomes the square root of its covariance in the window (the draws Procrustes-aligned on
    ``reference`` unless it is ``None``: rotations of the whole map are no direction to
    tune for), every other coordinate's scale its spread; both shrunk towards a small multiple
    of the identity as Stan's windows are, and floored at 1e-8 of the median variance."""
    u = torch.stack([target.unconstrained(w) for w in window])
    k, n_q = len(window), target.shapes[target.name]
    Z = u[:, target.block].reshape(k, *n_q)
    if reference is not None:
        Z = torch.as_tensor(procrustes_align(Z.double().cpu().numpy()[None], reference)[0],
                            dtype=u.dtype)
    dZ = Z - Z.mean(0)
    C = torch.einsum("kna,knb->nab", dZ, dZ) / max(k - 1, 1)
    shrink = k / (k + 5.0)
    ridge = (C.diagonal(dim1=1, dim2=2).mean(-1).median() * 1e-3 + 1e-300) * (1 - shrink)
    eye = torch.eye(n_q[1], dtype=u.dtype)
    C = shrink * C + ridge * eye
    lam, V = torch.linalg.eigh(0.5 * (C + C.transpose(1, 2)))
    lam = lam.clamp_min(1e-8 * float(lam.median()))
    roots = V @ torch.diag_embed(lam.sqrt()) @ V.transpose(1, 2)
    sd = u.std(0) if k > 1 else torch.ones_like(target.centre)
    scale = shrink * sd + 1e-3 * (1 - shrink)
    scale[target.block] = 1.0
    state = target.unconstrained(x)
    target.roots, target.scale = roots, scale
    whitened = torch.stack([target.whiten(w) for w in u])
    Zw = torch.linalg.solve(roots, dZ.unsqueeze(-1)).reshape(k, -1)
    whitened[:, target.block] = Zw
    return target.whiten(state), max(widest_variance(whitened), 1.0)


def _lag_gap(draws: torch.Tensor, leak: float) -> int:
    """The draws to leave out on each side of a held-out block: the lag at which the draws'
    lag-one autocorrelation :math:`r` (pooled over coordinates) decays below ``leak``
    (``ceil(log leak / log r)``; none for :math:`r \\le` ``leak``)."""
    dX = draws - draws.mean(0)
    r = float((dX[1:] * dX[:-1]).sum() / dX.square().sum().clamp_min(1e-300))
    return 0 if r <= leak else math.ceil(math.log(leak) / math.log(min(r, 0.999)))


def widest_variance(draws: torch.Tensor, folds: int = 4, leak: float = 0.1) -> float:
    r"""The variance of a chain's draws (k, d) along their widest direction, cross-validated so
    that sampling noise does not inflate it.

    The top eigenvalue of a sample covariance is biased up by noise: k white-noise draws in
    d dimensions give about :math:`(1+\sqrt{d/k})^2` (the Marchenko-Pastur edge; 13 at d = 400,
    k = 60, where every direction's variance is 1), more when the draws are autocorrelated.
    Here the draws (in chain order) are cut into ``folds`` contiguous blocks; for each block
    the top right-singular vector :math:`v` of the other m draws (centred on their mean
    :math:`\bar x`) is found, and the held-out block's mean square along it about that mean
    is measured (divided by :math:`1 + 1/m`, the mean's own noise). Centring a block on the
    others' mean keeps a slow move of the chain (a drift across the window, a direction it
    wanders along) in the estimate: a block centred on its own mean would see little of it,
    and the short trajectories that follow would explore it less still. As
    :math:`v` does not depend on the block's draws, this is an unbiased estimate of
    :math:`v^\top\Sigma v \le \lambda_{\max}`: pure noise gives about 1, and a direction of
    variance :math:`\ell` well above the noise gives about
    :math:`1 + (s^2-\gamma)/(s+\gamma)`, :math:`s = \ell - 1`, :math:`\gamma = d/m` for m
    training draws (Baik, Ben Arous & Peche 2005, Paul 2007: :math:`v` is only partly aligned
    with the true direction; about :math:`\ell - \gamma` for :math:`\ell \gg \gamma`, 18 for
    :math:`\ell` = 25 at d = 400, k = 60). The error is towards shorter trajectories, not
    towards noise-driven long ones. Autocorrelated draws would leak a block's noise into its
    neighbours' :math:`v`: the draws within :func:`_lag_gap` of a block are left out of its
    training set (white noise drawn as an AR(1) chain of correlation 0.7 still reads about
    1.4, the training mean being noisier than :math:`1/m` says). The blocks' variances are pooled (sums of squares over their draws);
    with too few draws (or draws too still) for any block, 1 (a unit direction's variance)."""
    draws = draws.detach().to(torch.float64)
    k = draws.shape[0]
    folds = max(2, min(folds, k // 2))
    gap = min(_lag_gap(draws, leak), k // (2 * folds)) if k > 2 else 0
    edges = [round(i * k / folds) for i in range(folds + 1)]
    ss, df = 0.0, 0
    for a, b in zip(edges, edges[1:], strict=False):
        train = torch.cat([draws[:max(a - gap, 0)], draws[b + gap:]])
        if len(train) < 2 or b - a < 2:
            continue
        mean = train.mean(0)
        train = train - mean
        a_top = torch.linalg.eigh(train @ train.T)[1][:, -1]  # top left vector, via the Gram
        v = train.T @ a_top
        if not float(v.norm()) > 0:  # the training draws do not move: no direction to test
            continue
        v = v / v.norm()
        held = float(((draws[a:b] - mean) @ v).square().sum()) / (1 + 1 / len(train))
        ss, df = ss + held, df + (b - a)
    return ss / df if df > 0 else 1.0


def _warmup_windows(warmup: int) -> list[tuple[int, int]]:
    """The windows whose states set the scales and the trajectory length: 10-30 % and 30-70 %
    of the warm-up (the rest adapts the step size alone)."""
    cuts = [int(round(f * warmup)) for f in (0.1, 0.3, 0.7)]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b - a >= 4]


class _ChainRun:
    """One chain: warm-up (step size by dual averaging; scales and trajectory length from the
    windows of :func:`_warmup_windows`) at construction, then :meth:`draw` blocks of
    ``keep * thin`` trajectories, every ``thin``-th state kept, as many times as asked (the
    draws of one call of ``k + m`` are those of two calls of ``k`` and ``m``). ``first``
    numbers its trajectories (their draws of a stochastic likelihood)."""

    def __init__(self, target: Whitened, opts: dict, gen: torch.Generator,
                 reference: np.ndarray | None, first: int):
        self.target, self.gen, self.first = target, gen, first
        self.thin, self.cap = int(opts["thin"]), int(opts["max_leapfrog"])
        warmup, goal = int(opts["warmup"]), float(opts["target_accept_prob"])
        x = float(opts["init_jitter"]) * torch.randn(target.centre.shape, generator=gen,
                                                     dtype=target.centre.dtype)
        with target.trajectory(first):
            U, grad = target.energy(x)
            if not math.isfinite(U):
                raise FloatingPointError("HMC: the log density is not finite at the chain's "
                                         "start.")
            adapt = DualAveraging(_first_step(target, x, U, grad, gen), goal)
        length, windows, window = math.pi / 2, _warmup_windows(warmup), []
        for t in range(warmup):
            n_leap = _leapfrogs(length, adapt.step, self.cap, gen)
            x, U, grad, a, _ = self._trajectory(t, x, U, grad, adapt.step, n_leap)
            adapt.update(a)
            if any(lo <= t < hi for lo, hi in windows):
                window.append(x.clone())
            if any(t == hi - 1 for _, hi in windows):
                x, widest = _adapt(target, window, reference, x)
                with target.trajectory(first + t + 1):
                    U, grad = target.energy(x)
                length, window = math.pi / 2 * math.sqrt(widest), []
                adapt = DualAveraging(adapt.step, goal)
        self.state, self.t, self.warmup = (x, U, grad), warmup, warmup
        self.step, self.length = adapt.final, length
        self.kept, self.accepts, self.errors, self.leaps, self.divergent = [], [], [], [], []

    def _trajectory(self, t: int, x, U, grad, step: float, n_leap: int):
        with self.target.trajectory(self.first + t + 1):
            if self.target.stochastic:  # both ends scored with this trajectory's draws
                U, grad = self.target.energy(x)
            return _transition(self.target, x, U, grad, step, n_leap, self.gen)

    def draw(self, keep: int) -> None:
        """``keep`` more draws (``keep * thin`` trajectories at the tuned step size)."""
        x, U, grad = self.state
        for _ in range(keep * self.thin):
            t = self.t
            n_leap = _leapfrogs(self.length, self.step, self.cap, self.gen)
            x, U, grad, a, err = self._trajectory(t, x, U, grad, self.step, n_leap)
            self.accepts.append(a)
            self.errors.append(err)
            self.leaps.append(n_leap)
            if not math.isfinite(err) or err > DIVERGENCE:
                self.divergent.append(t - self.warmup)
            if (t - self.warmup + 1) % self.thin == 0:
                self.kept.append(self.target.values(x))
            self.t += 1
        self.state = (x, U, grad)

    def result(self) -> dict:
        errors = self.errors
        return {"draws": self.kept,
                "accept_prob": float(np.mean(self.accepts)) if self.accepts else float("nan"),
                "step_size": self.step,
                "leapfrog_mean": float(np.mean(self.leaps)) if self.leaps else 0.0,
                "trajectory_length": self.length, "divergent_draws": self.divergent,
                "energy_error_sd": float(np.std(np.nan_to_num(errors, posinf=0.0)))
                if errors else float("nan"),
                "evaluations": self.target.evaluations}


def sample_hmc(model: Callable, kwargs: dict, latent, site: tuple, Z_init: torch.Tensor,
               reference: np.ndarray, opts: dict, seed: int,
               repulsion: str = "exact", further: Callable[[dict], int] | None = None
               ) -> tuple[dict, dict]:
    """Run ``num_chains`` chains of :class:`_ChainRun` from the mode ``Z_init`` (each from its
    own jitter, ``init_jitter`` whitened units), on up to :func:`chain_workers` threads at once
    (the same draws whichever runs them). ``latent`` are the
    model's latent sites (:func:`probdr.infer.posterior.latent_sites`), ``site`` the inference
    site ``(name, to_site, from_site)``; ``reference`` (n, q) aligns the warm-up's draws.
    After ``num_samples`` draws per chain, while ``further(draws)`` asks for more (the number of
    draws each chain should add, 0 once the chains have mixed; ``None``: no test), every chain
    draws that many more (at most ``num_samples`` at a time), up to ``max_samples`` in all.
    Returns the draws ``{site: (chains, draws, ...)}`` (Z mapped back from a reparametrised
    site) and the diagnostics."""
    name, to_site, _ = site
    blocks = to_site is None and set(latent.values) == {name}
    roots = _roots(model, kwargs, Z_init) if blocks else None
    start = roots if roots is not None else _identity(Z_init)
    align = reference if opts["align"] and to_site is None else None
    chains, keep = int(opts["num_chains"]), int(opts["num_samples"])
    most = max(keep, _max_samples(opts))
    workers = chain_workers(opts["chain_workers"], chains, Z_init.device)
    stream_device = _stream_device(Z_init)
    fused_on, runs, streams = [], {}, {}

    def chain(c: int) -> None:
        """Chain ``c``: its own target, its own generator (momenta, jitter, Metropolis tests)
        and its own stream of a stochastic likelihood's draws, seeded from ``seed`` and ``c``
        alone, so that its draws are the same whichever thread runs it."""
        gen = torch.Generator().manual_seed(_chain_seed(seed, c))
        streams[c] = torch.Generator(stream_device).manual_seed(_chain_seed(seed, c) ^ 0x5EED)
        with private_pyro(), fit_stream(streams[c]):  # everything that runs Pyro's handlers
            own = model.copy() if hasattr(model, "copy") else model  # its own handlers
            fused = fused_energy(own, kwargs, Z_init) if roots is not None else None
            fused_on.append(fused is not None)
            target = Whitened(own, kwargs, latent.values, latent.supports, name, start,
                              repulsion in STOCHASTIC_REPULSIONS,
                              integrated=repulsion == "fft", fused=fused)
            runs[c] = _ChainRun(target, opts, gen, align, first=c * 10_000_000)
            runs[c].draw(keep)

    def extend(c: int, k: int) -> None:
        with private_pyro(), fit_stream(streams[c]):
            runs[c].draw(k)

    t0 = time.perf_counter()
    _each_chain(chain, range(chains), workers)
    drawn, blocks_added = keep, 0
    while further is not None and drawn < most:
        k = min(keep, most - drawn, int(further(_collect(runs, latent, site, Z_init))))
        if k <= 0:
            break
        _each_chain(lambda c, k=k: extend(c, k), range(chains), workers)
        drawn, blocks_added = drawn + k, blocks_added + 1
    results = [runs[c].result() for c in range(chains)]
    draws = _collect(runs, latent, site, Z_init)
    diag = {k: [run[k] for run in results] for k in
            ("accept_prob", "step_size", "leapfrog_mean", "trajectory_length",
             "divergent_draws", "energy_error_sd")}
    diag.update(divergences=[len(d) for d in diag["divergent_draws"]],
                gradient_evaluations=sum(run["evaluations"] for run in results),
                likelihood=likelihood_sampled(repulsion),
                metric_start="curvature blocks" if roots is not None else "identity",
                fused_energy=all(fused_on), chain_workers=workers,
                num_chains=len(results), warmup=int(opts["warmup"]),
                num_samples=drawn, blocks_added=blocks_added,
                seconds=time.perf_counter() - t0)
    return draws, diag


def _max_samples(opts: dict) -> int:
    """The most draws per chain: ``max_samples``, ``"auto"``: :data:`AUTO_MAX_SAMPLES` times
    ``num_samples``."""
    most = opts.get("max_samples", "auto")
    return AUTO_MAX_SAMPLES * int(opts["num_samples"]) if most == "auto" else int(most)


def _each_chain(fn: Callable[[int], None], chains, workers: int) -> None:
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(fn, chains))
    else:
        for c in chains:
            fn(c)


def _collect(runs: dict, latent, site: tuple, Z_init: torch.Tensor) -> dict:
    """The chains' draws so far, ``{site: (chains, draws, ...)}``, Z mapped back from a
    reparametrised site."""
    name, to_site, _ = site
    ordered = [runs[c] for c in sorted(runs)]
    draws = {k: np.stack([np.stack([_numpy(d[k]) for d in run.kept]) for run in ordered])
             for k in latent.values}
    if to_site is not None:
        with torch.no_grad():
            Zs = to_site(torch.as_tensor(draws.pop(name)).reshape(-1, *Z_init.shape))
        draws["Z"] = _numpy(Zs).reshape(len(ordered), -1, *Z_init.shape)
    return draws


def chain_workers(option, chains: int, device) -> int:
    """The threads that run the chains at once: ``option`` (``"auto"``: as many as the fit's
    torch threads allow, ``torch.get_num_threads()``), at most ``chains``; one on an
    accelerator (its kernels queue on one stream). The default is one: on two cores at 200
    points two chains on two threads took 69 s against 44 s one after the other (Python's lock
    and torch's own threads share the cores)."""
    if torch.device(device).type != "cpu":
        return 1
    n = torch.get_num_threads() if option == "auto" else int(option)
    return max(1, min(n, chains))


def _chain_seed(seed: int, c: int) -> int:
    """Chain ``c``'s seed: fixed by the sampler's ``seed`` and ``c``."""
    return (int(seed) * 1_000_003 + 7_919 * (c + 1)) % (2**63)


def _stream_device(Z: torch.Tensor) -> torch.device:
    """Where a stochastic likelihood's draws are made: the fit's stream's device, else Z's."""
    gen = fit_generator()
    return gen.device if gen is not None else Z.device


def fused_energy(model: Callable, kwargs: dict, Z: torch.Tensor) -> Callable | None:
    """The negative log joint of ``model`` over its one site ``Z`` and its gradient on Z,
    ``energy(Z) -> (U, dU/dZ)``, by the model's fused form (``model.fused_step``,
    :mod:`probdr.models.coupling_fused`: the weighted likelihood by explicit formulas) plus the
    prior ``kwargs["z_prior"]`` (its log density differentiated alone); ``None`` where the model
    has no fused form at these arguments or :func:`probdr.config.get_fused_step` is off. Equal
    to the Pyro trace's to rounding."""
    from .. import config

    make = getattr(model, "fused_step", None)
    if make is None or not config.get_fused_step():
        return None
    prior = kwargs.get("z_prior")
    step = make(Z.detach(), **dict(kwargs, z_prior=None))
    if step is None:
        return None
    prior_terms = None if prior is None else (gaussian_log_prob_and_grad(prior, Z)
                                              or _autograd_log_prob_and_grad(prior))

    def energy(Z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = step(Z, 1.0, True)
        if prior_terms is None:
            return loss, grad
        lp, g_prior = prior_terms(Z)
        return loss - lp, grad - g_prior

    return energy


def _autograd_log_prob_and_grad(prior) -> Callable:
    """``Z -> (log p(Z), its gradient)`` of any prior, by autograd."""

    def terms(Z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        Zg = Z.detach().requires_grad_(True)
        with torch.enable_grad():
            lp = prior.log_prob(Zg)
            (g,) = torch.autograd.grad(lp, Zg)
        return lp.detach(), g

    return terms


def gaussian_log_prob_and_grad(prior, Z: torch.Tensor) -> Callable | None:
    r"""``Z -> (log p(Z), its gradient)`` in closed form for a Gaussian prior of independent
    coordinates (torch's or Pyro's ``Normal``, expanded or made an event by ``Independent``,
    whose event covers all of Z): :math:`\sum -\tfrac12 r^2 - \log\sigma -
    \tfrac12\log 2\pi` and :math:`-r/\sigma` with :math:`r = (z - \mu)/\sigma`. The
    autograd of ``log_prob`` costs a quarter of a 200-point sampler's gradient; ``None`` for any
    other prior."""
    base = prior
    while isinstance(base, torch.distributions.Independent):
        base = base.base_dist
    if not (isinstance(base, torch.distributions.Normal)
            and type(base).log_prob is torch.distributions.Normal.log_prob
            and tuple(prior.batch_shape) == ()
            and tuple(prior.event_shape) == tuple(Z.shape)):
        return None
    loc, scale = base.loc, base.scale
    log_norm = 0.5 * math.log(2 * math.pi)

    def terms(Z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = (Z - loc) / scale
        lp = (-0.5 * r.square() - torch.log(scale) - log_norm).sum()
        return lp, -r / scale

    return terms


def _roots(model, kwargs: dict, Z: torch.Tensor) -> torch.Tensor | None:
    r""":math:`\Lambda_i^{-1/2}` of each point's curvature block at ``Z`` (the model's
    ``point_precisions``), eigenvalues floored at 1e-6 of the median's so that a flat or
    non-convex block (a point far from all others) gets a wide, not a singular, step; ``None``
    for a model that does not declare its blocks."""
    blocks = getattr(model, "point_precisions", None)
    if blocks is None:
        return None
    with torch.no_grad():
        P = blocks(Z.detach(), **kwargs).to(Z.dtype)
        P = 0.5 * (P + P.transpose(1, 2))
        lam, V = torch.linalg.eigh(P)
        floor = 1e-6 * float(lam.clamp_min(0).median().clamp_min(1e-300))
        lam = torch.nan_to_num(lam, nan=floor).clamp_min(floor)
        return V @ torch.diag_embed(lam.rsqrt()) @ V.transpose(1, 2)


def _identity(Z: torch.Tensor) -> torch.Tensor:
    return torch.eye(Z.shape[1], dtype=Z.dtype).expand(Z.shape[0], -1, -1).clone()


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.detach().to(torch.float64).cpu().numpy()
