"""An experiment's configuration: its fields, scales, validation (bad configurations caught before any
data is loaded), and the cache key."""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedlib.methods  # noqa: F401  (the methods' modules register their papers' participations, whose fields are config fields)
from fedlib.engine.protocol import (
    EvaluationPlan,
    LocalTraining,
    Participation,
    ParticipationSpec,
    participation_fields,
    participation_spec,
)
from fedlib.errors import FLOAT32_TINY, check, check_fields, check_type
from fedlib.store import env_folder

DEFAULT_CACHE = env_folder("FEDLIB_CACHE", Path(__file__).resolve().parents[2] / ".fedlib-cache")

# The command line's budgets (``fedlib run --budget``) override an experiment's rounds and epochs; everything
# else stays as configured. They are not the chapters' scales (ci, book, paper: each chapter's own budget).
BUDGETS: dict[str, dict[str, Any]] = {
    "smoke": {"rounds": 2, "local_epochs": 1},
    "short": {"rounds": 10, "local_epochs": 1},
    "full": {},
}
# the chapters' scales, each chapter's own budgets (fedlib.studies.grid.Scales): ci (tests of the code), book
# (a smoke run at every build), reference (the paper's protocol at a converged, shorter budget, 3 seeds, committed),
# paper (the paper's budget, committed)
SCALES = ("ci", "book", "reference", "paper")
RECORDED_SCALES = ("reference", "paper")   # scales whose records are committed under results/<chapter>/


@dataclass
class ParticipationConfig:
    """Who trains each round: ``fraction`` and the registered participations' own fields (``own``, by their names:
    ``ParticipationSpec.fields``, e.g. FedPRP's ``late_clients``, ``late_round``), resolved by ``spec()`` into the
    one that applies. ``own`` holds only values that differ from their defaults."""
    fraction: float = 1.0          # clients sampled per round
    own: dict = field(default_factory=dict)

    def values(self) -> dict:
        """Every participation field: ``fraction``, each registered participation's own at its value or default."""
        return {"fraction": self.fraction, **participation_fields(), **self.own}

    def spec(self) -> ParticipationSpec:
        return participation_spec(self.values())

    def schedule(self) -> Participation:
        return self.spec().build(self.values())


@dataclass
class EvaluationConfig:
    """What is evaluated, when, and on whose models (see fedlib.engine.evaluation)."""
    every: int = 1                 # evaluation cadence in rounds (and always the last round)
    personal_global: bool = False  # also evaluate client models on the global test (metric set personal_global)
    global_test_size: int | None = None   # a seeded subset of the test set as the global test set
    metrics: list = field(default_factory=list)  # metric sets beside "standard"
    clients: str = "all"           # all | participants: whose models the client metrics average (FedPRP)
    average_global: bool = False   # evaluate an average of the client models where a method has no global one
    finetune_epochs: int = 0       # evaluate methods without personal models after this much local fine-tuning

    def metric_sets(self) -> list[str]:
        return ["standard", *self.metrics, *(["personal_global"] if self.personal_global else [])]

    def plan(self) -> EvaluationPlan:
        return EvaluationPlan(self.every, tuple(self.metric_sets()), self.global_test_size,
                              self.clients == "participants", self.average_global, self.finetune_epochs)


# the groups' fields under the flat names configs, records, cache keys and the command line use
# (``make_config(fraction=0.1)``, ``--set eval_every=5``)
FLAT_NAMES: dict[str, tuple[str, str]] = {
    "fraction": ("participation", "fraction"),
    "eval_every": ("evaluation", "every"), "eval_personal_global": ("evaluation", "personal_global"),
    "global_test_size": ("evaluation", "global_test_size"), "metrics": ("evaluation", "metrics"),
    "eval_clients": ("evaluation", "clients"), "average_global": ("evaluation", "average_global"),
    "eval_finetune_epochs": ("evaluation", "finetune_epochs"),
}
GROUPS = {"participation": ParticipationConfig, "evaluation": EvaluationConfig}


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
    drop_last: bool = False        # skip each epoch's last partial mini-batch (torch's DataLoader(drop_last=True))
    precision: str = "fp32"        # fp32 | bf16 | tf32: the arithmetic of training steps (engine.training.PRECISIONS)
    model: str | None = None
    hyper: dict = field(default_factory=dict)
    seed: int = 0
    device: str = "cpu"
    data_options: dict = field(default_factory=dict)  # keyword arguments of composite datasets (digit4)
    backbones: list | None = None  # frozen backbones: train on their concatenated features (FedPCL)
    backbone_input: int = 64       # input pixels of resizable backbones (EfficientNet-Lite)
    executor: str = "sequential"   # sequential | process | batched: how a round's clients are trained
    workers: int | None = None     # worker processes of the "process" executor (default: CPU count)
    engine: str = "inprocess"      # inprocess | flower: clients trained in this process, or on Flower nodes
    # None | "secagg+": Flower's SecAgg+ between the nodes (the server sees only the sum of the uploads; uploads are
    # quantized, so results differ from in-process ones by about 1e-5 per parameter)
    secure_aggregation: str | None = None
    participation: ParticipationConfig = field(default_factory=ParticipationConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)

    # fields that do not change results beyond float rounding: not part of the cache key
    RUNTIME_FIELDS = ("device", "executor", "workers", "engine")

    def key(self) -> str:
        """Hash of everything that changes the result. Fields left at their 'off' defaults are
        omitted so that adding a field keeps existing cache keys; the method's class versions
        (``Method.versions``) are included, so a change to one method recomputes only its records."""
        method = self.built_method()
        payload = {k: v for k, v in self.flat().items()
                   if k not in self.RUNTIME_FIELDS and not (k in OFF_BY_DEFAULT and v == OFF_BY_DEFAULT[k])}
        if not self.backbones:
            payload.pop("backbone_input")
        payload["hyper"] = method.hp.keyed()  # defaults included (but for fields added later)
        payload["_method_versions"] = method.versions()
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def built_method(self):
        """The config's method, built once per config and hyperparameters (a method holds only its
        hyperparameters, so the key, the validation, the run and its record share one instance)."""
        from fedlib.methods import make_method

        token = json.dumps([self.method, self.hyper], sort_keys=True, default=str)
        if self.__dict__.get("_built_for") != token:
            self.__dict__["_built_method"] = make_method(self.method, **self.hyper)
            self.__dict__["_built_for"] = token
        return self.__dict__["_built_method"]

    def flat(self) -> dict:
        """The config as one flat dict (groups under their flat names): what records store and keys hash."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out.update({flat: getattr(value, name) for flat, (group, name) in FLAT_NAMES.items() if group == f.name}
                       if f.name in GROUPS else {f.name: value})
            if f.name == "participation":   # the registered participations' own fields, each under its name
                out.update({name: value.values()[name] for name in PARTICIPATION_FIELDS})
        return copy.deepcopy(out)

    def updated(self, **changes) -> Config:
        """A copy with ``changes`` (fields, or the groups' flat names)."""
        return make_config(**{**self.flat(), **changes})

    # the protocol objects the engine runs
    def local_training(self) -> LocalTraining:
        return LocalTraining(self.local_epochs, self.batch_size, self.lr, self.optimizer, self.momentum,
                             self.weight_decay, self.drop_last, self.precision)

    def with_budget(self, budget: str | None) -> Config:
        if budget is None:
            return self
        check(budget in BUDGETS, "--budget", budget, f"one of {', '.join(BUDGETS)}")
        return dataclasses.replace(self, **BUDGETS[budget])


PARTICIPATION_FIELDS = participation_fields()   # {name: default} of the registered participations' own fields
FIELDS = {f.name for f in dataclasses.fields(Config)} | set(FLAT_NAMES) | set(PARTICIPATION_FIELDS)
# fields whose default leaves results as they were before the field existed: omitted from the key then
OFF_BY_DEFAULT: dict[str, Any] = {"data_options": {}, "backbones": None, "metrics": [], "eval_clients": "all",
                                  "average_global": False, "eval_finetune_epochs": 0, "secure_aggregation": None,
                                  "drop_last": False, "precision": "fp32", **PARTICIPATION_FIELDS}


ENGINES = ("inprocess", "flower")   # how clients run: fedlib.experiment.runner.ENGINE_RUNNERS


def plain(value):
    """NumPy scalars (``np.float32(0.02)`` through the Python API) as the Python numbers they hold, inside lists and
    dicts too: the checks and the cache key see the same value either way."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


def make_config(**kwargs) -> Config:
    """A Config from fields; the participation and evaluation fields may come under their flat names
    (``fraction``, ``eval_every``, ... see ``FLAT_NAMES``) or as the groups (objects or dicts)."""
    for key in kwargs:
        check(key in FIELDS, key, kwargs[key], f"a config field: {', '.join(sorted(FIELDS))}")
    kwargs = {k: plain(v) for k, v in kwargs.items()}
    if isinstance(kwargs.get("device"), str) and re.fullmatch(r"cpu:\d+", kwargs["device"]):
        kwargs["device"] = "cpu"   # torch has one CPU device: 'cpu:0' is 'cpu' (and the same record)
    groups: dict[str, dict] = {}
    for name, kind in GROUPS.items():
        given = kwargs.pop(name, None)
        check(given is None or isinstance(given, (dict, kind)), name, given,
              f"a mapping of its fields ({', '.join(f.name for f in dataclasses.fields(kind))}), or use their flat "
              "names")
        groups[name] = copy.deepcopy(vars(given)) if isinstance(given, kind) else dict(given or {})
        for key in groups[name]:
            check(key in {f.name for f in dataclasses.fields(kind)}, f"{name}.{key}", groups[name][key],
                  f"a field of {name}: {', '.join(f.name for f in dataclasses.fields(kind))}")
    for flat, (group, name) in FLAT_NAMES.items():
        if flat in kwargs:
            check(name not in groups[group], flat, kwargs[flat],
                  f"given once: {group}.{name}={groups[group].get(name)!r} is given too")
            groups[group][name] = kwargs.pop(flat)
    own = groups["participation"].setdefault("own", {})
    for name in PARTICIPATION_FIELDS:
        if name in kwargs:
            check(name not in own, name, kwargs[name], f"given once: participation.own[{name!r}] is given too")
            own[name] = kwargs.pop(name)
    check(set(own) <= set(PARTICIPATION_FIELDS), "participation.own", own,
          f"fields of the registered participations: {', '.join(PARTICIPATION_FIELDS)}")
    groups["participation"]["own"] = {k: v for k, v in own.items() if v != PARTICIPATION_FIELDS[k]}
    return Config(**kwargs, **{name: GROUPS[name](**values) for name, values in groups.items()})


# folders the environment may move: variable -> what it holds
ENV_FOLDERS = {"FEDLIB_CACHE": "the result cache", "FEDLIB_RESULTS": "the committed records",
               "FEDLIB_DATA": "the datasets"}


def check_environment() -> None:
    """The folder variables fedlib reads, checked like config fields: set but empty, or naming a file, is refused
    in one line (an empty FEDLIB_CACHE would write records into the current folder)."""
    for name, what in ENV_FOLDERS.items():
        value = os.environ.get(name)
        if value is None:
            continue
        check(value.strip() != "", name, value, f"a folder for {what} (or unset, for the default)")
        folder = env_folder(name, Path())
        check(not folder.exists() or folder.is_dir(), name, value, f"a folder for {what}, not a file")


def check_precision(precision: str, device: str) -> None:
    """A precision the device computes natively: bf16 on a CPU with AVX512-BF16 or AMX (PyTorch emulates it
    elsewhere, slower than fp32) or a CUDA device that supports it; tf32 on CUDA only."""
    from fedlib.engine.training import PRECISIONS, cpu_has_bf16, cpu_model

    check(precision in PRECISIONS, "precision", precision, f"one of {', '.join(PRECISIONS)}")
    if precision == "tf32":
        check(device.startswith("cuda"), "precision", precision, "'fp32' or 'bf16' on the CPU (TF32 is a CUDA format)")
    if precision == "bf16" and device == "cpu":
        check(cpu_has_bf16(), "precision", precision,
              f"'fp32' on this processor ({cpu_model()}): it has no bf16 instructions (AVX512-BF16 or AMX), so "
              "PyTorch would emulate bf16 slower than fp32")
    if precision == "bf16" and device.startswith("cuda") and torch.cuda.is_available():
        check(torch.cuda.is_bf16_supported(), "precision", precision, f"'fp32' or 'tf32' ({device} has no bf16)")


def validate(cfg: Config) -> None:
    """Catch bad configurations before any data is loaded or any training starts."""
    from fedlib.backbones import BACKBONES
    from fedlib.data import dataset_names
    from fedlib.data.partition import PARTITIONERS
    from fedlib.data.sources import check_data_options
    from fedlib.methods import METHODS, secure_aggregation_groups
    from fedlib.models import MODELS

    check_environment()
    check_fields(cfg)   # every field has its declared type: integers, finite numbers, strings, mappings
    for group in GROUPS:   # the groups' fields, named as the user gives them
        check_fields(getattr(cfg, group), names={name: flat for flat, (g, name) in FLAT_NAMES.items() if g == group})
    part, ev = cfg.participation, cfg.evaluation
    check(0 <= cfg.seed < 2 ** 32, "seed", cfg.seed, "an integer in [0, 2**32 - 1]")
    check(ev.global_test_size is None or ev.global_test_size >= 1, "global_test_size", ev.global_test_size,
          "a positive number of test samples, or None for the whole test set")

    check(cfg.method in METHODS, "method", cfg.method, f"one of {', '.join(METHODS)}")
    check(cfg.dataset in dataset_names(), "dataset", cfg.dataset, f"one of {', '.join(dataset_names())}")
    check_data_options(cfg.dataset, cfg.data_options)
    for name in cfg.backbones or []:
        check(name in BACKBONES, "backbones", name, f"names from {', '.join(BACKBONES)}")
    check(isinstance(cfg.partition, dict) and cfg.partition.get("name") in PARTITIONERS, "partition.name",
          cfg.partition.get("name") if isinstance(cfg.partition, dict) else cfg.partition,
          f"one of {', '.join(PARTITIONERS)}")
    test_fraction = cfg.partition.get("test_fraction")
    if test_fraction is not None:
        check_type("partition.test_fraction", test_fraction, float)
        check(0.01 <= test_fraction <= 10, "partition.test_fraction", test_fraction,
              "a ratio of local test to train size in [0.01, 10] (below 1% a client's local accuracy rests on a "
              "handful of test images)")
    check(cfg.model is None or cfg.model in MODELS, "model", cfg.model, f"one of {', '.join(MODELS)}")
    for name, value in (("num_clients", cfg.num_clients), ("rounds", cfg.rounds), ("local_epochs", cfg.local_epochs),
                        ("batch_size", cfg.batch_size), ("eval_every", ev.every)):
        check(isinstance(value, (int, np.integer)) and value >= 1, name, value, "a positive integer")
    check(isinstance(cfg.lr, (int, float)) and cfg.lr >= FLOAT32_TINY, "lr", cfg.lr,
          "a positive number float32 can hold (>= 1.2e-38; smaller ones train with a rate of 0)")
    check(isinstance(part.fraction, (int, float)) and 0 < part.fraction <= 1, "fraction", part.fraction,
          "a client sampling fraction in (0, 1]")
    check(cfg.optimizer in ("sgd", "adam"), "optimizer", cfg.optimizer, "'sgd' or 'adam'")
    check(cfg.momentum >= 0 and cfg.weight_decay >= 0, "momentum/weight_decay", (cfg.momentum, cfg.weight_decay),
          "non-negative numbers")
    check(cfg.device == "cpu" or cfg.device.startswith("cuda"), "device", cfg.device, "'cpu' or 'cuda[:n]'")
    if cfg.device.startswith("cuda"):
        check(torch.cuda.is_available(), "device", cfg.device, "'cpu' (no CUDA device is visible)")
    check_precision(cfg.precision, cfg.device)
    from fedlib.engine.evaluation import resolve_metric_sets
    from fedlib.engine.executors import EXECUTORS

    check(cfg.executor in EXECUTORS, "executor", cfg.executor, f"one of {', '.join(EXECUTORS)}")
    check(cfg.executor != "process" or cfg.device == "cpu", "executor", cfg.executor,
          "'sequential' or 'batched' on a CUDA device (the process executor trains on the CPU)")
    check(cfg.engine in ENGINES, "engine", cfg.engine, f"one of {', '.join(ENGINES)}")
    if cfg.engine == "flower":
        import importlib.util

        check(cfg.executor == "sequential", "executor", cfg.executor, "'sequential' with engine 'flower' (each Flower "
              "node trains the clients it is sent one after another; the other executors serve engine 'inprocess')")
        check(importlib.util.find_spec("flwr") is not None and importlib.util.find_spec("ray") is not None, "engine",
              cfg.engine, "'inprocess' (Flower is not installed: pip install -e '.[flower]')")
    if cfg.secure_aggregation is not None:
        check(cfg.secure_aggregation == "secagg+", "secure_aggregation", cfg.secure_aggregation, "'secagg+' or None")
        check(cfg.engine == "flower", "secure_aggregation", cfg.secure_aggregation,
              "only None with engine 'inprocess' (secure aggregation runs between Flower nodes: engine='flower')")
        served = ", ".join(secure_aggregation_groups()["served"])
        check(METHODS[cfg.method].sums_uploads(), "secure_aggregation", cfg.secure_aggregation,
              f"only None for {cfg.method}, whose server needs each client's upload, not only their sum (SecAgg+ "
              f"serves the methods whose server rule is FedAvg's weighted mean of the shared parts: {served})")
    check(cfg.workers is None or (isinstance(cfg.workers, (int, np.integer)) and cfg.workers >= 1), "workers",
          cfg.workers, "a positive integer or None")
    check(isinstance(cfg.backbone_input, (int, np.integer)) and cfg.backbone_input >= 16, "backbone_input",
          cfg.backbone_input, "an input size of at least 16 pixels")
    check(isinstance(ev.metrics, (list, tuple)), "metrics", ev.metrics, "a list of metric set names")
    check(ev.clients in ("all", "participants"), "eval_clients", ev.clients, "'all' or 'participants'")
    check(isinstance(ev.finetune_epochs, (int, np.integer)) and ev.finetune_epochs >= 0,
          "eval_finetune_epochs", ev.finetune_epochs, "a non-negative number of epochs")
    for name, value in part.own.items():   # a registered participation's field has its default's type
        kind = type(PARTICIPATION_FIELDS[name])
        check(type(value) is kind or (kind is float and type(value) is int), name, value, f"a {kind.__name__}")
    spec = part.spec()
    if spec.check is not None:
        spec.check(part.values(), cfg.num_clients, cfg.rounds)
    resolve_metric_sets(ev.metric_sets())
    cfg.built_method()  # validates the hyperparameters
