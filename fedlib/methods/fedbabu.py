"""FedBABU (Oh et al., ICLR 2022): the head stays at its shared random initialisation during
federated training (only the body trains and is averaged); before evaluation each client fine-tunes the
whole model (body and head) on its training data.

Fine-tuning follows FedBABU's paper and official code: the whole model, tau_f = 5 epochs (the code's
``--ft_ep`` default), at the training learning rate. Version 1 fine-tuned for 1 epoch (FedAvg-FT's
default): starting from the never-trained head, one epoch leaves the model below its own un-fine-tuned
global model (FedGPA Setting 1, s = 20, n / 4, 30 rounds, E = 2: 50.1% after 1 epoch, 73.2% after 5,
68.6% without fine-tuning)."""
from dataclasses import dataclass

from fedlib.engine.core import Phase
from fedlib.methods.base import POSITIVE, hyper
from fedlib.methods.fedavg_ft import FedAvgFT, FTHyper
from fedlib.methods.registry import register


@dataclass
class BabuHyper(FTHyper):
    finetune_epochs: int = hyper(5, POSITIVE)   # tau_f of FedBABU's personalization


@register("fedbabu", "FedBABU", "Oh et al., ICLR 2022", cite="oh2022fedbabu")
class FedBABU(FedAvgFT):
    Hyper = BabuHyper
    version = 2   # 5 fine-tuning epochs (its paper), not 1
    shared = ("body", "projector")

    def local_phases(self, ctx):
        return [Phase(trainable=("body", "projector"))]
    # the global model (base class): averaged body + the initial head, never trained, the same on all clients
