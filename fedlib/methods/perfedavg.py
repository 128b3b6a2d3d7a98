"""Per-FedAvg (Fallah, Mokhtari & Ozdaglar, NeurIPS 2020), first-order version (FO, its Eq. 8-9).

Each local step splits the mini-batch into two halves D and D': a temporary model
w' = w - alpha * grad f(w; D) is evaluated on D', and w <- w - lr * grad f(w'; D') (the first-order
approximation drops the Hessian term). Server: sample-size average. Before evaluation every
client adapts the global model with one step of SGD (step size alpha) on one mini-batch.
Its step is not a loss of one batch, so the phase declares ``step`` and is never batched."""
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fedlib.engine.core import Phase, cross_entropy_loss
from fedlib.methods.base import POSITIVE, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class PerFedAvgHyper(Hyper):
    alpha: float = hyper(0.01, POSITIVE)


@register("perfedavg", "Per-FedAvg", "Fallah, Mokhtari & Ozdaglar, NeurIPS 2020", cite="fallah2020perfedavg")
class PerFedAvg(Method):
    Hyper = PerFedAvgHyper
    personalized = True

    def local_phases(self, ctx):
        return [Phase(step=self.maml_step)]

    def maml_step(self, batch, params, ctx):
        half = max(1, len(batch.y) // 2)
        inner = F.cross_entropy(ctx.forward(params, batch.x[:half]).logits, batch.y[:half])
        grads = torch.autograd.grad(inner, list(params.values()))
        temp = {k: (p - self.hp.alpha * g).detach().requires_grad_(True) for (k, p), g in zip(params.items(), grads)}
        x2, y2 = (batch.x[half:], batch.y[half:]) if len(batch.y) > 1 else (batch.x, batch.y)
        outer = F.cross_entropy(ctx.forward(temp, x2).logits, y2)
        for p, g in zip(params.values(), torch.autograd.grad(outer, list(temp.values()))):
            p.grad = g
        return outer.detach()

    def finetune_phase(self):
        # one plain gradient step of size alpha, whatever optimizer trains the meta-model
        return Phase(epochs=1, max_steps=1, lr=self.hp.alpha, loss=cross_entropy_loss, optimizer="sgd")
