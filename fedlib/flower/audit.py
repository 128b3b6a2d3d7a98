"""The audit of what a Flower run sent: every message the server sent and received (``serverapp.WIRE_TAP``) holds
only its envelope's keys and the method's declared broadcast and upload keys, no key naming a model, state or
data at any depth, no tensor with a per-sample dimension (a client's number of training or test samples), and
evaluation replies are integer confusion counts; under SecAgg+ no node's reply carries a tensor in the clear.
The tests run it on simulated runs; a deployment runs it with the run config ``audit = true``."""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

ENVELOPES = {("to node", "query"): set(), ("from node", "query"): {"clients"},
             ("to node", "train"): {"round", "tasks"}, ("from node", "train"): {"round", "results", "diverged"},
             ("to node", "evaluate"): {"round", "tasks", "jobs", "global", "anonymous"},
             ("from node", "evaluate"): {"round", "confusions"}}
PRIVATE_NAMES = {"state", "model", "models", "personal", "x", "y", "features", "labels", "data"}
PROTOCOL = {"configs", "arrays"}   # a SecAgg+ message as the tap sees it: its records' names and sizes


class WireViolation(AssertionError):
    """A message held something that must not travel."""


def _require(condition: bool, what: str) -> None:
    if not condition:
        raise WireViolation(what)


def audit(wire: list, fed) -> dict[tuple[str, str], int]:
    """Check every message of ``wire`` (as ``serverapp.WIRE_TAP`` records them) of a run of the Federation ``fed``;
    the number of messages of each (direction, kind). Raises ``WireViolation`` naming the first offence."""
    from fedlib.engine.core import LocalResult

    method_cls = type(fed.method)
    sizes = {int(len(i)) for i in fed.setup.train_idx} | {int(len(i)) for i in fed.data.test_idx}
    weights = {d for p in fed.trainer.model.parameters() for d in p.shape}
    per_sample = sizes - weights
    broadcast, upload = method_cls.declared("broadcast"), method_cls.declared("upload")
    result_fields = {f.name for f in dataclasses.fields(LocalResult)}
    counts: dict[tuple[str, str], int] = {}

    def walk(obj, where):
        if isinstance(obj, dict):
            for k, v in obj.items():
                _require(k not in PRIVATE_NAMES, f"{where} holds a key {k!r}")
                walk(v, f"{where}.{k}")
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(v, f"{where}[{i}]")
        elif isinstance(obj, (torch.Tensor, np.ndarray)):
            _require(not per_sample & set(obj.shape), f"{where} has a per-sample dimension: shape {tuple(obj.shape)}")

    for direction, kind, node, content in wire:
        counts[(direction, kind)] = counts.get((direction, kind), 0) + 1
        where = f"a {kind} message {direction} {node}"
        if kind == "secagg+":
            if set(content) == PROTOCOL:   # the protocol's own records: keys, shares, masked vectors as bytes
                _require(direction == "to node" or sum(content["arrays"].values()) == 0,
                         f"{where} carries {content['arrays']} tensors in the clear")
                continue
            _require(direction == "to node" and set(content) == ENVELOPES[("to node", "train")],
                     f"{where} holds {sorted(content)}")
        else:
            _require(set(content) == ENVELOPES[(direction, kind)], f"{where} holds {sorted(content)}")
        for task in content.get("tasks", []) if direction == "to node" else []:
            _require(set(task) == {"client_id", "received", "trained_in"}, f"{where}: a task holds {sorted(task)}")
            _require(set(task["received"]) <= broadcast, f"{where}: undeclared broadcast {sorted(task['received'])}")
            walk(task["received"], "received")
        for r in content.get("results", []):
            _require(set(r) == {"client_id", "upload", "result"} and set(r["upload"]) <= upload
                     and set(r["result"]) == result_fields, f"{where}: a result holds {sorted(r)}")
            walk(r["upload"], "upload")
        for family, per_client in content.get("confusions", {}).items():
            K = fed.data.num_classes
            _require(all(c.shape == (K, K) and c.dtype.kind in "iu" for v in per_client for c in v.values()),
                     f"{where}: {family} is not K x K integer counts")
        walk(content.get("global"), "global model")
        walk(content.get("anonymous"), "anonymous broadcast")
    return counts
