"""The pFedCSPC chapter's experiments: FMNIST in place of CIFAR-10 (MNIST as a second, easier 10-class
column), the paper's protocol (N = 10, Dirichlet beta = 0.5, C = 1.0, B = 64, SGD lr 0.01 momentum 0.9
weight decay 1e-5, 3 seeds) and its reported numbers.

Paper numbers are transcribed from Meng et al. (IEEE TNNLS 2025), Tables II-VII (../shared/specs/pfedcspc.md,
section 3). The many-class columns (CIFAR-100, Tiny-ImageNet, VireoFood172 on ResNet-18) have no offline
analogue and are not substituted. The page's own smoke runs, plots and readings are ``pfedcspc_pages``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fedlib.claims import Claim, Comparison, Pairs, Read, Row, Sentence, each_above, rounds_to_final_of, versus
from fedlib.experiment import Config, make_config
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

# Table II: global-model methods (their "Local" is the global model fine-tuned on each client, the paper's
# FedAvg row has Local = FedAvg-FT's I_local) and the methods with personalised models
GLOBAL_METHODS = ["fedavg", "moon", "feddc", "fedntd", "fedasam", "fedproc", "feddecorr", "ccvr"]
TABLE2 = GLOBAL_METHODS + ["fedsoup", "grace", "fedetf", "pfedcspc"]
TABLE3 = ["fedavg", "fedavg_ft", "lg_fedavg", "fedperpp", "ditto", "fedfomo", "fedala", "pfedcspc"]
LABELS = method_labels(TABLE2 + ["fedavg_ft", "lg_fedavg", "fedperpp", "ditto", "fedfomo", "fedala", "fedprox"],
                       lg_fedavg="LG-Fed", fedperpp="FedPer++ (assumed form)")
# the authors' code: where the chapter could compare its reading with it (the book's papers table lists it)
OFFICIAL_CODE = ("none; its predecessor FedCSPC: ", "qizhuang-qz/FedCSPC", "https://github.com/qizhuang-qz/FedCSPC")

PAPER_T2: dict[str, Any] = {  # method -> CIFAR-10 (Global, Local, HM)
    "fedavg": (66.78, 64.13, 65.43), "moon": (69.04, 63.49, 66.14), "feddc": (69.13, 63.23, 66.05),
    "fedntd": (68.89, 61.75, 65.12), "fedasam": (68.48, 64.63, 66.50), "fedproc": (69.18, 65.57, 67.32),
    "feddecorr": (68.66, 65.81, 67.20), "ccvr": (68.56, 63.54, 65.95), "fedsoup": (68.74, 66.37, 67.53),
    "grace": (69.21, 67.86, 68.52), "fedetf": (70.84, 68.43, 69.61), "pfedcspc": (70.81, 69.81, 70.31)}
PAPER_T3 = {"fedavg": 63.17, "fedavg_ft": 64.13, "lg_fedavg": 58.92, "fedperpp": 62.82, "ditto": 66.28,
            "fedfomo": 67.78, "fedala": 67.14, "pfedcspc": 69.81}

# Table IV (global ablation, ACC_global): cumulative component sets on top of FedAvg. A row "...+KP" and the
# same row without KP come from one run: the global model predicts with (Eq. 15) and without the knowledge
# prediction (variant "net"). Reading: PMI stays on (it is part of how clients train; the last row is the
# full method, whose number is Table II's).
_OFF = dict(calibrate=False, augment=False, align=False, kp=False, pmi=False)
ABLATION_RUNS: dict[str, dict[str, Any]] = {  # run name -> pFedCSPC switches
    "TPG+CA": dict(prototypes="tpg", calibrate=True, augment=False, align=False, kp=False, pmi=True),
    "CPM+CA": dict(calibrate=True, augment=False, align=False, kp=False, pmi=True),
    "PTA+CPM+CA": dict(calibrate=True, augment=False, align=True, kp=True, pmi=True),
    "TPG+PA+CA": dict(prototypes="tpg", calibrate=True, augment=True, align=False, kp=False, pmi=True),
    "CPM+PA+CA": dict(calibrate=True, augment=True, align=False, kp=True, pmi=True),
    "full": {},
    # Table V's personalisation rows
    "PMI": dict(_OFF, pmi=True),
    "PMI+Align": dict(_OFF, pmi=True, align=True),
    "FedCSPC": dict(calibrate=True, augment=True, align=False, kp=True, pmi=False),
}
# Table IV row -> (run, metric); "fedavg" is the FedAvg run
TABLE4 = {"Base": ("fedavg", "acc_global"), "+TPG+CA": ("TPG+CA", "acc_global"), "+CPM+CA": ("CPM+CA", "acc_global"),
          "+PTA+CPM+CA": ("PTA+CPM+CA", "global_global_acc@net"), "+PTA+CPM+CA+KP": ("PTA+CPM+CA", "acc_global"),
          "+TPG+PA+CA": ("TPG+PA+CA", "acc_global"), "+CPM+PA+CA": ("CPM+PA+CA", "global_global_acc@net"),
          "+PTA+CPM+PA+CA": ("full", "global_global_acc@net"), "+PTA+CPM+PA+CA+KP": ("full", "acc_global")}
PAPER_T4 = {"Base": 66.78, "+TPG+CA": 64.32, "+CPM+CA": 68.89, "+PTA+CPM+CA": 69.51, "+PTA+CPM+CA+KP": 69.94,
            "+TPG+PA+CA": 66.19, "+CPM+PA+CA": 69.66, "+PTA+CPM+PA+CA": 70.42, "+PTA+CPM+PA+CA+KP": 70.81}  # C10, C=1.0
# Table IV's other column: half of the clients a round (C = 0.5), its own runs ({(run, C): configs}, ``half_grid``)
HALF, HALF_TABLE = 0.5, "ablations_half"
PAPER_T4_HALF = {"Base": 65.71, "+TPG+CA": 63.49, "+CPM+CA": 67.66, "+PTA+CPM+CA": 68.14, "+PTA+CPM+CA+KP": 68.69,
                 "+TPG+PA+CA": 64.84, "+CPM+PA+CA": 68.64, "+PTA+CPM+PA+CA": 69.01, "+PTA+CPM+PA+CA+KP": 69.47}
# Table V row -> (run, metric). "FedAvg" and "FedCSPC" are global models on the local tests (no FT); FT_CE is
# local CE training from the global model (FedAvg: evaluation-time fine-tuning; pFedCSPC: its local training);
# PMI starts it from the Eq. 4 mixture; Align adds L_align to it.
TABLE5 = {"FedAvg": ("fedavg", "global_local_i_local"), "+FT_CE": ("fedavg", "i_local"),
          "+PMI+FT_CE": ("PMI", "i_local"), "+PMI+FT_CE+Align": ("PMI+Align", "i_local"),
          "FedCSPC": ("FedCSPC", "global_local_i_local"), "FedCSPC +FT_CE": ("FedCSPC", "i_local"),
          "FedCSPC +PMI+FT_CE": ("CPM+PA+CA", "i_local"), "FedCSPC +PMI+FT_CE+Align": ("full", "i_local")}
PAPER_T5 = {"FedAvg": 63.17, "+FT_CE": 64.31, "+PMI+FT_CE": 65.12, "+PMI+FT_CE+Align": 66.74, "FedCSPC": 65.63,
            "FedCSPC +FT_CE": 66.98, "FedCSPC +PMI+FT_CE": 68.02, "FedCSPC +PMI+FT_CE+Align": 69.81}
PAPER_T6 = {"fedprox": (67.55, 69.46), "moon": (69.04, 71.42), "fedasam": (68.48, 70.65)}  # (alone, +pFedCSPC), C10
TABLE6_BASES = ["fedprox", "moon", "fedasam"]
TABLE7 = ["fedavg", "fedprox", "moon", "feddc", "fedntd", "fedasam", "fedproc", "feddecorr", "ccvr", "pfedcspc"]
PAPER_T7 = {"fedavg": (88, 82), "fedprox": (77, 67), "moon": (54, 32), "feddc": (58, 34), "fedntd": (76, 54),
            "fedasam": (60, 34), "fedproc": (62, 36), "feddecorr": (72, 41), "ccvr": (68, 48), "pfedcspc": (41, 24)}
ANALOGUE = {"fmnist": "CIFAR-10", "mnist": "CIFAR-10 (second column)", "digits": "CIFAR-10 (ci smoke)"}

# Below paper scale the batch is 16 at book scale (at 64 each client made 5 steps a round and FedAvg's global
# model stayed at chance, 9.7%, for 8 rounds at any lr in 0.01-0.1), the learning rate is raised (ci 0.05; book:
# chosen on a held-out split, results/tuning/pfedcspc.json), the server calibration and
# FedETF's local adaptation are shortened, the model is evaluated every other round, and kappa = 0.1 (in the
# paper's tuning set {0.01, 0.05, 0.1, 0.5}): at lr 0.05 the default 0.5 made the loss NaN in round 7.
# The reference scale keeps the paper's protocol (batch 64, lr 0.01, server schedule) at 30 rounds of 2 epochs and a
# quarter of FMNIST (1,500 training images per class): on all of it the grid's first 8 runs took 4.6-8.3 ms per
# local step, about 14 CPU-hours for the 101 runs on this 2-core CPU, against the issue's budget of about 3
# (REFERENCE_REASONS says so in the chapter's settings table).
REFERENCE_REASONS = {"partition": "a quarter of FMNIST's training images (1,500 per class): on all of them the "
                                  "reference grid projected about 14 CPU-hours on the 2-core CPU that records it, "
                                  "against a budget of about 3; rounds and epochs alone were already cut to 6% of "
                                  "the paper's steps",
                     "hyper": "the server calibration shortened with the rounds (20 of the paper schedule's 100 "
                              "epochs)"}

@dataclass(frozen=True, kw_only=True)
class CspcBudget(Budget):
    """This chapter's budget at one scale (``SCALES``)."""
    datasets: list[str]
    clients: int
    per_class: int | None
    epochs: int
    lr: float
    batch: int
    eval_every: int
    headline_seeds: list[int]
    main_seeds: list[int]
    sweep_seeds: list[int]
    server_epochs: int
    etf_rounds: int
    kappa: float | None
    global_test: int | None
    fig6: list[tuple[int, int]]
    clusters: list[int]
    betas: list[float]
    model: str


SCALES = Scales(
    ci=CspcBudget(datasets=["digits"], clients=6, per_class=None, rounds=2, epochs=1, lr=0.05, batch=64, eval_every=1,
                  seeds=[0], headline_seeds=[0], main_seeds=[0], sweep_seeds=[0], server_epochs=2, etf_rounds=1,
                  kappa=None, global_test=None, fig6=[(1, 5)], clusters=[1], betas=[0.5], model="cnn_cspc"),
    book=CspcBudget(datasets=["fmnist"], clients=10, per_class=300, rounds=8, epochs=1, lr=0.03, batch=16, eval_every=2,
                    seeds=[0], headline_seeds=[0, 1, 2], main_seeds=[0], sweep_seeds=[0], server_epochs=5, etf_rounds=2,
                    kappa=0.1, global_test=2000, fig6=[(1, 5), (5, 1)], clusters=[1], betas=[0.5], model="cnn_cspc"),
    # seeds 3 and 4 of Table II and the ablations were added after their 3-seed verdicts (HM, Global, CPM, the
    # chain of Table IV) came out inconclusive with every seed's margin of one sign; those of Tables III and VI-VII
    # after theirs came out inconclusive, Table III's with every seed's margin of one sign (``claims.assess``: a
    # second look)
    reference=CspcBudget(datasets=["fmnist"], clients=10, per_class=1500, rounds=30, epochs=2, lr=0.01, batch=64,
                         eval_every=3, seeds=[0, 1, 2, 3, 4], headline_seeds=[0, 1, 2, 3, 4],
                         main_seeds=[0, 1, 2, 3, 4], sweep_seeds=[0, 1, 2], server_epochs=20, etf_rounds=6, kappa=None,
                         global_test=None, fig6=[(1, 1), (5, 1)], clusters=[1, 3], betas=[0.1, 0.5], model="cnn_cspc"),
    paper=CspcBudget(datasets=["fmnist", "mnist"], clients=10, per_class=None, rounds=100, epochs=10, lr=0.01, batch=64,
                     eval_every=1, seeds=[0, 1, 2], headline_seeds=[0, 1, 2], main_seeds=[0, 1, 2],
                     sweep_seeds=[0, 1, 2], server_epochs=100, etf_rounds=20, kappa=None, global_test=None,
                     fig6=[(r, a) for r in (1, 5) for a in (1, 2, 4, 8)], clusters=[1, 3, 5], betas=[0.1, 0.5],
                     model="cnn_cspc"),
)


# the book's learning rate is chosen with this run (``python -m fedlib tune pfedcspc``)
TUNING = dict(method="fedavg", args=dict(dataset="fmnist"), metric="acc_global")


def scale_summary(scale: str) -> str:
    """What the chapter trains at ``scale`` next to what the paper trains (printed by the notebook's set-up)."""
    sc = SCALES[scale]
    return "\n".join([
        f"scale {scale}: datasets {sc.datasets}, {sc.clients} clients, at most {sc.per_class or 'all'} "
        f"training images per class, {sc.rounds} rounds of {sc.epochs} local epochs at lr {sc.lr}, evaluated "
        f"every {sc.eval_every} rounds, server calibration "
        f"{sc.server_epochs} epochs, seeds {sc.headline_seeds} (Table II), "
        f"{sc.main_seeds} (Tables III, VI, VII), "
        f"{sc.seeds} (ablations), {sc.sweep_seeds} (Fig. 6, clusters)",
        "paper: 10 clients, all of CIFAR-10, 100 rounds of 10 epochs, batch 64, SGD, 3 trials; server schedule of "
        "FedCSPC's code (100 epochs)",
    ])


def config(method: str, dataset: str, scale: str, seed: int = 0, hyper: dict | None = None, beta: float = 0.5,
           finetune: bool | None = None, fraction: float = 1.0) -> Config:
    """Section V-A: N = 10 clients, Dirichlet beta over labels, B = 64, SGD lr 0.01 (at paper scale) momentum 0.9 weight
    decay 1e-5 (MOON's, which the paper follows), E local epochs, local test sets with each client's label mix.
    ``finetune`` (default: for the global-model methods of Table II) evaluates each client's "Local" after
    one epoch of CE fine-tuning of the global model."""
    sc = SCALES[scale]
    part = {"name": "dirichlet", "alpha": beta, "min_size": 10}
    if sc.per_class:
        part["per_class"] = sc.per_class
    kappa = {"kappa": sc.kappa} if sc.kappa is not None else {}
    own: dict[str, dict] = {"pfedcspc": {"server_epochs": sc.server_epochs, **kappa},
                            "fedetf": {"finetune_rounds": sc.etf_rounds}}
    hp = {**own.get(method, {}), **(hyper or {})}
    if finetune is None:
        finetune = method in GLOBAL_METHODS + ["fedprox"]
    return make_config(
        method=method,
        dataset=dataset,
        partition=part,
        num_clients=sc.clients,
        fraction=fraction,
        rounds=sc.rounds,
        local_epochs=sc.epochs,
        batch_size=sc.batch,
        lr=sc.lr,
        momentum=0.9,
        weight_decay=1e-5,
        model=sc.model,
        hyper=hp,
        seed=seed,
        metrics=["generalization"],
        eval_every=sc.eval_every,
        global_test_size=sc.global_test,
        eval_finetune_epochs=1 if finetune else 0,
    )


def ablation_config(run: str, dataset: str, scale: str, seed: int = 0, **kw) -> Config:
    if run == "fedavg":
        return config("fedavg", dataset, scale, seed=seed, **kw)
    return config("pfedcspc", dataset, scale, seed=seed, hyper=dict(ABLATION_RUNS[run]), **kw)


def target_accuracy(fedavg_records: list[dict]) -> float:
    """Table VII's target read from FedAvg: its final ACC_global (mean over seeds) rounded down to 0.5 points."""
    import math

    mean = mean_std(fedavg_records, "acc_global")[0]
    return math.floor(200 * mean) / 200


TARGET_SETTER = "fedavg"   # Table VII's target is FedAvg's final accuracy: FedAvg sets it and is not compared


# Table VII per seed: the first evaluated round at which a global model reaches that seed's FedAvg final ACC_global
# rounded down to 0.5 points; one evaluation past the last round where it never does
ROUNDS_TO_TARGET = rounds_to_final_of("table7", TARGET_SETTER, "acc_global", "rounds to FedAvg's final accuracy")
PERSONALIZED = [m for m in TABLE3 if m not in ("fedavg", "pfedcspc")]   # Table III's personalized-FL baselines
# Table III's FedAvg row: FedAvg's global model on the clients' local tests (Table V's "FedAvg" row, the same run)
FEDAVG_GLOBAL = Row("fedavg", "FedAvg (its global model)", metric="global_local_i_local", table="table2")


VIEW_SOURCES = {"table7": ("table2", "table6")}   # the view made only of other tables' runs


def views(evidence: dict, scale: str) -> dict:
    """The tables that reuse Table II's runs, made of them (the paper's rows read on the same runs):
    Table III adds FedAvg-FT and pFedCSPC from Table II; the ablations add FedAvg and the full method (Table II,
    first dataset); Table VII reads Table II's global-model methods and Table VI's FedProx."""
    t2 = evidence.get("table2", {})
    out = dict(evidence)
    if t2:
        ds = SCALES[scale].datasets[0]
        table3 = dict(evidence.get("table3", {}))
        for (d, m), recs in t2.items():   # FedAvg-FT is the FedAvg run read on its fine-tuned models
            if m in ("fedavg", "pfedcspc"):
                table3[(d, "fedavg_ft" if m == "fedavg" else m)] = recs
        out["table3"] = table3
        if (ds, "fedavg") in t2 and (ds, "pfedcspc") in t2:
            out["ablations"] = {**evidence.get("ablations", {}), "fedavg": t2[(ds, "fedavg")],
                                "full": t2[(ds, "pfedcspc")]}
        t6 = evidence.get("table6", {})
        table7 = {m: t2.get((ds, m)) or t6.get(m) for m in TABLE7}
        out["table7"] = {m: recs for m, recs in table7.items() if recs is not None}
    return out


def _rows(table: dict, names) -> tuple[Row, ...]:
    """Rows of Table IV or V ({row: (run, metric)}) as the ablation view's cells, each with its own metric."""
    return tuple(Row(table[name][0], name, table[name][1]) for name in names)


CHAIN4 = ("Base", "+CPM+CA", "+PTA+CPM+CA", "+PTA+CPM+PA+CA", "+PTA+CPM+PA+CA+KP")
FEDAVG_CHAIN = ("+FT_CE", "+PMI+FT_CE", "+PMI+FT_CE+Align")
CSPC_CHAIN = ("FedCSPC +FT_CE", "FedCSPC +PMI+FT_CE", "FedCSPC +PMI+FT_CE+Align")
T2_NAMES = ("{}", "")   # Table II's key: (dataset, method)


def _steps(table: dict, chain_rows) -> tuple[tuple[Row, Row], ...]:
    rows_ = _rows(table, chain_rows)
    return tuple(zip(rows_[1:], rows_[:-1]))


def _versus(table: dict, upper: str, lower: str) -> tuple[Row, Row]:
    return _rows(table, (upper,))[0], _rows(table, (lower,))[0]


def _at_half(pairs) -> Pairs:
    """The same pairs of Table IV's rows in its C = 0.5 column (``HALF_TABLE``, cells (run, C))."""
    return Pairs(HALF_TABLE, pairs, "acc_global", slot=0, names=("", "C = {}"))


CPM_PAIRS = (_versus(TABLE4, "+CPM+CA", "+TPG+CA"), _versus(TABLE4, "+CPM+PA+CA", "+TPG+PA+CA"))


def _cpm_gap(paper: dict) -> float:
    return min(paper["+CPM+CA"] - paper["+TPG+CA"], paper["+CPM+PA+CA"] - paper["+TPG+PA+CA"])


def _paper_steps(paper: dict, chain_rows) -> float:
    return round(min(paper[b] - paper[a] for a, b in zip(chain_rows, chain_rows[1:])), 2)


def _fig6_row(n_repeat: int, n_aug: int) -> Row:
    return Row((n_repeat, n_aug), f"n_repeat {n_repeat}, n_aug {n_aug}")


# Fig. 6's grid n_repeat in {1, 5} x n_aug in {1, 2, 4, 8}: each step to more prototypes (a scale lacking a cell
# has no such comparison)
FIG6_STEPS = (tuple((_fig6_row(5, a), _fig6_row(1, a)) for a in (1, 2, 4, 8))
              + tuple((_fig6_row(r, 2 * a), _fig6_row(r, a)) for r in (1, 5) for a in (1, 2, 4)))

BEST_WORDS = ("pFedCSPC achieves the best results in most metrics, which can balance global generalization and local "
              "personalization")
CLAIMS = (
    Claim("best_hm", "pFedCSPC has the best balance of generalization and personalization (Table II, HM)", BEST_WORDS,
          "Section IV-B, Table II",
          (versus("table2", "pfedcspc", [m for m in TABLE2 if m != "pfedcspc"], "hm", slot=1, names=T2_NAMES),),
          "CIFAR-10 HM 70.31 vs FedETF 69.61, GRACE 68.52",
          round(PAPER_T2["pfedcspc"][2] - max(v[2] for m, v in PAPER_T2.items() if m != "pfedcspc"), 2), 0.25,
          "a quarter point: the paper's lead over FedETF is 0.70",
          reading="pFedCSPC's HM above each of Table II's eleven other methods"),
    Claim("global_near_best", "pFedCSPC's global model is (near) the best (Table II, Global)", BEST_WORDS,
          "Section IV-B, Table II",
          (versus("table2", "pfedcspc", [m for m in TABLE2 if m != "pfedcspc"], "acc_global", slot=1,
                  names=T2_NAMES, test="noninferior"),),
          "CIFAR-10 70.81, FedETF 70.84 the only higher",
          round(PAPER_T2["pfedcspc"][0] - max(v[0] for m, v in PAPER_T2.items() if m != "pfedcspc"), 2), 0.5,
          "'near the best': within half a point (the paper's own gap to FedETF is 0.03)",
          reading="pFedCSPC's global accuracy not below any other Table II method by more than delta"),
    Claim("calibration_beats_fedavg", "calibration (CCVR, pFedCSPC) gives a better global model than FedAvg "
          "(Table II, Global)", "Incorporating calibration techniques into the learning process typically yields "
          "better global generalization than the baseline method", "Section IV-B (2), Table II",
          (each_above("table2", ["ccvr", "pfedcspc"], ["fedavg"], "acc_global", slot=1, names=T2_NAMES),),
          "CIFAR-10 Global: CCVR 68.56, pFedCSPC 70.81, FedAvg 66.78",
          round(min(PAPER_T2[m][0] for m in ("ccvr", "pfedcspc")) - PAPER_T2["fedavg"][0], 2), 0.5,
          "half a point of global accuracy", reading="CCVR and pFedCSPC each above FedAvg on the global model"),
    Claim("personalizes_best", "pFedCSPC personalizes best among the personalized-FL baselines (Table III, I_local)",
          "pFedCSPC consistently outperforms other methods in personalized tasks", "Section IV-B (5), Table III",
          (versus("table3", "pfedcspc", PERSONALIZED, "i_local", slot=1, names=T2_NAMES),),
          "CIFAR-10 69.81 vs FedFomo 67.78, FedALA 67.14",
          round(PAPER_T3["pfedcspc"] - max(v for m, v in PAPER_T3.items() if m in PERSONALIZED), 2), 0.5,
          "half a point of I_local; the paper's lead over FedFomo is 2.03",
          reading="pFedCSPC's I_local above each of Table III's six personalized baselines"),
    Claim("global_model_not_most_suitable", "one global model (FedAvg) is not the best personalized model: the best "
          "of Table III's personalized methods is above it (Table III)",
          "Due to the issue of data heterogeneity, focusing on optimizing a global model may not yield the most "
          "suitable model for personalized tasks", "Section IV-B (3), Table III",
          (Pairs("table3", tuple((Row(m), FEDAVG_GLOBAL) for m in TABLE3 if m != "fedavg"), "i_local", slot=1,
                 names=T2_NAMES),),
          "CIFAR-10 I_local: FedAvg 63.17; pFedCSPC 69.81, FedFomo 67.78, FedALA 67.14, Ditto 66.28",
          round(max(v for m, v in PAPER_T3.items() if m != "fedavg") - PAPER_T3["fedavg"], 2), 0.5,
          "half a point of I_local, as for the other Table III claims",
          kind="best", reading="'may not yield the most suitable model' read as: FedAvg's global model is not the "
                               "best on the clients' own tests; the best of Table III's seven other methods above "
                               "FedAvg in every cell (kind best: Bonferroni over the seven)"),
    Claim("finetuning_beats_decoupling", "fine-tuning or retraining beats network decoupling (Table III)",
          "Fine-tuning or retraining additional models tends to outperform network decoupling methods",
          "Section IV-B (7), Table III",
          (each_above("table3", ["fedavg_ft", "ditto"], ["lg_fedavg", "fedperpp"], "i_local", slot=1,
                      names=T2_NAMES),),
          "CIFAR-10 I_local: FedAvg-FT 64.13, Ditto 66.28 vs LG-Fed 58.92, FedPer++ 62.82",
          round(min(PAPER_T3[m] for m in ("fedavg_ft", "ditto")) - max(PAPER_T3[m] for m in ("lg_fedavg",
                                                                                          "fedperpp")), 2), 0.5,
          "half a point of I_local",
          reading="each of FedAvg-FT and Ditto above each of LG-Fed and FedPer++ (the assumed form)"),
    Claim("cpm_beats_tpg", "clustered prototypes beat one prototype per class (Table IV, CPM vs TPG)",
          "Simply combining the traditional prototype generation method (TPG) with the cross-client CA may not bring "
          "performance gains, mainly because a single prototype cannot fit the overall distribution",
          "Section IV-C, Table IV",
          (Pairs("ablations", CPM_PAIRS, "acc_global"), _at_half(CPM_PAIRS)),
          "C = 1.0: +CPM+CA 68.89 vs +TPG+CA 64.32; +CPM+PA+CA 69.66 vs +TPG+PA+CA 66.19; C = 0.5: 67.66 vs 63.49; "
          "68.64 vs 64.84", round(min(_cpm_gap(PAPER_T4), _cpm_gap(PAPER_T4_HALF)), 2),
          0.5, "half a point of global accuracy; the paper's gaps are 3.5-4.6",
          reading="each CPM row above the TPG row with the same other components, in both of Table IV's columns "
                  "(every client a round, C = 1.0, and half of them, C = 0.5)"),
    Claim("global_components_add", "every global component adds accuracy: Base < +CPM+CA < +PTA < +PA < +KP (Table IV)",
          "In general, using personalized task adaptation (PTA) and PA can further yield superior performance",
          "Section IV-C, Table IV",
          (Pairs("ablations", _steps(TABLE4, CHAIN4), "acc_global"), _at_half(_steps(TABLE4, CHAIN4))),
          "66.78 < 68.89 < 69.51 < 70.42 < 70.81 (C = 1.0); 65.71 < 67.66 < 68.14 < 69.01 < 69.47 (C = 0.5)",
          min(_paper_steps(PAPER_T4, CHAIN4), _paper_steps(PAPER_T4_HALF, CHAIN4)), 0.1,
          "a tenth of a point: the paper's smallest step (+KP) is 0.39",
          reading="each row of the chain above the one before it, in both of Table IV's columns (C = 1.0 and 0.5)"),
    Claim("ft_and_generalization_help", "fine-tuning, and a better global model, each help personalization "
          "(Table V)", "1) Simple fine-tuning (FT_CE) can bring performance gains to personalized tasks. [...] 2) "
          "Improving the generalization ability of the global model is beneficial for accomplishing personalized "
          "tasks (see line FedCSPC and FedAvg)", "Section IV-C, Table V",
          (Pairs("ablations", (_versus(TABLE5, "+FT_CE", "FedAvg"), _versus(TABLE5, "FedCSPC", "FedAvg")), "i_local"),),
          "FedAvg 63.17 -> +FT_CE 64.31; FedCSPC 65.63",
          round(min(PAPER_T5["+FT_CE"], PAPER_T5["FedCSPC"]) - PAPER_T5["FedAvg"], 2), 0.25,
          "a quarter point of I_local: the paper's smaller gain is 1.14",
          reading="FedAvg's model fine-tuned above FedAvg's global model, and FedCSPC's global model above FedAvg's, "
                  "on the clients' local tests"),
    Claim("pmi_align_help", "PMI and Align each improve personalization, on FedAvg and on FedCSPC (Table V)",
          "PMI method can provide benefits by initializing client-specific model that is more conducive to "
          "personalized task. Prototype-guided feature learning (Align) further enhances the performance of the model "
          "on personalized tasks", "Section IV-C, Table V",
          (Pairs("ablations", _steps(TABLE5, FEDAVG_CHAIN) + _steps(TABLE5, CSPC_CHAIN), "i_local"),),
          "FedAvg 64.31 -> 65.12 -> 66.74; FedCSPC 66.98 -> 68.02 -> 69.81",
          min(_paper_steps(PAPER_T5, FEDAVG_CHAIN), _paper_steps(PAPER_T5, CSPC_CHAIN)), 0.25,
          "a quarter point of I_local: the paper's smallest step is 0.81",
          reading="each step of either chain above the one before it"),
    Claim("improves_other_objectives", "pFedCSPC improves the global model of other local objectives (Table VI)",
          "Overall, existing FL methods combined with pFedCSPC have demonstrated substantial improvements in "
          "classification compared to their corresponding baselines", "Section IV-D (3), Table VI",
          (Pairs("table6", tuple((Row(f"+{b}", f"{LABELS.get(b, b)} + pFedCSPC"), Row(b)) for b in TABLE6_BASES),
                 "acc_global"),),
          "CIFAR-10: FedProx +1.91, MOON +2.38, FedASAM +2.17",
          round(min(with_ - alone for alone, with_ in PAPER_T6.values()), 2), 0.5,
          "'substantial improvements': half a point at least (the paper's are about 2)",
          reading="each base objective's global accuracy higher with pFedCSPC than alone"),
    Claim("more_prototypes_generalize", "more generated class-aware prototypes give a better global model (Fig. 6)",
          "In general, generating more class-aware prototypes leads to higher generalization score",
          "Section IV-D (1), Fig. 6", (Pairs("sweeps", FIG6_STEPS, "acc_global"),),
          "CIFAR-10 Fig. 6 bars (no numbers printed)", None, 0.25,
          "a quarter point of global accuracy: the step from one setting to the next", kind="most",
          reading="a step to more prototypes (n_repeat 1 to 5 at each n_aug; n_aug doubled at each n_repeat) raises "
                  "global accuracy in most of the steps the scale records ('in general')"),
    Claim("moon_best_combined", "MOON + pFedCSPC is the best of the three combined objectives (Table VI, CIFAR-10)",
          "MOON and FedASAM have achieved the best performance on the CIFAR10 and TinyImagenet datasets, respectively",
          "Section IV-D (3), Table VI",
          (Pairs("table6", tuple((Row("+moon", "MOON + pFedCSPC"), Row(f"+{b}", f"{LABELS.get(b, b)} + pFedCSPC"))
                                 for b in TABLE6_BASES if b != "moon"), "acc_global"),),
          "CIFAR-10: MOON + pFedCSPC 71.42, FedASAM + pFedCSPC 70.65, FedProx + pFedCSPC 69.46",
          round(PAPER_T6["moon"][1] - max(v[1] for b, v in PAPER_T6.items() if b != "moon"), 2), 0.25,
          "a quarter point of global accuracy (the paper's lead over FedASAM is 0.77)",
          reading="MOON + pFedCSPC's global accuracy above FedProx + pFedCSPC's and FedASAM + pFedCSPC's (the "
                  "CIFAR-10 half of the sentence; TinyImagenet is not available offline)"),
    Claim("fewest_rounds", "pFedCSPC reaches the target accuracy in the fewest rounds (Table VII)",
          "We can observe that the number of communication rounds is significantly reduced in pFedCSPC",
          "Section IV-D (4), Table VII",
          (Pairs("table7", tuple((Row(m), Row("pfedcspc")) for m in TABLE7 if m not in ("pfedcspc", TARGET_SETTER)),
                 ROUNDS_TO_TARGET),),
          "CIFAR-10 beta 0.5: 24 rounds vs MOON 32, FedDC / FedASAM 34, FedAvg 82",
          float(min(v[1] for m, v in PAPER_T7.items() if m not in ("pfedcspc", TARGET_SETTER))
                - PAPER_T7["pfedcspc"][1]),
          1.0, "a round", unit="rounds",
          reading="each other method needs more rounds than pFedCSPC to reach FedAvg's final accuracy (that seed's; "
                  "FedAvg sets the target and is compared in the next claim)"),
    Claim("third_of_fedavg_rounds", "pFedCSPC reaches FedAvg's accuracy in less than a third of FedAvg's rounds "
          "(Table VII)", "Notably, pFedCSPC achieves the same test Acc with less than one-third of the number of "
          "communication rounds required by FedAvg", "Section IV-D (4), Table VII",
          (Comparison("FedAvg's rounds − 3 x pFedCSPC's", (Read("table7", TARGET_SETTER, ROUNDS_TO_TARGET, "FedAvg"),),
                      (Read("table7", "pfedcspc", ROUNDS_TO_TARGET, "pFedCSPC"),) * 3),),
          "CIFAR-10 beta 0.5: pFedCSPC 24 rounds, FedAvg 82",
          float(PAPER_T7[TARGET_SETTER][1] - 3 * PAPER_T7["pfedcspc"][1]), 1.0, "a round", unit="rounds",
          reading="FedAvg's rounds to its own final accuracy (that seed's, rounded down to half a point) more than "
                  "three times pFedCSPC's rounds to it"),
)
TABLE_RUNS = {"table2": "Table II's global-model methods on each dataset of the scale",
              "table3": "Table III's personalized baselines (FedAvg-FT and pFedCSPC from Table II)",
              "ablations": "pFedCSPC with components switched off (FedAvg and the full method from Table II)",
              HALF_TABLE: "Table IV's runs (FedAvg, the component sets, the full method) with half of the clients a "
                          "round (C = 0.5)",
              "table6": "FedProx, MOON and FedASAM alone and under pFedCSPC",
              "table7": "Table II's global-model methods and Table VI's FedProx, rounds to FedAvg's final accuracy",
              "sweeps": "pFedCSPC at Fig. 6's n_repeat x n_aug settings the scale records, and at other numbers of "
                        "clusters j"}

INVENTORY = (
    Sentence("pFedCSPC achieves the best results in most metrics, which can balance global generalization and local "
             "personalization", "IV-B, Table II", claim="best_hm"),
    Sentence("pFedCSPC achieves the best results in most metrics [Global]", "IV-B, Table II", claim="global_near_best"),
    Sentence("2) Incorporating calibration techniques into the learning process typically yields better global "
             "generalization than the baseline method [...] such as CCVR and pFedCSPC", "IV-B, Table II",
             claim="calibration_beats_fedavg"),
    Sentence("focusing on optimizing a global model may not yield the most suitable model for personalized tasks",
             "IV-B, Tables II-III", claim="global_model_not_most_suitable"),
    Sentence("4) the improvement achieved by combining pFedCSPC is significant compared to the baseline on CIFAR10, "
             "while it is relatively small on other datasets", "IV-B", offline="the paper's other datasets are not "
                                                                               "available offline"),
    Sentence("5) pFedCSPC consistently outperforms other methods in personalized tasks", "IV-B, Table III",
             claim="personalizes_best"),
    Sentence("6) With increasing difficulty of classification tasks, FedAvg with fine-tuning demonstrates stronger "
             "advantages", "IV-B, Table III", offline="needs tasks of graded difficulty (CIFAR-100, TinyImagenet, "
                                                      "VireoFood172), not available offline"),
    Sentence("7) Fine-tuning or retraining additional models tends to outperform network decoupling methods",
             "IV-B, Table III", claim="finetuning_beats_decoupling"),
    Sentence("Simply combining the traditional prototype generation method (TPG) with the cross-client CA may not "
             "bring performance gains", "IV-C, Table IV", claim="cpm_beats_tpg"),
    Sentence("2) Cross-client CA with the assistance of the CPM outperforms the base [...] 3) using personalized task "
             "adaptation (PTA) and PA can further yield superior performance", "IV-C, Table IV",
             claim="global_components_add"),
    Sentence("4) KP demonstrates greater efficacy on the CIFAR10 dataset compared to the CIFAR100 dataset", "IV-C, "
             "Table IV", offline="CIFAR-100 is not available offline"),
    Sentence("3) PMI method can provide benefits [...] 4) Prototype-guided feature learning (Align) further enhances "
             "the performance of the model on personalized tasks", "IV-C, Table V", claim="pmi_align_help"),
    Sentence("1) Simple fine-tuning (FT_CE) can bring performance gains to personalized tasks. 2) Improving the "
             "generalization ability of the global model is beneficial for accomplishing personalized tasks",
             "IV-C, Table V", claim="ft_and_generalization_help"),
    Sentence("In general, generating more class-aware prototypes leads to higher generalization score", "IV-D1, Fig. 6",
             claim="more_prototypes_generalize"),
    Sentence("existing FL methods combined with pFedCSPC have demonstrated substantial improvements in classification "
             "compared to their corresponding baselines", "IV-D3, Table VI", claim="improves_other_objectives"),
    Sentence("MOON and FedASAM have achieved the best performance on the CIFAR10 and TinyImagenet datasets, "
             "respectively", "IV-D3, Table VI", claim="moon_best_combined"),
    Sentence("the number of communication rounds is significantly reduced in pFedCSPC", "IV-D4, Table VII",
             claim="fewest_rounds"),
    Sentence("pFedCSPC achieves the same test Acc with less than one-third of the number of communication rounds "
             "required by FedAvg", "IV-D4, Table VII", claim="third_of_fedavg_rounds"),
)


# ---------------------------------------------------------------------- the chapter's tables and figures
GLOBAL = balanced("Global (ACC_global): the global model on the balanced test set")
LOCAL = local("Local (I_local, Eq. 20): each client's model on a test set drawn with its own label mix, harmonic mean "
              "of accuracy and macro-F1; the floor is its accuracy part's")


def with_seed_in(records: list[dict], seeds) -> list[dict]:
    """The records of ``seeds`` only (tables that reuse Table II's runs compare methods on the same seeds)."""
    return [r for r in records if r["seed"] in seeds]


HYPER_REASONS = {"batch_size": "at 64 a client made 5 SGD steps a round and FedAvg's global model stayed at chance "
                              "(9.7%) for 8 rounds at any lr in 0.01-0.1; at 16 it makes about 19",
                 "hyper": "the server calibration shortened with the rounds (5 epochs: the book's budget); kappa 0.1, "
                          "from the paper's tuning set {0.01, 0.05, 0.1, 0.5}: the default 0.5 made the loss NaN in "
                          "round 7 at lr 0.05"}


def reference_run(scale: str) -> Config:
    """The run the hyperparameter table reads (the headline table's), at ``scale``."""
    return config("pfedcspc", SCALES[scale].datasets[0], scale)


def protocol(scale: str) -> tuple[list[dict], str]:
    """The evaluation protocol per method (Section V-A): Global reads the global model on the balanced test,
    Local (I_local) each client's model on its local test; the global-model methods are fine-tuned for one
    epoch before Local, as the paper's Table II does."""
    from fedlib.studies.settings import protocol_rows

    ds = SCALES[scale].datasets[0]
    methods = list(dict.fromkeys(TABLE2 + TABLE3))
    return protocol_rows({LABELS[m]: config(m, ds, scale) for m in methods},
                         {"Global": "global_global", "Local": "personal_local"})


def table2_grid(scale: str) -> dict:
    sc = SCALES[scale]
    return {(ds, m): with_seeds(config(m, ds, scale), sc.headline_seeds) for ds in sc.datasets for m in TABLE2}


def table2_rows(table: dict, scale: str) -> list[dict]:
    """Table II's rows from {dataset: {method: records}} (a cell without records reads "-"), the paper beside."""
    rows = []
    for m in TABLE2:
        row: dict[str, Any] = {"method": LABELS[m]}
        for ds in SCALES[scale].datasets:
            for metric, name in (("acc_global", "Global"), ("i_local", "Local"), ("hm", "HM")):
                row[f"{ds.upper()} {name}"] = fmt_of(table.get(ds, {}).get(m, []), metric)
        row.update({f"paper C10 {n}": v for n, v in zip(("Global", "Local", "HM"), PAPER_T2[m])})
        rows.append(row)
    return rows


def recorded_tables(runs: dict, scale: str) -> dict[str, tuple[list[dict], list[dict], str]]:
    """Table II from the committed records of its grid ({(dataset, method): records}), on its two test sets."""
    return {"Table II": (table2_rows(nested(runs), scale), [r for recs in runs.values() for r in recs],
                         GLOBAL + "; " + LOCAL)}


def table3_grid(scale: str) -> dict:
    """Table III's runs that Table II has not (FedAvg, FedAvg-FT and pFedCSPC come from Table II)."""
    sc = SCALES[scale]
    return {(ds, m): with_seeds(config(m, ds, scale), sc.main_seeds) for ds in sc.datasets
            for m in TABLE3 if m not in ("fedavg", "fedavg_ft", "pfedcspc")}


def ablations_grid(scale: str) -> dict:
    """Tables IV and V's runs that Table II has not (FedAvg and the full method)."""
    sc = SCALES[scale]
    ds, seeds = sc.datasets[0], sc.seeds
    return {name: with_seeds(ablation_config(name, ds, scale), seeds) for name in ABLATION_RUNS if name != "full"}


def half_grid(scale: str) -> dict:
    """Table IV's runs at half participation, C = 0.5: {(run, C): configs over three seeds (the claims' planned
    ones at reference and paper scale)}, FedAvg and the full method included."""
    sc = SCALES[scale]
    runs = dict.fromkeys(run for run, _ in TABLE4.values())   # FedAvg first, then the component sets, the full method
    return {(run, HALF): with_seeds(ablation_config(run, sc.datasets[0], scale, fraction=HALF), sc.sweep_seeds)
            for run in runs}


def table6_grid(scale: str) -> dict:
    """Every base objective alone (b) and under pFedCSPC (+b); Table VI reads the alone runs Table II has from it."""
    sc = SCALES[scale]
    ds, seeds = sc.datasets[0], sc.main_seeds
    grid = {b: with_seeds(config(b, ds, scale), seeds) for b in TABLE6_BASES}
    grid.update({f"+{b}": with_seeds(config("pfedcspc", ds, scale, hyper={"base": b}), seeds) for b in TABLE6_BASES})
    return grid


def sweeps_grid(scale: str) -> dict:
    sc = SCALES[scale]
    ds, seeds = sc.datasets[0], sc.sweep_seeds
    grid: dict[tuple, list[Config]] = {
        (r, a): with_seeds(config("pfedcspc", ds, scale, hyper={"repeats": r, "n_aug": a}), seeds)
        for r, a in sc.fig6
    }
    grid.update({("clusters", j): with_seeds(config("pfedcspc", ds, scale, hyper={"clusters": j}), seeds)
                 for j in sc.clusters})
    return grid


# which recorded table decides each claim of ``verdicts`` (in its order), and what cannot be checked offline
CONVERGENCE = ("pfedcspc", "fedavg")   # the paper's method and its main baseline, run 3x longer at reference scale
CONVERGENCE_METRIC = "acc_global"   # what the convergence check reads (the notebook's convergence section)


def tables(scale: str) -> dict:
    """The recorded grid of every table at ``scale`` (reference or paper), most needed first (``python -m fedlib
    records pfedcspc [--scale reference]``); at reference scale also the convergence check (Table II's first
    dataset, pFedCSPC and FedAvg at 3x the rounds, seed 0)."""
    out = {"table2": table2_grid(scale), "table3": table3_grid(scale), "ablations": ablations_grid(scale),
           "table6": table6_grid(scale), "sweeps": sweeps_grid(scale), HALF_TABLE: half_grid(scale)}
    if scale == "reference":   # the evidence first: it says what the budget can decide
        grid = table2_grid(scale)
        ds = SCALES[scale].datasets[0]
        out = {"convergence": convergence_grid({m: grid[(ds, m)] for m in CONVERGENCE}), **out}
        # the comparisons that decide Tables II and V at 3x the rounds (pFedCSPC and FedAvg: the convergence runs)
        out["table2@3x"] = convergence_grid({(ds, m): grid[(ds, m)] for m in ("pfedcspc", "fedetf", "fedavg")})
        out["ablations@3x"] = convergence_grid({r: out["ablations"][r] for r in ("PMI", "PMI+Align")})
    return out


register_chapter(__name__, "pFedCSPC", place=5)
