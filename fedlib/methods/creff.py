"""CReFF (Shang, Lu, Huang & Wang, IJCAI 2022): classifier re-training with federated features, for
non-IID and long-tailed data.

Clients train as in FedAvg and also send, for every class c they hold, the gradient of the classifier
loss on their real features of class c: grad_(W,b) CE(W z + b, c) averaged over the class, computed
with the received global body and the server's re-trained classifier (W, b). The server
1. averages the local models (FedAvg) - this is what clients receive next round;
2. updates K x ``num_features`` synthetic "federated features" so that their classifier gradients match
   the clients' mean gradient of each class (``match_epochs`` SGD steps of lr ``lr_feature`` on
   sum_c sum_rows (1 - cos(g_real, g_syn)) over the rows of the weight gradient, the official distance);
3. re-trains a freshly initialised linear classifier on the federated features (``crt_epochs`` epochs,
   batches of ``crt_batch``, SGD lr ``lr_net``). The global model used for evaluation is the FedAvg
   body with this classifier. Defaults are the official code's.
Reading: the clients' per-class gradient is taken over all their samples of the class (the official
code averages 10 random batches of 32), so it carries no sampling noise."""
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from fedlib.engine.core import derived_seed
from fedlib.methods.base import POSITIVE, Hyper, Method, hyper, retrain_linear_head
from fedlib.methods.registry import register
from fedlib.models import network_params


@dataclass
class CreffHyper(Hyper):
    num_features: int = hyper(100, POSITIVE)
    lr_feature: float = hyper(0.1, POSITIVE)
    match_epochs: int = hyper(100, POSITIVE)
    crt_epochs: int = hyper(300, POSITIVE)
    crt_batch: int = hyper(32, POSITIVE)
    lr_net: float = hyper(0.01, POSITIVE)


def class_gradients(z: torch.Tensor, y: torch.Tensor, W: torch.Tensor, b: torch.Tensor, num_classes: int):
    """For every class c: gradient of the mean CE(W z + b, c) over the samples of class c w.r.t. W and b.
    Returns (K, K, d), (K, K) and the classes present (K,). Differentiable in z."""
    p = F.softmax(z @ W.T + b, dim=1)
    onehot = F.one_hot(y, num_classes).to(z.dtype)
    g = p - onehot                                                   # dCE/dlogits per sample
    member = onehot.T                                                # (K, n) sample i in class c
    n = member.sum(1).clamp_min(1)
    gW = torch.einsum("cn,nk,nd->ckd", member, g, z) / n[:, None, None]
    gb = (member @ g) / n[:, None]
    return gW, gb, member.sum(1) > 0


def gradient_distance(real: torch.Tensor, syn: torch.Tensor) -> torch.Tensor:
    """sum over rows of the weight gradient of 1 - cos (the official 'ours' distance; biases ignored)."""
    return (1 - F.cosine_similarity(real, syn, dim=-1, eps=1e-6)).sum()


def fresh_linear(d: int, k: int, gen: torch.Generator, device) -> dict:
    """nn.Linear's default initialisation, U(-1/sqrt(d), 1/sqrt(d)) for weight and bias."""
    bound = 1 / d ** 0.5
    return {"head.weight": ((torch.rand(k, d, generator=gen) * 2 - 1) * bound).to(device),
            "head.bias": ((torch.rand(k, generator=gen) * 2 - 1) * bound).to(device)}


@register("creff", "CReFF", "Shang, Lu, Huang & Wang, IJCAI 2022", cite="shang2022creff")
class CReFF(Method):
    Hyper = CreffHyper
    broadcast_keys: ClassVar[tuple[str, ...]] = ("syn_head",)
    upload_keys: ClassVar[tuple[str, ...]] = ("grad_w", "grad_b", "has")

    def allocation(self, num_classes, feature_dim, num_clients, model_bytes):
        """The K x num_features federated features, float32, with their gradient."""
        return {"num_features": num_classes * self.hp.num_features * feature_dim * 4 * 2}

    def init_server(self, server, init):
        super().init_server(server, init)
        gen = torch.Generator().manual_seed(derived_seed(server.seed, 0, 31))
        W = init["head.weight"]
        K, d = W.shape
        server.state["syn_head"] = fresh_linear(d, K, gen, W.device)
        server.state["features"] = torch.randn(K * self.hp.num_features, d, generator=gen).to(W.device)

    def broadcast(self, server, client_id):
        return {**super().broadcast(server, client_id), "syn_head": server.state["syn_head"]}

    def receive(self, ctx):
        models = super().receive(ctx)
        # the real feature gradients: received body, the server's re-trained classifier, before training
        head = ctx.received["syn_head"]
        z = ctx.features({**models["local"], **head}).z
        gW, gb, has = class_gradients(z, ctx.labels, head["head.weight"], head["head.bias"], ctx.num_classes)
        ctx.scratch["grads"] = (gW, gb, has)
        return models

    def upload(self, ctx, models, result):
        gW, gb, has = ctx.scratch["grads"]
        return {**super().upload(ctx, models, result), "grad_w": gW, "grad_b": gb, "has": has}

    def aggregate(self, server, uploads):
        super().aggregate(server, uploads)                           # 1. FedAvg
        ups = list(uploads.values())
        has = torch.stack([u["has"] for u in ups]).float()           # (m, K)
        holders = has.sum(0)
        real = (torch.stack([u["grad_w"] for u in ups]) * has[:, :, None, None]).sum(0) / holders.clamp_min(1)[
            :, None, None
        ]
        hp, head = self.hp, server.state["syn_head"]
        K = real.shape[0]
        labels = torch.arange(K, device=real.device).repeat_interleave(hp.num_features)
        features = server.state["features"].clone().requires_grad_(True)
        opt = torch.optim.SGD([features], lr=hp.lr_feature)
        present = holders > 0
        for _ in range(hp.match_epochs):                             # 2. gradient matching
            syn, _, _ = class_gradients(features, labels, head["head.weight"], head["head.bias"], K)
            loss = gradient_distance(real[present], syn[present])
            opt.zero_grad()
            loss.backward()
            opt.step()
        server.state["features"] = features.detach()
        gen = torch.Generator().manual_seed(derived_seed(server.seed, server.round + 1, 31))
        server.state["syn_head"] = retrain_linear_head(                 # 3. classifier re-training
            fresh_linear(features.shape[1], K, gen, real.device), server.state["features"], labels, hp.crt_epochs,
            hp.crt_batch, hp.lr_net, gen)

    def global_params(self, server):
        return {**network_params(server.state["global"]), **server.state["syn_head"]}
