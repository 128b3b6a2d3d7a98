"""Prose that could drift from the code. The chapters state no book-scale budget of their own: a sentence about
book scale that names a number of images, rounds, epochs, runs, seeds, clients or seconds drifts when the code's
budget changes (pFedCSPC's prose said 500 images per class while its set-up trained 300); the set-up and every
table print them instead. The Flower page's lists of the methods SecAgg+ serves are the code's."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUDGET = re.compile(r"\b\d[\d,.]*\s*(?:training images|images per class|rounds?\b|local epochs|epochs|runs\b|seeds\b"
                    r"|clients\b|s\b|min\b)")
ABOUT_BOOK_SCALE = re.compile(r"book`? scale|`book`")


def budget_sentences(markdown: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.;:])\s", markdown) if ABOUT_BOOK_SCALE.search(s) and BUDGET.search(s)]


def test_the_check_finds_a_stated_budget():
    assert budget_sentences("Intro. At `book` scale each class keeps 500 training images (a smoke run).")
    assert budget_sentences("At book scale each further seed is 60 runs of about 8.5 s.")
    assert not budget_sentences("At `book` scale the set-up prints the budget; the paper trains 100 rounds.")


@pytest.mark.parametrize("notebook", sorted(str(p.relative_to(ROOT / "notebooks"))
                                             for p in (ROOT / "notebooks").rglob("*.ipynb")))
def test_no_chapter_states_a_book_scale_budget_in_prose(notebook):
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    found = [s for c in cells if c["cell_type"] == "markdown" for s in budget_sentences("".join(c["source"]))]
    assert not found, f"{notebook}: prose states a book-scale budget the code may change: {found}"


def book_extension():
    """The book's Sphinx extension ``book/_ext/fedlib_lists.py`` (not a package module), loaded by path."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("fedlib_lists", ROOT / "book" / "_ext" / "fedlib_lists.py")
    ext = importlib.util.module_from_spec(spec)
    sys.modules["fedlib_lists"] = ext
    spec.loader.exec_module(ext)
    return ext


def test_the_flower_page_lists_the_methods_secagg_serves_as_the_code_decides():
    """The page holds no hand-written list: the book's ``fedlib-secagg`` directive writes it at build time from the
    method classes (a method added later lands in its group with no edit of the page)."""
    from fedlib.methods import METHODS

    page = (ROOT / "book" / "flower.md").read_text()
    assert "```{fedlib-secagg}" in page and not re.search(r"^- \*\*(served|refused)\*\*", page, re.M)
    assert "fedlib_lists: _ext" in (ROOT / "book" / "_config.yml").read_text()
    ext = book_extension()
    text = ext.secagg_list().astext()
    served = sorted(n for n, cls in METHODS.items() if cls.sums_uploads())
    refused = sorted(n for n, cls in METHODS.items() if not cls.sums_uploads())
    assert f"served ({len(served)}): {', '.join(served)}" in text
    assert f"refused ({len(refused)}): {', '.join(refused)}" in text


def test_the_quick_start_lists_every_registered_chapter_with_its_notebooks_parameters():
    """The quick start's chapter list is written at build time (``fedlib-chapters``) from the chapter registry and
    each notebook's papermill parameters cell: a sixth chapter, or a new parameter, appears with no edit of the
    page."""
    from fedlib.studies.registry import chapters

    assert "```{fedlib-chapters}" in (ROOT / "book" / "quickstart.md").read_text()
    ext = book_extension()
    text = ext.chapter_list().astext()
    for name, chapter in chapters().items():
        assert f"{chapter.title}: notebooks/{name}/{name}.ipynb; parameters scale, " in text
    assert "Five methods side by side: notebooks/compare/compare.ipynb; parameters scale, device, executor" in text
    assert ("FedGPA: notebooks/fedgpa/fedgpa.ipynb; parameters scale, settings, s_values, methods, device, executor"
            in text)


@pytest.mark.parametrize("notebook", sorted(str(p.relative_to(ROOT / "notebooks"))
                                             for p in (ROOT / "notebooks").rglob("*.ipynb")))
def test_every_figure_has_a_caption_of_its_own(notebook):
    """In the committed (executed) notebooks every cell that draws a figure is followed by a caption, a markdown cell
    that starts with "*Figure.*" and says in at least eight words what the figure shows."""
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    missing = []
    for i, cell in enumerate(cells):
        drawn = any("image/png" in out.get("data", {}) for out in cell.get("outputs", []))
        if cell["cell_type"] != "code" or not drawn:
            continue
        caption = "".join(cells[i + 1]["source"]) if i + 1 < len(cells) else ""
        if not caption.startswith("*Figure.*") or len(caption.split()) < 9:
            missing.append(f"cell {i}: {''.join(cell['source'])[:60]!r}")
    assert not missing, f"{notebook}: figures without a caption: {missing}"


@pytest.mark.parametrize("notebook", sorted(str(p.relative_to(ROOT / "notebooks"))
                                             for p in (ROOT / "notebooks").rglob("*.ipynb")))
def test_every_accuracy_table_states_the_floor_of_a_trivial_predictor(notebook):
    """Every results table of the committed (executed) notebooks with accuracy cells of ours ("mean ± std (n=k)"),
    or with two-decimal cells under a provenance line that names the test set they were read on (a table of costs
    names none), states the floor of a trivial predictor on that test set: the majority floor on local test sets,
    chance on a balanced one."""
    import re

    ours = re.compile(r"<td>\d+\.\d+( ± \d+\.\d+)? \(n=\d+\)( †)?</td>|<td>-?\d+\.\d\d( †)?</td>(?=.*test: )", re.S)
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    missing = []
    for i, cell in enumerate(cells):
        for out in cell.get("outputs", []):
            page = "".join(out.get("data", {}).get("text/html", ""))
            for table in page.split("<div class='results-table'>")[1:]:
                if 'class="dataframe results"' in table and ours.search(table) and not re.search(
                        r"majority floor: \d|chance[^:]*: \d", table):
                    missing.append(f"cell {i}: {''.join(cell['source'])[:60]!r}")
    assert not missing, f"{notebook}: accuracy tables without a floor: {missing}"


def test_the_quick_start_lists_the_papers_from_the_bibliography_and_each_chapters_declared_code():
    """The papers table is written at build time (``fedlib-papers``): each paper from ``references.bib`` through its
    method's ``cite`` key (the hand-kept table had drifted from it: FedMate's venue), the code from the chapter's
    ``OFFICIAL_CODE``; a sixth paper's chapter appears with no edit of the page."""
    from fedlib.methods import METHODS
    from fedlib.studies.registry import chapters

    page = (ROOT / "book" / "quickstart.md").read_text()
    assert "```{fedlib-papers}" in page and "| chapter | paper | official code |" not in page
    rows = {r["chapter"]: r for r in book_extension().paper_rows()}
    assert list(rows) == [c.title for name, c in chapters().items() if name in METHODS]
    assert rows["FedPCL"]["cite"].startswith('Tan et al., "Federated Learning from Pre-Trained Models: A Contrastive')
    assert rows["FedPCL"]["link"] == ("arXiv:2209.10083", "https://arxiv.org/abs/2209.10083")
    assert rows["FedGPA"]["link"] == ("doi:10.1016/j.aiopen.2025.03.001", "https://doi.org/10.1016/j.aiopen.2025.03.001")
    assert "European Conference on Artificial Intelligence (ECAI) 2025" in rows["FedMate"]["cite"]
    for row in rows.values():
        words, text, url = row["code"]
        assert (text is None) == (url is None) and (url is None or url.startswith("https://github.com/"))
    assert "FedPCL" in book_extension().paper_table().astext()
