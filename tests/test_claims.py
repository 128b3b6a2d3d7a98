"""Claims as declared data: how a declaration expands over a scale's cells, reads runs seed by seed, goes through the
decision procedure, and which scale decides it (``fedlib.claims``); every chapter's declarations are checked
for what the book needs of them."""
import dataclasses
import html

import numpy as np
import pytest

from fedlib.claims import (
    Claim,
    Comparison,
    Pairs,
    Read,
    Row,
    Statistic,
    assess,
    chain,
    differences,
    each_above,
    mean_over_rounds,
    rounds_to_final_of,
    verdict,
    versus,
)


def rec(seed: int, value: float, metric: str = "acc", **extra) -> dict:
    """A record whose last evaluated ``metric`` is ``value`` %."""
    return {"seed": seed, "history": [{"round": 1, metric: 0.0}, {"round": 2, metric: value / 100}], **extra}


def cell(values, metric: str = "acc") -> list[dict]:
    return [rec(s, v, metric) for s, v in enumerate(values)]


def claim(*compare, kind="all", delta=0.5, effect=None, **kw) -> Claim:
    return Claim("c", "a claim", "the paper's words", "Table 1", tuple(compare), "paper numbers", effect, delta,
                 "a reason", kind=kind, **kw)


def test_versus_expands_over_the_cells_the_scales_grid_has_and_labels_them():
    evidence = {"t": {(m, st): [] for m in ("ours", "a", "b") for st in (1, 2)}}
    found = versus("t", "ours", ["a", "b"], "acc", slot=0, names=("", "Setting {}")).expand(
        evidence, {"ours": "Ours", "a": "A"})
    assert [c.label for c in found] == ["Ours − A, Setting 1", "Ours − b, Setting 1", "Ours − A, Setting 2",
                                        "Ours − b, Setting 2"]
    assert found[0].plus[0].cell == ("ours", 1) and found[0].minus[0].cell == ("a", 1)
    # a cell the scale's grid lacks is no comparison there; ``where`` keeps the cells it names
    del evidence["t"][("b", 2)]
    assert len(versus("t", "ours", ["a", "b"], "acc", slot=0).expand(evidence, {})) == 3
    assert len(versus("t", "ours", ["a", "b"], "acc", slot=0, where=((1, 2),)).expand(evidence, {})) == 1


def test_chain_and_each_above_and_rows_from_another_table():
    evidence = {"abl": {k: [] for k in ("none", "+x", "+y")}, "main": {"full": []}}
    steps = chain("abl", ["none", "+x", "+y"], "acc").expand(evidence, {})
    assert [c.label for c in steps] == ["+x − none", "+y − +x"]
    grid = {"t": {(m,): [] for m in ("p", "q", "a", "b")}}
    assert len(each_above("t", ["p", "q"], ["a", "b"], "acc", slot=0).expand(grid, {})) == 4
    across = Pairs("abl", ((Row("full", "Full", table="main"), Row("+y")),), "acc").expand(evidence, {})
    assert across[0].plus[0] == Read("main", "full", "acc", "Full")


def test_differences_are_paired_by_seed_with_shifts_and_sums():
    evidence = {"t": {"a": cell([80, 82, 81]), "b": cell([78, 83]) + [rec(3, 70)], "c": cell([1, 1, 1])}}
    c = Comparison("a - b", (Read("t", "a", "acc", "a"),), (Read("t", "b", "acc", "b"),))
    assert differences(c, evidence) == pytest.approx({0: 2.0, 1: -1.0})   # seed 2 and 3 are not in both
    shifted = Comparison("a + c - b - 1", (Read("t", "a", "acc", "a"), Read("t", "c", "acc", "c")),
                         (Read("t", "b", "acc", "b"),), shift=1.0)
    assert differences(shifted, evidence) == pytest.approx({0: 2.0, 1: -1.0})
    # a statistic reads a record and may read the same seed's other records
    def over_b(r, peers):
        b = peers("t", "b")
        return None if b is None else r["history"][-1]["acc"] / b["history"][-1]["acc"]

    ratio = Statistic("a over b", over_b)
    assert differences(Comparison("r", (Read("t", "a", ratio, "a"),)), evidence)[0] == pytest.approx(80 / 78)
    # a diverged stand-in is left out
    evidence["t"]["a"].append({"seed": 3, "diverged": True, "final": {}})
    assert 3 not in differences(c, evidence)


def test_the_mean_of_the_last_evaluations():
    r = {"seed": 0, "history": [{"round": 1, "acc": 0.5}, {"round": 2, "acc": 0.7}, {"round": 3, "acc": 0.9}]}
    c = Comparison("x", (Read("t", "a", "acc", "a"),))
    assert differences(c, {"t": {"a": [r]}}, last=2) == {0: pytest.approx(80.0)}


def curve(seed: int, values, rounds: int = 20, every: int = 5) -> dict:
    return {"seed": seed, "config": {"rounds": rounds, "eval_every": every},
            "history": [{"round": every * (i + 1), "acc": v} for i, v in enumerate(values)]}


def test_rounds_to_another_runs_final_value_rounded_down_to_half_a_point():
    # the baseline ends at 0.804 (target 0.80, first reached at round 15); ours reaches 0.80 at round 10; a run
    # that never does counts one evaluation past the last round (25)
    evidence = {"t": {"base": [curve(0, [0.5, 0.7, 0.8, 0.804])], "ours": [curve(0, [0.6, 0.81, 0.82, 0.83])],
                      "slow": [curve(0, [0.5, 0.6, 0.7, 0.79])]}}
    faster = rounds_to_final_of("t", "base", "acc", "rounds to base's final accuracy")
    base, ours, slow = (Read("t", k, faster, k) for k in ("base", "ours", "slow"))
    assert differences(Comparison("base − ours", (base,), (ours,)), evidence) == {0: 5.0}
    assert differences(Comparison("base − slow", (base,), (slow,)), evidence) == {0: -10.0}


def test_a_claim_is_not_checked_at_a_scale_its_scales_leave_out():
    evidence = {"t": {"ours": cell([82, 83, 84]), "rival": cell([80, 80, 80])}}
    c = claim(versus("t", "ours", ["rival"], "acc"), scales=("paper",))
    assert assess(c, evidence, "paper").outcome == "holds"
    assert assess(c, evidence, "reference").outcome == "not checked"


def test_assess_reads_looks_from_the_planned_seeds_and_knows_a_partial_check():
    evidence = {"t": {"ours": cell([82, 83, 84, 85, 86]), "rival": cell([80, 80, 80, 80, 80])}}
    c = claim(versus("t", "ours", ["rival"], "acc"))
    a = assess(c, evidence, "reference")
    assert a.outcome == "holds" and a.looks == 2 and a.decision.alpha == pytest.approx(0.025) and a.complete
    three = {"t": {k: v[:3] for k, v in evidence["t"].items()}}
    assert assess(c, three, "reference").looks == 1
    two = {"t": {k: v[:2] for k, v in evidence["t"].items()}}
    assert not assess(c, two, "reference").complete
    empty = {"t": {"ours": [], "rival": []}}
    assert assess(c, empty, "paper").outcome == "not checked"


def test_the_longest_recorded_budget_with_complete_comparisons_decides_and_disagreement_is_named():
    up = {"t": {"ours": cell([82, 83, 84]), "rival": cell([80, 80, 80])}}
    down = {"t": {"ours": cell([78, 77, 79]), "rival": cell([80, 80, 80])}}
    c = claim(versus("t", "ours", ["rival"], "acc"))
    v = verdict(c, {"reference": assess(c, down, "reference"), "paper": assess(c, up, "paper")})
    assert v.deciding.scale == "paper" and v.outcome == "holds" and v.disagree == ["reference"]
    # paper scale at two seeds: not complete, so the reference scale decides
    two = {"t": {k: recs[:2] for k, recs in up["t"].items()}}
    v = verdict(c, {"reference": assess(c, down, "reference"), "paper": assess(c, two, "paper")})
    assert v.deciding.scale == "reference" and v.outcome == "does not hold"
    # the book scale never decides
    v = verdict(c, {"book": assess(c, up, "book")})
    assert v.deciding is None and v.outcome == "not checked"
    # no scale complete: the longest whose recorded comparisons have three paired seeds decides (here the reference
    # scale lacks one rival's runs, the paper scale has one seed), never the one-seed scale because it is longer
    two_rivals = claim(versus("t", "ours", ["rival", "other"], "acc"))
    lacking = {"t": {**down["t"], "other": []}}
    one = {"t": {"ours": cell([90]), "rival": cell([80]), "other": cell([80])}}
    v = verdict(two_rivals, {"reference": assess(two_rivals, lacking, "reference"),
                             "paper": assess(two_rivals, one, "paper")})
    assert v.deciding.scale == "reference" and not v.deciding.complete and v.outcome == "does not hold"
    # a run being recorded (the other rival's first seed at reference scale) leaves the decision where it was (Holm
    # now counts two comparisons: a clear failure still fails)
    started = {"t": {"ours": cell([70, 71, 72]), "rival": cell([80, 80, 80]), "other": cell([80])}}
    v = verdict(two_rivals, {"reference": assess(two_rivals, started, "reference"),
                             "paper": assess(two_rivals, one, "paper")})
    assert v.deciding.scale == "reference" and v.outcome == "does not hold"


def test_a_claim_declares_a_known_kind_and_test():
    with pytest.raises(ValueError, match="kind"):
        claim(versus("t", "a", ["b"], "acc"), kind="some")
    with pytest.raises(ValueError, match="test"):
        claim(versus("t", "a", ["b"], "acc", test="bigger"))


def test_the_box_names_the_deciding_comparison_delta_the_papers_effect_the_looks_and_the_scale():
    from fedlib.studies.verdicts import box_html

    evidence = {"t": {"ours": cell([82, 83, 84, 85, 86]), "rival": cell([80, 80, 80, 80, 80]),
                      "other": cell([85, 86, 84, 85, 86])}}
    held = claim(versus("t", "ours", ["rival"], "acc"), effect=10.0)
    failed = Claim("h", "a hypothesis", "w", "s", (versus("t", "ours", ["other"], "acc"),), "p", None, 0.5, "r",
                   hypothesis=True)
    box = html.unescape(box_html([verdict(c, {"reference": assess(c, evidence, "reference")}) for c in (held, failed)],
                                 {"reference": "R = 10"}))
    # differences 2-6: mean 4, standard error 1.5811 / sqrt(5); t(0.975, 4) = 2.7764: +-1.96
    assert "weakest: ours − rival: +4.00 [+2.04, +5.96] at 5 seeds" in box
    assert "delta 0.5: a reason" in box and "the paper's effect +10.00: above the interval: ruled out here" in box
    assert "2 looks (seeds 3 and 4 added after the verdict at seeds 0-2 was seen): one-sided 97.5% bounds" in box
    assert "(1 claim of the paper; 1 hypothesis of this book beside them: holds 1)" in box
    assert "a hypothesis of this book, not a claim of the paper: not counted" in box
    # shown at once: the deciding comparison, the paper's effect, whether the margin moves; folded: delta, the looks
    shown, folded = box.split("<details class='claim-detail'>", 1)
    assert "weakest: ours − rival" in shown and "the paper's effect +10.00" in shown
    assert "no margin by round (not read off training)" in shown
    assert "delta 0.5: a reason" in folded.split("</details>", 1)[0] and "2 looks" in folded.split("</details>", 1)[0]


# ---------------------------------------------------------------------- every chapter's declarations
def chapter_list():
    from fedlib.studies.registry import chapters

    return list(chapters().values())


@pytest.mark.parametrize("chapter", chapter_list(), ids=lambda c: c.name)
def test_every_chapters_claims_are_declared_once_and_read_its_tables(chapter):
    """Stable, unique ids and texts; every table a claim reads is a table of the chapter (or a view of them) with a
    description in ``TABLE_RUNS``; a smallest effect of interest with its reason; planned seeds."""
    claims = chapter.claims
    assert len({c.id for c in claims}) == len(claims) and len({c.summary for c in claims}) == len(claims)
    tables = set(chapter.declared.tables("reference")) | set(chapter.declared.tables("paper"))
    for c in claims:
        assert set(c.tables) <= tables | set(chapter.declared.table_runs), (c.id, c.tables)
        assert set(c.tables) <= set(chapter.declared.table_runs), c.id
        assert c.delta >= 0 and c.delta_reason and c.words and c.source and c.seeds
        assert c.delta > 0 or c.kind == "deterministic", c.id
        for scale in ("reference", "paper"):   # never a method against itself
            evidence = {t: dict.fromkeys(g, []) for t, g in chapter.declared.tables(scale).items()}
            if chapter.declared.views is not None:
                evidence = chapter.declared.views(evidence, scale)
            for comparison in c.comparisons(evidence, chapter.declared.labels):
                assert set(comparison.plus).isdisjoint(comparison.minus), (c.id, comparison.label)


def test_a_metric_averaged_over_the_rounds_reads_every_evaluation_and_skips_rounds_without_it():
    over = mean_over_rounds("a_glo", "A_glo over the rounds")
    record = {"history": [{"round": 1, "a_glo": 0.5}, {"round": 2, "train_loss": 1.0}, {"round": 3, "a_glo": 0.8}]}
    assert over.of(record, lambda table, cell: None) == pytest.approx(65.0)   # (50 + 80) / 2
    assert over.of({"history": [{"round": 1}]}, lambda table, cell: None) is None
    # a run that peaks and falls keeps its early lead over one that climbs late, which the last evaluation loses
    early, late = ({"history": [{"round": 1, "a_glo": v0}, {"round": 2, "a_glo": v1}]} for v0, v1 in ((0.9, 0.5),
                                                                                                     (0.1, 0.6)))
    assert over.of(early, lambda table, cell: None) - over.of(late, lambda table, cell: None) == pytest.approx(35.0)


def test_the_papers_claims_and_the_books_hypotheses_are_counted_apart():
    """36 claims of the papers as the review found them, and eight sentences it found untested, now claims of their
    own (FedPRP's Dirichlet column of Table III, pFedCSPC's third of FedAvg's rounds, calibration above FedAvg and
    fine-tuning above decoupling, fine-tuning and generalization helping personalization, FedMate's FedProto 15
    points below, FedPCL's backbones for most methods, FedGPA ahead while training), and FedPCL's Table 1 sentence
    on the cost of frozen backbones, FedPRP's two sentences on other columns of Tables II and V (alpha = 0.05; gamma
    = 1.0) and its sentence on where a round's time goes, FedPCL's three sentences on spreads over runs (Table 2,
    Fig. 2a, Fig. 2b) and its sentence on noise (Section 5.6), FedPRP's sentences comparing Table V's two alpha
    columns, on Fig. 5's A_glo curves and on FEDIC's Few and Many classes under sharding and its own Medium and Few
    under Dirichlet (Table III), FedGPA's Fig. 5 (every s), Table 6 (20 and 50 clients), Table A.8 (2,000 samples a
    client) and Table A.9 (a Dirichlet partition) sentences, FedMate's sentence on the model-decoupling methods,
    pFedCSPC's on a global model for personalized tasks; six hypotheses of the book (the fifth and sixth: FedPAC as
    its authors' code runs it, in FedGPA's setting and in FedMate's)."""
    claims = [c for ch in chapter_list() for c in ch.claims]
    assert sum(not c.hypothesis for c in claims) == 69 and sum(c.hypothesis for c in claims) == 6


@pytest.mark.parametrize("chapter", chapter_list(), ids=lambda c: c.name)
def test_every_claim_sentence_of_a_paper_is_listed_with_what_the_chapter_does_with_it(chapter):
    """The chapter's inventory of its paper's claim sentences: every claim of the paper is tested by at least one of
    them and every sentence that names a claim names one that exists; the others say why they cannot be checked
    offline or what testing them needs (nothing silently absent)."""
    from fedlib.claims import Sentence

    inventory = chapter.declared.inventory
    assert all(isinstance(s, Sentence) for s in inventory)
    ids = {c.id for c in chapter.claims if not c.hypothesis}
    named = {s.claim for s in inventory if s.claim}
    assert named == ids, (ids - named, named - ids)
    with pytest.raises(ValueError, match="exactly one"):
        Sentence("words", "Table 1", claim="a", offline="b")


def test_no_claim_is_decided_from_a_minimum_or_maximum_over_seeds():
    """Every declared comparison is a sum of reads minus a shift: no function of several methods' values per seed
    (the old per-seed minima and maxima) can be declared."""
    for ch in chapter_list():
        for c in ch.claims:
            for family in c.compare:
                assert isinstance(family, (Pairs, Comparison)), (ch.name, c.id)
    assert np.isfinite(0.0)


def test_the_deciding_margin_by_round_and_whether_it_still_moves():
    """Two cells evaluated at rounds 10, 20 and 30 on three seeds: the comparison's mean difference at each round is
    read from the records cut there (history up to the round); a margin closing towards 0 by more than its interval's
    half-width over the last third of the rounds (from the evaluation before the last where that third holds only the
    last) still moves, one moving away from 0 does not, nor a sign change smaller than delta; the same comparison on
    the other side of 0 at a longer budget does."""
    from fedlib.claims import BUDGET, still_moving, trajectory
    from fedlib.claims.decide import Compared

    def curve(seed, values):
        return {"seed": seed, "history": [{"round": r, "acc": v / 100} for r, v in zip((10, 20, 30), values)]}

    evidence = {"t": {"a": [curve(s, [50, 60, 70 + s]) for s in range(3)],
                      "b": [curve(s, [55, 62, 69]) for s in range(3)]}}
    c = Comparison("a − b", (Read("t", "a", "acc", "a"),), (Read("t", "b", "acc", "b"),))
    assert trajectory(c, evidence) == pytest.approx({10: -5.0, 20: -2.0, 30: 2.0})   # 70-72 minus 69 at round 30
    tight = Compared("a − b", (0, 1, 2), (1.0, 2.0, 3.0), delta=0.5)   # half-width 1.69
    assert "changed sign" in still_moving({10: -5.0, 20: -2.0, 30: 2.0}, tight)
    assert still_moving({10: -1.0, 20: -0.2, 30: 0.1}, tight) == ""              # 0.3 < delta 0.5
    assert "towards 0" in still_moving({10: 9.0, 20: 6.0, 30: 4.0}, tight)      # last third (20-30): 6 -> 4
    assert still_moving({10: 2.0, 20: 4.0, 30: 6.0}, tight) == ""               # away from 0: only stronger
    assert still_moving({10: 2.0, 30: 6.0}, tight) == ""                        # two evaluations, away from 0
    assert "between its last two evaluations" in still_moving({5: 0.74, 10: -0.26}, tight)   # the tail: rounds 5-10
    assert "towards 0" in still_moving({10: 9.0, 30: 4.0}, tight)               # 9 -> 4: more than 1.69
    assert "round 20 to 30" in still_moving({10: 9.0, 20: 9.0, 24: 6.0, 30: 4.0}, tight)   # a third with two
    assert still_moving({30: -4.0}, tight) == ""                                # one evaluation: nothing to say
    longer = Compared("a − b", (0, 1, 2), (-1.0, -2.0, -3.0))
    assert still_moving({}, tight, longer, "paper").startswith("at paper scale the same comparison is behind")
    held = claim(versus("t", "a", ["b"], "acc"))
    v = verdict(held, {"reference": assess(held, evidence, "reference")})
    assert v.decided_outcome == "holds"
    moved = dataclasses.replace(v, moving="the margin changed sign")
    assert moved.outcome == BUDGET and moved.decided_outcome == "holds"


def test_the_cost_of_a_longer_budget_is_read_off_the_deciding_runs_training_time():
    """3x the rounds, 3 seeds: 3 * 3 * (mean 150 s + mean 300 s) = 4,050 s = 1.125 h; with the second cell recorded
    at 3x for every seed, only the first: 3 * 3 * 150 s = 0.375 h."""
    from fedlib.claims import longer_cost

    timed = lambda seconds: [{"seed": i, "wall_time_s": t} for i, t in enumerate(seconds)]  # noqa: E731
    evidence = {"t": {"a": timed([100, 200]), "b": timed([300])}}
    c = Comparison("a − b", (Read("t", "a", "acc", "a"),), (Read("t", "b", "acc", "b"),))
    assert longer_cost(c, evidence) == ("no longer budget yet: 3x the rounds, 3 seeds, would take about 1.1 h of "
                                        "training at the deciding runs' pace")
    assert "(1 of its 2 cells: the rest are recorded): 3x the rounds, 3 seeds, would take about 0.4 h" in \
        longer_cost(c, evidence, {"t": {"b": timed([1, 1, 1])}})
    assert longer_cost(c, evidence, {"t": {"a": timed([1, 1, 1]), "b": timed([1, 1, 1])}}) == ""


def test_a_spread_comparison_reads_both_sides_paired_by_seed():
    """``Pairs(..., spread=True)``: the rows' spreads over the seeds both have, as log2(sd of the rival / sd of the
    method); hand-computed: the method's values 80, 81, 82, 81 (sd 0.816) against 70, 75, 88, 77 (sd 7.594)."""
    evidence = {"t": {"ours": cell([80, 81, 82, 81]), "rival": cell([70, 75, 88, 77])}}
    found = assess(claim(versus("t", "ours", ["rival"], "acc", spread=True)), evidence, "reference")
    (c,) = found.decision.compared
    assert c.mean == pytest.approx(np.log2(np.std([70, 75, 88, 77], ddof=1) / np.std([80, 81, 82, 81], ddof=1)))
    assert c.values == pytest.approx((80, 81, 82, 81)) and c.others == pytest.approx((70, 75, 88, 77))
    assert c.diffs == pytest.approx((10, 6, -6, 4))
    one = assess(claim(versus("t", "ours", ["rival"], "acc", spread=True)),
                 {"t": {"ours": cell([80]), "rival": cell([70])}}, "reference")
    assert one.outcome == "not checked" and one.decision.missing == ("ours − rival",)   # one seed: no spread
