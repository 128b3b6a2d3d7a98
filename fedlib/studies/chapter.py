"""A chapter notebook's set-up in one line:

    study, sc, show_source = open_chapter("fedgpa", scale, device, executor)

imports the chapter's study module, sets where its runs execute, prints what the scale trains (the study's
``scale_summary``) and starts the chapter's clock (``wall_time_line`` at its end)."""
from __future__ import annotations

import inspect

from fedlib.studies.grid import set_runtime
from fedlib.studies.report import start_clock, wall_time_line  # noqa: F401  (notebooks import the clock from here)


def show_source(*objects) -> None:
    """Show the source of functions or classes in the notebook (the code the text explains)."""
    from IPython.display import Markdown, display

    display(Markdown("\n".join(f"```python\n{inspect.getsource(o)}```" for o in objects)))


def open_chapter(name: str, scale: str, device: str = "cpu", executor: str = "sequential"):
    """(study module, its budget at ``scale``, ``show_source``) of the chapter ``name``."""
    import pandas as pd

    from fedlib.studies.registry import study as chapter_study

    study = chapter_study(name)
    sc = study.scale_info(scale)
    set_runtime(device, executor)
    pd.set_option("display.width", 160)
    start_clock()
    print(study.declared.scale_summary(scale))
    from IPython.display import HTML, display

    display(HTML(study.status_html(scale)))
    return study, sc, show_source
