"""FedRep (Collins et al., ICML 2021): shared body, personal head; locally the head trains first
(body frozen), then the body (head frozen). The server averages bodies."""
from dataclasses import dataclass

from fedlib.engine.core import Phase
from fedlib.methods.base import POSITIVE, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class RepHyper(Hyper):
    head_epochs: int = hyper(10, POSITIVE)
    body_epochs: int = hyper(1, POSITIVE)


@register("fedrep", "FedRep", "Collins et al., ICML 2021", cite="collins2021fedrep")
class FedRep(Method):
    Hyper = RepHyper
    shared = ("body", "projector")
    personalized = True
    has_global_model = False

    def local_phases(self, ctx):
        return [Phase(trainable=("head",), epochs=self.hp.head_epochs),
                Phase(trainable=("body", "projector"), epochs=self.hp.body_epochs)]
