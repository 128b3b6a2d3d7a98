"""FedAvg-FT: FedAvg, then each client fine-tunes the global model on its data before evaluation."""
from dataclasses import dataclass

from fedlib.methods.base import Hyper, Method, positive


@dataclass
class FTHyper(Hyper):
    finetune_epochs: int = 1

    def validate(self):
        positive(self.finetune_epochs, "finetune_epochs")


class FedAvgFT(Method):
    name = "fedavg_ft"
    paper = "FedAvg + local fine-tuning (as in FedGPA 5.1.3)"
    Hyper = FTHyper
    personalized = True

    @property
    def finetune_epochs(self):
        return self.hp.finetune_epochs
