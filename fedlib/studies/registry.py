"""The chapters, registered like methods. A paper's study module holds only what its paper brings (its tables'
grids, rows, plots and claims) and declares itself at its end:

    register_chapter(__name__, "FedGPA", place=1)

which checks the ``CONTRACT`` and returns its ``Chapter``: the behaviour every chapter shares, written once (its
budget per scale, its hyperparameter table, its paper-scale grid, the notebook's closing verdict box), in front of
the module's own names. ``chapters()`` discovers the study modules of ``fedlib.studies`` and of the chapters' folders
that package mounts (``notebooks/<paper>/``; no list of them is kept) and orders them by their place; everything
that lists chapters (the Results overview, the book's manifest and table of contents, the command line's
``records`` and ``tune``, the benchmarks, the tests) reads it. A sixth paper adds its study module and its notebook
(``fedlib.studies.template``); outside the package, it imports the module before asking."""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import ModuleType

from fedlib.claims import RECORDED, Claim, Sentence
from fedlib.errors import check
from fedlib.experiment import Config
from fedlib.studies.grid import ON_CPU, Runtime, Scales

# what every chapter's study module defines, and what the book layer reads from it
CONTRACT = {
    "SCALES": "its budget per scale (grid.Scales: ci, book, reference, paper)",
    "scale_summary": "what a scale trains beside the paper (printed by the notebook's set-up)",
    "tables": "tables(scale): the recorded grid of every table at reference or paper scale, the headline first",
    "CLAIMS": "the paper's claims, declared once (claims.Claim)",
    "TABLE_RUNS": "what each table its claims read runs, in words",
    "INVENTORY": "every claim sentence of its paper's experiments section and what the chapter does with it",
    "reference_run": "the run the hyperparameter table reads",
    "protocol": "how each method is evaluated",
    "HYPER_REASONS": "why a setting differs from the paper's",
    "LABELS": "how tables name the methods",
}


@dataclass(frozen=True)
class Declaration:
    """What a chapter's study module declares, typed: the ``CONTRACT`` (every chapter) and what a chapter may add,
    read from the module by ``declaration_of`` (a function under the field's name, anything else in upper case), so
    the shared behaviour reads fields, never probes the module."""
    scales: Scales
    scale_summary: Callable[[str], str]
    tables: Callable[[str], dict]
    claims: tuple[Claim, ...]
    table_runs: Mapping[str, str]
    inventory: tuple[Sentence, ...]
    reference_run: Callable[[str], Config]
    protocol: Callable[[str], tuple[list[dict], str]]
    hyper_reasons: Mapping[str, str]
    labels: dict[str, str]
    # what a chapter may add
    views: Callable[[dict, str], dict] | None = None   # tables its claims read that are made of other tables' runs
    view_sources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)   # the tables a view only reads
    deciding_scales: tuple[str, ...] = RECORDED   # the recorded scales whose records decide its claims
    headline_rows: Callable[[dict, str], list[dict]] | None = None   # the headline table from committed records
    recorded_tables: Callable[[dict, str], dict] | None = None   # or several tables read from the headline grid
    headline_keys: int = 1   # label columns repeated in each part of a split headline table
    reference_reasons: Mapping[str, str] = field(default_factory=dict)   # why reference scale differs beyond rounds
    convergence_metric: str | None = None   # the metric its reference budget's convergence check reads
    tuning: Mapping | None = None   # its book-scale learning rate's reference run (python -m fedlib tune)
    config: Callable[..., Config] | None = None   # the config the tuning run is built from
    lr_override: str = ""   # why its book-scale rate is not the tuned one
    notebook_parameters: Mapping[str, tuple] = field(default_factory=dict)   # what its list parameters may hold
    timing_runs: Callable[[str, str], dict] | None = None   # its efficiency claims' side-by-side timing


def declaration_of(module: ModuleType) -> Declaration:
    """The module's declaration; a name of the ``CONTRACT`` it lacks, or a name of the wrong kind, is one
    TypeError naming them."""
    missing = [f"{name} ({what})" for name, what in CONTRACT.items() if not hasattr(module, name)]
    if missing:
        raise TypeError(f"chapter {module.__name__} does not define {'; '.join(missing)}")
    found = {f.name: getattr(module, declared_name(f)) for f in fields(Declaration)
             if hasattr(module, declared_name(f))}
    wrong = [f"{declared_name(f)} ({f.type})" for f in fields(Declaration) if f.name in found
             and not _of_kind(str(f.type), found[f.name])]
    if wrong:
        raise TypeError(f"chapter {module.__name__}: {'; '.join(wrong)} is not of that kind")
    return Declaration(**found)


def declared_name(f) -> str:
    """The module's name for a field of ``Declaration``: a function by its own name, anything else in upper case."""
    return f.name if str(f.type).startswith("Callable") else f.name.upper()


KIND_CHECKS: dict[str, Callable[[object], bool]] = {
    "Callable": callable, "Scales": lambda v: isinstance(v, Scales), "Mapping": lambda v: isinstance(v, Mapping),
    "dict": lambda v: isinstance(v, dict), "tuple": lambda v: isinstance(v, tuple), "int": lambda v: isinstance(v, int),
    "str": lambda v: isinstance(v, str)}


def _of_kind(annotation: str, value: object) -> bool:
    """Whether ``value`` is of the kind the annotation names (its outer type; None where the annotation allows it)."""
    if value is None:
        return annotation.endswith("| None")
    return KIND_CHECKS.get(annotation.split("[")[0].split(" |")[0], lambda _: True)(value)


# a chapter's place in the book when it names none: after the papers' chapters, before the side-by-side page
PAPER_PLACE = 50


@dataclass(frozen=True)
class Chapter:
    """A registered chapter: the behaviour every chapter shares, written once over its typed ``declared`` fields; what
    only its paper brings is its study module, ``paper`` (a notebook writes ``study.hyperparameters(scale)`` and
    ``paper.comparison(...)``)."""
    name: str        # the study module's last name: the chapter's notebook and results/<name>/ folder
    title: str       # how the book names it
    module: str      # the study module
    place: int = PAPER_PLACE   # its place in the book's order (ties: by name)
    runtime: Runtime = field(default=ON_CPU, compare=False)   # where its runs execute (a notebook's ``open_chapter``)

    @property
    def paper(self) -> ModuleType:
        """The chapter's study module: what its paper brings (its grids, tables, figures), read by its notebook."""
        return importlib.import_module(self.module)

    @property
    def declared(self) -> Declaration:
        """What its study module declares, typed (read from the module each time: a few attributes)."""
        return declaration_of(self.paper)

    @property
    def notebook(self) -> Path:
        """The chapter's notebook: beside its study module, named like it (``notebooks/<paper>/<paper>.ipynb``)."""
        return Path(str(self.paper.__file__)).with_suffix(".ipynb")

    def scale_info(self, scale: str) -> dict:
        """The chapter's budget at ``scale`` (an unknown scale is one ConfigError naming the known ones)."""
        return self.declared.scales[scale]

    def hyperparameters(self, scale: str) -> list[dict]:
        """This page's training settings against the paper's protocol, with the reason for each difference."""
        from fedlib.studies.tuning import chapter_hyperparameters

        return chapter_hyperparameters(self, scale)

    def headline_name(self, scale: str) -> str:
        """The headline table's name: the first of ``tables(scale)`` that is not the convergence check."""
        return next(name for name in self.declared.tables(scale) if name != "convergence")

    def headline_grid(self, scale: str) -> dict:
        """The headline table's grid at ``scale`` (the first of ``tables(scale)`` that is not the convergence
        check): {cell: [configs over seeds]}."""
        return self.declared.tables(scale)[self.headline_name(scale)]

    def paper_scale_grid(self) -> dict:
        return self.headline_grid("paper")

    def headline_runs(self, scale: str) -> dict:
        """The headline table's runs at ``scale`` ({cell: records}); at paper scale stored under results/."""
        from fedlib.studies.grid import run_grid

        return run_grid(self.headline_grid(scale), desc=self.name, store=self.name if scale == "paper" else None,
                        runtime=self.runtime)

    def test_sets(self, scale: str) -> str:
        """What the headline table's metrics are read on (the protocol's note)."""
        return self.declared.protocol(scale)[1].removeprefix("test sets: ")

    def show_headline(self, rows: list[dict], runs: dict, scale: str, keys: int = 1) -> None:
        """Show the headline table with its provenance and leave it for the Results overview."""
        from fedlib.studies.report import records_in, save_summary, show_table

        records = records_in(runs)
        show_table(rows, records, scale, self.test_sets(scale), keys=keys)
        save_summary(self.name, scale, headline=(f"{self.title}: the headline table", rows), records=records,
                     test_set=self.test_sets(scale))

    def headline_scale(self) -> str:
        """The longest recorded budget of the headline table: paper scale once it has a current record, else
        reference."""
        from fedlib.studies.grid import stored_grid

        paper = stored_grid(self.name, self.headline_grid("paper"))
        return "paper" if any(cell.get("records") for cell in paper.values()) else "reference"

    def show_paper_scale(self, what: str = "the headline table") -> list[dict]:
        return self.show_recorded("paper", what)

    def show_recorded(self, scale: str, what: str = "the headline table") -> list[dict]:
        """How much of the headline table (``what``: how the page names it) has committed records at ``scale``
        (reference or paper), and the tables they give, from the committed records only (a cell not recorded yet
        reads "-"): the chapter's ``recorded_tables(runs, scale)`` ({title: (rows, their records, test set)}: several
        tables read from the headline grid) or ``headline_rows(runs, scale)``. Returns the current records."""
        from IPython.display import Markdown, display

        from fedlib.studies.grid import stored_grid, with_diverged
        from fedlib.studies.report import report_stored, show_table

        stored = stored_grid(self.name, self.headline_grid(scale))
        found = report_stored(stored, what, scale=scale)
        if not found:
            return found
        runs = with_diverged(stored)   # a seed recorded as diverged: its stand-in, which the tables name
        if self.declared.recorded_tables is not None:
            tables = self.declared.recorded_tables(runs, scale)
        elif self.declared.headline_rows is not None:
            tables = {"": (self.declared.headline_rows(runs, scale), found, self.test_sets(scale))}
        else:
            return found
        keys = self.declared.headline_keys   # label columns repeated in each part of a split table
        for title, (rows, records, test_set) in tables.items():
            if title:
                display(Markdown(f"**{title}, {scale} scale**"))
            show_table(rows, records, scale, test_set, keys=keys if not title else 1)
        return found

    def methods(self) -> list[str]:
        """Every method the chapter's tables train at book, reference and paper scale (what it must cite)."""
        names: dict[str, None] = {}
        for scale in ("book", "reference", "paper"):
            for grid in self.declared.tables(scale).values():
                names.update((cfg.method, None) for configs in grid.values() for cfg in configs)
        return list(names)

    @property
    def claims(self) -> tuple:
        return self.declared.claims

    def deciding_scales(self) -> tuple[str, ...]:
        """The budgets whose committed records decide its claims, longest first: paper, the reference protocol at 3x
        the rounds (where the chapter records its deciding comparisons so: tables named ``<table>@3x``), reference."""
        from fedlib.claims import LONGER, LONGER_TABLE

        has_longer = any(t.endswith(LONGER_TABLE) for t in self.declared.tables("reference"))
        return tuple(s for s in self.declared.deciding_scales if s != LONGER or has_longer)

    def evidence(self, scale: str, root=None) -> dict:
        """The committed records at budget ``scale`` of every table but the convergence check: {table: {cell:
        records}}; at the 3x budget the reference scale's ``<table>@3x`` tables, under their tables' names."""
        from fedlib.claims import LONGER, LONGER_TABLE, scale_of
        from fedlib.studies.grid import stored_grid

        grids = self.declared.tables(scale_of(scale))
        wanted = {t: t.removesuffix(LONGER_TABLE) for t in grids if t != "convergence"
                  and t.endswith(LONGER_TABLE) == (scale == LONGER)}
        return {name: {cell: c["records"] for cell, c in stored_grid(self.name, grids[t], root).items()}
                for t, name in wanted.items()}

    def read(self, scale: str, runs: dict | None = None) -> dict:
        """What the claims read at ``scale``: ``runs`` ({table: {cell: records}}, a page's own runs) or the committed
        records, with the chapter's ``views`` (the tables made of other tables' runs) and, at paper scale, its
        committed side-by-side timing (``timing.TABLE``) where it names ``timing_runs``."""
        from fedlib.claims import scale_of

        evidence = self.evidence(scale) if runs is None else dict(runs)
        if scale == "paper" and self.declared.timing_runs is not None:   # its efficiency claims' side-by-side timing
            from fedlib import timing

            evidence[timing.TABLE] = timing.evidence(self.name)
        views = self.declared.views
        return views(evidence, scale_of(scale)) if views is not None else evidence

    def last(self, scale: str) -> int:
        """How many of the last evaluations a value is the mean of (FedPRP: the paper's last rounds)."""
        from fedlib.claims import scale_of

        return self.declared.scales[scale_of(scale)].last

    def assess(self, scale: str, runs: dict | None = None, evidence: dict | None = None) -> list:
        """Every claim assessed at ``scale`` (on ``runs``, else the committed records; ``evidence``: already read)."""
        from fedlib.claims import assess

        evidence = self.read(scale, runs) if evidence is None else evidence
        return [assess(c, evidence, scale, self.declared.labels, self.last(scale)) for c in self.claims]

    def verdicts(self) -> list:
        """Each claim's verdict from the committed records: the longest recorded budget whose comparisons are all
        complete decides (``claims.verdict``), with its deciding comparison's margin by round and whether it still
        moves (``claims.with_trajectory``)."""
        import dataclasses

        from fedlib.claims import assess, verdict, with_trajectory

        scales = self.deciding_scales()
        evidence = {s: self.read(s) for s in scales}
        by_scale = {s: self.assess(s, evidence=evidence[s]) for s in scales}
        last = {s: self.last(s) for s in scales}
        out = []
        for i, c in enumerate(self.claims):
            v = with_trajectory(verdict(c, {s: found[i] for s, found in by_scale.items()}), evidence, last,
                                self.declared.labels)
            beside = {}
            for name, _ in c.beside:   # the claim's other forms, each at the budget that decides it
                alt = c.alternative(name)
                found = verdict(alt, {s: assess(alt, evidence[s], s, self.declared.labels, last[s]) for s in scales})
                if found.deciding is not None:
                    beside[name] = found.deciding
            v = dataclasses.replace(v, beside=beside)
            out.append(v)
        return out

    def scale_notes(self) -> dict[str, str]:
        """What each recorded scale is: its coverage, its share of the paper's training, and at reference scale
        whether the budget converged."""
        from fedlib.claims import LONGER
        from fedlib.studies.report import coverage_text

        notes = {}
        for scale in self.deciding_scales():
            if scale == LONGER:
                notes[scale] = (f"the reference protocol at three times its rounds, for the comparisons that decide "
                                f"claims only: {coverage_text(self.coverage(scale))}; a partial check that decides no "
                                "claim alone, but flags a reference verdict whose comparison lies elsewhere at 3x")
                continue
            share = self.training_share(scale) if scale != "paper" else ""
            clause = self.convergence_clause() if scale == "reference" else ""
            notes[scale] = "; ".join(filter(None, (coverage_text(self.coverage(scale)), share, clause)))
        return notes

    def close(self, runs: dict, scale: str, scale_note: str) -> None:
        """The notebook's last cell: the verdict box from the committed records, then this page's own runs (``runs``:
        {table: {cell: records}}) through the same declarations, a smoke run that tests no claim; saves the page's
        outcomes for the Results overview and prints the wall time."""
        from IPython.display import HTML, display

        from fedlib.claims import RECORDED
        from fedlib.studies.report import save_summary, wall_time_line
        from fedlib.studies.verdicts import box_html, smoke_html

        display(HTML(box_html(self.verdicts(), self.scale_notes())))
        own = self.assess(scale, runs)
        if scale not in RECORDED:
            display(HTML(smoke_html(own, scale_note)))
        save_summary(self.name, scale, claims=own, scale_note=scale_note)
        print(wall_time_line())

    def coverage(self, scale: str = "paper") -> dict:
        """How much of the chapter's grid at ``scale`` (reference or paper) has committed records: runs current /
        stale / recorded as diverged of the total, their seeds, devices and training time."""
        from fedlib import results
        from fedlib.claims import LONGER, LONGER_TABLE, scale_of
        from fedlib.recording import recording_order

        tables = self.declared.tables(scale_of(scale))
        grid = recording_order({t: g for t, g in tables.items() if scale != LONGER or t.endswith(LONGER_TABLE)})
        hits = results.lookup(self.name, grid)
        current = [h.record for h in hits if h is not None and not h.stale]
        diverged = results.diverged_keys(self.name)
        return {"total": len(grid), "current": len(current),
                "stale": sum(1 for h in hits if h is not None and h.stale),
                "diverged": sum(1 for c, h in zip(grid, hits) if h is None and c.key() in diverged),
                "seeds": sorted({int(r["seed"]) for r in current}),
                "devices": sorted({str(r.get("device", "?")).split(" (")[0] for r in current}),
                "hours": sum(r.get("wall_time_s", 0.0) for r in current) / 3600}

    def training_share(self, scale: str = "reference") -> str:
        """What share of a paper-scale run's local training steps a run at ``scale`` makes, read on the first cell of
        the first table with runs at both scales (the headline table, or the tuning grid before its choices)."""
        from fedlib.experiment.wiring import client_sizes, training_steps

        tables = {s: self.declared.tables(s) for s in (scale, "paper")}
        name = next((n for n, g in tables[scale].items() if n != "convergence" and g and tables["paper"].get(n)), None)
        if name is None:
            return ""
        ours, paper = tables[scale][name], tables["paper"][name]
        cell = next(iter(ours))
        cfg, full = ours[cell][0], (paper.get(cell) or next(iter(paper.values())))[0]

        def budget(c) -> str:
            return (f"{c.rounds} rounds of {c.local_epochs} local epoch{'s' if c.local_epochs > 1 else ''} on "
                    f"{sum(client_sizes(c)):,} training images, batch {c.batch_size}")

        if budget(cfg) == budget(full):
            return f"each run has a paper-scale run's budget ({budget(cfg)})"
        return (f"each run makes {100 * training_steps(cfg) / training_steps(full):.1f}% of a paper-scale run's "
                f"training steps ({scale} scale: {budget(cfg)}; paper scale: {budget(full)})")

    def status_html(self, scale: str) -> str:
        """The box at the top of the chapter: what the committed records find (each claim's outcome, linked to the
        verdict box), the reference- and paper-scale coverage, and what the scale this page ran at can and cannot
        say."""
        import html

        from fedlib.experiment import RECORDED_SCALES
        from fedlib.studies.report import SCALE_MEANING, coverage_text

        share = {"reference": self.training_share("reference")}
        coverage = {s: self.coverage(s) for s in RECORDED_SCALES}
        same = self.declared.tables("reference") == self.declared.tables("paper")   # one set of runs, counted once
        if same:
            coverage = {"paper": coverage["paper"]}
            share = {"paper": "the reference scale is the paper's own protocol and budget: the same runs"}
        parts = [f"{s.capitalize()} scale: {html.escape(coverage_text(cov))}"
                 + (f"; {html.escape(share[s])}" if share.get(s) else "")
                 + (" (complete)" if cov["current"] + cov["diverged"] == cov["total"] else
                    f" (<code>python -m fedlib records {self.name} --scale {s}</code> adds the rest)")
                 for s, cov in coverage.items()]
        from fedlib.studies.verdicts import findings_html

        return (f"<div class='verdict'>{findings_html(self.verdicts())}<p><strong>Where this chapter stands."
                f"</strong> {'. '.join(parts)}; records are committed under <code>results/{self.name}/</code>. This "
                f"page runs at scale <strong>{html.escape(scale)}</strong>: "
                f"{html.escape(SCALE_MEANING.get(scale, ''))}.</p></div>")

    def convergence_clause(self) -> str:
        """Whether the reference budget converged, from the committed 3x runs (``convergence.convergence_clause``) on
        the chapter's ``CONVERGENCE_METRIC``; empty for a chapter without a convergence check."""
        from fedlib.studies.convergence import budget_margins, convergence_clause, convergence_runs, settlings

        metric = self.declared.convergence_metric
        grid = self.declared.tables("reference").get("convergence")
        if metric is None or grid is None:
            return ""
        reference, longer = convergence_runs(self.name, grid)
        return convergence_clause(settlings(reference, longer, metric, self.declared.labels),
                                  budget_margins(reference, longer, metric))

    def show_convergence(self, metric: str, title: str, ylabel: str, test_set: str, local_test: bool = False):
        """The convergence section in one call (``convergence.show_convergence`` on this chapter's 3x runs)."""
        from fedlib.studies.convergence import show_convergence

        tables = self.declared.tables("reference")
        return show_convergence(self.name, tables["convergence"], metric, self.declared.labels, title, ylabel, test_set,
                                local_test=local_test, tables=tables)

    def deciding_margins(self, verdicts: list | None = None) -> list[dict]:
        """Each claim's deciding comparison by round at every budget that has it (``claims.with_trajectory``): the
        convergence judged where it matters, on the margins that decide the claims."""
        from fedlib.studies.verdicts import path_text

        rows = []
        for v in self.verdicts() if verdicts is None else verdicts:
            if not v.trajectory:
                continue
            d = v.deciding.decision.deciding
            rows.append({"claim": v.claim.summary, "deciding comparison": f"{d.label} ({v.deciding.scale})",
                         **{f"margin by round, {s}": path_text(p, 6) for s, p in v.trajectory.items()},
                         "outcome": v.outcome, "still moving": v.moving or "no"})
        return rows

    def show_deciding_margins(self) -> None:
        """The table of ``deciding_margins`` (a notebook's convergence section)."""
        from fedlib.studies.report import show_table

        rows = self.deciding_margins()
        if rows:
            show_table(rows, [], "reference", max_columns=4,
                       note="the comparison that decides each claim, its mean difference over its paired seeds at "
                            "evaluated rounds of each budget that has it; still moving: closing towards 0 by more "
                            "than its interval's half-width over the last third of the rounds (or between the last "
                            "two evaluations where that third holds one), a sign change beyond delta, or another side "
                            "of 0 at a longer budget")
        else:
            print("no claim's deciding comparison has records by round yet")

    def raising_line(self) -> str:
        """What raising the reference budget to 3x its rounds would cost this chapter (``convergence.raising_text``)."""
        from fedlib.studies.convergence import raising_cost, raising_text

        return raising_text(raising_cost(self.name, self.declared.tables("reference")))


CHAPTERS: dict[str, Chapter] = {}


def register_chapter(module: str, title: str, place: int = PAPER_PLACE) -> Chapter:
    """Register the study module ``module`` (call ``register_chapter(__name__, "Title")`` at its end; ``place``: its
    place in the book's order, ``PAPER_PLACE`` by default) after checking it defines the ``CONTRACT``."""
    declaration_of(sys.modules[module])   # the contract checked now, by name and kind
    entry = Chapter(module.rsplit(".", 1)[-1], title, module, place)
    CHAPTERS[entry.name] = entry
    return entry


def package_chapters() -> list[str]:
    """The modules of ``fedlib.studies`` (the chapters' folders included) that register a chapter: a line of their
    source starts with the call (read as text, so that discovering them imports nothing else)."""
    import pkgutil
    import re
    from pathlib import Path

    import fedlib.studies as package

    found = []
    for m in pkgutil.iter_modules(package.__path__):
        source = Path(getattr(m.module_finder, "path", "")) / f"{m.name}.py"
        if source.is_file() and re.search(r"^register_chapter\(__name__", source.read_text(), re.M):
            found.append(f"{package.__name__}.{m.name}")
    return found


def chapters() -> dict[str, Chapter]:
    """Every registered chapter, the package's discovered, in the book's order (each chapter's ``place``, then its
    name)."""
    for module in package_chapters():
        importlib.import_module(module)
    return {c.name: c for c in sorted(CHAPTERS.values(), key=lambda c: (c.place, c.name))}


def study(name: str) -> Chapter:
    """The registered chapter ``name``; an unknown name is one ConfigError listing the chapters."""
    known = chapters()
    check(name in known, "chapter", name, f"one of {', '.join(known)}")
    return known[name]


def tunable() -> list[str]:
    """The chapters whose study declares a ``TUNING`` reference run (``python -m fedlib tune``)."""
    return [name for name, c in chapters().items() if c.declared.tuning is not None]


def notebook_parameters(notebook: str) -> dict[str, tuple]:
    """What each parameter of a book notebook (its file's stem) may hold, checked before any cell runs: one scale and
    one executor for every notebook, and for a chapter's notebook the values its own list parameters may list
    (``NOTEBOOK_PARAMETERS``)."""
    from fedlib.engine.executors import EXECUTORS
    from fedlib.experiment.config import SCALES

    own = chapters()[notebook].declared.notebook_parameters if notebook in chapters() else {}
    return {"scale": SCALES, "executor": ("auto", *EXECUTORS), **own}   # auto: Runtime.chosen's
