"""FedProx (Li et al., MLSys 2020): CE + (mu/2) ||w - w_global||^2  (its Eq. 2)."""
from dataclasses import dataclass

from fedlib.losses import cross_entropy, proximal
from fedlib.methods.base import NON_NEGATIVE, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class ProxHyper(Hyper):
    mu: float = hyper(0.01, NON_NEGATIVE)


@register("fedprox", "FedProx", "Li et al., MLSys 2020", cite="li2020fedprox")
class FedProx(Method):
    Hyper = ProxHyper

    def local_loss(self, out, batch, params, ctx):
        return cross_entropy(out.logits, batch) + 0.5 * self.hp.mu * proximal(params, ctx.received["params"])
