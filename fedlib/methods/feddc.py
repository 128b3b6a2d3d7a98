"""FedDC (Gao, Fu, Li, Chen, Xu & Xu, CVPR 2022): federated learning with local drift decoupling and
correction.

Each client keeps a drift variable h_i (its local parameters' offset from the global model) and trains
  F(theta) = L_i(theta) + (alpha/2) ||theta + h_i - w||^2 + (1/(eta K)) <theta, g_i - g>      (its Eq. 7-9)
from the received w, with g_i its own last local update theta_i - w and g the mean of the clients' last
updates (the gradient correction, SCAFFOLD's control variates written in update units). After training:
h_i <- h_i + (theta_i - w) (Eq. 6) and the client uploads theta_i + h_i (the drift-corrected model, Eq. 10).
Server: w = average of theta_i + h_i; g = mean of the round's g_i / (eta K_i). Defaults alpha = 0.01 (the
official code's alpha_coef). Reading: the server averages weighted by client size, as the other fedlib
baselines (the paper's average is uniform; they agree for equal sizes). Local steps are plain SGD whatever
the experiment's momentum: with momentum 0.9 the update overstates the gradient tenfold and the correction
diverged (NaN in round 4 at lr 0.03 on FMNIST)."""
from dataclasses import dataclass
from typing import ClassVar

import torch

from fedlib.aggregate import weighted_average
from fedlib.engine.core import Phase
from fedlib.losses import cross_entropy
from fedlib.methods.base import NON_NEGATIVE, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class DcHyper(Hyper):
    alpha: float = hyper(0.01, NON_NEGATIVE)


def _zeros(params: dict) -> dict:
    return {k: torch.zeros_like(v) for k, v in params.items() if v.is_floating_point()}


@register("feddc", "FedDC", "Gao, Fu, Li, Chen, Xu & Xu, CVPR 2022", cite="gao2022feddc")
class FedDC(Method):
    Hyper = DcHyper
    broadcast_keys: ClassVar[tuple[str, ...]] = ("correction",)
    upload_keys: ClassVar[tuple[str, ...]] = ("correction",)

    def init_server(self, server, init):
        super().init_server(server, init)
        server.state["correction"] = _zeros(init)        # g / (eta K): the mean last update per step

    def init_client(self, state, init):
        state["drift"] = _zeros(init)                    # h_i
        state["correction"] = _zeros(init)               # g_i / (eta K)

    def broadcast(self, server, client_id):
        return {**super().broadcast(server, client_id), "correction": server.state["correction"]}

    def local_phases(self, ctx):
        # plain SGD (the official code): (theta - w) / (eta K) estimates the mean gradient only without momentum
        return [Phase(momentum=0.0)]

    def local_loss(self, out, batch, params, ctx):
        w, h = ctx.received["params"], ctx.state["drift"]
        own, mean = ctx.state["correction"], ctx.received["correction"]
        penalty = sum(((params[k] + h[k] - w[k]) ** 2).sum() for k in params)
        correction = sum((params[k] * (own[k] - mean[k])).sum() for k in params)
        return cross_entropy(out.logits, batch) + 0.5 * self.hp.alpha * penalty + correction

    def upload(self, ctx, models, result):
        theta, w = models["local"], ctx.received["params"]
        update = {k: theta[k] - w[k] for k in ctx.state["drift"]}
        ctx.state["drift"] = {k: ctx.state["drift"][k] + update[k] for k in update}
        scale = 1.0 / (ctx.lr * max(result.steps, 1))
        ctx.state["correction"] = {k: v * scale for k, v in update.items()}
        corrected = {k: (v + ctx.state["drift"][k]) if k in ctx.state["drift"] else v for k, v in theta.items()}
        up = super().upload(ctx, {**models, "local": corrected}, result)
        return {**up, "correction": ctx.state["correction"]}

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)
        ups = list(uploads.values())
        server.state["correction"] = weighted_average([u["correction"] for u in ups], [1.0] * len(ups))
