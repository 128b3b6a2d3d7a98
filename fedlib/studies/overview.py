"""The book's results overview: every chapter's headline table (ours beside the paper) and its claims'
verdicts, read from the summaries the chapters leave when they run (``common.save_summary``)."""
from __future__ import annotations

from fedlib.studies.common import load_summaries
from fedlib.studies.registry import chapters
from fedlib.studies.verdicts import Claim, best_evidence, counted, scope_text


def titles() -> dict[str, str]:
    """chapter -> its title, every registered chapter in the book's order."""
    return {name: c.title for name, c in chapters().items()}


def summaries(scale: str) -> dict:
    return load_summaries(titles(), scale)


def claims_of(summary: dict) -> list[Claim]:
    return [Claim(**c) for c in summary.get("claims", [])]


def verdict_counts(summary: dict) -> dict:
    """The chapter's claims by outcome under the verdict rule (one scale: a summary is one scale's)."""
    outcomes = [c.verdict.outcome for c in claims_of(summary) if not c.hypothesis]   # the paper's claims only
    return {"hold": outcomes.count("holds"), "do not hold": outcomes.count("does not hold"),
            "inconclusive": outcomes.count("inconclusive"), "not checked": outcomes.count("not checked")}


def chapters_table(found: dict, scale: str):
    """One row per chapter: how many of its claims hold at this scale, and the code that ran it."""
    import pandas as pd

    rows = []
    for chapter, title in titles().items():
        s = found.get(chapter)
        if s is None:
            rows.append({"chapter": title, "claims that hold": "-", "do not hold": "-", "inconclusive": "-",
                         "not checked": "-", "run": f"not run at scale {scale}"})
            continue
        n = verdict_counts(s)
        rows.append({"chapter": title, "claims that hold": n["hold"], "do not hold": n["do not hold"],
                     "inconclusive": n["inconclusive"], "not checked": n["not checked"],
                     "run": f"{s['code_version']}, {s['saved_at']}"})
    return pd.DataFrame(rows)


def best_evidence_outcomes(found: dict | None = None) -> dict[str, list[tuple[str, str]]]:
    """chapter -> (deciding scale, outcome) of each of its paper's claims at the scale ``verdicts.best_evidence``
    picks among the recorded scales' summaries (``found``: {scale: {chapter: summary}}; default: the saved ones);
    chapters with no recorded verdict are left out."""
    from fedlib.experiment import RECORDED_SCALES

    found = found if found is not None else {s: summaries(s) for s in RECORDED_SCALES}
    out = {}
    for chapter in titles():
        by_scale = {s: claims_of(found[s][chapter]) for s in RECORDED_SCALES
                    if chapter in found.get(s, {}) and found[s][chapter].get("claims")}
        decided = [(scale, c.verdict.outcome) for scale, c, _ in best_evidence(by_scale) if not c.hypothesis]
        if decided:   # a chapter with hypotheses of the book alone has no claim of a paper to count
            out[chapter] = decided
    return out


def outcome_words(decided: list[tuple[str, str]]) -> str:
    """'2 hold, 3 do not hold, 4 inconclusive (reference scale 8, paper scale 1)'."""
    outcomes = [o for _, o in decided]
    scales = {s: sum(1 for s_, _ in decided if s_ == s) for s in dict.fromkeys(s for s, _ in decided)}
    return (f"{outcomes.count('holds')} hold, {outcomes.count('does not hold')} do not hold, "
            f"{outcomes.count('inconclusive')} inconclusive"
            + (f", {outcomes.count('not checked')} not checked" if outcomes.count("not checked") else "")
            + " (" + ", ".join(f"{s} scale {n}" for s, n in scales.items()) + ")")


def decided_sentence(found: dict | None = None) -> str:
    """The book's answer in one sentence: every chapter's claims at the scale that decides each."""
    outcomes = best_evidence_outcomes(found)
    decided = [d for ds in outcomes.values() for d in ds]
    if not decided:
        return "No claim has a verdict at reference or paper scale yet."
    n = sum(1 for _, o in decided if o in ("holds", "does not hold"))
    return (f"Each claim at the scale that decides it (its chapter's verdict box), over "
            f"{counted(len(outcomes), 'chapter')}: {n} of {len(decided)} claims decided; {outcome_words(decided)}.")


def recorded_claims_table():
    """One row per chapter: its claims by outcome at the scale that decides each (its verdict box's best evidence)
    and at each recorded scale (reference, paper), from the summaries its notebook leaves after reading the
    committed records; "-" where no setting of that scale is complete."""
    import pandas as pd

    from fedlib.experiment import RECORDED_SCALES

    found = {s: summaries(s) for s in RECORDED_SCALES}
    best = best_evidence_outcomes(found)
    rows = []
    for chapter, title in titles().items():
        row = {"chapter": title, "best evidence": outcome_words(best[chapter]) if chapter in best else "-"}
        for s in RECORDED_SCALES:
            summary = found[s].get(chapter)
            if summary is None or not summary.get("claims"):
                row[f"{s} scale"] = "-"
                continue
            n = verdict_counts(summary)
            row[f"{s} scale"] = (f"{n['hold']} hold, {n['do not hold']} do not hold, {n['inconclusive']} "
                                 f"inconclusive" + (f", {n['not checked']} not checked" if n["not checked"] else "")
                                 + f" ({summary.get('scale_note', '')})")
        rows.append(row)
    return pd.DataFrame(rows)


def status_table():
    """One row per chapter: reference- and paper-scale coverage from the committed records (whatever scale this
    page shows)."""
    import pandas as pd

    from fedlib.experiment import RECORDED_SCALES
    from fedlib.studies.report import coverage_text

    return pd.DataFrame([{"chapter": c.title, **{f"{s} scale (committed records)": coverage_text(c.coverage(s))
                                                 for s in RECORDED_SCALES}} for c in chapters().values()])


def headline_table(summary: dict):
    import pandas as pd

    return pd.DataFrame(summary.get("headline", {}).get("rows", []))


def headline(chapter: str, summary: dict):
    """The headline table as the book shows it: split to fit, its provenance line underneath."""
    from fedlib.studies.common import ResultsTable

    part = summary.get("headline", {})
    keys = getattr(chapters()[chapter].study, "HEADLINE_KEYS", 1)   # leading label columns of its headline rows
    return ResultsTable(headline_table(summary), keys=keys, note=part.get("provenance", ""),
                        floors=part.get("floors"), classes=10)   # a summary without floors: every chapter has 10


def claims_table(summary: dict):
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "claim": c.claim,
                "paper": c.paper,
                "ours": c.ours + "".join(f" ({t})" for t in (c.note, scope_text(c)) if t),
                "verdict": c.verdict.text() if c.margins is not None or c.holds is None else
                f"inconclusive (point verdict on the means: {'holds' if c.holds else 'does not hold'}; "
                "no per-seed margin)",
            }
            for c in claims_of(summary)
        ]
    )
