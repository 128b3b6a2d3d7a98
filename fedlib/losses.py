"""Prototype losses shared by several methods (pure functions of one mini-batch)."""
from __future__ import annotations

import torch


def _mask(y: torch.Tensor, present: torch.Tensor | None) -> torch.Tensor:
    return torch.ones_like(y, dtype=torch.bool) if present is None else present[y]


def prototype_mse(z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor | None, present=None) -> torch.Tensor:
    """mean over samples and dimensions of (z - C^(y))^2 (FedProto, FedPAC); 0 before any prototype."""
    if protos is None:
        return z.new_zeros(())
    m = _mask(y, present)
    if not m.any():
        return z.new_zeros(())
    return ((z[m] - protos[y[m]]) ** 2).mean()


def prototype_distance(z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor | None, present=None) -> torch.Tensor:
    """(1/|B|) sum_b ||z_b - C^(y_b)||_2 (FedGPA Eq. 5, per-sample reading); 0 before any prototype."""
    if protos is None:
        return z.new_zeros(())
    m = _mask(y, present)
    if not m.any():
        return z.new_zeros(())
    return torch.linalg.vector_norm(z[m] - protos[y[m]], dim=1).sum() / len(y)


def prototype_contrastive(z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, tau: float) -> torch.Tensor:
    """FedPCL Eq. 8 for one prototype set (K, d): -log exp(z.C^y/tau) / sum_{a != y} exp(z.C^a/tau),
    averaged over the batch. The denominator runs over the negatives A(y) only, as the paper writes."""
    logits = z @ protos.T / tau
    pos = logits.gather(1, y[:, None]).squeeze(1)
    negatives = logits.masked_fill(torch.nn.functional.one_hot(y, protos.shape[0]).bool(), float("-inf"))
    return (torch.logsumexp(negatives, 1) - pos).mean()
