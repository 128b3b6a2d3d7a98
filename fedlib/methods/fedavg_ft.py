"""FedAvg-FT: FedAvg, then each client fine-tunes the global model on its data before evaluation."""
from dataclasses import dataclass

from fedlib.engine.core import Phase, cross_entropy_loss
from fedlib.methods.base import POSITIVE, Hyper, Method, hyper
from fedlib.methods.registry import register


@dataclass
class FTHyper(Hyper):
    finetune_epochs: int = hyper(1, POSITIVE)


@register("fedavg_ft", "FedAvg-FT", "FedAvg + local fine-tuning (as in FedGPA 5.1.3)", cite="mcmahan2017fedavg")
class FedAvgFT(Method):
    Hyper = FTHyper
    personalized = True

    def finetune_phase(self):
        return Phase(epochs=self.hp.finetune_epochs, loss=cross_entropy_loss)
