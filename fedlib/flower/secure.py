"""SecAgg+ (Bell et al., CCS 2020) between fedlib's Flower nodes, with Flower's own protocol: the server's
``SecAggPlusWorkflow`` stages and the nodes' ``secaggplus_mod``.

A node is one SecAgg+ participant. It trains its clients of the round as without secure aggregation (their
models and private states stay in its slots), averages their uploads with the method's own rule (the
sample-weighted mean of ``Method.aggregate``) and gives the protocol that one vector, weighted by its clients'
sample count; the protocol quantizes it, masks it and sends only the masked vector. The server unmasks the
weighted mean over the nodes, never one node's vector, and hands the method that mean as the upload of every
client that took part, so that ``Method.aggregate`` (a weighted mean of equal vectors) returns it unchanged.
It serves the methods whose server needs only that mean (``Method.sums_uploads``); the config refuses others.

Flower quantizes with stochastic rounding to 2**22 levels over [-CLIPPING, CLIPPING]: a run differs from the
in-process one by about 1e-5 per parameter and round, not by float rounding alone.
"""
from __future__ import annotations

import json

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, FitIns, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common import recorddict_compat as compat
from flwr.server.compat.legacy_context import LegacyContext
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey
from flwr.server.workflow.secure_aggregation.secaggplus_workflow import WorkflowState

from fedlib.aggregate import weighted_average
from fedlib.errors import ClientFailed

CLIPPING = 8.0                 # SecAgg+'s clipping range: every averaged parameter must lie in [-8, 8]
SHARES, THRESHOLD = 1.0, 0.5   # every node shares its keys with all others; half of them can unmask a node
NODE_REPORT = "fedlib.node"    # the node's clear-text report (its clients' loss and steps), in the FitRes metrics


def asks_secure(msg: Message) -> bool:
    """Whether a train message is a stage of SecAgg+."""
    return msg.metadata.message_type == MessageType.TRAIN and RECORD_KEY_CONFIGS in msg.content.config_records


def secure_when_asked(msg: Message, context: Context, call_next):
    """The ClientApp's mod: SecAgg+'s own (``secaggplus_mod``) for the messages of its stages, nothing otherwise."""
    return secaggplus_mod(msg, context, call_next) if asks_secure(msg) else call_next(msg, context)


# ---------------------------------------------------------------------- node side
def node_vector(received: dict, uploads: list[dict], report: dict, client_ids: list[int]) -> RecordDict:
    """The FitRes ``secaggplus_mod`` masks: the sample-weighted mean of this node's clients' uploaded parameters
    (zeros of the broadcast's shapes, weight 0, when none of them finished), weighted by their samples."""
    if uploads:
        mean = weighted_average([u["params"] for u in uploads], [u["n"] for u in uploads])
        weight = int(sum(int(u["n"]) for u in uploads))
    else:
        mean, weight = {k: torch.zeros_like(v) for k, v in received["params"].items()}, 0
    arrays = [v.detach().to("cpu", torch.float64).numpy() for v in mean.values()]
    beyond = [k for k, a in zip(mean, arrays) if a.size and np.abs(a).max() > CLIPPING]
    if beyond:
        raise ValueError(f"clients {client_ids}: parameters {beyond} hold values beyond +-{CLIPPING}, the range "
                         "SecAgg+ quantizes (they would be clipped): run without secure aggregation or at a smaller lr")
    report = {**report, "names": list(mean), "dtypes": [str(v.dtype).removeprefix("torch.") for v in mean.values()]}
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), weight, {NODE_REPORT: json.dumps(report)})
    return compat.fitres_to_recorddict(fitres, keep_input=False)


# ---------------------------------------------------------------------- server side
class _Participant:
    """What the workflow keeps of a node (a ClientProxy's ``node_id``)."""

    def __init__(self, node_id: int):
        self.node_id = node_id


class _Cohort:
    """The two calls of a Flower Strategy the workflow makes: the round's nodes, and what it unmasked."""

    def __init__(self, nodes: list[int]):
        self.nodes = nodes
        self.results: list[tuple[_Participant, FitRes]] = []
        self.failures: list = []

    def configure_fit(self, server_round, parameters, client_manager):
        return [(_Participant(n), FitIns(parameters, {})) for n in self.nodes]

    def aggregate_fit(self, server_round, results, failures):
        self.results, self.failures = results, failures
        return None, {}


class _Nodes:
    """The one call the workflow makes of a Flower ClientManager (how many nodes it may sample, for its log)."""

    def __init__(self, nodes: list[int]):
        self.nodes = nodes

    def num_available(self) -> int:
        return len(self.nodes)


class _FedlibTasks(SecAggPlusWorkflow):
    """SecAgg+ whose masked-vector stage carries each node fedlib's own train message (its clients' tasks)."""

    def __init__(self, messages: dict[int, RecordDict], **options):
        super().__init__(**options)
        self.messages = messages

    def setup_stage(self, grid, context, state) -> bool:
        ok = super().setup_stage(grid, context, state)
        state.nid_to_fitins = {nid: self.messages[nid] for nid in state.nid_to_fitins}
        return ok and self._forget_silent(state)

    def share_keys_stage(self, grid, context, state) -> bool:
        return super().share_keys_stage(grid, context, state) and self._forget_silent(state)

    @staticmethod
    def _forget_silent(state) -> bool:
        """A node that did not answer the setup or the key sharing never took part: it leaves the round. (Flower's
        stages would count it as dropped out at the unmasking and ask the others for key shares of it that nobody
        holds; only a node lost after it shared its keys is a dropout SecAgg+ recovers from.)"""
        state.sampled_node_ids = set(state.active_node_ids)
        active = state.active_node_ids
        state.nid_to_neighbours = {nid: nbs & active for nid, nbs in state.nid_to_neighbours.items() if nid in active}
        return True


def secure_round(grid, messages: dict[int, RecordDict], weight_bound: float, round_: int,
                 timeout: float | None) -> tuple[dict, list[dict]]:
    """Run SecAgg+ over the nodes of ``messages`` ({node: its train message}): (the weighted mean of the nodes'
    parameters as {name: tensor}, the reports of the nodes whose vectors it holds)."""
    if len(messages) < 2:
        raise ClientFailed(f"round {round_ + 1}: SecAgg+ needs the round's clients on two Flower nodes at least (they "
                           f"are on {len(messages)}); start more nodes, or run without secure aggregation")
    workflow = _FedlibTasks(messages, num_shares=SHARES, reconstruction_threshold=THRESHOLD, max_weight=weight_bound,
                            clipping_range=CLIPPING, timeout=timeout)
    cohort = _Cohort(sorted(messages))
    # the cohort stands in for a Strategy: it answers the two calls the workflow makes
    context = LegacyContext(Context(run_id=0, node_id=0, node_config={}, state=RecordDict(), run_config={}),
                            strategy=cohort, client_manager=_Nodes(sorted(messages)))  # type: ignore[arg-type]
    context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({WorkflowKey.CURRENT_ROUND: round_ + 1})
    context.state.array_records[MAIN_PARAMS_RECORD] = ArrayRecord()
    state = WorkflowState()
    for stage in (workflow.setup_stage, workflow.share_keys_stage, workflow.collect_masked_vectors_stage,
                  workflow.unmask_stage):
        if not stage(grid, context, state):
            why = "; ".join(str(f) for f in state.failures) or "too few nodes answered to unmask the sum"
            raise ClientFailed(f"round {round_ + 1}: SecAgg+ stopped in its {stage.__name__.removesuffix('_stage')} "
                               f"stage ({len(state.active_node_ids)} of {len(messages)} nodes active): {why}")
    if not cohort.results:
        raise ClientFailed(f"round {round_ + 1}: SecAgg+ unmasked no node's vector")
    reports = [json.loads(str(fitres.metrics[NODE_REPORT])) for _, fitres in cohort.results]
    arrays = parameters_to_ndarrays(cohort.results[0][1].parameters)
    names, dtypes = reports[0]["names"], reports[0]["dtypes"]
    mean = {}
    for name, a, d in zip(names, arrays, dtypes):
        value, dtype = torch.from_numpy(np.asarray(a, dtype=np.float64)), getattr(torch, d)
        mean[name] = value.to(dtype) if dtype.is_floating_point else value.round().to(dtype)
    return mean, reports
