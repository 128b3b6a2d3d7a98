"""What travels between server and clients is declared: every method's broadcast and upload keys are among the
keys its class hierarchy declares (``Method.declared``), which the Flower engine enforces on the wire; and what
every method sends passes the wire audit (``fedlib.flower.audit``: no client state, raw data or per-sample
tensor), as the Flower engine's messages would carry it."""
import dataclasses

import pytest

from fedlib.experiment import build, make_config
from fedlib.flower.audit import audit
from fedlib.methods import METHODS

DIGITS = dict(dataset="digits", partition={"name": "dirichlet", "alpha": 1.0, "min_size": 30}, num_clients=4,
              rounds=2, local_epochs=1, batch_size=32, lr=0.05)
NEEDS = {"fedic": {"partition": {**DIGITS["partition"], "server": 10},
                   "hyper": {"server_steps": 2, "distill_steps": 2}},
         "creff": {"hyper": {"match_epochs": 2, "crt_epochs": 1}}}


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_sends_only_the_keys_it_declares(name):
    fed = build(make_config(method=name, **{**DIGITS, **NEEDS.get(name, {})}))
    method, sent = fed.method, {"broadcast": set(), "upload": set()}
    wire: list = []   # each broadcast and upload as the Flower engine's train messages would carry it
    broadcast, upload = method.broadcast, method.upload

    def recording_broadcast(server, client_id):
        msg = broadcast(server, client_id)
        sent["broadcast"] |= set(msg)
        task = {"client_id": client_id, "received": msg, "trained_in": None}
        wire.append(("to node", "train", 0, {"round": server.round, "tasks": [task]}))
        return msg

    def recording_upload(ctx, models, result):
        up = upload(ctx, models, result)
        sent["upload"] |= set(up)
        reply = {"client_id": ctx.client_id, "upload": up, "result": dataclasses.asdict(result)}
        wire.append(("from node", "train", 0, {"round": ctx.round, "results": [reply], "diverged": {}}))
        return up

    method.broadcast, method.upload = recording_broadcast, recording_upload
    fed.run()
    assert sent["upload"], f"{name} uploaded nothing in two rounds"
    undeclared = {kind: sorted(sent[kind] - type(method).declared(kind)) for kind in sent}
    assert not any(undeclared.values()), f"{name} sends keys its class does not declare: {undeclared}"
    audit(wire, fed)
