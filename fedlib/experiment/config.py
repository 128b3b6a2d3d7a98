"""An experiment's configuration: its fields, scales, validation (bad configurations caught before any
data is loaded), and the cache key."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedlib.engine.protocol import EvaluationPlan, LocalTraining, Participation, UniformParticipation
from fedlib.errors import check, check_fields

DEFAULT_CACHE = Path(os.environ.get("FEDLIB_CACHE", Path(__file__).resolve().parents[2] / ".fedlib-cache"))

# Scales override the experiment's training budget; everything else stays as configured.
SCALES: dict[str, dict[str, Any]] = {
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

    # the protocol objects the engine runs; the fields stay flat because they are the cache key of every record
    def local_training(self) -> LocalTraining:
        return LocalTraining(self.local_epochs, self.batch_size, self.lr, self.optimizer, self.momentum,
                             self.weight_decay)

    def participation(self) -> Participation:
        if self.late_clients:   # FedPRP Table VII: its own participation, from its own module
            from fedlib.methods.fedprp import LateClients

            return LateClients(self.late_clients, self.late_round, self.fraction)
        return UniformParticipation(self.fraction)

    def evaluation_plan(self) -> EvaluationPlan:
        return EvaluationPlan(self.eval_every, tuple(self.metric_sets()), self.global_test_size,
                              self.eval_clients == "participants", self.average_global, self.eval_finetune_epochs)

    def with_scale(self, scale: str | None) -> Config:
        if scale is None:
            return self
        check(scale in SCALES, "scale", scale, f"one of {', '.join(SCALES)}")
        return dataclasses.replace(self, **SCALES[scale])


FIELDS = {f.name for f in dataclasses.fields(Config)}
# fields whose default leaves results as they were before the field existed: omitted from the key then
OFF_BY_DEFAULT: dict[str, Any] = {"data_options": {}, "backbones": None, "metrics": [], "eval_clients": "all",
                                  "average_global": False, "late_clients": 0, "late_round": 0,
                                  "eval_finetune_epochs": 0}


ENGINES = ("inprocess", "flower")   # how clients run: fedlib.experiment.runner.ENGINE_RUNNERS


def make_config(**kwargs) -> Config:
    for key in kwargs:
        check(key in FIELDS, key, kwargs[key], f"a config field: {', '.join(sorted(FIELDS))}")
    return Config(**kwargs)


def validate(cfg: Config) -> None:
    """Catch bad configurations before any data is loaded or any training starts."""
    from fedlib.backbones import BACKBONES
    from fedlib.data import dataset_names
    from fedlib.data.partition import PARTITIONERS
    from fedlib.methods import METHODS, make_method
    from fedlib.models import MODELS

    check_fields(cfg)   # every field has its declared type: integers, finite numbers, strings, mappings
    check(0 <= cfg.seed < 2 ** 32, "seed", cfg.seed, "an integer in [0, 2**32 - 1]")
    check(cfg.global_test_size is None or cfg.global_test_size >= 1, "global_test_size", cfg.global_test_size,
          "a positive number of test samples, or None for the whole test set")

    check(cfg.method in METHODS, "method", cfg.method, f"one of {', '.join(METHODS)}")
    check(cfg.dataset in dataset_names(), "dataset", cfg.dataset, f"one of {', '.join(dataset_names())}")
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
