"""The FedPRP chapter's experiments: long-tailed FMNIST and MNIST (FMNIST-LT is the analogue of the
paper's CIFAR-10-LT, MNIST-LT a second 10-class column), the paper's protocol and reported numbers.

Paper numbers are transcribed from Guo et al. (IEEE TNNLS 2024), Tables I-III, V, VII, VIII, CIFAR-10
columns, as the spec ../shared/specs/fedprp.md reads them (Table V's last column and Table VIII are
reconstructed there from a garbled extraction). CIFAR-100 and Tiny-ImageNet columns have no offline
analogue: no 100- or 200-class dataset is available without a download. The page's own smoke runs, plots and
readings are ``fedprp_pages``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlib.claims import Claim, Comparison, Pairs, Read, Row, Sentence, mean_over_rounds, versus
from fedlib.experiment import Config, make_config
from fedlib.studies.common import (  # noqa: F401  (the chapter uses them)
    ON_CPU,
    Runtime,
    fmt,
    method_labels,
    run_grid,
    with_seeds,
)
from fedlib.studies.grid import Budget, Scales, convergence_grid
from fedlib.studies.registry import register_chapter
from fedlib.studies.report import balanced, fmt_of, local
from fedlib.timing import TABLE as TIMED
from fedlib.timing import part_above, relative_to, rounds_above

METHODS = ["apfl", "fedrep", "fedprox", "fedproto", "fedrod", "fedphp", "fedavg", "fedic", "creff", "fedprp"]
LABELS = method_labels(METHODS)
# the authors' code: where the chapter could compare its reading with it (the book's papers table lists it)
OFFICIAL_CODE = ("", "shunxinguo/FedPRP", "https://github.com/shunxinguo/FedPRP")   # (words, link text, address)
DATASETS = {"fmnist": "FMNIST-LT (for CIFAR-10-LT)", "mnist": "MNIST-LT"}

# Table I: A_loc (%), Sharding, CIFAR-10: (s, gamma) -> method -> value
PAPER_T1 = {
    (4, 0.1): {"apfl": 46.11, "fedrep": 46.87, "fedprox": 52.87, "fedproto": 49.84, "fedrod": 45.97, "fedphp": 48.38,
               "fedavg": 43.03, "fedic": 60.11, "creff": 47.56, "fedprp": 74.28},
    (4, 0.5): {"apfl": 54.74, "fedrep": 58.44, "fedprox": 61.47, "fedproto": 58.54, "fedrod": 59.85, "fedphp": 56.94,
               "fedavg": 53.08, "fedic": 61.29, "creff": 56.88, "fedprp": 81.07},
    (4, 1.0): {"apfl": 54.93, "fedrep": 63.44, "fedprox": 63.48, "fedproto": 62.57, "fedrod": 64.99, "fedphp": 61.44,
               "fedavg": 56.90, "fedic": 60.94, "creff": 60.24, "fedprp": 83.74},
    (5, 0.1): {"apfl": 48.54, "fedrep": 50.51, "fedprox": 51.78, "fedproto": 45.19, "fedrod": 47.30, "fedphp": 48.27,
               "fedavg": 44.79, "fedic": 60.84, "creff": 49.40, "fedprp": 70.74},
    (5, 0.5): {"apfl": 62.17, "fedrep": 61.57, "fedprox": 67.35, "fedproto": 52.81, "fedrod": 60.75, "fedphp": 64.01,
               "fedavg": 56.89, "fedic": 60.52, "creff": 61.58, "fedprp": 79.73},
    (5, 1.0): {"apfl": 63.54, "fedrep": 68.65, "fedprox": 69.41, "fedproto": 56.04, "fedrod": 64.78, "fedphp": 68.28,
               "fedavg": 62.11, "fedic": 64.05, "creff": 64.94, "fedprp": 82.58},
}
# Table II: A_glo (%), Dirichlet, CIFAR-10: (alpha, gamma) -> method -> value
PAPER_T2: dict[tuple[float, float], dict[str, float]] = {
    (0.4, 0.1): {"apfl": 43.27, "fedrep": 44.48, "fedprox": 43.26, "fedproto": 32.33, "fedrod": 51.60, "fedphp": 49.51,
                 "fedavg": 43.44, "fedic": 57.01, "creff": 53.75, "fedprp": 60.71},
    (0.4, 0.5): {"apfl": 57.51, "fedrep": 56.10, "fedprox": 56.21, "fedproto": 34.63, "fedrod": 60.79, "fedphp": 53.71,
                 "fedavg": 55.57, "fedic": 59.02, "creff": 61.79, "fedprp": 66.82},
    (0.4, 1.0): {"apfl": 63.30, "fedrep": 63.27, "fedprox": 62.83, "fedproto": 34.16, "fedrod": 65.07, "fedphp": 64.42,
                 "fedavg": 63.02, "fedic": 59.16, "creff": 65.94, "fedprp": 71.94},
    (0.05, 0.1): {"apfl": 47.43, "fedrep": 39.01, "fedprox": 38.23, "fedproto": 47.78, "fedrod": 47.89, "fedphp": 43.67,
                  "fedavg": 38.19, "fedic": 58.99, "creff": 49.51, "fedprp": 74.39},
}
# Table V: A_sel (%), Dirichlet, CIFAR-10 (no FedRoD / FedPHP rows)
PAPER_T5 = {
    (0.4, 0.1): {"apfl": 43.31, "fedrep": 42.44, "fedprox": 42.92, "fedproto": 37.78, "fedavg": 42.35, "fedic": 60.26,
                 "creff": 52.55, "fedprp": 60.65},
    (0.4, 0.5): {"apfl": 45.29, "fedrep": 50.09, "fedprox": 55.64, "fedproto": 37.84, "fedavg": 49.63, "fedic": 60.07,
                 "creff": 56.03, "fedprp": 67.04},
    (0.05, 0.1): {"apfl": 54.28, "fedrep": 57.14, "fedprox": 53.68, "fedproto": 54.07, "fedavg": 59.38, "fedic": 66.02,
                  "creff": 64.78, "fedprp": 74.66},
}
# Table III: A_glo (%), CIFAR-10, gamma = 0.05, 20 clients / 8 per round:
# partition -> method -> (All, Many, Medium, Few, Average)
PAPER_T3 = {
    "shards": {"apfl": (45.62, 40.93, 36.68, 35.71, 37.77), "fedrep": (50.77, 46.77, 38.83, 39.94, 41.85),
               "fedprox": (47.59, 41.42, 37.95, 37.85, 39.07), "fedproto": (65.41, 54.94, 59.03, 46.13, 53.37),
               "fedavg": (46.19, 40.81, 37.62, 36.26, 38.23), "fedic": (63.94, 44.48, 44.63, 64.57, 51.23),
               "creff": (56.53, 47.11, 48.52, 43.63, 46.42), "fedprp": (74.23, 56.09, 64.01, 59.83, 59.98)},
    "dirichlet": {"apfl": (49.65, 91.08, 47.14, 25.83, 54.68), "fedrep": (50.02, 91.37, 48.55, 25.16, 55.03),
                  "fedprox": (50.22, 90.44, 48.38, 25.88, 54.90), "fedproto": (48.36, 73.41, 41.18, 18.79, 44.46),
                  "fedavg": (50.55, 91.14, 48.33, 24.70, 54.72), "fedic": (61.99, 69.36, 45.15, 45.43, 53.31),
                  "creff": (63.86, 90.63, 54.67, 31.74, 59.01), "fedprp": (66.26, 91.48, 55.74, 34.09, 60.44)},
}
# Table VII: 10 new clients after one round, CIFAR-10 s=5 gamma=0.5: method -> (A_loc, A_glo)
PAPER_T7 = {"apfl": (58.63, 62.46), "fedrep": (59.63, 58.90), "fedprox": (66.36, 65.36), "fedproto": (45.42, 45.84),
            "fedavg": (64.43, 63.68), "fedic": (60.76, 60.07), "creff": (61.66, 61.88), "fedprp": (77.89, 78.43)}
# Table VIII: ablation, CIFAR-10 s=5 gamma=0.5: row -> (use_id, use_ic, A_loc, A_glo); the full row as the
# spec reconstructs it (79.73 = Table I; A_glo unreadable in the extraction)
PAPER_T8 = {"baseline (CE only)": (False, False, 60.95, 60.83), "w/o L_ID": (False, True, 79.21, 78.23),
            "w/o L_IC": (True, False, 73.54, 72.83), "FedPRP": (True, True, 79.73, None)}
PAPER_BETA = "Fig. 7: beta = 0.9 above beta = 0.1 (CIFAR-100 Many +6.89)"


@dataclass(frozen=True, kw_only=True)
class PrpBudget(Budget):
    """This chapter's budget at one scale (``SCALES``)."""
    clients: int
    fraction: float
    per_class: int | None
    head: int
    body: int
    eval_every: int
    sweep_seeds: list[int]
    beta_seeds: list[int]
    new_clients: int
    datasets: list[str]
    gammas: list[float]
    creff: dict[str, int]
    fedic: dict[str, int]
    server_per_class: int
    headline_seeds: list[int]
    dataset_seeds: dict[str, list[int]]
    lr: float
    batch: int


SCALES = Scales(
    # clients, per-round fraction, per-class cap before the long tail, rounds, FedPRP s + t epochs,
    # evaluation cadence, number of evaluations averaged (the paper: last 10 rounds); FEDIC's auxiliary set
    # per class held by the server (the official code: 1,000 of 50,000); seeds of Table I (shards, both datasets)
    # and of the Dirichlet tables (the second dataset is a check on the first: fewer seeds below paper scale);
    # book scale: batch 16 (at 32 a client made one or two steps an epoch and FedAvg's A_loc stayed near chance)
    # at a learning rate chosen on a held-out split (results/tuning/fedprp.json); CReFF's server schedule 100
    # matching steps and 100 re-training epochs (the official 100 and 300; at 20 and 10 its classifier stayed at
    # chance, A_loc 8.6%)
    ci=PrpBudget(clients=10, fraction=0.4, per_class=100, rounds=2, head=1, body=1, eval_every=1, last=1, seeds=[0],
                 sweep_seeds=[0], beta_seeds=[0], new_clients=2, datasets=["fmnist", "mnist"], gammas=[0.1],
                 creff={"match_epochs": 5, "crt_epochs": 3}, fedic={"server_steps": 5, "distill_steps": 5},
                 server_per_class=10, headline_seeds=[0], dataset_seeds={"fmnist": [0], "mnist": [0]}, lr=0.01,
                 batch=32),
    book=PrpBudget(clients=20, fraction=0.4, per_class=150, rounds=6, head=1, body=2, eval_every=3, last=1,
                   seeds=[0, 1], sweep_seeds=[0], beta_seeds=[0], new_clients=4, datasets=["fmnist", "mnist"],
                   gammas=[0.1], creff={"match_epochs": 100, "crt_epochs": 100},
                   fedic={"server_steps": 10, "distill_steps": 10, "batch_unlabeled": 32}, server_per_class=20,
                   headline_seeds=[0, 1, 2], dataset_seeds={"fmnist": [0, 1], "mnist": [0]}, lr=0.02, batch=16),
    # reference: seeds 3 and 4 of the comparison and the ablation were added after the 3-seed verdicts of Tables
    # II, III and V came out inconclusive, and of the beta sweep after its own (``claims.assess``: a second look)
    reference=PrpBudget(clients=100, fraction=0.1, per_class=None, rounds=50, head=1, body=5, eval_every=5, last=2,
                        seeds=[0, 1, 2], sweep_seeds=[0, 1, 2], beta_seeds=[0, 1, 2, 3, 4], new_clients=10,
                        datasets=["fmnist"], gammas=[0.1], creff={}, fedic={}, server_per_class=100,
                        headline_seeds=[0, 1, 2, 3, 4], dataset_seeds={"fmnist": [0, 1, 2, 3, 4]}, lr=0.01, batch=32),
    paper=PrpBudget(clients=100, fraction=0.1, per_class=None, rounds=100, head=5, body=25, eval_every=1, last=10,
                    seeds=[0, 1, 2], sweep_seeds=[0, 1, 2], beta_seeds=[0, 1, 2], new_clients=10,
                    datasets=["fmnist", "mnist"], gammas=[0.1, 0.5, 1.0], creff={}, fedic={}, server_per_class=100,
                    headline_seeds=[0, 1, 2], dataset_seeds={"fmnist": [0, 1, 2], "mnist": [0, 1, 2]}, lr=0.01,
                    batch=32),
)
# the book's learning rate is chosen with this run (``python -m fedlib tune fedprp``), then lowered:
# why a book-scale table may show models near chance (show_table's at_chance)
SHORT_BUDGET = ("at this budget (6 rounds of 3 epochs on a few dozen long-tailed images per client; the paper: 100 "
                "rounds of 30 epochs) these models have not trained yet, mostly those whose clients keep unshared "
                "parts (FedRep's heads, FedProto's whole models)")
LR_OVERRIDE = ("lowered to 0.02: at 0.03 FedPRP's own loss became NaN in round 3 of Table VII's run (24 clients, "
               "seed 0) and its Table I spread over seeds was 12-16 points")
TUNING = dict(method="fedavg", args=dict(dataset="fmnist", kind="shards", gamma=0.1), metric="a_loc")
METRICS = ["fedprp", "class_groups", "own_classes"]


def scale_summary(scale: str) -> str:
    """What the chapter trains at ``scale`` next to what the paper trains (printed by the notebook's set-up)."""
    sc = SCALES[scale]
    return "\n".join([
        f"scale {scale}: {sc.clients} clients, {round(sc.fraction * sc.clients)} per round, "
        f"{sc.rounds} rounds, FedPRP s + t = {sc.head} + {sc.body} local epochs "
        f"(every method {sc.head + sc.body}), "
        f"at most {sc.per_class or 'all'} images per class before the long tail, "
        f"seeds {sc.headline_seeds} (Table I), {sc.dataset_seeds} (Tables II, III, V, VIII), "
        f"{sc.sweep_seeds} (Table VII), {sc.beta_seeds} (Fig. 7)",
        "paper: ResNet-18 on CIFAR-10/100-LT and Tiny-ImageNet, 100 clients (10 per round) or 20 (8 per round), "
        "100 rounds, s + t = 30 epochs, SGD lr 0.01; all scales here: fedlib's cnn2, SGD momentum 0.5, "
        f"weight decay 1e-4 (the official code), lr {sc.lr}, batch {sc.batch} (paper: 0.01, 32)",
    ])


def partition(kind: str, gamma: float, scale: str, value=None, method: str | None = None) -> dict:
    """Shards with s classes per client, or Dirichlet label skew, after a global long tail gamma."""
    sc = SCALES[scale]
    spec = {"shards": {"name": "shards", "s": value or 4},
            "dirichlet": {"name": "dirichlet", "alpha": value or 0.4, "min_size": 2},
            "dirichlet_blocks": {"name": "dirichlet_blocks", "alpha": value or 0.4}}[kind]
    spec["imbalance"] = gamma
    if sc.per_class:
        spec["per_class"] = sc.per_class
    if method == "fedic":
        spec["server"] = sc.server_per_class
    return spec


def config(
    method: str,
    dataset: str,
    kind: str,
    gamma: float,
    scale: str,
    seed: int = 0,
    value=None,
    hyper: dict | None = None,
    late: bool = False,
    clients: int | None = None,
    fraction: float | None = None,
) -> Config:
    """FedPRP Section V-A: SGD lr 0.01 (momentum 0.5, weight decay 1e-4: the official code), batch 32,
    t + s local epochs for every method; personalized metrics over the round's participants."""
    sc = SCALES[scale]
    epochs = sc.head + sc.body
    own: dict[str, dict] = {"fedprp": {"head_epochs": sc.head, "body_epochs": sc.body},
                            "fedrep": {"head_epochs": sc.head, "body_epochs": sc.body},
                            "fedphp": {"ramp": max(1.0, (fraction or sc.fraction) * sc.rounds)},
                            "creff": dict(sc.creff), "fedic": dict(sc.fedic)}
    hp = {**own.get(method, {}), **(hyper or {})}
    num_clients = clients or sc.clients
    extra = dict(late_clients=sc.new_clients, late_round=sc.rounds - 1) if late else {}
    if late:
        num_clients += sc.new_clients
    return make_config(method=method, dataset=dataset, partition=partition(kind, gamma, scale, value, method),
                       num_clients=num_clients, fraction=fraction or sc.fraction, rounds=sc.rounds,
                       local_epochs=epochs, batch_size=sc.batch, lr=sc.lr, momentum=0.5, weight_decay=1e-4,
                       eval_every=sc.eval_every, hyper=hp, seed=seed, metrics=list(METRICS),
                       eval_personal_global=True, eval_clients="participants", average_global=True,
                       global_test_size=2000 if scale != "paper" else None, **extra)


def last(records: list[dict], metric: str, scale: str) -> tuple[float, float, int]:
    """(mean, std, seeds) of the mean of the last evaluations of ``metric`` (the paper: last 10 rounds)."""
    from fedlib.experiment import summarize_runs

    return summarize_runs(records, metrics=(metric,), last=SCALES[scale].last)[metric]


# ---------------------------------------------------------------------- claims of the paper
FIRST = "fmnist"   # the first dataset (the CIFAR-10-LT stand-in) that the claims read; MNIST-LT is a check beside it
# the columns of Tables II and V that a sentence of the paper reads: FedPRP and FEDIC on Dirichlet skew at
# (alpha, gamma) = (0.05, 0.1) and (0.4, 1.0). alpha = 0.05 takes the official code's split (``dirichlet_blocks``): a
# class-wise Dirichlet(0.05) split seldom gives every one of 100 clients two samples (most draws leave a few empty)
SKEW_TABLE = "skew_columns"
SKEW_COLUMNS = (("dirichlet_blocks", 0.05, 0.1), ("dirichlet", 0.4, 1.0))   # (partition, alpha, gamma)
CELL_NAMES = ("", "", "")   # the comparison's key (dataset, partition, method): the claims fix the first two
# Table V's last sentence compares its two alpha columns (gamma = 0.1): every one of its methods at both alphas on one
# split, the official code's (the class-wise split cannot draw alpha = 0.05 over 100 clients), so only alpha changes;
# FedPRP's and FEDIC's runs at alpha = 0.05 are the skew columns' own
ALPHA_TABLE, ALPHA_SPLIT, ALPHAS = "alphas", "dirichlet_blocks", (0.05, 0.4)
# Fig. 5: the A_glo curves of every method at gamma = 0.5 under sharding, both of CIFAR-10's sharding levels (s = 4, 5;
# Section IV-A), 100 clients, 10 a round: the first dataset, the sweep's seeds
CURVES_TABLE, CURVES_GAMMA, CURVES_S = "a_glo_curves", 0.5, (4, 5)
A_GLO_OVER_ROUNDS = mean_over_rounds("a_glo", "A_glo, mean over the evaluated rounds")


# each Table V method's A_sel at alpha = 0.05 minus at alpha = 0.4 (gamma = 0.1), in the paper
ALPHA_GAINS = {m: round(PAPER_T5[(0.05, 0.1)][m] - PAPER_T5[(0.4, 0.1)][m], 2) for m in PAPER_T5[(0.4, 0.1)]}
LEAST, MOST = min(ALPHA_GAINS, key=ALPHA_GAINS.__getitem__), max(ALPHA_GAINS, key=ALPHA_GAINS.__getitem__)


def paper_lead(table: dict) -> float:
    """FedPRP's lead over the best other method in one of the paper's table columns ({method: value})."""
    return round(table["fedprp"] - max(v for m, v in table.items() if m != "fedprp"), 2)


def _best(metric: str, partition: str, rivals, **kw) -> Pairs:
    return versus("comparison", "fedprp", rivals, metric, slot=2, names=CELL_NAMES,
                  where=((0, FIRST), (1, partition)), **kw)


OTHERS = [m for m in METHODS if m != "fedprp"]


def _table3(partition: str) -> Pairs:
    return versus("table3", "fedprp", [m for m in PAPER_T3[partition] if m != "fedprp"], "a_glo", slot=2,
                  names=CELL_NAMES, where=((0, FIRST), (1, partition)))


# Table VI: seconds per round on CIFAR-10, Dirichlet alpha = 0.4, gamma = 0.1, 10 participating clients
PAPER_T6 = {"apfl": 370.85, "fedrep": 165.55, "fedprox": 194.26, "fedproto": 356.16, "fedavg": 191.12, "fedic": 167.85,
            "creff": 277.11, "fedprp": 193.44}
TIMING_REPEATS = (0, 1, 2, 3, 4)   # planned: five timed rounds of each method (``python -m fedlib timing fedprp``)
ABOVE_FEDREP = relative_to("fedrep", "% above FedRep's round")
SERVER_ABOVE = part_above("fedavg", "server_seconds", "server part above FedAvg's, % of its round")
CLIENTS_ABOVE = part_above("fedavg", "client_seconds", "clients' part above FedAvg's, % of its round")


def timing_runs(device: str = "cpu", executor: str = "sequential") -> dict[str, Config]:
    """Table VI's workload: a round of each of its methods at the paper's protocol (Dirichlet alpha = 0.4, gamma =
    0.1, 10 of 100 clients a round, the first dataset, seed 0)."""
    import dataclasses

    return {m: dataclasses.replace(config(m, FIRST, "dirichlet", 0.1, "paper", value=0.4), device=device,
                                   executor=executor) for m in PAPER_T6}


FEDIC_MANY_LOW = 7.0   # "approximately 10.46%" read from below, a third under (as FedPCL's "about 15%": 10)
GROUP_BASES = ("fedavg", "fedproto")   # the methods FedPRP builds on (Table III's "improves ... while maintaining")


def _groups(metric: str, word: str, test: str) -> Pairs:
    """FedPRP against each of ``GROUP_BASES`` on one group of classes of Table III, on both partitions."""
    return Pairs("table3", tuple((Row("fedprp", f"FedPRP {word}"), Row(m, f"{LABELS[m]} {word}")) for m in GROUP_BASES),
                 metric, slot=2, names=("", "{}", ""), where=((0, FIRST),), test=test)


CLAIMS = (
    Claim("best_a_loc", "FedPRP has the best A_loc under sharding (Table I)",
          "The performance of the FedPRP method has consistently delivered competitive results across various datasets "
          "with diverse settings. Especially when the s = 4 and gamma = 0.1 on the CIFAR10 dataset, our proposed "
          "approach outperforms the suboptimal method by a significant margin of 14.17%", "Section IV-B, Table I",
          (_best("a_loc", "shards", OTHERS),), "CIFAR-10, s = 4, gamma = 0.1: 74.28 vs FEDIC 60.11",
          paper_lead(PAPER_T1[(4, 0.1)]), 1.0, "a point of accuracy; the paper's leads here are 10-20 points",
          reading="FedPRP above each of the nine other methods (FMNIST-LT, sharding)"),
    Claim("best_a_glo", "FedPRP has the best A_glo under Dirichlet skew (Table II)",
          "The proposed method achieves excellent results consistent with the Sharding non-iid partitioning strategy "
          "and has advantageous improvements on different datasets", "Section IV-B, Table II",
          (_best("a_glo", "dirichlet", OTHERS),), "CIFAR-10, alpha = 0.4, gamma = 0.1: 60.71 vs FEDIC 57.01",
          paper_lead(PAPER_T2[(0.4, 0.1)]), 1.0, "a point of accuracy; the paper's lead over FEDIC is 3.7",
          reading="FedPRP above each of the nine other methods (FMNIST-LT, Dirichlet)"),
    Claim("best_a_glo_curves", "FedPRP's A_glo is above every method's over the rounds, at both sharding levels "
          "(Fig. 5)",
          "FedPRP consistently achieves superior performance across all sharding levels on both datasets, underscoring "
          "the effectiveness of its prototype rectification and personalization strategy in SHFL",
          "Section IV-B6, Fig. 5",
          (versus(CURVES_TABLE, "fedprp", OTHERS, A_GLO_OVER_ROUNDS, slot=1, names=("s = {}", "")),),
          "CIFAR-10 and CIFAR-100, gamma = 0.5, sharding: FedPRP's curve above every method's (a figure: no numbers)",
          None, 1.0, "a point of accuracy, as for Table II's A_glo",
          reading="FedPRP's A_glo averaged over the evaluated rounds above each of the nine other methods' at s = 4 "
                  "and s = 5 (FMNIST-LT for CIFAR-10-LT, gamma = 0.5, 100 clients, 10 a round; 18 comparisons): "
                  "'consistently' read as over the whole curve, not at its last point; CIFAR-100's panels are not "
                  "checkable offline"),
    Claim("best_a_sel", "FedPRP has the best A_sel under Dirichlet skew (Table V)",
          "Table V shows the personalized modeling capability of FedPRP, which consistently achieves the best results "
          "under varying degrees of skewed heterogeneity", "Section IV-B5, Table V",
          (_best("a_sel", "dirichlet", [m for m in PAPER_T5[(0.4, 0.1)] if m != "fedprp"]),),
          "CIFAR-10, alpha = 0.4, gamma = 0.1: 60.65 vs FEDIC 60.26", paper_lead(PAPER_T5[(0.4, 0.1)]), 0.25,
          "a quarter point: the paper's own lead over FEDIC is 0.39",
          reading="FedPRP above each of Table V's seven other methods (FMNIST-LT, Dirichlet)"),
    Claim("strong_skew_above_fedic", "FedPRP's A_glo is far above FEDIC's at alpha = 0.05 (Table II)",
          "Especially when alpha = 0.05 and gamma = 0.1 have strong skew heterogeneity, FedPRP is 15.40% higher than "
          "the FEDIC method", "Section IV-B, Table II",
          (Pairs(SKEW_TABLE, ((Row("fedprp", "FedPRP"), Row("fedic", "FEDIC")),), "a_glo", slot=2,
                 names=("alpha = {}", "gamma = {}", ""), where=((0, 0.05), (1, 0.1))),),
          "CIFAR-10, alpha = 0.05, gamma = 0.1: 74.39 vs FEDIC 58.99",
          round(PAPER_T2[(0.05, 0.1)]["fedprp"] - PAPER_T2[(0.05, 0.1)]["fedic"], 2), 1.0,
          "a point of accuracy; the paper's lead is 15.4 points",
          reading="FedPRP's A_glo above FEDIC's (FMNIST-LT, alpha = 0.05, gamma = 0.1), on the official code's "
                  "Dirichlet split (Dir(alpha) within blocks of ten clients, then equal parts: the class-wise split "
                  "cannot draw alpha = 0.05 over 100 clients); the size of the paper's lead is shown against the "
                  "interval, not required"),
    Claim("sharper_skew_higher_a_sel", "Most methods' A_sel is higher at alpha = 0.05 than at alpha = 0.4 (Table V)",
          "Notably, as the heterogeneity increases (i.e., when alpha = 0.05), the overall performance exceeds that "
          "achieved with alpha = 0.4", "Section IV-B5, Table V",
          (Pairs(ALPHA_TABLE, ((Row(0.05, "alpha = 0.05"), Row(0.4, "alpha = 0.4")),), "a_sel", slot=0,
                 names=("", "{}")),),
          "CIFAR-10, gamma = 0.1: each of the eight methods higher at alpha = 0.05, by "
          f"{ALPHA_GAINS[LEAST]:+.2f} ({LABELS[LEAST]}) to {ALPHA_GAINS[MOST]:+.2f} ({LABELS[MOST]})",
          round(float(np.median(list(ALPHA_GAINS.values()))), 2), 1.0,
          "a point of accuracy; the paper's gains are 5.8-17.0 points",
          kind="most",
          reading="'the overall performance' read as most of Table V's eight methods: each method's A_sel at alpha = "
                  "0.05 above its own at alpha = 0.4 (FMNIST-LT, gamma = 0.1), both on the official code's Dirichlet "
                  "split (Dir(alpha) within blocks of ten clients) so that only alpha changes"),
    Claim("balanced_a_sel_above_fedic", "FedPRP's A_sel is above FEDIC's on a balanced global distribution (Table V)",
          "when the global data distribution is balanced with gamma = 1.0 and alpha = 0.4, FedPRP outperforms the "
          "suboptimal FEDIC method by an impressive margin of 6.55%", "Section IV-B5, Table V",
          (Pairs(SKEW_TABLE, ((Row("fedprp", "FedPRP"), Row("fedic", "FEDIC")),), "a_sel", slot=2,
                 names=("alpha = {}", "gamma = {}", ""), where=((0, 0.4), (1, 1.0))),),
          "CIFAR-10, alpha = 0.4, gamma = 1.0: 71.76 vs FEDIC 65.21", 6.55, 1.0,
          "a point of accuracy; the paper's lead is 6.55 points",
          reading="FedPRP's A_sel above FEDIC's (FMNIST-LT, Dirichlet alpha = 0.4, gamma = 1.0, no long tail); the "
                  "size of the paper's lead is shown against the interval, not required"),
    Claim("code_protocol", "the size of Table I's A_loc comes from the official code's protocol (own-class test "
          "images, prediction among the client's classes), not the balanced test of the text",
          "(a hypothesis of this book about Table I's protocol)", "Table I; the official code's evaluation",
          (Comparison("FedPRP A_loc: code's protocol − text's protocol − 10",
                      (Read("comparison", (FIRST, "shards", "fedprp"), "personal_own_acc@restricted", "code"),),
                      (Read("comparison", (FIRST, "shards", "fedprp"), "a_loc", "text"),), shift=10.0),),
          "FedPRP 74-84% on CIFAR-10 with 4-5 classes per client", None, 1.0,
          "a point of accuracy beyond the 10 the hypothesis names", hypothesis=True,
          reading="the code's protocol adds more than 10 points to FedPRP's A_loc"),
    Claim("few_up_groups_kept", "FedPRP raises the Few classes and keeps Many and Medium (Table III)",
          "As observed in Table III, our proposed methodology effectively improves the accuracy of the Few class while "
          "maintaining the accuracy levels of the Many and Medium classes", "Section IV-B, Table III",
          (_groups("global_few", "Few", "greater"), _groups("global_many", "Many", "noninferior"),
           _groups("global_medium", "Medium", "noninferior")),
          "Few: shards 59.83 vs FedAvg 36.26, FedProto 46.13; Dirichlet 34.09 vs 24.70, 18.79; Many and Medium "
          "above both",
          round(min(PAPER_T3[k]["fedprp"][3] - PAPER_T3[k][m][3] for k in PAPER_T3 for m in GROUP_BASES), 2),
          1.0, "a point of accuracy: 'maintaining' read as not more than a point below",
          reading="FedPRP's Few-class A_glo above FedAvg's and FedProto's (the methods it builds on), and its Many and "
                  "Medium not more than delta below theirs, on both partitions, in the paper's configuration (gamma = "
                  "0.05, 20 clients, 8 a round)"),
    Claim("best_groups_shards", "FedPRP has the best overall A_glo on the long tail, shards (Table III)",
          "Under the DDA non-iid partition strategy, FedPRP again shows superior performance in the All metric",
          "Section IV-B, Table III ('again': as under sharding)",
          (_table3("shards"),), "shards: FedPRP 74.23 vs FedProto 65.41",
          paper_lead({m: v[0] for m, v in PAPER_T3["shards"].items()}), 1.0,
          "a point of accuracy; the paper's lead is 8.8 points",
          reading="FedPRP's overall A_glo ('All') above each of Table III's seven other methods, sharding, in the "
                  "paper's configuration (gamma = 0.05, 20 clients, 8 a round)"),
    Claim("best_groups_dirichlet", "FedPRP has the best overall A_glo on the long tail, Dirichlet (Table III)",
          "Under the DDA non-iid partition strategy, FedPRP again shows superior performance in the All metric",
          "Section IV-B, Table III", (_table3("dirichlet"),), "Dirichlet: FedPRP 66.26 vs CReFF 63.86",
          paper_lead({m: v[0] for m, v in PAPER_T3["dirichlet"].items()}), 1.0,
          "a point of accuracy; the paper's lead over CReFF is 2.4 points",
          reading="FedPRP's overall A_glo above each of Table III's seven other methods, Dirichlet, in the paper's "
                  "configuration (gamma = 0.05, 20 clients, 8 a round)"),
    Claim("medium_few_gains_dirichlet", "FedPRP gains on the Medium and Few classes, Dirichlet (Table III)",
          "Under the DDA non-iid partition strategy, FedPRP again shows superior performance in the All metric and "
          "achieves substantial gains in the Medium and Few group classes", "Section IV-B, Table III",
          tuple(Pairs("table3", tuple((Row("fedprp", f"FedPRP {word}"), Row(m, f"{LABELS[m]} {word}"))
                                      for m in GROUP_BASES),
                      metric, slot=2, names=CELL_NAMES, where=((0, FIRST), (1, "dirichlet")))
                for metric, word in (("global_medium", "Medium"), ("global_few", "Few"))),
          "Dirichlet: Medium 55.74 vs FedAvg 48.33, FedProto 41.18; Few 34.09 vs 24.70, 18.79",
          round(min(PAPER_T3["dirichlet"]["fedprp"][g] - PAPER_T3["dirichlet"][m][g] for g in (2, 3)
                    for m in GROUP_BASES), 2),
          2.0, "two points: a gain inside it is not 'substantial' (the chapter's other claims use one)",
          reading="gains over the methods FedPRP builds on (FedAvg, FedProto; as for the Few classes of "
                  "few_up_groups_kept): FedPRP's Medium- and Few-class A_glo above each of theirs, Dirichlet, in the "
                  "paper's configuration (gamma = 0.05, 20 clients, 8 a round)"),
    Claim("fedic_few_shards", "FEDIC is best on the Few classes, below FedProto on Many, sharding (Table III)",
          "More specifically, when the Sharding strategy is employed, FEDIC achieves remarkable results for the Few "
          "class; however, it falls short of the suboptimal FedProto method by approximately 10.46% in terms of "
          "accuracy for the Many class", "Section IV-B, Table III (the sentence resumes after Tables III and IV)",
          (versus("table3", "fedic", [m for m in PAPER_T3["shards"] if m != "fedic"], "global_few", slot=2,
                  names=CELL_NAMES, where=((0, FIRST), (1, "shards"))),
           Pairs("table3", ((Row("fedproto"), Row("fedic")),), "global_many", slot=2, names=CELL_NAMES,
                 where=((0, FIRST), (1, "shards")), shift=FEDIC_MANY_LOW)),
          "Few: FEDIC 64.57 vs FedPRP 59.83 (the next best); Many: FedProto 54.94 vs FEDIC 44.48",
          round(min(PAPER_T3["shards"]["fedic"][3] - max(v[3] for m, v in PAPER_T3["shards"].items() if m != "fedic"),
                    PAPER_T3["shards"]["fedproto"][1] - PAPER_T3["shards"]["fedic"][1] - FEDIC_MANY_LOW), 2),
          1.0, "a point of accuracy beyond each bound",
          reading="'remarkable results for the Few class' read as FEDIC's Few-class A_glo above each of the seven "
                  "other methods (Table III shows it first in that column); 'approximately 10.46%' read from below, a "
                  "third under: FedProto's Many-class A_glo at least 7 points above FEDIC's; sharding, in the "
                  "paper's configuration (gamma = 0.05, 20 clients, 8 a round)"),
    Claim("both_terms_help", "both new terms help: FedPRP beats CE only, w/o L_ID and w/o L_IC (Table VIII)",
          "Compared to scenarios where one component was ablated, the complete FedPRP model maintained a significant "
          "advantage in results, underscoring the importance of each component in the framework",
          "Section IV-C2, Table VIII",
          (versus("ablation", "FedPRP", [r for r in PAPER_T8 if r != "FedPRP"], "a_loc"),),
          "A_loc 79.73 vs 60.95 / 79.21 / 73.54",
          round(PAPER_T8["FedPRP"][2] - max(v[2] for r, v in PAPER_T8.items() if r != "FedPRP"), 2), 0.25,
          "a quarter point: the paper's smallest gap (w/o L_ID) is 0.52",
          reading="the full FedPRP above each ablated row (A_loc, sharding)"),
    Claim("new_clients", "new clients do best with FedPRP after one round (Table VII)",
          "Table VII presents a performance comparison of the different methods after the addition of 10 new clients "
          "and one round of training on their respective private data. Obviously, FedPRP shows consistently superior "
          "performance on all datasets", "Section IV-B6, Table VII",
          (versus("late_clients", "fedprp", [m for m in PAPER_T7 if m != "fedprp"], "a_loc"),),
          "A_loc 77.89 vs FedProx 66.36", paper_lead({m: v[0] for m, v in PAPER_T7.items()}), 1.0,
          "a point of accuracy; the paper's lead is 11.5 points",
          reading="FedPRP above each of Table VII's seven other methods for the clients that join in the last round"),
    Claim("fedrep_fastest", "FedRep has the shortest round of Table VI's methods (Table VI)",
          "Personalized federated learning FedRep exhibits the shortest runtime due to its differentiation between "
          "personalized and shared parts of model training", "Section IV-B4, Table VI",
          rounds_above("fedrep", PAPER_T6, LABELS, ABOVE_FEDREP),
          "CIFAR-10: FedRep 165.55 s, FEDIC 167.85 s, FedAvg 191.12 s, ..., APFL 370.85 s",
          round(min(100 * (v / PAPER_T6["fedrep"] - 1) for m, v in PAPER_T6.items() if m != "fedrep"), 2), 1.0,
          "one per cent of a round", unit="%", seeds=TIMING_REPEATS, scales=("paper",),
          reading="each other method's round (training, aggregation, evaluation) in % above FedRep's round of the "
                  "same repetition, measured side by side on one machine; the repetitions pair the comparisons"),
    Claim("client_side_cost", "FedPRP's added time lies in the clients' training, not the server's prototype "
          "aggregation (Section IV-B4)",
          "While the time spent on server-side prototype aggregation is comparable to model aggregation, the primary "
          "time consumption lies in the training of experience prototypes on each client", "Section IV-B4, Table VI",
          (Comparison("FedPRP's server part − FedAvg's, % of FedAvg's round",
                      (Read(TIMED, "fedprp", SERVER_ABOVE, "FedPRP's server part"),), test="equivalent"),
           Comparison("FedPRP's clients' part above FedAvg's − its server part above FedAvg's, % of FedAvg's round",
                      (Read(TIMED, "fedprp", CLIENTS_ABOVE, "FedPRP's clients' part"),),
                      (Read(TIMED, "fedprp", SERVER_ABOVE, "FedPRP's server part"),))),
          "no time per phase: FedPRP 193.44 s a round against FedAvg's 191.12 s (CIFAR-10)", None, 1.0,
          "one per cent of a round", unit="%", seeds=TIMING_REPEATS, scales=("paper",),
          reading="each part of FedPRP's round above the same part of FedAvg's in the same repetition, in % of "
                  "FedAvg's round: the server's part (broadcast, aggregation with the prototypes') within 1% of "
                  "FedAvg's, and the clients' part (local training with the prototype terms, the prototypes' "
                  "computation) above it by more than the server's; evaluation, the same test protocol for every "
                  "method, is not part of what the sentence contrasts"),
    Claim("slow_beta", "a slow prototype average (beta = 0.9) beats a fast one (beta = 0.1) (Fig. 7)",
          "Figures 7a and 7c depict curves for different settings of the parameter beta, with beta = 0.9 "
          "demonstrating a marked prominence over beta = 0.1", "Section IV-C1, Fig. 7",
          (Pairs("beta", ((Row(0.9, "beta = 0.9"), Row(0.1, "beta = 0.1")),), "a_glo"),), PAPER_BETA, None, 0.5,
          "half a point of accuracy (the figure reports several points on CIFAR-100)"),
)
TABLE_RUNS = {"comparison": "10 methods x {sharding, Dirichlet} on each dataset's long tail (the claims read "
                            "FMNIST-LT)",
              "table3": "Table III's methods on both partitions at gamma = 0.05, 20 clients, 8 a round",
              CURVES_TABLE: "10 methods under sharding at s in {4, 5}, gamma = 0.5, 100 clients, 10 a round (Fig. 5's "
                            "A_glo curves)",
              "ablation": "FedPRP with L_ID and L_IC switched off, sharding s = 5, gamma = 0.5 (the paper's)",
              "late_clients": "Table VII's methods with clients that join in the last round, sharding s = 5, gamma = "
                              "0.5 (the paper's)",
              "beta": "FedPRP, beta in {0.1, 0.5, 0.9}",
              SKEW_TABLE: "FedPRP and FEDIC on Dirichlet skew at alpha = 0.05, gamma = 0.1 (the official code's "
                          "split) and at alpha = 0.4, gamma = 1.0 (the columns of Tables II and V two sentences read)",
              ALPHA_TABLE: "Table V's eight methods at alpha = 0.05 and 0.4, gamma = 0.1, both on the official code's "
                           "Dirichlet split",
              TIMED: "Table VI's eight methods, a round of each per repetition, timed side by side on one machine "
                     "(python -m fedlib timing fedprp: results/timing/fedprp.json)"}

INVENTORY = (
    Sentence("The performance of the FedPRP method has consistently delivered competitive results [...] our proposed "
             "approach outperforms the suboptimal method by a significant margin of 14.17%", "IV-B, Table I",
             claim="best_a_loc"),
    Sentence("the FEDIC and CReFF methods [...] exhibit substantial advantages when applied to the CIFAR100",
             "IV-B, Table I", offline="CIFAR-100 is not available offline"),
    Sentence("the FEDIC and CReFF methods [...] exhibit substantial advantages when applied to the CIFAR100. "
             "Conversely, the personalized methods demonstrate exceptional performance on CIFAR10", "IV-B, Table I",
             offline="a contrast between CIFAR-10 and CIFAR-100 (the long-tail methods' standing changes with the "
                     "number of classes); CIFAR-100 is not available offline, and on CIFAR-10 alone the paper's own "
                     "FEDIC is above every personalized baseline at s = 4, gamma = 0.1"),
    Sentence("On the Tiny-ImageNet dataset, FedPRP outperforms FedProto by 10.81%", "IV-B, Table I",
             offline="Tiny-ImageNet is not available offline"),
    Sentence("The proposed method achieves excellent results consistent with the Sharding non-iid partitioning "
             "strategy", "IV-B, Table II", claim="best_a_glo"),
    Sentence("Especially when alpha = 0.05 and gamma = 0.1 have strong skew heterogeneity, FedPRP is 15.40% higher "
             "than the FEDIC method", "IV-B, Table II", claim="strong_skew_above_fedic"),
    Sentence("our proposed methodology effectively improves the accuracy of the Few class while maintaining the "
             "accuracy levels of the Many and Medium classes", "IV-B, Table III", claim="few_up_groups_kept"),
    Sentence("[under sharding, FedPRP superior in the All metric: what the next sentence's 'again' refers to]",
             "IV-B, Table III", claim="best_groups_shards"),
    Sentence("Under the DDA non-iid partition strategy, FedPRP again shows superior performance in the All metric",
             "IV-B, Table III", claim="best_groups_dirichlet"),
    Sentence("and achieves substantial gains in the Medium and Few group classes", "IV-B, Table III",
             claim="medium_few_gains_dirichlet"),
    Sentence("More specifically, when the Sharding strategy is employed, FEDIC achieves remarkable results for the "
             "Few class; however, it falls short of the suboptimal FedProto method by approximately 10.46% in terms "
             "of accuracy for the Many class", "IV-B, Table III (resumed after Tables III-IV)",
             claim="fedic_few_shards"),
    Sentence("[the same on CIFAR-100]", "IV-B, Table IV", offline="CIFAR-100 is not available offline"),
    Sentence("Table V shows the personalized modeling capability of FedPRP, which consistently achieves the best "
             "results", "IV-B5, Table V", claim="best_a_sel"),
    Sentence("when the global data distribution is balanced with gamma = 1.0 and alpha = 0.4, FedPRP outperforms the "
             "suboptimal FEDIC method by an impressive margin of 6.55%", "IV-B5, Table V",
             claim="balanced_a_sel_above_fedic"),
    Sentence("as the heterogeneity increases (i.e., when alpha = 0.05), the overall performance exceeds that achieved "
             "with alpha = 0.4", "IV-B5, Table V",
             claim="sharper_skew_higher_a_sel"),
    Sentence("FedPRP consistently achieves superior performance across all sharding levels on both datasets",
             "IV-B6, Fig. 5", claim="best_a_glo_curves"),
    Sentence("Personalized federated learning FedRep exhibits the shortest runtime", "IV-B4, Table VI",
             claim="fedrep_fastest"),
    Sentence("the primary time consumption lies in the training of experience prototypes on each client", "IV-B4",
             claim="client_side_cost"),
    Sentence("the proposed method has a significant advantage from the beginning", "IV-B6, Fig. 6 (CIFAR-100)",
             offline="CIFAR-100 is not available offline"),
    Sentence("Obviously, FedPRP shows consistently superior performance on all datasets", "IV-B6, Table VII",
             claim="new_clients"),
    Sentence("beta = 0.9 demonstrating a marked prominence over beta = 0.1", "IV-C1, Fig. 7", claim="slow_beta"),
    Sentence("the complete FedPRP model maintained a significant advantage in results, underscoring the importance of "
             "each component", "IV-C2, Table VIII", claim="both_terms_help"),
)


def time_per_round(records: list[dict]) -> float:
    return float(np.mean([r["wall_time_s"] / r["config"]["rounds"] for r in records]))


# ---------------------------------------------------------------------- the chapter's tables and figures
A_LOC = balanced("A_loc: each participant's personalized model on the balanced test set")
A_GLO = balanced("A_glo: the global model on the balanced test set")
A_SEL = local("A_sel: each participant's model on a test set drawn with its own label mix")
KINDS = ("shards", "dirichlet")


def comparison_grid(scale: str) -> dict:
    sc = SCALES[scale]
    gamma = sc.gammas[0]
    seeds = {"shards": {ds: sc.headline_seeds for ds in sc.datasets}, "dirichlet": sc.dataset_seeds}
    return {(ds, kind, m): with_seeds(config(m, ds, kind, gamma, scale), seeds[kind][ds])
            for ds in sc.datasets for kind in KINDS for m in METHODS}


def _fmt_last(records, metric, scale):
    """``fmt`` of ``last``; "-" where no record has the metric (a cell not recorded yet)."""
    return fmt_of(records, metric, last=SCALES[scale].last)


def recorded_tables(runs: dict, scale: str) -> dict[str, tuple[list[dict], list[dict], str]]:
    """The tables the comparison grid gives ({(dataset, partition, method): records}, committed ones): {title: (rows,
    the records they read, the test set)}."""
    from fedlib.studies.grid import stored_grid

    datasets = SCALES[scale].datasets
    kind_of = {kind: [r for ds in datasets for m in METHODS for r in runs[(ds, kind, m)]] for kind in KINDS}
    table3 = {cell: c["records"] for cell, c in stored_grid("fedprp", table3_grid(scale)).items()}
    alphas = {cell: c["records"] for cell, c in stored_grid("fedprp", alphas_grid(scale)).items()}
    return {"Table I": (table1_rows(runs, scale), kind_of["shards"], A_LOC),
            "Tables II and V": (table2_rows(runs, scale), kind_of["dirichlet"], A_GLO + "; " + A_SEL),
            f"Table III (gamma = {T3_GAMMA}, {T3_CLIENTS} clients, {round(T3_FRACTION * T3_CLIENTS)} a round)":
                (table3_rows(table3, scale), [r for recs in table3.values() for r in recs],
                 A_GLO + ", split by class group"),
            "Table V's two alpha columns (gamma = 0.1) on one split, the official code's":
                (alphas_rows(alphas, scale), [r for recs in alphas.values() for r in recs], A_SEL)}


def alphas_rows(alphas: dict, scale: str) -> list[dict]:
    """Per Table V method: A_sel at alpha = 0.05 and at 0.4 from ``alphas`` ({(alpha, method): records}; "-" where a
    cell has none yet), the paper's two columns beside."""
    return [{"method": LABELS[m], **{f"alpha = {a}": _fmt_last(alphas.get((a, m), []), "a_sel", scale) for a in ALPHAS},
             **{f"paper alpha = {a}": PAPER_T5[(a, 0.1)][m] for a in ALPHAS}} for m in PAPER_T5[(0.4, 0.1)]]


def table1_rows(runs: dict, scale: str) -> list[dict]:
    """Table I: A_loc under sharding on both datasets; on the official code's test set (each client's own classes)
    with every method's own prediction, then with FedPRP's prediction restricted to the client's classes as the code
    makes it (a variant only FedPRP has: one protocol per column); the paper."""
    datasets = SCALES[scale].datasets
    rows = []
    for m in METHODS:
        row: dict[str, Any] = {"method": LABELS[m]}
        for ds in datasets:
            row[f"{ds.upper()}-LT A_loc"] = _fmt_last(runs[(ds, "shards", m)], "a_loc", scale)
        own = runs[(datasets[0], "shards", m)]
        row["A_loc, own-class test"] = _fmt_last(own, "personal_own_acc", scale)
        row["A_loc, own-class test, own-class prediction"] = (
            _fmt_last(own, "personal_own_acc@restricted", scale) if m == "fedprp" else "-")
        row["paper (CIFAR-10)"] = PAPER_T1[(4, 0.1)][m]
        rows.append(row)
    return rows


def table2_rows(runs: dict, scale: str) -> list[dict]:
    """Tables II and V: A_glo and A_sel under Dirichlet skew, the paper beside."""
    datasets = SCALES[scale].datasets
    rows = []
    for m in METHODS:
        row: dict[str, Any] = {"method": LABELS[m]}
        for ds in datasets:
            row[f"{ds.upper()}-LT A_glo"] = _fmt_last(runs[(ds, "dirichlet", m)], "a_glo", scale)
        row["paper A_glo"] = PAPER_T2[(0.4, 0.1)][m]
        for ds in datasets:
            row[f"{ds.upper()}-LT A_sel"] = _fmt_last(runs[(ds, "dirichlet", m)], "a_sel", scale)
        row["paper A_sel"] = PAPER_T5[(0.4, 0.1)].get(m, "-")
        rows.append(row)
    return rows


def table3_rows(runs: dict, scale: str) -> list[dict]:
    """Table III: the global model on all classes and on the Many / Medium / Few groups (first dataset)."""
    ds = SCALES[scale].datasets[0]
    rows = []
    for kind in KINDS:
        for m in [m for m in METHODS if m in PAPER_T3["shards"]]:
            vals = [_fmt_last(runs.get((ds, kind, m), []), k, scale)   # report.fmt: the table states its floor
                    for k in ("a_glo", "global_many", "global_medium", "global_few", "global_groups_average")]
            paper = PAPER_T3[kind][m]
            rows.append({"partition": kind, "method": LABELS[m],
                         **dict(zip(("All", "Many", "Medium", "Few", "Average"), vals)),
                         "paper All / Few": f"{paper[0]:.2f} / {paper[3]:.2f}"})
    return rows


HYPER_REASONS = {"batch_size": "at 32 a client made one or two SGD steps an epoch and FedAvg's A_loc stayed near "
                              "chance (12.9%)",
                 "hyper": "FedPRP's s + t local epochs shortened with the rounds (1 + 2 of the paper's 5 + 25) for the "
                          "smoke run"}
REFERENCE_REASONS = {"hyper": "FedPRP's s + t local epochs shortened with the rounds (1 + 5 of the paper's 5 + 25): "
                             "the reference scale's budget of about 3 CPU-hours"}


def reference_run(scale: str) -> Config:
    """The run the hyperparameter table reads (the headline table's), at ``scale``."""
    return config("fedprp", "fmnist", "shards", 0.1, scale)


def protocol(scale: str) -> tuple[list[dict], str]:
    """The evaluation protocol per method (Section V-A-3): A_glo reads the global model on the balanced test,
    A_loc each client's model on the balanced test, A_sel each client's model on its local test."""
    from fedlib.studies.settings import protocol_rows

    sc = SCALES[scale]
    return protocol_rows({LABELS[m]: config(m, sc.datasets[0], "shards", sc.gammas[0], scale) for m in METHODS},
                         {"A_glo": "global_global", "A_loc": "personal_global", "A_sel": "personal_local"})


# the paper's own configurations of the tables that differ from Table I's: Tables VII and VIII at gamma = 0.5 with
# s = 5 classes per client (CIFAR-10's column); Table III at gamma = 0.05 with 20 clients, 8 of them a round
T78_GAMMA, T78_S = 0.5, 5
T3_GAMMA, T3_CLIENTS, T3_FRACTION = 0.05, 20, 0.4


def skew_columns_grid(scale: str) -> dict:
    """{(alpha, gamma, method): configs over the sweep's seeds} on the first dataset."""
    sc = SCALES[scale]
    return {(alpha, gamma, m): with_seeds(config(m, sc.datasets[0], kind, gamma, scale, value=alpha), sc.sweep_seeds)
            for kind, alpha, gamma in SKEW_COLUMNS for m in ("fedprp", "fedic")}


def alphas_grid(scale: str) -> dict:
    """Table V's eight methods at both alphas (gamma = 0.1) on one split: {(alpha, method): configs over the sweep's
    seeds} on the first dataset."""
    sc = SCALES[scale]
    return {(alpha, m): with_seeds(config(m, sc.datasets[0], ALPHA_SPLIT, 0.1, scale, value=alpha), sc.sweep_seeds)
            for alpha in ALPHAS for m in PAPER_T5[(0.4, 0.1)]}


def a_glo_curves_grid(scale: str) -> dict:
    """Fig. 5: every method under sharding at s = 4 and 5, gamma = 0.5: {(s, method): configs over the sweep's seeds}
    on the first dataset."""
    sc = SCALES[scale]
    return {(s, m): with_seeds(config(m, sc.datasets[0], "shards", CURVES_GAMMA, scale, value=s), sc.sweep_seeds)
            for s in CURVES_S for m in METHODS}


def late_clients_grid(scale: str) -> dict:
    sc = SCALES[scale]
    ds = sc.datasets[0]
    return {m: with_seeds(config(m, ds, "shards", T78_GAMMA, scale, value=T78_S, late=True), sc.sweep_seeds)
            for m in PAPER_T7}


def table3_grid(scale: str) -> dict:
    """Table III in the paper's configuration: every method of the table on both partitions of the first dataset
    at gamma = 0.05, 20 clients, 8 a round: {(dataset, partition, method): configs over the scale's seeds}."""
    sc = SCALES[scale]
    ds = sc.datasets[0]
    return {(ds, kind, m): with_seeds(config(m, ds, kind, T3_GAMMA, scale, clients=T3_CLIENTS,
                                             fraction=T3_FRACTION), sc.seeds)
            for kind in KINDS for m in PAPER_T3[kind]}


def ablation_grid(scale: str) -> dict:
    sc = SCALES[scale]
    ds = sc.datasets[0]
    return {row: with_seeds(config("fedprp", ds, "shards", T78_GAMMA, scale, value=T78_S,
                                   hyper={"use_id": use_id, "use_ic": use_ic}), sc.seeds)
            for row, (use_id, use_ic, _, _) in PAPER_T8.items()}


def beta_grid(scale: str) -> dict:
    sc = SCALES[scale]
    ds, gamma = sc.datasets[0], sc.gammas[0]
    return {beta: with_seeds(config("fedprp", ds, "shards", gamma, scale, hyper={"beta": beta}), sc.beta_seeds)
            for beta in (0.1, 0.5, 0.9)}


CONVERGENCE = ("fedprp", "fedavg")   # the paper's method and its main baseline, run 3x longer at reference scale
CONVERGENCE_METRIC = "a_loc"   # what the convergence check reads (the notebook's convergence section)


def tables(scale: str) -> dict:
    """The recorded grid of every table at ``scale`` (reference or paper), most needed first (``python -m fedlib
    records fedprp [--scale reference]``); at reference scale also the convergence check (FMNIST, shards,
    FedPRP and FedAvg at 3x the rounds, seed 0)."""
    out = {"comparison": comparison_grid(scale), "table3": table3_grid(scale), "late_clients": late_clients_grid(scale),
           "ablation": ablation_grid(scale), "beta": beta_grid(scale), SKEW_TABLE: skew_columns_grid(scale),
           ALPHA_TABLE: alphas_grid(scale), CURVES_TABLE: a_glo_curves_grid(scale)}
    if scale == "reference":   # the evidence first: it says what the budget can decide
        grid = comparison_grid(scale)
        ds = SCALES[scale].datasets[0]
        out = {"convergence": convergence_grid({m: grid[(ds, "shards", m)] for m in CONVERGENCE}), **out}
        # the comparisons that decide Tables I, II, V and VII at 3x the rounds (FedPRP on shards: a convergence run)
        out["comparison@3x"] = convergence_grid({cell: grid[cell] for cell in DECIDING_3X})
    return out


DECIDING_3X = [(FIRST, "shards", "fedprp"), (FIRST, "shards", "fedic"), (FIRST, "dirichlet", "fedprp"),
               (FIRST, "dirichlet", "fedic"), (FIRST, "dirichlet", "fedrep")]


register_chapter(__name__, "FedPRP", place=3)
