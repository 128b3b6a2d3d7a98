"""The book's results overview: every claim of the five papers at the scale that decides it, computed from the
chapters' declarations (``CLAIMS``) and their committed records (it needs no chapter's notebook to have run), then
each chapter's headline table and this page's own smoke runs, read from the summaries the chapters leave when they
run (``common.save_summary``)."""
from __future__ import annotations

from fedlib.claims import BUDGET
from fedlib.claims.decide import OUTCOMES
from fedlib.studies.common import load_summaries
from fedlib.studies.registry import chapters
from fedlib.studies.verdicts import counted, verdict_rows


def titles() -> dict[str, str]:
    """chapter -> its title, every registered chapter in the book's order."""
    return {name: c.title for name, c in chapters().items()}


def summaries(scale: str) -> dict:
    return load_summaries(titles(), scale)


def recorded_verdicts() -> dict[str, list]:
    """chapter -> its claims' verdicts from the committed records (``Chapter.verdicts``): compute once per page and
    hand it to the tables below."""
    return {name: c.verdicts() for name, c in chapters().items()}


def claim_rows(found: dict | None = None) -> list[dict]:
    """One row per claim (hypotheses of the book included, marked), numbers as numbers (``verdicts.verdict_rows``)."""
    found = recorded_verdicts() if found is None else found
    names = titles()
    return [row for chapter, verdicts in found.items() for row in verdict_rows(names.get(chapter, chapter), verdicts)]


def interval_text(row: dict) -> str:
    """The deciding comparison's margin and interval, formatted for display."""
    from fedlib.claims.decide import signed

    if row["margin"] is None:
        return "-"
    unit = "" if row["unit"] == "points" else f" {row['unit']}"
    interval = row["interval"]
    return (f"{signed(row['margin'])}{unit}" + (f" [{signed(interval[0])}, {signed(interval[1])}]" if interval else ""))


def claims_table(found: dict | None = None):
    """The findings table: every claim of the papers, its outcome, the comparison that decides it with its interval,
    the deciding scale, seeds and looks; the book's own hypotheses after them."""
    import pandas as pd

    rows = sorted(claim_rows(found), key=lambda r: r["hypothesis"])
    return pd.DataFrame([{
        "chapter": r["chapter"], "claim": r["claim"] + (" (a hypothesis of this book)" if r["hypothesis"] else ""),
        "outcome": r["outcome"] + (" (scales disagree)" if r["disagree"] else ""),
        "still moving": "yes" if r["moving"] else "no",
        "deciding comparison": r["deciding comparison"] or "-", "margin [interval]": interval_text(r),
        "scale": r["scale"] or "-", "seeds": len(r["seeds"]), "looks": r["looks"] or "-"} for r in rows])


def outcome_counts(found: dict | None = None) -> dict[str, dict[str, int]]:
    """chapter -> the paper's claims by outcome (hypotheses of the book left out)."""
    out: dict[str, dict[str, int]] = {}
    for r in claim_rows(found):
        if not r["hypothesis"]:
            out.setdefault(r["chapter"], dict.fromkeys((*OUTCOMES, BUDGET, "not checked"), 0))[r["outcome"]] += 1
    return out


def counts_table(found: dict | None = None):
    """One row per chapter: its claims by outcome at the scale that decides each."""
    import pandas as pd

    return pd.DataFrame([{"chapter": chapter, **n, "claims": sum(n.values())}
                         for chapter, n in outcome_counts(found).items()])


def decided_sentence(found: dict | None = None) -> str:
    """The book's answer in one sentence: every chapter's claims at the scale that decides each."""
    per_chapter = outcome_counts(found)
    total = {o: sum(n[o] for n in per_chapter.values()) for o in (*OUTCOMES, BUDGET, "not checked")}
    claims = sum(total.values())
    if not claims:
        return "No claim has a verdict at reference or paper scale yet."
    decided = total["holds"] + total["does not hold"] + total["no material difference"]
    return (f"Over {counted(len(per_chapter), 'chapter')}, {decided} of {counted(claims, 'claim')} are decided at the "
            f"scale that decides each: " + ", ".join(f"{total[o]} {o}" for o in (*OUTCOMES, BUDGET, "not checked")
                                                     if total[o]) + ".")


def smoke_counts(summary: dict) -> dict[str, int]:
    """A page's own runs (one scale's summary) by outcome, the paper's claims only."""
    outcomes = [c["outcome"] for c in summary.get("claims", []) if not c.get("hypothesis")]
    return {o: outcomes.count(o) for o in (*OUTCOMES, "not checked")}


def chapters_table(found: dict, scale: str):
    """One row per chapter: its page's own runs at ``scale`` through the declarations (a smoke run), and the code
    that ran it."""
    import pandas as pd

    rows: list[dict] = []
    for chapter, title in titles().items():
        s = found.get(chapter)
        if s is None:
            rows.append({"chapter": title, **dict.fromkeys((*OUTCOMES, "not checked"), "-"),
                         "run": f"not run at scale {scale}"})
            continue
        rows.append({"chapter": title, **smoke_counts(s), "run": f"{s['code_version']}, {s['saved_at']}"})
    return pd.DataFrame(rows)


def smoke_claims_table(summary: dict):
    """A page's own runs claim by claim (the outcome on its smoke runs and the comparison behind it)."""
    import pandas as pd

    return pd.DataFrame([{"claim": c["claim"], "on this page's runs": c["outcome"], "detail": c["detail"]}
                         for c in summary.get("claims", [])])


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

    from fedlib.studies.report import from_json

    return pd.DataFrame([{k: from_json(v) for k, v in row.items()}
                         for row in summary.get("headline", {}).get("rows", [])])


def headline(chapter: str, summary: dict):
    """The headline table as the book shows it: split to fit, its provenance line underneath."""
    from fedlib.studies.common import ResultsTable

    part = summary.get("headline", {})
    keys = chapters()[chapter].declared.headline_keys   # leading label columns of its headline rows
    return ResultsTable(headline_table(summary), keys=keys, note=part.get("provenance", ""),
                        floors=part.get("floors"), classes=10)   # a summary without floors: every chapter has 10
