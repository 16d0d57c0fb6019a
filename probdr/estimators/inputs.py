"""Mixins of :class:`~probdr.estimators.coupling.GraphCoupling`: the kinds of input it takes
(features, dense or sparse; precomputed distances, neighbour lists or affinities; a graph law;
labels) and the continuation of a MAP fit (``optimize``)."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
import torch
from sklearn.utils import check_scalar

from ..infer import Phase, run_map
from ..infer.schedule import continue_schedule
from ..init import initialize
from ..laws.graph import GraphLaw
from ..models.coupling import graph_coupling_model
from .base import in_fit_environment

__all__ = ["InputKindsMixin", "ContinueMixin"]


class InputKindsMixin:
    """What X (and y) may be, for the graph-coupling estimators."""

    def _precomputed(self) -> str | None:
        """``"distances"`` (``metric="precomputed"``), ``"affinity"``
        (``affinity="precomputed"``) or ``None`` (X holds features), as the input side reads
        the parameters (:attr:`probdr.input.InputGraph.precomputed`)."""
        return self._make_input().precomputed

    def _validate_X(self, X):
        if self._precomputed() == "affinity" and isinstance(X, GraphLaw):
            self.n_features_in_ = X.n
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
            return X
        return super()._validate_X(X)

    def _check_labels(self, y, n: int):
        from ..input.labels import check_labels

        return check_labels(y, n)

    def _sparse_ok(self) -> bool:
        return self._accepts_sparse and not (isinstance(self.init, str) and self.init == "ccpca")

    def _initial(self, X, mean, gen) -> torch.Tensor:
        """The initial embedding. Without features (precomputed input) ``"pca"`` is classical
        MDS of dense distances, else spectral."""
        init, data, given = self.init, X, False
        if isinstance(X, GraphLaw):  # no features: the initialisers need the size only
            data = torch.empty(X.n, 0, dtype=torch.float64)
        kind = self._precomputed()
        if isinstance(init, str) and init == "pca" and kind is not None:
            import scipy.sparse as sp

            if kind == "distances" and not sp.issparse(X):
                from ..init import classical_mds

                data, given = classical_mds(X, self.n_components), True
            else:
                init = "spectral"
        if given:
            from ..init import pad_columns, rescale

            Z = pad_columns(data, self.n_components, gen)
            return rescale(Z, self.init_scale, gen)
        return initialize(init, data, self.n_components, graph=mean,
                          input_graph=self.input_graph_, scale=self.init_scale, generator=gen)

    def _observed_graph(self, W=None):
        r"""The graph the latent graph is coupled with: :math:`W_X` (its mean unless given), or
        after ``fit(X, y)`` the label mixture :math:`(1-\alpha) W_X + \alpha W_Y` of the
        labelled rows (:func:`probdr.input.labels.supervised_mean`)."""
        W = self.input_graph_.mean if W is None else W
        if getattr(self, "label_graph_", None) is None:
            return W
        from ..input.labels import supervised_mean

        return supervised_mean(W, self.label_graph_, self._y_fit, float(self.target_weight))


class ContinueMixin:
    """``optimize``: more MAP steps from the fitted state."""

    def _keep_map_state(self, res) -> None:
        """What ``optimize`` continues, kept right after the MAP fit: the optimiser's state and
        torch's random stream (negative samples, sampled graphs); the schedule is the fitted
        coupling's."""
        self._optimizer_state = res.optimizer_state
        self._stream = res.stream

    def _continuation(self, n_iter, learning_rate, momentum, exaggeration) -> list[Phase]:
        """The phases of ``optimize``: the schedule continued (``continue_schedule``), with the
        given values in place of the schedule's."""
        phases = continue_schedule(self._fitted_coupling().schedule, int(self.n_iter_),
                                   int(n_iter))
        for ph in phases:
            ph.name = f"optimize ({ph.name})"
            if learning_rate is not None:
                ph.learning_rate, ph.final_learning_rate = learning_rate, None
            if momentum is not None:
                ph.momentum = momentum
            if exaggeration is not None:
                ph.model_kwargs = {} if exaggeration == 1.0 else {"exaggeration": exaggeration}
            check_scalar(ph.learning_rate, "learning_rate", Real, min_val=0,
                         include_boundaries="neither")
            check_scalar(ph.momentum, "momentum", Real, min_val=0, max_val=1,
                         include_boundaries="left")
        return phases

    @in_fit_environment
    def optimize(self, n_iter: int, *, learning_rate: float | None = None,
                 momentum: float | None = None, exaggeration: float | None = None):
        """Continue optimising the fitted embedding for ``n_iter`` more steps (openTSNE's
        ``optimize``), from where the previous ``fit`` or ``optimize`` stopped: the optimiser's
        state (gains, velocity, moments) and torch's random stream (negative samples, sampled
        graphs) go on as in one longer run, and so does the schedule:

        * a fit stopped before the end of its schedule (by a callback) first runs the rest of
          it, as planned: ``fit`` of ``N`` steps stopped after ``a``, then ``optimize(N - a)``
          (with ``callbacks=None``: optimize runs the callbacks too, counting from 1), is
          bitwise the uninterrupted fit (also for UMAP's and LargeVis's decaying rate);
        * past the end, the last phase goes on. A constant learning rate stays (t-SNE,
          GraphCoupling: ``fit`` of ``a`` steps then ``optimize(b)`` is bitwise a fit of
          ``a + b``). A linear decay to 0 (UMAP, LargeVis) cannot go on past 0: it is stretched,
          the new steps taking the rates that a decay planned ``a + b`` steps long gives its
          steps ``a`` to ``a + b - 1``, from ``lr0 * b / (a + b)`` down towards 0. Only the
          first ``a`` steps' rates then differ from a fit of ``a + b`` steps.

        ``learning_rate`` (held constant), ``momentum`` and ``exaggeration`` replace the
        schedule's in every new step. Updates ``embedding_``, ``loss_history_`` and
        ``loss_steps_`` (appended) and ``n_iter_``; the callbacks run as in ``fit``. Returns
        ``self``."""
        from ..infer.map import fit_callbacks
        from .base import isolated_random_state

        self._check_fitted()
        check_scalar(n_iter, "n_iter", Integral, min_val=1)
        if exaggeration is not None:
            check_scalar(exaggeration, "exaggeration", Real, min_val=0,
                         include_boundaries="neither")
        if self.inference != "map":
            raise ValueError("optimize continues a MAP fit; with inference="
                             f"{self.inference!r} refit the estimator instead.")
        phases = self._continuation(n_iter, learning_rate, momentum, exaggeration)
        coupling = self._fitted_coupling()
        scale, clip = coupling.loss_scale, coupling.grad_clip
        Z0 = torch.as_tensor(self.embedding_).to(self._fit_dtype)
        init, sites = self._map_start(Z0, getattr(self, "learned_kernel_params_", None))
        seed = (self.random_state_ + int(self.n_iter_)) % (2**32)  # for files without _stream
        with isolated_random_state(seed), fit_callbacks(self._callback(), self.callbacks_every):
            res = run_map(graph_coupling_model, self.model_kwargs_, init, phases,
                          optimizer=self.optimizer, loss_scale=scale, grad_clip=clip,
                          observe=self._observe(), verbose=self.verbose,
                          desc=f"{type(self).__name__}.optimize",
                          optimizer_state=self._optimizer_state,
                          stream=getattr(self, "_stream", None), first_step=int(self.n_iter_),
                          **sites)
        self._stream = res.stream
        self._keep_learned_kernel(res.values)
        self._coupling = coupling.with_kernel(self.kernel_)
        if not torch.isfinite(res.Z).all():
            raise FloatingPointError(f"{type(self).__name__}.optimize produced a non-finite "
                                     "embedding; lower the learning rate.")
        self.embedding_ = res.Z.detach().to(torch.float64).cpu().numpy()
        self.loss_history_ = np.concatenate([self.loss_history_, res.loss_history])
        done = getattr(self, "loss_steps_", None)  # absent in estimators saved before it
        done = np.arange(1, len(self.loss_history_) + 1) if done is None else done
        self.loss_steps_ = np.concatenate([done, int(self.n_iter_) + res.loss_steps])
        self.n_iter_ = int(self.n_iter_) + res.n_iter
        self.stopped_by_callback_ = res.stopped
        self._optimizer_state = res.optimizer_state
        return self
