"""FedBABU (Oh et al., ICLR 2022): the head stays at its shared random initialisation during
federated training (only the body trains and is averaged); each client fine-tunes the whole
model for a few epochs before evaluation."""
from dataclasses import dataclass

from fedlib.engine.core import Phase
from fedlib.methods.base import Hyper, Method, positive


@dataclass
class BabuHyper(Hyper):
    finetune_epochs: int = 1

    def validate(self):
        positive(self.finetune_epochs, "finetune_epochs")


class FedBABU(Method):
    name = "fedbabu"
    paper = "Oh et al., ICLR 2022"
    Hyper = BabuHyper
    shared = ("body", "projector")
    personalized = True

    @property
    def finetune_epochs(self):
        return self.hp.finetune_epochs

    def local_phases(self, ctx):
        return [Phase(trainable=("body", "projector"))]

    def global_params(self, server, clients):
        # the global model: averaged body + the never-trained initial head (identical on all clients)
        return {**clients[0].params, **server.state["global"]}
