"""FedASAM (Caldarola, Caputo & Ciccone, ECCV 2022): clients minimise with Adaptive Sharpness-Aware
Minimization (ASAM, Kwon et al. 2021); the server averages (FedAvg).

One local step: g = grad L(w); with T_w = |w| + eta for weight tensors (1 for biases), the ascent
eps = rho T_w^2 g / ||T_w g||; the descent uses grad L(w + eps) at w. Defaults rho = 0.5, eta = 0.01
(ASAM's; FedASAM tunes rho per dataset)."""
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch

from fedlib.engine.core import Phase
from fedlib.methods.base import NON_NEGATIVE, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class AsamHyper(Hyper):
    rho: float = hyper(0.5, NON_NEGATIVE)
    eta: float = hyper(0.01, NON_NEGATIVE)


def asam_perturbation(params: dict, grads: Sequence[torch.Tensor], rho: float, eta: float) -> list:
    """eps = rho T^2 g / ||T g||, T = |w| + eta on weights, 1 elsewhere (ASAM Eq. 8 with a diagonal T_w)."""
    scales = [(p.detach().abs() + eta) if name.endswith("weight") else torch.ones_like(p)
              for name, p in params.items()]
    norm = torch.sqrt(cast(torch.Tensor, sum(((t * g) ** 2).sum() for t, g in zip(scales, grads)))) + 1e-16
    return [rho * t * t * g / norm for t, g in zip(scales, grads)]


@register("fedasam", "FedASAM", "Caldarola, Caputo & Ciccone, ECCV 2022", cite="caldarola2022fedasam")
class FedASAM(Method):
    Hyper = AsamHyper

    def local_phases(self, ctx):
        return [Phase(step=self.local_step(self.local_loss))]

    def local_step(self, loss_fn):
        def asam_step(batch, params, ctx):
            tensors = list(params.values())
            loss = loss_fn(ctx.forward(params, batch.x), batch, params, ctx.loss_view())
            grads = torch.autograd.grad(loss, tensors)
            eps = asam_perturbation(params, grads, self.hp.rho, self.hp.eta)
            with torch.no_grad():
                for p, e in zip(tensors, eps):
                    p.add_(e)
            sharp = loss_fn(ctx.forward(params, batch.x), batch, params, ctx.loss_view())
            for p, g in zip(tensors, torch.autograd.grad(sharp, tensors)):
                p.grad = g
            with torch.no_grad():
                for p, e in zip(tensors, eps):
                    p.sub_(e)
            return loss.detach()
        return asam_step
