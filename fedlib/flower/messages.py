"""What a Flower server and its nodes agree on: the run record's name, the keys of a client's private slot,
the config as JSON, the check of declared keys, which node holds which client, the size of a message."""
from __future__ import annotations

import json
import re

from flwr.app import RecordDict

from fedlib.errors import ConfigError

RUN = "fedlib.run"
TRAINED_IN = "fedlib.trained_in"     # the server's receipt in a client's slot: the round it last trained in
PRIVATE = "fedlib.client"            # prefix of a client's private slot in its node's Context.state

class UndeclaredKey(ValueError):
    """A method sent a key its class does not declare."""


def first_error_line(report: str) -> str:
    """The client's own exception ("RuntimeError: disk full") out of a node's error report, which wraps it
    in the runtime's tracebacks; the report's last line when none is found."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in report.splitlines()]
    lines = [line for line in lines if line]
    for line in lines:
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b[^:]*: \S", line) and \
                "ClientAppException" not in line and "RayTaskError" not in line:
            return line
    return lines[-1] if lines else "(no report)"


def config_json(cfg) -> str:
    return json.dumps(cfg.flat(), default=str)


def config_from_json(text: str):
    from fedlib.experiment.config import make_config

    return make_config(**json.loads(text))


def check_declared(method, kind: str, message: dict, client_id: int) -> None:
    """Refuse a broadcast or upload with a key the method does not declare (``Method.declared``)."""
    allowed = type(method).declared(kind)
    extra = sorted(set(message) - allowed)
    if extra:
        raise UndeclaredKey(f"{method.name}'s {kind} to/from client {client_id} holds {extra}, which "
                            f"{type(method).__name__} does not declare in `{kind}_keys` (declared: "
                            f"{sorted(allowed)}); declare what the paper sends, nothing else travels")


def held_clients(node_config, num_clients: int) -> list[int]:
    """The clients a node holds: its node config's ``clients`` ("3,7" or "0-4,9"), else in a simulation
    its ``partition-id`` p of ``num-partitions`` n (the clients i with i mod n = p)."""
    if "clients" in node_config:
        text = str(node_config["clients"])
        ids: list[int] = []
        try:
            for part in filter(None, (p.strip() for p in text.split(","))):
                lo, _, hi = part.partition("-")
                ids.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ConfigError("node config clients", text, "client ids such as '3,7' or '0-4,9'") from None
        bad = [i for i in ids if not 0 <= i < num_clients]
        if bad:
            raise ConfigError("node config clients", text, f"ids from 0 to {num_clients - 1} (the config has "
                                                           f"{num_clients} clients)")
        return sorted(set(ids))
    if "partition-id" in node_config:
        p, n = int(node_config["partition-id"]), int(node_config["num-partitions"])
        return list(range(p, num_clients, n))
    raise ConfigError("node config", dict(node_config), "clients='<ids>' (flower-supernode --node-config "
                                                        "\"clients='0,2'\") naming the clients this node holds")


def message_bytes(records: RecordDict) -> int:
    """The payload of a message: its tensors' bytes, its config records' bytes and text (SecAgg+'s keys, shares
    and masked vectors travel there as bytes)."""
    def size(value) -> int:
        if isinstance(value, bytes):
            return len(value)
        if isinstance(value, list):
            return sum(size(v) for v in value)
        return len(str(value))

    tensors = sum(len(a.data) for rec in records.array_records.values() for a in rec.values())
    return tensors + sum(size(v) for rec in records.config_records.values() for v in rec.values())
