"""FedPCL (Tan et al., NeurIPS 2022): prototype-wise contrastive learning on frozen backbones.

Clients train only a projection network h(r_x; theta_i) on concatenated backbone features (Eq. 2-3)
and share only class prototypes:
* local prototypes C_i^(j) = mean of z over class j (Eq. 5), uploaded after local training;
* global prototypes C_bar^(j): size-weighted average over the clients holding class j (Eq. 6);
* padding: a client's missing classes take the global prototype (Eq. 7); the server sends the
  global set and every client's padded local set;
* local objective L_g + L_p (Eq. 8-10), both prototype-wise supervised contrastive terms with
  temperature tau over the *negative* classes A(y) in the denominator, as the paper writes;
* inference: the class whose local prototype has the largest inner product with z.

Readings: Eq. 6 prints an extra 1/|N_j| in front of weights that already sum to one; it would shrink
the global prototype with the number of clients holding the class (the norm enters the contrastive
logits), so fedlib uses the plain size-weighted mean. Before the first aggregation no prototypes
exist; in that first round each client contrasts against the (detached) class means of its own
mini-batch. ``use_global=False`` drops L_g (Table 6's ablation).

Three readings of the objective (``loss``):
* "pcl": Eq. 8-10 as printed, the positive prototype outside the denominators; a term can fall to about
  -2/tau, so its gradient never vanishes;
* "pcl_infonce": the positive also in the denominators (the InfoNCE form), each term bounded below by 0;
* "pcl_official": the official code (yuetan031/FedPCL, ``ConLoss`` in lib/losses.py, lib/update.py): each
  sample is anchored on the prototype of its class and contrasted with the batch's *samples* in two views
  (``losses.prototype_anchored_contrastive``; fedlib's frozen features carry no augmentation, so the two
  views are the same features), summed over the m clients' prototype sets padded with the global ones (no
  separate L_g); global prototypes are the unweighted mean over the clients that hold the class; round 1
  trains nothing (no prototypes yet); prediction by the smallest squared distance to the client's own,
  unpadded prototypes.
The projection's ReLU before the normalisation comes from the official code; the paper names "one fully
connected layer" only: model ``projection_fc`` is that reading.

Table 5 variants (``loss``): "pcl" (Eq. 10), "ce" (cross-entropy with the linear head),
"ce_protodist" (CE + lambda * ||z - C_bar^(y)||^2, FedProto's regulariser), "supcon" (supervised
contrastive loss among the samples of the batch, Khosla et al. 2020).
"""
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from fedlib.engine.core import derived_seed
from fedlib.errors import ConfigError
from fedlib.losses import (
    cross_entropy,
    prototype_anchored_contrastive,
    prototype_contrastive,
    prototype_mse,
    sample_weight,
    supervised_contrastive,
)
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, Hyper, PrototypeSharing, hyper
from fedlib.methods.registry import register
from fedlib.prototypes import batch_class_means, pad_prototypes

LOSSES = ("pcl", "ce", "ce_protodist", "supcon", "pcl_infonce", "pcl_official")
OFFICIAL = "pcl_official"


@dataclass
class PclHyper(Hyper):
    tau: float = hyper(0.07, POSITIVE)
    use_global: bool = True                   # L_g, Eq. 8
    use_local: bool = True                    # L_p, Eq. 9
    loss: str = hyper("pcl", LOSSES)
    lam: float = hyper(1.0, NON_NEGATIVE)     # weight of ProtoDist in the "ce_protodist" variant
    noise: float = hyper(0.0, NON_NEGATIVE)   # std of Gaussian noise added to uploaded prototypes (Section 5.6)

    def validate(self):
        if self.loss in ("pcl", "pcl_infonce") and not (self.use_global or self.use_local):
            raise ConfigError("hyper.use_global/use_local", (self.use_global, self.use_local), "at least one True")


@register("fedpcl", "FedPCL", "Tan et al., NeurIPS 2022", cite="tan2022fedpcl")
class FedPCL(PrototypeSharing):
    Hyper = PclHyper
    shared = ()
    personalized = True
    has_global_model = False
    broadcast_keys: ClassVar[tuple[str, ...]] = ("local_sets",)

    def init_server(self, server, init):
        super().init_server(server, init)
        server.state["local_sets"] = None

    def broadcast(self, server, client_id):
        return {**super().broadcast(server, client_id), "local_sets": server.state["local_sets"]}

    def embed(self, z):
        # projections live on the unit sphere (the projection network's last step in the official
        # code); normalising here also covers models whose features are not normalised
        return F.normalize(z, dim=1)

    def local_loss(self, out, batch, params, ctx):
        hp, z = self.hp, self.embed(out.z)
        if hp.loss == "ce":
            return cross_entropy(out.logits, batch)
        if hp.loss == "ce_protodist":
            return cross_entropy(out.logits, batch) + hp.lam * prototype_mse(z, batch, ctx.received["protos"],
                                                                             ctx.received["present"])
        if hp.loss == "supcon":
            return supervised_contrastive(z, batch, hp.tau)
        glob, sets = ctx.received["protos"], ctx.received["local_sets"]
        if hp.loss == OFFICIAL:   # the official code: nothing to contrast with before the first aggregation
            return _zero_like(z) if sets is None else prototype_anchored_contrastive(z, batch, sets, hp.tau)
        if glob is None:  # first round: the batch's own class means stand in for prototypes
            means, _ = batch_class_means(z.detach(), batch.y, ctx.num_classes, sample_weight(batch))
            glob, sets = means, means.unsqueeze(0)
        loss, infonce = _zero_like(z), hp.loss == "pcl_infonce"
        if hp.use_global:
            loss = loss + prototype_contrastive(z, batch, glob, hp.tau, infonce)                   # Eq. 8
        if hp.use_local:
            loss = loss + prototype_contrastive(z, batch, sets, hp.tau, infonce)                   # Eq. 9
        return loss

    def upload(self, ctx, models, result):
        up = super().upload(ctx, models, result)
        up.pop("params")
        if self.hp.noise > 0:  # Section 5.6: noise on the communicated prototypes, seeded by the client's context
            g = torch.Generator(device="cpu").manual_seed(derived_seed(ctx.seed, 1))
            up["protos"] = up["protos"] + self.hp.noise * torch.randn(up["protos"].shape, generator=g).to(up["protos"])
        ctx.state["protos"], ctx.state["counts"] = up["protos"], up["counts"]
        return up

    def prototype_weights(self, counts):
        # Eq. 6: size-weighted; the official code: the plain mean over the clients that hold the class
        return (counts > 0).to(counts.dtype) if self.hp.loss == OFFICIAL else counts

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)  # global prototypes (Eq. 6)
        ups = list(uploads.values())
        server.state["local_sets"] = pad_prototypes(torch.stack([u["protos"] for u in ups]),
                                                    torch.stack([u["counts"] for u in ups]),
                                                    server.state["protos"])                       # Eq. 7

    def predict(self, out, ctx, variant=None):
        if self.hp.loss in ("ce", "ce_protodist") or "protos" not in ctx.state:
            return out.logits.argmax(1)
        z = self.embed(out.z)
        if self.hp.loss == OFFICIAL:   # nearest own prototype (squared distance), never a class it lacks
            distance = torch.cdist(z, ctx.state["protos"].to(z)).square()
            return distance.masked_fill(ctx.state["counts"][None] == 0, float("inf")).argmin(1)
        own = pad_prototypes(ctx.state["protos"][None], ctx.state["counts"][None], ctx.received["protos"])[0]
        return (z @ own.T).argmax(1)

    def describes_prediction(self):
        if self.hp.loss in ("ce", "ce_protodist"):
            return "the largest logit"
        if self.hp.loss == OFFICIAL:
            return "the nearest of the client's own prototypes (squared distance; the official code)"
        return "the most similar prototype (cosine): the client's own, padded with the global ones"


def _zero_like(z):
    return z.sum() * 0.0
