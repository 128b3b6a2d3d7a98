"""FedRoD (Chen & Chao, ICLR 2022): bridging generic and personalized federated learning with a
robust, decoupled two-head model.

Body f and generic head G are shared (FedAvg) and trained with the balanced risk: the balanced
softmax loss, cross-entropy of G(z) + log pi_i with pi_i the client's class distribution, which
estimates the loss under a uniform class distribution from skewed local data. A personal head P,
private to the client, is trained at the same time with cross-entropy of G(z) + P(z), with z and
G(z) detached, so that only P learns from it. Personalized prediction: G(z) + P(z); generic
prediction: G(z). Readings: P is linear and starts at zero (the personal model starts as the generic
one); classes a client lacks get log pi = log 1e-8 in the balanced softmax."""
import torch
import torch.nn.functional as F

from fedlib.engine.core import Phase
from fedlib.losses import cross_entropy
from fedlib.methods.base import Method
from fedlib.methods.registry import register
from fedlib.models import PARTS

P_WEIGHT, P_BIAS = "extra.p_head.weight", "extra.p_head.bias"


def personal_logits(z, logits, params) -> torch.Tensor:
    return logits + F.linear(z, params[P_WEIGHT], params[P_BIAS])


@register("fedrod", "FedRoD", "Chen & Chao, ICLR 2022", cite="chen2022fedrod")
class FedRoD(Method):
    shared = PARTS              # body and the generic head
    personalized = True

    def receive(self, ctx):
        models = super().receive(ctx)
        local = models["local"]
        if P_WEIGHT not in local:
            head = local["head.weight"]
            local[P_WEIGHT], local[P_BIAS] = torch.zeros_like(head), torch.zeros(head.shape[0])
        return models

    def local_phases(self, ctx):
        return [Phase(trainable=PARTS + ("extra",))]

    def local_loss(self, out, batch, params, ctx):
        prior = ctx.counts / ctx.counts.sum()
        balanced = cross_entropy(out.logits + torch.log(prior.clamp_min(1e-8)), batch)   # generic: BSM
        personal = cross_entropy(personal_logits(out.z.detach(), out.logits.detach(), params), batch)
        return balanced + personal

    def eval_params(self, ctx):
        # the client's personal head on top of the current generic model
        model = self.received_model(ctx)
        if P_WEIGHT in ctx.model:
            model[P_WEIGHT], model[P_BIAS] = ctx.model[P_WEIGHT], ctx.model[P_BIAS]
        return model

    def predict(self, out, ctx, variant=None):
        if ctx.client_id is None or P_WEIGHT not in ctx.model or variant == "generic":
            return out.logits.argmax(1)
        return personal_logits(out.z, out.logits, ctx.model).argmax(1)

    prediction_variants = ("generic",)

    def describes_eval_params(self):
        return "the generic model with the client's personal head"

    def describes_prediction(self):
        return "the generic logits plus the personal head's (the global model: the generic logits)"
