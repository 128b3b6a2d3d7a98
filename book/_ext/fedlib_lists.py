"""Sphinx extension: lists the code decides, written into the pages when the book is built, so that a page
cannot drift from the code when a method is added.

``{fedlib-secagg}`` (the Flower page): the registered methods SecAgg+ serves and those it refuses
(``fedlib.methods.secure_aggregation_groups``), each with its count.

``{fedlib-chapters}`` (the quick start): every registered chapter, its notebook and the parameters of the
notebook's papermill parameters cell."""
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
    """- **title**: `notebooks/<name>.ipynb`; parameters `scale`, ... per registered chapter."""
    from fedlib.studies.registry import chapters

    items = nodes.bullet_list()
    for name, chapter in chapters().items():
        notebook = f"notebooks/{name}.ipynb"
        para = nodes.paragraph()
        para += nodes.strong(text=chapter.title)
        para += nodes.Text(": ")
        para += nodes.literal(text=notebook)
        para += nodes.Text("; parameters ")
        for i, param in enumerate(notebook_parameters(ROOT / notebook)):
            if i:
                para += nodes.Text(", ")
            para += nodes.literal(text=param)
        items += nodes.list_item("", para)
    return items


class Chapters(SphinxDirective):
    def run(self):
        return [chapter_list()]


class SecAggMethods(SphinxDirective):
    def run(self):
        return [secagg_list()]


def setup(app):
    app.add_directive("fedlib-secagg", SecAggMethods)
    app.add_directive("fedlib-chapters", Chapters)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
