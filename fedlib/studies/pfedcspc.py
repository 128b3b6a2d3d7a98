"""The pFedCSPC chapter's experiments: FMNIST in place of CIFAR-10 (MNIST as a second, easier 10-class
column), the paper's protocol (N = 10, Dirichlet beta = 0.5, C = 1.0, B = 64, SGD lr 0.01 momentum 0.9
weight decay 1e-5, 3 seeds) and its reported numbers.

Paper numbers are transcribed from Meng et al. (IEEE TNNLS 2025), Tables II-VII (../shared/specs/pfedcspc.md,
section 3). The many-class columns (CIFAR-100, Tiny-ImageNet, VireoFood172 on ResNet-18) have no offline
analogue and are not substituted.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedlib.experiment import Config, make_config
from fedlib.plots import chance_line, floor_line
from fedlib.studies.common import (  # noqa: F401  (the chapter uses them)
    RUNTIME,
    Claim,
    fmt,
    mean_std,
    method_labels,
    nested,
    run_all,
    run_grid,
    set_runtime,
    with_seeds,
)
from fedlib.studies.grid import Scales, convergence_grid
from fedlib.studies.registry import register_chapter
from fedlib.studies.report import balanced, fmt_of, local, majority_floor

# Table II: global-model methods (their "Local" is the global model fine-tuned on each client, the paper's
# FedAvg row has Local = FedAvg-FT's I_local) and the methods with personalised models
GLOBAL_METHODS = ["fedavg", "moon", "feddc", "fedntd", "fedasam", "fedproc", "feddecorr", "ccvr"]
TABLE2 = GLOBAL_METHODS + ["fedsoup", "grace", "fedetf", "pfedcspc"]
TABLE3 = ["fedavg", "fedavg_ft", "lg_fedavg", "fedperpp", "ditto", "fedfomo", "fedala", "pfedcspc"]
LABELS = method_labels(TABLE2 + ["fedavg_ft", "lg_fedavg", "fedperpp", "ditto", "fedfomo", "fedala", "fedprox"],
                       lg_fedavg="LG-Fed", fedperpp="FedPer++ (assumed form)")

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
SCALES = Scales(
    ci=dict(datasets=["digits"], clients=6, per_class=None, rounds=2, epochs=1, lr=0.05, batch=64, eval_every=1,
            seeds=[0], headline_seeds=[0], main_seeds=[0], sweep_seeds=[0], server_epochs=2, etf_rounds=1, kappa=None,
            global_test=None, fig6=[(1, 5)], clusters=[1], betas=[0.5], model="cnn_cspc"),
    book=dict(datasets=["fmnist"], clients=10, per_class=300, rounds=8, epochs=1, lr=0.03, batch=16, eval_every=2,
            seeds=[0], headline_seeds=[0, 1, 2], main_seeds=[0], sweep_seeds=[0], server_epochs=5, etf_rounds=2,
            kappa=0.1, global_test=2000, fig6=[(1, 5), (5, 1)], clusters=[1], betas=[0.5], model="cnn_cspc"),
    # seeds 3 and 4 of Table II and the ablations were added after their 3-seed verdicts (HM, Global, CPM, the
    # chain of Table IV) came out inconclusive with every seed's margin of one sign; those of Tables III and VI-VII
    # after theirs came out inconclusive, Table III's with every seed's margin of one sign (``verdicts.second_look``)
    reference=dict(datasets=["fmnist"], clients=10, per_class=1500, rounds=30, epochs=2, lr=0.01, batch=64,
            eval_every=3, seeds=[0, 1, 2, 3, 4], headline_seeds=[0, 1, 2, 3, 4], main_seeds=[0, 1, 2, 3, 4],
            sweep_seeds=[0, 1, 2], server_epochs=20, etf_rounds=6, kappa=None, global_test=None, fig6=[(1, 1), (5, 1)],
            clusters=[1, 3], betas=[0.1, 0.5], model="cnn_cspc"),
    paper=dict(datasets=["fmnist", "mnist"], clients=10, per_class=None, rounds=100, epochs=10, lr=0.01, batch=64,
            eval_every=1, seeds=[0, 1, 2], headline_seeds=[0, 1, 2], main_seeds=[0, 1, 2], sweep_seeds=[0, 1, 2],
            server_epochs=100, etf_rounds=20, kappa=None, global_test=None,
            fig6=[(r, a) for r in (1, 5) for a in (1, 2, 4, 8)], clusters=[1, 3, 5], betas=[0.1, 0.5],
            model="cnn_cspc"),
)


# the book's learning rate is chosen with this run (``python -m fedlib tune pfedcspc``)
TUNING = dict(method="fedavg", args=dict(dataset="fmnist"), metric="acc_global")


def scale_summary(scale: str) -> str:
    """What the chapter trains at ``scale`` next to what the paper trains (printed by the notebook's set-up)."""
    sc = SCALES[scale]
    return "\n".join([
        f"scale {scale}: datasets {sc['datasets']}, {sc['clients']} clients, at most {sc['per_class'] or 'all'} "
        f"training images per class, {sc['rounds']} rounds of {sc['epochs']} local epochs at lr {sc['lr']}, evaluated "
        f"every {sc['eval_every']} rounds, server calibration "
        f"{sc['server_epochs']} epochs, seeds {sc['headline_seeds']} (Table II), "
        f"{sc['main_seeds']} (Tables III, VI, VII), "
        f"{sc['seeds']} (ablations), {sc['sweep_seeds']} (Fig. 6, clusters)",
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
    if sc["per_class"]:
        part["per_class"] = sc["per_class"]
    kappa = {"kappa": sc["kappa"]} if sc["kappa"] is not None else {}
    hp = {"pfedcspc": {"server_epochs": sc["server_epochs"], **kappa},
          "fedetf": {"finetune_rounds": sc["etf_rounds"]}}.get(method, {})
    hp.update(hyper or {})
    if finetune is None:
        finetune = method in GLOBAL_METHODS + ["fedprox"]
    return make_config(
        method=method,
        dataset=dataset,
        partition=part,
        num_clients=sc["clients"],
        fraction=fraction,
        rounds=sc["rounds"],
        local_epochs=sc["epochs"],
        batch_size=sc["batch"],
        lr=sc["lr"],
        momentum=0.9,
        weight_decay=1e-5,
        model=sc["model"],
        hyper=hp,
        seed=seed,
        metrics=["generalization"],
        eval_every=sc["eval_every"],
        global_test_size=sc["global_test"],
        eval_finetune_epochs=1 if finetune else 0,
        device=RUNTIME["device"],
        executor=RUNTIME["executor"],
    )


def ablation_config(run: str, dataset: str, scale: str, seed: int = 0, **kw) -> Config:
    if run == "fedavg":
        return config("fedavg", dataset, scale, seed=seed, **kw)
    return config("pfedcspc", dataset, scale, seed=seed, hyper=dict(ABLATION_RUNS[run]), **kw)


def rounds_to_reach(record: dict, target: float, metric: str = "acc_global") -> int | None:
    """The first evaluated round whose ``metric`` reaches ``target`` (None: never)."""
    for row in record["history"]:
        if metric in row and row[metric] >= target:
            return int(row["round"])
    return None


def target_accuracy(fedavg_records: list[dict]) -> float:
    """Table VII's target read from FedAvg: its final ACC_global (mean over seeds) rounded down to 0.5 points."""
    import math

    mean = mean_std(fedavg_records, "acc_global")[0]
    return math.floor(200 * mean) / 200


TARGET_SETTER = "fedavg"   # Table VII's target is FedAvg's final accuracy: FedAvg sets it and is not compared


def fewest_rounds_margins(runs: dict) -> dict[int, float]:
    """Table VII per seed: the target is that seed's FedAvg final ACC_global (rounded down to 0.5 points); the
    margin is (rounds of the fastest other method - rounds of pFedCSPC) / evaluation interval + 0.5, so a tie
    counts as holding; a method that never reaches the target counts as one evaluation past the last round.
    FedAvg, which reaches its own final accuracy by construction, is not among the other methods."""
    by_seed = {m: {int(r["seed"]): r for r in recs} for m, recs in runs.items()}
    seeds = set.intersection(*(set(v) for v in by_seed.values())) if by_seed else set()
    out = {}
    for seed in sorted(seeds):
        cfg = by_seed["pfedcspc"][seed]["config"]
        every = int(cfg.get("eval_every") or 1)
        target = target_accuracy([by_seed["fedavg"][seed]])
        rounds = {m: rounds_to_reach(v[seed], target) or int(cfg["rounds"]) + every for m, v in by_seed.items()}
        others = [r for m, r in rounds.items() if m not in ("pfedcspc", TARGET_SETTER)]
        out[seed] = (min(others) - rounds["pfedcspc"]) / every + 0.5
    return out


def table7_claim(table7: dict, table7_runs: dict | None = None) -> Claim:
    """Table VII's claim: ``table7`` {method: first round at the target, or None} on the mean curves; FedAvg sets the
    target (its final accuracy) and is not compared."""
    reached = {m: r for m, r in table7.items() if r is not None}
    compared = {m: r for m, r in table7.items() if m != TARGET_SETTER}
    return Claim("pFedCSPC reaches the target accuracy in the fewest rounds (Table VII)",
                 "CIFAR-10 beta 0.5: 24 rounds vs MOON 32, FedDC / FedASAM 34, FedAvg 82",
                 ", ".join(f"{LABELS[m]} {r if r is not None else 'never'}" for m, r in compared.items())
                 + f" ({LABELS[TARGET_SETTER]} sets the target, its final accuracy, and is not compared: it "
                   f"reaches it in {table7.get(TARGET_SETTER)})",
                 "pfedcspc" in reached and all(r is None or r >= reached["pfedcspc"] for r in compared.values()),
                 "ties count as holding; margin per seed (that seed's FedAvg sets the target): the rounds "
                 "the fastest other method needs more, in evaluations, + 0.5",
                 margins=fewest_rounds_margins(table7_runs) if table7_runs else None)


# ---------------------------------------------------------------------- claims of the paper
def verdicts(table2: dict, table3: dict | None, ablation: dict | None, table6: dict | None, table7: dict | None,
             table7_runs: dict | None = None) -> list[Claim]:
    """``table2``: {method: records}; ``table3``: {method: records}; ``ablation``: {run name: records} (the runs
    behind Tables IV and V, rows read through ``TABLE4`` and ``TABLE5``); ``table6``: {base: (alone records,
    +pFedCSPC records)}; ``table7``: {method: rounds or None} on the mean curves; ``table7_runs``: {method:
    records} behind it (margins per seed). A table given as None (not recorded yet) leaves its claims out."""
    from fedlib.studies.verdicts import PerSeed

    def ours_best(a):   # pFedCSPC minus the best other method
        return a["pfedcspc"] - max(v for m, v in a.items() if m != "pfedcspc")

    def ours_vs_best(name):   # the words of the three "pFedCSPC is best" claims, from the means
        def ours(means):
            other = max((m for m in means if m != "pfedcspc"), key=means.__getitem__)
            return f"{name}pFedCSPC {means['pfedcspc']:.2f}; best other {LABELS[other]} {means[other]:.2f}"
        return ours

    claims = [
        PerSeed(table2, "hm").claim("pFedCSPC has the best balance of generalization and personalization (Table II, "
                                    "HM)", "CIFAR-10 HM 70.31 vs FedETF 69.61, GRACE 68.52", ours_best,
                                    ours_vs_best("HM ")),
        PerSeed(table2, "acc_global").claim("pFedCSPC's global model is (near) the best (Table II, Global)",
                                            "CIFAR-10 70.81, FedETF 70.84 the only higher",
                                            lambda a: ours_best(a) + 0.5, ours_vs_best(""),
                                            "holds here means: within 0.5 points of the best"),
    ]
    if table3 is not None:
        claims.append(PerSeed(table3, "i_local").claim(
            "pFedCSPC personalizes best among the personalized-FL baselines (Table III, I_local)",
            "CIFAR-10 69.81 vs FedFomo 67.78, FedALA 67.14", ours_best, ours_vs_best("")))
    if ablation is None:
        return claims + _table6_and_7_claims(table6, table7, table7_runs)
    runs_of: dict = ablation

    def rows_of(table: dict) -> PerSeed:   # {row: records}, each row read with its own metric, paired by seed
        return PerSeed({row: runs_of[run] for row, (run, _) in table.items()},
                       {row: metric for row, (_, metric) in table.items()})

    chain4 = ("Base", "+CPM+CA", "+PTA+CPM+CA", "+PTA+CPM+PA+CA", "+PTA+CPM+PA+CA+KP")

    def each_adds(a, chain):   # the smallest step along the chain
        return min(a[y] - a[x] for x, y in zip(chain, chain[1:]))

    t4_seeds = rows_of(TABLE4)
    claims.append(t4_seeds.claim(
        "clustered prototypes beat one prototype per class (Table IV, CPM vs TPG)",
        "C=1.0: +CPM+CA 68.89 vs +TPG+CA 64.32; +CPM+PA+CA 69.66 vs +TPG+PA+CA 66.19",
        lambda a: min(a["+CPM+CA"] - a["+TPG+CA"], a["+CPM+PA+CA"] - a["+TPG+PA+CA"]),
        lambda t4: f"+CPM+CA {t4['+CPM+CA']:.2f} vs +TPG+CA {t4['+TPG+CA']:.2f}; +CPM+PA+CA {t4['+CPM+PA+CA']:.2f} "
                   f"vs +TPG+PA+CA {t4['+TPG+PA+CA']:.2f}"))
    claims.append(t4_seeds.claim(
        "every global component adds accuracy: Base < +CPM+CA < +PTA < +PA < +KP (Table IV)",
        "66.78 < 68.89 < 69.51 < 70.42 < 70.81", lambda a: each_adds(a, chain4),
        lambda t4: " / ".join(f"{t4[r]:.2f}" for r in chain4), "margin: the smallest step of the chain"))
    fedavg_chain = ("+FT_CE", "+PMI+FT_CE", "+PMI+FT_CE+Align")
    cspc_chain = ("FedCSPC +FT_CE", "FedCSPC +PMI+FT_CE", "FedCSPC +PMI+FT_CE+Align")
    claims.append(rows_of(TABLE5).claim(
        "PMI and Align each improve personalization, on FedAvg and on FedCSPC (Table V)",
        "FedAvg 64.31 -> 65.12 -> 66.74; FedCSPC 66.98 -> 68.02 -> 69.81",
        lambda a: min(each_adds(a, fedavg_chain), each_adds(a, cspc_chain)),
        lambda t5: f"FedAvg {t5['+FT_CE']:.2f} -> {t5['+PMI+FT_CE']:.2f} -> {t5['+PMI+FT_CE+Align']:.2f}; FedCSPC "
                   f"{t5['FedCSPC +FT_CE']:.2f} -> {t5['FedCSPC +PMI+FT_CE']:.2f} -> "
                   f"{t5['FedCSPC +PMI+FT_CE+Align']:.2f}",
        "margin: the smallest step of either chain"))
    return claims + _table6_and_7_claims(table6, table7, table7_runs)


def _table6_and_7_claims(table6: dict | None, table7: dict | None, table7_runs: dict | None) -> list[Claim]:
    """Table VI's claim and Table VII's (which reads Table VI's FedProx curves): none before Table VI is recorded."""
    from fedlib.studies.verdicts import PerSeed

    if table6 is None or table7 is None:
        return []
    pairs = PerSeed({(b, k): recs for b, pair in table6.items() for k, recs in zip(("alone", "with"), pair)},
                    "acc_global")
    return [pairs.claim("pFedCSPC improves the global model of other local objectives (Table VI)",
                        "CIFAR-10: FedProx +1.91, MOON +2.38, FedASAM +2.17",
                        lambda a: min(a[(b, "with")] - a[(b, "alone")] for b in table6),
                        lambda g: ", ".join(f"{LABELS[b]} {g[(b, 'with')] - g[(b, 'alone')]:+.2f}" for b in table6)),
            table7_claim(table7, table7_runs)]


# ---------------------------------------------------------------------- the chapter's tables and figures
GLOBAL = balanced("Global (ACC_global): the global model on the balanced test set")
LOCAL = local("Local (I_local, Eq. 20): each client's model on a test set drawn with its own label mix, harmonic mean "
              "of accuracy and macro-F1; the floor is its accuracy part's")
TABLE6_BASES = ["fedprox", "moon", "fedasam"]


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
    return config("pfedcspc", SCALES[scale]["datasets"][0], scale)


def protocol(scale: str) -> tuple[list[dict], str]:
    """The evaluation protocol per method (Section V-A): Global reads the global model on the balanced test,
    Local (I_local) each client's model on its local test; the global-model methods are fine-tuned for one
    epoch before Local, as the paper's Table II does."""
    from fedlib.studies.settings import protocol_rows

    ds = SCALES[scale]["datasets"][0]
    methods = list(dict.fromkeys(TABLE2 + TABLE3))
    return protocol_rows({LABELS[m]: config(m, ds, scale) for m in methods},
                         {"Global": "global_global", "Local": "personal_local"})


def table2_grid(scale: str) -> dict:
    sc = SCALES[scale]
    return {(ds, m): with_seeds(config(m, ds, scale), sc["headline_seeds"]) for ds in sc["datasets"] for m in TABLE2}


def table2(scale: str, store: str | None = None) -> tuple[list[dict], dict]:
    """Table II over the headline seeds: (rows, {dataset: {method: records}})."""
    table = nested(run_grid(table2_grid(scale), desc="Table II", store=store))
    return table2_rows(table, scale), table


def table2_rows(table: dict, scale: str) -> list[dict]:
    """Table II's rows from {dataset: {method: records}} (a cell without records reads "-"), the paper beside."""
    rows = []
    for m in TABLE2:
        row: dict[str, Any] = {"method": LABELS[m]}
        for ds in SCALES[scale]["datasets"]:
            for metric, name in (("acc_global", "Global"), ("i_local", "Local"), ("hm", "HM")):
                row[f"{ds.upper()} {name}"] = fmt_of(table.get(ds, {}).get(m, []), metric)
        row.update({f"paper C10 {n}": v for n, v in zip(("Global", "Local", "HM"), PAPER_T2[m])})
        rows.append(row)
    return rows


def recorded_tables(runs: dict, scale: str) -> dict[str, tuple[list[dict], list[dict], str]]:
    """Table II from the committed records of its grid ({(dataset, method): records}), on its two test sets."""
    return {"Table II": (table2_rows(nested(runs), scale), [r for recs in runs.values() for r in recs],
                         GLOBAL + "; " + LOCAL)}


def fedetf_note(table: dict, scale: str) -> str:
    """Why FedETF's Local stands apart (Table II), from the records: its evaluation adapts each client's model for
    far longer than the one epoch of fine-tuning the global-model methods get (the protocol table's words)."""
    from fedlib.methods import make_method

    ds = SCALES[scale]["datasets"][0]
    etf = table[ds]["fedetf"]
    adaptation = make_method("fedetf", **etf[0]["config"]["hyper"]).describes_adaptation()
    if not adaptation:
        return ""
    local = {m: 100 * mean_std(table[ds][m], "i_local")[0] for m in GLOBAL_METHODS + ["fedetf"]}
    glob = {m: 100 * mean_std(table[ds][m], "acc_global")[0] for m in GLOBAL_METHODS + ["fedetf"]}
    best = max(GLOBAL_METHODS, key=local.__getitem__)
    lead = local["fedetf"] - local[best]
    return (f"FedETF's Local ({local['fedetf']:.2f}) reads each client's model after {adaptation}; the global-model "
            f"methods' Local after one epoch of fine-tuning (the best of them, {LABELS[best]}, {local[best]:.2f}). "
            f"Its {'lead' if lead >= 0 else 'gap'} of {lead:+.2f} points is measured under the longer adaptation: "
            f"its global model alone scores {glob['fedetf']:.2f} against {LABELS[best]}'s {glob[best]:.2f}.")


def plot_tradeoff(table: dict, scale: str):
    """Table II as a plane: Global (x) against Local (y), one marker per method and a legend, so that
    methods with close numbers stay readable."""
    import matplotlib.pyplot as plt

    ds = SCALES[scale]["datasets"][0]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    markers = "os^vD<>phX*P"
    for i, m in enumerate(TABLE2):
        g, loc = (100 * mean_std(table[ds][m], k)[0] for k in ("acc_global", "i_local"))
        ax.scatter(
            g,
            loc,
            s=140 if m == "pfedcspc" else 45,
            marker="*" if m == "pfedcspc" else markers[i % len(markers)],
            color=f"C{i % 10}",
            edgecolor="k" if m == "pfedcspc" else "none",
            label=LABELS[m],
        )
    ax.set_xlabel("Global: ACC_global (%)")
    ax.set_ylabel("Local: I_local (%)")
    chance_line(ax)
    chance_line(ax, axis="x")
    floor_line(ax, majority_floor([r for m in TABLE2 for r in table[ds][m]]))   # I_local reads local tests
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(f"{ds.upper()}, scale {scale}: up and to the right is better")
    fig.tight_layout()
    return fig


def table3_grid(scale: str) -> dict:
    """Table III's runs that Table II has not (FedAvg, FedAvg-FT and pFedCSPC come from Table II)."""
    sc = SCALES[scale]
    return {(ds, m): with_seeds(config(m, ds, scale), sc["main_seeds"]) for ds in sc["datasets"]
            for m in TABLE3 if m not in ("fedavg", "fedavg_ft", "pfedcspc")}


def table3(table2_: dict, scale: str, store: str | None = None, runs: dict | None = None
           ) -> tuple[list[dict], dict, list]:
    """Table III: I_local of the personalized-FL baselines; FedAvg, FedAvg-FT and pFedCSPC come from Table II's
    runs (their seeds among the main seeds). Returns (rows, {dataset: {method: records}} of the personalized methods
    (FedAvg-FT and pFedCSPC from Table II, on the main seeds; I_local reads each one's own model), every record
    used). ``runs``: the records of ``table3_grid`` at hand (committed ones); None runs the grid."""
    sc = SCALES[scale]
    seeds = sc["main_seeds"]
    runs = run_grid(table3_grid(scale), desc="Table III", store=store) if runs is None else runs
    table: dict[str, dict] = {ds: {} for ds in sc["datasets"]}
    table.update(nested(runs))
    rows, used = [], list(runs.values())
    for m in TABLE3:
        row: dict[str, Any] = {"method": LABELS[m]}
        for ds in sc["datasets"]:
            if m in ("fedavg", "fedavg_ft", "pfedcspc"):
                recs = with_seed_in(table2_[ds]["fedavg" if m == "fedavg_ft" else m], seeds)
                value = mean_std(recs, "global_local_i_local" if m == "fedavg" else "i_local")
                used.append(recs)
            else:
                value = mean_std(table[ds][m], "i_local")
            row[f"{ds.upper()} I_local"] = fmt(value)
        row["paper C10"] = PAPER_T3[m]
        rows.append(row)
    for ds in sc["datasets"]:   # the personalized methods Table II ran, on Table III's seeds (the verdict's table)
        table[ds]["fedavg_ft"] = with_seed_in(table2_[ds]["fedavg"], seeds)
        table[ds]["pfedcspc"] = with_seed_in(table2_[ds]["pfedcspc"], seeds)
    return rows, table, used


def ablations_grid(scale: str) -> dict:
    """Tables IV and V's runs that Table II has not (FedAvg and the full method)."""
    sc = SCALES[scale]
    ds, seeds = sc["datasets"][0], sc["seeds"]
    return {name: with_seeds(ablation_config(name, ds, scale), seeds) for name in ABLATION_RUNS if name != "full"}


def ablations(table2_: dict, scale: str, store: str | None = None, runs: dict | None = None) -> dict:
    """Tables IV and V: {run name: records} for every ablation run (FedAvg and the full method from Table II).
    ``runs``: the records of ``ablations_grid`` at hand (committed ones); None runs the grid."""
    sc = SCALES[scale]
    ds, seeds = sc["datasets"][0], sc["seeds"]
    runs = dict(run_grid(ablations_grid(scale), desc="Tables IV-V", store=store) if runs is None else runs)
    runs["fedavg"] = with_seed_in(table2_[ds]["fedavg"], seeds)
    runs["full"] = with_seed_in(table2_[ds]["pfedcspc"], seeds)
    return runs


def ablation_tables(runs: dict, scale: str) -> tuple:
    """(Table IV {row: ms}, Table V {row: ms}, Table IV rows, Table V rows)."""
    ds = SCALES[scale]["datasets"][0].upper()
    table4 = {row: mean_std(runs[run], metric) for row, (run, metric) in TABLE4.items()}
    table5 = {row: mean_std(runs[run], metric) for row, (run, metric) in TABLE5.items()}
    rows4 = [{"row": r, f"{ds} ACC_global": fmt(v), "paper C10 (C=1.0)": PAPER_T4[r]} for r, v in table4.items()]
    rows5 = [{"row": r, f"{ds} I_local": fmt(v), "paper C10": PAPER_T5[r]} for r, v in table5.items()]
    return table4, table5, rows4, rows5


def table6_grid(scale: str) -> dict:
    """Every base objective alone (b) and under pFedCSPC (+b); Table VI reads the alone runs Table II has from it."""
    sc = SCALES[scale]
    ds, seeds = sc["datasets"][0], sc["main_seeds"]
    grid = {b: with_seeds(config(b, ds, scale), seeds) for b in TABLE6_BASES}
    grid.update({f"+{b}": with_seeds(config("pfedcspc", ds, scale, hyper={"base": b}), seeds) for b in TABLE6_BASES})
    return grid


def table6(table2_: dict, scale: str, store: str | None = None, runs: dict | None = None) -> tuple[list[dict], dict]:
    """Table VI: pFedCSPC on other local objectives, each beside the objective alone. Returns (rows,
    {base: (records alone, records with pFedCSPC)}). ``runs``: the records of ``table6_grid`` at hand (committed
    ones); None runs what Table II has not."""
    sc = SCALES[scale]
    ds, seeds = sc["datasets"][0], sc["main_seeds"]
    alone = {b: with_seed_in(table2_[ds][b], seeds) for b in TABLE6_BASES if b in table2_[ds]}
    todo = {k: v for k, v in table6_grid(scale).items() if k not in alone}
    done = run_grid(todo, desc="Table VI", store=store) if runs is None else runs
    table = {b: (alone.get(b) or done[b], done[f"+{b}"]) for b in TABLE6_BASES}
    rows = [{"method": LABELS[b], f"{ds.upper()} alone": fmt(mean_std(a, "acc_global")),
             f"{ds.upper()} +pFedCSPC": fmt(mean_std(w, "acc_global")),
             "paper C10 alone": PAPER_T6[b][0], "paper C10 +pFedCSPC": PAPER_T6[b][1]} for b, (a, w) in table.items()]
    return rows, table


def table7(table2_: dict, table6_: dict, scale: str) -> tuple:
    """Table VII: the first evaluated round at which the global model (mean over the main seeds) reaches
    FedAvg's final accuracy. Returns (rows, {method: round or None}, curves {method: (rounds, mean acc)},
    target, {method: records used})."""
    sc = SCALES[scale]
    ds, seeds = sc["datasets"][0], sc["main_seeds"]
    used = {m: with_seed_in(table2_[ds].get(m) or table6_[m][0], seeds) for m in TABLE7}
    curves = {}
    for m, recs in used.items():
        evaluated = [[row for row in r["history"] if "acc_global" in row] for r in recs]
        curves[m] = (
            [row["round"] for row in evaluated[0]],
            np.mean([[row["acc_global"] for row in h] for h in evaluated], 0),
        )
    target = target_accuracy(with_seed_in(table2_[ds]["fedavg"], seeds))
    reached = {m: next((t for t, a in zip(*curves[m]) if a >= target), None) for m in TABLE7}
    rows = [{"method": LABELS[m], f"{ds.upper()} rounds to {100 * target:.1f}%":
             reached[m] if reached[m] is not None else f"> {sc['rounds']}",
             "paper C10 (66%, beta 0.5)": PAPER_T7[m][1]} for m in TABLE7]
    return rows, reached, curves, target, used


def plot_curves(curves: dict, target: float, scale: str):
    import matplotlib.pyplot as plt

    ds = SCALES[scale]["datasets"][0]
    fig, ax = plt.subplots(figsize=(7, 4))
    for m, (rounds, acc) in curves.items():
        ax.plot(
            rounds,
            100 * acc,
            marker="o" if m == "pfedcspc" else None,
            lw=2.5 if m == "pfedcspc" else 1,
            label=LABELS[m],
        )
    ax.axhline(100 * target, color="k", ls=":", lw=1)
    ax.set_xlabel("round")
    ax.set_ylabel("ACC_global (%)")
    chance_line(ax)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    ax.set_title(f"{ds.upper()}, scale {scale}")
    fig.tight_layout()
    return fig


def sweeps_grid(scale: str) -> dict:
    sc = SCALES[scale]
    ds, seeds = sc["datasets"][0], sc["sweep_seeds"]
    grid = {
        (r, a): with_seeds(config("pfedcspc", ds, scale, hyper={"repeats": r, "n_aug": a}), seeds)
        for r, a in sc["fig6"]
    }
    grid.update({("clusters", j): with_seeds(config("pfedcspc", ds, scale, hyper={"clusters": j}), seeds)
                 for j in sc["clusters"]})
    return grid


def prototype_sweeps(ablation_runs: dict, scale: str, store: str | None = None) -> dict:
    """Fig. 6 (n_repeat x n_aug) and the number of clusters j: {(n_repeat, n_aug) | ("clusters", j): records};
    the defaults (5, 5) and j = 2 are the full method's runs."""
    sweep = run_grid(sweeps_grid(scale), desc="Fig. 6", store=store)
    sweep[(5, 5)] = ablation_runs["full"]
    sweep[("clusters", 2)] = ablation_runs["full"]
    return sweep


def plot_fig6(sweep: dict, scale: str):
    import matplotlib.pyplot as plt

    grid = sorted(k for k in sweep if k[0] != "clusters")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for ax, metric, name in zip(axes, ("acc_global", "i_local"), ("Global", "Local")):
        for r in sorted({r for r, _ in grid}):
            augs = [a for rr, a in grid if rr == r]
            ax.plot(augs, [100 * mean_std(sweep[(r, a)], metric)[0] for a in augs], marker="o", label=f"n_repeat = {r}")
        ax.set_xlabel("n_aug")
        ax.set_ylabel(f"{name} (%)")
        chance_line(ax)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(f"{SCALES[scale]['datasets'][0].upper()}, scale {scale}")
    fig.tight_layout()
    return fig


def clusters_rows(sweep: dict) -> tuple[list[dict], dict]:
    clusters = {k[1]: recs for k, recs in sweep.items() if k[0] == "clusters"}
    rows = [{"clusters j": j, "Global": fmt(mean_std(r, "acc_global")), "Local": fmt(mean_std(r, "i_local"))}
            for j, r in sorted(clusters.items())]
    return rows, clusters


def pmi_reading(correlation: float) -> str:
    """What the printed correlation of PMI weights with label-mix similarity says, in words generated from it."""
    if correlation >= 0.5:
        how = "follow label-mix similarity: a client leans on the clients whose label mix resembles its own"
    elif correlation >= 0.2:
        how = "follow label-mix similarity weakly"
    elif correlation > -0.2:
        how = "do not follow label-mix similarity here: PMI does not pick the clients with similar label mixes"
    else:
        how = "run against label-mix similarity"
    return (f"correlation of PMI weights and label-mix similarity over client pairs: {correlation:.2f}: the weights "
            f"{how}")


def plot_pmi(record: dict):
    """PMI's Eq. 4 weights of the last round of one run beside the cosine similarity of the clients' label
    mixes; returns (figure, their correlation over client pairs)."""
    import matplotlib.pyplot as plt

    W = np.asarray(record["final"]["weights"]["pmi"])
    counts = np.asarray(record["train_counts"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    im = axes[0].imshow(W, cmap="viridis")
    axes[0].set_xlabel("uploaded encoder k'")
    axes[0].set_ylabel("client k")
    axes[0].set_title("PMI weights p_k^k' (last round)")
    fig.colorbar(im, ax=axes[0])
    mix = counts / counts.sum(1, keepdims=True)
    sim = mix @ mix.T / np.outer(np.linalg.norm(mix, axis=1), np.linalg.norm(mix, axis=1))
    im = axes[1].imshow(sim, cmap="viridis")
    axes[1].set_title("cosine similarity of label mixes")
    fig.colorbar(im, ax=axes[1])
    fig.tight_layout()
    off = ~np.eye(len(W), dtype=bool)
    return fig, float(np.corrcoef(W[off], sim[off])[0, 1])


# which recorded table decides each claim of ``verdicts`` (in its order), and what cannot be checked offline
CLAIM_TABLES = [
    ("pFedCSPC has the best balance of generalization and personalization (Table II, HM)", "table2",
     "Table II's methods"),
    ("pFedCSPC's global model is (near) the best (Table II, Global)", "table2", "Table II's methods"),
    ("pFedCSPC personalizes best among the personalized-FL baselines (Table III, I_local)", "table3",
     "Table III's methods (FedAvg, FedAvg-FT and pFedCSPC from Table II)"),
    ("clustered prototypes beat one prototype per class (Table IV, CPM vs TPG)", "ablations",
     "pFedCSPC with CPM or TPG prototypes"),
    ("every global component adds accuracy: Base < +CPM+CA < +PTA < +PA < +KP (Table IV)", "ablations",
     "pFedCSPC with its global components added one by one"),
    ("PMI and Align each improve personalization, on FedAvg and on FedCSPC (Table V)", "ablations",
     "PMI and Align switched on and off"),
    ("pFedCSPC improves the global model of other local objectives (Table VI)", "table6",
     "FedProx, MOON and FedASAM alone and under pFedCSPC"),
    ("pFedCSPC reaches the target accuracy in the fewest rounds (Table VII)", "table2",
     "the learning curves of Table II's runs"),
]
NOT_OFFLINE = [
    ("the CIFAR-10, CIFAR-100 and Tiny-ImageNet columns", "the datasets are not available offline; the book reads "
     "FMNIST in place of CIFAR-10 (and MNIST at paper scale)"),
]
CONVERGENCE = ("pfedcspc", "fedavg")   # the paper's method and its main baseline, run 3x longer at reference scale
CONVERGENCE_METRIC = "acc_global"   # what the convergence check reads (the notebook's convergence section)


def recorded_claims(scale: str) -> tuple[list, str] | None:
    """The claims' verdicts from the committed records at ``scale`` (reference or paper), table by table: Table II's
    once it has every seed of every cell, then Table III's, the ablations' (IV-V) and Table VI's with VII's (which
    reads their curves) as each is complete. Returns (claims, what they were computed on), or None before Table II
    is complete."""
    from fedlib.studies.common import complete_runs, nested, seeds_of
    from fedlib.studies.verdicts import seeds_read

    grids = tables(scale)
    found = {name: complete_runs("pfedcspc", grids[name]) for name in ("table2", "table3", "ablations", "table6")}
    if found["table2"] is None:
        return None
    sc = SCALES[scale]
    ds = sc["datasets"][0]
    t2 = nested(found["table2"])
    t3 = table3(t2, scale, runs=found["table3"])[1][ds] if found["table3"] is not None else None
    ablation = ablations(t2, scale, runs=found["ablations"]) if found["ablations"] is not None else None
    t6 = table6(t2, scale, runs=found["table6"])[1] if found["table6"] is not None else None
    t7, t7_records = table7(t2, t6, scale)[1::3] if t6 is not None else (None, None)
    read = {TABLE_TITLES[name]: seeds_of(runs) for name, runs in found.items() if runs is not None}
    waiting = [TABLE_TITLES[name] for name, runs in found.items() if runs is None]
    return (verdicts(t2[ds], t3, ablation, t6, t7, t7_records),
            f"{scale} scale, committed records: {ds.upper()}, {sc['clients']} clients, {sc['rounds']} rounds, "
            f"{seeds_read(read)}" + (f"; {', '.join(waiting)} not complete yet: their claims wait" if waiting else ""))


TABLE_TITLES = {"table2": "Table II", "table3": "Table III", "ablations": "Tables IV-V", "table6": "Tables VI-VII"}


def tables(scale: str) -> dict:
    """The recorded grid of every table at ``scale`` (reference or paper), most needed first (``python -m fedlib
    records pfedcspc [--scale reference]``); at reference scale also the convergence check (Table II's first
    dataset, pFedCSPC and FedAvg at 3x the rounds, seed 0)."""
    out = {"table2": table2_grid(scale), "table3": table3_grid(scale), "ablations": ablations_grid(scale),
           "table6": table6_grid(scale), "sweeps": sweeps_grid(scale)}
    if scale == "reference":   # the evidence first: it says what the budget can decide
        grid = table2_grid(scale)
        out = {"convergence": convergence_grid({m: grid[(SCALES[scale]["datasets"][0], m)]
                                                for m in CONVERGENCE}), **out}
    return out


register_chapter(__name__, "pFedCSPC")
