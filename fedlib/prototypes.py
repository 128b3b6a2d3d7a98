"""Class prototypes by scatter ops (no Python loop over samples or classes)."""
from __future__ import annotations

import torch


def class_stats(z: torch.Tensor, y: torch.Tensor, num_classes: int):
    """Per-class counts (K,), feature sums (K, d) and sums of squared norms (K,) = Trace(F_k^T F_k)."""
    counts = torch.bincount(y, minlength=num_classes).to(z.dtype)
    sums = torch.zeros(num_classes, z.shape[1], dtype=z.dtype, device=z.device).index_add_(0, y, z)
    sq = torch.zeros(num_classes, dtype=z.dtype, device=z.device).index_add_(0, y, (z * z).sum(1))
    return counts, sums, sq


def class_means(z: torch.Tensor, y: torch.Tensor, num_classes: int):
    """Prototypes C^(k) = mean of z over class k (zeros where a class is absent) and counts."""
    counts, sums, _ = class_stats(z, y, num_classes)
    return sums / counts.clamp_min(1).unsqueeze(1), counts


def batch_class_means(z: torch.Tensor, y: torch.Tensor, num_classes: int, weight: torch.Tensor | None = None):
    """Class means of one (possibly padded) mini-batch by a one-hot product, usable inside a loss
    that an executor vmaps over clients; zeros for classes absent from the batch."""
    onehot = (y.unsqueeze(-1) == torch.arange(num_classes, device=y.device)).to(z.dtype)   # (B, K)
    if weight is not None:
        onehot = onehot * weight.unsqueeze(-1)
    counts = onehot.sum(0)
    return (onehot.T @ z) / counts.clamp_min(1).unsqueeze(1), counts


def aggregate_prototypes(protos: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Count-weighted mean over clients: protos (m, K, d), counts (m, K) -> (K, d), present mask (K,).

    C_bar^(k) = sum_i |D_ik| C_i^(k) / sum_i |D_ik|  (FedGPA Eq. 4, FedProto, FedPCL Eq. 6 up to 1/|N_j|)."""
    total = counts.sum(0)
    weighted = (protos * counts.unsqueeze(-1)).sum(0) / total.clamp_min(1).unsqueeze(-1)
    return weighted, total > 0


def pad_prototypes(protos: torch.Tensor, counts: torch.Tensor, global_protos: torch.Tensor) -> torch.Tensor:
    """Replace the prototypes of classes a client lacks with the global ones (FedPCL Eq. 7)."""
    present = (counts > 0).unsqueeze(-1)
    return torch.where(present, protos, global_protos.expand_as(protos))


def feature_variance(counts: torch.Tensor, sq: torch.Tensor, means: torch.Tensor) -> torch.Tensor:
    """Within-client feature variance (FedPAC; FedGPA Eq. 13 read with 1/|D_i| over the bracket):
    v = (1/n) [ sum_k p_k Tr(F_k^T F_k)/n_k - sum_k p_k^2 ||C^(k)||^2 ]."""
    n = counts.sum()
    p = counts / n
    return (( p * sq / counts.clamp_min(1)).sum() - (p * p * (means * means).sum(1)).sum()) / n
