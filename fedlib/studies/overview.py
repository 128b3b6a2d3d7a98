"""The book's results overview: every chapter's headline table (ours beside the paper) and its claims'
verdicts, read from the summaries the chapters leave when they run (``common.save_summary``)."""
from __future__ import annotations

from fedlib.studies.common import load_summaries

CHAPTERS = {"fedgpa": "FedGPA", "fedpcl": "FedPCL", "fedprp": "FedPRP", "fedmate": "FedMate", "pfedcspc": "pFedCSPC"}
HEADLINE_KEYS = {"fedgpa": 3, "fedpcl": 2}   # leading label columns of each chapter's headline rows
VERDICT = {True: "holds here", False: "does not hold here", None: "not checked"}


def summaries(scale: str) -> dict:
    return load_summaries(CHAPTERS, scale)


def verdict_counts(summary: dict) -> dict:
    claims = summary.get("claims", [])
    return {"hold": sum(c["holds"] is True for c in claims), "do not hold": sum(c["holds"] is False for c in claims),
            "not checked": sum(c["holds"] is None for c in claims)}


def chapters_table(found: dict, scale: str):
    """One row per chapter: how many of its claims hold at this scale, and the code that ran it."""
    import pandas as pd

    rows = []
    for chapter, title in CHAPTERS.items():
        s = found.get(chapter)
        if s is None:
            rows.append({"chapter": title, "claims that hold": "-", "do not hold": "-", "not checked": "-",
                         "run": f"not run at scale {scale}"})
            continue
        n = verdict_counts(s)
        rows.append({"chapter": title, "claims that hold": n["hold"], "do not hold": n["do not hold"],
                     "not checked": n["not checked"], "run": f"{s['code_version']}, {s['saved_at']}"})
    return pd.DataFrame(rows)


def headline_table(summary: dict):
    import pandas as pd

    return pd.DataFrame(summary.get("headline", {}).get("rows", []))


def headline(chapter: str, summary: dict):
    """The headline table as the book shows it: split to fit, its provenance line underneath."""
    from fedlib.studies.common import ResultsTable

    part = summary.get("headline", {})
    return ResultsTable(headline_table(summary), keys=HEADLINE_KEYS.get(chapter, 1), note=part.get("provenance", ""))


def claims_table(summary: dict):
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "claim": c["claim"],
                "paper": c["paper"],
                "ours": c["ours"] + (f" ({c['note']})" if c["note"] else ""),
                "verdict": VERDICT[c["holds"]],
            }
            for c in summary.get("claims", [])
        ]
    )
