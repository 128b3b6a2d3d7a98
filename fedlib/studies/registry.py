"""The chapters, registered like methods: each paper's study module declares itself with ``register_chapter`` at
its end, which checks the contract the book layer reads. Everything that lists chapters (the Results overview, the
command line's ``records`` and ``tune``, the benchmarks, the tests) reads ``chapters()``; a sixth paper adds its
study module (and, outside the package, imports it before asking)."""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType

from fedlib.errors import check

# what every chapter's study module defines, and what the book layer reads from it
CONTRACT = {
    "SCALES": "its budget per scale (grid.Scales: ci, book, reference, paper)",
    "scale_info": "the budget of one scale",
    "scale_summary": "what a scale trains beside the paper (printed by the notebook's set-up)",
    "tables": "tables(scale): the recorded grid of every table at reference or paper scale, the headline first",
    "paper_scale_grid": "the headline table's paper-scale grid",
    "verdicts": "the paper's claims as per-seed margins",
    "reference_run": "the run the hyperparameter table reads",
    "hyperparameters": "this page's training settings against the paper's, with reasons",
    "protocol": "how each method is evaluated",
    "HYPER_REASONS": "why a setting differs from the paper's",
    "LABELS": "how tables name the methods",
}
BUILTIN = ("fedgpa", "fedpcl", "fedprp", "fedmate", "pfedcspc")   # the book's chapters, in its order


@dataclass(frozen=True)
class Chapter:
    name: str        # the study module's last name: the chapter's notebook and results/<name>/ folder
    title: str       # how the book names it
    module: str      # the study module

    @property
    def study(self) -> ModuleType:
        return importlib.import_module(self.module)

    def methods(self) -> list[str]:
        """Every method the chapter's tables train at book, reference and paper scale (what it must cite)."""
        names: dict[str, None] = {}
        for scale in ("book", "reference", "paper"):
            for grid in self.study.tables(scale).values():
                names.update((cfg.method, None) for configs in grid.values() for cfg in configs)
        return list(names)


CHAPTERS: dict[str, Chapter] = {}


def register_chapter(module: str, title: str) -> Chapter:
    """Register the study module ``module`` (call ``register_chapter(__name__, "Title")`` at its end) after checking
    it defines the ``CONTRACT``."""
    mod = sys.modules[module]
    missing = [f"{name} ({what})" for name, what in CONTRACT.items() if not hasattr(mod, name)]
    if missing:
        raise TypeError(f"chapter {module} does not define {'; '.join(missing)}")
    entry = Chapter(module.rsplit(".", 1)[-1], title, module)
    CHAPTERS[entry.name] = entry
    return entry


def chapters() -> dict[str, Chapter]:
    """Every registered chapter (the book's own first, in its order)."""
    for name in BUILTIN:
        importlib.import_module(f"fedlib.studies.{name}")
    return {**{name: CHAPTERS[name] for name in BUILTIN},
            **{name: c for name, c in CHAPTERS.items() if name not in BUILTIN}}


def study(name: str) -> ModuleType:
    """The study module of chapter ``name``; an unknown name is one ConfigError listing the chapters."""
    known = chapters()
    check(name in known, "chapter", name, f"one of {', '.join(known)}")
    return known[name].study
