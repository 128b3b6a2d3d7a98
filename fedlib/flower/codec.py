"""fedlib messages <-> Flower records.

A message (a client task, a client result) is a tree of dicts, lists, tuples, tensors, NumPy arrays
and scalars (``fedlib.serial``: the format fedlib's files use too). Its tensors travel as the ``Array`` entries
of an ``ArrayRecord`` (Flower's own tensor format: dtype, shape, bytes), its structure and scalars as one JSON
string in a ``ConfigRecord``. Nothing is pickled: a receiver never runs code it was sent.
"""
from __future__ import annotations

import json

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedlib.serial import UnsendableValue, decode, encode

__all__ = ["TREE", "TENSORS", "UnsendableValue", "to_records", "from_records"]

TREE, TENSORS = "fedlib.tree", "fedlib.tensors"


def _array(value) -> Array:
    return Array.from_torch_tensor(value) if isinstance(value, torch.Tensor) else Array.from_numpy_ndarray(value)


def to_records(message, name: str = "message") -> RecordDict:
    """A fedlib message as a RecordDict of one ArrayRecord (tensors) and one ConfigRecord (structure)."""
    tensors: list = []
    tree = encode(message, tensors, name)
    arrays = {str(i): _array(t) for i, t in enumerate(tensors)}
    return RecordDict({TENSORS: ArrayRecord(arrays), TREE: ConfigRecord({"json": json.dumps(tree)})})


def from_records(records: RecordDict, device="cpu"):
    """The fedlib message a RecordDict of ``to_records`` holds, its tensors on ``device``."""
    tree = records.config_records[TREE]["json"]
    assert isinstance(tree, str), "a fedlib message holds its tree as a JSON string"
    arrays = records.array_records[TENSORS]
    return decode(json.loads(tree), lambda n: torch.from_numpy(arrays[str(n)].numpy().copy()).to(device),
                  lambda n: arrays[str(n)].numpy().copy())
