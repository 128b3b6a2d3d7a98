"""The results overview reads what the chapters leave: headline rows as given, verdicts counted per chapter."""
import dataclasses

import fedlib.experiment as experiment
from fedlib.studies import common, overview
from fedlib.studies.common import Claim


def test_summaries_round_trip_and_verdicts_are_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "DEFAULT_CACHE", tmp_path)
    rows = [{"method": "FedAvg", "ours (book)": "70.00 ± 1.00", "paper": 86.71}]
    common.save_summary("fedgpa", "book", headline=("Table 2", rows))
    claims = [Claim("a", "p", "o", True, margins={0: 2.0, 1: 2.2, 2: 1.8}),      # interval [1.50, 2.50]
              Claim("b", "p", "o", False, margins={0: -2.0, 1: -2.2, 2: -1.8}),
              Claim("c", "p", "o", None), Claim("d", "p", "o", True, "n", margins={0: 1.0}),   # one seed
              Claim("e", "p", "o", True, margins={0: 1.0, 1: -1.0, 2: 0.5}), Claim("f", "p", "o", False)]
    common.save_summary("fedgpa", "book", claims=claims, scale_note="scale book")
    (tmp_path / "summaries" / "fedpcl-book.json").write_text("{broken")   # unreadable: treated as not run
    found = overview.summaries("book")
    assert set(found) == {"fedgpa"}
    assert found["fedgpa"]["headline"] == {
        "title": "Table 2",
        "rows": rows,
        "provenance": "scale book; no runs",
        "floors": [],
    }  # the second save kept the first's part
    assert overview.verdict_counts(found["fedgpa"]) == {"hold": 1, "do not hold": 1, "inconclusive": 3,
                                                         "not checked": 1}
    table = overview.chapters_table(found, "book")
    assert list(table["chapter"]) == list(overview.titles().values())
    assert table.iloc[0]["claims that hold"] == 1 and table.iloc[0]["inconclusive"] == 3
    assert table.iloc[1]["run"] == "not run at scale book"
    verdicts = list(overview.claims_table(found["fedgpa"])["verdict"])
    assert verdicts[0] == "holds at 3 seeds (margin +2.00, 95% CI [+1.50, +2.50])"
    assert verdicts[1].startswith("does not hold at 3 seeds") and verdicts[2] == "not checked"
    assert verdicts[3] == "inconclusive at 1 seed (margin +1.00, no interval)"
    assert verdicts[5].startswith("inconclusive (point verdict on the means: does not hold")
    assert overview.claims_table(found["fedgpa"]).iloc[3]["ours"] == "o (n)"
    assert overview.headline_table(found["fedgpa"]).to_dict("records") == rows


def test_headline_tables_keep_their_provenance_and_label_columns(tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "DEFAULT_CACHE", tmp_path)
    rows = [{"BB": "s", "method": "FedAvg", **{f"d{i}": 50.0 + i for i in range(8)}}]
    record = {"seed": 0, "config": {"dataset": "digit4", "model": "projection", "num_clients": 4, "rounds": 2},
              "final": {}, "history": []}
    common.save_summary("fedpcl", "ci", headline=("Table 2", rows), records=[record], test_set="a balanced test")
    table = overview.headline("fedpcl", overview.summaries("ci")["fedpcl"])
    assert all(list(p.columns[:2]) == ["BB", "method"] for p in table.parts())   # split, labels repeated
    assert table.df.iloc[0]["d0"] == "50.00"
    assert "scale ci; data digit4; model projection; 4 clients, 2 rounds; test: a balanced test" in table._repr_html_()


def test_the_overview_states_a_headline_tables_own_floor_and_marks_cells_at_or_below_it(tmp_path, monkeypatch):
    """A headline read on local test sets, saved with its records: the overview's floor is the clients' majority
    share (local tests of 10 images, 9 and 8 of them of the majority class: 85.0%), not a uniform guess; a cell at
    84.00 gets the dagger, one at 90.00 does not."""
    from fedlib.studies.report import local

    monkeypatch.setattr(experiment, "DEFAULT_CACHE", tmp_path)
    record = {"seed": 0, "config": {"dataset": "fmnist", "model": "cnn2", "num_clients": 2, "rounds": 2},
              "train_counts": [[36, 4], [8, 32]], "final": {}, "history": []}
    rows = [{"setting": 1, "s": 20, "method": m, "ours": v} for m, v in (("A", "84.00 (n=1)"), ("B", "90.00 (n=1)"))]
    common.save_summary("fedgpa", "ci", headline=("Table 2", rows), records=[record],
                        test_set=local("each client's local test set"))
    table = overview.headline("fedgpa", overview.summaries("ci")["fedgpa"])
    assert list(table.df["ours"]) == ["84.00 (n=1) †", "90.00 (n=1)"]
    assert "majority floor: 85.0%" in table._repr_html_() and "uniform guess" not in table._repr_html_()


def test_recorded_scales_are_counted_apart_from_the_books_own_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "DEFAULT_CACHE", tmp_path)
    held = Claim("a", "p", "o", True, margins={0: 2.0, 1: 2.2, 2: 1.8})
    failed = Claim("b", "p", "o", False, margins={0: -2.0, 1: -2.2, 2: -1.8})
    common.save_summary("fedgpa", "reference", claims=[held, failed], scale_note="reference scale, Settings [1]")
    common.save_summary("fedgpa", "book", claims=[held, held, held])   # never counted in the recorded table
    table = overview.recorded_claims_table().set_index("chapter")
    assert table.loc["FedGPA", "reference scale"] == ("1 hold, 1 do not hold, 0 inconclusive "
                                                      "(reference scale, Settings [1])")
    assert table.loc["FedGPA", "paper scale"] == "-" and table.loc["FedPCL", "reference scale"] == "-"


def test_the_overview_counts_each_claim_once_at_the_scale_that_decides_it(tmp_path, monkeypatch):
    """A claim checked at both recorded scales counts once, at the scale its chapter's verdict box names (a
    three-seed paper scale over a reference scale; a partial paper-scale check under a whole reference one); a
    hypothesis of the book is never counted; chapters with no recorded verdict are left out."""
    monkeypatch.setattr(experiment, "DEFAULT_CACHE", tmp_path)
    three = {0: 1.0, 1: 1.2, 2: 0.9}
    reference = [Claim("a", "p", "o", False, margins={s: -m for s, m in three.items()}),
                 Claim("b", "p", "o", True, margins=three), Claim("c", "p", "o", False, margins={0: -1.0, 1: 1.0})]
    paper = [Claim("a", "p", "o", True, margins=three),
             Claim("b", "p", "o", False, margins={s: -m for s, m in three.items()}, partial="Setting 1 of 1-3"),
             Claim("h", "p", "o", True, margins=three, hypothesis=True)]
    common.save_summary("fedgpa", "reference", claims=reference, scale_note="r")
    common.save_summary("fedgpa", "paper", claims=paper, scale_note="p")
    assert overview.best_evidence_outcomes() == {"fedgpa": [("paper", "holds"), ("reference", "holds"),
                                                            ("reference", "inconclusive")]}
    assert overview.decided_sentence() == (
        "Each claim at the scale that decides it (its chapter's verdict box), over 1 chapter: 2 of 3 claims "
        "decided; 2 hold, 0 do not hold, 1 inconclusive (paper scale 1, reference scale 2).")
    table = overview.recorded_claims_table().set_index("chapter")
    assert table.loc["FedGPA", "best evidence"] == "2 hold, 0 do not hold, 1 inconclusive (paper scale 1, " \
                                                   "reference scale 2)"
    assert table.loc["FedPRP", "best evidence"] == "-"


def test_best_evidence_takes_the_highest_scale_that_checked_each_claim():
    from fedlib.studies.verdicts import best_evidence, best_evidence_html

    book = [Claim("a", "p", "o book", True, margins={0: 5.0}), Claim("b", "p", "o book", True, margins={0: 1.0})]
    reference = [Claim("a", "p", "o ref", False, margins={0: -2.0, 1: -2.2, 2: -1.8}),
                 Claim("b", "p", "o ref", None)]                                   # b was not checked there
    paper = [Claim("c", "p", "o paper", True, margins={0: 1.0, 1: 1.1, 2: 0.9})]
    found = best_evidence({"book": book, "reference": reference, "paper": paper})
    assert [(scale, c.claim, sorted(others)) for scale, c, others in found] == [
        ("paper", "c", []), ("reference", "a", ["book"]), ("book", "b", ["reference"])]
    html = best_evidence_html({"book": book, "reference": reference, "paper": paper},
                              {"book": "scale book", "reference": "R = 10", "paper": "150 rounds"})
    assert "decided at paper scale: holds 1; reference scale: does not hold 1; book scale: inconclusive 1" in html
    assert "book: inconclusive at 1 seed (margin +5.00, no interval)" in html


def test_one_paper_scale_seed_does_not_outrank_three_reference_scale_seeds():
    """A one-seed verdict has no interval and can decide nothing: the reference scale's three seeds decide the
    claim, and the paper-scale seed is shown beside it; with two paper-scale seeds the paper scale decides again,
    and a one-seed reference verdict never gives way to a three-seed book verdict (book scale tests no claim)."""
    from fedlib.studies.verdicts import best_evidence

    paper_one = [Claim("a", "p", "o", True, margins={0: 1.0})]
    reference = [Claim("a", "p", "o", False, margins={0: -2.0, 1: -2.2, 2: -1.8})]
    ((scale, claim, others),) = best_evidence({"reference": reference, "paper": paper_one})
    assert scale == "reference" and claim.verdict.outcome == "does not hold" and list(others) == ["paper"]
    paper_two = [Claim("a", "p", "o", True, margins={0: 1.0, 1: 1.2})]
    assert best_evidence({"reference": reference, "paper": paper_two})[0][0] == "paper"
    book = [Claim("a", "p", "o", True, margins={0: 1.0, 1: 1.2, 2: 0.9})]
    assert best_evidence({"book": book, "reference": [Claim("a", "p", "o", True, margins={0: 1.0})]})[0][0] == \
        "reference"


def test_a_check_of_part_of_a_claims_grid_never_outranks_a_check_of_all_of_it():
    """Paper scale with Setting 1 of Settings 1-3 recorded: the reference scale's whole check decides, the partial
    one is shown beside it with its scope, and a decided verdict the other way is named a disagreement; with no
    whole check at a recorded scale the partial one decides, its scope shown with our numbers."""
    from fedlib.studies.verdicts import best_evidence, best_evidence_html

    reference = [Claim("a", "p", "o ref", False, margins={0: -3.3, 1: -2.9, 2: -3.8})]
    paper = [Claim("a", "p", "o paper", True, margins={0: 0.6, 1: 0.4, 2: 0.7},
                   partial="Setting 1 of Settings 1-3")]
    ((scale, claim, others),) = best_evidence({"reference": reference, "paper": paper})
    assert scale == "reference" and claim.verdict.outcome == "does not hold" and list(others) == ["paper"]
    box = best_evidence_html({"reference": reference, "paper": paper}, {"reference": "R = 10", "paper": "150"})
    assert "paper (checked on Setting 1 of Settings 1-3 only): holds at 3 seeds" in box
    assert "the paper scale decides the opposite: the scales disagree" in box
    ((scale, claim, _),) = best_evidence({"reference": [Claim("a", "p", "o", True, margins={0: 1.0})],
                                          "paper": paper})
    assert scale == "paper" and claim.partial
    alone = best_evidence_html({"paper": paper}, {"paper": "150"})
    assert "o paper<br><em>checked on Setting 1 of Settings 1-3 only</em>" in alone
    assert "disagree" not in alone


def test_a_hypothesis_of_the_book_is_shown_and_tested_but_never_counted_as_a_claim_of_the_paper():
    from fedlib.studies.verdicts import best_evidence_html, verdict_html

    claims = [Claim("a", "p", "o", True, margins={0: 1.0, 1: 1.2, 2: 0.9}),
              Claim("protocol", "p", "o", True, margins={0: 5.0, 1: 6.0, 2: 5.5}, hypothesis=True)]
    box = verdict_html(claims, "reference scale")
    assert "holds 1 (of the paper's 1 claim; 1 hypothesis of this book beside them" in box
    assert "a hypothesis of this book, not a claim of the paper: not counted" in box
    best = best_evidence_html({"reference": claims}, {"reference": "R = 10"})
    assert "(1 claim of the paper, and 1 hypothesis of this book; decided at reference scale: holds 1)" in best
    only = best_evidence_html({"reference": claims[1:]}, {"reference": "R = 10"})   # the side-by-side chapter's case
    assert "(0 claims of the paper, and 1 hypothesis of this book; none to decide)" in only
    summary = {"claims": [dataclasses.asdict(c) for c in claims]}
    assert overview.verdict_counts(summary)["hold"] == 1
