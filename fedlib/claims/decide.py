"""The one decision procedure: paired differences per seed -> one-sided Student-t bounds -> a claim's outcome.

The rule (the book's introduction states it in words):

- An elementary comparison is one cell and one rival, paired by seed (the same partition, initial weights and
  mini-batch streams): its differences per seed, their mean, and one-sided Student-t bounds at level ``alpha``.
- Each comparison carries the test its part of the claim needs: ``greater`` (the difference is above 0),
  ``noninferior`` (above -delta: "without costing accuracy", "near the best") or ``equivalent`` (inside +-delta:
  "about the same").
- A claim of kind ``all`` (best in every cell, beats every rival, every module adds) **holds** iff every
  comparison passes its test at level ``alpha`` (an intersection-union test: no correction is needed) and **does
  not hold** iff at least one fails significantly after Holm's correction over the claim's comparisons.
- A claim of kind ``most`` (k of n) holds iff at least k comparisons pass after Holm's correction, and does not
  hold iff so many fail significantly (Holm) that k can no longer pass.
- A claim of kind ``best`` (the best of one group beats the best of another) holds iff some member of the first
  group passes against every member of the second at ``alpha`` / its group's size, and does not hold iff some member
  of the second group beats every member of the first at ``alpha`` / the second group's size.
- **No material difference**: a ``greater`` comparison whose difference lies within +-delta (two one-sided tests,
  Holm-corrected) rules the claimed advantage out as material, though it is not negative.
- A claim of kind ``deterministic`` (arithmetic of parameter counts) has no spread: it holds iff every difference
  is above 0, and gets no interval.
- **Looks**: a table whose seeds grew after its verdict was seen is decided at ``alpha`` / looks.

Under the null (every true difference 0) the chance of a false "holds" and of a false "does not hold" is each at most
``alpha`` for every kind (``tests/test_decide.py`` simulates it)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ALPHA = 0.05   # one-sided level of each bound (a "lower 95% bound"); split over looks
OUTCOMES = ("holds", "does not hold", "no material difference", "inconclusive")
KINDS = ("all", "most", "best", "deterministic")
TESTS = ("greater", "noninferior", "equivalent")


def holm(p_values, alpha: float) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected at family-wise level ``alpha`` (p-values in any order)."""
    p = np.asarray(list(p_values), dtype=float)
    rejected = [False] * len(p)
    for rank, i in enumerate(np.argsort(p, kind="stable")):
        if not p[i] < alpha / (len(p) - rank):
            break
        rejected[i] = True
    return rejected


@dataclass(frozen=True)
class Compared:
    """One elementary comparison: its differences per seed (in the metric's units) and what they show at ``alpha``
    (one-sided, per direction)."""
    label: str
    seeds: tuple[int, ...]
    diffs: tuple[float, ...]
    alpha: float = ALPHA
    delta: float = 0.0
    test: str = "greater"
    plus: str = ""      # the group member on each side (kind "best" groups by them)
    minus: str = ""

    n: int = field(init=False)
    mean: float = field(init=False)
    spread: float = field(init=False)   # standard error of the mean (0: deterministic; nan below two seeds)

    def __post_init__(self):
        n = len(self.diffs)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "mean", float(np.mean(self.diffs)) if n else float("nan"))
        object.__setattr__(self, "spread", float(np.std(self.diffs, ddof=1) / np.sqrt(n)) if n >= 2 else float("nan"))

    @property
    def deterministic(self) -> bool:
        """Two seeds or more with the same difference (arithmetic, not training: no spread, no interval)."""
        return self.n >= 2 and float(np.ptp(self.diffs)) <= 1e-12 * max(1.0, abs(self.mean))

    def bound(self, side: str, alpha: float | None = None) -> float | None:
        """The one-sided (1 - alpha) ``lower`` or ``upper`` bound of the mean difference; None below two seeds."""
        from scipy.special import stdtrit

        if self.deterministic:
            return self.mean
        if self.n < 2:
            return None
        half = float(stdtrit(self.n - 1, 1 - (self.alpha if alpha is None else alpha))) * self.spread
        return self.mean - half if side == "lower" else self.mean + half

    @property
    def interval(self) -> tuple[float, float] | None:
        lo, hi = self.bound("lower"), self.bound("upper")
        return None if lo is None or hi is None else (lo, hi)

    def _tail(self, threshold: float, above: bool) -> float:
        """One-sided p-value of "the mean difference is on the other side of ``threshold``" (small: evidence that it
        is above ``threshold``, or below it where ``above`` is False)."""
        from scipy.special import stdtr  # Student's t distribution function (scipy.stats.t.cdf, as a ufunc)

        if self.deterministic:
            return 0.0 if (self.mean > threshold if above else self.mean < threshold) else 1.0
        if self.n < 2:
            return 1.0
        z = (self.mean - threshold) / self.spread
        return float(stdtr(self.n - 1, -z if above else z))

    def p_above(self, threshold: float) -> float:
        """p-value of "the mean difference is at most ``threshold``" (small: evidence it is above)."""
        return self._tail(threshold, above=True)

    def p_below(self, threshold: float) -> float:
        """p-value of "the mean difference is at least ``threshold``" (small: evidence it is below)."""
        return self._tail(threshold, above=False)

    @property
    def p_support(self) -> float:
        """Evidence for this comparison's part of the claim."""
        if self.test == "greater":
            return self.p_above(0.0)
        if self.test == "noninferior":
            return self.p_above(-self.delta)
        return max(self.p_above(-self.delta), self.p_below(self.delta))   # equivalent: two one-sided tests

    @property
    def p_against(self) -> float:
        """Evidence that this comparison's part of the claim fails."""
        if self.test == "greater":
            return self.p_below(0.0)
        if self.test == "noninferior":
            return self.p_below(-self.delta)
        return min(1.0, 2 * min(self.p_above(self.delta), self.p_below(-self.delta)))   # outside +-delta

    @property
    def p_negligible(self) -> float:
        """Evidence that a ``greater`` comparison's difference lies inside +-delta (1 where it does not apply)."""
        if self.test != "greater" or self.delta <= 0:
            return 1.0
        return max(self.p_above(-self.delta), self.p_below(self.delta))

    def text(self, unit: str = "") -> str:
        """"label: +0.54 [+0.09, +1.00]" (the interval between the one-sided bounds), at n seeds."""
        mean = signed(self.mean) + (f" {unit}" if unit else "")
        if self.deterministic:
            return f"{self.label}: {mean} (deterministic)"
        if self.interval is None:
            return f"{self.label}: {mean} at {self.n} seed{'s' * (self.n != 1)}, no interval"
        lo, hi = self.interval
        return f"{self.label}: {mean} [{signed(lo)}, {signed(hi)}] at {self.n} seeds"


@dataclass(frozen=True)
class SpreadCompared(Compared):
    """A comparison of spreads over seeds, paired by seed: log2(sd' / sd), the standard deviation of ``others`` (the
    second side) over that of ``values`` (the first) on a log scale, symmetric about 0 (+1: the first side's spread is
    half the second's; "greater": the first side varies less). Bounds and p-values come from the Pitman-Morgan test
    (Pitman 1939, Morgan 1939): for paired x, y
    the ratio sd(x) / sd(y) equals rho exactly when x + rho y and x - rho y are uncorrelated, so the correlation of
    the two, as a Student t with n - 2 degrees of freedom, tests any ratio; the bounds invert it. It needs three
    paired seeds. ``diffs`` holds x - y (what the tables show beside it)."""
    values: tuple[float, ...] = ()
    others: tuple[float, ...] = ()

    def __post_init__(self):
        super().__post_init__()
        x, y = np.asarray(self.values, float), np.asarray(self.others, float)
        sd_x = float(np.std(x, ddof=1)) if len(x) >= 2 else float("nan")
        sd_y = float(np.std(y, ddof=1)) if len(y) >= 2 else float("nan")
        object.__setattr__(self, "mean", float(np.log2(sd_y / sd_x)) if sd_x > 0 and sd_y > 0 else float("nan"))

    @property
    def deterministic(self) -> bool:
        return False

    def _ratio_t(self, ratio: float) -> float:
        """The Pitman-Morgan t of "sd(x) / sd(y) = ratio" (negative: the ratio lies below)."""
        x, y = np.asarray(self.values, float), np.asarray(self.others, float)
        u, v = x + ratio * y, x - ratio * y
        if np.std(u) == 0 or np.std(v) == 0:
            return 0.0
        r = float(np.clip(np.corrcoef(u, v)[0, 1], -1 + 1e-12, 1 - 1e-12))
        return r * np.sqrt((self.n - 2) / (1 - r * r))

    def _tail(self, threshold: float, above: bool) -> float:
        from scipy.special import stdtr

        if self.n < 3 or not np.isfinite(self.mean):
            return 1.0
        t = self._ratio_t(2.0 ** -threshold)   # the effect is above threshold iff sd / sd' is below 2^-threshold
        return float(stdtr(self.n - 2, t if above else -t))

    def bound(self, side: str, alpha: float | None = None) -> float | None:
        """The one-sided (1 - alpha) bound of the effect: the threshold at which the one-sided test's p-value is
        alpha (found by bisection, where the p-value is monotone in the threshold)."""
        if self.n < 3 or not np.isfinite(self.mean):
            return None
        level = self.alpha if alpha is None else alpha
        above = side == "lower"
        lo, hi = -40.0, 40.0
        for _ in range(100):
            mid = (lo + hi) / 2
            # lower bound: p (above) grows with the threshold; upper bound: p (below) falls as it grows
            if (self._tail(mid, above) > level) == above:
                hi = mid
            else:
                lo = mid
        return (lo + hi) / 2


def signed(x: float) -> str:
    """A number with its sign: two decimals, or two significant digits where two decimals would read 0.00 for a
    value that is not 0 (a difference in weights rather than points: +0.00064 is not +0.00)."""
    return f"{x:+.2f}" if x == 0 or abs(x) >= 0.005 else f"{x:+.2g}"


@dataclass(frozen=True)
class Decision:
    """A claim's outcome from its comparisons: the outcome, the comparison that decides it (the one that fails
    significantly, else the weakest), the counts, and the level used."""
    outcome: str
    kind: str
    compared: tuple[Compared, ...]
    deciding: Compared | None
    alpha: float
    looks: int = 1
    positive: int = 0       # comparisons that pass (Holm-corrected for "most"; at alpha for "all")
    negative: int = 0       # comparisons that fail significantly (Holm)
    negligible: int = 0     # comparisons inside +-delta (Holm)
    required: int = 0       # comparisons that must pass ("most")
    missing: tuple[str, ...] = field(default=())   # comparisons declared but without a paired seed

    @property
    def below_delta(self) -> bool:
        """A "holds" whose deciding comparison's upper bound is below delta: real, but smaller than the smallest
        effect of interest."""
        d = self.deciding
        return (self.outcome == "holds" and self.kind == "all" and d is not None and d.test == "greater" and d.delta > 0
                and (d.bound("upper") or 0.0) < d.delta)


def decide(compared, kind: str = "all", looks: int = 1, required: int | None = None,
           missing=(), alpha: float = ALPHA) -> Decision:
    """The outcome of a claim of ``kind`` from its elementary comparisons (``Compared`` made at ``alpha`` / ``looks``;
    ``missing``: the labels of declared comparisons without data, which keep a claim from holding)."""
    compared = tuple(compared)
    missing = tuple(missing)
    level = alpha / looks
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {', '.join(KINDS)}")
    if not compared:
        return Decision("inconclusive", kind, (), None, level, looks, missing=missing)
    m = len(compared) + len(missing)
    if kind == "deterministic":
        failed = [c for c in compared if not all(d > 0 for d in c.diffs)]
        outcome = "does not hold" if failed else ("holds" if not missing else "inconclusive")
        return Decision(outcome, kind, compared, failed[0] if failed else min(compared, key=lambda c: c.mean),
                        level, looks, len(compared) - len(failed), len(failed), 0, m, missing)
    against = holm([c.p_against for c in compared], level)
    negligible = holm([c.p_negligible for c in compared], level)
    if kind == "best":
        return _best(compared, level, looks, missing)
    if kind == "most":
        need = required if required is not None else m // 2 + 1
        support = holm([c.p_support for c in compared], level)
        pos, neg, neg_or_small = sum(support), sum(against), sum(a or s for a, s in zip(against, negligible))
        outcome = ("holds" if pos >= need else "does not hold" if m - neg < need
                   else "no material difference" if m - neg_or_small < need else "inconclusive")
    else:
        need = m
        pos, neg = sum(c.p_support < level for c in compared), sum(against)
        outcome = ("holds" if pos == m else "does not hold" if neg
                   else "no material difference" if any(negligible) else "inconclusive")
    if neg and outcome == "does not hold":
        deciding = min((c for c, a in zip(compared, against) if a), key=lambda c: c.p_against)
    elif outcome == "no material difference":
        deciding = min((c for c, s in zip(compared, negligible) if s), key=lambda c: c.p_negligible)
    elif kind == "most":   # the comparison whose passing decides the count: the need-th strongest
        ranked = sorted(compared, key=lambda c: (c.p_support, -c.mean))
        deciding = ranked[min(need, len(ranked)) - 1]
    else:
        deciding = max(compared, key=lambda c: (c.p_support, -c.mean))
    return Decision(outcome, kind, compared, deciding, level, looks, pos, neg, sum(negligible), need, missing)


def _best(compared: tuple[Compared, ...], level: float, looks: int, missing: tuple[str, ...]) -> Decision:
    """Kind "best": the best of the plus group beats the best of the minus group (Bonferroni over the group member
    that would do it: a member of the plus group against every minus member at level / |plus group|; a member of
    the minus group beating every plus member at level / |minus group|)."""
    plus = list(dict.fromkeys(c.plus for c in compared))
    minus = list(dict.fromkeys(c.minus for c in compared))
    wins = {a: [c for c in compared if c.plus == a] for a in plus}
    losses = {b: [c for c in compared if c.minus == b] for b in minus}
    winner = next((a for a, cs in wins.items() if all(c.p_support < level / len(plus) for c in cs)), None)
    beaten_by = next((b for b, cs in losses.items() if all(c.p_against < level / len(minus) for c in cs)), None)
    if winner is not None and not missing:
        outcome, deciding = "holds", max(wins[winner], key=lambda c: c.p_support)
    elif beaten_by is not None:
        outcome, deciding = "does not hold", max(losses[beaten_by], key=lambda c: c.p_against)
    else:
        outcome = "inconclusive"
        # the plus member closest to winning, and its weakest comparison
        closest = min(wins, key=lambda a: max(c.p_support for c in wins[a]))
        deciding = max(wins[closest], key=lambda c: c.p_support)
    return Decision(outcome, "best", compared, deciding, level, looks,
                    sum(c.p_support < level / len(plus) for c in compared),
                    sum(c.p_against < level / len(minus) for c in compared), 0, 1, missing)


def effect_position(effect: float | None, deciding: Compared | None) -> str:
    """Where the paper's reported ``effect`` falls against the deciding comparison's interval: "inside", "above
    (ruled out)", "below (ruled out)", or "" where either is missing."""
    if effect is None or deciding is None or deciding.interval is None:
        return ""
    lo, hi = deciding.interval
    if effect > hi:
        return "above the interval: ruled out here (the difference here is smaller)"
    if effect < lo:
        return "below the interval: ruled out here (the difference here is larger)"
    return "inside the interval"
