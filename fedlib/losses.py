"""Prototype losses shared by several methods (pure functions of one mini-batch)."""
from __future__ import annotations

import torch


def proximal(params: dict, anchor: dict) -> torch.Tensor:
    """sum over trainable tensors of ||w - w_anchor||^2 (FedProx Eq. 2, Ditto Eq. 2)."""
    return sum(((params[k] - anchor[k]) ** 2).sum() for k in params if params[k].requires_grad)


def _zero(z: torch.Tensor) -> torch.Tensor:
    """A zero that stays on the autograd graph (a loss made only of this term can still backward)."""
    return z.sum() * 0.0


def _mask(y: torch.Tensor, present: torch.Tensor | None) -> torch.Tensor:
    return torch.ones_like(y, dtype=torch.bool) if present is None else present[y]


def prototype_mse(z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor | None, present=None) -> torch.Tensor:
    """mean over samples and dimensions of (z - C^(y))^2 (FedProto, FedPAC); 0 before any prototype."""
    if protos is None:
        return _zero(z)
    m = _mask(y, present)
    if not m.any():
        return _zero(z)
    return ((z[m] - protos[y[m]]) ** 2).mean()


def prototype_distance(z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor | None, present=None) -> torch.Tensor:
    """(1/|B|) sum_b ||z_b - C^(y_b)||_2 (FedGPA Eq. 5, per-sample reading); 0 before any prototype."""
    if protos is None:
        return _zero(z)
    m = _mask(y, present)
    if not m.any():
        return _zero(z)
    return torch.linalg.vector_norm(z[m] - protos[y[m]], dim=1).sum() / len(y)


def prototype_contrastive(z: torch.Tensor, y: torch.Tensor, protos: torch.Tensor, tau: float) -> torch.Tensor:
    """FedPCL Eq. 8 (one set, protos (K, d)) or Eq. 9 (m sets, protos (m, K, d), averaged over sets):
    -log exp(z.C^y/tau) / sum_{a != y} exp(z.C^a/tau), averaged over the batch. The denominator runs
    over the negatives A(y) only, as the paper writes."""
    sets = protos if protos.ndim == 3 else protos.unsqueeze(0)
    logits = torch.einsum("bd,mkd->mbk", z, sets) / tau
    pos = logits.gather(2, y.view(1, -1, 1).expand(len(sets), -1, 1)).squeeze(2)
    mask = torch.nn.functional.one_hot(y, sets.shape[1]).bool().unsqueeze(0)
    negatives = logits.masked_fill(mask, float("-inf"))
    return (torch.logsumexp(negatives, 2) - pos).mean()


def supervised_contrastive(z: torch.Tensor, y: torch.Tensor, tau: float) -> torch.Tensor:
    """SupCon (Khosla et al., 2020, L_out): for each anchor, the mean over its positives p of
    -log exp(z.z_p/tau) / sum_{a != anchor} exp(z.z_a/tau); anchors without positives are skipped."""
    n = len(y)
    logits = z @ z.T / tau
    self_mask = torch.eye(n, dtype=torch.bool, device=z.device)
    logits = logits.masked_fill(self_mask, float("-inf"))
    log_prob = logits - torch.logsumexp(logits, 1, keepdim=True)
    positives = (y[:, None] == y[None, :]) & ~self_mask
    count = positives.sum(1)
    has = count > 0
    if not has.any():
        return _zero(z)
    per_anchor = -(log_prob.masked_fill(~positives, 0).sum(1)[has] / count[has])
    return per_anchor.mean()
