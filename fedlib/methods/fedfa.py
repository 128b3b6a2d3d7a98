"""FedFA (Zhou, Zhang & Tsang, IEEE TMC 23(6) 2023, arXiv:2211.09299): federated learning with
feature anchors to align features and classifiers for heterogeneous data.

Every class k has a feature anchor a_k, shared through the server (initially the distinct one-hot
rows of the identity, which needs d >= K). On each mini-batch the client
1. calibrates its classifier on the anchors: one step of its own Adam optimiser (lr ``calib_lr``) on
   CE(head(a_k), k) over all classes, so the classifier agrees with the shared feature space;
2. trains the whole model on CE + lam_a * anchor loss, anchor loss = (1/K) sum_c mean_{y_b = c}
   ||z_b - a_c||^2 (features pulled to their class anchor; lam_a = 0.1 as in the official code).
After its local update the client moves its anchors towards its class means (momentum 0.5); the
server averages the models (FedAvg) and the clients' anchors (by class counts, a class nobody holds
keeps its anchor). FedFA is a global-model method.

Reading: the paper calibrates after the model step of each batch; fedlib's step hook runs before the
engine's optimiser step, so calibration comes first in each batch (the same alternation, shifted by
half a step). The anchor update uses the class means of the client's training data after training
(an eval-mode pass) instead of running means over the last epoch."""
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from fedlib.engine.core import Phase
from fedlib.losses import cross_entropy
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, UNIT, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class FaHyper(Hyper):
    lam_a: float = hyper(0.1, NON_NEGATIVE)
    calib_lr: float = hyper(1e-3, POSITIVE)
    momentum: float = hyper(0.5, UNIT)


def anchor_loss(z: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """(1/K) sum_c mean over the batch's samples of class c of ||z - a_c||^2."""
    K = anchors.shape[0]
    member = (y.unsqueeze(0) == torch.arange(K, device=y.device).unsqueeze(1)).to(z.dtype)   # (K, B)
    sq = ((z - anchors[y]) ** 2).sum(1)
    return ((member @ sq) / member.sum(1).clamp_min(1)).sum() / K


@register("fedfa", "FedFA", "Zhou, Zhang & Tsang, IEEE TMC 2023", cite="zhou2023fedfa")
class FedFA(Method):
    Hyper = FaHyper
    broadcast_keys: ClassVar[tuple[str, ...]] = ("anchors",)
    upload_keys: ClassVar[tuple[str, ...]] = ("anchors", "counts")

    def init_server(self, server, init):
        super().init_server(server, init)
        K, d = init["head.weight"].shape
        if d < K:
            from fedlib.errors import ConfigError
            raise ConfigError("model", f"{d}-d features", f"features with at least {K} dimensions for one-hot anchors")
        server.state["anchors"] = torch.eye(d, device=init["head.weight"].device)[:K].clone()

    def broadcast(self, server, client_id):
        return {**super().broadcast(server, client_id), "anchors": server.state["anchors"]}

    def local_phases(self, ctx):
        return [Phase(step=self.anchored_step)]

    def anchored_step(self, batch, params, ctx):
        anchors = ctx.received["anchors"]
        self.calibrate(params, anchors, ctx)
        out = ctx.forward(params, batch.x)
        loss = cross_entropy(out.logits, batch) + self.hp.lam_a * anchor_loss(out.z, batch.y, anchors)
        for p, g in zip(params.values(), torch.autograd.grad(loss, list(params.values()))):
            p.grad = g
        return loss.detach()

    def calibrate(self, params, anchors, ctx) -> None:
        """One Adam step of the head on CE(head(a_k), k) (its own optimiser, state kept for the round)."""
        w, b = params["head.weight"], params["head.bias"]
        labels = torch.arange(len(anchors), device=anchors.device)
        gw, gb = torch.autograd.grad(F.cross_entropy(F.linear(anchors, w, b), labels), [w, b])
        state = ctx.scratch.get("calib") or {"t": 0, "m": [torch.zeros_like(w), torch.zeros_like(b)],
                                       "v": [torch.zeros_like(w), torch.zeros_like(b)]}
        state["t"] += 1
        with torch.no_grad():
            for i, (p, g) in enumerate(((w, gw), (b, gb))):
                state["m"][i] = 0.9 * state["m"][i] + 0.1 * g
                state["v"][i] = 0.999 * state["v"][i] + 0.001 * g * g
                m_hat = state["m"][i] / (1 - 0.9 ** state["t"])
                v_hat = state["v"][i] / (1 - 0.999 ** state["t"])
                p.sub_(self.hp.calib_lr * m_hat / (v_hat.sqrt() + 1e-8))
        ctx.scratch["calib"] = state        # the calibration optimiser starts fresh every round

    def upload(self, ctx, models, result):
        out = ctx.features(models["local"])
        counts = torch.bincount(ctx.labels, minlength=ctx.num_classes)
        means = torch.zeros_like(ctx.received["anchors"]).index_add_(0, ctx.labels, out.z) / \
            counts.clamp_min(1).unsqueeze(1).to(out.z.dtype)
        held = (counts > 0).unsqueeze(1)
        m = self.hp.momentum
        anchors = torch.where(held, m * ctx.received["anchors"] + (1 - m) * means, ctx.received["anchors"])
        return {**super().upload(ctx, models, result), "anchors": anchors, "counts": counts}

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)
        ups = list(uploads.values())
        anchors = torch.stack([u["anchors"] for u in ups])
        counts = torch.stack([u["counts"] for u in ups]).to(anchors.dtype)      # float32 or float64 uploads
        total = counts.sum(0)
        mean = torch.einsum("mk,mkd->kd", counts, anchors) / total.clamp_min(
            1
        ).unsqueeze(1)
        server.state["anchors"] = torch.where((total > 0).unsqueeze(1), mean, server.state["anchors"])
