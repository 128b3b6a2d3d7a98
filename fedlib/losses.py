"""Local losses shared by several methods: pure functions of one mini-batch.

Written so that an executor can vmap them over clients and pad a batch with zero-weight samples:
per-sample terms are reduced with ``batch_mean`` (or an explicit weight), there is no boolean
indexing and no Python branch on tensor values.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

NEG = -1e9  # a finite "minus infinity" for masked logits (keeps gradients of degenerate rows finite)


def sample_weight(batch) -> torch.Tensor | None:
    return getattr(batch, "weight", None)


def batch_mean(values: torch.Tensor, batch) -> torch.Tensor:
    """Mean of per-sample ``values`` over the batch's real samples (all of them when unweighted)."""
    w = sample_weight(batch)
    if w is None:
        return values.mean()
    return (values * w).sum() / w.sum().clamp_min(1e-12)


def cross_entropy(logits: torch.Tensor, batch) -> torch.Tensor:
    if sample_weight(batch) is None:
        return F.cross_entropy(logits, batch.y)
    return batch_mean(F.cross_entropy(logits, batch.y, reduction="none"), batch)


def proximal(params: dict, anchor: dict) -> torch.Tensor:
    """sum over the trained tensors of ||w - w_anchor||^2 (FedProx Eq. 2, Ditto Eq. 2)."""
    return sum(((params[k] - anchor[k]) ** 2).sum() for k in params)


def _zero(z: torch.Tensor) -> torch.Tensor:
    """A zero that stays on the autograd graph (a loss made only of this term can still backward)."""
    return z.sum() * 0.0


def _keep(batch, y: torch.Tensor, present: torch.Tensor | None, dtype) -> torch.Tensor:
    """Per-sample weight of a prototype term: real samples whose class has a prototype."""
    keep = torch.ones(y.shape, dtype=dtype, device=y.device) if sample_weight(batch) is None else sample_weight(batch)
    return keep if present is None else keep * present[y].to(dtype)


def prototype_mse(z: torch.Tensor, batch, protos: torch.Tensor | None, present=None) -> torch.Tensor:
    """Mean over samples (whose class has a prototype) and dimensions of (z - C^(y))^2 (FedProto,
    FedPAC); 0 before any prototype exists."""
    if protos is None:
        return _zero(z)
    keep = _keep(batch, batch.y, present, z.dtype)
    per_sample = ((z - protos[batch.y]) ** 2).sum(1)
    return (per_sample * keep).sum() / (keep.sum() * z.shape[1]).clamp_min(1e-12)


def prototype_distance(z: torch.Tensor, batch, protos: torch.Tensor | None, present=None) -> torch.Tensor:
    """(1/|B|) sum_b ||z_b - C^(y_b)||_2 over samples whose class has a prototype (FedGPA Eq. 5,
    per-sample reading); 0 before any prototype exists."""
    if protos is None:
        return _zero(z)
    keep = _keep(batch, batch.y, present, z.dtype)
    dist = torch.linalg.vector_norm(z - protos[batch.y], dim=1)
    w = sample_weight(batch)
    n = torch.tensor(float(len(batch.y)), device=z.device) if w is None else w.sum().clamp_min(1e-12)
    return (dist * keep).sum() / n


def prototype_contrastive(z: torch.Tensor, batch, protos: torch.Tensor, tau: float) -> torch.Tensor:
    """FedPCL Eq. 8 (one set, protos (K, d)) or Eq. 9 (m sets, protos (m, K, d), averaged over sets):
    -log exp(z.C^y/tau) / sum_{a != y} exp(z.C^a/tau), averaged over the batch. The denominator runs
    over the negatives A(y) only, as the paper writes."""
    y = batch.y
    sets = protos if protos.ndim == 3 else protos.unsqueeze(0)
    logits = torch.einsum("bd,mkd->mbk", z, sets) / tau
    positive = y.unsqueeze(-1) == torch.arange(sets.shape[1], device=y.device)        # (b, K)
    pos = (logits * positive).sum(2)
    negatives = logits.masked_fill(positive.unsqueeze(0), NEG)
    return batch_mean((torch.logsumexp(negatives, 2) - pos).mean(0), batch)


def supervised_contrastive(z: torch.Tensor, batch, tau: float) -> torch.Tensor:
    """SupCon (Khosla et al., 2020, L_out): for each anchor, the mean over its positives p of
    -log exp(z.z_p/tau) / sum_{a != anchor} exp(z.z_a/tau); anchors without positives are skipped."""
    y = batch.y
    n = len(y)
    w = sample_weight(batch)
    valid = torch.ones(n, dtype=torch.bool, device=z.device) if w is None else w > 0
    self_mask = torch.eye(n, dtype=torch.bool, device=z.device)
    excluded = self_mask | ~valid.unsqueeze(0)
    logits = (z @ z.T / tau).masked_fill(excluded, NEG)
    log_prob = logits - torch.logsumexp(logits, 1, keepdim=True)
    positives = (y[:, None] == y[None, :]) & ~excluded & valid.unsqueeze(1)
    count = positives.sum(1)
    anchors = (count > 0).to(z.dtype)
    per_anchor = -(log_prob * positives).sum(1) / count.clamp_min(1)
    return (per_anchor * anchors).sum() / anchors.sum().clamp_min(1)
