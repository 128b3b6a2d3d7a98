"""Ditto (Li et al., ICML 2021): a FedAvg global model plus a personal model v_i trained with
CE + (lambda/2) ||v_i - w_global||^2  (its Eq. 2 / Algorithm 1)."""
from dataclasses import dataclass

import torch.nn.functional as F

from fedlib.engine.core import Phase
from fedlib.losses import proximal
from fedlib.methods.base import Hyper, Method, positive


@dataclass
class DittoHyper(Hyper):
    lam: float = 0.1

    def validate(self):
        positive(self.lam, "lam", allow_zero=True)


class Ditto(Method):
    name = "ditto"
    paper = "Li et al., ICML 2021"
    Hyper = DittoHyper
    personalized = True

    def local_phases(self, ctx):
        return [Phase(target="local"), Phase(target="personal", loss=self.personal_loss)]

    def personal_loss(self, out, batch, params, ctx):
        return F.cross_entropy(out.logits, batch.y) + 0.5 * self.hp.lam * proximal(params, ctx.received["params"])

    def eval_params(self, server, client):
        return client.state.get("personal", {**client.params, **server.state["global"]})
