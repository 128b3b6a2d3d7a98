"""run(config) -> result record. Seeds, validation, result cache keyed by config hash, resume."""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import platform
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

import fedlib
from fedlib.errors import ConfigError, TrainingDiverged, check, check_fields

DEFAULT_CACHE = Path(os.environ.get("FEDLIB_CACHE", Path(__file__).resolve().parents[1] / ".fedlib-cache"))

# Scales override the experiment's training budget; everything else stays as configured.
SCALES = {
    "ci": {"rounds": 2, "local_epochs": 1},
    "book": {"rounds": 10, "local_epochs": 1},
    "paper": {},
}


@dataclass
class Config:
    method: str = "fedavg"
    dataset: str = "fmnist"
    partition: dict = field(default_factory=lambda: {"name": "skew", "s": 20, "setting": 1})
    num_clients: int = 20
    rounds: int = 150
    local_epochs: int = 5
    batch_size: int = 50
    lr: float = 0.02
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    fraction: float = 1.0
    eval_every: int = 1
    model: str | None = None
    hyper: dict = field(default_factory=dict)
    seed: int = 0
    device: str = "cpu"
    eval_personal_global: bool = False  # also evaluate client models on the global test (metric set personal_global)
    global_test_size: int | None = None
    data_options: dict = field(default_factory=dict)  # keyword arguments of composite datasets (digit4)
    backbones: list | None = None  # frozen backbones: train on their concatenated features (FedPCL)
    backbone_input: int = 64       # input pixels of resizable backbones (EfficientNet-Lite)
    metrics: list = field(default_factory=list)  # metric sets beside "standard" (see fedlib.engine.evaluation)
    eval_clients: str = "all"      # all | participants: whose models the client metrics average (FedPRP)
    average_global: bool = False   # evaluate an average of the client models where a method has no global one
    late_clients: int = 0          # the last late_clients clients join at round late_round (FedPRP Table VII)
    late_round: int = 0
    eval_finetune_epochs: int = 0  # evaluate methods without personal models after this much local fine-tuning
    executor: str = "sequential"   # sequential | process | batched: how a round's clients are trained
    workers: int | None = None     # worker processes of the "process" executor (default: CPU count)
    engine: str = "inprocess"      # inprocess | flower: clients trained in this process, or on Flower nodes

    # fields that do not change results beyond float rounding: not part of the cache key
    RUNTIME_FIELDS = ("device", "executor", "workers", "engine")

    def key(self) -> str:
        """Hash of everything that changes the result. Fields left at their 'off' defaults are
        omitted so that adding a field keeps existing cache keys; the method's class versions
        (``Method.versions``) are included, so a change to one method recomputes only its records."""
        from fedlib.methods import make_method

        method = make_method(self.method, **self.hyper)
        payload = {k: v for k, v in dataclasses.asdict(self).items()
                   if k not in self.RUNTIME_FIELDS and not (k in OFF_BY_DEFAULT and v == OFF_BY_DEFAULT[k])}
        if not self.backbones:
            payload.pop("backbone_input")
        payload["hyper"] = dataclasses.asdict(method.hp)  # defaults included
        payload["_method_versions"] = method.versions()
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def metric_sets(self) -> list[str]:
        return ["standard", *self.metrics, *(["personal_global"] if self.eval_personal_global else [])]

    def with_scale(self, scale: str | None) -> "Config":
        if scale is None:
            return self
        check(scale in SCALES, "scale", scale, f"one of {', '.join(SCALES)}")
        return dataclasses.replace(self, **SCALES[scale])


FIELDS = {f.name for f in dataclasses.fields(Config)}
# fields whose default leaves results as they were before the field existed: omitted from the key then
OFF_BY_DEFAULT = {"data_options": {}, "backbones": None, "metrics": [], "eval_clients": "all", "average_global": False,
                  "late_clients": 0, "late_round": 0, "eval_finetune_epochs": 0}


ENGINES = ("inprocess", "flower")


def make_config(**kwargs) -> Config:
    for key in kwargs:
        check(key in FIELDS, key, kwargs[key], f"a config field: {', '.join(sorted(FIELDS))}")
    return Config(**kwargs)


def validate(cfg: Config) -> None:
    """Catch bad configurations before any data is loaded or any training starts."""
    from fedlib.data.partition import PARTITIONERS
    from fedlib.methods import METHODS, make_method
    from fedlib.models import MODELS

    from fedlib.backbones import BACKBONES
    from fedlib.data.sources import DATASET_NAMES

    check_fields(cfg)   # every field has its declared type: integers, finite numbers, strings, mappings
    check(0 <= cfg.seed < 2 ** 32, "seed", cfg.seed, "an integer in [0, 2**32 - 1]")
    check(cfg.global_test_size is None or cfg.global_test_size >= 1, "global_test_size", cfg.global_test_size,
          "a positive number of test samples, or None for the whole test set")

    check(cfg.method in METHODS, "method", cfg.method, f"one of {', '.join(METHODS)}")
    check(cfg.dataset in DATASET_NAMES, "dataset", cfg.dataset, f"one of {', '.join(DATASET_NAMES)}")
    for name in cfg.backbones or []:
        check(name in BACKBONES, "backbones", name, f"names from {', '.join(BACKBONES)}")
    check(isinstance(cfg.partition, dict) and cfg.partition.get("name") in PARTITIONERS, "partition.name",
          cfg.partition.get("name") if isinstance(cfg.partition, dict) else cfg.partition,
          f"one of {', '.join(PARTITIONERS)}")
    check(cfg.model is None or cfg.model in MODELS, "model", cfg.model, f"one of {', '.join(MODELS)}")
    for name in ("num_clients", "rounds", "local_epochs", "batch_size", "eval_every"):
        value = getattr(cfg, name)
        check(isinstance(value, (int, np.integer)) and value >= 1, name, value, "a positive integer")
    check(isinstance(cfg.lr, (int, float)) and cfg.lr > 0, "lr", cfg.lr, "a positive number")
    check(isinstance(cfg.fraction, (int, float)) and 0 < cfg.fraction <= 1, "fraction", cfg.fraction,
          "a client sampling fraction in (0, 1]")
    check(cfg.optimizer in ("sgd", "adam"), "optimizer", cfg.optimizer, "'sgd' or 'adam'")
    check(cfg.momentum >= 0 and cfg.weight_decay >= 0, "momentum/weight_decay", (cfg.momentum, cfg.weight_decay),
          "non-negative numbers")
    check(cfg.device == "cpu" or cfg.device.startswith("cuda"), "device", cfg.device, "'cpu' or 'cuda[:n]'")
    if cfg.device.startswith("cuda"):
        check(torch.cuda.is_available(), "device", cfg.device, "'cpu' (no CUDA device is visible)")
    from fedlib.engine.evaluation import resolve_metric_sets
    from fedlib.engine.executors import EXECUTORS

    check(cfg.executor in EXECUTORS, "executor", cfg.executor, f"one of {', '.join(EXECUTORS)}")
    check(cfg.executor != "process" or cfg.device == "cpu", "executor", cfg.executor,
          "'sequential' or 'batched' on a CUDA device (the process executor trains on the CPU)")
    check(cfg.engine in ENGINES, "engine", cfg.engine, f"one of {', '.join(ENGINES)}")
    if cfg.engine == "flower":
        import importlib.util

        check(importlib.util.find_spec("flwr") is not None and importlib.util.find_spec("ray") is not None, "engine",
              cfg.engine, "'inprocess' (Flower is not installed: pip install -e '.[flower]')")
    check(cfg.workers is None or (isinstance(cfg.workers, (int, np.integer)) and cfg.workers >= 1), "workers",
          cfg.workers, "a positive integer or None")
    check(isinstance(cfg.backbone_input, (int, np.integer)) and cfg.backbone_input >= 16, "backbone_input",
          cfg.backbone_input, "an input size of at least 16 pixels")
    check(isinstance(cfg.metrics, (list, tuple)), "metrics", cfg.metrics, "a list of metric set names")
    check(cfg.eval_clients in ("all", "participants"), "eval_clients", cfg.eval_clients, "'all' or 'participants'")
    check(isinstance(cfg.eval_finetune_epochs, (int, np.integer)) and cfg.eval_finetune_epochs >= 0,
          "eval_finetune_epochs", cfg.eval_finetune_epochs, "a non-negative number of epochs")
    check(isinstance(cfg.late_clients, (int, np.integer)) and 0 <= cfg.late_clients < cfg.num_clients, "late_clients",
          cfg.late_clients, f"a number of clients in [0, num_clients={cfg.num_clients})")
    if cfg.late_clients:
        check(isinstance(cfg.late_round, (int, np.integer)) and 0 < cfg.late_round < cfg.rounds, "late_round",
              cfg.late_round, f"a round in (0, rounds={cfg.rounds}) at which the late clients join")
    resolve_metric_sets(cfg.metric_sets())
    make_method(cfg.method, **cfg.hyper)  # validates the hyperparameters


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """fedlib's version and the git commit of the code this process runs, read once (a commit made while a
    long grid runs does not relabel its later records), with "+changes" where fedlib's files differ from
    it; FEDLIB_CODE_VERSION names the commit where the checkout has no .git (a copy of the working tree
    sent to another machine)."""
    if os.environ.get("FEDLIB_CODE_VERSION"):
        return f"fedlib {fedlib.__version__} ({os.environ['FEDLIB_CODE_VERSION']})"
    here = Path(__file__).parent
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5).stdout.strip()
        changed = rev and subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=here, capture_output=True,
                                         text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev, changed = "", ""
    return f"fedlib {fedlib.__version__}" + (f" ({rev}{'+changes' if changed else ''})" if rev else "")


def device_description(device: str) -> str:
    if device.startswith("cuda"):
        return f"{device} ({torch.cuda.get_device_name(device)}, torch {torch.__version__})"
    return f"cpu ({platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__})"


def _atomic_json(path: Path, obj) -> None:
    """Write JSON through a temporary file unique to this process, then rename it into place."""
    from fedlib.engine.loop import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=1, default=_jsonable)))


def read_cached_record(path: Path) -> dict | None:
    """A cached record, or None when there is none; an unreadable one (empty, truncated, not a record) is
    named, moved aside and None is returned, so the run recomputes it."""
    from fedlib.engine.loop import set_aside

    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or "history" not in record or not record["history"]:
            raise ValueError("it is not a finished run's record")
        return record
    except (ValueError, UnicodeDecodeError) as exc:
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
        handle = open(path, "a")
    except OSError as exc:
        raise ConfigError("cache_dir", str(path.parent), f"a folder fedlib can create and write ({exc.strerror})") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"fedlib: another process is running this config ({path.name}); waiting for it", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _jsonable(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    return str(obj)


def load_data(cfg: Config):
    """The config's dataset (features of its frozen backbones, if any) in memory."""
    from fedlib.data import load_dataset

    data = load_dataset(cfg.dataset, **cfg.data_options)
    if cfg.backbones:
        from fedlib.backbones import featurize

        data = featurize(data, list(cfg.backbones), cache_dir=DEFAULT_CACHE, input_size=cfg.backbone_input)
    return data


def build(cfg: Config, progress: bool = False, checkpoint=None, desc: str = "", executor=None, data=None,
          method=None):
    """Data, model, method and the Federation for a validated config. ``executor``: a factory
    ``(setup, trainer) -> executor`` used instead of ``cfg.executor`` (the Flower engine's); ``data``
    (``load_data``'s, possibly already on the device) and ``method``: shared with other runs (run-batched grids)."""
    from fedlib.data import federate
    from fedlib.engine.loop import Federation
    from fedlib.methods import make_method
    from fedlib.models import build_model

    seed_everything(cfg.seed)
    data = load_data(cfg) if data is None else data
    fed = federate(data, cfg.num_clients, cfg.partition, cfg.seed, device=cfg.device)
    seed_everything(cfg.seed)
    model = build_model(cfg.model, data.input_shape, data.num_classes, cfg.dataset).to(cfg.device)
    method = make_method(cfg.method, **cfg.hyper) if method is None else method
    return Federation(fed, model, method, seed=cfg.seed, rounds=cfg.rounds, local_epochs=cfg.local_epochs,
                      batch_size=cfg.batch_size, lr=cfg.lr, fraction=cfg.fraction, eval_every=cfg.eval_every,
                      optimizer=cfg.optimizer, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                      metrics=cfg.metric_sets(), global_test_size=cfg.global_test_size,
                      eval_clients=cfg.eval_clients, average_global=cfg.average_global,
                      late_clients=cfg.late_clients, late_round=cfg.late_round,
                      eval_finetune_epochs=cfg.eval_finetune_epochs, executor=executor or cfg.executor,
                      executor_options={"workers": cfg.workers}, checkpoint=checkpoint, progress=progress, desc=desc)


def run(cfg: Config, cache_dir: str | os.PathLike | None = DEFAULT_CACHE, progress: bool = True,
        callbacks=(), desc: str = "") -> dict:
    """Run one configuration (one seed) and return its result record.

    With a cache directory, a finished config is read back from ``<cache>/<key>.json`` and an
    interrupted one resumes from ``<cache>/<key>.ckpt``."""
    validate(cfg)
    if cache_dir is None:
        return _run(cfg, None, None, progress, callbacks, desc)
    key = cfg.key()
    with cache_lock(Path(cache_dir) / f"{key}.lock"):
        record_path = Path(cache_dir) / f"{key}.json"
        record = None if callbacks else read_cached_record(record_path)
        return record or _run(cfg, record_path, Path(cache_dir) / f"{key}.ckpt", progress, callbacks, desc)


def _run(cfg: Config, record_path: Path | None, checkpoint: Path | None, progress: bool, callbacks, desc: str) -> dict:
    desc = desc or f"{cfg.method} seed {cfg.seed}"
    started = time.time()
    if cfg.engine == "flower":
        from fedlib.flower import simulate

        fed = simulate(cfg, checkpoint=checkpoint, progress=progress, desc=desc, callbacks=callbacks)
    else:
        fed = build(cfg, progress=progress, checkpoint=checkpoint, desc=desc)
        fed.on_round.extend(callbacks)
        fed.run()
    record = record_of(cfg, fed, started)
    if record_path is not None:
        from fedlib.engine.loop import remove_checkpoint

        _atomic_json(record_path, record)
        remove_checkpoint(checkpoint)
    return record


def record_of(cfg: Config, fed, started: float) -> dict:
    """The result record of a finished Federation (``started``: when this session began)."""
    history = fed.history
    shared = {"runs_batched": fed.runs_batched} if getattr(fed, "runs_batched", 1) > 1 else {}
    return {**shared, 
        "config": dataclasses.asdict(cfg), "key": cfg.key(), "seed": cfg.seed, "code_version": code_version(),
        "device": device_description(cfg.device), "engine": cfg.engine,
        "executor": fed.executor.name,
        "wall_time_s": fed.elapsed, "history": history, "final": history[-1],
        "final_confusions": {k: [np.asarray(c).tolist() for c in v] for k, v in fed.final_confusions.items()},
        "train_counts": fed.data.train_counts.tolist(), "finished_at": time.strftime("%Y-%m-%d %H:%M:%S"),
        "resumed": fed.start_round > 0, "session_wall_s": time.time() - started,
    }


# ---------------------------------------------------------------------- many runs in one batched step
# fields that may differ between runs trained in one step: what the engine does per run (sampling, server,
# evaluation, length); every other field (method and hyperparameters, model, data, optimiser, lr, epochs,
# batch size, device) is shared
PER_RUN_FIELDS = ("seed", "partition", "num_clients", "rounds", "eval_every", "fraction", "global_test_size",
                  "eval_personal_global", "metrics", "eval_clients", "average_global", "late_clients", "late_round",
                  "eval_finetune_epochs")


# run-batched runs write their checkpoints at most this often (and when they stop): a round of many runs
# is short on a GPU, and every client's model of every run written each round would dominate it
LOCKSTEP_CHECKPOINT_S = 60.0


def lockstep_key(cfg: Config) -> str:
    """Configs with the same key can train in one batched step (``run_many``)."""
    from fedlib.methods import make_method

    shared = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in PER_RUN_FIELDS}
    shared["hyper"] = dataclasses.asdict(make_method(cfg.method, **cfg.hyper).hp)
    return json.dumps(shared, sort_keys=True, default=str)


def lockstep_groups(configs: list[Config], max_runs: int | None = None) -> list[list[int]]:
    """Positions of ``configs`` grouped by ``lockstep_key`` (in first-seen order), each group cut into
    pieces of at most ``max_runs``."""
    groups: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        groups.setdefault(lockstep_key(cfg), []).append(i)
    size = max_runs or max(map(len, groups.values()), default=1)
    return [g[a:a + size] for g in groups.values() for a in range(0, len(g), size)]


def run_many(configs: list[Config], cache_dir: str | os.PathLike = DEFAULT_CACHE, progress: bool = True,
             max_runs: int | None = None, deadline: float | None = None, on_record=None) -> list:
    """Run many configurations with the batched executor, several runs per vmapped step: configs that share
    everything but ``PER_RUN_FIELDS`` advance round by round together (``fedlib.engine.lockstep``), at most
    ``max_runs`` at once. Every run reads and writes its own cache entry and checkpoint, as ``run`` does, and
    resumes from it. Returns per config its record, the exception that ended it (divergence, a failing hook),
    or None where it did not finish (``deadline``: time.time() after which no round starts; or another
    process holds its lock). ``on_record(config, record)`` is called as each run finishes."""
    configs = [dataclasses.replace(c, executor="batched") for c in configs]
    for cfg in configs:
        validate(cfg)
    out: list = [None] * len(configs)
    for group in lockstep_groups(configs, max_runs):
        if deadline is not None and time.time() >= deadline:
            break
        _run_group([configs[i] for i in group], group, out, cache_dir, progress, deadline, on_record)
    return out


def _run_group(cfgs: list[Config], positions: list[int], out: list, cache_dir, progress: bool, deadline, on_record):
    import fcntl

    from fedlib.engine.batched import BatchedTrainer
    from fedlib.engine.executors import BatchedExecutor
    from fedlib.engine.lockstep import Lockstep
    from fedlib.engine.loop import remove_checkpoint
    from fedlib.methods import make_method
    from fedlib.models import build_model

    cache = Path(cache_dir)
    started = time.time()
    with contextlib.ExitStack() as stack:
        todo = []
        for cfg, pos in zip(cfgs, positions):
            key = cfg.key()
            lock = stack.enter_context(_lock_or_none(cache / f"{key}.lock", fcntl))
            if lock is None:   # another process trains this config; its record appears in the cache
                continue
            record = read_cached_record(cache / f"{key}.json")
            if record is not None:
                out[pos] = record
                if on_record:
                    on_record(cfg, record)
                continue
            todo.append((cfg, pos))
        if not todo:
            return
        first = todo[0][0]
        data = load_data(first).to(first.device)
        if not BatchedTrainer.supports(build_model(first.model, data.input_shape, data.num_classes, first.dataset)):
            stack.close()   # models with buffers (BatchNorm) train one run at a time; run() takes each lock itself
            for cfg, pos in todo:
                try:
                    out[pos] = run(cfg, cache_dir=cache, progress=progress)
                except TrainingDiverged as exc:
                    out[pos] = exc
                    continue
                if on_record:
                    on_record(cfg, out[pos])
            return
        if data.train_x.ndim == 4:   # the layout every trainer uses: one tensor shared by all runs
            data = dataclasses.replace(data, train_x=data.train_x.contiguous(memory_format=torch.channels_last))
        method = make_method(todo[0][0].method, **todo[0][0].hyper)
        shared: dict = {}

        def executor(setup, trainer, **_):
            if "batched" not in shared:
                shared["batched"] = BatchedTrainer(trainer.model, trainer.x, trainer.y, trainer.batch_size,
                                                   trainer.optimizer)
            return BatchedExecutor(setup, trainer, batched=shared["batched"])

        feds = []
        for cfg, _ in todo:
            fed = build(cfg, progress=progress, checkpoint=cache / f"{cfg.key()}.ckpt",
                        desc=f"{cfg.method} seed {cfg.seed}", executor=executor, data=data, method=method)
            fed.runs_batched = len(todo)
            fed.checkpoint_every_s = LOCKSTEP_CHECKPOINT_S
            feds.append(fed)
        where = {id(f): (cfg, pos) for f, (cfg, pos) in zip(feds, todo)}

        def on_end(member):
            cfg, pos = where[id(member.federation)]
            if member.error is not None:
                out[pos] = member.error
                return
            record = record_of(cfg, member.federation, started)
            _atomic_json(cache / f"{cfg.key()}.json", record)
            remove_checkpoint(cache / f"{cfg.key()}.ckpt")
            out[pos] = record
            if on_record:
                on_record(cfg, record)

        Lockstep(feds, shared["batched"]).run(on_end=on_end, deadline=deadline)


@contextlib.contextmanager
def _lock_or_none(path: Path, fcntl):
    """The config's cache lock if it is free now, else None (another process holds it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_seeds(cfg: Config, seeds, **kwargs) -> list[dict]:
    return [run(dataclasses.replace(cfg, seed=int(s)), **kwargs) for s in seeds]


SUMMARY_METRICS = ("personal_local_acc", "personal_local_f1", "global_acc", "personal_global_acc")


def summarize_runs(records: list[dict], metrics=SUMMARY_METRICS, last: int = 1) -> dict[str, tuple[float, float]]:
    """mean and std over seeds of each metric; per seed the metric is the last evaluated value
    (``last`` > 1: the mean of the last ``last`` evaluations)."""
    out = {}
    for metric in metrics:
        values = []
        for r in records:
            evals = [row[metric] for row in r["history"] if metric in row]
            if evals:
                values.append(float(np.mean(evals[-last:])))
        if values:
            out[metric] = (float(np.mean(values)), float(np.std(values)), len(values))
    return out
