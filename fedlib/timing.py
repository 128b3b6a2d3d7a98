"""Time per round measured side by side, for a paper's efficiency claims.

A chapter that tests one names the runs to time (``timing_runs(device, executor)``: {method: Config}, the paper's
per-round workload). Every federation is built first in one process; each runs one untimed round; then
each repetition runs one more round of every method, in an order rotated by one per repetition (drift in the
machine's speed falls on every method alike), timing the server's part (broadcast and aggregation), the clients'
updates and then the evaluation (where methods such as FedBABU fine-tune). The seconds are written to
``results/timing/<chapter>.json`` with the processor, the code version, the precision and the date; the book reads
the file and never re-times.

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

from fedlib.claims import Statistic

TABLE = "timing"   # the table the claims read: {method: one pseudo-record per repetition}, at paper scale
PARTS = {"server_s": "server_seconds", "client_s": "client_seconds"}   # a round's parts: record key -> pseudo-record's


def _root() -> Path:
    from fedlib import results

    return results.RESULTS / "timing"   # beside the chapters' records (FEDLIB_RESULTS moves both)


def trainable_parameters(fed) -> int:
    """The numbers a client's optimizer trains in ``fed``'s model (frozen backbones, whose features are computed
    once, are not part of it)."""
    return sum(p.numel() for p in fed.trainer.model.parameters() if p.requires_grad)


def timed_round(fed, t: int) -> tuple[float, float]:
    """Round ``t`` of ``fed`` as ``Federation.run_round`` plays it, timed: (the server's seconds: broadcast and
    aggregation; the clients' seconds: their updates under the executor)."""
    started = time.perf_counter()
    tasks = fed.open_round(t)
    opened = time.perf_counter()
    results = fed.executor.run(fed.method, tasks)
    updated = time.perf_counter()
    fed.close_round(results)
    return (opened - started) + (time.perf_counter() - updated), updated - opened


def measure(configs: dict, repeats: int, progress: Callable[[str], None] = print) -> dict:
    """{method: {"train_s": [...], "server_s": [...], "client_s": [...], "evaluate_s": [...], "parameters":
    trainable numbers}} over ``repeats`` repetitions (see the module's doc); ``train_s`` is the server's and the
    clients' seconds together."""
    from fedlib.experiment import build, validate

    methods = list(configs)
    feds = {}
    for m, cfg in configs.items():
        validate(cfg)
        feds[m] = build(cfg)
        feds[m].run_round(0)   # untimed: first-round allocations, kernels chosen, pools started
    out: dict[str, dict] = {m: {"train_s": [], "server_s": [], "client_s": [], "evaluate_s": [],
                                "parameters": trainable_parameters(feds[m])} for m in methods}
    for r in range(repeats):
        for m in methods[r % len(methods):] + methods[:r % len(methods)]:
            fed = feds[m]
            server_s, client_s = timed_round(fed, r + 1)
            trained = time.perf_counter()
            fed.evaluate(r + 1)
            out[m]["evaluate_s"].append(time.perf_counter() - trained)
            for key, value in (("train_s", server_s + client_s), ("server_s", server_s), ("client_s", client_s)):
                out[m][key].append(value)
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

    def valid(answer: dict) -> bool:   # the server's and the clients' parts apart: records made since they were
        seconds = answer["seconds"]
        return isinstance(seconds, dict) and all(
            all(len(part) == answer["repeats"] and all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                                                       for v in part)
                for part in (s["train_s"], s["evaluate_s"], *(s[k] for k in PARTS if k in s)))
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
    return {m: [{"seed": r, "seconds": t + e, "evaluate_seconds": e, "parameters": s.get("parameters"),
                 **{PARTS[k]: s[k][r] for k in PARTS if k in s}, "history": []}
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


def part_above(base: str, part: str, name: str) -> Statistic:
    """One part of a round (``part``: "server_seconds", "client_seconds", "evaluate_seconds") minus the same part of
    ``base``'s round in the same repetition, in % of ``base``'s whole round; None where the record lacks the part."""
    def percent(rec: dict, peers) -> float | None:
        other = peers(TABLE, base)
        if other is None or not other.get("seconds") or rec.get(part) is None or other.get(part) is None:
            return None
        return 100 * (rec[part] - other[part]) / other["seconds"]

    return Statistic(name, percent, "%")


def rounds_above(base: str, methods, labels: dict, column: Statistic) -> tuple:
    """An efficiency claim's comparisons: each other method's round in % above ``base``'s (``column``, from
    ``relative_to(base, ...)``), one per method of the paper's table."""
    from fedlib.claims import Comparison, Read

    return tuple(Comparison(f"{labels[m]}'s round above {labels[base]}'s, %", (Read(TABLE, m, column, labels[m]),))
                 for m in methods if m != base)


def summary(answer: dict) -> list[dict]:
    """One row per method: median and range of its round's seconds, and the median of each part (the server's and
    the clients' apart where the record holds them, else together as training + aggregation; evaluation)."""
    import numpy as np

    def median(values) -> float:
        return round(float(np.median(values)), 3)   # a server part takes milliseconds

    rows = []
    for m, s in answer["seconds"].items():
        whole = [t + e for t, e in zip(s["train_s"], s["evaluate_s"])]
        parts = ({"server (median)": median(s["server_s"]), "clients (median)": median(s["client_s"])}
                 if all(k in s for k in PARTS) else {"training + aggregation (median)": median(s["train_s"])})
        rows.append({"method": m, "median s / round": median(whole), "range": f"{min(whole):.2f}-{max(whole):.2f}",
                     **parts, "evaluation (median)": median(s["evaluate_s"]),
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
