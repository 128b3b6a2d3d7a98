"""The FedMate chapter's experiments: FMNIST (analogue of CIFAR-10 and CINIC-10) and MNIST (analogue
of EMNIST), the paper's protocol and reported numbers.

Paper numbers are transcribed from Yang et al. (ECAI 2025), Tables 1 and 2 (mean accuracy over clients,
%; the paper does not say what its "±" is). CIFAR-100 (Table 2) and Cityscapes (Table 3) have no
offline analogue. The paper's appendices (algorithm, hyperparameters) are missing from its text; the
protocol follows the official code's defaults (../shared/specs/fedmate.md, section 2). The page's own smoke runs
and plots are ``fedmate_pages``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedlib.claims import Claim, Comparison, Pairs, Read, Row, Sentence, Statistic, each_above, versus
from fedlib.experiment import Config, make_config
from fedlib.methods.fedpac import CODE_READINGS, CodeReading
from fedlib.studies.common import (  # noqa: F401  (the chapter uses them)
    ON_CPU,
    Runtime,
    fmt,
    mean_std,
    method_labels,
    nested,
    run_grid,
    with_seeds,
)
from fedlib.studies.grid import Budget, Scales, convergence_grid
from fedlib.studies.registry import register_chapter
from fedlib.studies.report import balanced, fmt_of, local

TABLE1 = ["local", "fedavg_ft", "fedproto", "lg_fedavg", "fedper", "fedrep", "fedbabu", "fedpac", "fedmate"]
TABLE2 = ["local", "fedavg_ft", "moon", "fedproto", "fedfa", "lg_fedavg", "fedper", "fedrep", "fedbabu", "fedpac",
          "fedmate"]
LABELS = method_labels(["local", "fedavg_ft", "fedproto", "lg_fedavg", "fedper", "fedrep", "fedbabu", "fedpac",
                        "fedmate", "moon", "fedfa"], fedavg_ft="FT-FedAvg")
# the authors' code: where the chapter could compare its reading with it (the book's papers table lists it)
OFFICIAL_CODE = ("", "Dongrun-Li/FedMate", "https://github.com/Dongrun-Li/FedMate")   # (words, link text, address)
# Table 1 ablation rows: Backbone = every module off, then the pairs of modules on
ABLATION = {"Backbone": {"mps": False, "cft": False, "cci": False, "ccf": False},
            "+MPS+CFT": {"mps": True, "cft": True, "cci": False, "ccf": False},
            "+CCI+CCF": {"mps": False, "cft": False, "cci": True, "ccf": True}}

# Table 1: generalization (personalized models on a balanced test set), s% uniform
PAPER_T1 = {  # row -> {(dataset, s): value}; CIFAR-10 and CINIC-10 -> FMNIST, EMNIST -> MNIST here
    "local": {("cifar10", 10): 28.61, ("cifar10", 30): 36.08, ("cifar10", 50): 40.51, ("cifar10", 70): 42.40,
              ("cinic10", 10): 22.86, ("cinic10", 70): 29.95, ("emnist", 10): 31.02, ("emnist", 70): 50.84},
    "fedavg_ft": {("cifar10", 10): 49.39, ("cifar10", 30): 57.55, ("cifar10", 50): 61.95, ("cifar10", 70): 64.33,
                  ("cinic10", 10): 32.72, ("cinic10", 70): 40.55, ("emnist", 10): 59.03, ("emnist", 70): 69.24},
    "fedproto": {("cifar10", 10): 29.91, ("cifar10", 30): 38.45, ("cifar10", 50): 43.54, ("cifar10", 70): 46.27,
                 ("cinic10", 10): 22.19, ("cinic10", 70): 30.15, ("emnist", 10): 31.72, ("emnist", 70): 57.14},
    "lg_fedavg": {("cifar10", 10): 28.32, ("cifar10", 30): 35.79, ("cifar10", 50): 40.91, ("cifar10", 70): 42.37,
                  ("cinic10", 10): 22.57, ("cinic10", 70): 29.14, ("emnist", 10): 31.71, ("emnist", 70): 53.64},
    "fedper": {("cifar10", 10): 33.93, ("cifar10", 30): 42.39, ("cifar10", 50): 47.49, ("cifar10", 70): 51.43,
               ("cinic10", 10): 24.64, ("cinic10", 70): 32.60, ("emnist", 10): 36.39, ("emnist", 70): 54.97},
    "fedrep": {("cifar10", 10): 38.97, ("cifar10", 30): 47.63, ("cifar10", 50): 52.53, ("cifar10", 70): 53.51,
               ("cinic10", 10): 26.64, ("cinic10", 70): 33.92, ("emnist", 10): 34.08, ("emnist", 70): 55.47},
    "fedbabu": {("cifar10", 10): 45.05, ("cifar10", 30): 56.25, ("cifar10", 50): 60.89, ("cifar10", 70): 64.87,
                ("cinic10", 10): 27.45, ("cinic10", 70): 37.12, ("emnist", 10): 30.69, ("emnist", 70): 46.23},
    "fedpac": {("cifar10", 10): 53.02, ("cifar10", 30): 65.42, ("cifar10", 50): 69.97, ("cifar10", 70): 71.08,
               ("cinic10", 10): 35.67, ("cinic10", 70): 49.09, ("emnist", 10): 56.71, ("emnist", 70): 70.14},
    "fedmate": {("cifar10", 10): 55.05, ("cifar10", 30): 68.13, ("cifar10", 50): 70.21, ("cifar10", 70): 72.19,
                ("cinic10", 10): 34.98, ("cinic10", 70): 50.24, ("emnist", 10): 60.29, ("emnist", 70): 72.15},
    "Backbone": {("cifar10", 10): 39.11, ("cifar10", 30): 48.17, ("cifar10", 50): 52.51, ("cifar10", 70): 54.20,
                 ("cinic10", 10): 26.33, ("cinic10", 70): 33.95, ("emnist", 10): 35.47, ("emnist", 70): 55.37},
    "+MPS+CFT": {("cifar10", 10): 50.17, ("cifar10", 30): 59.22, ("cifar10", 50): 63.26, ("cifar10", 70): 66.75,
                 ("cinic10", 10): 29.66, ("cinic10", 70): 45.07, ("emnist", 10): 52.49, ("emnist", 70): 67.33},
    "+CCI+CCF": {("cifar10", 10): 52.17, ("cifar10", 30): 62.15, ("cifar10", 50): 62.89, ("cifar10", 70): 64.97,
                 ("cinic10", 10): 30.02, ("cinic10", 70): 44.27, ("emnist", 10): 54.17, ("emnist", 70): 66.57},
}
# Table 2: local adaptability (pathological, 3 classes per client), CIFAR-10 / CINIC-10 / CIFAR-100
PAPER_T2 = {"local": (65.15, 55.21, 35.27), "fedavg_ft": (90.65, 84.12, 70.51), "moon": (66.67, 57.37, 37.29),
            "fedproto": (85.21, 81.61, 75.28), "fedfa": (84.19, 80.86, 71.59), "lg_fedavg": (88.35, 82.10, 70.95),
            "fedper": (91.21, 85.05, 69.97), "fedrep": (91.45, 85.88, 75.33), "fedbabu": (88.83, 81.65, 67.71),
            "fedpac": (91.71, 84.28, 74.24), "fedmate": (92.18, 86.01, 77.04)}
FMNIST_CLASSES = ["T-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]
# which paper column each of our datasets stands in for
ANALOGUE = {"fmnist": ("cifar10", "CIFAR-10"), "mnist": ("emnist", "EMNIST")}

# Book scale: batch 10 (at 50 a client of 60 samples made 2 steps a round and every Table 1 model stayed below
# twice chance) at a learning rate chosen on a held-out split (results/tuning/fedmate.json); Table 1 keeps two
# FMNIST cells (MNIST s = 10 is paper scale only) so that the larger batch count fits the book's budget.

@dataclass(frozen=True, kw_only=True)
class MateBudget(Budget):
    """This chapter's budget at one scale (``SCALES``)."""
    clients: int
    n: int
    cls_epochs: int
    epochs: int
    eval_every: int
    headline_seeds: list[int]
    table2_seeds: list[int]
    repeat_seeds: list[int]
    table1_cells: list[tuple[str, int]]
    table2_datasets: list[str]
    repeat: list[float]
    global_test: int | None
    lr: float
    batch: int


SCALES = Scales(
    ci=MateBudget(clients=6, n=60, rounds=2, cls_epochs=1, epochs=1, eval_every=1, headline_seeds=[0], seeds=[0],
                  table2_seeds=[0], repeat_seeds=[0], table1_cells=[("fmnist", 10), ("mnist", 10)],
                  table2_datasets=["fmnist"], repeat=[0.25], global_test=1000, lr=0.01, batch=50),
    book=MateBudget(clients=20, n=60, rounds=6, cls_epochs=1, epochs=1, eval_every=6, headline_seeds=[0, 1, 2],
                    seeds=[0], table2_seeds=[0], repeat_seeds=[0], table1_cells=[("fmnist", 10), ("fmnist", 70)],
                    table2_datasets=["fmnist"], repeat=[0.1, 0.5], global_test=1000, lr=0.1, batch=10),
    # seeds 3 and 4 of Table 2 and of Fig. 5 were added after their 3-seed verdicts came out inconclusive
    # (``claims.assess``: a second look)
    reference=MateBudget(clients=20, n=600, rounds=40, cls_epochs=1, epochs=2, eval_every=5, headline_seeds=[0, 1, 2],
                         seeds=[0, 1, 2], table2_seeds=[0, 1, 2, 3, 4], repeat_seeds=[0, 1, 2, 3, 4],
                         table1_cells=[("fmnist", 10), ("fmnist", 70)], table2_datasets=["fmnist"], repeat=[0.1, 0.5],
                         global_test=None, lr=0.01, batch=50),
    paper=MateBudget(clients=20, n=600, rounds=200, cls_epochs=1, epochs=5, eval_every=10, headline_seeds=[0, 1, 2],
                     seeds=[0, 1, 2], table2_seeds=[0, 1, 2], repeat_seeds=[0, 1, 2],
                     table1_cells=[("fmnist", 10), ("fmnist", 30), ("fmnist", 50), ("fmnist", 70), ("mnist", 10),
                                   ("mnist", 70)],
                     table2_datasets=["fmnist", "mnist"], repeat=[0.1, 0.25, 0.35, 0.5], global_test=None, lr=0.01,
                     batch=50),
)
# the book's learning rate is chosen with this run (``python -m fedlib tune fedmate``)
TUNING = dict(method="fedavg_ft", args=dict(dataset="fmnist", s=10), metric="personal_global_acc")


def scale_summary(scale: str) -> str:
    """What the chapter trains at ``scale`` next to what the paper trains (printed by the notebook's set-up)."""
    sc = SCALES[scale]
    return "\n".join([
        f"scale {scale}: {sc.clients} clients of {sc.n} samples, {sc.rounds} rounds, classifier phase "
        f"{sc.cls_epochs} epoch + {sc.epochs} extractor epochs, seeds {sc.headline_seeds} (Table 1), "
        f"{sc.table2_seeds} (Table 2), {sc.repeat_seeds} (Fig. 5), {sc.seeds} (the rest), "
        f"batch {sc.batch}, SGD lr {sc.lr}",
        "official code: 20 clients of 600 samples, 200 rounds, 1 + 5 epochs, batch 50, SGD lr 0.01, momentum 0.5, "
        "weight decay 5e-4; the paper states none of these",
    ])


def config(method: str, dataset: str, scale: str, s: float | None = None, shards: int | None = None,
           seed: int = 0, hyper: dict | None = None, repeat: float = 0.0) -> Config:
    """The official code's protocol: 20 clients of 600 samples, 3 dominant classes (or 3 classes per client
    for Table 2), batch 50, SGD lr 0.01 momentum 0.5 weight decay 5e-4, a 1-epoch classifier phase at lr
    0.1 then E extractor epochs (5). Every method trains E local epochs; split-model methods train their
    head for the classifier-phase epochs first."""
    sc = SCALES[scale]
    if shards:
        part = {"name": "shards", "s": shards, "per_class": sc.n * sc.clients // 10}
    else:
        part = {"name": "skew", "s": s, "n": sc.n, "k": 3}
    if repeat:
        part["repeat"] = repeat
    hp = {
        "fedmate": {"cls_epochs": sc.cls_epochs},
        "fedrep": {"head_epochs": sc.cls_epochs, "body_epochs": sc.epochs},
        "fedpac": {"head_epochs": sc.cls_epochs},
    }.get(method, {})
    hp.update(hyper or {})
    return make_config(method=method, dataset=dataset, partition=part, num_clients=sc.clients, rounds=sc.rounds,
                       local_epochs=sc.epochs, batch_size=sc.batch, lr=sc.lr, momentum=0.5, weight_decay=5e-4,
                       eval_every=sc.eval_every, hyper=hp, seed=seed, eval_personal_global=True,
                       global_test_size=sc.global_test)


def ablation_config(row: str, dataset: str, s: float, scale: str, seed: int = 0) -> Config:
    return config("fedmate", dataset, scale, s=s, seed=seed, hyper=dict(ABLATION[row]))


# FedPAC as its authors' code runs the method (fedlib.methods.fedpac.CODE_READINGS), the method's own readings only:
# the code's optimizer is FedMate's protocol already, and its CNN is FedGPA's FMNIST model, not this chapter's
PAC_TABLE = "fedpac_readings"
METHOD_READINGS = ("statistics before training", "head rate 0.1")
AS_ITS_CODE = "as its code"
PAC_READINGS: dict[str, CodeReading] = {
    AS_ITS_CODE: CodeReading("both", hyper=tuple(kv for name in METHOD_READINGS for kv in CODE_READINGS[name].hyper)),
    **{name: CODE_READINGS[name] for name in METHOD_READINGS}}


def fedpac_readings_grid(scale: str) -> dict:
    """FedPAC under its code's readings in Table 2's cells: {(dataset, reading): configs over Table 2's seeds}, keyed
    like Table 2 so that a reading pairs with Table 2's FedMate and FedPAC by seed."""
    sc = SCALES[scale]
    return {(ds, name): with_seeds(reading.applied(config("fedpac", ds, scale, shards=3)), sc.table2_seeds)
            for ds in sc.table2_datasets for name, reading in PAC_READINGS.items()}


def fedpac_readings(scale: str = "reference") -> tuple[list[dict], list[dict], str]:
    """Each reading's FedPAC beside fedlib's, from the committed records (``readings.reading_rows``): its accuracy,
    its difference from fedlib's FedPAC and FedMate's margin over it, paired by seed, in Table 2's cells."""
    from fedlib.studies.common import stored_grid
    from fedlib.studies.readings import reading_rows

    stored = stored_grid("fedmate", fedpac_readings_grid(scale))
    readings = {(name, ds): c["records"] for (ds, name), c in stored.items()}
    table2 = {cell: c["records"] for cell, c in stored_grid("fedmate", table2_grid(scale)).items()}
    datasets = SCALES[scale].table2_datasets
    return reading_rows(readings, {ds: table2[(ds, "fedpac")] for ds in datasets},
                        {ds: table2[(ds, "fedmate")] for ds in datasets}, "personal_local_acc",
                        ("dataset", "FedPAC", "fedlib's FedPAC", "FedMate"))


# ---------------------------------------------------------------------- claims of the paper
T1_NAMES = ("{0[0]}, s = {0[1]}", "")   # Table 1's key: ((dataset, s), row)
DECOUPLING = ["lg_fedavg", "fedper", "fedrep"]   # Table 1's "standard model-decoupling PFL approaches"
REPEAT_METHODS = ["fedproto", "fedrep", "fedpac", "fedmate"]


def _uploaded(record: dict) -> float | None:
    sent = [row["uploaded_per_client"] for row in record["history"] if "uploaded_per_client" in row]
    return float(np.mean(sent)) if sent else None


def _share_saved(record: dict, peers) -> float | None:
    """The share (%) of the numbers the run without CFT uploads per client and round that this run does not."""
    mine, without = _uploaded(record), peers("communication", "without")
    full = _uploaded(without) if without is not None else None
    return None if mine is None or not full else 100 * (1 - mine / full)


SAVED = Statistic("numbers uploaded per client and round saved by CFT (%)", _share_saved, "%")


def _cifar10_gap(plus: str, minus) -> float:
    """The smallest difference the paper's CIFAR-10 columns of Table 1 report between ``plus`` and the best of
    ``minus``."""
    cells = [c for c in PAPER_T1["fedmate"] if c[0] == "cifar10"]
    return round(min(PAPER_T1[plus][c] - max(PAPER_T1[m][c] for m in minus) for c in cells), 2)


CLAIMS = (
    Claim("generalizes_best", "FedMate generalizes best: highest accuracy of the personalized models on a balanced "
          "test (Table 1)",
          "our method consistently outperforms the baselines across datasets and heterogeneity scenarios",
          "Section 4.1, Table 1",
          (versus("table1", "fedmate", [m for m in TABLE1 if m != "fedmate"], "personal_global_acc", slot=1,
                  names=T1_NAMES),),
          "best in 7 of 8 columns (FedPAC wins CINIC-10 s = 10)", _cifar10_gap("fedmate", [m for m in TABLE1
                                                                                           if m != "fedmate"]),
          0.25, "a quarter point: the paper's smallest CIFAR-10 lead (s = 50, over FedPAC) is 0.24",
          reading="FedMate above each of Table 1's eight other methods in every (dataset, s) cell"),
    Claim("adapts_best", "FedMate adapts best to local data (Table 2)",
          "Our method demonstrates superior adaptability across datasets of varying difficulty (Tab. 2)",
          "Section 4.1, Table 2",
          (versus("table2", "fedmate", [m for m in TABLE2 if m != "fedmate"], "personal_local_acc", slot=1,
                  names=("{}", "")),),
          "CIFAR-10 92.18 vs FedPAC 91.71, FedRep 91.45",
          round(PAPER_T2["fedmate"][0] - max(v[0] for m, v in PAPER_T2.items() if m != "fedmate"), 2), 0.25,
          "a quarter point: the paper's CIFAR-10 lead over FedPAC is 0.47",
          reading="FedMate above each of Table 2's ten other methods, three classes per client",
          beside=(("against FedPAC as its code runs it", (
              versus("table2", "fedmate", [Row(AS_ITS_CODE, "FedPAC (its code's readings)", table=PAC_TABLE)],
                     "personal_local_acc", slot=1, names=("{}", "")),)),)),
    Claim("fedproto_15_below", "FedProto is more than 15 points below FedMate (Table 1)",
          "prototype-only methods (FedProto) demonstrate the inherent limitations of low-dimensional guidance "
          "(suffering a >15% performance degradation compared to our approach)", "Section 4.1, Table 1",
          (Pairs("table1", ((Row("fedmate", "FedMate"), Row("fedproto", "FedProto − 15 points")),),
                 "personal_global_acc", slot=1, names=T1_NAMES, shift=15.0),),
          "CIFAR-10 s = 10: 55.05 vs 29.91", round(min(PAPER_T1["fedmate"][c] - PAPER_T1["fedproto"][c]
                                                       for c in PAPER_T1["fedmate"] if c[0] == "cifar10") - 15, 2),
          1.0, "a point beyond the 15 the sentence names",
          reading="FedMate more than 15 points above FedProto in every (dataset, s) cell"),
    Claim("decoupling_limited", "the model-decoupling methods (LG-FedAvg, FedPer, FedRep) are each below FT-FedAvg "
          "(Table 1)",
          "standard model-decoupling PFL approaches (e.g., LG-FedAvg, FedPer, and FedRep) show limited effectiveness "
          "in global complementary knowledge integration", "Section 4.1, Table 1",
          (each_above("table1", ["fedavg_ft"], DECOUPLING, "personal_global_acc", slot=1, names=T1_NAMES),),
          "CIFAR-10 s = 10: FT-FedAvg 49.39; FedRep 38.97, FedPer 33.93, LG-FedAvg 28.32",
          _cifar10_gap("fedavg_ft", DECOUPLING), 1.0,
          "a point of accuracy: 'limited' is not a sub-point difference, and the paper's gaps are 6-23 points",
          reading="'limited effectiveness in global knowledge integration' read against the method that integrates "
                  "the whole global model: FT-FedAvg (FedAvg, then local fine-tuning) above each of LG-FedAvg, FedPer "
                  "and FedRep in every (dataset, s) cell, as the paper's Table 1 shows in all eight columns (by 6.1 to "
                  "22.6 points); the sentence names no comparison of its own"),
    Claim("modules_add", "each pair of modules improves on the backbone and all four together are best (Table 1 "
          "ablation)",
          "both feature extractor modules (MPS and CFT) and classifier components (CCI and CCF) contribute "
          "significantly to model performance, with their combined removal degrading accuracy by 3%-17% across "
          "datasets", "Section 4.1, Table 1 (lower half)",
          (Pairs("table1", ((Row("+MPS+CFT"), Row("Backbone")), (Row("+CCI+CCF"), Row("Backbone")),
                            (Row("fedmate"), Row("+MPS+CFT")), (Row("fedmate"), Row("+CCI+CCF"))),
                 "personal_global_acc", slot=1, names=T1_NAMES),
           Pairs("table1", ((Row("fedmate", "FedMate"), Row("Backbone", "Backbone − 3 points")),),
                 "personal_global_acc", slot=1, names=T1_NAMES, shift=3.0)),
          "CIFAR-10 s = 10: 39.11 / 50.17 / 52.17 / 55.05",
          round(min(min(PAPER_T1["+MPS+CFT"][c], PAPER_T1["+CCI+CCF"][c]) - PAPER_T1["Backbone"][c]
                    for c in PAPER_T1["fedmate"] if c[0] == "cifar10"), 2), 0.5,
          "'contribute significantly': half a point of accuracy at least",
          reading="each pair of modules above the backbone, FedMate above each pair, and removing all four costing at "
                  "least 3 points (the sentence's '3%-17%' read from below), in every cell; CFT as configured "
                  "(cft_x = 1) never skips an upload within the reference budget, so '+MPS+CFT' acts as +MPS"),
    Claim("robust_to_repeats", "FedMate is the most robust to clients with repeated samples (Fig. 5)",
          "our method maintains stable performance across varying redundancy levels. Comparatively, FedProto and "
          "FedRep exhibit overfitting tendencies", "Section 4.2, Fig. 5",
          tuple(Comparison(f"drop of {LABELS[m]} − drop of FedMate (repeat ratio 10% -> 50%)",
                           (Read("repeat", (m, 0.1), "personal_global_acc", f"{LABELS[m]} at 10%"),
                            Read("repeat", ("fedmate", 0.5), "personal_global_acc", "FedMate at 50%")),
                           (Read("repeat", (m, 0.5), "personal_global_acc", f"{LABELS[m]} at 50%"),
                            Read("repeat", ("fedmate", 0.1), "personal_global_acc", "FedMate at 10%")))
                for m in REPEAT_METHODS if m != "fedmate"),
          "CINIC-10 s = 50: FedMate degrades least from 10% to 50% repeats", None, 0.5,
          "half a point of accuracy lost to repeats",
          reading="FedMate's drop from 10% to 50% repeated clients smaller than each other method's (FMNIST, s = 50)"),
    Claim("cft_saves", "skipping extractor uploads (CFT) saves communication without costing accuracy (Section 3.4)",
          "The feature extractor is selectively uploaded at rounds that are not multiples of x×q, maintaining "
          "equivalent total communication costs to per-round model uploading", "Section 3.4",
          (Comparison("numbers uploaded saved by CFT (%)", (Read("communication", "with", SAVED, "saved"),)),
           Comparison("accuracy with CFT − without", (Read("communication", "with", "personal_global_acc", "with"),),
                      (Read("communication", "without", "personal_global_acc", "without"),), test="noninferior")),
          "equivalent total communication cost (Appx. 2, not in our text)", None, 1.0,
          "'without costing accuracy': within a point of the run that sends the extractor every round",
          reading="fewer numbers uploaded, and accuracy not more than delta below sending the extractor every round"),
    Claim("fedpac_as_its_code", "FedPAC run as its authors' code runs the method is within a quarter point of "
          "fedlib's FedPAC (Table 2's cell)",
          "(a hypothesis of this book about the FedPAC baseline, FedMate's closest rival in Table 2)",
          "FedPAC's official code (github.com/JianXu95/FedPAC)",
          (Pairs(PAC_TABLE, tuple((Row(name, name), Row("fedpac", "fedlib's FedPAC", table="table2"))
                                  for name in PAC_READINGS), "personal_local_acc", slot=1, names=("{}", ""),
                 test="equivalent"),),
          "-", None, 0.25, "a quarter point: FedMate's Table 2 lead over FedPAC in the paper is 0.47",
          hypothesis=True, scales=("reference",),
          reading="each of the code's two method readings (the classifier combination's statistics on the received "
                  "model; the head's step at 0.1) and both at once, against fedlib's FedPAC on Table 2's seeds, "
                  "within +-delta (two one-sided tests)"),
)
TABLE_RUNS = {"table1": "Table 1's methods and ablation rows in each (dataset, s) cell of the scale",
              "table2": "Table 2's methods, three classes per client",
              "repeat": "FedProto, FedRep, FedPAC and FedMate at each repeat ratio, FMNIST s = 50",
              "communication": "FedMate with and without CFT, FMNIST s = 10",
              PAC_TABLE: "FedPAC as its authors' code runs the method (each of two readings, then both), Table 2's "
                         "cell and seeds"}

INVENTORY = (
    Sentence("1) our method consistently outperforms the baselines across datasets and heterogeneity scenarios",
             "4.1, Table 1", claim="generalizes_best"),
    Sentence("2) standard model-decoupling PFL approaches (e.g., LG-FedAvg, FedPer, and FedRep) show limited "
             "effectiveness in global complementary knowledge integration", "4.1, Table 1",
             claim="decoupling_limited"),
    Sentence("3) prototype-only methods (FedProto) demonstrate the inherent limitations of low-dimensional guidance "
             "(suffering a >15% performance degradation compared to our approach)", "4.1, Table 1",
             claim="fedproto_15_below"),
    Sentence("both feature extractor modules (MPS and CFT) and classifier components (CCI and CCF) contribute "
             "significantly to model performance, with their combined removal degrading accuracy by 3%-17%",
             "4.1, Table 1", claim="modules_add"),
    Sentence("Our method demonstrates superior adaptability across datasets of varying difficulty", "4.1, Table 2",
             claim="adapts_best"),
    Sentence("This dual mechanism achieves a performance gain close to 2% over baselines on the challenging CIFAR-100 "
             "dataset", "4.1, Table 2", offline="CIFAR-100 is not available offline"),
    Sentence("existing methods (FedFA, FedProto, FedPAC) exhibit prototype overlap among highly confusable classes",
             "4.2, Fig. 4 (CINIC-10)", offline="CINIC-10 is not available offline; a t-SNE picture, not a measure"),
    Sentence("our method maintains stable performance across varying redundancy levels. Comparatively, FedProto and "
             "FedRep exhibit overfitting tendencies", "4.2, Fig. 5", claim="robust_to_repeats"),
    Sentence("our approach consistently outperforms baselines, achieving higher mean IoU [...] and mean accuracy "
             "scores", "4.3, Table 3 (Cityscapes)", offline="Cityscapes is not available offline"),
    Sentence("The feature extractor is selectively uploaded at rounds that are not multiples of x x q, maintaining "
             "equivalent total communication costs to per-round model uploading", "3.4", claim="cft_saves"),
)


# ---------------------------------------------------------------------- the chapter's tables and figures
LOCAL_TEST = local("each client's personalized model on a test set drawn with its own label mix")
FIG_METHODS = ["fedfa", "fedpac", "fedproto", "fedmate"]


def balanced_test(scale: str) -> str:
    size = SCALES[scale].global_test or "all"
    return balanced(f"each client's personalized model on the balanced test set ({size} images)")


def _table1_config(row: str, cell, scale: str, seed: int) -> Config:
    ds, s = cell
    return ablation_config(row, ds, s, scale, seed) if row in ABLATION else config(row, ds, scale, s=s, seed=seed)


def table1_grid(scale: str) -> dict:
    sc = SCALES[scale]
    return {(cell, r): [_table1_config(r, cell, scale, seed) for seed in sc.headline_seeds]
            for cell in sc.table1_cells for r in TABLE1 + list(ABLATION)}


def table1_rows(table: dict, scale: str) -> list[dict]:
    """Table 1's rows (the methods, then the ablation) from {(dataset, s): {row: records}} (a cell without records
    reads "-"), the paper beside."""
    rows = []
    for r in TABLE1 + list(ABLATION):
        row: dict[str, Any] = {"method": LABELS.get(r, r)}
        for (ds, s) in SCALES[scale].table1_cells:
            key, name = ANALOGUE[ds]
            row[f"{ds.upper()} s={s}"] = fmt_of(table.get((ds, s), {}).get(r, []), "personal_global_acc")
            row[f"paper {name} s={s}"] = PAPER_T1[r].get((key, s), "-")
        rows.append(row)
    return rows


def recorded_tables(runs: dict, scale: str) -> dict[str, tuple[list[dict], list[dict], str]]:
    """Table 1 from the committed records of its grid ({((dataset, s), row): records}), on the balanced test set."""
    return {"Table 1": (table1_rows(nested(runs), scale), [r for recs in runs.values() for r in recs],
                        balanced_test(scale))}


HYPER_REASONS = {"batch_size": "at 50 a client of 60 images made 2 SGD steps a round and every Table 1 model "
                              "stayed below twice chance; at 10 it makes 6"}


def reference_run(scale: str) -> Config:
    """The run the hyperparameter table reads (the headline table's), at ``scale``."""
    return config("fedmate", "fmnist", scale, s=10)


def protocol(scale: str) -> tuple[list[dict], str]:
    """The evaluation protocol per method: Table 1 reads each client's model on the balanced test set
    (generalization), Table 2 on its local test (adaptation)."""
    from fedlib.studies.settings import protocol_rows

    grid = table2_grid(scale)
    first = {m: next(cfgs[0] for (ds, m_), cfgs in grid.items() if m_ == m) for m in TABLE2}
    return protocol_rows({LABELS[m]: cfg for m, cfg in first.items()},
                         {"Table 1": "personal_global", "Table 2": "personal_local"})


def table2_grid(scale: str) -> dict:
    sc = SCALES[scale]
    return {
        (ds, m): with_seeds(config(m, ds, scale, shards=3), sc.table2_seeds) for ds in sc.table2_datasets
        for m in TABLE2
    }


def repeat_grid(scale: str) -> dict:
    sc = SCALES[scale]
    return {(m, r): with_seeds(config(m, "fmnist", scale, s=50, repeat=r), sc.repeat_seeds)
            for m in REPEAT_METHODS for r in sc.repeat}


def communication_grid(scale: str) -> dict:
    seeds = SCALES[scale].seeds
    return {"with": with_seeds(config("fedmate", "fmnist", scale, s=10, hyper={"cft_x": 0.05}), seeds),
            "without": with_seeds(config("fedmate", "fmnist", scale, s=10, hyper={"cft": False}), seeds)}


CONVERGENCE = ("fedmate", "fedpac")   # the paper's method and its main baseline, run 3x longer at reference scale
CONVERGENCE_METRIC = "personal_global_acc"   # what the convergence check reads (the notebook's convergence section)


def tables(scale: str) -> dict:
    """The recorded grid of every table at ``scale`` (reference or paper), most needed first (``python -m fedlib
    records fedmate [--scale reference]``); at reference scale also the convergence check (Table 1's first cell,
    FedMate and FedPAC at 3x the rounds, seed 0) and FedPAC under its code's readings."""
    out = {"table1": table1_grid(scale), "table2": table2_grid(scale), "repeat": repeat_grid(scale),
           "communication": communication_grid(scale)}
    if scale == "reference":   # the evidence first: it says what the budget can decide
        first, last = SCALES[scale].table1_cells[0], SCALES[scale].table1_cells[-1]
        out = {"convergence": convergence_grid({m: out["table1"][(first, m)] for m in CONVERGENCE}), **out,
               PAC_TABLE: fedpac_readings_grid(scale)}   # a check of the baseline, at reference scale only
        # the comparison that decides Table 1 at 3x the rounds: FedMate and FedPAC at s = 70
        out["table1@3x"] = convergence_grid({(last, m): out["table1"][(last, m)] for m in CONVERGENCE})
    return out


register_chapter(__name__, "FedMate", place=4)
