r"""MAP inference for probdr's Pyro models: one driver for every family.

A MAP fit maximises the log joint :math:`\log p(\theta, \mathcal D)` of a Pyro model over its
latent sites :math:`\theta` (the embedding ``Z`` in every family; ``Y`` in GW-MDS, ``Zbar`` in
the ccPCA models) with a point-mass guide :math:`q = \delta_{\hat\theta}` (``AutoDelta``): the
guide has no entropy, so the negative ELBO is :math:`-\log p(\hat\theta, \mathcal D)` and
minimising ``Trace_ELBO`` is MAP (maximum likelihood under the flat priors of the papers).

The driver is :class:`MAPFit`, the only code that creates the guide, opens a private Pyro
parameter store (a caller's ``pyro.param`` values are never touched), evaluates the loss, steps
the optimiser, records the loss history and checks it for non-finite values. It serves
:func:`run_map` (a schedule of :class:`Phase` objects: the graph couplings),
:func:`map_estimate` (one L-BFGS or Adam phase: the Wishart family, ccPCA) and, directly, the
block-coordinate schemes that alternate MAP steps with optimal transport (DistR, GW-MDS).
Posteriors (SVI, NUTS) start from the MAP: :func:`probdr.infer.posterior.fit_posterior`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from numbers import Integral
from typing import Any

import numpy as np
import pyro
import torch
from pyro.infer import Trace_ELBO
from pyro.infer.autoguide import AutoDelta
from pyro.infer.autoguide.initialization import init_to_value
from tqdm.auto import tqdm

from .. import config
from .._compute.isolation import private_pyro, validation_off
from .._compute.step import StepContext
from ..optim import Adam
from .schedule import (
    COLLAPSE_FLOOR,
    OPTIMIZERS,
    HookedModel,
    LossQueue,
    MAPResult,
    OptimiserHooks,
    Phase,
    RelativeChange,
    SyncFreeELBO,
    carry_optimizer,
    column_spread,
    fit_callback,
    fit_callbacks,
    latent_share,
    make_optimizer,
    point_mass_loss,
    random_stream,
    reparam_guide,
    rescue_collapsed_columns,
    set_random_stream,
)

__all__ = ["Phase", "MAPResult", "MAPFit", "RelativeChange", "run_map", "map_estimate",
           "OPTIMIZERS", "fit_callbacks"]

# --------------------------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------------------------
class MAPFit:
    r"""One MAP fit in progress: the driver behind :func:`run_map` and :func:`map_estimate`.

    Used as a context manager: entering it opens a private Pyro parameter store
    (``pyro.get_param_store().scope()``), so that neither the fit's parameters nor the caller's
    are seen by the other; leaving it restores the caller's store. Inside, :meth:`run` runs
    :class:`Phase` objects on any model arguments, and :meth:`values` reads the current point.
    Between two runs the caller may change the model's arguments (e.g. a transport plan fixed
    during a MAP step) while the optimiser keeps its state.

    Each step evaluates :math:`\ell(\hat\theta) = -\log p(\hat\theta, \mathcal D)`
    (``Trace_ELBO().differentiable_loss`` against an ``AutoDelta`` guide started at
    ``init_values``), differentiates ``loss_scale`` times it, and steps the optimiser:

    * ``"gains"``: t-SNE's gradient descent with momentum and per-coordinate gains
      (:class:`probdr.optim.GainsMomentum`);
    * ``"sgd"``: gradient descent with heavy-ball momentum (:class:`probdr.optim.SGD`);
    * ``"adam"``: Adam (:class:`probdr.optim.Adam`, ``torch.optim.Adam``'s update rule);
    * ``"lbfgs"``: ``torch.optim.LBFGS`` with a strong-Wolfe line search, one step being one
      call of up to 20 iterations -- the precise solver of the closed-form oracles.

    Parameters
    ----------
    model : callable
        Pyro model whose latent sites are the keys of ``init_values``.
    init_values : tensor or dict
        Initial value of the site ``"Z"``, or ``{site: initial value}``.
    optimizer : {"gains", "sgd", "adam", "lbfgs"}
    reparam : dict, optional
        ``{site: (to_site, from_site)}``, two mutually inverse maps: the optimiser then works on
        ``pyro.param(site + "_raw") = from_site(init)`` and the guide puts a point mass at
        ``to_site(raw)`` -- a change of variables that preconditions badly scaled MAP problems
        without changing the maximiser (the density is evaluated at the site's value; a Delta
        guide has no Jacobian term).
    loss_scale : float
        The optimiser sees ``loss_scale * loss`` (e.g. ``1/n`` gives t-SNE's KL gradient scale).
    grad_clip : float, optional
        Clamp every gradient coordinate to ``[-grad_clip, grad_clip]`` (not with L-BFGS).
    collapse_floor : float or None
        With ``"gains"`` and ``"sgd"`` and a site ``"Z"`` of shape (n, q) (not reparametrised),
        a column of Z whose spread falls below this value is re-centred and scaled back to 1e-4
        together with its velocity (see :func:`rescue_collapsed_columns`). ``None`` disables it.
    verbose, total_steps, desc : bool, int or None, str
        A progress bar (over ``total_steps`` steps, showing the recorded loss); ``desc`` names
        the fit there and in errors.
    callback, callback_every : callable or None, int
        ``callback(step, Z, loss)`` after every ``callback_every``-th step (``step`` counts from
        1, ``Z`` a numpy copy of the site ``"Z"``, ``loss`` the recorded loss); a true return
        value stops the fit (:attr:`stopped`). Default: the one set by :func:`fit_callbacks`;
        ``False``: none.
    optimizer_state : list, optional
        The state exported by :meth:`export_state` of an earlier fit of the same parameters
        (gains, velocity, moments), loaded into the first optimiser: the fit continues as if it
        had not stopped.
    loss_every : int, optional
        Evaluate and record the loss every ``loss_every``-th step of a phase (and at its first
        and last step, and at the callback's steps); the steps between compute their gradients
        only (exact: only the edge sums' values are skipped,
        :func:`probdr._compute.edges.values_deferred`).
        Phases with a stopping rule and L-BFGS record every step. Default: the setting of
        :func:`probdr.config.set_loss_every` (every 50th step).
    site_lr : dict, optional
        ``{site: learning rate}``: these sites (e.g. a kernel's ``dof``, :class:`probdr.kernels.Learn`)
        are stepped by Adam at their own rate, in unconstrained space (log of a positive
        number), not by the main optimiser, whose step sizes suit the embedding; a phase with
        ``learn_sites=False`` holds them (t-SNE's early exaggeration). Not with L-BFGS.
    site_every : int
        The ``site_lr`` sites take a step every ``site_every``-th step and are held in between
        (block-coordinate ascent): their gradient, which costs as much again as the
        embedding's on the FFT and edge paths, is computed on those steps only.
    guide : callable, optional
        ``guide(model, init_loc_fn)`` returns the guide to fit in place of the point mass, e.g.
        a Gaussian (``AutoNormal``): the loop is then stochastic variational inference, each
        step a one-draw estimate of the negative ELBO and its gradient on the same engine as a
        MAP step (:func:`probdr.infer.posterior.fit_posterior` uses it). ``init_loc_fn`` starts
        the guide's location at ``init_values``.
    num_particles : int
        Draws of the guide per step (a point mass needs one).
    first_step : int
        The number, in the whole fit, of the first step (from 0), so that a continued fit
        goes on with its epochs of negative sampling
        (:class:`probdr._compute.edges.EpochSchedule`): the model runs each step under
        :class:`~probdr.infer.schedule.OptimiserHooks` holding the step's number.

    Data-parallel fits: when the model declares ``data_parallel = True`` and a process group
    of more than one process is initialised (:mod:`probdr._compute.distributed`), the fit is
    sharded: the initial values are broadcast from rank 0, the model runs with this rank's
    :class:`~probdr._compute.distributed.Shard` current (it evaluates its share of the loss; the
    priors of the latent sites are carried at ``1 / world size``, :func:`latent_share`), and
    every step sums the gradients and the loss over ranks (one all-reduce) before clipping and
    the optimiser step -- so every rank takes the same steps and records the same history.
    Other models run whole on every rank.

    Attributes
    ----------
    history : ndarray
        The loss before every recorded step run so far (L-BFGS: at the start of each call);
        ``loss_steps`` their step numbers (from 1), ``n_steps`` the steps run, ``n_rescued``
        the number of collapsed columns rescued, ``guide`` the guide, ``shard`` this rank's
        shard of a data-parallel fit (``None`` otherwise), ``last_step`` the engine room's
        record of the last step (:class:`probdr._compute.step.Step`), ``fused_steps`` the
        steps run by the model's fused step.

    The fused step: in a plain MAP fit (a point mass over ``"Z"`` alone, a fixed observed
    graph, a stochastic-gradient optimiser, one process, not sync-free; see
    :meth:`_fused_form`) of a model that offers ``fused_step`` for the phase's arguments (the
    graph coupling's negative sampling and E law, :mod:`probdr.models.coupling_fused`),
    each step takes the loss and its gradient on Z from that function -- explicit formulas, no
    Pyro trace, no autograd -- and then the same clip, optimiser step and rescue. The setting
    :func:`probdr.config.set_fused_step` (``PROBDR_FUSED=0``) turns it off.
    """

    def __init__(self, model: Callable, init_values, *, optimizer: str = "gains",
                 reparam: dict | None = None, loss_scale: float = 1.0,
                 grad_clip: float | None = None, collapse_floor: float | None = COLLAPSE_FLOOR,
                 verbose: bool = False, total_steps: int | None = None, desc: str = "MAP",
                 callback: Callable | None = None, callback_every: int | None = None,
                 optimizer_state: list | None = None, loss_every: int | None = None,
                 site_lr: dict[str, float] | None = None, site_every: int = 1,
                 guide: Callable | None = None, num_particles: int = 1,
                 first_step: int = 0):
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}.")
        if optimizer == "lbfgs" and grad_clip is not None:
            raise ValueError("grad_clip does not apply to optimizer='lbfgs' (its line search "
                             "needs the exact gradient).")
        if optimizer == "lbfgs" and site_lr:
            raise ValueError("site_lr does not apply to optimizer='lbfgs' (one line search over "
                             "all sites).")
        #: sites stepped by Adam at their own learning rate (a kernel's numbers), every
        #: ``site_every``-th step
        self.site_lr = {k: float(v) for k, v in (site_lr or {}).items()}
        if isinstance(site_every, bool) or not isinstance(site_every, Integral) or site_every < 1:
            raise ValueError(f"site_every must be a positive integer, got {site_every!r}.")
        self.site_every = int(site_every)
        if isinstance(init_values, torch.Tensor):
            init_values = {"Z": init_values}
        if not init_values:
            raise ValueError("init_values must name at least one latent site.")
        self.model = model
        self.init_values = dict(init_values)
        self.optimizer = optimizer
        self.reparam = reparam
        self.loss_scale = loss_scale
        self.grad_clip = grad_clip
        self.collapse_floor = collapse_floor
        self.verbose = verbose
        self.total_steps = total_steps
        self.desc = desc
        if guide is not None and reparam:
            raise ValueError("a guide and reparam do not combine: reparam makes its own "
                             "point-mass guide.")
        self._make_guide = guide
        self.guide = None
        self.params: list[torch.Tensor] | None = None
        self.opt = None
        self._site_opts: list = []
        self._site_params: list[torch.Tensor] = []
        self._learn_sites = True
        self._rescued = 0
        self._losses = LossQueue(desc)
        self._n_steps = 0
        #: the number, in the whole fit, of this driver's first step (``optimize`` continues)
        self.first_step = int(first_step)
        if loss_every is not None and (isinstance(loss_every, bool)
                                       or not isinstance(loss_every, Integral) or loss_every < 1):
            raise ValueError(f"loss_every must be a positive integer, got {loss_every!r}.")
        first = next(iter(self.init_values.values()))
        self.loss_every = (int(loss_every) if loss_every is not None
                           else config.loss_every())
        #: steps queue on the device without host synchronisation (probdr.config.sync_free)
        self.sync_free = config.sync_free_for(first.device)
        self._z_param: torch.Tensor | None = None
        # one instance for the whole fit: its first call guesses the plate nesting (one more
        # run of the model and the guide)
        elbo = SyncFreeELBO if self.sync_free else Trace_ELBO
        self._elbo = elbo(num_particles=int(num_particles))
        #: the guide is a point mass (AutoDelta or a change of variables' Delta), one particle:
        #: the loss is -log p(x, z) at its values (point_mass_loss), the guide left unscored
        self._point_mass = guide is None and int(num_particles) == 1
        self._stack: ExitStack | None = None
        self._bar = None
        default_cb, default_every = fit_callback()
        self.callback = callback if callback is not None else default_cb
        if self.callback is False:
            self.callback = None
        self.callback_every = int(callback_every if callback_every is not None else default_every)
        self._initial_state = optimizer_state
        self.stopped = False
        self.shard = self._steps = self.last_step = None
        # the running phase's fused step (_fused_form; None: the Pyro path), the steps it ran
        self._fused, self.fused_steps = None, 0

    # -- context --------------------------------------------------------------------------
    def __enter__(self) -> MAPFit:
        stack = ExitStack()
        stack.enter_context(private_pyro())  # this thread's handlers and parameters only
        stack.enter_context(pyro.get_param_store().scope())
        self._bar = stack.enter_context(tqdm(total=self.total_steps, desc=self.desc,
                                             disable=not self.verbose, leave=False))
        self._stack = stack
        self._steps = stack.enter_context(StepContext(
            getattr(self.model, "data_parallel", False),
            next(iter(self.init_values.values())).device))
        self.shard = self._steps.shard
        model = latent_share(self.model, self.shard.share) if self.shard else self.model
        #: the step being run, for the model's effects that follow the schedule (negative
        #: sampling's epochs): set around each step, ``None`` outside them
        self._step_hook = OptimiserHooks()
        self._model = HookedModel(model, self._step_hook)
        if self.shard is not None:  # every rank starts from rank 0's point
            self.init_values = {k: self.shard.broadcast_(v.detach().clone())
                                for k, v in self.init_values.items()}
        start = init_to_value(values={k: v.detach().clone() for k, v in self.init_values.items()})
        if self.reparam:
            self.guide = reparam_guide(self.init_values, self.reparam)
        elif self._make_guide is not None:
            self.guide = self._make_guide(self.model, start)
        else:
            self.guide = AutoDelta(self.model, init_loc_fn=start)
        return self

    def __exit__(self, *exc) -> bool:
        stack, self._stack = self._stack, None
        return bool(stack.__exit__(*exc))

    def _check_open(self) -> None:
        if self._stack is None:
            raise RuntimeError("MAPFit is used as a context manager: `with MAPFit(...) as fit:`.")

    # -- state ----------------------------------------------------------------------------
    history = property(lambda self: np.asarray(self._losses.history, dtype=np.float64))
    loss_steps = property(lambda self: np.asarray(self._losses.steps, dtype=np.int64))
    n_steps = property(lambda self: self._n_steps)
    n_rescued = property(lambda self: int(self._rescued))

    def setup(self, model_kwargs: dict[str, Any]) -> None:
        """Create the guide's parameters by running it once on these model arguments (the first
        :meth:`run` does it otherwise)."""
        self._check_open()
        if self.params is not None:
            return
        self.guide(**model_kwargs)
        store = pyro.get_param_store()
        self.params = [store[name].unconstrained() for name in store.keys()]
        # "AutoDelta.Z", "Z_raw", "AutoNormal.locs.Z": the site is the last component
        site_of = {name: name.rsplit(".", 1)[-1].removesuffix("_raw") for name in store.keys()}
        missing = set(self.site_lr) - set(site_of.values())
        if missing:
            raise ValueError(f"site_lr names {sorted(missing)}, not latent sites of the model.")
        self._site_params = [p for name, p in zip(store.keys(), self.params, strict=False)
                             if site_of[name] in self.site_lr]
        self._site_opts = [Adam([p], lr=self.site_lr[site_of[name]])
                           for name, p in zip(store.keys(), self.params, strict=False)
                           if site_of[name] in self.site_lr]
        Z0 = self.init_values.get("Z")
        if (self.collapse_floor is not None and self.optimizer in ("gains", "sgd")
                and not self.reparam and Z0 is not None and Z0.ndim == 2):
            self._z_param = next((p for p in self.params if p.shape == Z0.shape), None)

    def export_state(self) -> list | None:
        """The optimiser's per-parameter state (copies), in parameter order; ``None`` before
        the first step."""
        if self.opt is None:
            return None
        return [{k: (v.detach().clone() if isinstance(v, torch.Tensor) else v)
                 for k, v in self._optimizer_of(p).state.get(p, {}).items()}
                for p in self.params]

    def _optimizer_of(self, p: torch.Tensor):
        """The optimiser that steps the parameter ``p`` (its site's Adam, or the main one)."""
        for opt, q in zip(self._site_opts, self._site_params, strict=False):
            if q is p:
                return opt
        return self.opt

    def _load_state(self, state: list) -> None:
        if len(state) != len(self.params):
            raise ValueError(f"optimizer_state has {len(state)} entries for {len(self.params)} "
                             "parameters.")
        for p, st in zip(self.params, state, strict=True):
            for v in st.values():
                if isinstance(v, torch.Tensor) and v.ndim and v.shape != p.shape:
                    raise ValueError("optimizer_state does not match the parameters' shapes.")
            self._optimizer_of(p).state[p] = {
                k: (v.clone().to(p.dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
                    else v) for k, v in st.items()}

    def values(self, model_kwargs: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The current point ``{site: value}`` (detached copies)."""
        self.setup(model_kwargs)
        with torch.no_grad():
            if self.reparam:
                return {k: self.reparam[k][0](pyro.param(k + "_raw")).detach().clone()
                        for k in self.init_values}
            return {k: v.detach().clone() for k, v in self.guide.median(**model_kwargs).items()}

    # -- steps ----------------------------------------------------------------------------
    def _loss(self, kwargs) -> torch.Tensor:
        if self._point_mass:
            return point_mass_loss(self._model, self.guide, **kwargs)
        return self._elbo.differentiable_loss(self._model, self.guide, **kwargs)

    def _gradient_step(self, kwargs) -> torch.Tensor:
        opt = self.opt
        opt.zero_grad(set_to_none=True)
        if self._fused is not None:  # the model's explicit gradient: no trace, no autograd
            loss, sites = self._fused_gradient(), False
        else:
            sites = self._sites_step()
            loss = self._loss(kwargs)
            (loss * self.loss_scale).backward()
        if self.shard is not None:  # the ranks' shares: one all-reduce of gradients and loss
            loss = self.shard.sum_gradients(self.params, loss)
        if self.grad_clip is not None:
            for p in self.params:
                if p.grad is not None:
                    p.grad.clamp_(-self.grad_clip, self.grad_clip)
        opt.step()
        if sites:
            for site_opt in self._site_opts:
                site_opt.step()
        if self._z_param is not None:
            self._rescued = self._rescued + rescue_collapsed_columns(
                self._z_param, opt, self.collapse_floor, self.sync_free)
        return loss.detach()

    def _fused_form(self, kwargs, observe) -> Callable | None:
        """The model's fused step at these arguments (:mod:`probdr.models.coupling_fused`), for
        a plain MAP fit: a point mass over the site ``"Z"`` alone (no change of variables, no
        learned sites, one particle), a fixed observed graph, a stochastic-gradient optimiser,
        on one process outside sync-free mode, with :func:`probdr.config.get_fused_step` on;
        ``None`` otherwise (and where the model offers none): the Pyro path."""
        if not (config.get_fused_step() and self._point_mass and observe is None
                and not self.reparam and not self.site_lr and self.shard is None
                and not self.sync_free and self.optimizer != "lbfgs"
                and set(self.init_values) == {"Z"} and len(self.params) == 1):
            return None
        return self._model.fused_step(self.params[0].detach(), **kwargs)

    def _fused_gradient(self) -> torch.Tensor:
        """One fused step's loss (``0 * sum(gradient)`` when not recorded: non-finite where the
        gradient is) with the gradient of ``loss_scale`` times it set on Z."""
        p = self.params[0]
        value = self.last_step is None or not self.last_step.values_deferred
        with torch.no_grad():
            loss, grad = self._fused(p.detach(), self.loss_scale, value)
        p.grad = grad
        self.fused_steps += 1
        return loss if loss is not None else grad.sum().mul_(0.0)

    @contextmanager
    def _at_step(self, step: int):
        """Inside, the model runs step ``step`` (from 1) of this driver: the step's number in
        the whole fit (from 0, after ``first_step``) for its effects that follow the schedule
        (:class:`~probdr.infer.schedule.OptimiserHooks`)."""
        self._step_hook.step = self.first_step + step - 1
        try:
            yield
        finally:
            self._step_hook.step = None

    def _sites_step(self) -> bool:
        """Whether the ``site_lr`` sites take this step: in phases that learn them, every
        ``site_every``-th step. Between, they are held as constants (no gradient is computed
        for them: a learned kernel then costs what a fixed one does)."""
        if not self._site_params:
            return False
        on = self._learn_sites and self._n_steps % self.site_every == 0
        for site_opt, p in zip(self._site_opts, self._site_params, strict=True):
            site_opt.zero_grad(set_to_none=True)
            p.requires_grad_(on)
        return on

    def _lbfgs_step(self, kwargs) -> torch.Tensor:
        losses: list[torch.Tensor] = []

        def closure():
            self.opt.zero_grad(set_to_none=True)
            loss = self._loss(kwargs)
            scaled = loss * self.loss_scale
            scaled.backward()
            if self.shard is not None:
                loss = self.shard.sum_gradients(self.params, loss)
                scaled = loss * self.loss_scale
            losses.append(loss.detach())
            return scaled

        self.opt.step(closure)
        return losses[0]

    def run(self, phase: Phase, model_kwargs: dict[str, Any], *, keep_state: bool = True,
            observe: Callable[[], torch.Tensor] | None = None) -> int:
        """Run one phase on the model arguments ``model_kwargs`` (updated by the phase's own);
        returns the number of steps run (fewer than ``phase.n_iter`` if a stopping rule stopped).

        Parameters
        ----------
        phase : Phase
        model_kwargs : dict
        keep_state : bool
            Carry the optimiser's state (gains, velocity, moments) over from the previous run,
            setting only the phase's learning rate and momentum; ``False`` starts a new
            optimiser. The first run always starts one.
        observe : callable, optional
            Returns a fresh observed graph before every step, passed as the model argument
            ``W_X`` (Monte Carlo coupling; not with L-BFGS).
        """
        self.setup(model_kwargs)
        if observe is not None and self.optimizer == "lbfgs":
            raise ValueError("optimizer='lbfgs' needs a deterministic objective; a fresh graph "
                             "at every step (observe) needs a stochastic-gradient optimiser.")
        if self.opt is None or not keep_state:
            main = [p for p in self.params if not any(p is q for q in self._site_params)]
            self.opt = make_optimizer(self.optimizer, main, phase)
            if self._initial_state is not None:
                self._load_state(self._initial_state)
                self._initial_state = None
        else:
            carry_optimizer(self.opt, phase)
        kwargs = {**model_kwargs, **phase.model_kwargs}
        self._learn_sites = phase.learn_sites
        self._fused = self._fused_form(kwargs, observe)
        step_fn = self._lbfgs_step if self.optimizer == "lbfgs" else self._gradient_step
        hist, queue = self._losses.history, self._losses
        total = self.total_steps
        stops = phase.converged is not None or phase.tol is not None
        every = 1 if self.optimizer == "lbfgs" or stops else self.loss_every
        cb_every = self.callback_every if self.callback is not None else 0
        read_every = config.SYNC_EVERY if self.sync_free and not stops else 1
        with validation_off(), self._steps.loop():
            for t in range(phase.n_iter):
                if phase.final_learning_rate is not None:
                    frac = (phase.decay_start + t) / max(phase.decay_steps or phase.n_iter, 1)
                    if phase.geometric:
                        lr = phase.learning_rate * (phase.final_learning_rate
                                                    / phase.learning_rate) ** frac
                    else:
                        lr = phase.learning_rate + frac * (phase.final_learning_rate
                                                           - phase.learning_rate)
                    for g in self.opt.param_groups:
                        g["lr"] = lr
                if observe is not None:
                    kwargs["W_X"] = observe()
                step = self._n_steps + 1
                record = (every == 1 or t % every == 0 or t == phase.n_iter - 1
                          or (cb_every and step % cb_every == 0))
                with self._steps.step(record) as self.last_step, self._at_step(step):
                    # between records: the gradient, a partial loss
                    queue.put(step, record, step_fn(kwargs))
                self._n_steps = step
                called = self.callback is not None and step % self.callback_every == 0
                if (step % read_every == 0 or t == phase.n_iter - 1 or called
                        or (self.verbose and total and step == total)):
                    loss = queue.read()
                if self.verbose and total and (step % 50 == 0 or step == total):
                    self._bar.set_postfix(loss=f"{hist[-1]:.4g}", phase=phase.name)
                    self._bar.update(50 if step % 50 == 0 else total % 50)
                if called:
                    Z = self.values(kwargs).get("Z")
                    Z = None if Z is None else Z.detach().to(torch.float64).cpu().numpy()
                    if self.callback(step, Z, loss):
                        self.stopped = True
                        return t + 1
                if t >= 1 and (phase.converged is not None or phase.tol is not None):
                    prev = hist[-2]  # every step is recorded under a stopping rule
                    if phase.converged is not None:
                        stop = phase.converged(prev, loss)
                    else:
                        stop = (abs(loss - prev) < phase.tol * abs(prev + phase.tol_offset))
                    if stop:
                        return t + 1
        return phase.n_iter


# --------------------------------------------------------------------------------------------
# the two entry points
# --------------------------------------------------------------------------------------------
def run_map(
    model: Callable,
    model_kwargs: dict[str, Any],
    Z0,
    phases: list[Phase],
    *,
    optimizer: str = "gains",
    loss_scale: float = 1.0,
    grad_clip: float | None = None,
    observe: Callable[[], torch.Tensor] | None = None,
    collapse_floor: float | None = COLLAPSE_FLOOR,
    reparam: dict | None = None,
    warn_collapse: bool = True,
    verbose: bool = False,
    desc: str = "MAP",
    optimizer_state: list | None = None,
    loss_every: int | None = None,
    stream: list | None = None,
    site_lr: dict[str, float] | None = None,
    site_every: int = 1,
    first_step: int = 0,
) -> MAPResult:
    """Maximise the model's log joint over its latent sites by a schedule of phases
    (:class:`MAPFit`, in a private Pyro parameter store).

    Parameters
    ----------
    model : callable
        Pyro model with a sample site ``"Z"`` (or the sites named in ``Z0``).
    model_kwargs : dict
        Keyword arguments passed to the model at every step (a phase may override some).
    Z0 : tensor (n, q) or dict
        Initial value of Z, or ``{site: initial value}``.
    phases : list of Phase
    optimizer : {"gains", "sgd", "adam", "lbfgs"}
        ``"gains"`` keeps its gains and velocity across phases; the others start afresh in
        every phase.
    loss_scale, grad_clip, collapse_floor, reparam, verbose, desc
        As in :class:`MAPFit` (UMAP clips gradients at 4; the collapse rescue is an exact
        symmetry of the dynamics under early exaggeration with broad input affinities).
    observe : callable, optional
        Returns the observed graph for each step (Monte Carlo coupling over W_X); it is passed to
        the model as its first argument ``W_X``.
    warn_collapse : bool
        Raise a ``RuntimeWarning`` when a column of the final Z has a spread below the floor
        (possible with Adam or without the rescue).
    optimizer_state : list, optional
        Continue from an earlier fit's optimiser state (:attr:`MAPResult.optimizer_state`).
    loss_every : int, optional
        Record the loss every ``loss_every``-th step of a phase, as in :class:`MAPFit`.
    site_lr : dict, optional
        ``{site: learning rate}`` of sites stepped by Adam apart from the main optimiser (a
        kernel's learned numbers), stepped every ``site_every``-th step, as in :class:`MAPFit`.
    stream : list, optional
        torch's random state to draw the steps from (set after the guide's setup, which runs
        the model once): an earlier fit's :attr:`MAPResult.stream`, to continue its draws.
    first_step : int
        The number of the first step in the whole fit, from 0: an earlier fit's steps, to
        continue its epochs of negative sampling (:class:`probdr._compute.edges.EpochSchedule`).

    Returns
    -------
    MAPResult
    """
    init = dict(Z0) if isinstance(Z0, dict) else {"Z": Z0}
    with MAPFit(model, init, optimizer=optimizer, reparam=reparam, loss_scale=loss_scale,
                grad_clip=grad_clip, collapse_floor=collapse_floor, verbose=verbose,
                total_steps=sum(ph.n_iter for ph in phases), desc=desc,
                optimizer_state=optimizer_state, loss_every=loss_every, site_lr=site_lr,
                site_every=site_every, first_step=first_step) as fit:
        base_kwargs = dict(model_kwargs)
        if observe is not None:
            base_kwargs["W_X"] = observe()
        fit.setup(base_kwargs)
        if stream is not None:
            set_random_stream(stream, fit.params[0].device)
        for phase in phases:
            fit.run(phase, base_kwargs, keep_state=optimizer == "gains", observe=observe)
            if fit.stopped:
                break
        end_stream = random_stream(fit.params[0].device)
        values = fit.values(base_kwargs)
        state = fit.export_state()
    Z = values.get("Z")
    floor = collapse_floor or COLLAPSE_FLOOR
    if warn_collapse and Z is not None and Z.ndim == 2 and Z.shape[0] > 1:
        flat = (Z.amax(0) == Z.amin(0)) | (column_spread(Z) < floor)
        if bool(flat.any()):
            warnings.warn(f"{desc}: the embedding collapsed: column(s) "
                          f"{flat.nonzero().flatten().tolist()} have a spread below "
                          f"{floor:g} (points nearly or exactly equal). Lower the early "
                          "exaggeration or the perplexity, or change the initialisation.",
                          RuntimeWarning, stacklevel=2)
    return MAPResult(Z=Z, loss_history=fit.history, loss_steps=fit.loss_steps,
                     n_iter=fit.n_steps,
                     n_rescued=fit.n_rescued, values=values, optimizer_state=state,
                     stopped=fit.stopped, stream=end_stream, fused_steps=fit.fused_steps)


def map_estimate(
    model,
    model_kwargs: dict,
    init_values: dict[str, torch.Tensor],
    *,
    optimizer: str = "lbfgs",
    n_iter: int = 500,
    lr: float = 1.0,
    tol: float = 1e-12,
    return_history: bool = False,
    reparam: dict | None = None,
):
    r"""MAP of a Pyro model in one phase of L-BFGS or Adam: :func:`run_map` with one
    :class:`Phase`, returning the point ``{site: value}``.

    * ``"lbfgs"``: ``max(1, n_iter // 20)`` calls of ``torch.optim.LBFGS`` (20 iterations each,
      strong-Wolfe line search, initial step ``lr``), stopping when the loss changes by less
      than ``tol`` relative to its size (:class:`RelativeChange`) -- the precise solver used
      for the closed-form oracles;
    * ``"adam"``: ``n_iter`` Adam steps of learning rate ``lr``.

    ``reparam``: a change of variables that preconditions badly scaled problems without
    changing the maximiser (see :class:`MAPFit`).

    The fit runs in a private Pyro parameter-store scope, so it never touches the caller's
    parameters. Returns ``{site: value}`` (and the loss history if ``return_history``).
    """
    if optimizer == "lbfgs":
        phase = Phase(max(1, n_iter // 20), lr, converged=RelativeChange(tol), name="L-BFGS")
    elif optimizer == "adam":
        phase = Phase(n_iter, lr, name="Adam")
    else:
        raise ValueError(f"optimizer must be 'lbfgs' or 'adam', got {optimizer!r}.")
    res = run_map(model, model_kwargs, dict(init_values), [phase], optimizer=optimizer,
                  reparam=reparam, collapse_floor=None, warn_collapse=False)
    if return_history:
        return res.values, res.loss_history
    return res.values
