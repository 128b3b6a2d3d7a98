"""Five methods side by side (issue 43): equal tuning, one protocol, ranks with ties, against hand-made records."""
import numpy as np
import pytest
from scipy import stats

from fedlib.studies import compare


def record(seed: int, acc: float, glob: float | None = None) -> dict:
    final = {"personal_local_acc": acc / 100}
    if glob is not None:
        final["global_acc"] = glob / 100
    return {"seed": seed, "final": final, "history": [{"round": 1, **final}]}


def test_tuning_chooses_the_best_heldout_score_the_smaller_rate_on_a_tie_and_nothing_without_runs():
    tuning = {("dirichlet", "fedprox", 0.01, 0.1): [record(0, 70.0)],
              ("dirichlet", "fedprox", 0.03, 0.1): [record(0, 80.0)],
              ("dirichlet", "fedprox", 0.1, 0.1): [record(0, 80.0)],           # a tie: the smaller rate wins
              ("dirichlet", "local", 0.01, None): [record(0, float("nan"))],  # diverged
              ("dirichlet", "local", 0.03, None): [record(0, 60.0)],
              ("long_tail", "local", 0.01, None): []}                          # not run yet: no choice
    assert compare.choose(tuning) == {("dirichlet", "fedprox"): (0.03, 0.1), ("dirichlet", "local"): (0.03, None)}


def test_choices_at_an_end_of_the_rate_grid_are_named():
    chosen = {("dominant", "fedavg"): (0.3, None), ("dirichlet", "fedprox"): (0.01, 0.1),
              ("dirichlet", "local"): (0.03, None)}
    assert compare.grid_edge_line(chosen, "reference") == (
        "chose the grid's smallest rate, 0.01, so a wider grid might choose beyond it: FedProx (dirichlet); "
        "chose the grid's largest rate, 0.3, so a wider grid might choose beyond it: FedAvg (dominant)")
    assert compare.grid_edge_line({("dirichlet", "local"): (0.03, None)}, "reference") == ""
    assert compare.grid_edge_line(chosen, "book") == ""   # two rates: every choice is at an end


def test_every_method_runs_the_same_protocol_and_partition_per_seed_at_its_chosen_rate(tmp_path, monkeypatch):
    chosen = {(kind, m): (0.03, compare.knob_values(m, "reference")[-1]) for kind in compare.PARTITIONS
              for m in compare.METHODS}
    grid = compare.comparison_grid("reference", chosen)
    assert len(grid) == 3 * 13 and all(len(c) == 3 for c in grid.values())
    for kind in compare.PARTITIONS:
        cfgs = [grid[(kind, m)][1] for m in compare.METHODS]
        assert {str(c.partition) for c in cfgs} == {str(cfgs[0].partition)} and {c.seed for c in cfgs} == {1}
        assert {(c.rounds, c.local_epochs, c.batch_size, c.num_clients, c.dataset) for c in cfgs} == \
            {(20, 2, 50, 20, "fmnist")}
        assert all(c.lr == 0.03 for c in cfgs)
    assert grid[("dominant", "fedprox")][0].hyper["mu"] == 0.1 and grid[("dominant", "fedpcl")][0].backbones
    assert grid[("dominant", "fedgpa")][0].partition["n"] == 600   # FedGPA's Setting 1 at reference scale
    tuning = compare.tuning_grid("reference")
    assert len(tuning) == 3 * (4 * 4 + 9 * 8)   # 4 methods without a knob, 9 with two values; 4 rates
    assert all(c.dataset == "fmnist-heldout" and c.seed == 0 for cfgs in tuning.values() for c in cfgs)
    from fedlib import results

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    assert compare.tables("reference")["comparison"] == {}   # nothing recorded: the comparison waits for tuning


def test_the_side_by_side_table_pairs_by_seed_and_ranks_with_ties():
    """A beats C on every seed by 5 +- 0.5 (C: rank 2); B is A minus 1 +- 3 (its interval contains 0: tied)."""
    a, b, c = [80.0, 82.0, 84.0], [80.0, 78.0, 85.0], [75.0, 77.5, 78.5]
    runs = {("dirichlet", "fedgpa"): [record(s, v) for s, v in enumerate(a)],
            ("dirichlet", "fedavg"): [record(s, v, 50.0) for s, v in enumerate(b)],
            ("dirichlet", "local"): [record(s, v) for s, v in enumerate(c)]}
    rows = {r["method"]: r for r in compare.side_by_side(runs, "dirichlet")}
    assert [r["method"] for r in compare.side_by_side(runs, "dirichlet")] == ["FedGPA", "FedAvg", "Local"]
    diff = np.subtract(c, a)
    half = stats.t.ppf(0.975, 2) * diff.std(ddof=1) / np.sqrt(3)
    assert rows["Local"]["difference to the best"].value == pytest.approx(diff.mean())   # a number until display
    assert rows["Local"]["95% CI"].low == pytest.approx(diff.mean() - half)
    assert str(rows["Local"]["95% CI"]) == f"[{diff.mean() - half:+.2f}, {diff.mean() + half:+.2f}]"
    assert (rows["FedGPA"]["rank"], rows["FedAvg"]["rank"], rows["Local"]["rank"]) == (1, 1, 2)
    assert rows["FedGPA"]["personalized (%)"] == f"82.00 ± {np.std(a):.2f} (n=3)"
    assert rows["FedAvg"]["global model, balanced test (%)"] == 50.0 and rows["Local"][
        "global model, balanced test (%)"] == "-"


def test_the_pages_answer_names_the_methods_level_at_the_top_and_the_papers_among_them():
    """The table above's runs: FedGPA and FedAvg share rank 1 (FedAvg's interval to FedGPA contains 0), Local is
    clearly below FedGPA; the MNIST check keeps FedGPA at rank 1 when it beats nothing clearly there."""
    a, b, c = [80.0, 82.0, 84.0], [80.0, 78.0, 85.0], [75.0, 77.5, 78.5]
    runs = {("dirichlet", "fedgpa"): [record(s, v) for s, v in enumerate(a)],
            ("dirichlet", "fedavg"): [record(s, v) for s, v in enumerate(b)],
            ("dirichlet", "local"): [record(s, v) for s, v in enumerate(c)]}
    lines = compare.answer_lines(runs)
    assert lines == [f"**{compare.PARTITION_LABELS['dirichlet']}**: 2 of 3 methods are level at the top (no other "
                     "method above them with a paired 95% interval over 3 seeds): FedGPA 82.00%, FedAvg 81.00%. Of "
                     "the five papers' methods, FedGPA is among them."]
    ranked = compare.ranking(runs, "dirichlet")
    assert {m: p.rank for m, p in ranked.items()} == {"fedavg": 1, "fedgpa": 1, "local": 2}
    check = {(compare.CHECK_PARTITION, m): [record(s, v) for s, v in enumerate(vals)]
             for m, vals in (("fedgpa", a), ("fedavg", c))}
    dominant = {(compare.CHECK_PARTITION, m): v for (_, m), v in runs.items()}
    assert compare.answer_lines(dominant, check)[-1] == (
        f"On MNIST, {compare.PARTITION_LABELS[compare.CHECK_PARTITION]}: FMNIST's best, FedGPA, is still level at "
        "the top (rank 1 of 2).")


@pytest.mark.parametrize("papers_ahead", [True, False])
def test_the_books_hypotheses_compare_the_best_paper_method_with_the_best_baseline(papers_ahead):
    shift = 3.0 if papers_ahead else -3.0
    runs = {(kind, m): [record(s, 70.0 + s + (shift if m in compare.PAPERS else 0.0) + (0.1 * i))
                        for s in range(3)]
            for kind in compare.PARTITIONS for i, m in enumerate(compare.METHODS)}
    from fedlib.studies.registry import study

    found = study("compare").assess("reference", {"comparison": runs})
    assert len(found) == 3 and all(a.claim.hypothesis for a in found)
    assert {a.outcome for a in found} == {"holds" if papers_ahead else "does not hold"}


def test_recorded_tuning_chooses_the_comparison_and_the_convergence_runs(tmp_path, monkeypatch):
    """Made-up committed tuning records (the higher rate wins for every method, the first knob value) under a
    results folder: the comparison of each (partition, method) then trains at that choice over three seeds, and the
    convergence check runs FedGPA and FedAvg at 3x the rounds at theirs; a missing tuning record leaves its cell
    out until it is recorded."""
    from fedlib import results

    monkeypatch.setattr(results, "RESULTS", tmp_path)
    tuning = compare.tuning_grid("reference")
    for (_, m, lr, v), (cfg,) in tuning.items():
        first = v == compare.knob_values(m, "reference")[0]
        row = {"round": cfg.rounds, "personal_local_acc": 0.5 + lr + (0.01 if first else 0.0)}
        results.write({"config": cfg.flat(), "key": cfg.key(), "seed": 0, "scale": "reference", "history": [row],
                       "final": row}, "compare", tmp_path)
    tables = compare.tables("reference")
    assert list(tables) == ["comparison", "convergence", "mnist_check", "tuning"] and len(tables["comparison"]) == 39
    check = tables["mnist_check"]   # MNIST at the FMNIST choices, one partition, the comparison's seeds
    assert len(check) == 13 and {c.dataset for cfgs in check.values() for c in cfgs} == {"mnist"}
    assert {(c.lr, c.hyper["mu"], c.seed) for c in check[("dominant", "fedprox")]} == {(0.3, 0.01, s) for s in range(3)}
    assert check[("dominant", "fedpcl")][0].backbones == ["cnn_usps"]   # a digit CNN that never saw MNIST
    assert {str(c.partition) for cfgs in check.values() for c in cfgs} == \
        {str(tables["comparison"][("dominant", "fedavg")][0].partition)}
    fedprox = tables["comparison"][("long_tail", "fedprox")]
    assert [c.seed for c in fedprox] == [0, 1, 2] and {(c.lr, c.hyper["mu"]) for c in fedprox} == {(0.3, 0.01)}
    assert {label: [(c.rounds, c.seed, c.lr) for c in cfgs] for label, cfgs in tables["convergence"].items()} == \
        {m: [(60, s, 0.3) for s in (0, 1, 2)] for m in ("fedgpa", "fedavg")}
    (cfg,) = tuning[("dirichlet", "ditto", 0.1, 1.0)]
    (tmp_path / "compare" / f"{cfg.key()}.json").unlink()
    assert ("dirichlet", "ditto") not in compare.tables("reference")["comparison"]
    (cfg,) = tuning[("dominant", "ditto", 0.1, 1.0)]
    (tmp_path / "compare" / f"{cfg.key()}.json").unlink()
    assert ("dominant", "ditto") not in compare.tables("reference")["mnist_check"]


def test_recorded_hypotheses_pair_the_seeds_each_comparison_has(tmp_path, monkeypatch):
    """Made-up tuning and comparison records (FedGPA 2 points above every baseline on every seed):
    each partition's hypothesis holds; a comparison run recorded as diverged leaves that comparison its other seeds
    (two: a partial check, never counted as complete)."""
    from fedlib import results
    from fedlib.studies.registry import study

    monkeypatch.setattr(results, "RESULTS", tmp_path)

    def write(cfg, acc):
        row = {"round": cfg.rounds, "personal_local_acc": acc}
        results.write({"config": cfg.flat(), "key": cfg.key(), "seed": cfg.seed, "scale": "reference",
                       "history": [row], "final": row}, "compare", tmp_path)

    for (_, _, lr, _), (cfg,) in compare.tuning_grid("reference").items():
        write(cfg, 0.5 + lr)
    comparison = compare.tables("reference")["comparison"]
    missing = comparison[("long_tail", "fedpac")][1]
    for (_, m), cfgs in comparison.items():
        for cfg in cfgs:
            if cfg is not missing:
                write(cfg, 0.70 + 0.02 * (m == "fedgpa") + 0.01 * cfg.seed)
    results.write_diverged(missing, "loss became nan", "compare", "reference", tmp_path)
    found = {a.claim.id: a for a in study("compare").assess("reference")}
    assert [a.outcome for a in found.values()] == ["holds"] * 3
    assert not found["papers_ahead_long_tail"].complete and found["papers_ahead_dominant"].complete
    short = [c for c in found["papers_ahead_long_tail"].decision.compared if c.n == 2]
    assert {c.minus for c in short} == {"fedpac"} and len(short) == len(compare.PAPERS)
    assert next(c for c in short if c.plus == "fedgpa").mean == pytest.approx(2.0)
