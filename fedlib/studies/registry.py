"""The chapters, registered like methods. A paper's study module holds only what its paper brings (its tables'
grids, rows, plots and claims) and declares itself at its end:

    register_chapter(__name__, "FedGPA")

which checks the ``CONTRACT`` and returns its ``Chapter``: the behaviour every chapter shares, written once (its
budget per scale, its hyperparameter table, its paper-scale grid, the notebook's closing verdict box), in front of
the module's own names. Everything that lists chapters (the Results overview, the command line's ``records`` and
``tune``, the benchmarks, the tests) reads ``chapters()``; a sixth paper adds its study module and its notebook
(``fedlib.studies.template``) and, outside the package, imports the module before asking."""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType

from fedlib.errors import check

# what every chapter's study module defines, and what the book layer reads from it
CONTRACT = {
    "SCALES": "its budget per scale (grid.Scales: ci, book, reference, paper)",
    "scale_summary": "what a scale trains beside the paper (printed by the notebook's set-up)",
    "tables": "tables(scale): the recorded grid of every table at reference or paper scale, the headline first",
    "verdicts": "the paper's claims as per-seed margins",
    "reference_run": "the run the hyperparameter table reads",
    "protocol": "how each method is evaluated",
    "HYPER_REASONS": "why a setting differs from the paper's",
    "LABELS": "how tables name the methods",
}
# what a chapter may define beside it: recorded_claims(scale) (the verdicts its committed records decide),
# CLAIM_TABLES and NOT_OFFLINE (which recorded table decides each claim), TUNING (its book-scale learning rate)
BUILTIN = ("fedgpa", "fedpcl", "fedprp", "fedmate", "pfedcspc", "compare")   # the book's chapters, in its order


@dataclass(frozen=True)
class Chapter:
    """A registered chapter: the shared behaviour here, every other name read from its study module (so a notebook
    writes ``study.comparison(...)`` and ``study.hyperparameters(scale)`` alike)."""
    name: str        # the study module's last name: the chapter's notebook and results/<name>/ folder
    title: str       # how the book names it
    module: str      # the study module

    @property
    def study(self) -> ModuleType:
        return importlib.import_module(self.module)

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.study, attr)

    def scale_info(self, scale: str) -> dict:
        """The chapter's budget at ``scale`` (an unknown scale is one ConfigError naming the known ones)."""
        return self.study.SCALES[scale]

    def hyperparameters(self, scale: str) -> list[dict]:
        """This page's training settings against the paper's protocol, with the reason for each difference."""
        from fedlib.studies.tuning import chapter_hyperparameters

        return chapter_hyperparameters(self.name, scale)

    def headline_grid(self, scale: str) -> dict:
        """The headline table's grid at ``scale`` (the first of ``tables(scale)`` that is not the convergence
        check): {cell: [configs over seeds]}."""
        return next(grid for name, grid in self.study.tables(scale).items() if name != "convergence")

    def paper_scale_grid(self) -> dict:
        return self.headline_grid("paper")

    def headline_runs(self, scale: str) -> dict:
        """The headline table's runs at ``scale`` ({cell: records}); at paper scale stored under results/."""
        from fedlib.studies.grid import run_grid

        return run_grid(self.headline_grid(scale), desc=self.name, store=self.name if scale == "paper" else None)

    def test_sets(self, scale: str) -> str:
        """What the headline table's metrics are read on (the protocol's note)."""
        return self.study.protocol(scale)[1].removeprefix("test sets: ")

    def show_headline(self, rows: list[dict], runs: dict, scale: str, keys: int = 1) -> None:
        """Show the headline table with its provenance and leave it for the Results overview."""
        from fedlib.studies.report import provenance_line, records_in, save_summary, show_table

        records = records_in(runs)
        show_table(rows, records, scale, self.test_sets(scale), keys=keys)
        save_summary(self.name, scale, headline=(f"{self.title}: the headline table", rows),
                     provenance=provenance_line(records, scale, self.test_sets(scale)))

    def show_paper_scale(self) -> list[dict]:
        """How much of the headline table has committed paper-scale records, and the table they give (with the
        chapter's ``headline_rows``); returns the current records."""
        from fedlib.studies.grid import stored_grid
        from fedlib.studies.report import report_stored, show_table

        stored = stored_grid(self.name, self.paper_scale_grid())
        found = report_stored(stored, "the headline table")
        if found and hasattr(self.study, "headline_rows"):
            runs = {cell: c["records"] for cell, c in stored.items() if c["records"]}
            show_table(self.study.headline_rows(runs, "paper"), found, "paper", self.test_sets("paper"))
        return found

    def methods(self) -> list[str]:
        """Every method the chapter's tables train at book, reference and paper scale (what it must cite)."""
        names: dict[str, None] = {}
        for scale in ("book", "reference", "paper"):
            for grid in self.study.tables(scale).values():
                names.update((cfg.method, None) for configs in grid.values() for cfg in configs)
        return list(names)

    def close(self, claims: list, scale: str, scale_note: str) -> None:
        """The notebook's last cell: save this scale's verdicts for the Results overview, show the best evidence
        (this page's runs beside the verdicts each recorded scale's committed records decide) and the wall time."""
        from IPython.display import HTML, display

        from fedlib.studies.chapter import wall_time_line
        from fedlib.studies.report import best_evidence_html, recorded_evidence, save_summary

        save_summary(self.name, scale, claims=claims, scale_note=scale_note)
        recorded, notes = recorded_evidence(self.name, self.recorded_claims) if hasattr(self.study,
                                                                                        "recorded_claims") else ({}, {})
        display(HTML(best_evidence_html({scale: claims, **recorded}, {scale: scale_note, **notes})))
        print(wall_time_line())


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


def study(name: str) -> Chapter:
    """The registered chapter ``name``; an unknown name is one ConfigError listing the chapters."""
    known = chapters()
    check(name in known, "chapter", name, f"one of {', '.join(known)}")
    return known[name]
