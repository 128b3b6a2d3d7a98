"""The FedMate chapter's experiments: FMNIST (analogue of CIFAR-10 and CINIC-10) and MNIST (analogue
of EMNIST), the paper's protocol and reported numbers.

Paper numbers are transcribed from Yang et al. (ECAI 2025), Tables 1 and 2 (mean accuracy over clients,
%; the paper does not say what its "±" is). CIFAR-100 (Table 2) and Cityscapes (Table 3) have no
offline analogue. The paper's appendices (algorithm, hyperparameters) are missing from its text; the
protocol follows the official code's defaults (../shared/specs/fedmate.md, section 2).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fedlib.experiment import Config, make_config
from fedlib.plots import chance_line
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
from fedlib.studies.report import balanced, fmt_of, local

TABLE1 = ["local", "fedavg_ft", "fedproto", "lg_fedavg", "fedper", "fedrep", "fedbabu", "fedpac", "fedmate"]
TABLE2 = ["local", "fedavg_ft", "moon", "fedproto", "fedfa", "lg_fedavg", "fedper", "fedrep", "fedbabu", "fedpac",
          "fedmate"]
LABELS = method_labels(["local", "fedavg_ft", "fedproto", "lg_fedavg", "fedper", "fedrep", "fedbabu", "fedpac",
                        "fedmate", "moon", "fedfa"], fedavg_ft="FT-FedAvg")
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
SCALES = Scales(
    ci=dict(clients=6, n=60, rounds=2, cls_epochs=1, epochs=1, eval_every=1, headline_seeds=[0], seeds=[0],
            table2_seeds=[0], repeat_seeds=[0],
            table1_cells=[("fmnist", 10), ("mnist", 10)], table2_datasets=["fmnist"], repeat=[0.25],
            global_test=1000, lr=0.01, batch=50),
    book=dict(clients=20, n=60, rounds=6, cls_epochs=1, epochs=1, eval_every=6, headline_seeds=[0, 1, 2], seeds=[0],
            table2_seeds=[0], repeat_seeds=[0],
            table1_cells=[("fmnist", 10), ("fmnist", 70)], table2_datasets=["fmnist"],
            repeat=[0.1, 0.5], global_test=1000, lr=0.1, batch=10),
    # seeds 3 and 4 of Table 2 and of Fig. 5 were added after their 3-seed verdicts came out inconclusive
    # (``verdicts.second_look``)
    reference=dict(clients=20, n=600, rounds=40, cls_epochs=1, epochs=2, eval_every=5, headline_seeds=[0, 1, 2],
            seeds=[0, 1, 2], table2_seeds=[0, 1, 2, 3, 4], repeat_seeds=[0, 1, 2, 3, 4],
            table1_cells=[("fmnist", 10), ("fmnist", 70)], table2_datasets=["fmnist"], repeat=[0.1, 0.5],
            global_test=None, lr=0.01, batch=50),
    paper=dict(clients=20, n=600, rounds=200, cls_epochs=1, epochs=5, eval_every=10, headline_seeds=[0, 1, 2],
            seeds=[0, 1, 2], table2_seeds=[0, 1, 2], repeat_seeds=[0, 1, 2],
            table1_cells=[("fmnist", 10), ("fmnist", 30), ("fmnist", 50), ("fmnist", 70), ("mnist", 10),
            ("mnist", 70)], table2_datasets=["fmnist", "mnist"], repeat=[0.1, 0.25, 0.35, 0.5],
            global_test=None, lr=0.01, batch=50),
)
# the book's learning rate is chosen with this run (``python -m fedlib tune fedmate``)
TUNING = dict(method="fedavg_ft", args=dict(dataset="fmnist", s=10), metric="personal_global_acc")


def scale_summary(scale: str) -> str:
    """What the chapter trains at ``scale`` next to what the paper trains (printed by the notebook's set-up)."""
    sc = SCALES[scale]
    return "\n".join([
        f"scale {scale}: {sc['clients']} clients of {sc['n']} samples, {sc['rounds']} rounds, classifier phase "
        f"{sc['cls_epochs']} epoch + {sc['epochs']} extractor epochs, seeds {sc['headline_seeds']} (Table 1), "
        f"{sc['table2_seeds']} (Table 2), {sc['repeat_seeds']} (Fig. 5), {sc['seeds']} (the rest), "
        f"batch {sc['batch']}, SGD lr {sc['lr']}",
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
        part = {"name": "shards", "s": shards, "per_class": sc["n"] * sc["clients"] // 10}
    else:
        part = {"name": "skew", "s": s, "n": sc["n"], "k": 3}
    if repeat:
        part["repeat"] = repeat
    hp = {
        "fedmate": {"cls_epochs": sc["cls_epochs"]},
        "fedrep": {"head_epochs": sc["cls_epochs"], "body_epochs": sc["epochs"]},
        "fedpac": {"head_epochs": sc["cls_epochs"]},
    }.get(method, {})
    hp.update(hyper or {})
    return make_config(method=method, dataset=dataset, partition=part, num_clients=sc["clients"], rounds=sc["rounds"],
                       local_epochs=sc["epochs"], batch_size=sc["batch"], lr=sc["lr"], momentum=0.5, weight_decay=5e-4,
                       eval_every=sc["eval_every"], hyper=hp, seed=seed, eval_personal_global=True,
                       global_test_size=sc["global_test"], device=RUNTIME["device"], executor=RUNTIME["executor"])


def ablation_config(row: str, dataset: str, s: float, scale: str, seed: int = 0) -> Config:
    return config("fedmate", dataset, scale, s=s, seed=seed, hyper=dict(ABLATION[row]))


# ---------------------------------------------------------------------- claims of the paper
def verdicts(table1: dict, table2: dict, repeat: dict | None, cft: dict | None, scale_cells) -> list[Claim]:
    """``table1``: {(dataset, s): {row: records}} (rows: methods and ablation names), metric
    personal_global_acc; ``table2``: {dataset: {method: records}}, metric personal_local_acc;
    ``repeat``: {(method, ratio): records} (Fig. 5); ``cft``: {"with": records, "without": records}."""
    from fedlib.studies.verdicts import PerSeed

    t1_seed = PerSeed({(cell, r): recs for cell, rows in table1.items() for r, recs in rows.items()},
                      "personal_global_acc")

    def fedmate_best(a):   # FedMate minus the best other Table 1 method, in its worst cell
        return min(a[(cell, "fedmate")] - max(a[(cell, r)] for r in rows if r in TABLE1 and r != "fedmate")
                   for cell, rows in table1.items())

    def table1_words(a):   # cells won, and the closest cell (never FedMate against itself)
        wins = []
        for cell, rows in table1.items():
            rival = max((r for r in rows if r in TABLE1 and r != "fedmate"), key=lambda r: a[(cell, r)])
            wins.append((a[(cell, "fedmate")] - a[(cell, rival)], cell, rival))
        lead, cell, rival = min(wins)
        return (f"best in {sum(w > 0 for w, _, _ in wins)} of {len(wins)} cells; "
                f"{'largest shortfall' if lead < 0 else 'smallest lead'} {cell[0].upper()} s={cell[1]}: "
                f"FedMate {a[(cell, 'fedmate')]:.2f} vs {LABELS[rival]} {a[(cell, rival)]:.2f}")

    claims = [t1_seed.claim("FedMate generalizes best: highest accuracy of the personalized models on a balanced "
                            "test (Table 1)", "best in 7 of 8 columns (FedPAC wins CINIC-10 s=10)", fedmate_best,
                            table1_words)]

    def lead(a):
        return a["fedmate"] - max(v for m, v in a.items() if m != "fedmate")

    def lead_words(a):
        other = max((m for m in a if m != "fedmate"), key=a.__getitem__)
        return f"FedMate {a['fedmate']:.2f}; best other {LABELS[other]} {a[other]:.2f}"

    for ds, rows in table2.items():
        claims.append(PerSeed(rows, "personal_local_acc").claim(
            f"FedMate adapts best to local data (Table 2, {ds.upper()})",
            "CIFAR-10 92.18 vs FedPAC 91.71, FedRep 91.45", lead, lead_words))
    with_ablation = [cell for cell, rows in table1.items() if all(r in rows for r in ABLATION)]
    if with_ablation:
        def modules_add(a):   # each pair above the backbone, all four above each pair, in every cell
            return min(min(a[(c, "+MPS+CFT")] - a[(c, "Backbone")], a[(c, "+CCI+CCF")] - a[(c, "Backbone")],
                           a[(c, "fedmate")] - max(a[(c, "+MPS+CFT")], a[(c, "+CCI+CCF")])) for c in with_ablation)

        claims.append(t1_seed.claim(
            "each pair of modules improves on the backbone and all four together are best (Table 1 ablation)",
            "CIFAR-10 s=10: 39.11 / 50.17 / 52.17 / 55.05", modules_add,
            lambda a: "; ".join(f"{c[0].upper()} s={c[1]}: " + " / ".join(f"{a[(c, r)]:.2f}" for r in
                                                                          (*ABLATION, "fedmate"))
                                for c in with_ablation) + " (Backbone / +MPS+CFT / +CCI+CCF / FedMate)"))
    ratios = sorted({ratio for _, ratio in repeat or {}})
    if repeat and len(ratios) > 1:
        lo, hi = ratios[0], ratios[-1]
        methods = list(dict.fromkeys(m for m, _ in repeat))

        def least_drop(a):   # the smallest drop among the others minus FedMate's drop (points)
            return min(a[(m, lo)] - a[(m, hi)] for m in methods if m != "fedmate") - (a[("fedmate", lo)] -
                                                                                        a[("fedmate", hi)])

        claims.append(PerSeed({k: v for k, v in repeat.items() if k[1] in (lo, hi)}, "personal_global_acc").claim(
            "FedMate is the most robust to clients with repeated samples (Fig. 5)",
            "CINIC-10 s=50: FedMate degrades least from 10% to 50% repeats", least_drop,
            lambda a: "accuracy drop from the lowest to the highest repeat ratio: "
                      + ", ".join(f"{LABELS[m]} {a[(m, lo)] - a[(m, hi)]:.2f}" for m in methods)))
    if cft:
        with_, without = cft["with"], cft["without"]
        sent = lambda recs: float(np.mean([row["uploaded_per_client"] for row in recs[0]["history"]]))  # noqa: E731
        claims.append(PerSeed({"with": with_, "without": without}, "personal_global_acc").claim(
            "skipping extractor uploads (CFT) saves communication without costing accuracy (Section 3.4)",
            "equivalent total communication cost (Appx. 2, not in our text)",
            lambda a: min(100 * (1 - sent(with_) / sent(without)), a["with"] - a["without"] + 1.0),
            lambda a: f"uploaded per client and round {sent(with_):,.0f} vs {sent(without):,.0f}; accuracy "
                      f"{a['with']:.2f} vs {a['without']:.2f}",
            "holds here means: fewer numbers sent and accuracy within 1 point; margin: the smaller of the share of "
            "numbers saved (%) and accuracy with minus without plus 1 point"))
    return claims


# ---------------------------------------------------------------------- the chapter's tables and figures
LOCAL_TEST = local("each client's personalized model on a test set drawn with its own label mix")
FIG_METHODS = ["fedfa", "fedpac", "fedproto", "fedmate"]
REPEAT_METHODS = ["fedproto", "fedrep", "fedpac", "fedmate"]


def balanced_test(scale: str) -> str:
    size = SCALES[scale]["global_test"] or "all"
    return balanced(f"each client's personalized model on the balanced test set ({size} images)")


def _table1_config(row: str, cell, scale: str, seed: int) -> Config:
    ds, s = cell
    return ablation_config(row, ds, s, scale, seed) if row in ABLATION else config(row, ds, scale, s=s, seed=seed)


def table1_grid(scale: str) -> dict:
    sc = SCALES[scale]
    return {(cell, r): [_table1_config(r, cell, scale, seed) for seed in sc["headline_seeds"]]
            for cell in sc["table1_cells"] for r in TABLE1 + list(ABLATION)}


def table1(scale: str, store: str | None = None) -> tuple[list[dict], dict]:
    """Table 1 (the methods and the ablation rows): personalized models on a balanced test set, over the
    headline seeds. Returns (rows, {(dataset, s): {row: records}})."""
    table = nested(run_grid(table1_grid(scale), desc="Table 1", store=store))
    return table1_rows(table, scale), table


def table1_rows(table: dict, scale: str) -> list[dict]:
    """Table 1's rows (the methods, then the ablation) from {(dataset, s): {row: records}} (a cell without records
    reads "-"), the paper beside."""
    rows = []
    for r in TABLE1 + list(ABLATION):
        row: dict[str, Any] = {"method": LABELS.get(r, r)}
        for (ds, s) in SCALES[scale]["table1_cells"]:
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
        (ds, m): with_seeds(config(m, ds, scale, shards=3), sc["table2_seeds"]) for ds in sc["table2_datasets"]
        for m in TABLE2
    }


def table2(scale: str, store: str | None = None) -> tuple[list[dict], dict]:
    """Table 2: three classes per client, each client tested on its own label mix. Returns (rows,
    {dataset: {method: records}})."""
    sc = SCALES[scale]
    runs = run_grid(table2_grid(scale), desc="Table 2", store=store)
    table = nested(runs)
    rows = []
    for m in TABLE2:
        row: dict[str, Any] = {"method": LABELS[m]}
        for ds in sc["table2_datasets"]:
            row[f"{ds.upper()}"] = fmt(mean_std(table[ds][m], "personal_local_acc"))
        row["paper CIFAR-10"], row["paper CINIC-10"] = PAPER_T2[m][0], PAPER_T2[m][1]
        rows.append(row)
    return rows, table


def classwise(scale: str, methods=FIG_METHODS) -> tuple[dict, dict]:
    """Figs. 3 and 4 (FMNIST, s = 20): per-class recall of the personalized models on the balanced test set,
    and every client's local prototypes. Returns ({method: recall per class}, {method: (prototypes, labels)})."""
    from fedlib.experiment import trained
    from fedlib.metrics import per_class_recall

    rounds = SCALES[scale]["rounds"]
    recall, points = {}, {}
    for m in methods:
        federation = trained(config(m, "fmnist", scale, s=20))
        recall[m] = per_class_recall(sum(federation.final_confusions["personal_global"]))
        protos, labels = [], []
        for c in federation.clients:
            ctx = federation.context(federation.task(c, rounds))
            counts, p, _ = federation.method.local_statistics(ctx, federation.method.eval_params(ctx))
            protos.append(p[counts > 0].numpy())
            labels.append(np.flatnonzero(counts.numpy() > 0))
        points[m] = (np.concatenate(protos), np.concatenate(labels))
    return recall, points


def plot_recall(recall: dict, scale: str):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 3.2))
    x = np.arange(10)
    for i, (m, values) in enumerate(recall.items()):
        ax.bar(x + (i - 1.5) * 0.2, 100 * values, width=0.2, label=LABELS[m])
    ax.set_xticks(x, FMNIST_CLASSES, rotation=20, fontsize=8)
    ax.set_ylabel("accuracy (%)")
    chance_line(ax)
    ax.legend(ncol=4)
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(f"per-class accuracy of the personalized models, FMNIST s = 20, scale {scale}")
    fig.tight_layout()
    return fig


def plot_prototypes(points: dict):
    """t-SNE (scikit-learn) of every client's local prototypes, coloured by class."""
    import matplotlib.pyplot as plt
    from sklearn.manifold import TSNE

    fig, axes = plt.subplots(1, len(points), figsize=(3.75 * len(points), 3.6))
    for ax, (m, (P, y)) in zip(np.atleast_1d(axes), points.items()):
        emb = TSNE(n_components=2, random_state=0, init="pca", perplexity=min(30, len(P) - 1)).fit_transform(P)
        ax.scatter(emb[:, 0], emb[:, 1], c=y, cmap="tab10", s=12)
        ax.set_title(f"{LABELS[m]}: local prototypes")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    return fig


def repeat_grid(scale: str) -> dict:
    sc = SCALES[scale]
    return {(m, r): with_seeds(config(m, "fmnist", scale, s=50, repeat=r), sc["repeat_seeds"])
            for m in REPEAT_METHODS for r in sc["repeat"]}


def repeat_sweep(scale: str, store: str | None = None) -> tuple[dict, dict]:
    """Fig. 5 (FMNIST, s = 50): clients with repeated samples. Returns ({method: {ratio: ms}}, runs)."""
    runs = run_grid(repeat_grid(scale), desc="Fig. 5", progress=False, store=store)
    return nested({cell: mean_std(recs, "personal_global_acc") for cell, recs in runs.items()}), runs


def plot_repeat(repeat: dict, scale: str):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for m, res in repeat.items():
        ax.plot([100 * r for r in res], [100 * v[0] for v in res.values()], marker="o", label=LABELS[m])
    ax.set_xlabel("repeat ratio (%)")
    ax.set_ylabel("accuracy, balanced test (%)")
    chance_line(ax)
    ax.legend()
    ax.grid(alpha=0.3)
    ax.set_title(f"FMNIST s = 50, scale {scale}")
    fig.tight_layout()
    return fig


def communication_grid(scale: str) -> dict:
    seeds = SCALES[scale]["seeds"]
    return {"with": with_seeds(config("fedmate", "fmnist", scale, s=10, hyper={"cft_x": 0.05}), seeds),
            "without": with_seeds(config("fedmate", "fmnist", scale, s=10, hyper={"cft": False}), seeds)}


def communication(scale: str, store: str | None = None) -> tuple[list[dict], dict]:
    """Appx. 2: FedMate with CFT (x = 0.05) against FedMate sending the extractor every round (FMNIST, s = 10).
    Returns (rows, {"with"|"without": records})."""
    runs = run_grid(communication_grid(scale), desc="CFT", progress=False, store=store)
    rows = [
        {
            "variant": k,
            "uploaded / client / round": f"{np.mean([r['uploaded_per_client'] for r in v[0]['history']]):,.0f}",
            "accuracy": fmt(mean_std(v, "personal_global_acc")),
        }
        for k, v in runs.items()
    ]
    return rows, runs


# which recorded table decides each claim of ``verdicts`` (in its order), and what cannot be checked offline
CLAIM_TABLES = [
    ("FedMate generalizes best: highest accuracy of the personalized models on a balanced test (Table 1)", "table1",
     "Table 1's methods in each (dataset, s) cell of the scale"),
    ("FedMate adapts best to local data (Table 2)", "table2", "Table 2's methods, three classes per client"),
    ("each pair of modules improves on the backbone and all four together are best (Table 1 ablation)", "table1",
     "the ablation rows of Table 1 in each cell"),
    ("FedMate is the most robust to clients with repeated samples (Fig. 5)", "repeat",
     "FedProto, FedRep, FedPAC and FedMate at each repeat ratio, FMNIST s = 50"),
    ("skipping extractor uploads (CFT) saves communication without costing accuracy (Section 3.4)",
     "communication", "FedMate with and without CFT, FMNIST s = 10"),
]
NOT_OFFLINE = [
    ("the CIFAR-10, CIFAR-100 and CINIC-10 columns of Tables 1-2 and Fig. 5", "the datasets are not available "
     "offline; the book reads FMNIST (and MNIST at paper scale)"),
]
CONVERGENCE = ("fedmate", "fedpac")   # the paper's method and its main baseline, run 3x longer at reference scale
CONVERGENCE_METRIC = "personal_global_acc"   # what the convergence check reads (the notebook's convergence section)


def recorded_claims(scale: str) -> tuple[list, str] | None:
    """The claims' verdicts from the committed records at ``scale`` (reference or paper) once Table 1 (methods and
    ablation rows) has every seed of every cell; Table 2, Fig. 5 and the CFT comparison join as each completes.
    Returns (claims, what they were computed on), or None while Table 1 is incomplete."""
    from fedlib.studies.common import complete_runs, nested, seeds_of
    from fedlib.studies.verdicts import seeds_read

    grids = tables(scale)
    table1 = complete_runs("fedmate", grids["table1"])
    if table1 is None:
        return None
    parts = {name: complete_runs("fedmate", grids[name]) for name in ("table2", "repeat", "communication")}
    sc = SCALES[scale]
    claims = verdicts(nested(table1), nested(parts["table2"]) if parts["table2"] else {}, parts["repeat"],
                      parts["communication"], sc["table1_cells"])
    missing = [name for name, found in parts.items() if found is None]
    read = {"Table 1": seeds_of(table1)} | {title: seeds_of(parts[name]) for name, title in TABLE_TITLES.items()
                                            if parts[name]}
    return claims, (f"{scale} scale, committed records: {sc['clients']} clients of {sc['n']} samples, "
                    f"{sc['rounds']} rounds, {seeds_read(read)}"
                    + (f"; not yet complete: {', '.join(missing)}" if missing else ""))


TABLE_TITLES = {"table2": "Table 2", "repeat": "Fig. 5", "communication": "the CFT comparison"}


def tables(scale: str) -> dict:
    """The recorded grid of every table at ``scale`` (reference or paper), most needed first (``python -m fedlib
    records fedmate [--scale reference]``); at reference scale also the convergence check (Table 1's first cell,
    FedMate and FedPAC at 3x the rounds, seed 0)."""
    out = {"table1": table1_grid(scale), "table2": table2_grid(scale), "repeat": repeat_grid(scale),
           "communication": communication_grid(scale)}
    if scale == "reference":   # the evidence first: it says what the budget can decide
        first = SCALES[scale]["table1_cells"][0]
        out = {"convergence": convergence_grid({m: table1_grid(scale)[(first, m)] for m in CONVERGENCE}), **out}
    return out


register_chapter(__name__, "FedMate")
