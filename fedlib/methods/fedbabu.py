"""FedBABU (Oh et al., ICLR 2022): the head stays at its shared random initialisation during
federated training (only the body trains and is averaged); each client fine-tunes the whole
model for a few epochs before evaluation (the fine-tuning of FedAvg-FT)."""
from fedlib.engine.core import Phase
from fedlib.methods.fedavg_ft import FedAvgFT
from fedlib.methods.registry import register


@register
class FedBABU(FedAvgFT):
    name = "fedbabu"
    label = "FedBABU"
    paper = "Oh et al., ICLR 2022"
    shared = ("body", "projector")

    def local_phases(self, ctx):
        return [Phase(trainable=("body", "projector"))]
    # the global model (base class): averaged body + the initial head, never trained, the same on all clients
