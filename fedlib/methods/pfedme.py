"""pFedMe (Dinh, Tran & Nguyen, NeurIPS 2020): personalized models via Moreau envelopes.

Per mini-batch (its Algorithm 1): the personalized model theta takes K steps on
f(theta; batch) + (lambda/2)||theta - w||^2 (Eq. 7, solved approximately), then the local model
moves towards it, w <- w - lr * lambda * (w - theta) (Eq. 9). theta starts each round at the
received w and carries over between batches. Server: w <- (1 - beta) w + beta * average(w_i)."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedlib.aggregate import weighted_average
from fedlib.engine.core import Phase
from fedlib.methods.base import Hyper, Method, positive, unit_interval


@dataclass
class PFedMeHyper(Hyper):
    lam: float = 15.0
    inner_steps: int = 5
    personal_lr: float = 0.01
    beta: float = 1.0

    def validate(self):
        positive(self.lam, "lam")
        positive(self.inner_steps, "inner_steps")
        positive(self.personal_lr, "personal_lr")
        unit_interval(self.beta, "beta")


class PFedMe(Method):
    name = "pfedme"
    paper = "Dinh, Tran & Nguyen, NeurIPS 2020"
    Hyper = PFedMeHyper
    personalized = True

    def local_phases(self, ctx):
        return [Phase(step=self.moreau_step)]

    def moreau_step(self, model, batch, live, ctx):
        w = {k: p.detach() for k, p in live.items() if p.requires_grad}
        theta = ctx.extras.get("theta") or {k: v.clone() for k, v in w.items()}
        for _ in range(self.hp.inner_steps):
            leaves = {k: v.requires_grad_(True) for k, v in theta.items()}
            loss = F.cross_entropy(ctx.model_fn(leaves, batch.x).logits, batch.y)
            grads = torch.autograd.grad(loss, list(leaves.values()))
            theta = {k: (v - self.hp.personal_lr * (g + self.hp.lam * (v - w[k]))).detach()
                     for (k, v), g in zip(leaves.items(), grads)}
        ctx.extras["theta"] = theta
        for k, p in live.items():
            if p.requires_grad:
                p.grad = self.hp.lam * (p.detach() - theta[k])  # the optimizer applies w -= lr * lambda (w - theta)
        return loss.detach()

    def upload(self, ctx, params, client, executor):
        client.state["personal"] = {**params, **ctx.extras["theta"]}
        return super().upload(ctx, params, client, executor)

    def aggregate(self, server, uploads, clients):
        ups = list(uploads.values())
        avg = weighted_average([u["params"] for u in ups], [u["n"] for u in ups])
        b = self.hp.beta
        server.state["global"] = {k: (1 - b) * server.state["global"][k] + b * avg[k]
                                  if avg[k].is_floating_point() else avg[k] for k in avg}

    def eval_params(self, server, client):
        return client.state.get("personal", {**client.params, **server.state["global"]})
