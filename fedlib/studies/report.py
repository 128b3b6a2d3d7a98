"""Reporting, one place for every chapter: method labels, mean ± std over seeds, provenance of records,
results tables, where a chapter stands, and the summaries the results overview reads. The verdict rule lives in
``studies.verdicts``, the protocol and hyperparameter tables in ``studies.settings``."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass

import numpy as np

from fedlib.experiment import summarize_runs


def method_labels(names, **overrides: str) -> dict[str, str]:
    """Each method's label (its class's ``label``), or the name a chapter's paper uses for it."""
    from fedlib.methods import METHODS as REGISTERED

    return {n: overrides.get(n, REGISTERED[n].label) for n in names}


def mean_std(records: list[dict], metric: str = "personal_local_acc") -> tuple[float, float, int]:
    """(mean, population std, number of seeds) of the last evaluated value of ``metric``."""
    return summarize_runs(records, metrics=(metric,))[metric]


class Measured(str):
    """Our measurement in a table cell: the text the book prints ("mean ± std (n=k)", a single seed says so) and the
    numbers it was made from, which the marks made at display read: numbers stay numbers until display and nothing
    parses the text back. ``accuracy``: an accuracy in % (``fmt``'s), which a table marks near chance; any other
    measurement (seconds, a weight) says False and is never marked, whatever its column's title."""
    mean: float
    std: float
    n: int
    accuracy: bool

    def __new__(cls, mean: float, std: float, n: int, accuracy: bool = True) -> Measured:
        cell = super().__new__(cls, f"{mean:.2f} ± {std:.2f} (n={n})" if n > 1 else f"{mean:.2f} (n=1)")
        cell.mean, cell.std, cell.n, cell.accuracy = float(mean), float(std), int(n), bool(accuracy)
        return cell

    def __reduce__(self):   # copies and worker processes rebuild it from its numbers
        return Measured, (self.mean, self.std, self.n, self.accuracy)

    @property
    def shown(self) -> float:
        """The mean as the cell shows it (two decimals): what a mark compares, so that it agrees with the text."""
        return round(self.mean, 2)

    def as_json(self) -> dict:
        return {"measured": [self.mean, self.std, self.n] + ([] if self.accuracy else [False])}


@dataclass(frozen=True)
class Signed:
    """A difference in a table cell, kept as a number until display: "+1.23" (``decide.signed``)."""
    value: float

    def __str__(self) -> str:
        from fedlib.claims.decide import signed

        return signed(self.value)

    def as_json(self) -> dict:
        return {"signed": self.value}


@dataclass(frozen=True)
class Interval:
    """A 95% interval in a table cell, kept as numbers until display: "[-0.52, +1.00]"."""
    low: float
    high: float

    def __str__(self) -> str:
        return f"[{self.low:+.2f}, {self.high:+.2f}]"

    def as_json(self) -> dict:
        return {"interval": [self.low, self.high]}


@dataclass(frozen=True)
class Margin:
    """A paired margin in a table cell: its mean, its 95% interval (None under two seeds) and its seeds, shown as
    "+0.51 [+0.21, +0.80] (n=5)"."""
    mean: float
    interval: tuple[float, float] | None
    n: int

    def __str__(self) -> str:
        from fedlib.claims.decide import signed

        bounds = "" if self.interval is None else f" [{signed(self.interval[0])}, {signed(self.interval[1])}]"
        return f"{signed(self.mean)}{bounds} (n={self.n})"

    def as_json(self) -> dict:
        return {"margin": [self.mean, None if self.interval is None else list(self.interval), self.n]}


def interval_cell(interval) -> Interval | str:
    """A 95% interval (low, high) as a table cell; "-" where there is none."""
    return "-" if interval is None else Interval(float(interval[0]), float(interval[1]))


SHOWN = (Measured, Signed, Interval, Margin)   # the cells that keep their numbers until display


def from_json(value):
    """A saved table cell back as it was (each kind's ``as_json`` form), anything else as is."""
    if isinstance(value, dict) and len(value) == 1:
        (kind, numbers), = value.items()
        if kind == "measured":
            return Measured(*numbers)
        if kind == "signed":
            return Signed(numbers)
        if kind == "interval":
            return Interval(*numbers)
        if kind == "margin":
            return Margin(numbers[0], None if numbers[1] is None else tuple(numbers[1]), numbers[2])
    return value


def fmt(ms) -> Measured:
    """'mean ± std (n seeds)' in % (a ``Measured`` cell); a single seed says so."""
    mean, std, n = ms
    return Measured(100 * mean, 100 * std, n)


def fmt_of(records: list[dict], metric: str = "personal_local_acc", last: int = 1) -> str:
    """``fmt`` of the records' last evaluated ``metric`` (``last`` > 1: the mean of the last ``last`` evaluations);
    "-" where no record has it (a cell not recorded yet)."""
    found = summarize_runs(records, metrics=(metric,), last=last).get(metric)
    return fmt(found) if found else "-"


def per_seed(records: list[dict], metric: str = "personal_local_acc") -> dict[int, float]:
    """{seed: the last-round value of ``metric`` (%)} (no best-round picking)."""
    return {int(r["seed"]): 100 * r["final"][metric] for r in records if r["final"].get(metric) is not None}


def convergence_gap(reference: list[dict], longer: list[dict], metric: str) -> dict | None:
    """The reference runs against the same config at more rounds, paired over the seeds that have both (None: no
    seed has both): {"seeds": [...], "reference": mean %, "longer": mean %, "rounds": (R, 3R), "gaps": {seed:
    longer - reference (points)}, "gap": their mean, "spread": the reference's std over all its seeds (points)}."""
    ref, far = per_seed(reference, metric), per_seed(longer, metric)
    seeds = sorted(set(ref) & set(far))
    if not seeds:
        return None
    gaps = {s: far[s] - ref[s] for s in seeds}
    rounds = tuple(next(r["config"]["rounds"] for r in records if int(r["seed"]) == seeds[0])
                   for records in (reference, longer))
    return {"seeds": seeds, "reference": float(np.mean([ref[s] for s in seeds])),
            "longer": float(np.mean([far[s] for s in seeds])), "rounds": rounds,
            "gaps": gaps, "gap": float(np.mean(list(gaps.values()))),
            "spread": 100 * mean_std(reference, metric)[1] if len(reference) > 1 else np.nan}


def provenance(records: list[dict]) -> dict:
    """Where, when and with which code a set of records was made."""
    if not records:
        return {}
    wall = sum(r.get("wall_time_s", 0.0) for r in records)
    dates = sorted(r.get("finished_at", "")[:10] for r in records)
    return {"runs": len(records), "devices": sorted({r.get("device", "?") for r in records}),
            "executors": sorted({r.get("executor", "sequential") for r in records}),
            "code": sorted({r.get("code_version", "?") for r in records}),
            "dates": f"{dates[0]} to {dates[-1]}" if dates[0] != dates[-1] else dates[0],
            "wall time": f"{wall / 3600:.1f} h" if wall > 3600 else f"{wall:.0f} s"}


def records_in(*groups) -> list[dict]:
    """Every run record inside lists, tuples and dicts of records (nested as the chapters keep them); a diverged
    run's stand-in (``grid._run_one``) is no record."""
    out: list[dict] = []

    def walk(x):
        if isinstance(x, dict) and "config" in x and "final" in x:
            if "diverged" not in x:
                out.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    for g in groups:
        walk(g)
    unique = {id(r): r for r in out}
    return list(unique.values())


def model_name(cfg: dict) -> str:
    from fedlib.models import DEFAULT_MODEL

    if cfg.get("model"):
        return cfg["model"]
    return "projection" if cfg.get("backbones") else DEFAULT_MODEL.get(cfg.get("dataset") or "", "cnn2")


def _listed(values, limit: int = 3) -> str:
    def order(v: str):
        try:
            return (0, float(v), v)
        except ValueError:
            return (1, 0.0, v)

    values = sorted({str(v) for v in values}, key=order)
    return ", ".join(values) if len(values) <= limit else f"{', '.join(values[:limit])} and {len(values) - limit} more"


class Tested(str):
    """What a results table's accuracies were measured on (the text its provenance line prints), and the floor of a
    trivial predictor there: "uniform" (a balanced test set: a uniform guess, 1/K) or "majority" (each client's local
    test set, drawn with its own label mix: always its majority class, mean over clients). Joined with ``+``, the
    parts keep their floors (a table of a global and a local metric states both)."""
    floor: str
    parts: tuple

    def __new__(cls, text: str, floor: str = "uniform", parts: tuple = ()):
        out = super().__new__(cls, text)
        out.floor, out.parts = floor, parts or ((floor, str(text)),)
        return out

    def __add__(self, other):
        parts = tuple(dict.fromkeys(self.parts + (other.parts if isinstance(other, Tested) else ())))
        floors = {f for f, _ in parts}
        return Tested(str(self) + str(other), floors.pop() if len(floors) == 1 else "mixed", parts)

    def __radd__(self, other):   # plain text before a description: the description's floors
        return Tested(str(other) + str(self), self.floor, self.parts)


def balanced(text: str) -> Tested:
    return Tested(text, "uniform")


def local(text: str) -> Tested:
    return Tested(text, "majority")


def majority_floor(records: list[dict]) -> float | None:
    """The "majority" floor (%) of the records' local test sets (fedlib.data.partition.majority_share), mean over
    clients and records; None where no record has its clients' class counts."""
    from fedlib.data.partition import majority_share

    shares = [majority_share(r["train_counts"], (r["config"].get("partition") or {}).get("test_fraction", 0.25)).mean()
              for r in records if r.get("train_counts")]
    return float(np.mean(shares) * 100) if shares else None


def provenance_line(records: list[dict], scale: str, test_set: str) -> str:
    """One line saying what a results table is made of: scale, data, model, test set (none for a table of costs:
    ``test_set`` empty), seeds and how the spread is computed, code version, device, wall time."""
    if not records:
        return f"scale {scale}; no runs"
    cfgs = [r["config"] for r in records]
    seeds = sorted({int(r["seed"]) for r in records})
    spread = "one seed, no spread" if len(seeds) == 1 else f"mean ± population std (ddof 0) over {len(seeds)} seeds"
    wall = sum(r.get("wall_time_s", 0.0) for r in records)
    wall_s = f"{wall / 3600:.1f} h" if wall > 3600 else f"{wall / 60:.1f} min" if wall > 120 else f"{wall:.0f} s"
    return (
        f"scale {scale}; data {_listed(c['dataset'] for c in cfgs)}; model {_listed(model_name(c) for c in cfgs)}; "
        f"{_listed(c['num_clients'] for c in cfgs)} clients, {_listed(c['rounds'] for c in cfgs)} rounds; "
        + (f"test: {test_set}; " if test_set else "") + f"seeds {_listed(seeds, 5)}: {spread}; "
        f"code {_listed(r.get('code_version', '?') for r in records)}; "
        f"device {_listed(r.get('device', '?') for r in records)}; precision "
        f"{_listed(r.get('precision', 'fp32') for r in records)}; {len(records)} runs, {wall_s} of training"
    )


def is_number(v) -> bool:
    """A measured or counted cell (not a word, a flag or a sentence)."""
    return isinstance(v, (*SHOWN, int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def cell_text(v) -> str:
    """The book's one number format: two decimals for measured or quoted percentages, plain integers."""
    import math

    if isinstance(v, Measured):
        return v   # kept with its numbers for the marks made at display
    if isinstance(v, SHOWN):
        return str(v)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.2f}"
    if isinstance(v, int):
        return f"{v:,}" if abs(v) >= 10_000 else str(v)
    return str(v)


WORDY = 40   # characters: a results table with a longer cell holds sentences and wraps them (CSS text-table)
# a table of numbers is split where its narrowest width would pass the text column (654 px on the Results overview at
# 1280 px, 676 on a chapter): estimated from its cells at 6.5 px a character and 14 px of padding a column (the
# build's Chromium layout check measures the real widths)
TEXT_COLUMN_PX, CHARACTER_PX, PADDING_PX = 640, 6.5, 14


def classes_of(records: list[dict]) -> int | None:
    """The number of classes of the records' data (from their clients' class counts; None without them)."""
    counts = [r["train_counts"] for r in records if r.get("train_counts")]
    return len(counts[0][0]) if counts else None


def floors_of(records: list[dict], test_set, classes: int | None) -> list[tuple[float, str, str]]:
    """(threshold %, the floor as a caption states it, the dagger's rule) for each test set a table of ``records``
    reads (``Tested``; a plain text is a balanced test set). A uniform guess over ``classes`` marks cells below
    twice its accuracy; the majority-class floor of local test sets marks cells at or below it."""
    parts = test_set.parts if isinstance(test_set, Tested) else (("uniform", str(test_set)),)
    out = []
    for floor in dict.fromkeys(f for f, _ in parts):
        if floor == "majority" and (value := majority_floor(records)) is not None:
            out.append((value, f"majority floor: {value:.1f}% (always the client's most frequent class, on each "
                               "client's local test set, mean over clients)", "at or below that floor"))
        elif classes:
            chance = 100 / classes
            label = "chance" if len(parts) == 1 else "chance on the balanced test set"
            out.append((2 * chance, f"{label}: {chance:.0f}% (a uniform guess over {classes} classes)",
                        "below twice chance"))
    return out


class ResultsTable:
    """A results table as the book shows it: no index column, one number format, at most ``max_columns``
    columns per part (wider tables are split, the first ``keys`` columns repeated), and a provenance line.
    ``floors``: the floors of its test sets as ``floors_of`` gave them where the table has no records (the Results
    overview reads them from a chapter's summary); ``state_floor``: state them even where no cell has ``fmt``'s form
    (a table of single-seed endpoints and gaps)."""

    def __init__(self, table, records=(), scale: str = "", test_set: str = "", note: str = "",
                 keys: int = 1, max_columns: int = 6, classes: int | None = None, at_chance: str = "",
                 floors: list | None = None, state_floor: bool = False):
        import pandas as pd

        df = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
        if isinstance(df.columns, pd.MultiIndex):
            df = df.copy()
            names = df.columns.names
            df.columns = [" ".join(str(v) if name is None else f"{name}={v}" for name, v in zip(names, col) if str(v))
                          for col in df.columns]
        if not isinstance(df.index, pd.RangeIndex) or df.index.name is not None:
            keys = max(keys, df.index.nlevels)
            df = df.reset_index()
        self.numeric = df.map(is_number)   # which cells are numbers: they never break inside (CSS td.num)
        self.df = df.map(cell_text)
        self.df.columns.name = None
        self.records = records_in(records)
        self.keys, self.max_columns = keys, max_columns
        self.caption = provenance_line(self.records, scale, test_set) if self.records else ""
        self.note = note
        self.scale, self.at_chance, self.marked, self.test_set = scale, at_chance, 0, test_set
        self.state_floor = state_floor
        self._mark_near_chance(classes, floors)

    def _mark_near_chance(self, classes: int | None = None, given: list | None = None) -> None:
        """Our accuracy cells (``Measured``: ``fmt``'s "mean ± std (n=k)" in %, whatever their column's title) near the
        floor of a trivial predictor on the test set they read get a dagger (``floors_of``; with several test sets, the
        lowest threshold), and the caption states each floor."""
        classes = classes_of(self.records) or classes
        floors = [tuple(f) for f in given] if given else floors_of(self.records, self.test_set, classes)
        if not floors:
            return
        threshold, _, rule = min(floors)
        found = marked = 0
        for col in self.df.columns[self.keys:]:
            for i, value in self.df[col].items():
                if isinstance(value, Measured) and value.accuracy:
                    found += 1
                    if value.shown < threshold or (rule.startswith("at or below") and value.shown <= threshold):
                        self.df.at[i, col] = f"{value} †"
                        marked += 1
        if found or self.state_floor:
            line = "; ".join(text for _, text, _ in floors)
            if marked:
                line += f"; † {rule}: at this budget that model barely trained ({marked} cells)"
                if self.at_chance:
                    line += f": {self.at_chance}"
            self.caption = f"{self.caption}; {line}" if self.caption else line
        self.marked = marked

    def wordy(self) -> bool:
        return any(len(str(v)) > WORDY for v in self.df.to_numpy().ravel())

    def column_px(self, col) -> float:
        """A column's narrowest width, estimated: its longest cell (a number never breaks; a label is counted whole)
        or its header's longest word."""
        body = max((len(str(v)) for v in self.df[col]), default=0)
        head = max((len(word) for word in str(col).split()), default=0)
        return CHARACTER_PX * max(body, head) + PADDING_PX

    def part_columns(self) -> list[list]:
        """The columns of each part: at most ``max_columns`` (the keys included) and, for a table of numbers, no
        wider than the text column (a sentence table wraps its cells instead)."""
        cols = list(self.df.columns)
        key, rest = cols[:self.keys], cols[self.keys:]
        width = max(1, self.max_columns - len(key))
        budget = float("inf") if self.wordy() else TEXT_COLUMN_PX - sum(map(self.column_px, key))
        parts: list[list] = [[]]
        used = 0.0
        for col in rest:
            px = self.column_px(col)
            if parts[-1] and (len(parts[-1]) >= width or used + px > budget):
                parts.append([])
                used = 0.0
            parts[-1].append(col)
            used += px
        # as many parts with the columns shared out evenly, where they fit: no lone column left for the last part
        ends = np.cumsum([0] + [len(chunk) for chunk in np.array_split(np.arange(len(rest)), len(parts))])
        even = [rest[start:end] for start, end in zip(ends, ends[1:])]
        if all(len(part) <= width and sum(map(self.column_px, part)) <= budget for part in even):
            parts = even
        return [key + part for part in parts]

    def parts(self) -> list:
        return [self.df[cols] for cols in self.part_columns()]

    def part_html(self, cols: list, wordy: bool) -> str:
        """One part as HTML: a number's cell has the class ``num`` (it does not break inside; its column is kept
        wide enough), from the cells' types, in the order ``to_html`` writes the cells (row by row)."""
        import re

        text = self.df[cols].to_html(index=False, escape=True, border=0, justify="left" if wordy else None,
                                     classes="results text-table" if wordy else "results")
        flags = iter(self.numeric[cols].to_numpy().ravel())
        return re.sub(r"<td>", lambda _: '<td class="num">' if next(flags) else "<td>", text)

    def _repr_html_(self) -> str:
        # a table of sentences (settings, protocols, claims) wraps inside the text column (class text-table)
        wordy = self.wordy()
        tables = "".join(self.part_html(cols, wordy) for cols in self.part_columns())
        lines = "".join(f"<p class='provenance'>{html.escape(t)}</p>" for t in (self.note, self.caption) if t)
        # a book-scale table with cells near chance and no reason fails the book's build (book/build.py)
        flag = f" data-unexplained-chance='{self.marked}'" if self.unexplained() else ""
        return f"<div class='results-table'{flag}>{tables}{lines}{self.sources_html()}</div>"

    def sources_html(self) -> str:
        """From a number to its record: every record behind the table (method, data, seed: file) and the one
        command that recomputes the table, folded under the table."""
        if not self.records:
            return ""
        from fedlib import results
        from fedlib.experiment.config import RECORDED_SCALES

        items, built, chapters, among = [], 0, [], results.folders()
        for r in self.records:
            c = r["config"]
            label = f"{html.escape(str(c['method']))}, {html.escape(str(c['dataset']))}, seed {r['seed']}"
            folder = results.committed_in(r["key"], among=among)   # where it is committed, whichever page shows it
            if folder:
                chapters.append(folder)
                items.append(f"<li>{label}: <code>results/{folder}/{r['key']}.json</code> (committed)</li>")
            else:   # made when this page was built: kept in the builder's cache, not in the repository
                built += 1
                items.append(f"<li>{label}: run {r['key']}, computed when this page was built</li>")
        chapter = chapters[0] if chapters else None
        if self.scale in RECORDED_SCALES and chapter:
            command = (f"python -m fedlib records {chapter} --scale {self.scale}: runs what is missing (delete a "
                       f"file under results/{chapter}/ to recompute it)")
        else:
            command = (f"python -m fedlib book --config {self.scale or 'book'}: re-executes the chapter, reading "
                       "finished runs from the result cache (.fedlib-cache/, not committed; delete a run's file "
                       "there to recompute it)")
        where = (f"{len(items) - built} committed under results/, {built} computed at build time" if built and
                 built < len(items) else "computed at build time" if built else "committed under results/")
        return (f"<details class='records'><summary>the {len(items)} records behind this table ({where}) and the "
                f"command that recomputes it</summary><p><code>{html.escape(command)}</code></p>"
                f"<ul>{''.join(items)}</ul></details>")

    def unexplained(self) -> bool:
        """Book scale must train: cells below twice chance need a reason (``at_chance``)."""
        return self.scale == "book" and self.marked > 0 and not self.at_chance

    def __repr__(self) -> str:
        text = "\n\n".join(part.to_string(index=False) for part in self.parts())
        return "\n".join(t for t in (text, self.note, self.caption) if t)


def show_table(table, records=(), scale: str = "", test_set: str = "", note: str = "", keys: int = 1,
               max_columns: int = 6, at_chance: str = "", state_floor: bool = False) -> None:
    """Display a results table with its provenance (see ``ResultsTable``); ``at_chance``: why cells below twice
    chance are the finding at this scale (without it such cells fail the book's build at book scale)."""
    from IPython.display import display

    shown = ResultsTable(table, records, scale, test_set, note, keys, max_columns, at_chance=at_chance,
                         state_floor=state_floor)
    display(shown)


def report_stored(stored: dict, grid: str = "", scale: str = "paper") -> list[dict]:
    """Print how much of a grid at ``scale`` (reference or paper) has committed records (``stored_grid``'s answer)
    and where, when and with which code they were made; return the current records."""
    found = [r for cell in stored.values() for r in cell["records"]]
    stale = sum(c["stale"] for c in stored.values())
    missing = sum(c["missing"] for c in stored.values())
    diverged = sum(len(c.get("diverged", ())) for c in stored.values())
    print(f"committed {scale}-scale records{f' ({grid})' if grid else ''}: {len(found)} current, {stale} stale, "
          + (f"{diverged} recorded as diverged, " if diverged else "")
          + f"{missing} missing of {len(found) + stale + diverged + missing}")
    if found:
        p = provenance(found)
        print(f"made on {', '.join(p['devices'])} ({', '.join(p['executors'])} executor), {p['dates']}, "
              f"code {', '.join(p['code'])}: {p['runs']} runs, {p['wall time']} of device time")
    else:
        print(f"No {scale}-scale run has been recorded yet; the book shows the records as soon as they are "
              "committed.")
    return found


# ---------------------------------------------------------------------- where a chapter stands
SCALE_MEANING = {
    "ci": "a test of the code on tiny data: its numbers say nothing about the methods",
    "book": "a smoke run at a budget this CPU trains in minutes: it shows the methods run and how they rank at "
            "this budget, never whether the paper's numbers reproduce",
    "reference": "the paper's protocol with fewer rounds and local epochs (a convergence check at 3x the rounds "
                 "says whether the budget has settled), 3 seeds: the first scale at which a claim of the paper is "
                 "tested",
    "paper": "the paper's protocol (data, rounds, epochs, seeds): the scale at which the paper is compared",
}


def claim_runs(study, scale: str = "reference") -> list[dict]:
    """Each claim of a chapter (its ``CLAIMS``), the tables that decide it and what they run (``TABLE_RUNS``), the
    runs at ``scale`` (cells x seeds of ``tables(scale)``), then every other claim sentence of the paper's experiments
    section (``INVENTORY``: not checkable offline, or not tested yet, with what it needs)."""
    declared = study.declared
    grids = declared.tables(scale)
    sources = declared.view_sources   # a view's runs are its source tables' runs
    rows = []
    for claim in declared.claims:
        read = list(dict.fromkeys(s for t in claim.tables for s in sources.get(t, (t,)) if s in grids))
        configs = [c for t in read for configs in grids[t].values() for c in configs]
        seeds = sorted({c.seed for c in configs})
        rows.append({"claim": claim.summary,
                     "decided by": "; ".join(f"{t}: {declared.table_runs.get(t, t)}" for t in claim.tables),
                     "runs": f"{len(configs)} ({sum(len(grids[t]) for t in read)} cells x seeds {seeds})" if read
                     else "-"})   # measured, not trained (a timing record)
    return rows + [{"claim": f"“{s.words}” ({s.source})", "decided by": s.status, "runs": "-"}
                   for s in declared.inventory if not s.claim]


def coverage_text(cov: dict) -> str:
    if not cov["current"]:
        return f"0 of {cov['total']} runs recorded" + (f" ({cov['stale']} stale)" if cov["stale"] else "")
    return (f"{cov['current']} of {cov['total']} runs recorded" + (f", {cov['stale']} stale" if cov["stale"] else "")
            + (f", {cov['diverged']} recorded as diverged" if cov.get("diverged") else "")
            + f"; seeds {', '.join(map(str, cov['seeds']))}; {', '.join(cov['devices'])}; "
              f"{cov['hours']:.1f} h of training")


_STARTED: dict[str, float] = {}


def start_clock() -> None:
    """Start the chapter's clock (``open_chapter``)."""
    import time

    _STARTED["chapter"] = time.time()


def wall_time_line() -> str:
    import time

    return f"chapter wall time {time.time() - _STARTED.get('chapter', time.time()):.0f} s " \
           "(cached runs are read, not recomputed)"


def ordered(values: list[float]) -> bool:
    """Strictly increasing."""
    return all(b > a for a, b in zip(values, values[1:]))


def entropy_rows(W) -> float:
    """Mean over rows of the entropy (nats) of a row-stochastic matrix."""
    W = np.asarray(W, dtype=float)
    return float((-(W * np.log(np.where(W > 0, W, 1))).sum(1)).mean())


def summary_path(chapter: str, scale: str):
    from fedlib.experiment import DEFAULT_CACHE

    return DEFAULT_CACHE / "summaries" / f"{chapter}-{scale}.json"


def save_summary(chapter: str, scale: str, headline: tuple[str, list[dict]] | None = None,
                 claims: list | None = None, scale_note: str = "", records: list[dict] | None = None,
                 test_set="") -> None:
    """Leave what the book's results overview shows of a chapter: its headline table (title, rows with ours beside
    the paper; from its ``records`` and the ``test_set`` they read: the provenance line and the floors of a trivial
    predictor) and its claims with their verdicts, at one scale."""
    import time

    from fedlib.experiment import atomic_json, code_version

    path = summary_path(chapter, scale)
    data = read_cached_record_like(path)
    data.update({"chapter": chapter, "scale": scale, "code_version": code_version(),
                 "saved_at": time.strftime("%Y-%m-%d %H:%M")})
    if headline is not None:
        rows = [{k: v.as_json() if isinstance(v, SHOWN) else v for k, v in row.items()} for row in headline[1]]
        data["headline"] = {"title": headline[0], "rows": rows,
                            "provenance": provenance_line(records or [], scale, test_set),
                            "floors": floors_of(records or [], test_set, classes_of(records or []))}
    if claims is not None:   # a page's own runs through the declarations (claims.Assessment)
        from fedlib.studies.verdicts import deciding_text

        data["claims"] = [{"id": a.claim.id, "claim": a.claim.summary, "hypothesis": a.claim.hypothesis,
                           "outcome": a.outcome, "detail": deciding_text(a)} for a in claims]
        data["scale_note"] = scale_note
    atomic_json(path, data)


def read_cached_record_like(path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def load_summaries(chapters, scale: str) -> dict:
    """chapter -> its saved summary at ``scale`` (chapters not run at that scale are left out)."""
    out = {}
    for chapter in chapters:
        data = read_cached_record_like(summary_path(chapter, scale))
        if data:
            out[chapter] = data
    return out
