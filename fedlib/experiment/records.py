"""Result records and their cache: provenance (code version, device), atomic writes, unreadable records
set aside, one lock per config."""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

import fedlib
from fedlib.engine.training import cpu_model, cpu_vector_unit
from fedlib.engine.workers import process_state
from fedlib.errors import ConfigError, LockHeld
from fedlib.experiment.config import Config


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """fedlib's version and the git commit of the code this process runs, read once (a commit made while a
    long grid runs does not relabel its later records), with "+changes" where fedlib's files (or the chapters' study
    modules) differ from it; FEDLIB_CODE_VERSION names the commit where the checkout has no .git (a copy of the
    working tree sent to another machine)."""
    if os.environ.get("FEDLIB_CODE_VERSION"):
        return f"fedlib {fedlib.__version__} ({os.environ['FEDLIB_CODE_VERSION']})"
    here = Path(__file__).parents[1]   # fedlib/
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        changed = rev and subprocess.run(["git", "status", "--porcelain", "--", ".", "../notebooks/*.py"], cwd=here,
                                         capture_output=True, text=True, timeout=5).stdout.strip()   # the chapters'
        # study modules beside their notebooks too
    except (OSError, subprocess.SubprocessError):
        rev, changed = "", ""
    return f"fedlib {fedlib.__version__}" + (f" ({rev}{'+changes' if changed else ''})" if rev else "")


def pin_code_version() -> str:
    """Read the code version now and hand it to every process started from here on (FEDLIB_CODE_VERSION): a
    worker that reads it only when its first run ends would name whatever commit the checkout holds by then."""
    version = code_version()
    inner = version[version.index("(") + 1:-1] if "(" in version else ""
    if inner:
        os.environ.setdefault("FEDLIB_CODE_VERSION", inner)
    return version


def device_description(device: str) -> str:
    if device.startswith("cuda"):
        return f"{device} ({torch.cuda.get_device_name(device)}, torch {torch.__version__})"
    return (f"cpu ({cpu_model()} with {cpu_vector_unit()}, {platform.machine()}, {torch.get_num_threads()} threads, "
            f"torch {torch.__version__})")


def atomic_json(path: Path, obj) -> None:
    """``store.atomic_json`` with NumPy and tensors as lists; a failed write (full disk, read-only folder) is one
    ``StorageFailed`` naming the file, and the old file stays as it was."""
    from fedlib import store
    from fedlib.errors import StorageFailed

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        store.atomic_json(path, obj, default=jsonable)
    except OSError as exc:
        raise StorageFailed(f"{path} could not be written ({exc.strerror or exc}); the run's last checkpoint is "
                            "kept: free space or make the folder writable and run the same command again to resume "
                            "from it") from None


def record_problem(record) -> str | None:
    """Why ``record`` is not a finished run's record (the types of every field a reader uses), or None."""
    import numbers

    def number(v):
        return isinstance(v, numbers.Real) and not isinstance(v, bool)

    if not isinstance(record, dict):
        return f"a record is a JSON object, not {type(record).__name__}"
    for name, kind, what in (("config", dict, "an object"), ("key", str, "a string"), ("history", list, "a list"),
                             ("final", dict, "an object")):
        if not isinstance(record.get(name), kind):
            return f"its {name!r} is {type(record.get(name)).__name__ if name in record else 'missing'}, not {what}"
    if not isinstance(record.get("seed"), int) or isinstance(record.get("seed"), bool):
        return f"its 'seed' is {record.get('seed')!r}, not an integer"
    if not record["history"]:
        return "its 'history' is empty (not a finished run)"
    for i, row in enumerate(record["history"]):
        if not isinstance(row, dict) or not isinstance(row.get("round"), int):
            return f"row {i} of its 'history' has no integer 'round'"
        text = [k for k, v in row.items() if k.endswith(("_acc", "_loss")) and not (number(v) or v is None)]
        if text:
            return f"row {i} of its 'history' has {text[0]!r} = {row[text[0]]!r}, not a number"
        odd = [k for k, v in row.items() if k.endswith("_acc") and number(v) and not 0 <= v <= 1]
        if odd:   # NaN fails the comparison too
            return f"row {i} of its 'history' has {odd[0]!r} = {row[odd[0]]!r}, not an accuracy in [0, 1]"
    if record["final"] != record["history"][-1]:
        return "its 'final' is not its last 'history' row"
    rounds = [row["round"] for row in record["history"]]
    if any(b <= a for a, b in zip(rounds, rounds[1:])):
        return "its 'history' rows are not in the order of their rounds"
    planned = record["config"].get("rounds")
    if isinstance(planned, int) and rounds[-1] != planned:
        return f"its 'history' ends at round {rounds[-1]} of the {planned} its config runs (a run cut short)"
    if "wall_time_s" in record and not (number(record["wall_time_s"]) and math.isfinite(record["wall_time_s"])
                                        and record["wall_time_s"] >= 0):
        return f"its 'wall_time_s' is {record['wall_time_s']!r}, not a finite number of seconds"
    return confusion_problem(record)


def confusion_problem(record: dict) -> str | None:
    """Why a record's final accuracies contradict its own confusion counts (``final_confusions``: per family one
    matrix, or one per client), or None: counts finite and non-negative, each ``<family>_acc_clients`` the clients'
    trace / total, each ``<family>_acc`` their mean."""
    found, final = record.get("final_confusions"), record["final"]
    if not isinstance(found, dict):
        return None
    for family, matrices in found.items():
        one = not (isinstance(matrices, list) and matrices and isinstance(matrices[0], list) and matrices[0]
                   and isinstance(matrices[0][0], list))
        accuracies = []
        for m in [matrices] if one else matrices:
            if m is None:   # a client without test images
                accuracies.append(float("nan"))
                continue
            counts = np.asarray(m, dtype=float)
            if counts.ndim != 2 or not np.isfinite(counts).all() or (counts < 0).any():
                return f"its confusion counts '{family}' are not a matrix of non-negative counts"
            accuracies.append(float(np.trace(counts) / counts.sum()) if counts.sum() else float("nan"))
        clients = final.get(f"{family}_acc_clients")
        if isinstance(clients, list) and len(clients) == len(accuracies) and any(
                isinstance(w, (int, float)) and math.isfinite(a) and abs(w - a) > 1e-6
                for w, a in zip(clients, accuracies)):
            return f"its '{family}_acc_clients' contradict its own confusion counts"
        mean = final.get(f"{family}_acc")
        if isinstance(mean, (int, float)) and accuracies and not all(map(math.isnan, accuracies)) \
                and abs(float(np.nanmean(accuracies)) - mean) > 1e-6:
            return f"its '{family}_acc' {mean:.4f} contradicts its own confusion counts ({np.nanmean(accuracies):.4f})"
    return None


def read_cached_record(path: Path) -> dict | None:
    """A cached record, or None when there is none; an unreadable one (empty, truncated, not a record) is
    named, moved aside and None is returned, so the run recomputes it."""
    from fedlib.store import irregular, set_aside

    if irregular(path):
        moved = set_aside(path)
        print(f"fedlib: cached record {path} is not a regular file (a folder, a pipe, a device or a link); moved to "
              f"{moved.name} unopened; recomputing", file=sys.stderr)
        return None
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        if (problem := record_problem(record)) is not None:
            raise ValueError(f"it is not a finished run's record: {problem}")
        if record["key"] != path.stem:   # copied under another configuration's name: never served for it
            raise ValueError(f"it is the record of another configuration (key {record['key']})")
        return record
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        moved = set_aside(path)
        print(f"fedlib: cached record {path} could not be read ({exc}); moved to {moved.name}; recomputing",
              file=sys.stderr)
        return None


@contextlib.contextmanager
def cache_lock(path: Path):
    """Exclusive lock of one config's cache entry: a second identical run waits for the first and then
    reads its record instead of training again."""
    import fcntl

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock_file(path), "a")
    except OSError as exc:
        raise ConfigError(
            "cache_dir", str(path.parent), f"a folder fedlib can create and write ({exc.strerror})"
        ) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"fedlib: another process is running this config ({path.name}); waiting for it", file=sys.stderr)
            wait_for_lock(handle, path, fcntl)
        name_holder(handle)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def name_holder(handle) -> None:
    """Write this process's id into the lock it holds, for a waiter to see whether its holder can still finish."""
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()


def wait_for_lock(handle, path: Path, fcntl, poll_s: float = 0.5) -> None:
    """Wait for the lock's holder (a lock dies with its process); a holder that is stopped (SIGSTOP, Ctrl-Z) would
    keep it forever: refused in one line naming it."""
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = lock_holder(path)
            if holder is not None and process_state(holder) in ("T", "t"):
                raise LockHeld(f"{path} is held by process {holder}, which is stopped: resume it (kill -CONT {holder}) "
                               "or end it, then run this again") from None
            time.sleep(poll_s)


def lock_holder(path: Path) -> int | None:
    """The process id a lock's holder wrote into it (None: not written yet, or not a number)."""
    try:
        text = path.read_text()[:20].strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None



def jsonable(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    return str(obj)


def record_of(cfg: Config, fed, started: float) -> dict:
    """The result record of a finished Federation (``started``: when this session began)."""
    history = fed.history
    shared = {"runs_batched": fed.runs_batched} if getattr(fed, "runs_batched", 1) > 1 else {}
    if getattr(fed.executor, "left_out", None):   # rounds that went on without some clients (a lost Flower node)
        shared["left_out"] = {str(t + 1): ids for t, ids in fed.executor.left_out.items()}
    return {**shared,
        "config": cfg.flat(), "key": cfg.key(), "seed": cfg.seed, "code_version": code_version(),
        "device": device_description(cfg.device), "precision": cfg.precision, "engine": cfg.engine,
        "executor": fed.executor.name,
        "wall_time_s": fed.elapsed, "history": history, "final": history[-1],
        "final_confusions": {k: [np.asarray(c).tolist() for c in v] for k, v in fed.final_confusions.items()},
        "train_counts": fed.data.train_counts.tolist(), "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "resumed": fed.start_round > 0, "session_wall_s": time.time() - started,
    }


def lock_file(path: Path) -> Path:
    """A lock file fedlib can open: one that is not a regular file (a FIFO would block the open, a link to a device
    fail it) is named and moved aside, never opened; no fedlib process can hold such a file."""
    from fedlib.store import irregular, set_aside

    if irregular(path):
        moved = set_aside(path)
        print(f"fedlib: lock {path} is not a regular file; moved to {moved.name} unopened", file=sys.stderr)
    return path


@contextlib.contextmanager
def lock_or_none(path: Path, fcntl):
    """The config's cache lock if it is free now, else None (another process holds it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file(path), "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        name_holder(handle)
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
