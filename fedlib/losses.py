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
    weight = sample_weight(batch)
    keep = torch.ones(y.shape, dtype=dtype, device=y.device) if weight is None else weight
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


def prototype_contrastive(z: torch.Tensor, batch, protos: torch.Tensor, tau: float,
                          include_positive: bool = False) -> torch.Tensor:
    """FedPCL Eq. 8 (one set, protos (K, d)) or Eq. 9 (m sets, protos (m, K, d), averaged over sets):
    -log exp(z.C^y/tau) / sum_{a != y} exp(z.C^a/tau), averaged over the batch. The denominator runs
    over the negatives A(y) only, as the paper writes; ``include_positive``: over every class (the
    InfoNCE / supervised-contrastive form, a cross-entropy over prototype similarities)."""
    y = batch.y
    sets = protos if protos.ndim == 3 else protos.unsqueeze(0)
    logits = torch.einsum("bd,mkd->mbk", z, sets) / tau
    positive = y.unsqueeze(-1) == torch.arange(sets.shape[1], device=y.device)        # (b, K)
    pos = (logits * positive).sum(2)
    denominator = logits if include_positive else logits.masked_fill(positive.unsqueeze(0), NEG)
    return batch_mean((torch.logsumexp(denominator, 2) - pos).mean(0), batch)


def prototype_anchored_contrastive(z: torch.Tensor, batch, protos: torch.Tensor, tau: float,
                                   views: int = 2) -> torch.Tensor:
    """FedPCL's official-code loss (its ``ConLoss``), summed over the prototype sets (protos (K, d) or (m, K, d)):
    each of the ``views`` copies of a sample is a row anchored on the prototype of the sample's class and contrasted
    with the batch's samples (every view; the row's own copy left out), in the supervised-contrastive form with the
    positives in the denominator: -mean_{p: y_p = y} log exp(C^y.z_p/tau) / sum_{a != self} exp(C^y.z_a/tau),
    averaged over the rows. Rows without a positive are skipped (the official code divides 0 by 0 there)."""
    sets = protos if protos.ndim == 3 else protos.unsqueeze(0)
    w = sample_weight(batch)
    valid = torch.ones(len(batch.y), dtype=torch.bool, device=z.device) if w is None else w > 0
    zz, yy, vv = z.repeat(views, 1), batch.y.repeat(views), valid.repeat(views)
    n = len(yy)
    excluded = torch.eye(n, dtype=torch.bool, device=z.device) | ~vv.unsqueeze(0)
    logits = (torch.einsum("mnd,cd->mnc", sets[:, yy], zz) / tau).masked_fill(excluded, NEG)
    log_prob = logits - torch.logsumexp(logits, 2, keepdim=True)
    positives = (yy[:, None] == yy[None, :]) & ~excluded
    count = positives.sum(1)
    per_row = -(log_prob * positives).sum(2) / count.clamp_min(1)                          # (m, n)
    rows = ((count > 0) & vv).to(z.dtype)
    return ((per_row * rows).sum(1) / rows.sum().clamp_min(1)).sum()


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


# ---------------------------------------------------------------- pFedCSPC (Eq. 5-7, 12)
def _real_and_present(batch, y: torch.Tensor, present: torch.Tensor | None, dtype) -> torch.Tensor:
    return _keep(batch, y, present, dtype)


def prototype_infonce(f: torch.Tensor, batch, protos: torch.Tensor | None, present: torch.Tensor | None,
                      tau: float) -> torch.Tensor:
    """pFedCSPC Eq. 5, cosine reading: -log softmax_c(cos(f, u^c)/tau) at the sample's class, over the
    classes c that have a global prototype; samples whose class has none are skipped."""
    if protos is None:
        return _zero(f)
    logits = F.normalize(f, dim=1) @ F.normalize(protos, dim=1).T / tau
    if present is not None:
        logits = logits.masked_fill(~present.bool().unsqueeze(0), NEG)
    per_sample = torch.logsumexp(logits, 1) - logits.gather(1, batch.y.unsqueeze(1)).squeeze(1)
    keep = _real_and_present(batch, batch.y, present, f.dtype)
    return (per_sample * keep).sum() / keep.sum().clamp_min(1e-12)


def _distances(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gram matrix and pairwise Euclidean distances from it (no (B, B, d) tensor)."""
    G = x @ x.T
    sq = G.diagonal()
    return G, (sq.unsqueeze(0) + sq.unsqueeze(1) - 2 * G).clamp_min(1e-12).sqrt()


ANGLE_EPS = 1e-3


def _angles(x: torch.Tensor) -> torch.Tensor:
    """cos of the angle at b of every triplet: <x_a - x_b, x_c - x_b> / (|x_a - x_b| |x_c - x_b|), (B, B, B)[a, b, c],
    with <x_a - x_b, x_c - x_b> = G_ac - G_ab - G_bc + G_bb."""
    G, D = _distances(x)
    inner = G.unsqueeze(1) - G.unsqueeze(2) - G.unsqueeze(0) + G.diagonal()[None, :, None]
    D = D.clamp_min(ANGLE_EPS)     # coincident features (ReLU encoders give all-zero ones) would blow up 1/|x_a - x_b|
    return inner / (D.unsqueeze(2) * D.unsqueeze(0))


def angle_alignment(f: torch.Tensor, batch, protos: torch.Tensor | None, present: torch.Tensor | None) -> torch.Tensor:
    """pFedCSPC Eq. 6: mean over triplets (f_a, f_b, f_c) with pairwise different labels of
    |cos∠(f_a, f_b, f_c) - cos∠(u^{y_a}, u^{y_b}, u^{y_c})| (global prototypes u; constants)."""
    if protos is None:
        return _zero(f)
    y = batch.y
    keep = _real_and_present(batch, y, present, f.dtype)
    differ = (y.unsqueeze(0) != y.unsqueeze(1)).to(f.dtype)
    valid = (differ.unsqueeze(2) * differ.unsqueeze(0) * differ.unsqueeze(1)
             * keep[:, None, None] * keep[None, :, None] * keep[None, None, :])
    gap = (_angles(f) - _angles(protos[y].detach())).abs()
    return (gap * valid).sum() / valid.sum().clamp_min(1)


def edge_alignment(f: torch.Tensor, batch, protos: torch.Tensor | None, present: torch.Tensor | None) -> torch.Tensor:
    """pFedCSPC Eq. 7: mean over pairs a != b of | ||f_a - f_b|| - ||u^{y_a} - u^{y_b}|| | (same-class
    pairs have target 0)."""
    if protos is None:
        return _zero(f)
    y = batch.y
    keep = _real_and_present(batch, y, present, f.dtype)
    valid = keep.unsqueeze(0) * keep.unsqueeze(1) * (1 - torch.eye(len(y), dtype=f.dtype, device=f.device))
    gap = (_distances(f)[1] - _distances(protos[y].detach())[1]).abs()
    return (gap * valid).sum() / valid.sum().clamp_min(1)


def weighted_supcon(z: torch.Tensor, y: torch.Tensor, source: torch.Tensor, tau: float,
                    hard: float = 1.0, easy: float = 0.5) -> torch.Tensor:
    """pFedCSPC Eq. 12 on L2-normalised z: for each anchor with positives P (same label, any source),
    -mean_{p in P} log sigma_ap e^{s_ap} / sum_{b != a} sigma_ab e^{s_ab}, s = z_a.z_b / tau, with
    sigma = ``hard`` for (same class, other source) or (other class, same source), else ``easy``.
    hard = easy reduces it to SupCon."""
    z = F.normalize(z, dim=1)
    n = len(y)
    same_class = y.unsqueeze(0) == y.unsqueeze(1)
    same_source = source.unsqueeze(0) == source.unsqueeze(1)
    sigma = torch.where(same_class ^ same_source, hard, easy).to(z.dtype)
    eye = torch.eye(n, dtype=torch.bool, device=z.device)
    logits = (z @ z.T / tau + sigma.log()).masked_fill(eye, NEG)
    log_prob = logits - torch.logsumexp(logits, 1, keepdim=True)
    positives = same_class & ~eye
    count = positives.sum(1)
    anchors = (count > 0).to(z.dtype)
    per_anchor = -(log_prob * positives).sum(1) / count.clamp_min(1)
    return (per_anchor * anchors).sum() / anchors.sum().clamp_min(1)
