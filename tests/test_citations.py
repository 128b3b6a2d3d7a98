"""Every method names its paper's entry in the book's bibliography, and every chapter cites its paper and each
method its tables train, with Jupyter Book's own citation machinery (sphinxcontrib-bibtex)."""
import re
from pathlib import Path

import nbformat
import yaml

from fedlib.cli import book_builder
from fedlib.methods import METHODS
from fedlib.studies.registry import chapters

ROOT = Path(__file__).resolve().parents[1]
BIB = (ROOT / "book" / "references.bib").read_text()
KEYS = {key for _, key in re.findall(r"@(\w+)\{([^,\s]+),", BIB)}


def cited_in(notebook: Path) -> set[str]:
    text = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "markdown")
    return {key.strip() for group in re.findall(r"\{cite(?::[pt])?\}`([^`]+)`", text) for key in group.split(",")}


def test_the_bibliography_has_each_key_once_and_every_entry_a_title_and_year():
    keys = re.findall(r"@\w+\{([^,\s]+),", BIB)
    assert len(keys) == len(set(keys)), [k for k in keys if keys.count(k) > 1]
    for entry in re.split(r"\n(?=@)", BIB)[1:]:
        assert re.search(r"\btitle\s*=", entry) and re.search(r"\byear\s*=\s*\{\d{4}\}", entry), entry[:80]


def test_every_method_names_its_papers_entry_or_says_it_has_none():
    for name, cls in METHODS.items():
        if "cite" not in vars(cls) and cls.cite == "mcmahan2017fedavg" and name not in ("fedavg", "fedavg_ft"):
            raise AssertionError(f"{name} inherits FedAvg's citation: give it its own `cite`")
        assert cls.cite is None or cls.cite in KEYS, f"{name}: cite={cls.cite!r} is not in book/references.bib"
    assert METHODS["local"].cite is None   # no paper: each client trains alone


def test_every_chapter_cites_its_paper_and_every_method_its_tables_train():
    for name, chapter in chapters().items():
        notebook = chapter.notebook
        if not notebook.exists():   # a chapter registered from outside the book
            continue
        cited = cited_in(notebook)
        assert cited <= KEYS, f"{name} cites keys missing from references.bib: {sorted(cited - KEYS)}"
        wanted = {METHODS[m].cite for m in chapter.methods()} - {None}
        if name in METHODS:   # a paper's chapter, named after its method
            assert METHODS[name].cite in cited, f"{name} does not cite its own paper"
        assert wanted <= cited, f"{name} trains methods it does not cite: {sorted(wanted - cited)}"


def test_the_book_loads_the_bibliography_and_lists_it():
    config = yaml.safe_load((ROOT / "book" / "_config.yml").read_text())
    assert config["bibtex_bibfiles"] == ["references.bib"]
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    assert "bibliography" in [c["file"] for c in toc["chapters"]]
    assert "{bibliography}" in (ROOT / "book" / "bibliography.md").read_text()


def test_every_registered_chapter_is_executed_by_the_manifest_and_listed_in_the_table_of_contents():
    """A chapter of the book (a study module in fedlib with a notebook) is a page: the manifest executes its notebook
    at ci, book and paper scale into the page the table of contents lists, in the registry's order, and the committed
    table of contents is the one the builder writes (no chapter list is kept by hand)."""
    build = book_builder()
    manifest = build.read_manifest("book/experiments.yml")
    pages = {Path(e["notebook"]).stem: e["configurations"] for e in manifest["chapters"]}
    toc = [c["file"] for c in yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())["chapters"]]
    book = [name for name, c in chapters().items() if c.notebook.exists()]
    assert book == list(chapters())   # every built-in chapter has its notebook, in its folder
    assert all(c.notebook == ROOT / "notebooks" / name / f"{name}.ipynb" for name, c in chapters().items())
    assert list(pages)[:len(book)] == book and list(pages)[-1] == "results"   # the overview reads them: last
    for name in book:
        assert set(pages[name]) >= {"ci", "book", "paper"}, name
        assert pages[name]["book"]["output"] == f"book/chapters/{name}.ipynb" and f"chapters/{name}" in toc, name
    assert pages["fedgpa"]["book"]["parameters"] == {"scale": "book", "settings": [1, 2]}   # the manifest's own
    assert pages["fedpcl"]["ci"] == {"output": "notebooks/fedpcl/fedpcl.ipynb", "parameters": {"scale": "ci"}}
    assert [f for f in toc if f.removeprefix("chapters/") in book] == [f"chapters/{n}" for n in book]
    assert build.synced_toc(ROOT / "book", manifest) == (ROOT / "book" / "_toc.yml").read_text()


def test_a_registered_chapter_with_a_notebook_gets_its_page_without_an_edit(tmp_path, monkeypatch):
    """A sixth chapter registered with its notebook: the manifest executes it at the three scales before the
    overview, and the table of contents the builder writes lists it in the registry's order (among the papers)."""
    from fedlib.studies import registry

    build = book_builder()
    (tmp_path / "book" / "chapters").mkdir(parents=True)
    (tmp_path / "book" / "_toc.yml").write_text((ROOT / "book" / "_toc.yml").read_text())
    (tmp_path / "book" / "experiments.yml").write_text((ROOT / "book" / "experiments.yml").read_text())
    monkeypatch.setattr(build, "ROOT", tmp_path)
    monkeypatch.setattr(registry, "CHAPTERS", dict(registry.chapters()))
    registry.CHAPTERS["sixth"] = registry.Chapter("sixth", "Sixth paper", "sixth")   # the default place: a paper's
    monkeypatch.setattr(build, "chapter_notebooks", lambda: {name: f"notebooks/{name}/{name}.ipynb"
                                                             for name in registry.chapters()})
    manifest = build.read_manifest("book/experiments.yml")
    order = [Path(c["notebook"]).stem for c in manifest["chapters"]]
    assert order == ["fedgpa", "fedpcl", "fedprp", "fedmate", "pfedcspc", "sixth", "compare", "results"]
    assert manifest["chapters"][5]["configurations"]["book"] == {"output": "book/chapters/sixth.ipynb",
                                                                 "parameters": {"scale": "book"}}
    toc = yaml.safe_load(build.synced_toc(tmp_path / "book", manifest))
    files = [c["file"] for c in toc["chapters"]]
    assert files[files.index("chapters/pfedcspc") + 1:files.index("chapters/results")] == ["chapters/sixth",
                                                                                           "chapters/compare"]
    assert files[:2] == ["quickstart", "usage"] and files[-3:] == ["flower", "glossary", "bibliography"]


def test_the_glossary_defines_every_scale_and_every_outcome_the_book_prints():
    """The words of the status boxes, verdict boxes and the overview's counts each have a glossary entry."""
    from fedlib.claims import BUDGET
    from fedlib.claims.decide import OUTCOMES
    from fedlib.experiment import SCALES

    toc = [c["file"] for c in yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())["chapters"]]
    assert "glossary" in toc
    text = (ROOT / "book" / "glossary.md").read_text()
    terms = {line.strip() for line in text.split("```{glossary}")[1].split("```")[0].splitlines()
             if line and not line.startswith(" ")}
    assert {f"{s} scale" for s in SCALES} <= terms
    assert {*OUTCOMES, BUDGET, "not checked"} <= terms
