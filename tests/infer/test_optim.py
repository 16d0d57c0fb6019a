"""The MAP driver's optimisers against ``torch.optim`` (same update rules, step by step), and the
reason they exist: a fit does not import ``torch._dynamo``."""

import subprocess
import sys

import pytest
import torch

from probdr.optim import SGD, Adam


def _trajectory(make_opt, steps=25):
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(6, 6, generator=gen, dtype=torch.float64)
    b = torch.randn(6, 2, generator=gen, dtype=torch.float64)
    Z = torch.randn(6, 2, generator=gen, dtype=torch.float64).requires_grad_(True)
    opt = make_opt([Z])
    out = []
    for t in range(steps):
        opt.zero_grad(set_to_none=True)
        # a non-quadratic loss so that gradients change sign and scale along the way
        loss = ((A @ Z - b) ** 2).sum() + torch.log1p((Z ** 2).sum(1)).sum()
        loss.backward()
        if t == 10:  # a learning-rate change mid-run, as the phase schedules do
            for g in opt.param_groups:
                g["lr"] *= 0.5
        opt.step()
        out.append(Z.detach().clone())
    return torch.stack(out)


@pytest.mark.parametrize("momentum", [0.0, 0.5, 0.9])
def test_sgd_matches_torch(momentum):
    ours = _trajectory(lambda p: SGD(p, lr=0.01, momentum=momentum))
    ref = _trajectory(lambda p: torch.optim.SGD(p, lr=0.01, momentum=momentum))
    assert torch.allclose(ours, ref, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(ours[0], ours[-1])  # it moved


@pytest.mark.parametrize("lr", [1e-3, 0.1])
def test_adam_matches_torch(lr):
    ours = _trajectory(lambda p: Adam(p, lr=lr))
    ref = _trajectory(lambda p: torch.optim.Adam(p, lr=lr))
    assert torch.allclose(ours, ref, rtol=1e-12, atol=1e-12)


def test_optimisers_validate():
    Z = torch.zeros(3, 2, requires_grad=True)
    with pytest.raises(ValueError, match="lr must be positive"):
        SGD([Z], lr=0.0)
    with pytest.raises(ValueError, match="empty parameter list"):
        Adam([], lr=0.1)


def test_a_fit_does_not_import_dynamo():
    code = ("import sys, numpy as np, probdr; "
            "X = np.random.default_rng(0).normal(size=(120, 5)); "
            "probdr.UMAP(n_epochs=20, random_state=0).fit_transform(X); "
            "probdr.TSNE(perplexity=10, n_iter=30, early_exaggeration_iter=10, "
            "random_state=0).fit_transform(X); "
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
