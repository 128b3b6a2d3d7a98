"""The thread count of torch's CPU kernels, set for a block: float32 sums split their work by thread and round
differently, so results that must not depend on the calling process's thread count run under a stated one."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block with ``count`` intra-op threads (unchanged when None), then restore the caller's count."""
    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
