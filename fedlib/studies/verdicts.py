"""How verdicts are shown: the verdict box closing a chapter, the smoke-run box, one line per verdict, and the
single paired margin the convergence and precision checks read. The rule itself is ``decide``; the claims and how
they are read are ``claims``."""
from __future__ import annotations

import html
from dataclasses import dataclass

import numpy as np

from fedlib.claims import BUDGET, Assessment, Verdict, counts, tail_words
from fedlib.claims.decide import OUTCOMES, Compared, SpreadCompared, effect_position, signed


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` and the noun in its number: "1 claim", "2 claims", "1 hypothesis"."""
    return f"{n} {one if n == 1 else (many or one + 's')}"


def listed(items) -> str:
    """Items in a sentence: "A", "A and B", "A, B and C"."""
    items = list(items)
    return " and ".join(filter(None, (", ".join(items[:-1]), items[-1] if items else "")))


def seeds_words(seeds) -> str:
    """"seeds 0-4", "seeds 0, 2 and 3", "seed 1"."""
    seeds = sorted(seeds)
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return f"seeds {listed(map(str, seeds))}"


# ---------------------------------------------------------------------- one paired margin (convergence, precision)
CONFIDENCE = 0.95   # a single margin's two-sided interval (the convergence and precision checks)


@dataclass(frozen=True)
class Margin:
    """A single paired margin over seeds with its two-sided 95% t-interval (one-sided 97.5% bounds): "ahead",
    "behind" or "not separated" in the checks that read it; ``outcome`` in the words of a claim."""
    outcome: str                        # holds / does not hold / inconclusive / not checked
    n: int = 0
    mean: float | None = None
    interval: tuple[float, float] | None = None

    def text(self) -> str:
        if self.outcome == "not checked":
            return "not checked"
        seeds = f"{self.n} seed{'s' if self.n != 1 else ''}"
        if self.interval is None:
            return f"{self.outcome} at {seeds} (margin {signed(self.mean or 0.0)}, no interval)"
        lo, hi = self.interval
        return f"{self.outcome} at {seeds} (margin {signed(self.mean or 0.0)}, 95% CI [{signed(lo)}, {signed(hi)}])"


def verdict_of(margins) -> Margin:
    """One paired margin ({seed: margin} or a list) through the decision procedure's comparison at a two-sided 95%
    level: above 0 "holds", below "does not hold", else "inconclusive"; None or empty: "not checked"."""
    values = [float(v) for v in (margins.values() if isinstance(margins, dict) else margins or [])
              if v is not None and np.isfinite(v)]
    if not values:
        return Margin("not checked")
    c = Compared("", tuple(range(len(values))), tuple(values), alpha=(1 - CONFIDENCE) / 2)
    if c.n == 1:
        return Margin("inconclusive", 1, c.mean)
    lo, hi = c.bound("lower"), c.bound("upper")
    assert lo is not None and hi is not None
    return Margin("holds" if lo > 0 else "does not hold" if hi < 0 else "inconclusive", c.n, c.mean, (lo, hi))


# ---------------------------------------------------------------------- a verdict in words
def level_words(a: Assessment) -> str:
    """The level its bounds were read at, with the looks."""
    confidence = f"{100 * (1 - a.decision.alpha):g}%"
    if a.looks > 1:
        extra = sorted(set(a.seeds) - set(a.claim.seeds))
        return (f"{a.looks} looks ({seeds_words(extra)} added after the verdict at {seeds_words(a.claim.seeds)} was "
                f"seen): one-sided {confidence} bounds")
    return f"one look: one-sided {confidence} bounds"


def deciding_text(a: Assessment) -> str:
    """The comparison that decides the outcome, with its interval, and the counts behind it."""
    d = a.decision
    if not d.compared:
        return "no comparison has a paired seed yet"
    unit = "" if a.claim.unit == "points" else a.claim.unit
    head = d.deciding.text(unit) if d.deciding is not None else ""
    role = {"does not hold": "fails", "no material difference": "inside ±delta"}.get(
        d.outcome, f"the {d.required}th strongest" if d.kind == "most" else "weakest")
    n = len(d.compared) + len(d.missing)
    if d.kind == "most":
        tally = (f"{d.positive} of {n} comparisons pass after Holm's correction, {d.negative} fail; {d.required} "
                 "must pass")
    elif d.kind == "best":
        tally = f"{n} comparisons between the two groups (Bonferroni over the member that would decide)"
    elif d.kind == "deterministic":
        tally = f"{d.positive} of {n} above 0 (deterministic: no interval)"
    else:
        tally = f"{d.positive} of {n} comparisons pass, {d.negative} fail after Holm's correction"
    missing = f"; {counted(len(d.missing), 'comparison')} without the paired seeds it needs" if d.missing else ""
    return f"{role}: {head}; {tally}{missing}"


def key_lines(a: Assessment) -> list[str]:
    """What a verdict shows at once: its deciding comparison with its interval, and where the paper's effect falls."""
    c = a.claim
    d = a.decision
    lines = [deciding_text(a)]
    if d.below_delta:
        lines.append("holds, but by less than delta: the upper bound is below it")
    where = effect_position(c.paper_effect, d.deciding) if d.kind != "most" else ""   # "most": a count, not one effect
    if where:
        unit = "" if c.unit == "points" else f" {c.unit}"
        lines.append(f"the paper's effect {signed(c.paper_effect or 0.0)}{unit}: {where}")
    return lines


def detail_lines(a: Assessment) -> list[str]:
    """The rest a verdict rests on, a line each: delta and its reason, the scale, seeds and looks."""
    c = a.claim
    unit = "" if c.unit == "points" else f" {c.unit}"
    return [f"delta {c.delta:g}{unit}: {c.delta_reason}",
            f"{a.scale} scale, {seeds_words(a.seeds) if a.seeds else 'no seeds'}; {level_words(a)}"
            + ("" if a.complete else "; not every comparison has three paired seeds: a partial check")]


def path_text(path: dict[int, float], points: int = 8) -> str:
    """A margin by round in a line: at most ``points`` rounds, evenly spaced, the first and the last included."""
    rounds = sorted(path)
    if len(rounds) > points:
        rounds = [rounds[round(i * (len(rounds) - 1) / (points - 1))] for i in range(points)]
    return ", ".join(f"{r}: {signed(path[r])}" for r in rounds)


def budget_lines(v: Verdict) -> list[str]:
    """The deciding comparison's margin by round at each scale that has it."""
    return [f"margin by round, {scale} scale: {path_text(path)}" for scale, path in v.trajectory.items()]


def moving_lines(v: Verdict) -> list[str]:
    """Whether the deciding margin still moves (shown at once: it changes the outcome), and what a longer budget of
    its comparison would cost where none is recorded."""
    return moving_line(v) + ([v.longer_cost] if v.longer_cost else [])


def moving_line(v: Verdict) -> list[str]:
    if v.moving:
        return [f"still moving: {v.moving}; counted as {BUDGET}"]
    if v.deciding is not None and len(v.trajectory.get(v.deciding.scale, {})) >= 2:
        return [f"margin settled {tail_words(sorted(v.trajectory[v.deciding.scale]))}"]
    if v.trajectory:
        return ["too few evaluations to tell whether the margin still moves"]
    deciding = v.deciding.decision.deciding if v.deciding else None
    if isinstance(deciding, SpreadCompared):
        return ["no margin by round (a spread over seeds, read at the end of training)"]
    return ["no margin by round (not read off training)"]


def short_text(a: Assessment) -> str:
    """One line: "does not hold at reference scale (FedGPA − FedAvg, Setting 3, s = 80: -0.41 [-0.95, +0.12])"."""
    d = a.decision
    if not d.compared:
        return "not checked"
    head = d.deciding.text("" if a.claim.unit == "points" else a.claim.unit) if d.deciding else ""
    return f"{a.outcome} at {a.scale} scale ({head})"


# ---------------------------------------------------------------------- the boxes
CSS = {"holds": "yes", "does not hold": "no", "no material difference": "na", "inconclusive": "na", BUDGET: "na",
       "not checked": "na"}


def badge(outcome: str) -> str:
    return f"<span class='badge verdict-{CSS[outcome]}'>{html.escape(outcome)}</span>"


def claim_cell(a_claim) -> str:
    tag = ("<br><em>(a hypothesis of this book, not a claim of the paper: not counted)</em>" if a_claim.hypothesis
           else "")
    reading = f"<br><small>read as: {html.escape(a_claim.reading)}</small>" if a_claim.reading else ""
    return (f"<strong>{html.escape(a_claim.summary)}</strong>{tag}<br><small>“{html.escape(a_claim.words)}” "
            f"({html.escape(a_claim.source)})</small>{reading}")


def paper_cell(a_claim) -> str:
    unit = "" if a_claim.unit == "points" else f" {a_claim.unit}"
    effect = (f"<br><small>reported effect {signed(a_claim.paper_effect)}{unit}</small>"
              if a_claim.paper_effect is not None else "")
    return html.escape(a_claim.paper) + effect


def lines_html(lines: list[str]) -> str:
    return "<br>".join(f"<small>{html.escape(line)}</small>" for line in lines)


def box_html(verdicts: list[Verdict], notes: dict[str, str]) -> str:
    """The verdict box closing a chapter: each claim at the scale that decides it (the longest recorded budget
    whose comparisons are complete), its deciding comparison, delta, where the paper's effect falls, the looks, and
    the other scales beside it. ``notes``: what each recorded scale is."""
    rows = []
    for v in verdicts:
        if v.deciding is None:
            verdict_cell, beside = f"{badge('not checked')}<br><small>no recorded scale has its runs yet</small>", "-"
            for name, a in v.beside.items():
                verdict_cell += f"<br><small><em>{html.escape(name)}</em>: {html.escape(short_text(a))}</small>"
        else:
            raw = f" <small>(the deciding scale says {html.escape(v.decided_outcome)})</small>" \
                if v.outcome != v.decided_outcome else ""
            verdict_cell = (f"{badge(v.outcome)}{raw} <small>({html.escape(v.deciding.scale)} scale)</small><br>"
                            + lines_html(key_lines(v.deciding) + moving_lines(v))
                            + f"<details class='claim-detail'><summary><small>delta, seeds, looks, margin by round"
                              f"</small></summary>{lines_html(detail_lines(v.deciding) + budget_lines(v))}</details>")
            for name, a in v.beside.items():
                verdict_cell += f"<br><small><em>{html.escape(name)}</em>: {html.escape(short_text(a))}</small>"
            if v.disagree:
                verdict_cell += (f"<br><strong>scales disagree</strong>: the {listed(v.disagree)} scale decides the "
                                 "opposite; the longer budget's outcome counts")
            beside = "<br>".join(f"<small>{html.escape(s)}: {html.escape(short_text(a))}"
                                 f"{'' if a.complete else ' (partial)'}</small>" for s, a in v.others.items()) or "-"
        rows.append(f"<tr id='claim-{html.escape(v.claim.id)}'><td>{claim_cell(v.claim)}</td>"
                    f"<td>{paper_cell(v.claim)}</td><td>{verdict_cell}</td><td>{beside}</td></tr>")
    n = counts(verdicts)
    tally = ", ".join(f"{k} {n[k]}" for k in (*OUTCOMES, BUDGET, "not checked") if n[k]) or "none"
    hypotheses = sum(v.claim.hypothesis for v in verdicts)
    extra = f"; {counted(hypotheses, 'hypothesis', 'hypotheses')} of this book beside them" if hypotheses else ""
    scales = "".join(f"<li><strong>{html.escape(s)}</strong>: {html.escape(t)}</li>" for s, t in notes.items())
    return (f"<div class='verdict'><p><strong>Verdict per claim</strong> "
            f"({counted(len(verdicts) - hypotheses, 'claim')} of the paper{extra}: {tally}). Each claim is decided "
            f"at the longest recorded budget whose comparisons all have three paired seeds, by the procedure of the "
            f"introduction (paired by seed; every comparison must pass for an 'all' claim, Holm's correction for a "
            f"failure). A decided outcome whose deciding margin still moves with the rounds counts as '{BUDGET}'.</p>"
            f"<ul>{scales}</ul><table><thead><tr><th>claim</th><th>paper</th><th>verdict</th>"
            f"<th>other scales</th></tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def findings_html(verdicts: list[Verdict]) -> str:
    """What the chapter found, for the top of its page: each claim's outcome with its deciding comparison and budget,
    linked to its row of the verdict box; the counts first."""
    n = counts(verdicts)
    tally = ", ".join(f"{k} {n[k]}" for k in (*OUTCOMES, BUDGET, "not checked") if n[k]) or "none yet"
    items = []
    for v in verdicts:
        d = v.deciding.decision.deciding if v.deciding is not None else None
        where = (f" <small>({html.escape(d.label)}: {html.escape(signed(d.mean))}, {html.escape(v.deciding.scale)} "
                 f"scale)</small>" if d is not None and v.deciding is not None else "")
        tag = " <small><em>(a hypothesis of this book)</em></small>" if v.claim.hypothesis else ""
        items.append(f"<li>{badge(v.outcome)} <a href='#claim-{html.escape(v.claim.id)}'>"
                     f"{html.escape(v.claim.summary)}</a>{tag}{where}</li>")
    return (f"<p><strong>What this chapter finds</strong> from the committed records ({tally}; each claim at the "
            f"longest budget that decides it, the verdict box at the end gives the evidence):</p><ul>{''.join(items)}"
            "</ul>")


def assessments_html(assessments: list[Assessment], caption: str, collapsed: bool = False) -> str:
    """Claims assessed on one set of runs (a check beside the verdicts, or a page's own smoke runs): each outcome
    and the comparison behind it."""
    rows = "".join(f"<tr><td>{html.escape(a.claim.summary)}</td><td>{badge(a.outcome)}<br>"
                   f"{lines_html([deciding_text(a)])}</td></tr>" for a in assessments)
    table = (f"<table><thead><tr><th>claim</th><th>on these runs</th></tr></thead><tbody>{rows}</tbody></table>")
    if collapsed:
        return f"<details class='smoke'><summary>{html.escape(caption)}</summary>{table}</details>"
    return f"<div class='verdict'><p>{html.escape(caption)}</p>{table}</div>"


def smoke_html(assessments: list[Assessment], note: str) -> str:
    """This page's own runs through the same declarations: a smoke run that shows the code trains; it tests no
    claim and is never counted."""
    return assessments_html(assessments, f"This page's own runs ({note}): a smoke run, not a test of any claim",
                            collapsed=True)


def verdict_rows(chapter_title: str, verdicts: list[Verdict]) -> list[dict]:
    """One row per claim for the Results overview (numbers stay numbers; the interval is a pair)."""
    out = []
    for v in verdicts:
        a = v.deciding
        d = a.decision.deciding if a is not None else None
        out.append({"chapter": chapter_title, "id": v.claim.id, "claim": v.claim.summary,
                    "hypothesis": v.claim.hypothesis, "outcome": v.outcome,
                    "deciding comparison": d.label if d is not None else "",
                    "margin": d.mean if d is not None else None,
                    "interval": d.interval if d is not None and not d.deterministic else None,
                    "scale": a.scale if a is not None else "", "seeds": list(a.seeds) if a is not None else [],
                    "looks": a.looks if a is not None else 0, "delta": v.claim.delta, "unit": v.claim.unit,
                    "disagree": v.disagree, "moving": v.moving})
    return out
