"""Nested values as a JSON tree plus a list of tensors: what fedlib writes to disk (checkpoints, client shards,
trained models) and sends to Flower nodes. Nothing is pickled, so reading a file or a message never runs code:
``torch.load(..., weights_only=True)`` reads the files, whose only objects are a string and a list of tensors.

A value is a tree of dicts, lists, tuples, tensors, NumPy arrays and scalars. Each tensor (or array) becomes a
reference ``{"T": n}`` (``{"N": n}`` for an array) to entry ``n`` of the tensor list; dict keys keep their type
(prototype dicts are keyed by class id); non-finite floats are kept by their ``repr``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch


class UnsendableValue(TypeError):
    """A value holds something fedlib does not know how to write without pickling it."""


def encode(obj, tensors: list, path: str = "value"):
    """The JSON-able tree of ``obj``; its tensors and arrays are appended to ``tensors``."""
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
        return {"D": [[encode(k, tensors, f"{path} key"), encode(v, tensors, f"{path}[{k!r}]")]
                      for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"U": [encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(obj)]
    raise UnsendableValue(f"{path} is a {type(obj).__name__}; fedlib writes tensors, arrays, numbers, strings, "
                          "None and dicts/lists/tuples of them")


def decode(node, tensor, array):
    """The value of an ``encode`` tree: ``tensor(n)`` and ``array(n)`` give entry ``n`` as a tensor / an array."""
    if isinstance(node, list):
        return [decode(v, tensor, array) for v in node]
    if not isinstance(node, dict):
        return node
    (tag, value), = node.items()
    if tag == "T":
        return tensor(value)
    if tag == "N":
        return array(value)
    if tag == "F":
        return float(value)
    if tag == "U":
        return tuple(decode(v, tensor, array) for v in value)
    if tag == "D":
        return {_hashable(decode(k, tensor, array)): decode(v, tensor, array) for k, v in value}
    raise ValueError(f"unknown tag {tag!r} in a fedlib tree")


def _hashable(key):
    return tuple(_hashable(k) for k in key) if isinstance(key, (list, tuple)) else key


FORMAT = "fedlib.tree/1"


def save(obj, file) -> None:
    """Write ``obj`` to ``file`` (a path or a binary file) as its tree and tensors (NumPy arrays as tensors)."""
    tensors: list = []
    tree = json.dumps(encode(obj, tensors))
    torch.save({"format": FORMAT, "tree": tree,
                "tensors": [torch.from_numpy(np.ascontiguousarray(t)) if isinstance(t, np.ndarray) else t
                            for t in tensors]}, file)


def load(path: str | Path, map_location=None):
    """Read what ``save`` wrote, without unpickling anything (``weights_only=True``); tensors on ``map_location``.
    A file in another format (an older fedlib's pickled checkpoint, a crafted pickle) raises ``ValueError``."""
    try:
        data = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:   # weights_only refuses any global it does not know: nothing was run
        raise ValueError(f"not a fedlib tree file ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})") from None
    if not (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("tree"), str)
            and isinstance(data.get("tensors"), list)):
        raise ValueError(f"not a fedlib tree file (format {data.get('format') if isinstance(data, dict) else None!r})")
    tensors = data["tensors"]
    try:
        return decode(json.loads(data["tree"]), lambda n: tensors[n], lambda n: tensors[n].cpu().numpy())
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
        raise ValueError(f"not a fedlib tree file (its tree does not decode: {type(exc).__name__}: {exc})") from None
