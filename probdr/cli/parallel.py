"""Data-parallel runs of ``probdr embed`` (``--nproc``, ``torchrun``): the launcher, the process
group of the command and this process's place in it. Imports only the standard library at module
level (torch inside the functions)."""

from __future__ import annotations

import contextlib
import os
import sys


def rank() -> int:
    """This process's rank in the process group (0 without one)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """The number of processes of the process group (1 without one)."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@contextlib.contextmanager
def process_group():
    """Join the process group of a launcher (``--nproc``, ``torchrun``: ``WORLD_SIZE`` > 1 in
    the environment) for the duration of the command: NCCL with one GPU per rank where CUDA
    is available (the estimators' ``device="auto"``), else gloo."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        yield
        return
    import torch
    import torch.distributed as dist

    backend = "gloo"
    if torch.cuda.is_available() and dist.is_nccl_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        backend = "nccl"
    dist.init_process_group(backend)
    try:
        yield
    finally:
        dist.destroy_process_group()


def launch(nproc: int, argv: list[str]) -> int:
    """Run this command in ``nproc`` local processes through torch's elastic launcher (what
    ``torchrun --standalone --nproc-per-node N`` does): each joins a gloo group, the fit is
    data-parallel, rank 0 writes the outputs and prints the report. Returns the exit code."""
    import uuid

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc,
                          run_id=f"probdr-{uuid.uuid4().hex[:8]}", rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", max_restarts=0, monitor_interval=0.1)
    threads = max(1, (os.cpu_count() or 1) // nproc)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # the cores shared by the ranks
    try:
        elastic_launch(config, sys.executable)("-m", "probdr.cli", *argv)
    except ChildFailedError as exc:
        codes = [f.exitcode for f in exc.failures.values()]
        return max(codes) if codes else 1
    return 0
