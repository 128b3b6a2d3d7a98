"""FederatedData: one dataset in device memory plus per-client index tensors."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fedlib.data.partition import class_counts, local_test_indices, partition_with_server
from fedlib.data.sources import Dataset
from fedlib.metrics import frequency_groups


@dataclass
class FederatedData:
    data: Dataset
    train_idx: list[torch.Tensor]  # per client, indices into data.train_x
    test_idx: list[torch.Tensor]   # per client, indices into data.test_x (same label mix as train)
    train_counts: np.ndarray       # clients x classes
    test_counts: np.ndarray
    client_domains: list | None = None  # the domain of each single-domain client (feature shift)
    server_idx: torch.Tensor | None = None  # training samples held by the server (partition "server")
    seed: int = 0                  # the seed it was partitioned with (for test sets derived from it)

    @property
    def num_clients(self) -> int:
        return len(self.train_idx)

    @property
    def num_classes(self) -> int:
        return self.data.num_classes

    @property
    def sizes(self) -> np.ndarray:
        return self.train_counts.sum(1)

    def class_groups(self) -> dict[str, np.ndarray]:
        """FedPRP's Many / Medium / Few: top 20%, 20-50%, bottom 50% of classes by global train count."""
        return frequency_groups(self.train_counts.sum(0))


def federate(data: Dataset, num_clients: int, spec: dict, seed: int, device="cpu") -> FederatedData:
    """Partition ``data`` (on any device: the partition reads host copies of its labels and domains) and put it,
    with the clients' index tensors, on ``device``."""
    labels = data.train_y.cpu().numpy()
    train_domain = None if data.train_domain is None else data.train_domain.cpu().numpy()
    parts, held = partition_with_server(labels, data.num_classes, num_clients, spec, seed, domain_ids=train_domain)
    counts = class_counts(labels, parts, data.num_classes)
    test_labels = data.test_y.cpu().numpy()
    client_domains = None
    if train_domain is not None:  # single-domain clients are tested on their own domain
        client_domains = [int(np.unique(train_domain[p])[0]) if len(np.unique(train_domain[p])) == 1 else None
                          for p in parts]
    tests = local_test_indices(test_labels, counts, spec.get("test_fraction", 0.25), seed + 1,
                               None if data.test_domain is None else data.test_domain.cpu().numpy(), client_domains)
    as_tensor = lambda parts: [torch.as_tensor(p, dtype=torch.int64, device=device) for p in parts]  # noqa: E731
    return FederatedData(data.to(device), as_tensor(parts), as_tensor(tests), counts,
                         class_counts(test_labels, tests, data.num_classes), client_domains,
                         torch.as_tensor(held, dtype=torch.int64, device=device) if len(held) else None, seed)
