"""A paper's claims as declared data, and how each is assessed on a scale's runs.

A chapter declares its claims once (``CLAIMS``): the paper's words and where they stand, the claim's kind, the
comparisons that decide it, the paper's reported effect, the smallest effect of interest with its reason, and the
seeds planned before recording. Comparisons are declared over a chapter's tables (``tables(scale)``: {table: {cell:
configs}}); at each scale they expand over the cells that scale's grid has, read the runs (``Evidence``: {table:
{cell: records}}) seed by seed, and go to the one decision procedure (``decide``). Everything a chapter shows of its
claims (the verdicts at every scale, the claim -> runs list, the verdict box, the Results overview) is computed
from these declarations by shared code."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

import numpy as np

from fedlib.claims.decide import ALPHA, KINDS, TESTS, Compared, Decision, SpreadCompared, decide

Evidence = dict[str, dict[Hashable, list[dict]]]   # {table: {cell: records over seeds}}
Peers = Callable[[str, Hashable], dict | None]   # (table, cell) -> the record of the same seed, or None
DECIDING_SEEDS = 3     # a comparison decides at a scale once it has this many paired seeds
LONGER = "reference 3x"   # the reference protocol at three times its rounds, for the comparisons that decide claims
LONGER_TABLE = "@3x"      # a reference table's name with this suffix: its deciding cells at 3x the rounds
RECORDED = ("paper", LONGER, "reference")   # the budgets that test a paper's claim (committed records), longest first


def scale_of(budget: str) -> str:
    """The scale whose grid holds a budget's runs (the 3x budget's are reference-scale tables)."""
    return "reference" if budget == LONGER else budget


@dataclass(frozen=True)
class Statistic:
    """A number read off one record that is not a metric of its history (a row entropy of logged weights, rounds
    to a target, numbers uploaded); ``of(record, peers)`` may read the same seed's other records through ``peers``."""
    name: str
    of: Callable[[dict, Peers], float | None]
    unit: str = "points"


# a metric of the records' history (read at its last evaluation, in %) or a statistic
Metric = str | Statistic


def mean_over_rounds(metric: str, name: str) -> Statistic:
    """``metric`` (in %) averaged over a run's evaluated rounds: where a run stands during the whole of training (a
    figure's curve), not only at its end."""
    def of(record: dict, peers: Peers) -> float | None:
        values = [row[metric] for row in record.get("history", []) if metric in row]
        return 100 * float(np.mean(values)) if values else None
    return Statistic(name, of)


def first_reach(record: dict, metric: str, target: float) -> int | None:
    """The first evaluated round whose ``metric`` reaches ``target`` (None: never)."""
    return next((int(row["round"]) for row in record.get("history", []) if metric in row and row[metric] >= target),
                None)


def rounds_to_final_of(table: str, cell: Hashable, metric: str, name: str) -> Statistic:
    """Rounds until a record's ``metric`` first reaches the final value of the same seed's run in ``cell`` of
    ``table``, rounded down to half a point (its own noise at the last rounds aside); one evaluation past the last
    round where it never does."""
    def rounds(record: dict, peers: Peers) -> float | None:
        target_run = peers(table, cell)
        evals = [row[metric] for row in (target_run or {}).get("history", []) if metric in row]
        if not evals:
            return None
        reached = first_reach(record, metric, np.floor(200 * evals[-1]) / 200)
        cfg = record["config"]
        return float(reached if reached is not None else int(cfg["rounds"]) + int(cfg.get("eval_every") or 1))

    return Statistic(name, rounds, "rounds")


@dataclass(frozen=True)
class Read:
    """One number per seed: a cell of a table, read with a metric."""
    table: str
    cell: Hashable
    metric: Metric
    label: str


@dataclass(frozen=True)
class Comparison:
    """One elementary comparison: per seed, sum(plus) - sum(minus) - shift, passing its ``test``."""
    label: str
    plus: tuple[Read, ...]
    minus: tuple[Read, ...] = ()
    shift: float = 0.0
    test: str = "greater"
    plus_member: str = ""    # the group member each side stands for (kind "best")
    minus_member: str = ""
    spread: bool = False     # compare the spreads over seeds of one read each (``decide.SpreadCompared``)


@dataclass(frozen=True)
class Row:
    """A row of a table family: the value at its slot of the cell key (the whole key where the table has no slot),
    optionally its own label, metric and table."""
    key: Hashable
    label: str | None = None
    metric: Metric | None = None
    table: str | None = None


@dataclass(frozen=True)
class Pairs:
    """Comparisons "plus above minus" for each (plus, minus) pair of rows, in every cell of ``table`` that has them:
    the cell key with ``slot`` set to each row's key (``slot`` None: the row's key is the whole cell key). ``names``
    formats each slot of the key for labels ("Setting {}", "s = {}"; its own slot ignored); ``where`` keeps the cells
    whose slots hold these values."""
    table: str
    pairs: tuple[tuple[Row, Row], ...]
    metric: Metric
    slot: int | None = None
    names: tuple[str, ...] = ()
    where: tuple[tuple[int, Hashable], ...] = ()
    test: str = "greater"
    shift: float = 0.0
    spread: bool = False     # the rows' spreads over seeds, not their values (``decide.SpreadCompared``)

    def expand(self, evidence: Evidence, labels: dict) -> list[Comparison]:
        """The comparisons over the cells ``evidence`` has for the tables this family reads (a cell the scale's grid
        lacks is no comparison at that scale)."""
        def label(row: Row) -> str:
            return row.label or labels.get(row.key, str(row.key))

        keys = {row.key for pair in self.pairs for row in pair}
        contexts: list[tuple] = []
        if self.slot is None:
            contexts = [()]
        else:
            for cell in evidence.get(self.table, {}):
                if (isinstance(cell, tuple) and cell[self.slot] in keys
                        and all(cell[i] == v for i, v in self.where)):
                    context = cell[:self.slot] + cell[self.slot + 1:]
                    if context not in contexts:
                        contexts.append(context)
        out = []
        for context in contexts:
            words = self.context_words(context, labels)
            for plus, minus in self.pairs:
                reads = []
                for row in (plus, minus):
                    table = row.table or self.table
                    cell = row.key if self.slot is None else context[:self.slot] + (row.key,) + context[self.slot:]
                    if cell not in evidence.get(table, {}):
                        break
                    reads.append(Read(table, cell, row.metric or self.metric, label(row)))
                else:
                    out.append(Comparison(f"{reads[0].label} − {reads[1].label}" + (f", {words}" if words else ""),
                                          (reads[0],), (reads[1],), self.shift, self.test, str(plus.key),
                                          str(minus.key), self.spread))
        return out

    def context_words(self, context: tuple, labels: dict) -> str:
        if self.slot is None:
            return ""
        names = [n for i, n in enumerate(self.names) if i != self.slot] if self.names else []
        return ", ".join(name.format(labels.get(value, value) if isinstance(value, Hashable) else value)
                         for name, value in zip(names, context) if name)


def rows(keys) -> tuple[Row, ...]:
    return tuple(k if isinstance(k, Row) else Row(k) for k in keys)


def versus(table: str, method, rivals, metric: Metric, **kw) -> Pairs:
    """``method`` against each of ``rivals`` in every cell of ``table``."""
    (own,), others = rows([method]), rows(rivals)
    return Pairs(table, tuple((own, r) for r in others), metric, **kw)


def each_above(table: str, upper, lower, metric: Metric, **kw) -> Pairs:
    """Every row of ``upper`` against every row of ``lower`` in every cell of ``table``."""
    return Pairs(table, tuple((u, lo) for u in rows(upper) for lo in rows(lower)), metric, **kw)


def chain(table: str, steps, metric: Metric, **kw) -> Pairs:
    """Each row of ``steps`` above the one before it (an ablation that adds one module at a time)."""
    ordered = rows(steps)
    return Pairs(table, tuple(zip(ordered[1:], ordered[:-1])), metric, **kw)


@dataclass(frozen=True)
class Claim:
    """A claim of a paper (or a hypothesis of the book), declared once."""
    id: str               # stable: what the book links to and the tests name
    summary: str          # the claim in one line, as the tables show it
    words: str            # the paper's own sentence(s), quoted
    source: str           # where they stand: section, table or figure
    compare: tuple        # the comparisons that decide it: Pairs families and single Comparisons
    paper: str            # the paper's numbers behind it, in words
    paper_effect: float | None   # the effect the paper reports for the deciding comparison (the metric's units)
    delta: float          # the smallest effect of interest (the metric's units)
    delta_reason: str     # why that delta
    kind: str = "all"     # decide.KINDS
    required: int | None = None   # "most": how many comparisons must pass (default: a majority)
    reading: str = ""     # how the sentence is read where that needs saying
    seeds: tuple[int, ...] = (0, 1, 2)   # planned before recording; more seeds read make a second look
    hypothesis: bool = False   # a hypothesis of this book, not a claim of the paper: shown, never counted
    unit: str = "points"
    beside: tuple = ()    # (name, comparisons): another form of the method, assessed the same way, shown, never counted
    scales: tuple[str, ...] = ()   # the budgets whose runs can resolve it (default every one; the reading says why)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"claim {self.id}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        for c in (*self.compare, *(c for _, compare in self.beside for c in compare)):
            if c.test not in TESTS:
                raise ValueError(f"claim {self.id}: test {c.test!r} is not one of {', '.join(TESTS)}")

    def alternative(self, name: str) -> Claim:
        """The claim decided on the comparisons ``beside`` names ``name`` (the same kind, delta and seeds)."""
        compare = dict(self.beside)[name]
        return dataclasses.replace(self, id=f"{self.id}:{name}", compare=compare, beside=())

    @property
    def tables(self) -> tuple[str, ...]:
        """The tables its comparisons read, in order (the forms beside it included)."""
        names: dict[str, None] = {}
        for c in (*self.compare, *(c for _, compare in self.beside for c in compare)):
            if isinstance(c, Pairs):
                names[c.table] = None
                names.update((row.table, None) for pair in c.pairs for row in pair if row.table)
            else:
                names.update((r.table, None) for r in (*c.plus, *c.minus))
        return tuple(names)

    def comparisons(self, evidence: Evidence, labels: dict) -> list[Comparison]:
        out: list[Comparison] = []
        for c in self.compare:
            if isinstance(c, Pairs):
                out += c.expand(evidence, labels)
            elif all(r.cell in evidence.get(r.table, {}) for r in (*c.plus, *c.minus)):
                out.append(c)
        return out


@dataclass(frozen=True)
class Sentence:
    """A claim sentence of a paper's experiments section and what its chapter does with it: the claim of ``CLAIMS``
    that tests it, or why it cannot be checked offline, or what testing it still needs (never silently absent)."""
    words: str
    source: str
    claim: str = ""       # the id of the claim that tests it
    offline: str = ""     # why no offline run can check it
    untested: str = ""    # checkable offline, not tested yet: what it needs

    def __post_init__(self):
        if sum(map(bool, (self.claim, self.offline, self.untested))) != 1:
            raise ValueError(f"{self.words[:60]!r}: exactly one of claim, offline, untested")

    @property
    def status(self) -> str:
        return (f"tested: {self.claim}" if self.claim else f"not checkable offline: {self.offline}" if self.offline
                else f"not tested yet: {self.untested}")


def metric_value(record: dict, metric: Metric, last: int, peers: Peers) -> float | None:
    """``record``'s value of ``metric``: a statistic, or 100 x the mean of the metric's last ``last`` evaluations."""
    if isinstance(metric, Statistic):
        return metric.of(record, peers)
    evals = [row[metric] for row in record.get("history", []) if metric in row]
    return 100 * float(np.mean(evals[-last:])) if evals else None


def seed_values(read: Read, evidence: Evidence, last: int = 1) -> dict[int, float]:
    """{seed: value} of one read (diverged stand-ins and missing values left out)."""
    out = {}
    for record in evidence.get(read.table, {}).get(read.cell) or []:
        if record.get("diverged"):
            continue
        seed = int(record["seed"])

        def peers(table, cell, seed=seed):
            return next((r for r in evidence.get(table, {}).get(cell) or [] if int(r["seed"]) == seed
                         and not r.get("diverged")), None)

        value = metric_value(record, read.metric, last, peers)
        if value is not None and np.isfinite(value):
            out[seed] = float(value)
    return out


def paired_values(c: Comparison, evidence: Evidence, last: int = 1) -> dict[int, tuple[float, float]]:
    """{seed: (sum(plus), sum(minus) + shift)} over the seeds every read has (paired by seed)."""
    values = [seed_values(r, evidence, last) for r in (*c.plus, *c.minus)]
    seeds = sorted(set.intersection(*(set(v) for v in values))) if values else []
    k = len(c.plus)
    return {s: (sum(v[s] for v in values[:k]), sum(v[s] for v in values[k:]) + c.shift) for s in seeds}


def differences(c: Comparison, evidence: Evidence, last: int = 1) -> dict[int, float]:
    """{seed: sum(plus) - sum(minus) - shift} over the seeds every read has (paired by seed)."""
    return {s: plus - minus for s, (plus, minus) in paired_values(c, evidence, last).items()}


def compared(c: Comparison, pairs: dict[int, tuple[float, float]], alpha: float, delta: float) -> Compared | None:
    """One comparison on its ``pairs`` (``paired_values``) at ``alpha``: its paired differences (``Compared``) or, for
    a comparison of spreads, both sides' values (``SpreadCompared``); None without a paired seed (a spread: two)."""
    if len(pairs) < (2 if c.spread else 1):   # a spread needs two seeds to be estimated at all
        return None
    seeds, diffs = tuple(pairs), tuple(plus - minus for plus, minus in pairs.values())
    if c.spread:
        return SpreadCompared(c.label, seeds, diffs, alpha, delta, c.test, c.plus_member, c.minus_member,
                              values=tuple(p for p, _ in pairs.values()), others=tuple(m for _, m in pairs.values()))
    return Compared(c.label, seeds, diffs, alpha, delta, c.test, c.plus_member, c.minus_member)


@dataclass(frozen=True)
class Assessment:
    """A claim assessed on one scale's runs."""
    claim: Claim
    scale: str
    decision: Decision
    seeds: tuple[int, ...]          # the seeds its comparisons read
    declared: int                   # comparisons its grid at this scale has
    complete: bool                  # every one with DECIDING_SEEDS paired seeds or more

    @property
    def outcome(self) -> str:
        return self.decision.outcome if self.decision.compared else "not checked"

    @property
    def looks(self) -> int:
        return self.decision.looks


def assess(claim: Claim, evidence: Evidence, scale: str, labels: dict | None = None, last: int = 1) -> Assessment:
    """``claim`` decided on ``evidence`` (one scale's runs; not checked at a scale its ``scales`` leave out). A
    comparison without a paired seed is missing, one with a single seed has no interval (either keeps an "all" claim
    from holding); reading seeds beyond the claim's planned ones is a second look."""
    comparisons = claim.comparisons(evidence, labels or {}) if not claim.scales or scale in claim.scales else []
    pairs = [paired_values(c, evidence, last) for c in comparisons]
    seeds = [set(p) for p in pairs]
    used = sorted(set().union(*seeds))
    looks = 2 if set(used) - set(claim.seeds) else 1
    found = [compared(c, p, ALPHA / looks, claim.delta) for c, p in zip(comparisons, pairs)]
    missing = [c.label for c, f in zip(comparisons, found) if f is None]
    decision = decide([f for f in found if f is not None], claim.kind, looks, claim.required, missing)
    complete = bool(comparisons) and all(len(s) >= DECIDING_SEEDS for s in seeds)
    return Assessment(claim, scale, decision, tuple(used), len(comparisons), complete)


BUDGET = "inconclusive: budget"   # a decided outcome whose deciding margin still moves: not counted as decided
DECIDED = ("holds", "does not hold", "no material difference")


@dataclass(frozen=True)
class Verdict:
    """A claim's verdict across scales: the scale that decides it and the others beside it; the deciding
    comparison's margin at each evaluated round of each scale that has it, and why it still moves ("" where not)."""
    claim: Claim
    deciding: Assessment | None
    others: dict[str, Assessment] = field(default_factory=dict)
    trajectory: dict[str, dict[int, float]] = field(default_factory=dict)
    moving: str = ""
    beside: dict[str, Assessment] = field(default_factory=dict)   # the claim's other forms at the deciding scale
    # where a budget shorter than the paper's decides and no longer one has the deciding comparison: what recording
    # it longer would cost ("" otherwise)
    longer_cost: str = ""

    @property
    def decided_outcome(self) -> str:
        """The deciding scale's outcome, whether or not its margin still moves."""
        return self.deciding.outcome if self.deciding else "not checked"

    @property
    def outcome(self) -> str:
        """The outcome counted: a decided one whose deciding margin still moves counts as "inconclusive: budget"."""
        return BUDGET if self.moving and self.decided_outcome in DECIDED else self.decided_outcome

    @property
    def disagree(self) -> list[str]:
        """The other recorded scales that decide the opposite way."""
        decided = {"holds", "does not hold"}
        if self.deciding is None or self.decided_outcome not in decided:
            return []
        return [s for s, a in self.others.items()
                if s in RECORDED and a.outcome in decided and a.outcome != self.decided_outcome]


def verdict(claim: Claim, by_scale: dict[str, Assessment]) -> Verdict:
    """The longest-budget recorded scale whose comparisons are all complete decides (the 3x budget only where it has
    every comparison the reference scale has); where none is, the longest one with a comparison read at three paired
    seeds (comparisons with fewer count as not recorded yet: a run being recorded does not move the decision to a
    shorter or a thinner budget), else the longest with any comparison (a partial check: it can say "does not hold",
    never "holds" for an "all" claim). Book scale never decides (a smoke run)."""
    def labels(a: Assessment) -> set[str]:
        return {c.label for c in a.decision.compared} | set(a.decision.missing)

    def whole(s: str) -> bool:   # the 3x budget holds some comparisons: it decides only where it has them all
        return by_scale[s].complete and (s != LONGER or "reference" not in by_scale
                                         or labels(by_scale[s]) >= labels(by_scale["reference"]))

    def seeded(s: str) -> bool:   # some of it is read at three paired seeds (others may lack runs)
        return any(c.n >= DECIDING_SEEDS for c in by_scale[s].decision.compared)

    recorded = [s for s in RECORDED if s in by_scale and by_scale[s].decision.compared]
    scale = next((s for s in recorded if whole(s)), next((s for s in recorded if seeded(s)),
                                                         recorded[0] if recorded else None))
    deciding = by_scale[scale] if scale else None
    return Verdict(claim, deciding, {s: a for s, a in by_scale.items() if s != scale})


def cut(record: dict, rnd: int) -> dict:
    """A record as it stood at round ``rnd``: its history up to it, its final row the last of them."""
    history = [h for h in record.get("history", []) if h["round"] <= rnd]
    return {**record, "history": history, "final": history[-1] if history else {}}


def trajectory(c: Comparison, evidence: Evidence, last: int = 1) -> dict[int, float]:
    """The comparison's mean difference over its paired seeds at each round its metrics were evaluated ({} for a
    comparison of statistics, which have no rounds)."""
    reads = (*c.plus, *c.minus)
    if c.spread or any(isinstance(r.metric, Statistic) for r in reads):   # spreads: one number over all seeds
        return {}
    cells = {(r.table, r.cell): evidence.get(r.table, {}).get(r.cell) or [] for r in reads}
    rounds = sorted({int(row["round"]) for recs in cells.values() for rec in recs for row in rec.get("history", [])
                     if any(r.metric in row for r in reads)})
    out = {}
    for rnd in rounds:
        at: Evidence = {}
        for (table, cell), recs in cells.items():
            at.setdefault(table, {})[cell] = [cut(rec, rnd) for rec in recs]
        found = differences(c, at, last)
        if found:
            out[rnd] = float(np.mean(list(found.values())))
    return out


def side(c: Compared) -> str:
    """Where one comparison's interval lies: "ahead" (above 0), "behind" (below 0) or "not separated"."""
    lo, hi = c.bound("lower"), c.bound("upper")
    return "ahead" if lo is not None and lo > 0 else "behind" if hi is not None and hi < 0 else "not separated"


def still_moving(path: dict[int, float], deciding: Compared, longer: Compared | None = None,
                 longer_scale: str = "") -> str:
    """Why a deciding margin still moves, or "": the same comparison at a longer budget lies on another side of 0;
    or over the last third of the rounds (from the evaluation before the last where that third holds only the last)
    its mean changed sign by more than delta, or moved towards 0 by more than its interval's half-width (a margin
    moving away from 0 only strengthens the outcome it gives)."""
    from fedlib.claims.decide import signed

    if longer is not None and longer.n >= 2 and side(longer) != side(deciding):
        return (f"at {longer_scale} scale the same comparison is {side(longer)} ({longer.text()}), here "
                f"{side(deciding)}")
    if len(path) < 2 or deciding.interval is None:
        return ""
    rounds = sorted(path)
    first, end_round = tail_start(rounds), rounds[-1]
    start, end = path[first], path[end_round]
    span = f"{tail_words(rounds)} (round {first} to {end_round})"
    half = (deciding.interval[1] - deciding.interval[0]) / 2
    if start * end < 0 and abs(end - start) > deciding.delta:
        return f"the margin changed sign {span}: {signed(start)}, then {signed(end)}"
    if abs(end) < abs(start) and abs(end - start) > half:
        return (f"the margin moved {signed(end - start)} towards 0 {span}, more than its interval's half-width "
                f"{half:.2f}")
    return ""


def tail_start(rounds: list[int]) -> int:
    """The first evaluated round of the margin's tail: the last third of the rounds, or the evaluation before the
    last where that third holds only the last (``rounds`` sorted, at least two)."""
    tail = [r for r in rounds if r >= rounds[-1] * 2 / 3]
    return tail[0] if len(tail) >= 2 else rounds[-2]


def tail_words(rounds: list[int]) -> str:
    """How the tail ``tail_start`` picks is named."""
    return "over the last third of the rounds" if tail_start(rounds) >= rounds[-1] * 2 / 3 else \
        "between its last two evaluations"


def with_trajectory(v: Verdict, evidence: dict[str, Evidence], last: dict[str, int], labels: dict) -> Verdict:
    """``v`` with its deciding comparison's margin by round at every scale that has the comparison, and whether it
    still moves (``still_moving``: within the deciding scale, or against a longer budget's outcome)."""
    if v.deciding is None or v.deciding.decision.deciding is None:
        return v
    deciding = v.deciding.decision.deciding
    paths: dict[str, dict[int, float]] = {}
    longer, longer_scale = None, ""
    for scale in sorted(evidence, key=lambda s: RECORDED.index(s) if s in RECORDED else len(RECORDED)):
        same = next((c for c in v.claim.comparisons(evidence[scale], labels) if c.label == deciding.label), None)
        if same is None:
            continue
        path = trajectory(same, evidence[scale], last[scale])
        if path:
            paths[scale] = path
        shorter = scale in RECORDED and RECORDED.index(scale) >= RECORDED.index(v.deciding.scale)
        found = None if shorter or scale not in v.others else next(
            (c for c in v.others[scale].decision.compared if c.label == deciding.label), None)
        if found is not None and longer is None:   # the longest budget that has the comparison
            longer, longer_scale = found, scale
    moving = still_moving(paths.get(v.deciding.scale, {}), deciding, longer, longer_scale)
    cost = ""
    if v.deciding.scale != "paper" and len(paths) == 1 and paths.get(v.deciding.scale):
        same = next(c for c in v.claim.comparisons(evidence[v.deciding.scale], labels) if c.label == deciding.label)
        cost = longer_cost(same, evidence[v.deciding.scale], evidence.get(LONGER, {}))
    return dataclasses.replace(v, trajectory=paths, moving=moving, longer_cost=cost)


def longer_cost(c: Comparison, evidence: Evidence, longer: Evidence | None = None, factor: int = 3,
                seeds: int = DECIDING_SEEDS) -> str:
    """What recording a comparison's cells at ``factor`` times their rounds for ``seeds`` seeds would take (the cells
    ``longer`` has for every seed left out), from the training time of the records that decide it now (their own
    devices)."""
    every = {(r.table, r.cell) for r in (*c.plus, *c.minus)}
    cells = {(t, cell) for t, cell in every if len((longer or {}).get(t, {}).get(cell) or []) < seeds}
    hours = 0.0
    for table, cell in cells:
        times = [float(r.get("wall_time_s", 0.0)) for r in evidence.get(table, {}).get(cell) or []]
        if not times:
            return ""
        hours += factor * seeds * float(np.mean(times)) / 3600
    others = len(every) - len(cells)
    what = "" if not others else f" ({len(cells)} of its {len(every)} cells: the rest are recorded)"
    return (f"no longer budget yet{what}: {factor}x the rounds, {seeds} seeds, would take about {hours:.1f} h of "
            "training at the deciding runs' pace") if cells else ""


def counts(verdicts: Iterable[Verdict]) -> dict[str, int]:
    """The paper's claims (hypotheses of the book left out) by outcome."""
    from fedlib.claims.decide import OUTCOMES

    out = dict.fromkeys((*OUTCOMES, BUDGET, "not checked"), 0)
    for v in verdicts:
        if not v.claim.hypothesis:
            out[v.outcome] += 1
    return out


def paired(plus: list[dict], minus: list[dict], metric: Metric = "personal_local_acc",
           last: int = 1) -> dict[int, float]:
    """{seed: plus - minus} of two cells' records read with ``metric``, over the seeds both have (one comparison,
    outside any claim: the checks beside the verdicts)."""
    evidence: Evidence = {"": {"plus": plus, "minus": minus}}
    return differences(Comparison("", (Read("", "plus", metric, ""),), (Read("", "minus", metric, ""),)), evidence,
                       last)
