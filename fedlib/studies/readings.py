"""A baseline beside itself as its authors' code runs it (``fedlib.methods.fedpac.CODE_READINGS``): each reading's
records against the baseline's own, and the chapter's method's margin over each, paired by seed. FedGPA's and
FedMate's chapters both check FedPAC so; the hypotheses that decide it are their claims, this is the table beside."""
from __future__ import annotations

from fedlib.claims import paired, side
from fedlib.claims.decide import Compared, signed
from fedlib.studies.report import Margin, fmt, mean_std


def _compared(diffs: dict[int, float]) -> Compared:
    return Compared("", tuple(diffs), tuple(diffs.values()))


def _interval(c: Compared) -> Margin | str:
    return Margin(c.mean, c.interval, c.n) if c.n else "-"


def reading_rows(readings: dict[tuple[str, str], list[dict]], baseline: dict[str, list[dict]],
                 method: dict[str, list[dict]], metric: str, names: tuple[str, str, str, str]
                 ) -> tuple[list[dict], list[dict], str]:
    """``readings``: {(reading, cell): records}; ``baseline`` and ``method``: {cell: records} of the baseline as the
    library runs it and of the chapter's method; ``names``: (the cell's column, the baseline's label, its label as
    the library runs it, the method's label). Returns (one row per recorded reading and cell: its accuracy, its
    difference from the baseline and the method's margin over it, mean [one-sided 95% bounds]; their records; a
    sentence on the readings that move the baseline and where the method's margin changes side)."""
    column, label, own, ahead = names
    rows, moved, turned = [], [], []
    for (name, cell), records in readings.items():
        if not records:
            continue
        shift = _compared(paired(records, baseline[cell], metric))
        margin, base = _compared(paired(method[cell], records, metric)), _compared(paired(method[cell],
                                                                                            baseline[cell], metric))
        rows.append({"reading": name, column: cell, label: fmt(mean_std(records, metric)),
                     f"− {own}": _interval(shift), f"{ahead} − it": _interval(margin)})
        if side(shift) != "not separated":
            moved.append(f"{name} ({signed(shift.mean)} at {column} = {cell})")
        if side(margin) != side(base):
            turned.append(f"{name} at {column} = {cell} ({signed(base.mean)} -> {signed(margin.mean)}: "
                          f"{side(margin)})")
    sentence = ("" if not rows else
                f"Readings that move {label} (its paired interval clear of 0, each comparison alone, uncorrected): "
                f"{'; '.join(moved) or 'none'}. {ahead}'s margin over {label} changes side with: "
                f"{'; '.join(turned) or 'none'}.")
    return rows, [r for records in readings.values() for r in records], sentence
