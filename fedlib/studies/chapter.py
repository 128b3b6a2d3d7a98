"""A chapter notebook's set-up in one line:

    study, sc, show_source = open_chapter("fedgpa", scale, device, executor)

imports the chapter's study module, gives the chapter where its runs execute (``study.runtime``, which the page
passes to its grids), prints what the scale trains (the study's
``scale_summary``) and starts the chapter's clock (``wall_time_line`` at its end)."""
from __future__ import annotations

import dataclasses
import inspect

from fedlib.studies.report import start_clock, wall_time_line  # noqa: F401  (notebooks import the clock from here)


def show_source(*objects) -> None:
    """Show the source of functions or classes in the notebook (the code the text explains)."""
    from IPython.display import Markdown, display

    display(Markdown("\n".join(f"```python\n{inspect.getsource(o)}```" for o in objects)))


def open_chapter(name: str, scale: str, device: str = "cpu", executor: str = "sequential"):
    """(the chapter ``name`` with its runtime, its budget at ``scale``, ``show_source``); "auto" device and executor:
    ``Runtime.chosen``'s."""
    import pandas as pd

    from fedlib.studies.grid import Runtime
    from fedlib.studies.registry import study as chapter_study

    study = dataclasses.replace(chapter_study(name), runtime=Runtime.chosen(device, executor))
    sc = study.scale_info(scale)
    pd.set_option("display.width", 160)
    start_clock()
    print(study.declared.scale_summary(scale))
    from IPython.display import HTML, display

    display(HTML(study.status_html(scale)))
    return study, sc, show_source
