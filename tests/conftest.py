import os

import pytest
import torch

os.environ.setdefault("TQDM_DISABLE", "1")


@pytest.fixture
def one_thread():
    """Worker processes train with one thread; the in-process reference does too for bitwise checks."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
