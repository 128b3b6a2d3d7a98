"""A new chapter's notebook, written from the skeleton every chapter shares:

    from fedlib.studies import template
    template.write("mypaper", "MyPaper", "notebooks/mypaper/mypaper.ipynb")

Each shared part is one call (set-up and status box, the evaluation protocol, the training settings, the headline
table, the paper-scale records, the verdict box); between them the author writes what the paper
brings (its data, its equations with ``show_source``, its tables and figures). The notebook runs as written once the
chapter's study module defines the ``registry.CONTRACT`` and ``headline_rows(runs, scale)``, with ``CLAIMS`` reading
its headline table, and is registered (``register_chapter(__name__, "MyPaper")``); a test builds one
for a chapter defined outside the package and executes it at ci scale."""
from __future__ import annotations

from pathlib import Path
from string import Template

# (cell type, tags, source); $name and $title are the chapter's
CELLS = [
    ("markdown", [], "# $title\n\n*The paper's authors, title and venue.* {cite:p}`$name`\n\n"
                     "**The problem.** What the paper addresses, in a paragraph.\n\n"
                     "**The idea.** What the method changes, in a paragraph; its claims are checked at the end."),
    ("code", ["parameters"], 'scale = "book"      # ci | book | reference | paper (see the table printed below)\n'
                             'device = "cpu"       # cpu | cuda | auto (a CUDA device when visible)\n'
                             'executor = "sequential"  # sequential | process | batched | auto (batched on a GPU)'),
    ("code", ["nbval-check-output", "hide-input"],
     "${register}from fedlib.studies.chapter import open_chapter\n"
     "from fedlib.studies.common import show_table\n\n"
     'study, sc, show_source = open_chapter("$name", scale, device, executor)\n'
     "paper = study.paper  # what only this paper brings: its study module"),
    ("markdown", [], "## The method, equation by equation\n\n"
                     "Each equation of the paper beside the code that computes it; where the text is ambiguous, "
                     "the reading taken and the official code's, stated."),
    ("code", [], "from fedlib.methods import METHODS\n\n"
                 "show_source(METHODS[paper.reference_run(scale).method])"),
    ("markdown", [], "## How each method is evaluated"),
    ("code", ["nbval-check-output", "hide-input"],
     "rows, note = paper.protocol(scale)\nshow_table(rows, note=note, max_columns=5)"),
    ("markdown", [], "### Training settings: this page against the paper\n\n"
                     "The run the headline table is built on, at this page's scale and at paper scale, with the "
                     "reason for each difference."),
    ("code", ["hide-input"], "show_table(study.hyperparameters(scale), max_columns=4)"),
    ("markdown", [], "## The headline table\n\nOurs beside the paper's numbers, at the scale printed with it."),
    ("code", ["hide-input"],
     "runs = study.headline_runs(scale)\n"
     "rows = paper.headline_rows(runs, scale)\n"
     "study.show_headline(rows, runs, scale)"),
    ("markdown", [], "## Paper scale\n\nThe committed paper-scale records of the headline table "
                     "(`python -m fedlib records $name --scale paper` adds the rest)."),
    ("code", ["hide-input"], "found = study.show_paper_scale()"),
    ("markdown", [], "## Verdict\n\nEach claim of the paper as the committed records decide it, then the runs of "
                     "this page through the same declarations (a smoke run below reference scale)."),
    ("code", ["hide-input"],
     "study.close({study.headline_name(scale): runs}, scale, paper.scale_summary(scale).splitlines()[0])"),
]


def notebook(name: str, title: str, outside: bool = False):
    """The notebook of chapter ``name`` (titled ``title``) from ``CELLS``; ``outside``: its study module is the
    module ``name`` beside the notebook (papermill runs a notebook in its folder), which the set-up imports to
    register it; otherwise it is ``fedlib.studies.<name>`` (``notebooks/<name>/<name>.py`` of the checkout), which
    the registry imports."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    register = f"import {name}  # the chapter's study module beside this notebook: registers it\n" if outside else ""
    for kind, tags, source in CELLS:
        text = Template(source).substitute(name=name, title=title, register=register)
        cell = nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text)
        if tags:
            cell.metadata["tags"] = list(tags)
        nb.cells.append(cell)
    return nb


def write(name: str, title: str, path: str | Path, outside: bool = False) -> Path:
    """Write the new chapter's notebook to ``path`` (an existing file is refused in one line)."""
    import nbformat

    from fedlib.errors import check

    path = Path(path)
    check(not path.exists(), "--out", str(path), "a path where no file is yet (the template never overwrites)")
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook(name, title, outside), path)
    return path
