"""Sphinx extension: lists the code decides, written into the pages when the book is built, so that a page
cannot drift from the code when a method is added.

``{fedlib-secagg}`` (the Flower page): the registered methods SecAgg+ serves and those it refuses
(``fedlib.methods.secure_aggregation_groups``), each with its count.

``{fedlib-chapters}`` (the quick start): every registered chapter, its notebook and the parameters of the
notebook's papermill parameters cell.

``{fedlib-papers}`` (the quick start): every chapter that tests a paper (its method's ``cite``), the paper as
``references.bib`` holds it and the authors' code the chapter names (``OFFICIAL_CODE``)."""
import ast
import json
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def secagg_list() -> nodes.bullet_list:
    """- **served** (n): `name`, `name`, ... / - **refused** (n): ... as docutils nodes."""
    from fedlib.methods import secure_aggregation_groups

    items = nodes.bullet_list()
    for kind, names in secure_aggregation_groups().items():
        para = nodes.paragraph()
        para += nodes.strong(text=kind)
        para += nodes.Text(f" ({len(names)}): ")
        for i, name in enumerate(names):
            if i:
                para += nodes.Text(", ")
            para += nodes.literal(text=name)
        items += nodes.list_item("", para)
    return items


ROOT = Path(__file__).resolve().parents[2]


def notebook_parameters(path: Path) -> list[str]:
    """The names the notebook's cell tagged ``parameters`` assigns (what papermill's ``-p`` can set)."""
    cell = next(c for c in json.loads(path.read_text())["cells"] if "parameters" in c["metadata"].get("tags", []))
    tree = ast.parse("".join(cell["source"]))
    return [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)]


def chapter_list() -> nodes.bullet_list:
    """- **title**: `notebooks/<name>/<name>.ipynb`; parameters `scale`, ... per registered chapter."""
    from fedlib.studies.registry import chapters

    items = nodes.bullet_list()
    for name, chapter in chapters().items():
        para = nodes.paragraph()
        para += nodes.strong(text=chapter.title)
        para += nodes.Text(": ")
        para += nodes.literal(text=str(chapter.notebook.relative_to(ROOT)))
        para += nodes.Text("; parameters ")
        for i, param in enumerate(notebook_parameters(chapter.notebook)):
            if i:
                para += nodes.Text(", ")
            para += nodes.literal(text=param)
        items += nodes.list_item("", para)
    return items


def paper_rows() -> list[dict]:
    """One row per chapter that tests a paper: its title, the paper's citation and link from ``references.bib`` (the
    first author's surname, the title, the venue and year; its DOI, else its arXiv identifier), and its code."""
    from pybtex.database import parse_file

    from fedlib.methods import METHODS
    from fedlib.studies.registry import chapters

    bib = parse_file(str(ROOT / "book" / "references.bib")).entries
    rows = []
    for name, chapter in chapters().items():
        if name not in METHODS:
            continue
        entry = bib[METHODS[name].cite]
        f = entry.fields
        authors = entry.persons["author"]
        who = " ".join(authors[0].last_names) + (" et al." if len(authors) > 1 else "")
        venue = f.get("journal") or f.get("booktitle") or ""
        link = ((f"doi:{f['doi']}", f"https://doi.org/{f['doi']}") if "doi" in f else
                (f"arXiv:{f['eprint']}", f"https://arxiv.org/abs/{f['eprint']}") if "eprint" in f else (None, None))
        title = " ".join(f["title"].replace("{", "").replace("}", "").split())
        rows.append({"chapter": chapter.title, "cite": f'{who}, "{title}", {venue} {f["year"]}', "link": link,
                     "code": chapter.paper.OFFICIAL_CODE})
    return rows


def linked(words: str, text: str | None, url: str | None) -> nodes.paragraph:
    para = nodes.paragraph(text=words)
    if text and url:
        para += nodes.reference(text=text, refuri=url)
    return para


def paper_table() -> nodes.table:
    """| chapter | paper | official code | as a docutils table."""
    table = nodes.table()
    group = nodes.tgroup(cols=3)
    table += group
    for width in (12, 60, 28):
        group += nodes.colspec(colwidth=width)
    head, body = nodes.thead(), nodes.tbody()
    group += head
    group += body
    header = nodes.row()
    for title in ("chapter", "paper", "official code"):
        header += nodes.entry("", nodes.paragraph(text=title))
    head += header
    for r in paper_rows():
        row = nodes.row()
        row += nodes.entry("", nodes.paragraph(text=r["chapter"]))
        row += nodes.entry("", linked(r["cite"] + (", " if r["link"][0] else ""), *r["link"]))
        row += nodes.entry("", linked(*r["code"]))
        body += row
    return table


class Papers(SphinxDirective):
    def run(self):
        return [paper_table()]


class Chapters(SphinxDirective):
    def run(self):
        return [chapter_list()]


class SecAggMethods(SphinxDirective):
    def run(self):
        return [secagg_list()]


def setup(app):
    app.add_directive("fedlib-secagg", SecAggMethods)
    app.add_directive("fedlib-chapters", Chapters)
    app.add_directive("fedlib-papers", Papers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
