"""The verdict rule, written once: claims as per-seed margins, their 95% interval, the verdict boxes."""
from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from fedlib.experiment import summarize_runs

# ---------------------------------------------------------------------- verdicts with uncertainty
# The rule, written once (the book's introduction states it too): a claim is turned into a margin, a number
# that is positive when the claim holds (e.g. "A beats B in every cell": min over cells of A - B, in points).
# Methods compared on the same seed share its partitions, so the margin is computed per seed from that seed's
# runs (paired). With n >= 2 seeds the verdict reads the 95% t-interval of the mean margin over seeds: above 0
# "holds", below 0 "does not hold", containing 0 "inconclusive"; one seed gives no interval: "inconclusive".
OUTCOMES = ("holds", "does not hold", "inconclusive")
CONFIDENCE = 0.95


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun in its number: "1 claim", "2 claims", "1 hypothesis"."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def listed(items) -> str:
    """Items in a sentence: "A", "A and B", "A, B and C"."""
    items = list(items)
    return " and ".join(filter(None, (", ".join(items[:-1]), items[-1] if items else "")))


DECIDING_SEEDS = 3   # the seeds a recorded table first decides on (the reference scale's; t(2) gives the interval)


def second_look(seeds: list[int], tables: str) -> str:
    """What a verdict's provenance adds when ``tables``' ``seeds`` include any past the first ``DECIDING_SEEDS``
    (0, 1, 2): seeds added after the first verdicts came out inconclusive make a second look at the data, which a 95%
    interval does not account for ("" at the first look)."""
    added = sorted(s for s in seeds if s >= DECIDING_SEEDS)
    if not added:
        return ""
    which = f"seeds {listed(map(str, added))} were" if len(added) > 1 else f"seed {added[0]} was"
    return (f"; {which} added to {tables} after the verdicts of the first "
            f"{DECIDING_SEEDS} seeds came out inconclusive: a second look at the data, so the 95% intervals are a "
            "little optimistic")


def seeds_read(tables: dict[str, list[int]]) -> str:
    """The seeds a verdict's tables were read at, for its provenance: ``tables`` {title: seeds}, the headline table
    first. "seeds S" for the headline's seeds, then "; {titles} seeds S'" for each other set of seeds; each set
    with the tables read at it is followed by its ``second_look`` (tables at the same seeds share one clause)."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for title, seeds in tables.items():
        groups.setdefault(tuple(sorted(int(s) for s in seeds)), []).append(title)
    return "".join(("" if i == 0 else f"; {listed(titles)} ") + f"seeds {list(seeds)}"
                   + second_look(list(seeds), listed(titles)) for i, (seeds, titles) in enumerate(groups.items()))


@dataclass(frozen=True)
class Verdict:
    outcome: str                        # one of OUTCOMES, or "not checked"
    n: int = 0                          # seeds the margin was computed on
    mean: float | None = None           # mean margin over seeds (points)
    interval: tuple[float, float] | None = None   # 95% t-interval of the mean margin (n >= 2)

    def text(self) -> str:
        if self.outcome == "not checked":
            return "not checked"
        if self.mean is None:
            return f"{self.outcome} (no per-seed margin)"
        if self.interval is None:
            seeds = f"{self.n} seed{'s' if self.n != 1 else ''}"
            return f"{self.outcome} at {seeds} (margin {signed(self.mean)}, no interval)"
        lo, hi = self.interval
        return f"{self.outcome} at {self.n} seeds (margin {signed(self.mean)}, 95% CI [{signed(lo)}, {signed(hi)}])"


def signed(x: float) -> str:
    """A margin with its sign: two decimals, or two significant digits where two decimals would read 0.00 for a
    value that is not 0 (a margin in weights rather than points: +0.00064 is not +0.00)."""
    return f"{x:+.2f}" if x == 0 or abs(x) >= 0.005 else f"{x:+.2g}"


def verdict_of(margins) -> Verdict:
    """The rule above applied to per-seed margins ({seed: margin} or a list); None or empty: not checked."""
    from scipy import stats

    values = [float(v) for v in (margins.values() if isinstance(margins, dict) else margins or [])
              if v is not None and np.isfinite(v)]
    if not values:
        return Verdict("not checked")
    n, mean = len(values), float(np.mean(values))
    if n == 1:
        return Verdict("inconclusive", 1, mean)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * np.std(values, ddof=1) / np.sqrt(n))
    lo, hi = mean - half, mean + half
    outcome = "holds" if lo > 0 else "does not hold" if hi < 0 else "inconclusive"
    return Verdict(outcome, n, mean, (lo, hi))


class PerSeed:
    """Paired margins: ``PerSeed(runs, metric)(margin)`` evaluates ``margin(acc)`` on each seed that every cell
    of ``runs`` ({cell: records over seeds}) has, with ``acc`` = {cell: 100 x that seed's last value of
    ``metric``}; returns {seed: margin}. ``metric`` may be a {cell: metric} dict (tables whose rows read
    different metrics)."""

    def __init__(self, runs: dict, metric: str | dict = "personal_local_acc", last: int = 1):
        self.by_seed: dict[int, dict] = {}
        cells = {k: {int(r["seed"]): r for r in records} for k, records in runs.items() if records}
        common = set.intersection(*(set(v) for v in cells.values())) if cells else set()
        metric_of = metric if isinstance(metric, dict) else dict.fromkeys(cells, metric)
        for seed in sorted(common):
            self.by_seed[seed] = {k: 100 * summarize_runs([v[seed]], metrics=(metric_of[k],),
                                                          last=last)[metric_of[k]][0] for k, v in cells.items()}

    @property
    def seeds(self) -> list[int]:
        return list(self.by_seed)

    def __call__(self, margin) -> dict[int, float]:
        return {seed: float(margin(acc)) for seed, acc in self.by_seed.items()}

    def means(self) -> dict:
        """{cell: mean over the paired seeds of its value (%)}: what a claim's verdict on the means reads."""
        return {k: float(np.mean([acc[k] for acc in self.by_seed.values()])) for k in next(iter(self.by_seed.values()),
                                                                                                {})}

    def claim(self, claim: str, paper: str, margin, ours, note: str = "", hypothesis: bool = False) -> Claim:
        """The claim whose margin function is ``margin`` ({cell: value (%)} -> points, > 0 where it holds), written
        once: its per-seed margins and its point verdict on the means both come from it. ``ours``: the text of our
        numbers, or a function of the means that writes it."""
        means = self.means()
        return Claim(claim, paper, ours(means) if callable(ours) else ours,
                     bool(margin(means) > 0) if means else None, note, self(margin), hypothesis)


@dataclass
class Claim:
    claim: str                     # what the paper says, in a sentence
    paper: str                     # the paper's evidence (table/figure, numbers)
    ours: str                      # our numbers (means over seeds)
    holds: bool | None             # the point verdict on the means; None: cannot be checked here
    note: str = ""
    margins: dict | None = None    # {seed: margin in points}, positive where the claim holds on that seed
    hypothesis: bool = False       # the book's own hypothesis (e.g. about a protocol), not a claim of the paper:
                                   # shown and tested like a claim, never counted among the paper's claims
    partial: str = ""              # the part of the claim's grid the margins cover, where not all of it (e.g.
                                   # "Setting 1 of Settings 1-3"): a partial check never outranks a whole one

    @property
    def verdict(self) -> Verdict:
        """The rule on the per-seed margins; a claim without them has a point verdict only (no interval)."""
        if self.margins is not None:
            return verdict_of(self.margins)
        if self.holds is None:
            return Verdict("not checked")
        return Verdict("inconclusive", 0)


def verdict_counts(verdicts) -> dict[str, int]:
    """How many claims hold, do not hold, are inconclusive, were not checked."""
    out = {o: 0 for o in (*OUTCOMES, "not checked")}
    for v in verdicts:
        out[v.outcome] += 1
    return out


def _claim_cell(c: Claim) -> str:
    tag = "<br><em>(a hypothesis of this book, not a claim of the paper: not counted)</em>" if c.hypothesis else ""
    return html.escape(c.claim) + tag


def _ours_cell(c: Claim) -> str:
    return html.escape(c.ours) + "".join(f"<br><em>{html.escape(t)}</em>" for t in (c.note, scope_text(c)) if t)


def scope_text(c: Claim) -> str:
    """What part of the claim's grid a partial check covers ('' for a whole check)."""
    return f"checked on {c.partial} only" if c.partial else ""


def verdict_html(claims: list[Claim], scale_note: str) -> str:
    """The verdict box closing a chapter: each claim with the numbers and its verdict under the rule
    (per-seed margins, 95% interval over seeds)."""
    css = {"holds": "yes", "does not hold": "no", "inconclusive": "na", "not checked": "na"}
    rows = []
    for c in claims:
        v = c.verdict
        detail = v.text() if c.margins is not None or v.outcome == "not checked" else \
            f"point verdict on the means: {'holds' if c.holds else 'does not hold'} (no per-seed margin)"
        rows.append(
            f"<tr><td>{_claim_cell(c)}</td><td>{html.escape(c.paper)}</td><td>{_ours_cell(c)}</td>"
            f"<td class='verdict-{css[v.outcome]}'>{html.escape(v.outcome)}<br><small>{html.escape(detail)}</small>"
            f"</td></tr>")
    papers = [c for c in claims if not c.hypothesis]
    n = verdict_counts(c.verdict for c in papers)
    counts = ", ".join(f"{k} {n[k]}" for k in (*OUTCOMES, "not checked") if n[k])
    n_hyp = len(claims) - len(papers)
    extra = f"; {counted(n_hyp, 'hypothesis', 'hypotheses')} of this book beside them" if n_hyp else ""
    return (f"<div class='verdict'><p><strong>Verdict per claim</strong> ({html.escape(scale_note)}): {counts} "
            f"(of the paper's {counted(len(papers), 'claim')}{extra}; rule: 95% t-interval of the per-seed margin, "
            f"paired by seed, see the introduction).</p><table><thead><tr><th>claim</th><th>paper</th><th>ours</th>"
            f"<th>verdict</th></tr>"
            f"</thead><tbody>{''.join(rows)}</tbody></table></div>")


RECORDED = ("paper", "reference")   # the scales that test a paper's claim (committed records)


def best_evidence(by_scale: dict[str, list[Claim]]) -> list[tuple[str, Claim, dict[str, Claim]]]:
    """Per claim (matched by its text), the scale that decides it: the highest recorded scale (paper, then
    reference) whose verdict has an interval (two seeds or more: a one-seed verdict is inconclusive whatever its
    margin, so one paper-scale seed does not outrank three reference-scale seeds) and that checked the whole claim
    (a check of part of its grid, ``Claim.partial``, decides only where no recorded scale checked all of it), else
    the highest scale where the claim was checked (book last); returns (that scale, its claim, {other scale:
    claim})."""
    from fedlib.experiment import SCALES

    order = [s for s in reversed(SCALES) if by_scale.get(s)]
    texts: list[str] = []
    for s in order:
        texts += [c.claim for c in by_scale[s] if c.claim not in texts]
    out = []
    for text in texts:
        found = {s: c for s in order for c in by_scale[s] if c.claim == text}
        checked = [s for s in found if found[s].verdict.outcome != "not checked"]
        with_interval = [s for s in checked if s in RECORDED and found[s].verdict.interval is not None]
        whole = [s for s in with_interval if not found[s].partial]
        best = (whole or with_interval or checked or list(found))[0]
        out.append((best, found[best], {s: c for s, c in found.items() if s != best}))
    return out


def best_evidence_html(by_scale: dict[str, list[Claim]], notes: dict[str, str]) -> str:
    """The verdict box closing a chapter, best evidence first: each claim's verdict at the scale ``best_evidence``
    picks for it, with its margin, interval and seeds, and the other scales' verdicts beside it. ``notes``: what
    each scale is (rounds, seeds, which records), or why a scale decides nothing yet."""
    css = {"holds": "yes", "does not hold": "no", "inconclusive": "na", "not checked": "na"}
    rows, decided_at = [], []
    hypotheses = 0
    for scale, c, others in best_evidence(by_scale):
        v = c.verdict
        if c.hypothesis:
            hypotheses += 1
        else:
            decided_at.append((scale, v.outcome))
        detail = v.text() if c.margins is not None or v.outcome == "not checked" else \
            f"point verdict on the means: {'holds' if c.holds else 'does not hold'} (no per-seed margin)"
        opposite = [s for s, o in others.items() if s in RECORDED and o.verdict.interval is not None
                    and {o.verdict.outcome, v.outcome} == {"holds", "does not hold"}]
        if opposite:   # a partial check at a higher scale, or a lower scale, decides the other way
            detail += f"; the {' and '.join(opposite)} scale decides the opposite: the scales disagree"
        beside = "<br>".join(f"{html.escape(s)}{f' ({html.escape(scope_text(o))})' if o.partial else ''}: "
                             f"{html.escape(o.verdict.text())}" for s, o in others.items()) or "-"
        rows.append(
            f"<tr><td>{_claim_cell(c)}</td><td>{html.escape(c.paper)}</td><td>{_ours_cell(c)}</td>"
            f"<td class='verdict-{css[v.outcome]}'>{html.escape(v.outcome)} <small>({html.escape(scale)} scale)</small>"
            f"<br><small>{html.escape(detail)}</small></td><td><small>{beside}</small></td></tr>")
    counts = "; ".join(
        f"{s} scale: " + ", ".join(f"{o} {n}" for o in (*OUTCOMES, "not checked")
                                   if (n := sum(1 for s_, o_ in decided_at if s_ == s and o_ == o)))
        for s in dict.fromkeys(s for s, _ in decided_at))
    scales = "".join(f"<li><strong>{html.escape(s)}</strong>: {html.escape(n)}</li>" for s, n in notes.items())
    extra = f", and {counted(hypotheses, 'hypothesis', 'hypotheses')} of this book" if hypotheses else ""
    decided = f"decided at {html.escape(counts)}" if counts else "none to decide"
    return (f"<div class='verdict'><p><strong>Verdict per claim, best evidence first</strong> "
            f"({counted(len(decided_at), 'claim')} of the paper{extra}; {decided}). Rule: 95% t-interval of the "
            f"per-seed margin, paired by seed (see the introduction); only reference and paper scale test a claim of "
            f"the paper.</p><ul>{scales}</ul>"
            f"<table><thead><tr><th>claim</th><th>paper</th><th>ours (deciding scale)</th><th>verdict</th>"
            f"<th>other scales</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>")
