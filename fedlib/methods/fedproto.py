"""FedProto (Tan et al., AAAI 2022): clients share only class prototypes.

Local loss: CE + lambda * MSE(z, C_bar^(y)) over classes that have a global prototype;
server: C_bar^(k) = sum_i |D_ik| C_i^(k) / N_k. Prediction by the local classifier (default)
or by the nearest global prototype (``predict_by="prototype"``)."""
from dataclasses import dataclass

import torch

from fedlib.errors import ConfigError
from fedlib.losses import cross_entropy, prototype_mse
from fedlib.methods.base import Hyper, PrototypeSharing, positive
from fedlib.methods.registry import register


@dataclass
class ProtoHyper(Hyper):
    lam: float = 1.0
    predict_by: str = "logits"

    def validate(self):
        positive(self.lam, "lam", allow_zero=True)
        if self.predict_by not in ("logits", "prototype"):
            raise ConfigError("hyper.predict_by", self.predict_by, "'logits' or 'prototype'")


@register
class FedProto(PrototypeSharing):
    name = "fedproto"
    label = "FedProto"
    paper = "Tan et al., AAAI 2022"
    Hyper = ProtoHyper
    shared = ()
    personalized = True
    has_global_model = False

    def local_loss(self, out, batch, params, ctx):
        reg = prototype_mse(out.z, batch, ctx.received["protos"], ctx.received["present"])
        return cross_entropy(out.logits, batch) + self.hp.lam * reg

    def upload(self, ctx, models, result):
        up = super().upload(ctx, models, result)
        up.pop("params")  # FedProto sends prototypes only
        return up

    def predict(self, out, ctx, variant=None):
        if self.hp.predict_by == "logits" or ctx.received["protos"] is None:
            return out.logits.argmax(1)
        return nearest_prototype(out.z, ctx.received["protos"], ctx.received["present"])


def nearest_prototype(z, protos, present):
    """Class of the nearest (Euclidean) prototype among the classes that have one."""
    d = torch.cdist(z, protos)
    d[:, ~present] = float("inf")
    return d.argmin(1)
