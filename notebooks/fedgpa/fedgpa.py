"""The FedGPA chapter's declaration: scales, the recorded grids, the paper's reported numbers, its claims and the
inventory of its claim sentences. The page's own tables and figures are ``fedgpa_pages``.

FMNIST is the one dataset of FedGPA's Tables 2-5 available offline. Paper numbers below are
transcribed from Han et al. (2025), Tables 2, 3, 4 and 5 (FMNIST columns, final test accuracy %,
mean over clients, 3 runs).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedlib.claims import (
    Claim,
    Comparison,
    Pairs,
    Read,
    Row,
    Sentence,
    Statistic,
    chain,
    each_above,
    mean_over_rounds,
    rounds_to_final_of,
    versus,
)
from fedlib.data.partition import fedgpa_setting
from fedlib.experiment import Config, make_config
from fedlib.methods.fedpac import ALL_OF_THE_CODE, CODE_READINGS, CodeReading
from fedlib.studies.common import (  # noqa: F401  (the chapter uses them)
    ON_CPU,
    Runtime,
    convergence_grid,
    entropy_rows,
    fmt,
    mean_std,
    method_labels,
    run_grid,
    with_seeds,
)
from fedlib.studies.convergence import (  # noqa: F401  (the notebook reads them here)
    convergence_verdict,
    margins_line,
    still_moving,
)
from fedlib.studies.grid import Budget, Scales
from fedlib.studies.registry import register_chapter
from fedlib.studies.report import local
from fedlib.timing import TABLE as TIMED
from fedlib.timing import relative_to, rounds_above

METHODS = ["local", "fedavg", "fedavg_ft", "fedprox", "scaffold", "fedper", "lg_fedavg", "fedbabu", "fedpac",
           "fedgpa"]
LABELS = method_labels(METHODS)
# pFedMe is in the paper's comparison; it has a table of its own (the comparison's cells, pFedMe only) so that the
# claims read it while the page's own smoke runs stay as they are (a round costs 4.9x FedAvg's)
PFEDME, PFEDME_TABLE = "pfedme", "pfedme"
# the authors' code: where the chapter could compare its reading with it (the book's papers table lists it)
OFFICIAL_CODE = ("none found", None, None)   # (words, link text, address)

PAPER_S = (20, 80)   # the shares s (%) of dominant-class samples of Tables 3-5; PAPER's pairs follow this order
# setting -> method -> (s=20, s=80)
PAPER = {
    1: {"local": (82.86, 77.31), "fedavg": (86.71, 88.05), "fedavg_ft": (88.65, 87.0), "fedprox": (88.05, 86.51),
        "scaffold": (88.70, 87.39), "fedper": (86.35, 83.53), "lg_fedavg": (83.08, 79.18), "fedbabu": (88.83, 87.92),
        "fedpac": (89.66, 88.47), "fedgpa": (90.04, 89.15)},
    2: {"local": (83.11, 78.28), "fedavg": (88.08, 88.14), "fedavg_ft": (89.16, 87.4), "fedprox": (89.0, 88.05),
        "scaffold": (89.34, 88.13), "fedper": (86.60, 84.14), "lg_fedavg": (84.48, 79.67), "fedbabu": (89.09, 88.0),
        "fedpac": (90.23, 88.74), "fedgpa": (90.41, 89.26)},
    3: {"local": (84.96, 80.05), "fedavg": (88.88, 86.83), "fedavg_ft": (90.16, 88.56), "fedprox": (89.97, 88.73),
        "scaffold": (89.68, 88.01), "fedper": (86.93, 84.98), "lg_fedavg": (86.07, 82.13), "fedbabu": (90.0, 88.64),
        "fedpac": (90.70, 88.83), "fedgpa": (91.37, 89.96)},
}


# Table A.8 (Setting 1*: 2,000 samples a client), FMNIST: method -> (s=20, s=80)
PAPER_A8 = {"local": (83.05, 77.76), "fedavg": (87.52, 88.70), "fedavg_ft": (89.91, 87.48), "fedprox": (88.68, 86.86),
            "scaffold": (89.12, 87.83), "fedper": (87.23, 84.12), "lg_fedavg": (83.73, 79.91),
            "fedbabu": (89.48, 88.56), "fedpac": (90.02, 88.97), "fedgpa": (90.48, 89.17)}
# Fig. 5 (Setting 1, s from 0 to 80) and Table A.8 (Setting 1*: 2,000 samples a client, s in {20, 80}), every method
# of the comparison over three seeds; the s sweep's cells at s = 20 and 80 are the comparison's own runs (same keys)
SWEEP_TABLE, SWEEP_S = "s_sweep", (0, 20, 50, 80)
MORE_DATA_TABLE, MORE_DATA_N = "setting_1_star", 2000
# Table A.9 (Setting 1's 600 samples a client, each client's class shares ~ Dir(beta)), FMNIST: method -> (beta = 0.3,
# beta = 1); pFedMe is a row of that table; pFedAMF is not checkable offline (the inventory says why)
PAPER_A9 = {"local": (83.89, 78.12), "fedavg": (88.32, 89.13), "fedavg_ft": (89.87, 88.88), "fedprox": (88.97, 87.03),
            "scaffold": (89.14, 88.11), "fedper": (87.77, 84.67), "lg_fedavg": (83.50, 80.43),
            "pfedme": (86.26, 84.06), "fedbabu": (89.91, 88.91), "fedpac": (90.47, 89.35), "fedgpa": (90.91, 89.55)}
DIRICHLET_TABLE, DIRICHLET_BETAS = "dirichlet", (0.3, 1.0)
DIRICHLET_METHODS = [*METHODS, PFEDME]
# Table 6 (CIFAR-10, Setting 3): method -> (m = 20, m = 50, every client a round; m = 100, a fifth of them a round).
# The table names no s: the grid takes Appendix A.2's default share, s = 20 (m = 20 is then the comparison's own runs)
PAPER_T6 = {"fedavg": (73.76, 73.84, 69.62), "scaffold": (79.51, 80.03, 77.35), "fedbabu": (78.45, 78.0, 77.61),
            "fedpac": (80.52, 80.94, 79.72), "fedgpa": (80.54, 81.28, 80.13)}
CLIENTS_TABLE, CLIENT_COUNTS, CLIENTS_SETTING, CLIENTS_S = "clients", (20, 50), 3, 20


def paper_accuracy(setting: int, method: str, s: int) -> float:
    """Tables 3-5: the method's accuracy (%) in the setting at the share s (20 or 80; another share has none)."""
    return PAPER[setting][method][PAPER_S.index(s)]


# Table 3, FMNIST row (Setting 1, s = 20): cumulative modules
ABLATION = {"None": ({"lga": False, "gpa_c": False, "gpa_f": False}, 86.71),
            "+ LGA": ({"lga": True, "gpa_c": False, "gpa_f": False}, 88.54),
            "+ GPA(c)": ({"lga": True, "gpa_c": True, "gpa_f": False}, 89.78),
            "+ GPA(f)": ({"lga": True, "gpa_c": True, "gpa_f": True}, 90.04)}

# Training budget per scale. n_divisor shrinks every client's n (Setting 1: 600 -> 600/n_divisor).

@dataclass(frozen=True, kw_only=True)
class GpaBudget(Budget):
    """This chapter's budget at one scale (``SCALES``)."""
    local_epochs: int
    n_divisor: int
    ablation_seeds: list[int]
    sweep_seeds: list[int]
    eval_every: int
    global_test: int | None


SCALES = Scales(
    ci=GpaBudget(rounds=2, local_epochs=1, n_divisor=10, seeds=[0], ablation_seeds=[0], sweep_seeds=[0], eval_every=1,
                 global_test=2000),
    book=GpaBudget(rounds=8, local_epochs=1, n_divisor=4, seeds=[0], ablation_seeds=[0], sweep_seeds=[0], eval_every=2,
                   global_test=2000),
    # the paper's protocol stopped at round 10 (no method of this chapter depends on the number of rounds, so a
    # reference run is the first 10 rounds of the paper-scale run of its seed): see REFERENCE_NOTE; seeds 3 and 4 of
    # the ablation, then of the comparison, were added after their 3-seed verdicts came out inconclusive
    # (``claims.assess``: a second look)
    reference=GpaBudget(rounds=10, local_epochs=5, n_divisor=1, seeds=[0, 1, 2, 3, 4], ablation_seeds=[0, 1, 2, 3, 4],
                        sweep_seeds=[0, 1, 2], eval_every=5, global_test=None),
    paper=GpaBudget(rounds=150, local_epochs=5, n_divisor=1, seeds=[0, 1, 2], ablation_seeds=[0, 1, 2],
                    sweep_seeds=[0, 1, 2], eval_every=5, global_test=None),
)
HEADLINE_KEYS = 3   # leading label columns of the headline rows the Results overview shows
METRIC = "personal_local_acc"  # FedGPA: average over clients of test accuracy on their local test sets


def scale_summary(scale: str) -> str:
    """What the chapter trains at ``scale`` next to what the paper trains (printed by the notebook's set-up)."""
    sc = SCALES[scale]
    return "\n".join([
        f"scale {scale}: {sc.rounds} rounds, E = {sc.local_epochs} local epochs, "
        f"client sizes n / {sc.n_divisor}, "
        f"seeds {sc.seeds} (ablation: {sc.ablation_seeds}, sweeps: {sc.sweep_seeds}), evaluation every "
        f"{sc.eval_every} rounds",
        "paper: 150 rounds, E = 5, n as in Section 5.1.2, 3 runs; all scales: 20 clients, SGD lr 0.02, batch 50, "
        "full participation",
    ])


def config(method: str, setting: int, s: float, scale: str, seed: int = 0, hyper: dict | None = None,
           device: str | None = None, n: int | None = None, beta: float | None = None, clients: int = 20) -> Config:
    """FedGPA Section 5.1: FMNIST, 20 clients, full participation, SGD lr 0.02, batch 50. ``n``: samples a client
    other than the setting's (Setting 1*: 2,000); ``beta``: each client's class shares ~ Dir(beta) at the setting's
    size in place of the dominant-class skew (Appendix A.2; ``s`` then unused); ``clients``: how many (Table 6)."""
    sc = SCALES[scale]
    spec = fedgpa_setting(setting, 10)
    sizes = spec["n"] if n is None else n   # one size for every client, or one per client
    sizes = [v // sc.n_divisor for v in sizes] if isinstance(sizes, list) else sizes // sc.n_divisor
    split = ({"name": "skew", "s": s, "n": sizes, "k": spec["k"]} if beta is None
             else {"name": "dirichlet_sized", "alpha": beta, "n": sizes})
    return make_config(
        method=method,
        dataset="fmnist",
        partition=split,
        num_clients=clients,
        rounds=sc.rounds,
        local_epochs=sc.local_epochs,
        batch_size=50,
        lr=0.02,
        eval_every=sc.eval_every,
        hyper=hyper or {},
        seed=seed,
        device=device or "cpu",
        global_test_size=sc.global_test,
    )  # the chapter reports personalized accuracy only


# ---------------------------------------------------------------------- Table 7: time per round
# FMNIST column, seconds per round (the paper's hardware)
PAPER_T7 = {"fedavg": 6 * 60 + 10, "fedprox": 6 * 60 + 24, "scaffold": 6 * 60 + 50, "fedbabu": 6 * 60 + 23,
            "fedpac": 7 * 60 + 28, "fedgpa": 7 * 60 + 33}
TIMING_REPEATS = (0, 1, 2, 3, 4)   # planned: five timed rounds of each method (``python -m fedlib timing fedgpa``)


def timing_runs(device: str = "cpu", executor: str = "sequential") -> dict[str, Config]:
    """Table 7's workload: a round of each of its methods at the paper's protocol (Setting 1, s = 20, seed 0)."""
    import dataclasses

    return {m: dataclasses.replace(config(m, 1, 20, "paper", device=device), executor=executor) for m in PAPER_T7}


ABOVE_FEDAVG = relative_to("fedavg", "% above FedAvg's round")
ABOVE_FEDPAC = relative_to("fedpac", "% above FedPAC's round")
SLIGHTLY = 10.0   # "slightly increased": by less than this many per cent


# ---------------------------------------------------------------------- claims of the paper
def logged_weights(record: dict) -> list[dict]:
    """The aggregation weights a run logged, [{"round": r, "weights": {...}}] in round order: from the history
    of a cached record, or the first and last ones a committed record keeps (``results.slim``)."""
    rows = [row for row in record["history"] if "weights" in row]
    if not rows and "weights" in record:
        rows = [{"round": w["round"], "weights": {k: v for k, v in w.items() if k != "round"}}
                for w in (record["weights"]["first"], record["weights"]["last"])]
    return rows


def last_weights(record: dict) -> dict | None:
    """The aggregation weights FedGPA logged last in a run ({"alpha": rows, "beta": rows}), or None."""
    logged = logged_weights(record)
    return logged[-1]["weights"] if logged else None


def _weights_statistic(name: str, which: str, of) -> Statistic:
    def read(record: dict, peers) -> float | None:
        w = last_weights(record)
        return None if w is None else float(of(np.asarray(w[which], dtype=float)))
    return Statistic(name, read, "weight" if "self" in name else "nats")


ENTROPY = {w: _weights_statistic(f"mean row entropy of {w}", w, entropy_rows) for w in ("alpha", "beta")}
SELF_WEIGHT = {w: _weights_statistic(f"mean self-weight in {w}", w, lambda W: np.diag(W).mean()) for w in ("alpha",
                                                                                                         "beta")}
MEAN_OVER_ROUNDS = mean_over_rounds(METRIC, "personalized accuracy, mean over the evaluated rounds")
# Fig. 7's "converges faster": rounds to a baseline's final accuracy (that seed's, Setting 1), read on both runs
FASTER = {(m, s): rounds_to_final_of("comparison", (m, 1, s), METRIC, f"rounds to {LABELS[m]}'s final accuracy")
          for m in METHODS for s in (20, 80)}
SINGLE_MODEL = ("fedavg", "fedprox", "scaffold")   # one global model
SPLIT_MODEL = ("fedbabu", "fedpac", "fedgpa")      # extractor and classifier treated apart
OLDER_PFL, NEWER_PFL = ("fedper", "lg_fedavg"), ("fedbabu", "fedpac")
CELL_NAMES = ("", "Setting {}", "s = {}")          # the comparison table's key: (method, setting, s)
# FedPAC as its authors' code runs it (fedlib.methods.fedpac.CODE_READINGS), against fedlib's FedPAC
PAC_TABLE, FEDLIB_PAC = "fedpac_readings", "fedlib"
PAC_READINGS: dict[str, CodeReading] = {FEDLIB_PAC: CodeReading("fedlib's FedPAC"), **CODE_READINGS,
                                        "all of the code's": ALL_OF_THE_CODE}


def _above_each(table: str, methods=METHODS, cell: str = "s = {}") -> Pairs:
    """FedGPA against each other method of ``methods`` in every cell (method, s) of ``table`` (``cell`` names the
    second key)."""
    return versus(table, "fedgpa", [m for m in methods if m != "fedgpa"], METRIC, slot=0, names=("", cell))


def _lead(table: dict, columns: int | None = None) -> float:
    """FedGPA's smallest lead over the best other method across the first ``columns`` (default all) of a paper table
    ({method: values per column})."""
    n = columns or len(table["fedgpa"])
    return round(min(table["fedgpa"][i] - max(v[i] for m, v in table.items() if m != "fedgpa") for i in range(n)), 2)


def _against_fedpac(where: str, table: dict, columns: list[str]) -> str:
    """The paper's FedGPA and FedPAC values in each named column of a paper table, in words."""
    return f"{where}: " + "; ".join(f"{name}: {table['fedgpa'][i]:.2f} vs FedPAC {table['fedpac'][i]:.2f}"
                                    for i, name in enumerate(columns))


def paper_gap(plus, minus, cells=None) -> float:
    """The smallest difference the paper's FMNIST tables report between the best of ``plus`` and the best of
    ``minus`` over ``cells`` ((setting, s); default all six)."""
    cells = cells or [(st, s) for st in SETTINGS for s in (20, 80)]
    return round(min(max(paper_accuracy(st, m, s) for m in plus) - max(paper_accuracy(st, m, s) for m in minus)
                     for st, s in cells), 2)


TABLE_OF_SETTING = {1: 2, 2: 4, 3: 5}   # the paper's table for each setting (FMNIST columns)
SETTINGS = tuple(TABLE_OF_SETTING)      # Settings 1-3 of Section 5.1.2
# what the notebook's own parameters may hold (lists of): checked before any cell runs; other shares of s are the
# s sweep's (Fig. 5), where the paper gives no table
NOTEBOOK_PARAMETERS = {"settings": SETTINGS, "s_values": PAPER_S, "methods": tuple(METHODS)}
MU_SWEEP = [0.0, 0.25, 0.5, 0.75, 1.0]
CLAIMS = (
    Claim("best", "FedGPA has the highest accuracy of all methods in every setting and s (Tables 2, 4, 5)",
          "For all datasets, FedGPA dominates the other methods on average test accuracy",
          "Section 5.2.1, Tables 2, 4, 5",
          (versus("comparison", "fedgpa", [*(m for m in METHODS if m != "fedgpa"),
                                            Row(PFEDME, "pFedMe", table=PFEDME_TABLE)], METRIC, slot=0,
                  names=CELL_NAMES),),
          "FMNIST: best in all 6 cells, by 0.18 (Setting 2, s = 20, over FedPAC) to 1.13 points",
          paper_gap(["fedgpa"], [m for m in METHODS if m != "fedgpa"]), 0.25,
          "the paper's leads over the runner-up are 0.18-1.13 points; a quarter point is about the smallest of them",
          reading="FedGPA above each of the ten other methods, pFedMe included, in each of the six cells (60 "
                  "comparisons); pFedAMF is not checkable offline (see the inventory)"),
    Claim("best_at_every_s", "FedGPA is above every baseline at every s from 0 to 80 (Fig. 5)",
          "Notably, our approach consistently surpasses other baseline methods, underscoring its adaptability and "
          "robustness across a variety of heterogeneous data scenarios", "Section 5.2.3, Fig. 5",
          (_above_each(SWEEP_TABLE),),
          "CIFAR-10, Setting 1, s from 0 to 80: FedGPA's curve above every baseline's (a figure: no numbers)", None,
          0.25, "a quarter point, as for Table 2: the paper's leads there are 0.18-1.13 points",
          reading="FedGPA above each of the nine other methods at s = 0, 20, 50 and 80 (FMNIST, Setting 1; 36 "
                  "comparisons); 'consistently' read as at every s"),
    Claim("best_with_more_data", "FedGPA is still above every baseline with 2,000 samples a client (Table A.8)",
          "These results demonstrate that FedGPA continues to deliver the best performance as the number of samples "
          "increases", "Appendix A.1, Table A.8",
          (_above_each(MORE_DATA_TABLE),),
          _against_fedpac("FMNIST, Setting 1*", PAPER_A8, [f"s = {s}" for s in PAPER_S]), _lead(PAPER_A8), 0.25,
          "a quarter point, as for Table 2; the paper's leads here are 0.20 (s = 80) and 0.46 (s = 20) over FedPAC",
          reading="FedGPA above each of the nine other methods at s = 20 and 80 with 2,000 samples a client (FMNIST, "
                  "Setting 1*; 18 comparisons)"),
    Claim("best_on_dirichlet", "FedGPA is still above every baseline on a Dirichlet partition (Table A.9)",
          "The results demonstrate that our method continues to achieve the best performance, which, to some extent, "
          "highlights the superiority and generalization ability of our approach", "Appendix A.2, Table A.9",
          (_above_each(DIRICHLET_TABLE, DIRICHLET_METHODS, "beta = {}"),),
          _against_fedpac("FMNIST, Setting 1 (Dirichlet)", PAPER_A9, [f"Dir({b:g})" for b in DIRICHLET_BETAS]),
          _lead(PAPER_A9), 0.25,
          "a quarter point, as for Table 2; the paper's leads here are 0.20 (Dir(1)) and 0.44 (Dir(0.3)) over FedPAC",
          reading="FedGPA above each of the ten other methods, pFedMe included, at beta = 0.3 and 1 (FMNIST, Setting "
                  "1's 600 samples a client, each client's class shares drawn from Dir(beta): the paper says it "
                  "partitions 'using the Dirichlet distribution' at 600 samples a client, which a class-wise split "
                  "over the clients cannot keep; 20 comparisons); pFedAMF is not checkable offline"),
    Claim("best_with_more_clients", "FedGPA is above Table 6's baselines with 20 and with 50 clients (Table 6)",
          "Applicability to large or partial client participation scenarios. To evaluate the scalability of FedGPA, we "
          "conducted experiments with varying numbers of clients", "Section 5.2.5, Table 6",
          (versus(CLIENTS_TABLE, "fedgpa", [m for m in PAPER_T6 if m != "fedgpa"], METRIC, slot=1,
                  names=("m = {}", "")),),
          _against_fedpac("CIFAR-10, Setting 3", PAPER_T6, [f"m = {m}" for m in CLIENT_COUNTS]),
          _lead(PAPER_T6, len(CLIENT_COUNTS)), 0.25,
          "a quarter point, as for Table 2; the paper's leads here are 0.02 (m = 20) and 0.34 (m = 50) over FedPAC",
          reading="FedGPA above each of FedAvg, SCAFFOLD, FedBABU and FedPAC with 20 and with 50 clients, every client "
                  "each round (FMNIST for CIFAR-10, Setting 3 at s = 20, Appendix A.2's default share: Table 6 names "
                  "no s; 8 comparisons); the section's sentence states no result, its table shows FedGPA first in "
                  "every column; m = 100 cannot be drawn as the paper states it (see the inventory)"),
    Claim("most_higher_at_low_s", "most methods are more accurate at s = 20 than at s = 80",
          "Under the three data heterogeneity settings, the accuracy of most models is higher when s is smaller than "
          "when s is higher", "Section 5.2.1",
          (Pairs("comparison", ((Row(20, "s = 20"), Row(80, "s = 80")),), METRIC, slot=2,
                 names=("{}", "Setting {}", "")),),
          "FMNIST Setting 1: 8 of 10 methods higher at s = 20",
          float(np.median([PAPER[st][m][0] - PAPER[st][m][1] for st in SETTINGS for m in METHODS])), 0.5,
          "the paper's own gains at s = 20 are mostly 1-5 points; under half a point a method is not 'higher'",
          kind="most", reading="a majority of the 30 (method, setting) pairs higher at s = 20"),
    Claim("ft_helps_then_hurts", "FedAvg-FT beats FedAvg at s = 20 but fine-tuning hurts at s = 80",
          "When s is smaller, FedAvg with local fine-tuning can serve as a strong baseline for PFL [...] However, when "
          "s is larger, FedAvg with local fine-tuning becomes counterproductive", "Section 5.2.1",
          (versus("comparison", "fedavg_ft", ["fedavg"], METRIC, slot=0, names=CELL_NAMES, where=((2, 20),)),
           versus("comparison", "fedavg", ["fedavg_ft"], METRIC, slot=0, names=CELL_NAMES, where=((2, 80),))),
          "FMNIST Setting 1: +1.94 at s = 20, -1.05 at s = 80", 1.05, 0.25,
          "the paper's smallest effect here is 1.05 points; a quarter point is well below it",
          reading="in every setting: FedAvg-FT above FedAvg at s = 20 and below it at s = 80"),
    Claim("single_model_behind", "methods with one global model (FedAvg, FedProx, SCAFFOLD) fall behind the "
          "split-model PFL methods",
          "The performance of methods like FedAvg, FedProx and SCAFFOLD, which only train a single global model, "
          "degrades significantly under these heterogeneity settings", "Section 5.2.1",
          (each_above("comparison", SPLIT_MODEL, SINGLE_MODEL, METRIC, slot=0, names=CELL_NAMES),),
          "FMNIST Setting 1, s = 20: best global 88.70 vs best PFL 90.04",
          paper_gap(SPLIT_MODEL, SINGLE_MODEL), 0.5, "'significantly' worse: half a point of accuracy at least",
          kind="best", reading="the best split-model method (FedBABU, FedPAC, FedGPA) above every single-model method "
                               "in every cell"),
    Claim("older_pfl_below", "FedPer and LG-FedAvg are below FedBABU and FedPAC",
          "We notice that traditional PFL methods like FedPer and LG-FedAvg perform poorly compared to recent works "
          "like FedBABU and FedPAC", "Section 5.2.1",
          (each_above("comparison", NEWER_PFL, OLDER_PFL, METRIC, slot=0, names=CELL_NAMES),),
          "FMNIST Setting 1, s = 20: 86.35 / 83.08 vs 88.83 / 89.66",
          round(min(min(paper_accuracy(st, m, s) for m in NEWER_PFL) - max(paper_accuracy(st, m, s) for m in OLDER_PFL)
                    for st in SETTINGS for s in (20, 80)), 2), 1.0,
          "'perform poorly': a gap under a point would not be called poor (the paper's gaps are 2.5-6 points)",
          reading="each of FedBABU and FedPAC above each of FedPer and LG-FedAvg in every cell (24 comparisons)"),
    Claim("ahead_while_training", "FedGPA is ahead of the baselines during the whole training (Fig. 7)",
          "From which, it can be seen that our method almost outperforms other baselines during the whole training "
          "process", "Appendix, Fig. 7 (the experiments of Table 2)",
          (versus("comparison", "fedgpa", [m for m in METHODS if m != "fedgpa"], MEAN_OVER_ROUNDS, slot=0,
                  names=CELL_NAMES, where=((1, 1),)),),
          "curves of Table 2's experiments", None, 0.25, "a quarter point of accuracy, as for the final values",
          reading="FedGPA's accuracy averaged over the evaluated rounds above each other method's, Setting 1 (Table "
                  "2), each s ('almost' read as on average over the rounds, not at every round)"),
    Claim("converges_faster", "FedGPA converges faster: it reaches each baseline's final accuracy in fewer rounds "
          "than the baseline (Fig. 7)", "The results confirm that our method not only converges faster but also "
          "achieves better performance under the same computational and communication conditions",
          "Appendix, Fig. 7 (the experiments of Table 2)",
          tuple(Comparison(f"{LABELS[m]}'s rounds − FedGPA's to {LABELS[m]}'s final accuracy, s = {s}",
                           (Read("comparison", (m, 1, s), FASTER[m, s], LABELS[m]),),
                           (Read("comparison", ("fedgpa", 1, s), FASTER[m, s], "FedGPA"),))
                for s in (20, 80) for m in METHODS if m != "fedgpa"),
          "curves of Table 2's experiments", None, 5.0, "one evaluation at paper scale (every 5 rounds)",
          unit="rounds", scales=("paper",),
          reading="per seed, the rounds each baseline takes to reach its own final accuracy (rounded down to half a "
                  "point) minus FedGPA's rounds to reach it, Setting 1 (Table 2), each s; where FedGPA never reaches "
                  "it, one evaluation past the last round. Paper scale only: the reference budget's two evaluations "
                  "(rounds 5 and 10) cannot resolve a speed"),
    Claim("fedavg_fastest", "FedAvg has the shortest round of Table 7's methods (Table 7)",
          "It is evident that FedAvg has the lowest average training time among all the methods",
          "Section 5.2.7, Table 7",
          rounds_above("fedavg", PAPER_T7, LABELS, ABOVE_FEDAVG),
          "FMNIST: FedAvg 6 min 10 s; FedBABU 6 min 23 s, FedProx 6 min 24 s, ..., FedGPA 7 min 33 s",
          round(min(100 * (v / PAPER_T7["fedavg"] - 1) for m, v in PAPER_T7.items() if m != "fedavg"), 2), 1.0,
          "one per cent of a round", unit="%", seeds=TIMING_REPEATS, scales=("paper",),
          reading="each other method's round in % above FedAvg's round of the same repetition, measured side by side "
                  "on one machine (a round: training, aggregation and the evaluation, where FedBABU fine-tunes); the "
                  "repetitions pair the comparisons, as seeds do elsewhere"),
    Claim("gpa_slightly_above_pac", "FedGPA's round is slightly longer than FedPAC's (Table 7)",
          "We observed that FedGPA slightly increased the computational cost compared to FedPAC, as the former "
          "additionally considers personalized aggregation of feature extractors", "Section 5.2.7, Table 7",
          (Comparison("FedGPA's round above FedPAC's, %", (Read(TIMED, "fedgpa", ABOVE_FEDPAC, "FedGPA"),)),
           Comparison(f"{SLIGHTLY:g}% − FedGPA's round above FedPAC's", (),
                      (Read(TIMED, "fedgpa", ABOVE_FEDPAC, "FedGPA"),), shift=-SLIGHTLY)),
          "FMNIST: FedGPA 7 min 33 s, FedPAC 7 min 28 s",
          round(100 * (PAPER_T7["fedgpa"] / PAPER_T7["fedpac"] - 1), 2), 0.5, "half a per cent of a round",
          unit="%", seeds=TIMING_REPEATS, scales=("paper",),
          reading=f"FedGPA's round longer than FedPAC's of the same repetition, and by less than {SLIGHTLY:g}% "
                  "('slightly'), measured side by side on one machine"),
    Claim("each_module_adds", "each module adds accuracy: None < +LGA < +GPA(c) < +GPA(f) (Table 3)",
          "As outlined in Table 3, the inclusion of each module results in enhanced average test accuracy, with their "
          "combined utilization yielding the most favourable model performance", "Section 5.2.2, Table 3",
          (chain("ablation", list(ABLATION), METRIC),),
          "FMNIST: " + " < ".join(f"{v[1]}" for v in ABLATION.values()),
          round(min(b[1] - a[1] for a, b in zip(list(ABLATION.values()), list(ABLATION.values())[1:])), 2), 0.1,
          "the paper's smallest step (+GPA(f)) is 0.26 points; a tenth of a point is below it",
          reading="each row above the one before it (Setting 1, s = 20)"),
    Claim("mu_balance", "mu between 0.4 and 0.6 gives a good balance (Fig. 3)",
          "In general, mu values between 0.4 and 0.6 provide a good balance, resulting in stable and strong "
          "performance", "Section 5.2.4, Fig. 3",
          (Pairs("mu_sweep", tuple((Row(0.5, "mu = 0.5"), Row(mu, f"mu = {mu:g}")) for mu in MU_SWEEP if mu != 0.5),
                 METRIC, slot=1, names=("s = {}", ""), test="noninferior"),),
          "CIFAR-10/FMNIST curves peak at mu = 0.4-0.6", None, 0.5,
          "'a good balance' read as within half a point of every other mu (the curves span about a point)",
          reading="mu = 0.5 (the sweep's value inside [0.4, 0.6]) not below any other mu by more than delta, at each s "
                  "(Setting 3)"),
    Claim("extractor_weights_even", "extractor weights are spread more evenly than classifier weights (Fig. 4)",
          "feature extractors exhibit a more evenly distributed weight aggregation, promoting generalization",
          "Section 5.2.5, Fig. 4",
          tuple(Comparison(f"row entropy alpha − beta, s = {s}", (Read("comparison", ("fedgpa", 3, s), ENTROPY["alpha"],
                                                                       "alpha"),),
                           (Read("comparison", ("fedgpa", 3, s), ENTROPY["beta"], "beta"),)) for s in (20, 80)),
          "CIFAR-10 Setting 3 heat maps", None, 0.1,
          "a tenth of a nat of row entropy: about a 10% change in the effective number of clients a row mixes",
          reading="the mean row entropy of FedGPA's last logged alpha above beta's, Setting 3, each s", unit="nats"),
    Claim("weights_concentrate", "weights concentrate on the client itself as heterogeneity grows (s = 80 -> s = 20)",
          "As data heterogeneity increases (with s decreasing from 80 to 20), both classifiers and feature extractors "
          "tend to assign more weight to their own local model", "Section 5.2.5, Fig. 4",
          tuple(Comparison(f"self-weight in {w}, s = 20 − s = 80",
                           (Read("comparison", ("fedgpa", 3, 20), SELF_WEIGHT[w], f"{w} at s = 20"),),
                           (Read("comparison", ("fedgpa", 3, 80), SELF_WEIGHT[w], f"{w} at s = 80"),))
                for w in ("alpha", "beta")),
          "CIFAR-10 Setting 3 heat maps", None, 0.01,
          "a hundredth of a row's weight (with 20 clients a uniform row gives each 0.05)",
          reading="the mean self-weight of FedGPA's last logged alpha and of beta higher at s = 20 than at s = 80 "
                  "(Setting 3)", unit="weight"),
    Claim("fedpac_as_its_code", "FedPAC run as its authors' code runs it is within a point of fedlib's FedPAC",
          "(a hypothesis of this book about the FedPAC baseline, which decides claims here, in FedMate's chapter and "
          "on the side-by-side page)", "FedPAC's official code (github.com/JianXu95/FedPAC)",
          (Pairs(PAC_TABLE, tuple((Row(name, name), Row(FEDLIB_PAC, "fedlib's FedPAC")) for name in PAC_READINGS
                                  if name != FEDLIB_PAC), METRIC, slot=0, names=("", "s = {}"), test="equivalent"),),
          "-", None, 1.0, "a point of accuracy: FedGPA's leads over FedPAC in the paper are 0.18-0.73 points",
          hypothesis=True, scales=("reference",),
          reading="each of the code's readings (and all four at once) against fedlib's FedPAC, Setting 1, each s, "
                  "within +-delta (two one-sided tests); the FedGPA paper states plain SGD at lr 0.02 and its own CNN "
                  "for every method, which is fedlib's FedPAC"),
)
TABLE_RUNS = {SWEEP_TABLE: "the comparison's ten methods at s in {0, 20, 50, 80}, Setting 1 (Fig. 5; s = 20 and 80 are "
                           "the comparison's runs)",
              MORE_DATA_TABLE: "the comparison's ten methods at s in {20, 80}, Setting 1 with 2,000 samples a client "
                               "(Table A.8)",
              CLIENTS_TABLE: "Table 6's five methods with 20 and with 50 clients, Setting 3, s = 20 (m = 20 is the "
                             "comparison's runs)",
              DIRICHLET_TABLE: "the comparison's ten methods and pFedMe at beta in {0.3, 1}, Setting 1's 600 samples a "
                               "client with class shares ~ Dir(beta) (Table A.9)",
              "comparison": "10 methods x Settings 1-3 x s in {20, 80} (Fig. 4 reads FedGPA's logged weights in "
                            "Setting 3)",
              "ablation": "FedGPA with its modules switched on one by one, Setting 1, s = 20",
              "mu_sweep": f"FedGPA, mu in {MU_SWEEP}, Setting 3, s in {{20, 80}}",
              PFEDME_TABLE: "pFedMe in the comparison's six cells (a round costs 4.9x FedAvg's: 36.9 s against 7.6 s, "
                            "Setting 1, measured beside the recorder)",
              "fedpac_readings": "FedPAC as fedlib runs it and as its authors' code does (each reading alone, then all "
                                 "four), Setting 1, s in {20, 80}",
              TIMED: "Table 7's six methods, a round of each per repetition, timed side by side on one machine "
                        "(python -m fedlib timing fedgpa: results/timing/fedgpa.json)"}

INVENTORY = (
    Sentence("For all datasets, FedGPA dominates the other methods on average test accuracy", "5.2.1", claim="best"),
    Sentence("Under the three data heterogeneity settings, the accuracy of most models is higher when s is smaller "
             "than when s is higher", "5.2.1", claim="most_higher_at_low_s"),
    Sentence("When s is smaller, FedAvg with local fine-tuning can serve as a strong baseline for PFL [...] when s is "
             "larger, FedAvg with local fine-tuning becomes counterproductive", "5.2.1", claim="ft_helps_then_hurts"),
    Sentence("The performance of methods like FedAvg, FedProx and SCAFFOLD, which only train a single global model, "
             "degrades significantly", "5.2.1", claim="single_model_behind"),
    Sentence("traditional PFL methods like FedPer and LG-FedAvg perform poorly compared to recent works like "
             "FedBABU and FedPAC", "5.2.1", claim="older_pfl_below"),
    Sentence("the inclusion of each module results in enhanced average test accuracy, with their combined utilization "
             "yielding the most favourable model performance", "5.2.2, Table 3", claim="each_module_adds"),
    Sentence("In general, mu values between 0.4 and 0.6 provide a good balance", "5.2.4, Fig. 3", claim="mu_balance"),
    Sentence("Compared to classifiers, feature extractors exhibit a more evenly distributed weight aggregation",
             "5.2.6, Fig. 4", claim="extractor_weights_even"),
    Sentence("As data heterogeneity increases [...] both classifiers and feature extractors tend to assign more "
             "weight to their own local model", "5.2.6, Fig. 4", claim="weights_concentrate"),
    Sentence("We compare the following baselines: [...] pFedMe", "5.1.3", claim="best"),
    Sentence("We compare the following baselines: [...] pFedAMF (Yao et al., 2024), which addresses knowledge "
             "forgetting by adaptively fusing global, local, and historical knowledge", "5.1.3",
             offline="pFedAMF's paper is not available here and no code of it was found; the FedGPA paper gives it "
                     "one sentence, too little to implement the method faithfully"),
    Sentence("Notably, our approach consistently surpasses other baseline methods, underscoring its adaptability and "
             "robustness across a variety of heterogeneous data scenarios", "5.2.3, Fig. 5 (CIFAR-10, s from 0 to 80)",
             claim="best_at_every_s"),
    Sentence("[Table 6: FedGPA first with m = 20 and m = 50 clients, every client a round]", "5.2.5, Table 6 "
             "(CIFAR-10, Setting 3)", claim="best_with_more_clients"),
    Sentence("[Table 6: FedGPA first with m = 100 clients, a fifth of them a round]", "5.2.5, Table 6 (CIFAR-10, "
             "Setting 3)", offline="no run can draw it as the paper states it: Setting 3 gives a client 300, 900 or "
                                   "1,500 samples, so 100 clients need about 90,000 distinct images, more than "
                                   "CIFAR-10's 50,000 or FMNIST's 60,000 (the skew partition runs out of a class at "
                                   "every seed tried); the paper does not say how it drew them"),
    Sentence("It is evident that FedAvg has the lowest average training time among all the methods", "5.2.7, Table 7",
             claim="fedavg_fastest"),
    Sentence("We observed that FedGPA slightly increased the computational cost compared to FedPAC", "5.2.7, Table 7",
             claim="gpa_slightly_above_pac"),
    Sentence("These results demonstrate that FedGPA continues to deliver the best performance as the number of samples "
             "increases", "Appendix, Table A.8 (Setting 1*: 2,000 samples a client)", claim="best_with_more_data"),
    Sentence("The results demonstrate that our method continues to achieve the best performance", "Appendix, Table A.9 "
             "(Setting 1 with a Dirichlet partition)", claim="best_on_dirichlet"),
    Sentence("our method almost outperforms other baselines during the whole training process", "Appendix, Fig. 7",
             claim="ahead_while_training"),
    Sentence("The results confirm that our method not only converges faster but also achieves better performance",
             "Appendix, Fig. 7", claim="converges_faster"),
    Sentence("[the same comparisons on EMNIST, CIFAR-10, CIFAR-100 and CINIC-10]", "Tables 2-5",
             offline="the datasets are not available offline (`--download` fetches them for online users); the book "
                     "checks the FMNIST columns"),
)


# ---------------------------------------------------------------------- the recorded grids
LOCAL_TEST = local("each client's local test set (test images drawn with the client's own label mix)")


def comparison_grid(settings, s_values, methods, scale: str) -> dict:
    seeds = SCALES[scale].seeds
    return {
        (m, st, s): with_seeds(config(m, st, s, scale), seeds) for st in settings for s in s_values for m in methods
    }


def s_sweep_grid(scale: str) -> dict:
    """Fig. 5: {(method, s): configs over the sweep's seeds}, Setting 1."""
    return {(m, s): with_seeds(config(m, 1, s, scale), SCALES[scale].sweep_seeds) for s in SWEEP_S for m in METHODS}


def more_data_grid(scale: str) -> dict:
    """Table A.8: {(method, s): configs over the sweep's seeds}, Setting 1 with 2,000 samples a client (the scale's
    data divisor applies)."""
    return {(m, s): with_seeds(config(m, 1, s, scale, n=MORE_DATA_N), SCALES[scale].sweep_seeds)
            for s in PAPER_S for m in METHODS}


def dirichlet_grid(scale: str) -> dict:
    """Table A.9: {(method, beta): configs over the sweep's seeds}, Setting 1's size with Dir(beta) class shares."""
    return {(m, b): with_seeds(config(m, 1, 0, scale, beta=b), SCALES[scale].sweep_seeds)
            for b in DIRICHLET_BETAS for m in DIRICHLET_METHODS}


def clients_grid(scale: str) -> dict:
    """Table 6: {(m, method): configs over the sweep's seeds}, Setting 3 at s = 20 with m clients, all of them a
    round."""
    return {(m, method): with_seeds(config(method, CLIENTS_SETTING, CLIENTS_S, scale, clients=m),
                                    SCALES[scale].sweep_seeds) for m in CLIENT_COUNTS for method in PAPER_T6}


def ablation_grid(scale: str) -> dict:
    seeds = SCALES[scale].ablation_seeds
    return {name: with_seeds(config("fedgpa", 1, 20, scale, hyper=hp), seeds) for name, (hp, _) in ABLATION.items()}


HYPER_REASONS: dict[str, str] = {}


def reference_run(scale: str) -> Config:
    """The run the hyperparameter table reads (the headline table's), at ``scale``."""
    return config("fedgpa", 1, 20, scale)


def protocol(scale: str) -> tuple[list[dict], str]:
    """The evaluation protocol per method (Tables 2, 4, 5: personalized accuracy on each client's local test)."""
    from fedlib.studies.settings import protocol_rows

    return protocol_rows({LABELS[m]: config(m, 1, 20, scale) for m in METHODS}, {"accuracy": "personal_local"})


def mu_sweep_grid(s_values, scale: str) -> dict:
    seeds = SCALES[scale].sweep_seeds
    return {
        (s, mu): with_seeds(config("fedgpa", 3, s, scale, hyper={"mu": mu}), seeds) for s in s_values for mu in MU_SWEEP
    }


def fedpac_readings_grid(scale: str) -> dict:
    """FedPAC under each of its code's readings, Setting 1, s in {20, 80}: {(reading, s): configs over the sweep's
    seeds}; fedlib's own FedPAC is the comparison's cell (the same records)."""
    seeds = SCALES[scale].sweep_seeds
    return {(name, s): with_seeds(reading.applied(config("fedpac", 1, s, scale)), seeds)
            for name, reading in PAC_READINGS.items() for s in (20, 80)}


CONVERGENCE = ("fedgpa", "fedpac")   # the paper's method and its main baseline, run 3x longer at reference scale
CONVERGENCE_METRIC = METRIC   # what the convergence check reads (the notebook's convergence section)


def tables(scale: str) -> dict:
    """The recorded grid of every table at ``scale`` (reference or paper), most needed first (``python -m fedlib
    records fedgpa [--scale reference]``): Tables 2/4/5, the Table 3 ablation, the mu sweep of Fig. 3; at
    reference scale also FedGPA and FedPAC at 3x the rounds (Setting 1, s = 20, seed 0): the convergence check.
    ``headline`` is Table 2 alone (part of the comparison, so it adds no fp32 run)."""
    out = {"comparison": comparison_grid(SETTINGS, (20, 80), METHODS, scale), "ablation": ablation_grid(scale),
           "mu_sweep": mu_sweep_grid((20, 80), scale),
           PFEDME_TABLE: comparison_grid(SETTINGS, (20, 80), [PFEDME], scale),
           # Table 2 (Setting 1) alone, inside the comparison: the table a precision check records again
           # (records fedgpa --scale reference --precision bf16 --tables headline)
           "headline": comparison_grid((1,), (20, 80), METHODS, scale),
           SWEEP_TABLE: s_sweep_grid(scale), MORE_DATA_TABLE: more_data_grid(scale),
           DIRICHLET_TABLE: dirichlet_grid(scale), CLIENTS_TABLE: clients_grid(scale)}
    if scale == "reference":   # the evidence first: it is cheap and says what the budget can decide
        out = {"convergence": convergence_grid(comparison_grid((1,), (20,), CONVERGENCE, scale)), **out,
               PAC_TABLE: fedpac_readings_grid(scale)}
    return out


register_chapter(__name__, "FedGPA", place=1)
