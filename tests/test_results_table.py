"""The book's results tables: provenance read from the records, one number format, no index column, split to fit."""
import json

import pandas as pd

from fedlib.cli import book_builder
from fedlib.studies.common import ResultsTable, provenance_line, records_in
from fedlib.studies.registry import chapters


def record(seed, dataset="fmnist", model=None, wall=30.0, device="cpu (x86_64)", code="fedlib 0.1.0 (abc1234)", **cfg):
    config = {"dataset": dataset, "model": model, "backbones": None, "num_clients": 20, "rounds": 5, **cfg}
    return {"config": config, "final": {}, "seed": seed, "wall_time_s": wall, "device": device, "code_version": code}


def test_records_are_found_once_in_nested_groups():
    a, b, c = record(0), record(1), record(2)
    assert records_in({"x": [a, b], "y": ([c], {"z": a})}) == [a, b, c]


def test_provenance_states_scale_data_model_test_seeds_spread_code_device_and_time():
    recs = [record(s, wall=45.0) for s in (2, 0, 1)] + [record(0, dataset="mnist", model="cnn3", wall=45.0,
                                                               code="fedlib 0.1.0 (def5678)", device="cuda (H100)")]
    line = provenance_line(recs, "book", "each client's local test set")
    assert line.startswith("scale book; data fmnist, mnist; model cnn2, cnn3;")   # fmnist's default model is cnn2
    assert "20 clients, 5 rounds" in line
    assert "test: each client's local test set" in line
    assert "seeds 0, 1, 2: mean ± population std (ddof 0) over 3 seeds;" in line
    assert "code fedlib 0.1.0 (abc1234), fedlib 0.1.0 (def5678)" in line
    assert "device cpu (x86_64), cuda (H100)" in line
    assert line.endswith("4 runs, 3.0 min of training")                             # 4 x 45 s
    assert "seeds 7: one seed, no spread;" in provenance_line([record(7)], "ci", "t")
    assert "model projection" in provenance_line([record(0, dataset="digit4", backbones=["a"])], "ci", "t")


def test_numbers_share_one_format_and_the_index_becomes_a_column():
    df = pd.DataFrame(
        {
            "ours": ["70.00 ± 1.00", "61.50"],
            "paper": [86.7, 71.0],
            "uploaded": [12345, 7],
            "ok": [True, False],
            "gap": [float("nan"), -1.234],
        },
        index=pd.Index(["FedAvg", "FedGPA"], name="method"),
    )
    table = ResultsTable(df, max_columns=10)
    assert table.df.to_dict("records") == [
        {"method": "FedAvg", "ours": "70.00 ± 1.00", "paper": "86.70", "uploaded": "12,345", "ok": "yes", "gap": "-"},
        {"method": "FedGPA", "ours": "61.50", "paper": "71.00", "uploaded": "7", "ok": "no", "gap": "-1.23"}]
    html = table._repr_html_()
    assert "<th></th>" not in html and "<th>method</th>" in html   # no unnamed pandas index column


def test_wide_tables_are_split_with_their_key_columns_repeated():
    cols = {f"c{i}": [i] for i in range(9)}
    table = ResultsTable(pd.DataFrame({"BB": ["s"], "method": ["FedAvg"], **cols}), keys=2, max_columns=5)
    parts = table.parts()
    assert [list(p.columns) for p in parts] == [["BB", "method", "c0", "c1", "c2"], ["BB", "method", "c3", "c4", "c5"],
                                               ["BB", "method", "c6", "c7", "c8"]]
    assert table._repr_html_().count("<table") == 3


def test_a_table_of_numbers_is_split_where_it_would_pass_the_text_column():
    """FedPRP's Table I at book scale: four cells of 20 characters ("24.15 ± 3.15 (n=3) †", 144 px each at 6.5 px a
    character and 14 px of padding) beside a method name and the paper's number passed the Results overview's column
    (685 px measured against 654): by hand, method 6.5 x 8 + 14 = 66 px, so 640 - 66 = 574 px hold three such
    columns (432) and a fourth (576) passes; the paper's column (6.5 x 10 + 14 = 79) joins the second part. A table
    of sentences wraps instead and keeps its columns together."""
    from fedlib.studies.report import ResultsTable

    cell = "24.15 ± 3.15 (n=3) †"
    df = pd.DataFrame({"method": ["FedProto"], **{f"A{i}": [cell] for i in range(4)}, "paper (CIFAR-10)": [46.11]})
    table = ResultsTable(df)
    assert table.column_px("A0") == 6.5 * 20 + 14 and table.column_px("method") == 6.5 * 8 + 14
    assert [list(p.columns) for p in table.parts()] == [["method", "A0", "A1", "A2"],
                                                      ["method", "A3", "paper (CIFAR-10)"]]
    assert [len(p.columns) for p in ResultsTable(df.iloc[:, :4]).parts()] == [4]   # three fit
    # the table as built at book scale: its fourth column narrower (131 px: "73.63 ± 3.34 (n=3)"), so four fit in
    # 574 px (563) and the paper's column would stand alone; two parts share the five columns out, three and two
    narrower = df.assign(A3=["73.63 ± 3.34 (n=3)"])
    assert [list(p.columns) for p in ResultsTable(narrower).parts()] == [["method", "A0", "A1", "A2"],
                                                                         ["method", "A3", "paper (CIFAR-10)"]]
    sentences = pd.DataFrame({"claim": ["a sentence much longer than forty characters, which wraps"],
                              **{f"A{i}": [cell] for i in range(4)}})
    assert len(ResultsTable(sentences).parts()) == 1


def test_pivoted_columns_are_named_by_level():
    df = pd.DataFrame({"method": ["A", "A"], "s": [20, 80], "ours": ["1", "2"]}).pivot(index="method", columns="s",
                                                                                      values=["ours"])
    assert list(ResultsTable(df).df.columns) == ["method", "ours s=20", "ours s=80"]
    text = repr(ResultsTable(df, [record(0)], "ci", "local"))
    assert text.splitlines()[-1].startswith("scale ci; data fmnist")


def test_stored_grid_report_counts_cells_and_names_where_records_were_made(capsys):
    from fedlib.studies.common import report_stored

    a = {**record(0, wall=7200.0, device="cuda (H100)"), "executor": "batched", "finished_at": "2026-11-20 10:00:00"}
    b = {**record(1, wall=3600.0, device="cuda (H100)"), "executor": "batched", "finished_at": "2026-11-21 09:00:00"}
    found = report_stored(
        {"x": {"records": [a, b], "stale": 1, "missing": 0}, "y": {"records": [], "stale": 0, "missing": 3}}, "grid"
    )
    out = capsys.readouterr().out.splitlines()
    assert found == [a, b]
    assert out[0] == "committed paper-scale records (grid): 2 current, 1 stale, 3 missing of 6"
    assert out[1] == ("made on cuda (H100) (batched executor), 2026-11-20 to 2026-11-21, code fedlib 0.1.0 (abc1234): "
                      "2 runs, 3.0 h of device time")
    assert report_stored({"y": {"records": [], "stale": 0, "missing": 2}}) == []
    assert "No paper-scale run has been recorded yet" in capsys.readouterr().out


def test_cells_below_twice_chance_are_marked_and_chance_is_stated():
    """10 classes: chance 10%; our 15.00 is below 20 and gets a dagger, 55.00 does not; the paper's column (quoted
    numbers) and a measured time (not an accuracy) are never marked, and a cell that only reads like ours (text, not a
    ``Measured``) is never parsed."""
    from fedlib.studies.report import Measured, ResultsTable

    record = {"config": {"dataset": "digits", "num_clients": 2, "rounds": 1, "method": "fedavg", "model": None},
              "final": {}, "seed": 0, "train_counts": [[1] * 10], "history": []}
    table = ResultsTable([{"method": "A", "acc": Measured(15.0, 1.0, 3), "paper": 12.0,
                           "time / round": Measured(3.0, 0.0, 1, accuracy=False), "quoted": "15.00 (n=1)"},
                          {"method": "B", "acc": Measured(55.0, 0.0, 1), "paper": 80.0,
                           "time / round": Measured(3.0, 0.0, 1, accuracy=False), "quoted": "15.00 (n=1)"}],
                         [record], "book", "local")
    assert list(table.df["acc"]) == ["15.00 ± 1.00 (n=3) †", "55.00 (n=1)"]
    assert list(table.df["time / round"]) == ["3.00 (n=1)"] * 2
    assert list(table.df["quoted"]) == ["15.00 (n=1)"] * 2 and table.marked == 1
    assert "chance: 10% (a uniform guess over 10 classes); † below twice chance" in table.caption


def test_an_accuracy_is_marked_whatever_its_column_is_called():
    """Whether a cell is marked comes from the cell (a ``Measured`` accuracy), never from its column's title: "ours
    (paper scale)" and "A_glo (round 50)" are accuracies; the paper's own column (quoted numbers) is never marked, and
    a measured accuracy survives the summary's JSON with its kind."""
    from fedlib.studies.report import Measured, ResultsTable, from_json

    record = {"config": {"dataset": "digits", "num_clients": 2, "rounds": 1, "method": "fedavg", "model": None},
              "final": {}, "seed": 0, "train_counts": [[1] * 10], "history": []}
    weight = Measured(0.5, 0.1, 3, accuracy=False)
    assert from_json(weight.as_json()).accuracy is False and from_json(Measured(1, 0, 1).as_json()).accuracy is True
    table = ResultsTable([{"method": "A", "ours (paper scale) s=20": Measured(15.0, 0.0, 1),
                           "A_glo (round 50)": Measured(12.0, 0.0, 1), "paper s=20": 12.0,
                           "weight on itself": from_json(weight.as_json())}],
                         [record], "paper", "balanced")
    assert list(table.df["ours (paper scale) s=20"]) == ["15.00 (n=1) †"]
    assert list(table.df["A_glo (round 50)"]) == ["12.00 (n=1) †"]
    assert list(table.df["paper s=20"]) == ["12.00"] and list(table.df["weight on itself"]) == ["0.50 ± 0.10 (n=3)"]
    assert "chance: 10%" in table.caption and table.marked == 2


def test_a_book_scale_table_near_chance_fails_the_build_unless_it_says_why(tmp_path):
    """The dagger marks a cell below twice chance; at book scale such a table carries a flag that
    book/build.py turns into a failed notebook, unless the table gives a reason (``at_chance``); ci scale
    (a code test) never flags."""
    import json

    from fedlib.studies.report import Measured, ResultsTable

    build = book_builder()
    rows = [{"method": "A", "acc": Measured(12.0, 0.0, 1)}, {"method": "B", "acc": Measured(80.0, 0.0, 1)}]
    flagged = ResultsTable(rows, scale="book", classes=10)._repr_html_()
    explained = ResultsTable(rows, scale="book", classes=10, at_chance="the paper's point: it fails here")
    trained = ResultsTable([rows[1]], scale="book", classes=10)._repr_html_()
    ci = ResultsTable(rows, scale="ci", classes=10)._repr_html_()
    assert "data-unexplained-chance='1'" in flagged
    assert "data-unexplained-chance" not in explained._repr_html_() + trained + ci
    assert "the paper's point: it fails here" in explained.caption

    def notebook(*htmls):
        path = tmp_path / f"nb{len(htmls)}.ipynb"
        cells = [{"cell_type": "code", "outputs": [{"data": {"text/html": [h]}}]} for h in htmls]
        path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": []}, *cells]}))
        return path

    assert build.tables_at_chance(notebook(trained, flagged)) == ["code cell 2: 1 cells"]
    assert build.tables_at_chance(notebook(trained, explained._repr_html_(), ci)) == []


def test_every_chapter_states_its_settings_against_the_papers_with_a_reason_for_each_difference():
    """hyperparameter_rows raises on a difference without a reason; at book scale the learning rate shown
    is the one the committed tuning record chose (results/tuning/), and the scale's own value."""

    from fedlib.studies import tuning

    for chapter, study in chapters().items():
        for scale in ("ci", "book", "paper"):
            rows = {r["setting"]: r for r in study.hyperparameters(scale)}
            assert all(r["why they differ"] for r in rows.values() if r["here"] != r["paper's protocol"])
            if scale == "paper":
                assert all(r["here"] == r["paper's protocol"] for r in rows.values())
            # the method's hyperparameters by name and value, never "defaults"
            assert rows["method hyperparameters"]["here"] != "defaults"
        if study.declared.tuning is not None:
            chosen, lr = tuning.read(chapter)["chosen"], study.declared.reference_run("book").lr
            assert lr == study.declared.scales["book"].lr and rows_lr(study) == f"{lr:g}"
            assert lr == chosen or study.declared.lr_override   # another rate than the record's needs a stated reason
    fedgpa = {r["setting"]: r for r in chapters()["fedgpa"].hyperparameters("paper")}
    assert fedgpa["method hyperparameters"]["here"] == "lam=0.01, mu=0.5, lga=True, gpa_f=True, gpa_c=True"


def test_a_book_learning_rate_other_than_the_tuned_one_needs_a_reason(monkeypatch):
    import pytest

    from fedlib.studies import fedprp

    monkeypatch.setattr(fedprp, "LR_OVERRIDE", "")
    with pytest.raises(ValueError, match="not the tuned 0.03 and no LR_OVERRIDE"):
        chapters()["fedprp"].hyperparameters("book")


def rows_lr(study) -> str:
    return next(r["here"] for r in study.hyperparameters("book") if r["setting"] == "learning rate")


def test_each_table_names_the_record_file_of_every_run_and_the_command_that_recomputes_it(monkeypatch):
    from fedlib import results
    from fedlib.studies.report import Measured, ResultsTable

    record = {"config": {"dataset": "fmnist", "num_clients": 2, "rounds": 1, "method": "fedgpa", "model": None},
              "final": {}, "seed": 2, "key": "0123456789abcdef", "history": []}
    monkeypatch.setattr(results, "committed_in", lambda key, among=None: "fedgpa")
    paper = ResultsTable([{"method": "FedGPA", "acc": Measured(50.0, 0.0, 1)}], [record], "paper")._repr_html_()
    assert "fedgpa, fmnist, seed 2: <code>results/fedgpa/0123456789abcdef.json</code> (committed)" in paper
    assert "python -m fedlib records fedgpa --scale paper: runs what is missing" in paper
    assert "(committed under results/)" in paper
    monkeypatch.setattr(results, "committed_in", lambda key, among=None: None)
    book = ResultsTable([{"method": "FedGPA", "acc": Measured(50.0, 0.0, 1)}], [record], "book")._repr_html_()
    # a run made by this build is not in the repository: no path into the git-ignored cache is given as its source
    assert "run 0123456789abcdef, computed when this page was built" in book and ".fedlib-cache/0123" not in book
    assert "(computed at build time)" in book and "fedlib book --config book" in book
    other = {**record, "key": "fedcba9876543210", "seed": 3}
    committed = "0123456789abcdef"
    monkeypatch.setattr(results, "committed_in", lambda key, among=None: "fedgpa" if key == committed else None)
    mixed = ResultsTable([{"method": "FedGPA", "acc": "50.00 (n=2)"}], [record, other], "reference")._repr_html_()
    assert "(1 committed under results/, 1 computed at build time)" in mixed
    assert "python -m fedlib records fedgpa --scale reference" in mixed


def test_a_committed_record_is_found_in_its_chapters_folder_from_any_page(tmp_path):
    """The Results overview shows every chapter's committed tables: each record names the folder that holds it."""
    from fedlib import results

    (tmp_path / "fedprp").mkdir()
    (tmp_path / "fedgpa").mkdir()
    (tmp_path / "fedprp" / "0123456789abcdef.json").write_text("{}")
    assert results.committed_in("0123456789abcdef", tmp_path) == "fedprp"
    assert results.committed_in("fedcba9876543210", tmp_path) is None
    assert results.committed_in("0123456789abcdef", tmp_path / "absent") is None


def test_a_book_page_shows_one_parameters_cell_with_the_values_of_its_build(tmp_path):
    """papermill leaves the notebook's parameters cell (defaults, commented) and adds its injected cell; the book
    shows one cell: the defaults replaced by the injected values, their comments kept, the injected cell gone."""

    import nbformat

    build = book_builder()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"),
                nbformat.v4.new_code_cell('scale = "book"      # ci | book | paper\nsettings = [1, 2, 3]\nseeds = 3',
                                          metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell('# Parameters\nscale = "book"\nsettings = [1, 2]\n',
                                          metadata={"tags": ["injected-parameters"]}),
                nbformat.v4.new_code_cell("print(scale)")]
    path = tmp_path / "page.ipynb"
    nbformat.write(nb, str(path))
    assert build.merge_parameters(path)
    merged = nbformat.read(str(path), as_version=4)
    assert [c.metadata.get("tags", []) for c in merged.cells[1:3]] == [["parameters"], []]
    assert merged.cells[1].source == ('scale = "book"      # ci | book | paper\n'
                                      "settings = [1, 2]  # set by this build (the notebook's default: [1, 2, 3])\n"
                                      "seeds = 3")
    assert not build.merge_parameters(path)   # nothing injected any more: unchanged


def test_the_status_box_is_the_first_thing_under_a_pages_title(tmp_path):
    """The set-up cell's status box moves into a cell of its own (input hidden) right after the title and the
    paper's citation line, before the introduction; the set-up keeps its other outputs; a page without a box is
    left as it is."""

    import nbformat

    build = book_builder()
    box = nbformat.v4.new_output("display_data", data={"text/html": "<div class='verdict'><p><strong>Where this "
                                                                    "chapter stands.</strong> ...</p></div>"})
    printed = nbformat.v4.new_output("stream", name="stdout", text="scale book: 8 rounds\n")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"),
                nbformat.v4.new_code_cell('scale = "book"', metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("study = open_chapter(...)", outputs=[printed, box])]
    path = tmp_path / "page.ipynb"
    nbformat.write(nb, str(path))
    assert build.status_first(path)
    moved = nbformat.read(str(path), as_version=4)
    assert [c.cell_type for c in moved.cells] == ["markdown", "code", "code", "code"]
    assert moved.cells[1].metadata["tags"] == ["remove-input", "status-box"] and moved.cells[1].source   # rendered
    assert "Where this chapter stands" in moved.cells[1].outputs[0]["data"]["text/html"]
    assert moved.cells[3].outputs == [printed]
    assert not build.status_first(path)   # moved once
    # a chapter's title, its citation line, then the introduction: the box goes between citation and introduction
    nb.cells[0] = nbformat.v4.new_markdown_cell("# Title\n\n*Authors, Venue.* [doi:10.1/x](https://doi.org/10.1/x)"
                                                "\n\n**The problem.** Text.\n\nMore text.")
    nbformat.write(nb, str(path))
    assert build.status_first(path)
    moved = nbformat.read(str(path), as_version=4)
    assert [c.cell_type for c in moved.cells] == ["markdown", "code", "markdown", "code", "code"]
    assert moved.cells[0].source == "# Title\n\n*Authors, Venue.* [doi:10.1/x](https://doi.org/10.1/x)"
    assert "status-box" in moved.cells[1].metadata["tags"]
    assert moved.cells[2].source == "**The problem.** Text.\n\nMore text."
    plain = tmp_path / "plain.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T")]), str(plain))
    assert not build.status_first(plain)


def test_majority_share_is_the_largest_class_of_each_local_test_allocation():
    from fedlib.data.partition import majority_share

    # fraction 1: the local test mirrors the training counts exactly; 6 of 10 and 3 of 4
    assert majority_share([[6, 2, 2, 0], [1, 3, 0, 0]], 1.0).tolist() == [0.6, 0.75]
    # fraction 0.5 of 10 images: 5 test images split 3-1-1 by largest remainder
    assert majority_share([[6, 2, 2, 0]], 0.5).tolist() == [0.6]


def test_a_local_test_table_is_marked_against_the_majority_floor_and_a_balanced_one_against_chance():
    from fedlib.studies.report import Measured, ResultsTable, balanced, local

    recs = [{"config": {"dataset": "fmnist", "num_clients": 2, "rounds": 1, "method": "fedavg", "model": None,
                        "partition": {"name": "skew", "test_fraction": 1.0}},
             "final": {}, "seed": 0, "train_counts": [[6, 2, 2, 0], [1, 3, 0, 0]], "history": []}]
    rows = [{"method": "A", "acc": Measured(60.0, 0.0, 1)}, {"method": "B", "acc": Measured(67.5, 0.0, 1)},
            {"method": "C", "acc": Measured(90.0, 0.0, 1)}]
    on_local = ResultsTable(rows, recs, "ci", local("each client's local test set"))
    assert "majority floor: 67.5% (always the client's most frequent class" in on_local.caption
    assert on_local.df["acc"].tolist() == ["60.00 (n=1) †", "67.50 (n=1) †", "90.00 (n=1)"]   # at or below the floor
    assert "† at or below that floor" in on_local.caption
    on_balanced = ResultsTable(rows, recs, "ci", balanced("the balanced test set"))
    assert "chance: 25% (a uniform guess over 4 classes)" in on_balanced.caption and on_balanced.marked == 0
    both = ResultsTable(rows, recs, "ci", balanced("global") + "; " + local("local"))
    assert "chance on the balanced test set: 25%" in both.caption and "majority floor: 67.5%" in both.caption
    assert both.marked == 0   # several test sets: the lowest threshold (twice chance, 50%) marks the cells


def test_a_settings_table_names_the_model_its_runs_build():
    """FedPCL's runs train the projection network on frozen backbones' features: the settings table said cnn3 (the
    data's default for images)."""
    rows = {r["setting"]: r for r in chapters()["fedpcl"].hyperparameters("book")}
    assert rows["model"]["here"] == "projection (on the frozen backbones' features)"


def test_the_layout_check_finds_what_is_wider_than_the_column_uncaptioned_figures_and_broken_numbers(tmp_path):
    """book/build.py opens every built page in headless Chromium (where installed) and fails the build on a verdict
    box, table or note that needs horizontal scrolling, a notebook's figure without a caption, and a number broken
    inside its cell; a captioned figure and a box that wraps pass."""

    import pytest

    build = book_builder()
    browser = build.find_browser()
    if browser is None:
        pytest.skip("no Chromium on this machine")
    page = "<html><body><main style='width:600px'>{}</main></body></html>"
    (tmp_path / "wide.html").write_text(page.format(
        "<div class='verdict'><table><tr><td style='white-space:nowrap'>" + "95% CI [-45.28, -16.12] " * 20 +
        "</td></tr></table></div>"))
    (tmp_path / "fits.html").write_text(page.format("<div class='verdict'><p>" + "holds " * 200 + "</p></div>"))
    (tmp_path / "table.html").write_text(page.format(
        "<table class='dataframe results'><tr>" + "<td class='num'>12,345.67</td>" * 40 + "</tr></table>"))
    (tmp_path / "figure.html").write_text(page.format(
        "<div class='cell_output'><img src='a.png' width='100' height='50'></div>"
        "<figure><div class='cell_output'><img src='b.png' width='100' height='50'></div><figcaption>B</figcaption>"
        "</figure>"))
    (tmp_path / "number.html").write_text(page.format(
        "<table><tr><td class='num' style='white-space:normal; width:1px'>45.95 ± 4.47 (n=3)</td><td>" + "x " * 50
        + "</td></tr></table>"))
    found = build.layout_problems(tmp_path, browser)
    assert sorted(found) == ["figure.html", "number.html", "table.html", "wide.html"], found
    assert found["wide.html"][0][0] == "verdict" and found["table.html"][0][0] == "table dataframe results"
    assert found["figure.html"] == [["figure without a caption", 0, 0, "a.png"]]
    assert [p[0] for p in found["number.html"]] == ["number broken inside its cell"]


def test_a_verdict_never_prints_a_margin_that_is_not_zero_as_zero():
    """A margin in weights (FedGPA's self-weights: +0.00064, +0.00089, +0.00075 over three seeds) read "+0.00" with
    two decimals; it keeps two significant digits: mean 0.000760, t(2) = 4.303, std 0.000125, half width 0.000310."""
    from fedlib.studies.verdicts import verdict_of

    text = verdict_of({0: 0.000643, 1: 0.000892, 2: 0.000746}).text()
    assert text == "holds at 3 seeds (margin +0.00076, 95% CI [+0.00045, +0.0011])"
    assert verdict_of([-0.7, -0.6, -0.8]).text() == "does not hold at 3 seeds (margin -0.70, 95% CI [-0.95, -0.45])"


def test_a_table_of_single_seed_endpoints_states_its_floor_when_asked():
    """A convergence table's cells are plain endpoints (no 'mean ± std (n=k)' to recognise): with state_floor the
    caption still says what a trivial predictor scores on its test set (a uniform guess over 10 classes here)."""
    from fedlib.studies.report import ResultsTable

    rows = [{"method": "FedAvg", "round 10 (reference)": 71.5, "round 30 (3x)": 74.0}]
    assert "chance" not in ResultsTable(rows, test_set="balanced", classes=10)._repr_html_()
    assert "chance: 10% (a uniform guess over 10 classes)" in ResultsTable(rows, test_set="balanced", classes=10,
                                                                             state_floor=True)._repr_html_()


def test_coverage_names_stale_and_diverged_runs_apart_from_the_recorded_ones():
    from fedlib.studies.report import coverage_text

    cov = {"total": 10, "current": 6, "stale": 1, "diverged": 2, "seeds": [0, 1, 2], "devices": ["cpu"], "hours": 1.25}
    assert coverage_text(cov) == ("6 of 10 runs recorded, 1 stale, 2 recorded as diverged; seeds 0, 1, 2; cpu; "
                                  "1.2 h of training")
    assert coverage_text({**cov, "stale": 0, "diverged": 0}) == ("6 of 10 runs recorded; seeds 0, 1, 2; cpu; "
                                                              "1.2 h of training")


def test_a_measured_cell_is_its_text_and_keeps_its_numbers_through_copies_processes_and_a_saved_summary():
    """``fmt`` gives text equal to the book's format and the numbers behind it; pickling (worker processes), deep
    copies and a summary's JSON give back the same cell, numbers included."""
    import copy
    import json
    import pickle

    from fedlib.studies.report import Measured, fmt, from_json

    cell = fmt((0.8123, 0.0456, 3))
    assert cell == "81.23 ± 4.56 (n=3)" and isinstance(cell, Measured)
    assert abs(cell.mean - 81.23) < 1e-9 and abs(cell.std - 4.56) < 1e-9 and cell.n == 3
    assert fmt((0.5, 0.0, 1)) == "50.00 (n=1)"
    saved = json.loads(json.dumps(cell.as_json()))
    for back in (pickle.loads(pickle.dumps(cell)), copy.deepcopy(cell), from_json(saved)):
        assert back == cell and isinstance(back, Measured) and (back.mean, back.std, back.n) == (cell.mean, cell.std, 3)
    assert from_json("81.23 (n=1)") == "81.23 (n=1)" and not isinstance(from_json("81.23 (n=1)"), Measured)


def test_the_whole_book_prints_to_one_pdf_offline(tmp_path):
    """``python -m fedlib book --pdf``: Sphinx's single page of the book, printed by headless Chromium (where
    installed), every page of the table of contents in one PDF."""
    import shutil
    import sys
    from pathlib import Path

    import pytest

    build = book_builder()
    browser = build.find_browser()
    if browser is None:
        pytest.skip("no Chromium on this machine")
    (tmp_path / "_config.yml").write_text("title: tiny\nexecute:\n  execute_notebooks: 'off'\n")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: second\n")
    (tmp_path / "intro.md").write_text("# The first page\n\nalpha words\n")
    (tmp_path / "second.md").write_text("# The second page\n\nomega words\n")
    jb = shutil.which("jupyter-book", path=str(Path(sys.executable).parent))
    pdf = build.build_pdf(tmp_path, [jb] if jb else [sys.executable, "-m", "jupyter_book"], browser)
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF") and pdf == tmp_path / "_build" / "pdf" / "book.pdf"
    if shutil.which("pdftotext"):
        import subprocess

        text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
        assert "alpha words" in text and "omega words" in text


def test_differences_intervals_and_margins_stay_numbers_until_display():
    """A table's differences, intervals and margins are numbers in the rows (a test reads ``.value``, ``.low``), text
    only in the shown table, and the summary's JSON gives each back as it was."""
    from fedlib.studies.report import Interval, Margin, ResultsTable, Signed, from_json, interval_cell

    cells = {"difference": Signed(1.234), "95% CI": interval_cell((-0.521, 1.0)), "none": interval_cell(None),
             "margin": Margin(0.51, (0.21, 0.8), 5), "two seeds": Margin(-0.0004, None, 2)}
    assert cells["95% CI"] == Interval(-0.521, 1.0) and cells["none"] == "-"
    table = ResultsTable([{"method": "A", **cells}])
    assert table.df.iloc[0].tolist() == ["A", "+1.23", "[-0.52, +1.00]", "-", "+0.51 [+0.21, +0.80] (n=5)",
                                         "-0.0004 (n=2)"]
    assert table.numeric.iloc[0].tolist() == [False, True, True, False, True, True]   # a number never breaks
    for cell in (cells["difference"], cells["95% CI"], cells["margin"], cells["two seeds"]):
        assert from_json(json.loads(json.dumps(cell.as_json()))) == cell
