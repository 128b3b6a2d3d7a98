"""The results overview reads what the chapters leave: headline rows as given, verdicts counted per chapter."""
import fedlib.experiment as experiment
from fedlib.studies import common, overview
from fedlib.studies.common import Claim


def test_summaries_round_trip_and_verdicts_are_counted(tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "DEFAULT_CACHE", tmp_path)
    rows = [{"method": "FedAvg", "ours (book)": "70.00 ± 1.00", "paper": 86.71}]
    common.save_summary("fedgpa", "book", headline=("Table 2", rows))
    common.save_summary("fedgpa", "book", claims=[Claim("a", "p", "o", True), Claim("b", "p", "o", False),
                                                   Claim("c", "p", "o", None), Claim("d", "p", "o", True, "n")],
                        scale_note="scale book")
    (tmp_path / "summaries" / "fedpcl-book.json").write_text("{broken")   # unreadable: treated as not run
    found = overview.summaries("book")
    assert set(found) == {"fedgpa"}
    assert found["fedgpa"]["headline"] == {
        "title": "Table 2",
        "rows": rows,
        "provenance": "",
    }  # the second save kept the first's part
    assert overview.verdict_counts(found["fedgpa"]) == {"hold": 2, "do not hold": 1, "not checked": 1}
    table = overview.chapters_table(found, "book")
    assert list(table["chapter"]) == list(overview.CHAPTERS.values())
    assert table.iloc[0]["claims that hold"] == 2 and table.iloc[1]["run"] == "not run at scale book"
    claims = overview.claims_table(found["fedgpa"])
    assert list(claims["verdict"]) == ["holds here", "does not hold here", "not checked", "holds here"]
    assert claims.iloc[3]["ours"] == "o (n)"
    assert overview.headline_table(found["fedgpa"]).to_dict("records") == rows


def test_headline_tables_keep_their_provenance_and_label_columns(tmp_path, monkeypatch):
    monkeypatch.setattr(experiment, "DEFAULT_CACHE", tmp_path)
    rows = [{"BB": "s", "method": "FedAvg", **{f"d{i}": 50.0 + i for i in range(8)}}]
    common.save_summary("fedpcl", "ci", headline=("Table 2", rows), provenance="scale ci; seeds 0")
    table = overview.headline("fedpcl", overview.summaries("ci")["fedpcl"])
    assert all(list(p.columns[:2]) == ["BB", "method"] for p in table.parts())   # split, labels repeated
    assert table.df.iloc[0]["d0"] == "50.00"
    assert "scale ci; seeds 0" in table._repr_html_()
