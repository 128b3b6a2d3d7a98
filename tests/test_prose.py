"""Prose that could drift from the code. The chapters state no book-scale budget of their own: a sentence about
book scale that names a number of images, rounds, epochs, runs, seeds, clients or seconds drifts when the code's
budget changes (pFedCSPC's prose said 500 images per class while its set-up trained 300); the set-up and every
table print them instead. The Flower page's lists of the methods SecAgg+ serves are the code's."""
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUDGET = re.compile(r"\b\d[\d,.]*\s*(?:training images|images per class|rounds?\b|local epochs|epochs|runs\b|seeds\b"
                    r"|clients\b|s\b|min\b)")
ABOUT_BOOK_SCALE = re.compile(r"book`? scale|`book`")


def budget_sentences(markdown: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.;:])\s", markdown) if ABOUT_BOOK_SCALE.search(s) and BUDGET.search(s)]


def test_the_check_finds_a_stated_budget():
    assert budget_sentences("Intro. At `book` scale each class keeps 500 training images (a smoke run).")
    assert budget_sentences("At book scale each further seed is 60 runs of about 8.5 s.")
    assert not budget_sentences("At `book` scale the set-up prints the budget; the paper trains 100 rounds.")


@pytest.mark.parametrize("notebook", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_no_chapter_states_a_book_scale_budget_in_prose(notebook):
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    found = [s for c in cells if c["cell_type"] == "markdown" for s in budget_sentences("".join(c["source"]))]
    assert not found, f"{notebook}: prose states a book-scale budget the code may change: {found}"


def test_the_flower_page_lists_the_methods_secagg_serves_as_the_code_decides():
    from fedlib.methods import METHODS

    page = (ROOT / "book" / "flower.md").read_text()
    listed = {kind: re.findall(r"`(\w+)`", re.search(rf"^- \*\*{kind}\*\* \(\d+\): (.*)$", page, re.M).group(1))
              for kind in ("served", "refused")}
    assert listed["served"] == sorted(n for n, cls in METHODS.items() if cls.sums_uploads())
    assert listed["refused"] == sorted(n for n, cls in METHODS.items() if not cls.sums_uploads())
