"""FedALA (Zhang, Hua, Wang, Song, Xue, Ma & Guan, AAAI 2023): adaptive local aggregation.

Before local training, client i builds its starting model from the received global model w and its own
previous model theta_i: the lower layers are w's; the top layers are theta_i + (w - theta_i) (.) W_i with
element-wise weights W_i in [0, 1] learned on a random share s of its data (its Eq. 4-6):
  W_i <- clip(W_i - eta grad_theta L(theta) (.) (w - theta_i), 0, 1).
W_i persists across rounds; the first time it is trained until the loss settles (std of the last
``window`` epoch losses below ``threshold``), later one epoch per round. The client then trains as in
FedAvg; its trained model is its personal model; the server averages (FedAvg).
Defaults are the official code's: s = 80%, eta = 1.0, top layers = the last layer's weight and bias
(layer_idx = 2), threshold 0.1, window 10. Readings: the first training is capped at ``max_start_epochs``
(the official loop has no cap); the share s is a random subset (the official code takes a random
contiguous window of an already shuffled dataset). With only the classifier adaptive, its input
features are those of the global model's lower layers and are computed once per round."""
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from fedlib.methods.base import POSITIVE, UNIT_POSITIVE, Hyper, TrainedModelIsPersonal, hyper
from fedlib.methods.registry import register

TOP = ("head.weight", "head.bias")


@dataclass
class AlaHyper(Hyper):
    share: float = hyper(0.8, UNIT_POSITIVE)
    eta: float = hyper(1.0, POSITIVE)
    threshold: float = hyper(0.1, POSITIVE)
    window: int = hyper(10, POSITIVE)
    max_start_epochs: int = hyper(100, POSITIVE)


def adaptive_weights(z, y, local: dict, glob: dict, weights: dict, eta: float, batch_size: int,
                     until_settled: bool, threshold: float, window: int, max_epochs: int) -> tuple[dict, int]:
    """Train the ALA weights of the classifier on features z; returns them and the epochs run."""
    losses, epochs = [], 0
    while True:
        for start in range(0, len(z), batch_size):
            mixed = {k: (local[k] + (glob[k] - local[k]) * weights[k]).requires_grad_(True) for k in TOP}
            loss = F.cross_entropy(F.linear(z[start:start + batch_size], mixed[TOP[0]], mixed[TOP[1]]),
                                   y[start:start + batch_size])
            grads = torch.autograd.grad(loss, [mixed[k] for k in TOP])
            weights = {k: (weights[k] - eta * g * (glob[k] - local[k])).clamp(0, 1) for k, g in zip(TOP, grads)}
        losses.append(float(loss.detach()))
        epochs += 1
        if not until_settled or epochs >= max_epochs:
            break
        if len(losses) > window and np.std(losses[-window:]) < threshold:
            break
    return weights, epochs


@register("fedala", "FedALA", "Zhang, Hua, Wang, Song, Xue, Ma & Guan, AAAI 2023", cite="zhang2023fedala")
class FedALA(TrainedModelIsPersonal):
    Hyper = AlaHyper

    def receive(self, ctx):
        glob = self.received_model(ctx)
        if not self.trained(ctx):               # the first round: the local model is the initial one
            return {"local": glob}
        local = ctx.model
        n = ctx.size
        gen = torch.Generator().manual_seed(ctx.seed)
        subset = torch.randperm(n, generator=gen)[:max(1, int(self.hp.share * n))].to(ctx.labels.device)
        z = ctx.features(glob).z[subset]
        start = "ala_weights" not in ctx.state
        weights = ctx.state.get("ala_weights") or {k: torch.ones_like(local[k]) for k in TOP}
        weights, epochs = adaptive_weights(z, ctx.labels[subset], local, glob, weights, self.hp.eta,
                                           ctx.batch_size or 64, start, self.hp.threshold, self.hp.window,
                                           self.hp.max_start_epochs)
        ctx.state["ala_weights"] = weights
        ctx.state["ala_epochs"] = epochs
        return {"local": {**glob, **{k: local[k] + (glob[k] - local[k]) * weights[k] for k in TOP}}}

