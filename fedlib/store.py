"""File primitives, the one place fedlib writes files: every write goes to a temporary file in the target's folder,
is flushed to disk and renamed over the target, so a reader sees the old file or the complete new one (a full disk
or a kill in the middle leaves the old one); an unreadable cache entry is set aside for inspection; a committed JSON
record is read through one check."""
from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` to a temporary file unique to this process beside ``path``, fsync it, then rename it to
    ``path`` atomically; an ``OSError`` (full disk, read-only folder) leaves ``path`` as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def read_record(path: Path, valid: Callable[[dict], bool], what: str, wanted: str):
    """The JSON object committed at ``path`` (None where there is none), if ``valid`` accepts it; one that does not
    parse, is not an object, or is refused is one ConfigError: ``what`` it is, the file, ``wanted`` (what it should
    hold and how to restore it)."""
    from fedlib.errors import ConfigError

    if not path.exists():
        return None
    try:
        answer = json.loads(path.read_text())
        ok = isinstance(answer, dict) and bool(valid(answer))
    except (OSError, ValueError, KeyError, TypeError, IndexError, RecursionError):
        ok = False
    if not ok:
        raise ConfigError(f"{what} {path}", path.name, wanted)
    return answer


def atomic_json(path: Path, obj, default=str, **dumps) -> None:
    """``obj`` as JSON (``dumps``: json.dumps options, indent 1 unless given) through ``atomic_write``."""
    atomic_text(path, json.dumps(obj, default=default, **{"indent": 1, **dumps}))


def save_tree(obj, path: Path) -> None:
    """``obj`` as a ``fedlib.serial`` file (a JSON tree and tensors: read back without unpickling anything), written
    through a Python file, so that a full disk or a read-only folder is an ``OSError`` naming the file (PyTorch's
    own writer reports them as RuntimeError)."""
    from fedlib import serial

    with open(path, "wb") as f:
        serial.save(obj, f)


def atomic_save(obj, path: Path) -> None:
    """``save_tree`` through ``atomic_write``."""
    atomic_write(path, lambda tmp: save_tree(obj, tmp))


def irregular(path: Path) -> bool:
    """``path`` exists and is not a regular file: a folder, a FIFO (opening it waits forever), a device (reading
    /dev/zero never ends) or a link; never opened."""
    path = Path(path)
    return path.is_symlink() or (path.exists() and not path.is_file())


def set_aside(path: Path) -> Path:
    """Rename an unreadable cache entry to ``<name>.corrupt-<time>`` (kept for inspection)."""
    path = Path(path)
    target = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    if path.exists() or path.is_symlink():
        os.replace(path, target)
    return target


def env_folder(name: str, default: Path) -> Path:
    """The folder an environment variable names (``~`` expanded, as a shell would: ``FEDLIB_CACHE='~/fc'`` is the
    home's ``fc``, not a folder named ``~``), else ``default``."""
    value = os.environ.get(name)
    return Path(os.path.expanduser(value)) if value else default
