"""pFedMe (Dinh, Tran & Nguyen, NeurIPS 2020): personalized models via Moreau envelopes.

Per mini-batch (its Algorithm 1): the personalized model theta takes K steps on
f(theta; batch) + (lambda/2)||theta - w||^2 (Eq. 7, solved approximately), then the local model
moves towards it, w <- w - lr * lambda * (w - theta) (Eq. 9). theta starts each round at the
received w and carries over between batches. Server: w <- (1 - beta) w + beta * average(w_i).
Its step is not a loss of one batch, so the phase declares ``step`` and is never batched."""
from dataclasses import dataclass

import torch

from fedlib.aggregate import weighted_average
from fedlib.engine.core import Phase
from fedlib.losses import cross_entropy
from fedlib.methods.base import POSITIVE, UNIT, Hyper, Method, PersonalModel, hyper
from fedlib.methods.registry import register


@dataclass
class PFedMeHyper(Hyper):
    lam: float = hyper(15.0, POSITIVE)
    inner_steps: int = hyper(5, POSITIVE)
    personal_lr: float = hyper(0.01, POSITIVE)
    beta: float = hyper(1.0, UNIT)


@register("pfedme", "pFedMe", "Dinh, Tran & Nguyen, NeurIPS 2020", cite="dinh2020pfedme")
class PFedMe(PersonalModel, Method):
    Hyper = PFedMeHyper

    def local_phases(self, ctx):
        return [Phase(step=self.moreau_step)]

    def moreau_step(self, batch, params, ctx):
        w = {k: p.detach() for k, p in params.items()}
        theta = ctx.scratch.get("theta") or {k: v.clone() for k, v in w.items()}   # from w in the first step
        for _ in range(self.hp.inner_steps):
            leaves = {k: v.requires_grad_(True) for k, v in theta.items()}
            loss = cross_entropy(ctx.forward(leaves, batch.x).logits, batch)
            grads = torch.autograd.grad(loss, list(leaves.values()))
            theta = {k: (v - self.hp.personal_lr * (g + self.hp.lam * (v - w[k]))).detach()
                     for (k, v), g in zip(leaves.items(), grads)}
        ctx.scratch["theta"] = theta
        for k, p in params.items():
            p.grad = self.hp.lam * (p.detach() - theta[k])  # the optimizer applies w -= lr * lambda (w - theta)
        return loss.detach()

    def upload(self, ctx, models, result):
        models["personal"] = {**models["local"], **ctx.scratch["theta"]}
        return super().upload(ctx, models, result)

    def aggregate(self, server, uploads):
        ups = list(uploads.values())
        avg = weighted_average([u["params"] for u in ups], [u["n"] for u in ups])
        b = self.hp.beta
        server.state["global"] = {k: (1 - b) * server.state["global"][k] + b * avg[k]
                                  if avg[k].is_floating_point() else avg[k] for k in avg}
