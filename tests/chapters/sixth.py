"""A sixth chapter, defined outside fedlib (as a new paper's author would start): 'fine-tuning the global model for
one epoch beats FedAvg's global model on each client's own test set under label skew', on scikit-learn's digits.
Only what the 'paper' brings is here; the shared behaviour comes from the registered ``Chapter``."""
from __future__ import annotations

from dataclasses import dataclass

from fedlib.claims import Claim, Sentence, versus
from fedlib.experiment import Config, make_config
from fedlib.studies.common import method_labels, with_seeds
from fedlib.studies.grid import Budget, Scales
from fedlib.studies.registry import register_chapter
from fedlib.studies.report import fmt, mean_std

METHODS = ["fedavg", "fedavg_ft"]
LABELS = method_labels(METHODS)
PAPER = {"fedavg": 80.0, "fedavg_ft": 90.0}   # the 'paper's' headline numbers
HYPER_REASONS: dict = {}


@dataclass(frozen=True, kw_only=True)
class SixthBudget(Budget):
    clients: int = 4


SCALES = Scales(ci=SixthBudget(rounds=2, seeds=[0, 1]), book=SixthBudget(rounds=10, seeds=[0, 1]),
                reference=SixthBudget(rounds=2, seeds=[0, 1, 2]), paper=SixthBudget(rounds=4, seeds=[0, 1, 2]))


def config(method: str, scale: str, seed: int = 0) -> Config:
    sc = SCALES[scale]
    return make_config(method=method, dataset="digits", partition={"name": "dirichlet", "alpha": 0.3, "min_size": 20},
                       num_clients=sc.clients, rounds=sc.rounds, local_epochs=1, batch_size=32, lr=0.1,
                       seed=seed, executor="sequential")


def scale_summary(scale: str) -> str:
    sc = SCALES[scale]
    return f"scale {scale}: digits, {sc.clients} clients, {sc.rounds} rounds, seeds {sc.seeds}"


def tables(scale: str) -> dict:
    return {"headline": {m: with_seeds(config(m, scale), SCALES[scale].seeds) for m in METHODS}}


def reference_run(scale: str) -> Config:
    return config("fedavg_ft", scale)


def protocol(scale: str) -> tuple[list[dict], str]:
    from fedlib.studies.settings import protocol_rows

    return protocol_rows({LABELS[m]: config(m, scale) for m in METHODS}, {"accuracy": "personal_local"})


def headline_rows(runs: dict, scale: str) -> list[dict]:
    return [{"method": LABELS[m], "ours": fmt(mean_std(recs)), "paper": PAPER[m]}
            for m, recs in runs.items()]


CLAIMS = (Claim("ft_beats_fedavg", "fine-tuning beats FedAvg on local tests",
                "fine-tuning the global model for one epoch beats FedAvg's global model on each client's own test set",
                "the sixth paper's Table 1", (versus("headline", "fedavg_ft", ["fedavg"], "personal_local_acc"),),
                "90.0 vs 80.0", 10.0, 1.0, "a point of accuracy"),)
TABLE_RUNS = {"headline": "FedAvg and FedAvg-FT on digits"}
INVENTORY = (Sentence("fine-tuning the global model for one epoch beats FedAvg's global model on each client's own "
                      "test set", "Table 1", claim="ft_beats_fedavg"),)


register_chapter(__name__, "Sixth paper")
