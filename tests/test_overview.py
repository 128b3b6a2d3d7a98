"""The results overview: every claim from the chapters' declarations and committed records, counted per chapter;
headline rows and a page's own smoke runs as the chapters leave them."""
import fedlib.experiment as experiment
from fedlib.claims import Claim, assess, verdict, versus
from fedlib.studies import common, overview


def rec(seed: int, value: float) -> dict:
    return {"seed": seed, "history": [{"round": 1, "acc": value / 100}]}


def made_up(name: str, plus, minus, hypothesis: bool = False) -> Claim:
    return Claim(name, f"claim {name}", "words", "Table 1", (versus("t", "ours", ["rival"], "acc"),), "p", None, 0.5,
                 "r", hypothesis=hypothesis)


def verdict_of(name: str, ours, rival, scale: str = "reference", hypothesis: bool = False):
    c = made_up(name, ours, rival, hypothesis)
    evidence = {"t": {"ours": [rec(s, v) for s, v in enumerate(ours)],
                      "rival": [rec(s, v) for s, v in enumerate(rival)]}}
    return verdict(c, {scale: assess(c, evidence, scale)})


def test_summaries_round_trip_and_a_pages_own_runs_are_counted_apart(tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "DEFAULT_CACHE", tmp_path)
    rows = [{"method": "FedAvg", "ours (book)": "70.00 ± 1.00", "paper": 86.71}]
    common.save_summary("fedgpa", "book", headline=("Table 2", rows))
    smoke = [verdict_of("a", [82, 83, 84], [80, 80, 80]).deciding, verdict_of("b", [82, 80, 84], [80, 81, 80]).deciding]
    common.save_summary("fedgpa", "book", claims=smoke, scale_note="scale book")
    (tmp_path / "summaries" / "fedpcl-book.json").write_text("{broken")   # unreadable: treated as not run
    found = overview.summaries("book")
    assert set(found) == {"fedgpa"}
    assert found["fedgpa"]["headline"]["rows"] == rows   # the second save kept the first's part
    assert overview.smoke_counts(found["fedgpa"])["holds"] == 1
    assert overview.smoke_counts(found["fedgpa"])["inconclusive"] == 1
    table = overview.chapters_table(found, "book")
    assert list(table["chapter"]) == list(overview.titles().values())
    assert table.iloc[1]["run"] == "not run at scale book"
    assert list(overview.smoke_claims_table(found["fedgpa"])["on this page's runs"]) == ["holds", "inconclusive"]
    assert overview.headline_table(found["fedgpa"]).to_dict("records") == rows


def test_the_overview_counts_each_claim_once_and_never_a_hypothesis():
    found = {"fedgpa": [verdict_of("a", [82, 83, 84], [80, 80, 80]), verdict_of("b", [78, 77, 79], [80, 80, 80]),
                        verdict_of("c", [82, 80, 84], [80, 81, 80]),
                        verdict_of("h", [82, 83, 84], [80, 80, 80], hypothesis=True)],
             "fedprp": [verdict_of("d", [82, 83, 84], [80, 80, 80], scale="book")]}   # book scale decides nothing
    counts = overview.outcome_counts(found)
    assert counts["FedGPA"]["holds"] == 1 and counts["FedGPA"]["does not hold"] == 1
    assert counts["FedGPA"]["inconclusive"] == 1 and counts["FedPRP"]["not checked"] == 1
    assert overview.decided_sentence(found) == ("Over 2 chapters, 2 of 4 claims are decided at the scale that decides "
                                                "each: 1 holds, 1 does not hold, 1 inconclusive, 1 not checked.")
    table = overview.claims_table(found)
    assert list(table["claim"])[-1] == "claim h (a hypothesis of this book)"   # hypotheses after the claims
    first = table.iloc[0]
    assert first["outcome"] == "holds" and first["margin [interval]"] == "+3.00 [+1.31, +4.69]"
    assert first["scale"] == "reference" and first["seeds"] == 3 and first["looks"] == 1


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
    from fedlib.studies.report import Measured, local

    monkeypatch.setattr(experiment, "DEFAULT_CACHE", tmp_path)
    record = {"seed": 0, "config": {"dataset": "fmnist", "model": "cnn2", "num_clients": 2, "rounds": 2},
              "train_counts": [[36, 4], [8, 32]], "final": {}, "history": []}
    rows = [{"setting": 1, "s": 20, "method": m, "ours": Measured(v, 0.0, 1)} for m, v in (("A", 84.0), ("B", 90.0))]
    common.save_summary("fedgpa", "ci", headline=("Table 2", rows), records=[record],
                        test_set=local("each client's local test set"))
    table = overview.headline("fedgpa", overview.summaries("ci")["fedgpa"])
    assert list(table.df["ours"]) == ["84.00 (n=1) †", "90.00 (n=1)"]
    assert "majority floor: 85.0%" in table._repr_html_() and "uniform guess" not in table._repr_html_()


