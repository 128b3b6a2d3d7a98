"""Time per round measured side by side, for a paper's efficiency claims.

A chapter that tests one names the runs to time (``timing_runs(device, executor)``: {method: Config}, the paper's
per-round workload). Every federation is built first in one process; each runs one untimed round; then
each repetition runs one more round of every method, in an order rotated by one per repetition (drift in the
machine's speed falls on every method alike), timing its training and aggregation and then its evaluation (where
methods such as FedBABU fine-tune). The seconds are written to ``results/timing/<chapter>.json`` with the
processor, the code version, the precision and the date; the book reads the file and never re-times.

    python -m fedlib timing fedgpa --repeats 5

The claims read the repetitions as paired observations in the paper-scale table ``TABLE`` (``evidence``: one
pseudo-record per repetition, its "seed" the repetition; ``Chapter.read`` adds it), through ``SECONDS`` or
``relative_to``."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from fedlib.studies.claims import Statistic

TABLE = "timing"   # the table the claims read: {method: one pseudo-record per repetition}, at paper scale


def _root() -> Path:
    from fedlib import results

    return results.RESULTS / "timing"   # beside the chapters' records (FEDLIB_RESULTS moves both)


def trainable_parameters(fed) -> int:
    """The numbers a client's optimizer trains in ``fed``'s model (frozen backbones, whose features are computed
    once, are not part of it)."""
    return sum(p.numel() for p in fed.trainer.model.parameters() if p.requires_grad)


def measure(configs: dict, repeats: int, progress: Callable[[str], None] = print) -> dict:
    """{method: {"train_s": [...], "evaluate_s": [...], "parameters": trainable numbers}} over ``repeats``
    repetitions (see the module's doc)."""
    from fedlib.experiment import build, validate

    methods = list(configs)
    feds = {}
    for m, cfg in configs.items():
        validate(cfg)
        feds[m] = build(cfg)
        feds[m].run_round(0)   # untimed: first-round allocations, kernels chosen, pools started
    out: dict[str, dict] = {m: {"train_s": [], "evaluate_s": [], "parameters": trainable_parameters(feds[m])}
                            for m in methods}
    for r in range(repeats):
        for m in methods[r % len(methods):] + methods[:r % len(methods)]:
            fed = feds[m]
            started = time.perf_counter()
            fed.run_round(r + 1)
            trained = time.perf_counter()
            fed.evaluate(r + 1)
            out[m]["train_s"].append(trained - started)
            out[m]["evaluate_s"].append(time.perf_counter() - trained)
        progress(f"repetition {r + 1}/{repeats}: " + ", ".join(
            f"{m} {out[m]['train_s'][-1] + out[m]['evaluate_s'][-1]:.1f} s" for m in methods))
    for fed in feds.values():
        fed.executor.close()
    return out


def record(chapter: str, configs: dict, repeats: int, root: Path | None = None,
           progress: Callable[[str], None] = print) -> dict:
    """Measure ``configs`` and write the chapter's timing record; returns it."""
    from fedlib.experiment import atomic_json
    from fedlib.experiment.records import code_version, device_description

    first = next(iter(configs.values()))
    started = time.time()
    seconds = measure(configs, repeats, progress)
    answer = {"chapter": chapter, "repeats": repeats, "seconds": seconds,
              "configs": {m: cfg.flat() for m, cfg in configs.items()},
              "device": device_description(first.device), "precision": first.precision,
              "executor": first.executor, "code_version": code_version(), "wall_s": round(time.time() - started, 1),
              "finished_at": datetime.now(UTC).isoformat(timespec="seconds")}
    atomic_json((root or _root()) / f"{chapter}.json", answer)
    return answer


def read(chapter: str, root: Path | None = None) -> dict | None:
    """The committed timing record of ``chapter`` (None where there is none); a damaged one is one ConfigError."""
    from fedlib.store import read_record

    def valid(answer: dict) -> bool:
        seconds = answer["seconds"]
        return isinstance(seconds, dict) and all(
            len(s["train_s"]) == len(s["evaluate_s"]) == answer["repeats"]
            and all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in s["train_s"] + s["evaluate_s"])
            for s in seconds.values())

    return read_record((root or _root()) / f"{chapter}.json", valid, "timing record", "a record of finite, "
                       f"non-negative seconds for every repetition: restore it (git checkout) or run `python -m fedlib "
                       f"timing {chapter}`")


def evidence(chapter: str, root: Path | None = None) -> dict:
    """{method: one pseudo-record per repetition} (its "seed" the repetition, its "seconds" the whole round:
    training, aggregation and evaluation), the cells of a chapter's timing table; {} where nothing is recorded."""
    answer = read(chapter, root)
    if answer is None:
        return {}
    return {m: [{"seed": r, "seconds": t + e, "parameters": s.get("parameters"), "history": []}
                for r, (t, e) in enumerate(zip(s["train_s"], s["evaluate_s"]))]
            for m, s in answer["seconds"].items()}


SECONDS = Statistic("seconds per round", lambda rec, peers: rec.get("seconds"), "seconds")


def relative_to(base: str, name: str, measured: str = "seconds") -> Statistic:
    """A round's time (``measured="parameters"``: its trained numbers) in % above ``base``'s in the same
    repetition; None where the timing record does not hold it."""
    def percent(rec: dict, peers) -> float | None:
        other = peers(TABLE, base)
        if other is None or not other.get(measured) or rec.get(measured) is None:
            return None
        return 100 * (rec[measured] / other[measured] - 1)

    return Statistic(name, percent, "%")


def rounds_above(base: str, methods, labels: dict, column: Statistic) -> tuple:
    """An efficiency claim's comparisons: each other method's round in % above ``base``'s (``column``, from
    ``relative_to(base, ...)``), one per method of the paper's table."""
    from fedlib.studies.claims import Comparison, Read

    return tuple(Comparison(f"{labels[m]}'s round above {labels[base]}'s, %", (Read(TABLE, m, column, labels[m]),))
                 for m in methods if m != base)


def summary(answer: dict) -> list[dict]:
    """One row per method: median and range of its round's seconds (training and evaluation apart and together)."""
    import numpy as np

    rows = []
    for m, s in answer["seconds"].items():
        whole = [t + e for t, e in zip(s["train_s"], s["evaluate_s"])]
        rows.append({"method": m, "median s / round": round(float(np.median(whole)), 2),
                     "range": f"{min(whole):.2f}-{max(whole):.2f}",
                     "training + aggregation (median)": round(float(np.median(s["train_s"])), 2),
                     "evaluation (median)": round(float(np.median(s["evaluate_s"])), 2),
                     **({"trained numbers": s["parameters"]} if "parameters" in s else {})})
    return rows


def provenance_text(answer: dict) -> str:
    return (f"measured {answer['finished_at'][:10]} on {answer['device']}, {answer['precision']}, executor "
            f"{answer['executor']}, {answer['code_version']}: {answer['repeats']} timed rounds of each method after an "
            f"untimed one, in an order rotated by one each repetition; {answer['wall_s']:.0f} s in all. The paper's "
            "times come from its own hardware: the claims compare the methods' rounds with each other, never with them")


def show(chapter: str, labels: dict, paper_seconds: dict) -> None:
    """The chapter's committed timing record as a table (median and range per method, the paper's time beside it)
    with its provenance; a line saying how to make it where there is none."""
    import pandas as pd
    from IPython.display import HTML, display

    answer = read(chapter)
    if answer is None:
        print(f"not timed yet: python -m fedlib timing {chapter}")
        return
    rows = [{**row, "method": labels.get(row["method"], row["method"]),
             "paper s / round": paper_seconds[row["method"]]}
            for row in summary(answer) if row["method"] in paper_seconds]
    display(pd.DataFrame(rows).set_index("method"))
    display(HTML(f"<p class='provenance'>{provenance_text(answer)}</p>"))
