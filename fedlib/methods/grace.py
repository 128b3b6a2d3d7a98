"""GRACE (Zhang, Fan, Xu, Yao, Zhang & Wang, MICCAI 2023): generalized and personalized gradient correction.

Client: its personalized model is trained from the received global model with CE + lambda CORAL(z, z_g),
the CORAL distance (||C - C_g||_F^2 / (4 d^2), C the batch covariance) between its features and those of
the frozen received global model on the same batch (the feature-alignment regularisation that corrects
the personalized gradients). Server (consistency-enhanced re-weighting, its official ``grace_server``):
with update g_i = w - theta_i, c_i = mean_{j != i} cos(g_i, g_j) over the whole parameter vector, shifted
to be positive (c - min c + 1e-3 when min c < 0) and scaled by its maximum when that exceeds 1,
w <- w - server_lr sum_i (c_i p_i / sum_j c_j p_j) g_i (p_i the size weight).
Readings: the paper's text is not available here and the released code lacks the client part; the
meta-learning wrapper of the client update is omitted (plain SGD on the regularised loss); lambda = 0.1
and CORAL are the repository's example flags; server_lr = 1."""
from dataclasses import dataclass

import numpy as np
import torch

from fedlib.losses import cross_entropy, sample_weight
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, Hyper, TrainedModelIsPersonal, hyper
from fedlib.methods.registry import register


@dataclass
class GraceHyper(Hyper):
    align: float = hyper(0.1, NON_NEGATIVE)
    server_lr: float = hyper(1.0, POSITIVE)


def _covariance(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    n = w.sum()
    centred = x - (w.unsqueeze(1) * x).sum(0) / n
    return (w.unsqueeze(1) * centred).T @ centred / (n - 1).clamp_min(1)


def coral(a: torch.Tensor, b: torch.Tensor, batch) -> torch.Tensor:
    """Deep CORAL: ||Cov(a) - Cov(b)||_F^2 / (4 d^2) over the batch's real samples."""
    w = sample_weight(batch)
    w = torch.ones(len(a), dtype=a.dtype, device=a.device) if w is None else w.to(a.dtype)
    return ((_covariance(a, w) - _covariance(b, w)) ** 2).sum() / (4 * a.shape[1] ** 2)


def consistency_weights(updates: list[torch.Tensor], sizes) -> np.ndarray:
    """GRACE's server weights from the mean pairwise cosine of the flattened updates."""
    G = torch.stack([u.double() for u in updates])
    G = G / G.norm(dim=1, keepdim=True).clamp_min(1e-12)
    cos = (G @ G.T).cpu().numpy()
    m = len(updates)
    c = (cos.sum(1) - np.diag(cos)) / max(m - 1, 1)
    if c.min() < 0:
        c = c - c.min() + 1e-3
    if c.max() > 1:
        c = c / c.max()
    w = c * np.asarray(sizes, dtype=np.float64)
    return w / w.sum()


@register("grace", "GRACE", "Zhang, Fan, Xu, Yao, Zhang & Wang, MICCAI 2023", cite="zhang2023grace")
class GRACE(TrainedModelIsPersonal):
    Hyper = GraceHyper

    def local_loss(self, out, batch, params, ctx):
        loss = cross_entropy(out.logits, batch)
        if self.hp.align:
            with torch.no_grad():
                target = ctx.forward(ctx.received["params"], batch.x).z
            loss = loss + self.hp.align * coral(out.z, target, batch)
        return loss

    def aggregate(self, server, uploads):
        glob = server.state["global"]
        ups = list(uploads.values())
        keys = [k for k in ups[0]["params"] if glob[k].is_floating_point()]
        updates = [torch.cat([(glob[k] - u["params"][k]).flatten() for k in keys]) for u in ups]
        w = consistency_weights(updates, [u["n"] for u in ups])
        new = dict(glob)
        for k in keys:
            step = sum(float(wi) * (glob[k] - u["params"][k]).double() for wi, u in zip(w, ups))
            new[k] = (glob[k].double() - self.hp.server_lr * step).to(glob[k].dtype)
        server.state["global"] = new
        server.state["weights"] = {"grace": w}
