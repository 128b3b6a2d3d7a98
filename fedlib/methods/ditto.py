"""Ditto (Li et al., ICML 2021): a FedAvg global model plus a personal model v_i trained with
CE + (lambda/2) ||v_i - w_global||^2  (its Eq. 2 / Algorithm 1)."""
from dataclasses import dataclass

from fedlib.engine.core import Phase
from fedlib.losses import cross_entropy, proximal
from fedlib.methods.base import NON_NEGATIVE, Hyper, Method, PersonalModel, hyper
from fedlib.methods.registry import register


@dataclass
class DittoHyper(Hyper):
    lam: float = hyper(0.1, NON_NEGATIVE)


@register("ditto", "Ditto", "Li et al., ICML 2021", cite="li2021ditto")
class Ditto(PersonalModel, Method):
    Hyper = DittoHyper
    version = 2  # v_k starts from w^0 (Algorithm 1), not from the client's first locally trained model

    def local_phases(self, ctx):
        return [Phase(target="local"), Phase(target="personal", loss=self.personal_loss)]

    def personal_loss(self, out, batch, params, ctx):
        return cross_entropy(out.logits, batch) + 0.5 * self.hp.lam * proximal(params, ctx.received["params"])
