"""FedProto (Tan et al., AAAI 2022): clients share only class prototypes.

Local loss: CE + lambda * MSE(z, C_bar^(y)) over classes that have a global prototype;
server: C_bar^(k) = sum_i |D_ik| C_i^(k) / N_k (Eq. 6, read as the count-weighted mean), or with
``proto_weights="uniform"`` the plain mean over the clients that hold class k (the official code's
``proto_aggregation``). Prediction by the local classifier (default) or by the nearest global prototype
(``predict_by="prototype"``).

A client's prototype C_i^(k) is the mean of the features of its class-k samples under the model it just
trained (Eq. 5 with the trained model, as FedPCL's official code computes FedProto's prototypes). FedProto's
own code averages instead the features seen during its last local epoch, under the model as it trained:
that reading is not implemented (it needs the features of every training step)."""
from dataclasses import dataclass

import torch

from fedlib.losses import cross_entropy, prototype_mse
from fedlib.methods.base import NON_NEGATIVE, Hyper, PrototypeSharing, added_later, hyper
from fedlib.methods.registry import register


@dataclass
class ProtoHyper(Hyper):
    lam: float = hyper(1.0, NON_NEGATIVE)
    predict_by: str = hyper("logits", ("logits", "prototype"))
    proto_weights: str = added_later("counts", ("counts", "uniform"))   # counts (Eq. 6) | uniform (the official code)


@register("fedproto", "FedProto", "Tan et al., AAAI 2022", cite="tan2022fedproto")
class FedProto(PrototypeSharing):
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

    def prototype_weights(self, counts):
        return counts if self.hp.proto_weights == "counts" else (counts > 0).to(counts.dtype)

    def predict(self, out, ctx, variant=None):
        if self.hp.predict_by == "logits" or ctx.received["protos"] is None:
            return out.logits.argmax(1)
        return nearest_prototype(out.z, ctx.received["protos"], ctx.received["present"])

    def describes_prediction(self):
        return "the largest logit" if self.hp.predict_by == "logits" else "the nearest global prototype"


def nearest_prototype(z, protos, present):
    """Class of the nearest (Euclidean) prototype among the classes that have one."""
    d = torch.cdist(z, protos)
    d[:, ~present] = float("inf")
    return d.argmin(1)
