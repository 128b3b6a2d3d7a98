"""Committed result records: ``results/<chapter>/<config key>.json``.

Paper-scale runs take hours (a GPU is advised); their records are committed so that the default book
build shows them without recomputing. A record is small: the config, its key, seed, code version,
device, executor, wall time and the per-round metrics (no checkpoints; the aggregation weights of
the first and last logged rounds only). ``python -m fedlib book --config paper`` (``make reproduce``)
recomputes them and writes the same files.

A record is *stale* when today's code does not produce its key from its config (a method's version
or the config's fields changed since it was made): the book flags it instead of showing it as
current. ``replay`` re-runs a record's first rounds to check that today's code reproduces it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from fedlib.experiment import Config, build, device_description, make_config
from fedlib.store import env_folder

RESULTS = env_folder("FEDLIB_RESULTS", Path(__file__).resolve().parents[1] / "results")
KEEP = (
    "config",
    "key",
    "scale",
    "seed",
    "code_version",
    "device",
    "precision",
    "executor",
    "runs_batched",
    "wall_time_s",
    "finished_at",
    "resumed",
    "train_counts",
    "final_confusions",
)


def slim(record: dict) -> dict:
    """The committed part of a result record."""
    out = {k: record[k] for k in KEEP if k in record}
    logged = [row for row in record["history"] if "weights" in row]
    out["history"] = [{k: v for k, v in row.items() if k != "weights"} for row in record["history"]]
    if logged:
        out["weights"] = {"first": {"round": logged[0]["round"], **logged[0]["weights"]},
                          "last": {"round": logged[-1]["round"], **logged[-1]["weights"]}}
    out["final"] = out["history"][-1]
    return out


def path_of(chapter: str, key: str, root: Path = RESULTS) -> Path:
    """``<root>/<chapter>/<key>.json``; a chapter or key that would leave the root (a separator, "..") is refused."""
    from fedlib.errors import check

    for name, value in (("chapter", chapter), ("key", key)):
        check(isinstance(value, str) and value not in ("", ".", "..") and "/" not in value and "\\" not in value,
              f"result record {name}", value, "a plain name: a record stays inside its results folder")
    return Path(root) / chapter / f"{key}.json"


def folders(root: Path = RESULTS) -> list[str]:
    """The chapters' folders under ``root`` (none where it does not exist)."""
    return sorted(d.name for d in Path(root).iterdir() if d.is_dir()) if Path(root).is_dir() else []


def committed_in(key: str, root: Path = RESULTS, among: list[str] | None = None) -> str | None:
    """The chapter whose folder holds the committed record ``key`` (keys are unique over chapters), or None;
    ``among``: the folders to look in (default: every folder of ``root``; a caller with many keys lists them once)."""
    return next((name for name in (folders(root) if among is None else among) if path_of(name, key, root).exists()),
                None)


def write(record: dict, chapter: str, root: Path = RESULTS) -> Path:
    from fedlib.errors import StorageFailed
    from fedlib.store import atomic_text

    path = path_of(chapter, record["key"], root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_text(path, json.dumps(slim(record), sort_keys=True, separators=(",", ":")) + "\n")
    except OSError as exc:
        raise StorageFailed(f"result record {path} could not be written ({exc.strerror or exc}); the run's record "
                            "stays in the cache: run `records` again to write it without training") from None
    return path


def write_diverged(cfg, message: str, chapter: str, scale: str, root: Path = RESULTS) -> Path:
    """Record that ``cfg`` diverged (its loss became nan): ``results/<chapter>/diverged/<key>.json`` with the config
    and the message, no metrics. A diverged run is deterministic, so the records command does not train it again
    (a code change that alters it changes its key); a tuning grid reads it as a rate that scores nothing."""
    from fedlib.experiment.records import code_version
    from fedlib.store import atomic_json

    path = root / chapter / "diverged" / f"{cfg.key()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_json(path, {"key": cfg.key(), "config": cfg.flat(), "seed": cfg.seed, "scale": scale, "diverged": message,
                       "code_version": code_version()})
    return path


def diverged_keys(chapter: str, root: Path = RESULTS) -> set[str]:
    """The keys of the runs of ``chapter`` recorded as diverged (``write_diverged``)."""
    return {p.stem for p in (root / chapter / "diverged").glob("*.json")}


@dataclass
class Stored:
    record: dict
    path: Path
    stale: bool            # today's code gives this config another key
    reason: str = ""


def current_key(config: dict) -> tuple[str | None, str]:
    """(key today's code gives the stored config, why none) - None when the config no longer loads."""
    from fedlib.errors import ConfigError
    from fedlib.experiment import FIELDS

    unknown = sorted(set(config) - FIELDS)
    if unknown:
        return None, f"config fields changed (today's Config has no {', '.join(unknown)})"
    try:
        return make_config(**config).key(), ""
    except TypeError as exc:
        return None, f"config fields changed ({exc})"
    except ConfigError as exc:
        return None, str(exc)


MAX_RECORD_BYTES = 20_000_000   # a committed record is tens of kB (no checkpoints; first and last weights only)


def read(path: Path) -> tuple[dict | None, str]:
    """(the record at ``path``, "") or (None, why it cannot be read): truncated JSON, not a record, wrong types."""
    from fedlib.experiment.records import record_problem

    if path.is_symlink() or not path.is_file():   # a folder, FIFO, device or link: never opened
        return None, "not a regular file (a folder, a pipe, a device or a link)"
    try:
        size = path.stat().st_size
        if size > MAX_RECORD_BYTES:
            return None, f"{size:,} bytes, more than a record's {MAX_RECORD_BYTES:,}"
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return None, f"unreadable ({type(exc).__name__}: {str(exc)[:120]})"
    problem = record_problem(record)
    return (None, problem) if problem else (record, "")


# damaged committed records seen by ``load`` in this process: {path: why}, each named once on stderr
DAMAGED: dict[Path, str] = {}
NEWER: set[Path] = set()   # records with config fields this fedlib does not know, each named once


def load(chapter: str, root: Path = RESULTS) -> list[Stored]:
    """The chapter's committed records. A damaged file is named on stderr, left out (its cell counts as
    missing) and kept as it is: ``records`` rewrites it, the book never trains in its place."""
    import sys

    out = []
    for path in sorted((Path(root) / chapter).glob("*.json")):
        record, problem = read(path)
        if record is not None and record["key"] != path.stem:   # served under another config's name
            problem = f"its key {record['key']!r} is not its file name"
            record = None
        if record is None:
            if path not in DAMAGED:
                print(f"fedlib: result record {path} is damaged: {problem}; left out (counted as missing)",
                      file=sys.stderr)
            DAMAGED[path] = problem
            continue
        key, why = current_key(record["config"])
        stale = key != record["key"]
        if key is None and "today's Config has no" in why and path not in NEWER:   # written by a newer fedlib
            print(f"fedlib: result record {path} was made by a newer fedlib ({why}); shown as stale and never "
                  "rewritten (today's runs have other keys): update fedlib to read it", file=sys.stderr)
            NEWER.add(path)
        out.append(Stored(record, path, stale, why or ("the method or config changed since this record was made"
                                                     if stale else "")))
    return out


def lookup(chapter: str, configs: list[Config], root: Path = RESULTS) -> list[Stored | None]:
    """The stored record of each config: the current one (by key), else a stale one with the same
    config apart from code versions, else None."""
    stored = load(chapter, root)
    by_key = {s.record["key"]: s for s in stored if not s.stale}
    by_config = {json.dumps(s.record["config"], sort_keys=True, default=str): s for s in stored if s.stale}
    out = []
    for cfg in configs:
        hit = by_key.get(cfg.key())
        if hit is None:
            hit = by_config.get(json.dumps(cfg.flat(), sort_keys=True, default=str))
        out.append(hit)
    return out


# ---------------------------------------------------------------------- integrity
# relative train loss / absolute accuracy. Same processor model (or GPU) and executor: float rounding only
# (thread counts), at most a test sample or two flipping; another device, processor model or executor (or a
# record that does not name its processor): float32 arithmetic differs from the first step on, and two rounds
# drift apart by a little.
TOLERANCE = {"same": {"loss": 1e-5, "acc": 0.005}, "cross": {"loss": 0.02, "acc": 0.02}}


def same_hardware(recorded_device: str, device: str) -> bool:
    """Whether a record's device description names the hardware ``device`` is here: the same GPU model, or a
    CPU of the same model (``device_description``: "cpu (<model>, ...)"; a record that names no model is not
    known to be the same)."""
    def kind_and_model(description: str) -> tuple[str, str]:
        kind, _, rest = description.partition(" (")
        return kind.split(":")[0], rest.split(",")[0]

    return kind_and_model(recorded_device) == kind_and_model(device_description(device))


def replay(record: dict, rounds: int = 2, device: str = "cpu", executor: str = "sequential") -> list[dict]:
    """Re-run the first ``rounds`` rounds of a stored record (same config, total rounds and evaluation cadence, and
    on a CPU the record's thread count: float32 kernels split their sums by thread) and compare the train loss and
    the evaluated accuracies round by round."""
    import re

    from fedlib.threads import torch_threads

    threads = re.search(r"(\d+) threads", str(record.get("device", "")))
    with torch_threads(int(threads.group(1)) if threads and device == "cpu" else None):
        return _replay(record, rounds, device, executor)


def _replay(record: dict, rounds: int, device: str, executor: str) -> list[dict]:
    cfg = make_config(**{**record["config"], "device": device, "executor": executor})
    fed = build(cfg)
    recorded = {row["round"]: row for row in record["history"]}
    same = record.get("executor", "sequential") == executor and same_hardware(str(record.get("device", "")), device)
    checks = []
    for row in fed.run(until=rounds):   # the rounds as the record's run played them: the one round loop
        old = recorded.get(row["round"], {})
        for metric, value in row.items():
            if metric not in old or not isinstance(value, float) or not isinstance(old[metric], (int, float)):
                continue
            kind = "loss" if "loss" in metric else "acc"
            if not (kind == "loss" or metric.endswith("_acc")):
                continue
            diff = abs(value - old[metric]) / (abs(old[metric]) if kind == "loss" else 1.0)
            tol = TOLERANCE["same" if same else "cross"][kind]
            checks.append({"round": row["round"], "metric": metric, "recorded": old[metric], "replayed": value,
                           "difference": diff, "tolerance": tol, "ok": math.isfinite(value) and diff <= tol})
    return checks
