"""Every method runs on a CUDA device with both in-process executors and lands near its CPU run.
Skipped where no GPU is visible (CI has none); run on a GPU machine with
``python -m pytest tests/test_cuda.py``."""
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
