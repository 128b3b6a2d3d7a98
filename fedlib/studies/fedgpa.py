"""The FedGPA chapter's experiments: scales, configuration grid, the paper's reported numbers.

FMNIST is the one dataset of FedGPA's Tables 2-5 available offline. Paper numbers below are
transcribed from Han et al. (2025), Tables 2, 3, 4 and 5 (FMNIST columns, final test accuracy %,
mean over clients, 3 runs).
"""
from __future__ import annotations

import numpy as np

from fedlib.data.partition import fedgpa_setting
from fedlib.errors import check
from fedlib.experiment import Config, make_config
from fedlib.studies.common import RUNTIME, fmt, mean_std, run_all, set_runtime, with_seeds  # noqa: F401  (the chapter uses them)

METHODS = ["local", "fedavg", "fedavg_ft", "fedprox", "scaffold", "fedper", "lg_fedavg", "fedbabu", "fedpac",
           "fedgpa"]
LABELS = {"local": "Local", "fedavg": "FedAvg", "fedavg_ft": "FedAvg-FT", "fedprox": "FedProx",
          "scaffold": "SCAFFOLD", "fedper": "FedPer", "lg_fedavg": "LG-FedAvg", "fedbabu": "FedBABU",
          "fedpac": "FedPAC", "fedgpa": "FedGPA"}

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
# Table 3, FMNIST row (Setting 1, s = 20): cumulative modules
ABLATION = {"None": ({"lga": False, "gpa_c": False, "gpa_f": False}, 86.71),
            "+ LGA": ({"lga": True, "gpa_c": False, "gpa_f": False}, 88.54),
            "+ GPA(c)": ({"lga": True, "gpa_c": True, "gpa_f": False}, 89.78),
            "+ GPA(f)": ({"lga": True, "gpa_c": True, "gpa_f": True}, 90.04)}

# Training budget per scale. n_divisor shrinks every client's n (Setting 1: 600 -> 600/n_divisor).
SCALES = {
    "ci": dict(rounds=2, local_epochs=1, n_divisor=10, seeds=[0], sweep_seeds=[0], eval_every=1, global_test=2000),
    "book": dict(rounds=8, local_epochs=1, n_divisor=4, seeds=[0], sweep_seeds=[0], eval_every=2, global_test=2000),
    "paper": dict(rounds=150, local_epochs=5, n_divisor=1, seeds=[0, 1, 2], sweep_seeds=[0, 1, 2], eval_every=5,
                  global_test=None),
}
METRIC = "personal_local_acc"  # FedGPA: average over clients of test accuracy on their local test sets


def scale_info(scale: str) -> dict:
    check(scale in SCALES, "scale", scale, f"one of {', '.join(SCALES)}")
    return SCALES[scale]


def config(method: str, setting: int, s: float, scale: str, seed: int = 0, hyper: dict | None = None,
           device: str | None = None) -> Config:
    """FedGPA Section 5.1: FMNIST, 20 clients, full participation, SGD lr 0.02, batch 50."""
    sc = scale_info(scale)
    spec = fedgpa_setting(setting, 10)
    n = spec["n"]
    n = n // sc["n_divisor"] if np.isscalar(n) else [v // sc["n_divisor"] for v in n]
    return make_config(method=method, dataset="fmnist", partition={"name": "skew", "s": s, "n": n, "k": spec["k"]},
                       num_clients=20, rounds=sc["rounds"], local_epochs=sc["local_epochs"], batch_size=50, lr=0.02,
                       eval_every=sc["eval_every"], hyper=hyper or {}, seed=seed, device=device or RUNTIME["device"],
                       executor=RUNTIME["executor"], global_test_size=sc["global_test"])  # the chapter reports personalized accuracy only


# ---------------------------------------------------------------------- claims of the paper
def verdicts(runs: dict, settings, s_values, methods, ablation: dict | None = None, mu_sweep: dict | None = None,
             metric: str = METRIC) -> list:
    """Each claim of FedGPA's Section 5.2, checked on this chapter's runs.

    ``runs``: {(method, setting, s): records}; ``ablation``: {row name: records} (Table 3);
    ``mu_sweep``: {s: {mu: (mean, std, n)}} (Fig. 3)."""
    from fedlib.studies.common import Claim, entropy_rows, mean_std

    acc = {k: 100 * mean_std(v, metric)[0] for k, v in runs.items()}
    cells = [(st, s) for st in settings for s in s_values]
    claims = []
    if "fedgpa" in methods:
        best = {c: max(methods, key=lambda m: acc[(m, *c)]) for c in cells}
        wins = [c for c in cells if best[c] == "fedgpa"]
        worst_gap = min(cells, key=lambda c: acc[("fedgpa", *c)] - acc[(best[c], *c)])
        claims.append(Claim(
            "FedGPA has the highest accuracy of all methods in every setting and s (Tables 2, 4, 5)",
            "FMNIST: best in all 6 cells, e.g. Setting 1, s=20: 90.04 vs FedPAC 89.66",
            f"best in {len(wins)} of {len(cells)} cells; largest shortfall: Setting {worst_gap[0]}, s={worst_gap[1]}: "
            f"FedGPA {acc[('fedgpa', *worst_gap)]:.2f} vs {LABELS[best[worst_gap]]} "
            f"{acc[(best[worst_gap], *worst_gap)]:.2f}", len(wins) == len(cells)))
    if len(s_values) > 1 and min(s_values) != max(s_values):
        lo, hi = min(s_values), max(s_values)
        per_setting = {st: sum(acc[(m, st, lo)] > acc[(m, st, hi)] for m in methods) for st in settings}
        claims.append(Claim(
            f"most methods are more accurate at s={lo} than at s={hi} (stronger skew, more local structure)",
            "FMNIST Setting 1: 8 of 10 methods higher at s=20",
            "; ".join(f"Setting {st}: {n} of {len(methods)}" for st, n in per_setting.items()),
            all(n > len(methods) / 2 for n in per_setting.values())))
        if {"fedavg", "fedavg_ft"} <= set(methods):
            ok = [acc[("fedavg_ft", st, lo)] > acc[("fedavg", st, lo)] and acc[("fedavg_ft", st, hi)] < acc[("fedavg", st, hi)]
                  for st in settings]
            claims.append(Claim(
                f"FedAvg-FT beats FedAvg at s={lo} but fine-tuning hurts at s={hi}",
                "FMNIST Setting 1: +1.94 at s=20, -1.05 at s=80",
                "; ".join(f"Setting {st}: {acc[('fedavg_ft', st, lo)] - acc[('fedavg', st, lo)]:+.2f} / "
                          f"{acc[('fedavg_ft', st, hi)] - acc[('fedavg', st, hi)]:+.2f}" for st in settings),
                all(ok)))
    single = [m for m in ("fedavg", "fedprox", "scaffold") if m in methods]
    split = [m for m in ("fedbabu", "fedpac", "fedgpa") if m in methods]
    if single and split:
        gaps = [max(acc[(m, *c)] for m in split) - max(acc[(m, *c)] for m in single) for c in cells]
        claims.append(Claim(
            "methods with one global model (FedAvg, FedProx, SCAFFOLD) fall behind the split-model PFL methods",
            "FMNIST Setting 1, s=20: best global 88.70 vs best PFL 90.04",
            f"best split-model method minus best global method: {min(gaps):+.2f} to {max(gaps):+.2f} points over "
            f"{len(cells)} cells", min(gaps) > 0))
    older = [m for m in ("fedper", "lg_fedavg") if m in methods]
    newer = [m for m in ("fedbabu", "fedpac") if m in methods]
    if older and newer:
        gaps = [min(acc[(m, *c)] for m in newer) - max(acc[(m, *c)] for m in older) for c in cells]
        claims.append(Claim(
            "FedPer and LG-FedAvg are below FedBABU and FedPAC",
            "FMNIST Setting 1, s=20: 86.35 / 83.08 vs 88.83 / 89.66",
            f"worse of FedBABU/FedPAC minus better of FedPer/LG-FedAvg: {min(gaps):+.2f} to {max(gaps):+.2f}",
            min(gaps) > 0))
    if ablation:
        vals = [100 * mean_std(ablation[name], metric)[0] for name in ABLATION]
        claims.append(Claim(
            "each module adds accuracy: None < +LGA < +GPA(c) < +GPA(f) (Table 3)",
            "FMNIST: " + " < ".join(f"{v[1]}" for v in ABLATION.values()),
            " / ".join(f"{name} {v:.2f}" for name, v in zip(ABLATION, vals)),
            all(b > a for a, b in zip(vals, vals[1:]))))
    if mu_sweep:
        best_mu = {s: max(res, key=lambda mu: res[mu][0]) for s, res in mu_sweep.items()}
        claims.append(Claim(
            "mu between 0.4 and 0.6 is best (Fig. 3)",
            "CIFAR-10/FMNIST curves peak at mu = 0.4-0.6",
            "; ".join(f"s={s}: best mu {mu} ({100 * mu_sweep[s][mu][0]:.2f})" for s, mu in best_mu.items()),
            all(0.4 <= mu <= 0.6 for mu in best_mu.values())))
    weight_rows = {s: [row for row in runs[("fedgpa", 3, s)][0]["history"] if "weights" in row]
                   for s in s_values if ("fedgpa", 3, s) in runs}
    if weight_rows and all(weight_rows.values()):
        last = {s: rows[-1]["weights"] for s, rows in weight_rows.items()}
        ent = {s: (entropy_rows(w["alpha"]), entropy_rows(w["beta"])) for s, w in last.items()}
        claims.append(Claim(
            "extractor weights are spread more evenly than classifier weights (Fig. 4)",
            "CIFAR-10 Setting 3 heat maps",
            "; ".join(f"s={s}: row entropy alpha {a:.2f} vs beta {b:.2f} nats" for s, (a, b) in ent.items()),
            all(a > b for a, b in ent.values())))
        if len(last) > 1:
            lo, hi = min(last), max(last)
            selves = {s: (float(np.mean(np.diag(w["alpha"]))), float(np.mean(np.diag(w["beta"])))) for s, w in last.items()}
            claims.append(Claim(
                f"weights concentrate on the client itself as heterogeneity grows (s={hi} -> s={lo})",
                "CIFAR-10 Setting 3 heat maps",
                f"mean self-weight alpha {selves[hi][0]:.3f} -> {selves[lo][0]:.3f}, beta {selves[hi][1]:.3f} -> "
                f"{selves[lo][1]:.3f}", selves[lo][0] > selves[hi][0] and selves[lo][1] > selves[hi][1]))
    return claims


# ---------------------------------------------------------------------- the paper-scale grid
def paper_grid(seeds=None) -> list[Config]:
    """Every paper-scale configuration the chapter reads from ``results/fedgpa/``, most needed first:
    Table 2/4/5 one seed at a time (a partial run still fills whole tables), then the Table 3 ablation
    and the mu sweep of Fig. 3. Duplicates (the ablation's full model is FedGPA) are dropped."""
    sc = SCALES["paper"]
    seeds = sc["seeds"] if seeds is None else seeds
    out = [config(m, st, s, "paper", seed=seed) for seed in seeds for st in (1, 2, 3) for s in (20, 80)
           for m in METHODS]
    out += [config("fedgpa", 1, 20, "paper", seed=seed, hyper=hp) for seed in seeds for hp, _ in ABLATION.values()]
    out += [config("fedgpa", 3, s, "paper", seed=seed, hyper={"mu": mu}) for seed in sc["sweep_seeds"]
            for s in (20, 80) for mu in MU_SWEEP]
    unique = {}
    for cfg in out:
        unique.setdefault(cfg.key(), cfg)
    return list(unique.values())


MU_SWEEP = [0.0, 0.25, 0.5, 0.75, 1.0]


# Paper-scale cells more than 2 points from the paper, and what we know of why (shown under the table).
GAP_NOTES = {
    "fedbabu": "our FedBABU fine-tunes the whole model for 1 epoch at the training lr (0.02) before evaluation; "
               "that lowers its accuracy below its own un-fine-tuned global model on the same local tests "
               "(the record's global_local_acc), so the gap comes from this fine-tuning choice: FedGPA's paper "
               "does not state FedBABU's fine-tuning epochs, learning rate or which layers it tunes",
}


def gap_note(method: str, records: list[dict]) -> str:
    """Why a paper-scale cell is off by more than 2 points, with the record's own numbers."""
    note = GAP_NOTES.get(method, "not explained yet (one seed so far; the spread over seeds is not measured at "
                                 "paper scale)")
    own = [r["final"].get("global_local_acc") for r in records]
    if method == "fedbabu" and all(v is not None for v in own):
        note += f" (global model {100 * np.mean(own):.2f} vs fine-tuned " \
                f"{100 * np.mean([r['final'][METRIC] for r in records]):.2f})"
    return note


def complete_settings(stored: dict, s_values=(20, 80)) -> list[int]:
    """Settings whose every (method, s) cell has at least one current paper-scale record."""
    return [st for st in (1, 2, 3) if all(stored[(m, st, s)]["records"] for m in METHODS for s in s_values)]
