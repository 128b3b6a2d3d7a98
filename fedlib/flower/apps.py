"""A fedlib experiment as a Flower ServerApp and ClientApp.

The ServerApp runs fedlib's one round loop (``Federation.run``: sampling, the method's broadcast and
aggregate hooks, evaluation, checkpoints) with a cohort executor that hands each client's task to a
Flower node and waits for its result: the round logic is not copied. The ClientApp runs the client
side of fedlib (``local_update``: the method's receive, local phases, upload) on the task it is sent.

What travels (as Flower records, see ``codec``): server -> node, the client task (client id, round,
what the method's broadcast sent this client, the client's state and model) and the experiment's
config; node -> server, the client's upload, trained models, state and losses. Each node builds
the experiment's data partition from the config (deterministic in the seed), so no data is sent.
A node is a worker that can train any client: client ``i`` goes to node ``i mod (number of nodes)``.
Between rounds the engine keeps each client's state and sends it with its task, as the ``process``
executor does; server hooks still see only uploads (the engine's seam).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import time

from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedlib.engine.client import Adaptation, ClientResult, ClientTask, local_update
from fedlib.engine.core import LocalResult
from fedlib.errors import ClientFailed, TrainingDiverged
from fedlib.flower.codec import from_records, to_records

RUN = "fedlib.run"
PURPOSES = ("update", "adapt")   # a round's local update | evaluation-time adaptation (FedAvg-FT, FedBABU)


# set by ``simulate``'s signal handlers (Ctrl-C, SIGTERM): the ServerApp's thread stops at its next poll
STOP = threading.Event()


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


# ---------------------------------------------------------------------- server side
class FlowerExecutor:
    """A cohort executor whose clients run on Flower nodes reached through ``grid``."""

    name = "flower"

    def __init__(self, grid: Grid, cfg, timeout: float | None = None, poll_s: float = 0.02, min_nodes: int = 1,
                 connect_s: float = 120.0):
        self.grid, self.timeout, self.poll_s = grid, timeout, poll_s
        self.min_nodes, self.connect_s = min_nodes, connect_s
        self.config = config_json(cfg)
        self.device = cfg.device

    def run(self, method, tasks: list[ClientTask]) -> list[ClientResult]:
        # a node runs the config's method; the evaluator may ask for that method's evaluation-time adaptation
        purpose = "adapt" if isinstance(method, Adaptation) else "update"
        nodes = self._nodes()
        pending: dict[str, int] = {}
        for i, task in enumerate(tasks):
            content = to_records(fields_of(task), f"client {task.client_id}'s task")
            content[RUN] = ConfigRecord({"config": self.config, "purpose": purpose})
            msg = Message(content=content, dst_node_id=nodes[task.client_id % len(nodes)], message_type="train")
            ids = list(self.grid.push_messages([msg]))
            if not ids:
                raise ClientFailed(f"client {task.client_id}: the task could not be sent to node "
                                   f"{nodes[task.client_id % len(nodes)]}")
            pending[ids[0]] = i
        results: list = [None] * len(tasks)
        diverged: dict[int, str] = {}
        deadline = None if self.timeout is None else time.time() + self.timeout
        while pending:
            for reply in self.grid.pull_messages(list(pending)):
                i = pending.pop(reply.metadata.reply_to_message_id)
                if reply.has_error():
                    reason = reply.error.reason or ""
                    raise ClientFailed(f"client {tasks[i].client_id} failed on its Flower node (round "
                                       f"{tasks[i].round + 1}): {first_error_line(reason)}", reason)
                content = from_records(reply.content, self.device)
                if "diverged" in content:
                    diverged[i] = content["diverged"]
                    continue
                results[i] = result_of(content)
            if pending and deadline is not None and time.time() > deadline:
                late = sorted(tasks[i].client_id for i in pending.values())
                raise ClientFailed(f"clients {late} did not answer within {self.timeout} s")
            if STOP.is_set():
                raise KeyboardInterrupt
            if pending:
                time.sleep(self.poll_s)
        if diverged:   # as in-process: the first client of the cohort whose loss became non-finite
            raise TrainingDiverged(diverged[min(diverged)])
        return results

    def _nodes(self) -> list[int]:
        """The connected nodes, once at least ``min_nodes`` are (nodes may register after the ServerApp
        starts, in a simulation as in a deployment)."""
        deadline = time.time() + self.connect_s
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if len(nodes) >= self.min_nodes:
                return nodes
            if STOP.is_set():
                raise KeyboardInterrupt
            if time.time() > deadline:
                raise ClientFailed(f"{len(nodes)} Flower node(s) connected after {self.connect_s:.0f} s; "
                                   f"{self.min_nodes} needed")
            time.sleep(0.2)

    def close(self) -> None:
        pass


def fields_of(obj) -> dict:
    """A dataclass's fields, shallow (``dataclasses.asdict`` would deep-copy every tensor)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def result_of(out: dict) -> ClientResult:
    """A node's decoded reply as the engine's ClientResult."""
    models = out["models"]
    return ClientResult(out["client_id"], out["upload"], models["local"], out["state"],
                        LocalResult(**out["result"]), models)


def serve(grid: Grid, cfg, *, checkpoint=None, progress: bool = False, desc: str = "", timeout: float | None = None,
          callbacks=(), min_nodes: int = 1):
    """Build the experiment around a Flower executor and run fedlib's round loop; the Federation."""
    from fedlib.experiment.wiring import build

    fed = build(cfg, progress=progress, checkpoint=checkpoint, desc=desc,
                executor=lambda setup, trainer, **_: FlowerExecutor(grid, cfg, timeout=timeout,
                                                                     min_nodes=min_nodes))
    fed.on_round.extend(callbacks)
    fed.run()
    return fed


def make_server_app(cfg, sink: dict, **options) -> ServerApp:
    """A ServerApp that runs ``cfg`` and leaves its Federation (or its exception) in ``sink``."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            sink["federation"] = serve(grid, cfg, **options)
        except BaseException as exc:  # handed to the caller: the simulation runtime only logs it
            sink["error"] = exc

    return app


# The ServerApp of a deployment (``flwr run``): the config comes from the run config, the result
# record goes to the path in ``out``.
server_app = ServerApp()


@server_app.main()
def deployed_server(grid: Grid, context: Context) -> None:
    from fedlib.experiment.records import record_of

    cfg = config_from_json(str(context.run_config["config"]))
    timeout = float(context.run_config.get("client-timeout", 0)) or None
    started = time.time()
    fed = serve(grid, cfg, progress=True, timeout=timeout, min_nodes=int(context.run_config.get("min-nodes", 1)))
    record = record_of(dataclasses.replace(cfg, engine="flower"), fed, started)
    out = str(context.run_config.get("out", "") or "fedlib-flower-record.json")
    with open(out, "w") as f:
        json.dump(record, f, indent=1, default=str)
    print(f"fedlib: record written to {os.path.abspath(out)}; final {record['final']}")


# ---------------------------------------------------------------------- client side
_BUILT: dict = {}   # per process: the experiment a node trains clients of (key -> Federation)


def _experiment(cfg):
    from fedlib.experiment.wiring import build

    key = cfg.key()
    if key not in _BUILT:
        _BUILT.clear()
        _BUILT[key] = build(dataclasses.replace(cfg, executor="sequential"), progress=False)
    return _BUILT[key]


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """Run one client's local update (or evaluation-time adaptation) with fedlib's client side."""
    run = msg.content.config_records[RUN]
    purpose = str(run["purpose"])
    if purpose not in PURPOSES:
        raise ValueError(f"purpose {purpose!r} is not one of {PURPOSES}")
    cfg = config_from_json(str(run["config"]))
    fed = _experiment(cfg)
    method = fed.method
    if purpose == "adapt":
        method = Adaptation(method, method.finetune_phase() or fed.evaluator.finetune)
    task = ClientTask(**from_records(msg.content, cfg.device))
    try:
        result = local_update(method, task, fed.setup, fed.trainer)
    except TrainingDiverged as exc:   # an outcome of training, not a failure of the node: sent back as such
        return Message(content=to_records({"client_id": task.client_id, "diverged": str(exc)},
                                          f"client {task.client_id}'s result"), reply_to=msg)
    reply = {"client_id": result.client_id, "upload": result.upload, "state": result.state,
             "result": fields_of(result.result), "models": result.models}
    return Message(content=to_records(reply, f"client {task.client_id}'s result"), reply_to=msg)
