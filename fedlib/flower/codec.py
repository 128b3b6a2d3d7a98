"""fedlib messages <-> Flower records.

A message (a client task, a client result) is a tree of dicts, lists, tuples, tensors, NumPy arrays
and scalars. Its tensors travel as the ``Array`` entries of an ``ArrayRecord`` (Flower's own tensor
format: dtype, shape, bytes), its structure and scalars as one JSON string in a ``ConfigRecord``, in which
each tensor is a reference ``{"T": n}`` to entry ``n``. Dict keys keep their type (prototype dicts are keyed
by class id). Nothing is pickled: a receiver never runs code it was sent.
"""
from __future__ import annotations

import json
import math

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

TREE, TENSORS = "fedlib.tree", "fedlib.tensors"


class UnsendableValue(TypeError):
    """A message holds a value fedlib does not know how to send."""


def _encode(obj, tensors: list, path: str):
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return {"T": len(tensors) - 1}
    if isinstance(obj, np.ndarray):
        tensors.append(obj)
        return {"N": len(tensors) - 1}
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return value if math.isfinite(value) else {"F": repr(value)}
    if isinstance(obj, dict):
        return {"D": [[_encode(k, tensors, f"{path} key"), _encode(v, tensors, f"{path}[{k!r}]")]
                      for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"U": [_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(obj)]
    raise UnsendableValue(f"{path} is a {type(obj).__name__}; fedlib sends tensors, arrays, numbers, strings, "
                          "None and dicts/lists/tuples of them")


def _decode(node, arrays: ArrayRecord, device):
    if isinstance(node, list):
        return [_decode(v, arrays, device) for v in node]
    if not isinstance(node, dict):
        return node
    (tag, value), = node.items()
    if tag == "T":
        return torch.from_numpy(arrays[str(value)].numpy().copy()).to(device)
    if tag == "N":
        return arrays[str(value)].numpy().copy()
    if tag == "F":
        return float(value)
    if tag == "U":
        return tuple(_decode(v, arrays, device) for v in value)
    if tag == "D":
        return {_hashable(_decode(k, arrays, device)): _decode(v, arrays, device) for k, v in value}
    raise ValueError(f"unknown tag {tag!r} in a fedlib message")


def _hashable(key):
    return tuple(_hashable(k) for k in key) if isinstance(key, (list, tuple)) else key


def to_records(message, name: str = "message") -> RecordDict:
    """A fedlib message as a RecordDict of one ArrayRecord (tensors) and one ConfigRecord (structure)."""
    tensors: list = []
    tree = _encode(message, tensors, name)
    arrays = {str(i): (Array.from_torch_tensor(t) if isinstance(t, torch.Tensor) else Array.from_numpy_ndarray(t))
              for i, t in enumerate(tensors)}
    return RecordDict({TENSORS: ArrayRecord(arrays), TREE: ConfigRecord({"json": json.dumps(tree)})})


def from_records(records: RecordDict, device="cpu"):
    """The fedlib message a RecordDict of ``to_records`` holds, its tensors on ``device``."""
    tree = records.config_records[TREE]["json"]
    assert isinstance(tree, str), "a fedlib message holds its tree as a JSON string"
    return _decode(json.loads(tree), records.array_records[TENSORS], device)
