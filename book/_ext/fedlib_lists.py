"""Sphinx extension: lists the code decides, written into the pages when the book is built, so that a page
cannot drift from the code when a method is added.

``{fedlib-secagg}`` (the Flower page): the registered methods SecAgg+ serves and those it refuses
(``fedlib.methods.secure_aggregation_groups``), each with its count."""
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


class SecAggMethods(SphinxDirective):
    def run(self):
        return [secagg_list()]


def setup(app):
    app.add_directive("fedlib-secagg", SecAggMethods)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
