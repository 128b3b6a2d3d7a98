"""Every method runs on a CUDA device with both in-process executors and lands near its CPU run.
Skipped where no GPU is visible (CI has none); run on a GPU machine with
``python -m pytest tests/test_cuda.py``."""
import dataclasses

import numpy as np
import pytest
import torch
from test_engine import DIGITS, NEEDS

from fedlib.experiment import make_config, run
from fedlib.methods import METHODS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("executor", ["sequential", "batched"])
@pytest.mark.parametrize("method", list(METHODS))
def test_method_runs_on_cuda_close_to_cpu(method, executor):
    kwargs = {**DIGITS, **NEEDS.get(method, {})}
    cpu = run(make_config(method=method, **kwargs), cache_dir=None, progress=False)["final"]
    gpu = run(make_config(method=method, device="cuda", executor=executor, **kwargs), cache_dir=None,
              progress=False)["final"]
    assert np.isfinite(gpu["train_loss"])
    # float32 on another device: the same training up to rounding, which two rounds amplify a little
    assert abs(gpu["train_loss"] - cpu["train_loss"]) <= 0.05 * abs(cpu["train_loss"]) + 1e-3, (cpu, gpu)
    assert abs(gpu["personal_local_acc"] - cpu["personal_local_acc"]) <= 0.05, (cpu, gpu)


@pytest.mark.parametrize("method", ["fedavg", "fedgpa", "fedpac"])
def test_run_batched_group_on_cuda_close_to_its_cpu_runs(method, tmp_path):
    """The run-batched path (``run_many``: data put on the device once and shared by the group) partitions
    each run like its CPU run and lands near it."""
    from test_lockstep import trio

    from fedlib.experiment import run_many

    cfgs = [dataclasses.replace(c, device="cuda") for c in trio(method)]
    for cfg, record in zip(cfgs, run_many(cfgs, cache_dir=tmp_path, progress=False)):
        assert isinstance(record, dict), record
        cpu = run(dataclasses.replace(cfg, device="cpu"), cache_dir=None, progress=False)
        assert record["train_counts"] == cpu["train_counts"]
        gpu, ref = record["final"], cpu["final"]
        assert abs(gpu["train_loss"] - ref["train_loss"]) <= 0.05 * abs(ref["train_loss"]) + 1e-3, (ref, gpu)
        assert abs(gpu["personal_local_acc"] - ref["personal_local_acc"]) <= 0.05, (ref, gpu)
