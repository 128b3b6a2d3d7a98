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
mini-batch. The official code omits L_g; ``use_global=False`` reproduces it (Table 6 ablation).

Table 5 variants (``loss``): "pcl" (Eq. 10), "ce" (cross-entropy with the linear head),
"ce_protodist" (CE + lambda * ||z - C_bar^(y)||^2, FedProto's regulariser), "supcon" (supervised
contrastive loss among the samples of the batch, Khosla et al. 2020). A reading check: "pcl_infonce" is
Eq. 10 with the positive prototype also in the denominators of Eq. 8-9 (the InfoNCE form), which bounds
each term below by 0; as printed, a term can fall to about -2/tau.
"""
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from fedlib.engine.core import derived_seed
from fedlib.errors import ConfigError
from fedlib.losses import cross_entropy, prototype_contrastive, prototype_mse, sample_weight, supervised_contrastive
from fedlib.methods.base import Hyper, PrototypeSharing, positive
from fedlib.methods.registry import register
from fedlib.prototypes import batch_class_means, pad_prototypes

LOSSES = ("pcl", "ce", "ce_protodist", "supcon", "pcl_infonce")


@dataclass
class PclHyper(Hyper):
    tau: float = 0.07
    use_global: bool = True     # L_g, Eq. 8
    use_local: bool = True      # L_p, Eq. 9
    loss: str = "pcl"
    lam: float = 1.0            # weight of ProtoDist in the "ce_protodist" variant
    noise: float = 0.0          # std of Gaussian noise added to uploaded prototypes (Section 5.6)

    def validate(self):
        positive(self.tau, "tau")
        positive(self.noise, "noise", allow_zero=True)
        if self.loss not in LOSSES:
            raise ConfigError("hyper.loss", self.loss, f"one of {', '.join(LOSSES)}")
        if self.loss in ("pcl", "pcl_infonce") and not (self.use_global or self.use_local):
            raise ConfigError("hyper.use_global/use_local", (self.use_global, self.use_local), "at least one True")


@register
class FedPCL(PrototypeSharing):
    name = "fedpcl"
    label = "FedPCL"
    paper = "Tan et al., NeurIPS 2022"
    cite = "tan2022fedpcl"
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

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)  # size-weighted global prototypes (Eq. 6)
        ups = list(uploads.values())
        server.state["local_sets"] = pad_prototypes(torch.stack([u["protos"] for u in ups]),
                                                    torch.stack([u["counts"] for u in ups]),
                                                    server.state["protos"])                       # Eq. 7

    def predict(self, out, ctx, variant=None):
        if self.hp.loss in ("ce", "ce_protodist") or "protos" not in ctx.state:
            return out.logits.argmax(1)
        own = pad_prototypes(ctx.state["protos"][None], ctx.state["counts"][None], ctx.received["protos"])[0]
        return (self.embed(out.z) @ own.T).argmax(1)


def _zero_like(z):
    return z.sum() * 0.0
