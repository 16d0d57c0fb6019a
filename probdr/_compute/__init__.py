"""The engine room: the compute engine under the laws and solvers, cut by subject.

* :mod:`~probdr._compute.allpairs` -- exact all-pairs reductions of a kernel matrix (blocked,
  hand-written gradients) and the pairwise squared distances;
* :mod:`~probdr._compute.edges` -- edge sums and per-edge terms over an edge list, with
  hand-written gradients, and the deferral of their values;
* :mod:`~probdr._compute.edge_layout` -- the fused pass of the edge sums of large graphs over a
  locality-ordered layout;
* :mod:`~probdr._compute.fft` -- grid-interpolated all-pairs sums of 2-D embeddings (FFT);
* :mod:`~probdr._compute.alloc` -- heap reuse and scratch buffers during optimisation loops;
* :mod:`~probdr._compute.threads` -- torch's thread count kept at the cores other processes
  leave free;
* :mod:`~probdr._compute.distributed` -- a rank's shard of a data-parallel fit and its
  collectives;
* :mod:`~probdr._compute.step` -- the one door of an optimisation loop: the levers above, set
  around each step, and a record of what they did.

It imports torch, numpy and scipy, :mod:`probdr.config` and :mod:`probdr._utils`, and nothing
from the layers above (laws, solvers, models, inference, estimators). Its modules are imported
by name; this package imports none of them.
"""
