"""MOON (Li et al., CVPR 2021): CE + mu * model-contrastive loss (its Eq. 3-4).

l_con = -log( e^{sim(z, z_glob)/tau} / (e^{sim(z, z_glob)/tau} + e^{sim(z, z_prev)/tau}) ),
z from the projector output; z_glob from the received global model, z_prev from the client's
model of its last round (the global model on its first round)."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedlib.losses import batch_mean, cross_entropy
from fedlib.methods.base import NON_NEGATIVE, POSITIVE, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class MoonHyper(Hyper):
    mu: float = hyper(1.0, NON_NEGATIVE)
    tau: float = hyper(0.5, POSITIVE)


@register("moon", "MOON", "Li et al., CVPR 2021", cite="li2021moon")
class Moon(Method):
    Hyper = MoonHyper

    def init_client(self, state, init):
        state["previous"] = None  # the client's model of its last round; None until it has trained

    def local_loss(self, out, batch, params, ctx):
        teacher = ctx.received["params"]
        previous = ctx.state["previous"] if ctx.state["previous"] is not None else teacher
        with torch.no_grad():
            z_glob = ctx.forward(teacher, batch.x).z
            z_prev = ctx.forward(previous, batch.x).z
        pos = F.cosine_similarity(out.z, z_glob, dim=1) / self.hp.tau
        neg = F.cosine_similarity(out.z, z_prev, dim=1) / self.hp.tau
        contrastive = batch_mean(-(pos - torch.logsumexp(torch.stack([pos, neg], 1), 1)), batch)
        return cross_entropy(out.logits, batch) + self.hp.mu * contrastive

    def upload(self, ctx, models, result):
        ctx.state["previous"] = models["local"]
        return super().upload(ctx, models, result)
