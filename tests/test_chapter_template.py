"""A sixth paper added from outside the package: its study module (tests/chapters/sixth.py) beside a notebook
written from the template, executed at ci scale as the book's builder executes a chapter."""
import json
import shutil
from pathlib import Path

import pytest

from fedlib.studies import registry, template

SIXTH = Path(__file__).parent / "chapters" / "sixth.py"
BOOK = Path(__file__).resolve().parents[1] / "book"


def test_the_template_holds_the_shared_skeleton_one_call_each():
    nb = template.notebook("mypaper", "My paper")
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert nb.cells[0].source.startswith("# My paper") and "{cite:p}`mypaper`" in nb.cells[0].source
    assert [c.metadata.get("tags") for c in nb.cells if c.cell_type == "code"][0] == ["parameters"]
    for call in ('open_chapter("mypaper", scale, device, executor)', "paper = study.paper", "paper.protocol(scale)",
                 "study.hyperparameters(scale)", "study.headline_runs(scale)", "study.show_paper_scale()",
                 "study.close({study.headline_name(scale): runs}, scale"):
        assert sum(call in c for c in code) == 1, call
    assert "import mypaper" not in "".join(code)     # a chapter inside fedlib is imported by the registry
    assert "import mypaper  #" in template.notebook("mypaper", "My paper", outside=True).cells[2].source


def test_the_template_never_overwrites(tmp_path):
    from fedlib.errors import ConfigError

    path = template.write("mypaper", "My paper", tmp_path / "mypaper.ipynb")
    with pytest.raises(ConfigError, match="a path where no file is yet"):
        template.write("mypaper", "My paper", path)


def test_a_sixth_chapter_from_outside_the_package_runs_its_template_notebook_at_ci_scale(tmp_path, monkeypatch):
    """Two files of its own (study module, notebook), nothing edited inside fedlib: the notebook executes, shows
    the status box, the protocol, the headline table against the paper and the verdict box, and leaves its summary
    for the Results overview."""
    import papermill

    folder = tmp_path / "publications"
    folder.mkdir()
    shutil.copy(SIXTH, folder / "sixth.py")
    template.write("sixth", "Sixth paper", folder / "sixth.ipynb", outside=True)
    monkeypatch.setenv("FEDLIB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FEDLIB_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    papermill.execute_notebook(str(folder / "sixth.ipynb"), str(tmp_path / "out.ipynb"), parameters={"scale": "ci"},
                               kernel_name="python3", progress_bar=False, cwd=str(folder))
    cells = json.loads((tmp_path / "out.ipynb").read_text())["cells"]
    shown = json.dumps([c.get("outputs", []) for c in cells])
    assert "Where this chapter stands" in shown and "scale ci: digits, 4 clients, 2 rounds" in shown
    assert "FedAvg-FT" in shown and "90.0" in shown                  # the headline table beside the paper
    assert "fine-tuning beats FedAvg on local tests" in shown          # the verdict box
    assert "committed paper-scale records (the headline table): 0 current" in shown
    summary = json.loads((tmp_path / "cache" / "summaries" / "sixth-ci.json").read_text())
    assert summary["claims"][0]["claim"] == "fine-tuning beats FedAvg on local tests" and summary["headline"]
    assert "sixth" not in registry.CHAPTERS                            # registered in its kernel only


def test_a_sixth_paper_goes_through_records_the_overview_and_a_one_page_book(tmp_path, monkeypatch, capsys):
    """The documented way, end to end, in a repository-shaped folder: the chapter's study module and its notebook
    (written from the template) under notebooks/, its bibliography entry; nothing else is edited. ``records`` records
    its reference grid, the Results overview decides its claim from those records, and the book's builder executes
    its notebook at book scale (the manifest says only ``registered: true``), lists its page in the table of contents
    and builds the book with warnings as errors (and, where Chromium is installed, its layout check)."""
    import importlib
    import sys

    from fedlib import results
    from fedlib.cli import book_builder, main
    from fedlib.studies import overview

    notebooks, book = tmp_path / "notebooks", tmp_path / "book"
    notebooks.mkdir()
    (book / "_mathjax" / "mathjax").mkdir(parents=True)
    (book / "_mathjax" / "mathjax" / "tex-chtml.js").write_text("")   # the page has no equation: no MathJax needed
    shutil.copy(SIXTH, notebooks / "sixth.py")
    template.write("sixth", "Sixth paper", notebooks / "sixth.ipynb", outside=True)
    for part in ("_config.yml", "_static", "_ext"):   # the book's own configuration, style sheets and extensions
        copy = shutil.copytree if (BOOK / part).is_dir() else shutil.copy
        copy(BOOK / part, book / part)
    (book / "_toc.yml").write_text("format: jb-book\nroot: intro\nchapters:\n  - file: notes\n")
    (book / "intro.md").write_text("# A book of one paper\n")
    (book / "notes.md").write_text("# References\n\n```{bibliography}\n```\n")
    (book / "references.bib").write_text("@article{sixth, title = {A sixth paper}, author = {Someone, A.}, "
                                         "journal = {Somewhere}, year = {2026}}\n")
    (book / "experiments.yml").write_text("build: [book]\nregistered: true\nchapters: []\n")
    for name, value in (("FEDLIB_CACHE", tmp_path / "cache"), ("FEDLIB_RESULTS", tmp_path / "results"),
                        ("TQDM_DISABLE", "1")):
        monkeypatch.setenv(name, str(value))
    monkeypatch.setattr(results, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(registry, "CHAPTERS", dict(registry.chapters()))
    monkeypatch.syspath_prepend(str(notebooks))
    monkeypatch.delitem(sys.modules, "sixth", raising=False)
    importlib.import_module("sixth")   # registers it, as the notebook's set-up does in its kernel

    assert main(["records", "sixth", "--scale", "reference", "--device", "cpu", "--workers", "1"]) == 0
    assert "sixth: 6 recorded, 0 failed" in capsys.readouterr().out
    assert len(list((tmp_path / "results" / "sixth").glob("*.json"))) == 6
    row = overview.claims_table(overview.recorded_verdicts()).set_index("chapter").loc["Sixth paper"]
    assert row["scale"] == "reference" and row["seeds"] == 3 and row["outcome"] != "not checked"

    build = book_builder()
    monkeypatch.setattr(build, "ROOT", tmp_path)
    assert build.build_book("book/experiments.yml") == 0
    assert "- file: chapters/sixth" in (book / "_toc.yml").read_text()
    page = (book / "_build" / "html" / "chapters" / "sixth.html").read_text()
    assert "Where this chapter stands" in page and "Reference scale: 6 of 6" in page
    assert "fine-tuning beats FedAvg on local tests" in page and row["outcome"] in page
