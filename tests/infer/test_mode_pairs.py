"""Every defined coupling reaches its mode: on data drawn from its own latent law, the posterior
path's centre (the schedule's MAP, then the mode search) scores a loss no higher than the
truth's when started at the truth, and within 1 % of it from the default start (a Laplace fit
given its graph searches the starts read off the graph too)."""

import itertools
import warnings

import numpy as np
import pytest
import torch

import probdr
from probdr.kernels import get_kernel
from probdr.laws.simulate import simulate_observed_graph

#: (prior_x, prior_z) of Van Assel et al. (2022, Table 1) that take a precomputed graph drawn
#: from the latent law (B~ needs a symmetric one), and the coupling weight of the draw
PAIRS = {("B", "B"): 4.0, ("D", "B"): 4.0, ("D", "D"): 4.0, ("E", "E"): 4.0, ("D", "E"): 20.0}
KERNELS = ("student", "gaussian", "umap_odds")


def _loss_gaps(prior_x, prior_z, kernel, weight, n=100):
    g = torch.Generator().manual_seed(0)
    Zt = 3 * torch.randn(n, 2, dtype=torch.float64, generator=g)
    W = simulate_observed_graph(prior_z, Zt, get_kernel(kernel), weight, g).to_dense().numpy()
    gaps = []
    for init in (Zt.numpy().astype(np.float32), "pca"):
        est = probdr.GraphCoupling(prior_x=prior_x, prior_z=prior_z, kernel_z=kernel,
                                   affinity="precomputed", coupling_weight=weight, init=init,
                                   inference="laplace", inference_params={"calibrate": False},
                                   random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(W)
        truth, mode = float(est.loss(Zt.numpy())), float(est.loss(est.mode_embedding_))
        gaps.append((mode - truth) / abs(truth))
    return gaps


@pytest.mark.slow
@pytest.mark.parametrize("pair,kernel", list(itertools.product(PAIRS, KERNELS)))
def test_every_coupling_reaches_its_mode(pair, kernel):
    if pair[0] == "D" and pair != ("D", "D") and kernel == "gaussian":
        pytest.skip("a draw of the B or E law with the Gaussian kernel leaves rows empty, "
                    "which the D input prior refuses")
    from_truth, from_default = _loss_gaps(*pair, kernel, PAIRS[pair])
    assert from_truth <= 0.0  # the criteria: no higher than the truth's loss,
    assert from_default <= 0.01  # and within 1 % of it from the default start
