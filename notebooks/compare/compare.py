"""Five methods side by side (issue 43): FedGPA, FedPCL, FedPRP, FedMate and pFedCSPC with the baselines a
practitioner would try first, under one protocol on three kinds of label skew, each method tuned equally.

The protocol: FMNIST, 20 clients, every client in every round, the same cnn2 trained from scratch by SGD (momentum
0.5, weight decay 5e-4, batch 50) for the same rounds and E local epochs; FedPCL trains its projection on the
features of a frozen backbone instead (its paper's design; here ccexam's small CNN trained on MNIST, the one offline
backbone of FMNIST's kind), stated in every table. Methods whose paper splits the local epochs into a head phase
and a body phase take 1 of the E epochs for the head (FedRep, FedPRP); FedPAC and FedMate add their one-epoch head
phase as their papers do. Partitions (the same for every method per seed):

* ``dominant``: FedGPA's Setting 1 with s = 20 (each client 20% of its images drawn uniformly, the rest from its
  dominant classes);
* ``long_tail``: FedPRP's global long tail gamma = 0.1, then shards of s = 4 classes per client;
* ``dirichlet``: Dirichlet label skew, alpha = 0.1.

Equal tuning: for each partition, every method's learning rate from ``LR_GRID`` and its one most sensitive
hyperparameter from two values (``SENSITIVE``) are chosen on ``fmnist-heldout`` (10,000 training images held out as
the test set, the real test set unused) at the table's budget, seed 0, by the last-round personalized accuracy
(ties: the smaller rate, then the first value); the comparison then trains each method with its choice.

MNIST as a check: the comparison again on MNIST under ``CHECK_PARTITION``, every method at the rate and knob it
chose on FMNIST (no tuning on MNIST: the check asks whether FMNIST's ranking carries over to another data set);
FedPCL's frozen backbone there is ccexam's USPS classifier, a digit CNN that has never seen MNIST.

Evaluation, stated once: personalized accuracy on each client's local test set (test images drawn with the client's
own label mix) at the last round, the mean over clients; the global model on the balanced test set beside it for
methods that have one. No best-round picking.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from fedlib.claims import Claim, each_above
from fedlib.data.partition import fedgpa_setting
from fedlib.experiment import Config, make_config
from fedlib.studies.common import ON_CPU, Runtime, method_labels, with_seeds
from fedlib.studies.grid import Budget, Scales, stored_grid, with_diverged
from fedlib.studies.registry import register_chapter
from fedlib.studies.report import Signed, fmt, interval_cell, local, per_seed
from fedlib.studies.verdicts import listed, verdict_of

METHODS = ["local", "fedavg", "fedavg_ft", "fedprox", "fedproto", "ditto", "fedrep", "fedpac",
           "fedgpa", "fedpcl", "fedprp", "fedmate", "pfedcspc"]
PAPERS = ("fedgpa", "fedpcl", "fedprp", "fedmate", "pfedcspc")   # the book's five methods
LABELS = method_labels(METHODS)
PARTITIONS = ("dominant", "long_tail", "dirichlet")
PARTITION_LABELS = {"dominant": "dominant classes (FedGPA Setting 1, s = 20)",
                    "long_tail": "global long tail gamma = 0.1, 4 classes per client (FedPRP)",
                    "dirichlet": "Dirichlet alpha = 0.1"}
# 0.3 joined the grid (every method, every partition) when the first recorded tuning runs chose 0.1, then the
# largest rate, for Local, FedAvg, FedAvg-FT and FedProx on dominant classes (FedAvg: 73.90, 80.30, 85.13 at 0.01,
# 0.03, 0.1): a choice at the grid's end is not a tuned one
LR_GRID = (0.01, 0.03, 0.1, 0.3)
# each method's one most sensitive hyperparameter (its paper's main knob) and the two values tried
SENSITIVE: dict[str, tuple[str, tuple]] = {
    "fedprox": ("mu", (0.01, 0.1)), "fedproto": ("lam", (0.1, 1.0)), "ditto": ("lam", (0.1, 1.0)),
    "fedpac": ("lam", (0.1, 1.0)), "fedgpa": ("mu", (0.25, 0.5)), "fedpcl": ("tau", (0.07, 0.5)),
    "fedprp": ("lam", (0.5, 0.9)), "fedmate": ("lambda_p", (0.1, 1.0)), "pfedcspc": ("lam_kp", (0.1, 0.5)),
}
# FedPCL's frozen backbone per data set: trained on another data set than the one it featurizes
BACKBONES = {"fmnist": ["cnn_mnist"], "mnist": ["cnn_usps"]}
CHECK_DATASET, CHECK_PARTITION = "mnist", "dominant"   # MNIST as a check, on the partition the convergence check uses
HEADLINE_KEYS = 2   # leading label columns of the headline rows the Results overview shows
METRIC = "personal_local_acc"
LOCAL_TEST = local("each client's local test set (test images drawn with the client's own label mix)")
HELDOUT_TEST = local("each client's share of the held-out split (10,000 training images, drawn with the client's own "
                     "label mix): the tuning runs' test set")


@dataclass(frozen=True, kw_only=True)
class CompareBudget(Budget):
    """This chapter's budget at one scale (``SCALES``)."""
    epochs: int
    per_class: int
    lr_grid: tuple[float, ...]
    values: int
    server_epochs: int
    eval_every: int


SCALES = Scales(
    # ci: the code's test (tiny data, two rates, the first value of each knob)
    ci=CompareBudget(rounds=2, epochs=2, per_class=60, seeds=[0, 1], lr_grid=(0.03, 0.1), values=1, server_epochs=1,
                     eval_every=1),
    book=CompareBudget(rounds=5, epochs=2, per_class=150, seeds=[0], lr_grid=(0.03, 0.1), values=1, server_epochs=2,
                       eval_every=5),
    # the protocol at a budget this CPU records: 3 seeds, the whole grid
    reference=CompareBudget(rounds=20, epochs=2, per_class=1200, seeds=[0, 1, 2], lr_grid=LR_GRID, values=2,
                            server_epochs=10, eval_every=5),
    # the budget the five papers share between them (FedGPA 150 rounds of E = 5, FedMate 200, FedPRP 100)
    paper=CompareBudget(rounds=100, epochs=5, per_class=1200, seeds=[0, 1, 2], lr_grid=LR_GRID, values=2,
                        server_epochs=100, eval_every=10),
)
HYPER_REASONS = {"lr": "chosen per method and partition on the held-out split (equal tuning)",
                 "hyper": "the method's sensitive hyperparameter chosen on the held-out split; its structure fixed"}


def scale_summary(scale: str) -> str:
    sc = SCALES[scale]
    return "\n".join([
        f"scale {scale}: FMNIST, 20 clients, {sc.rounds} rounds of E = {sc.epochs} local epochs, "
        f"at most {sc.per_class} training images per class, seeds {sc.seeds}; tuning: lr in "
        f"{list(sc.lr_grid)} x {sc.values} value(s) of each method's knob, seed 0, held-out split",
        "one protocol for every method: cnn2 from scratch, SGD momentum 0.5, weight decay 5e-4, batch 50, full "
        "participation (FedPCL: a projection on frozen cnn_mnist features)",
    ])


def partition(kind: str, scale: str) -> dict:
    """The partition spec of ``kind`` at ``scale``: about ``20 x n`` training images in each, ``n`` = FedGPA's 600
    per client at 1,200 images per class (the Dirichlet pool; the long tail keeps about 40% of its pool)."""
    per_class = SCALES[scale].per_class
    if kind == "dominant":
        spec = fedgpa_setting(1, 10)
        out = {"name": "skew", "s": 20, "n": spec["n"] * per_class // 1200, "k": spec["k"]}
    elif kind == "long_tail":
        out = {"name": "shards", "s": 4, "imbalance": 0.1}
    else:
        out = {"name": "dirichlet", "alpha": 0.1, "min_size": 10}
    if kind != "dominant":
        out["per_class"] = per_class
    return out


def structure(method: str, scale: str) -> dict:
    """What each method's paper fixes about its local epochs and server (not tuned)."""
    sc = SCALES[scale]
    return {"fedrep": {"head_epochs": 1, "body_epochs": sc.epochs - 1},
            "fedprp": {"head_epochs": 1, "body_epochs": sc.epochs - 1},
            "pfedcspc": {"server_epochs": sc.server_epochs}}.get(method, {})


def config(method: str, kind: str, scale: str, lr: float, value=None, seed: int = 0, heldout: bool = False,
           dataset: str = "fmnist") -> Config:
    """One run of the protocol: ``method`` on partition ``kind`` of ``dataset`` at learning rate ``lr`` with its
    knob at ``value`` (None: the method has none); ``heldout``: on FMNIST's tuning split."""
    sc = SCALES[scale]
    hyper = dict(structure(method, scale))
    if method in SENSITIVE and value is not None:
        hyper[SENSITIVE[method][0]] = value
    return make_config(
        method=method, dataset="fmnist-heldout" if heldout else dataset, partition=partition(kind, scale),
        num_clients=20, rounds=sc.rounds, local_epochs=sc.epochs, batch_size=50, lr=lr, momentum=0.5,
        weight_decay=5e-4, eval_every=sc.eval_every, hyper=hyper, seed=seed,
        backbones=list(BACKBONES[dataset]) if method == "fedpcl" else None)


def knob_values(method: str, scale: str) -> tuple:
    return SENSITIVE[method][1][:SCALES[scale].values] if method in SENSITIVE else (None,)


def tuning_grid(scale: str) -> dict:
    """{(partition, method, lr, value): [the held-out run, seed 0]}."""
    return {(kind, m, lr, v): [config(m, kind, scale, lr, v, heldout=True)]
            for kind in PARTITIONS for m in METHODS
            for lr, v in itertools.product(SCALES[scale].lr_grid, knob_values(m, scale))}


def last_round_stats(records: list[dict], metric: str = METRIC) -> tuple[float, float, int]:
    """(mean, population std, seeds) of the last-round ``metric`` as a fraction, for ``report.fmt`` (the records
    ``per_seed`` reads: a diverged seed has no value)."""
    values = [r["final"][metric] for r in records if r["final"].get(metric) is not None]
    return float(np.mean(values)), float(np.std(values)), len(values)


def tuning_score(records: list[dict]) -> float | str | None:
    """A tuning point as the tuning table shows it: "diverged", seed 0's validation score (%), or None (not
    recorded)."""
    if any("diverged" in r for r in records):
        return "diverged"
    return per_seed(records).get(0)


def choose(tuning: dict) -> dict:
    """{(partition, method): (lr, value)} from the tuning runs ({(partition, method, lr, value): records}): the best
    last-round personalized accuracy; ties go to the smaller rate, then the first value; a cell whose runs are
    not all there chooses nothing."""
    best: dict = {}
    for (kind, m, lr, v), records in tuning.items():
        scores = list(per_seed(records).values())
        score = float(np.mean(scores)) if scores else float("nan")
        if not np.isfinite(score):   # not run, or diverged
            continue
        current = best.get((kind, m))
        if current is None or score > current[0]:
            best[(kind, m)] = (score, lr, v)
    return {cell: (lr, v) for cell, (_, lr, v) in best.items()}


def comparison_grid(scale: str, chosen: dict) -> dict:
    """{(partition, method): [configs over seeds]} at each cell's chosen (lr, value); cells not chosen yet are left
    out."""
    sc = SCALES[scale]
    return {(kind, m): with_seeds(config(m, kind, scale, *chosen[(kind, m)]), sc.seeds)
            for kind in PARTITIONS for m in METHODS if (kind, m) in chosen}


def check_grid(scale: str, chosen: dict) -> dict:
    """MNIST as a check: {(CHECK_PARTITION, method): [configs over seeds]} on MNIST at the choice each method made
    on FMNIST's held-out split (cells not chosen yet are left out)."""
    grid = {}
    for m in METHODS:
        if (CHECK_PARTITION, m) in chosen:
            lr, value = chosen[(CHECK_PARTITION, m)]
            grid[(CHECK_PARTITION, m)] = with_seeds(config(m, CHECK_PARTITION, scale, lr, value, dataset=CHECK_DATASET),
                                                    SCALES[scale].seeds)
    return grid


def recorded_choice(scale: str) -> dict:
    """The choices the committed tuning records of ``scale`` make (every cell whose runs are all recorded, a run
    recorded as diverged counting as one that scores nothing)."""
    cells: dict = {}
    for (kind, m, lr, v), done in with_diverged(stored_grid("compare", tuning_grid(scale))).items():
        cells.setdefault((kind, m), {})[(kind, m, lr, v)] = done
    complete = {k: runs for k, runs in cells.items() if all(runs.values())}
    return choose({key: recs for runs in complete.values() for key, recs in runs.items()})


CONVERGENCE = ("fedgpa", "fedavg")   # run 3x longer at reference scale (dominant classes, their chosen rates)
CONVERGENCE_METRIC = METRIC   # what the convergence check reads (the notebook's convergence section)


def tables(scale: str) -> dict:
    """The comparison (every cell whose tuning is recorded: run ``records compare`` again once the tuning is), at
    reference scale the convergence check (``CONVERGENCE`` at 3x the rounds on the dominant-class partition, seed 0,
    at their chosen rates), MNIST as a check, and the tuning grid."""
    from fedlib.studies.grid import convergence_grid

    chosen = recorded_choice(scale)
    out = {"comparison": comparison_grid(scale, chosen)}
    if scale == "reference":
        out["convergence"] = convergence_grid({m: out["comparison"][("dominant", m)] for m in CONVERGENCE
                                               if ("dominant", m) in out["comparison"]})
    return {**out, "mnist_check": check_grid(scale, chosen), "tuning": tuning_grid(scale)}


def run(scale: str, store: str | None = None, runtime: Runtime = ON_CPU) -> tuple[dict, dict, dict]:
    """Tune, then compare: (tuning runs, choices, comparison runs)."""
    from fedlib.studies.grid import run_grid

    # a rate whose loss becomes nan scores nothing (its stand-in record is never cached or committed)
    tuning = run_grid(tuning_grid(scale), desc="tuning", store=store, keep_diverged=True, runtime=runtime)
    chosen = choose(tuning)
    return tuning, chosen, run_grid(comparison_grid(scale, chosen), desc="comparison", store=store,
                                    keep_diverged=True, runtime=runtime)


def check(scale: str, chosen: dict, store: str | None = None, runtime: Runtime = ON_CPU) -> dict:
    """MNIST as a check: the runs of ``check_grid`` at the FMNIST choices."""
    from fedlib.studies.grid import run_grid

    return run_grid(check_grid(scale, chosen), desc="MNIST check", store=store, keep_diverged=True, runtime=runtime)


def reference_run(scale: str) -> Config:
    return config("fedgpa", "dominant", scale, 0.03, 0.5)


def protocol(scale: str) -> tuple[list[dict], str]:
    from fedlib.studies.settings import protocol_rows

    return protocol_rows({LABELS[m]: config(m, "dominant", scale, 0.03, knob_values(m, scale)[0]) for m in METHODS},
                         {"personalized": "personal_local", "global": "global_global"})


# ---------------------------------------------------------------------- the tables
def tuning_rows(tuning: dict, chosen: dict) -> list[dict]:
    """One row per (partition, method, value of the method's knob): the held-out score (%) at each rate, and the
    rate chosen on the row of the chosen value."""
    rows = []
    for kind in PARTITIONS:
        for m in METHODS:
            points = {(lr, v): recs for (k, m_, lr, v), recs in tuning.items() if (k, m_) == (kind, m)}
            knob = SENSITIVE.get(m, ("-", ()))[0]
            best_lr, best_v = chosen.get((kind, m), (None, None))
            for value in dict.fromkeys(v for _, v in points):
                row: dict = {"partition": kind, "method": LABELS[m],
                             "knob": knob if value is None else f"{knob} {value:g}"}
                row.update({f"lr {lr:g}": tuning_score(recs) for (lr, v), recs in points.items() if v == value})
                row["chosen"] = f"lr {best_lr:g}" if best_lr is not None and value == best_v else "-"
                rows.append(row)
    return rows


def grid_edge_line(chosen: dict, scale: str) -> str:
    """Which cells chose a learning rate at an end of the grid, where a wider grid might have chosen beyond it
    (equal tuning says so rather than hide it); "" where none did, or where the grid has no interior (the smoke
    scales' two rates)."""
    rates = SCALES[scale].lr_grid
    if len(rates) < 3:
        return ""
    ends = {min(rates): "smallest", max(rates): "largest"}
    by_end: dict[float, list[str]] = {}
    for (kind, m), (lr, _) in chosen.items():
        if lr in ends:
            by_end.setdefault(lr, []).append(f"{LABELS[m]} ({kind})")
    return "; ".join(f"chose the grid's {ends[lr]} rate, {lr:g}, so a wider grid might choose beyond it: "
                     + ", ".join(cells) for lr, cells in sorted(by_end.items()))


def side_by_side(runs: dict, kind: str) -> list[dict]:
    """Partition ``kind``'s table, best mean first: per method mean ± std over seeds (the format of ``report.fmt``,
    so the table states the majority floor and marks the cells at or below it), the paired difference to the
    best method (mean and 95% t-interval over seeds), and a rank with ties: 1 + the number of methods that beat it
    with a paired interval above 0 (methods no other one beats clearly share rank 1; one seed decides no rank);
    the global model on the balanced test beside, for methods that have one."""
    ranked = ranking(runs, kind)
    if not ranked:
        return []
    best = max(ranked, key=lambda m: ranked[m].mean)
    rows = []
    for m, place in ranked.items():
        to_best = paired_margin(runs, kind, m, best) if m != best else None
        glob = per_seed(runs[(kind, m)], "global_acc")
        diverged = sum("diverged" in r for r in runs[(kind, m)])   # seeds whose loss became nan: not averaged
        personal = fmt(last_round_stats(runs[(kind, m)]))   # a Measured cell: its floor and dagger read its numbers
        rows.append({
            "method": LABELS[m],
            "personalized (%)": personal if not diverged else    # a diverged seed's note makes the cell text
            f"{personal} ({diverged} seed{'s' if diverged > 1 else ''} diverged)",
            "difference to the best": "-" if to_best is None else Signed(to_best.mean),
            "95% CI": interval_cell(None if to_best is None else to_best.interval),
            "rank": place.rank,
            "global model, balanced test (%)": float(np.mean(list(glob.values()))) if glob else "-",
        })
    order = sorted(range(len(rows)), key=lambda i: (rows[i]["rank"], -list(ranked.values())[i].mean))
    return [rows[i] for i in order]


@dataclass(frozen=True)
class Place:
    """A method's place in one partition's comparison: its mean over seeds (%), the seeds, and its rank with ties
    (1 + the number of methods whose paired interval over the seeds lies above it)."""
    mean: float
    seeds: int
    rank: int


def paired_margin(runs: dict, kind: str, a: str, b: str):
    """Method ``a`` - method ``b`` per seed under partition ``kind`` (personalized accuracy, points), decided."""
    first, second = per_seed(runs[(kind, a)]), per_seed(runs[(kind, b)])
    return verdict_of({seed: v - second[seed] for seed, v in first.items() if seed in second})


def ranking(runs: dict, kind: str) -> dict[str, Place]:
    """{method: Place} for the methods with runs under partition ``kind`` (one seed decides no rank)."""
    scores = {m: per_seed(runs[(kind, m)]) for m in METHODS if runs.get((kind, m))}
    return {m: Place(float(np.mean(list(s.values()))), len(s),
                     1 + sum(1 for other in scores if other != m
                             and paired_margin(runs, kind, other, m).outcome == "holds"))
            for m, s in scores.items()}


def recorded_answer(scale: str = "reference") -> list[str]:
    """``answer_lines`` from the committed records of ``scale`` (the comparison and the MNIST check), [] before the
    comparison is recorded."""
    recorded = {table: with_diverged(stored_grid("compare", grid)) for table, grid in tables(scale).items()
                if table in ("comparison", "mnist_check")}
    return answer_lines(recorded["comparison"], recorded.get("mnist_check")) if any(
        recorded["comparison"].values()) else []


def answer_lines(runs: dict, check_runs: dict | None = None) -> list[str]:
    """The page's answer to "which method should I use?", one sentence per kind of skew from the comparison's runs:
    the methods no other one beats with a paired interval above 0 (rank 1), best mean first, and which of the five
    papers' methods are among them; then whether the MNIST check keeps the best (``check_runs``)."""
    lines = []
    for kind in PARTITIONS:
        ranked = ranking(runs, kind)
        if not ranked:
            continue
        top = sorted((m for m, p in ranked.items() if p.rank == 1), key=lambda m: -ranked[m].mean)
        fewest, most = min(p.seeds for p in ranked.values()), max(p.seeds for p in ranked.values())
        seeds = f"{fewest}" if fewest == most else f"{fewest}-{most}"
        papers = listed([LABELS[m] for m in top if m in PAPERS])
        level = ("no method is clearly below another" if len(top) == len(ranked) else
                 f"{len(top)} of {len(ranked)} methods are level at the top")
        lines.append(
            f"**{PARTITION_LABELS[kind]}**: {level} (no other method above them with a paired 95% interval over "
            f"{seeds} seed{'s' if most > 1 else ''}): "
            + ", ".join(f"{LABELS[m]} {ranked[m].mean:.2f}%" for m in top) + ". "
            + (f"Of the five papers' methods, {papers} {'are' if ' and ' in papers else 'is'} among them."
               if papers else "None of the five papers' methods is among them."))
    if check_runs:
        fmnist, mnist = ranking(runs, CHECK_PARTITION), ranking(check_runs, CHECK_PARTITION)
        if fmnist and mnist:
            first = max(fmnist, key=lambda m: fmnist[m].mean)
            if first in mnist:
                lines.append(f"On MNIST, {PARTITION_LABELS[CHECK_PARTITION]}: FMNIST's best, {LABELS[first]}, "
                             f"{'is still' if mnist[first].rank == 1 else 'is no longer'} level at the top "
                             f"(rank {mnist[first].rank} of {len(mnist)}).")
    return lines


def check_lines(runs: dict, check_runs: dict) -> list[str]:
    """Whether FMNIST's ranking carries over to MNIST (``CHECK_PARTITION``), from the records: the best method on
    each data set, Kendall's tau between the two orders of mean accuracy over the methods both have, and the
    positions of the five papers' methods on each (seeds that diverged are left out of the means)."""
    from scipy.stats import kendalltau

    def means(grid: dict) -> dict[str, float]:
        out = {}
        for m in METHODS:
            if scores := per_seed([r for r in grid.get((CHECK_PARTITION, m), []) if "diverged" not in r]):
                out[m] = float(np.mean(list(scores.values())))
        return out

    fmnist, mnist = means(runs), means(check_runs)
    both = [m for m in METHODS if m in fmnist and m in mnist]
    if len(both) < 2:
        return []
    first, second = sorted(both, key=lambda m: -fmnist[m]), sorted(both, key=lambda m: -mnist[m])
    tau = float(kendalltau([fmnist[m] for m in both], [mnist[m] for m in both]).statistic)
    return [
        f"{PARTITION_LABELS[CHECK_PARTITION]}, {len(both)} methods: the best on FMNIST is {LABELS[first[0]]} "
        f"({fmnist[first[0]]:.2f}), on MNIST {LABELS[second[0]]} ({mnist[second[0]]:.2f}); FMNIST's best is "
        f"number {second.index(first[0]) + 1} on MNIST",
        f"Kendall's tau between the two orders of mean accuracy: {tau:+.2f} (+1: the same order, 0: unrelated, "
        "-1: reversed)",
        "the five papers' methods by mean accuracy, FMNIST -> MNIST: "
        + ", ".join(f"{LABELS[m]} {first.index(m) + 1} -> {second.index(m) + 1}" for m in PAPERS if m in both),
    ]


def plot(runs: dict):
    """Personalized accuracy per method and partition, mean and per-seed points."""
    import matplotlib.pyplot as plt

    from fedlib.plots import floor_line

    fig, axes = plt.subplots(1, len(PARTITIONS), figsize=(15, 4), sharey=False)
    for ax, kind in zip(axes, PARTITIONS):
        methods = [m for m in METHODS if runs.get((kind, m))]
        for i, m in enumerate(methods):
            values = list(per_seed(runs[(kind, m)]).values())
            ax.bar(i, np.mean(values), color="tab:red" if m in PAPERS else "tab:gray", alpha=0.7)
            ax.scatter([i] * len(values), values, s=8, color="black", zorder=3)
        ax.set_xticks(range(len(methods)), [LABELS[m] for m in methods], rotation=70, fontsize=7)
        ax.set_title(PARTITION_LABELS[kind], fontsize=8)
        ax.set_ylabel("personalized accuracy (%)")
        from fedlib.studies.report import majority_floor

        floor_line(ax, majority_floor([r for m in methods for r in runs[(kind, m)]]))
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


BASELINES = tuple(m for m in METHODS if m not in PAPERS)
CLAIMS = tuple(
    Claim(f"papers_ahead_{kind}", f"{PARTITION_LABELS[kind]}: the best of the five papers' methods beats the best "
          "baseline", "(a hypothesis of this book: none of the five papers compares with the others)",
          "this page's protocol, one partition",
          (each_above("comparison", PAPERS, BASELINES, METRIC, slot=1, where=((0, kind),)),),
          "none of the five papers compares with the others", None, 0.5, "half a point of accuracy",
          kind="best", hypothesis=True,
          reading="some one of the five papers' methods above every baseline (Bonferroni over which one)")
    for kind in PARTITIONS)
TABLE_RUNS = {"comparison": "13 methods x 3 partitions at each method's tuned rate and knob"}
INVENTORY: tuple = ()   # the book's own hypotheses: no paper's sentences


def headline_rows(runs: dict, scale: str) -> list[dict]:
    return [dict(partition=kind, **row) for kind in PARTITIONS for row in side_by_side(runs, kind)]


register_chapter(__name__, "Five methods side by side", place=90)   # after every paper's chapter
