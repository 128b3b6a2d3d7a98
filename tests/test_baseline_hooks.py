"""Each baseline's distinctive hook against numbers computed by hand in the test's docstring.

Executor-equivalence tests cannot catch a formula every executor shares; these can. The model is a linear
map small enough to differentiate on paper: logits = x W^T with W = ``head.weight`` (2 classes, 2 features),
one sample x = (1, 0) of class 0, so logits = (W00, W10) and dCE/dW = (p - onehot(y)) x^T.
"""
import math

import pytest
import torch

from fedlib.engine.core import Batch, ClientContext, LocalResult, Out, Server
from fedlib.methods import Ditto, FedPer, FedProx, FedRep, Moon, Scaffold

X = torch.tensor([[1.0, 0.0]])
Y = torch.tensor([0])
BATCH = Batch(X, Y)
E = math.e


def context(received=None, state=None, model=None, size=10, lr=0.1, forward=None) -> ClientContext:
    return ClientContext(client_id=0, round=0, rounds=1, seed=0, num_classes=2, lr=lr, received=received or {},
                         state=state if state is not None else {}, model=model, counts=None, size=size, labels=None,
                         forward=forward or linear_forward)


def linear_forward(params, x):
    logits = x @ params["head.weight"].T
    return Out(z=x @ params["projector.weight"].T if "projector.weight" in params else x, logits=logits)


def loss_and_grad(method_loss, params: dict, ctx: ClientContext, key: str = "head.weight"):
    leaf = params[key].clone().requires_grad_(True)
    trained = {**params, key: leaf}
    loss = method_loss(linear_forward(trained, X), BATCH, trained, ctx)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.item(), grad


# ---------------------------------------------------------------------- FedProx
def test_fedprox_local_loss_adds_the_proximal_term_and_its_gradient():
    """W = I, w_global = 0, mu = 0.1. logits (1, 0): p = (e/(e+1), 1/(e+1)) = (0.7311, 0.2689),
    CE = log(1 + 1/e) = 0.3133; (mu/2) ||W - 0||^2 = 0.05 * 2 = 0.1; loss 0.4133.
    dCE/dW = [[p0 - 1, 0], [p1, 0]] = [[-0.2689, 0], [0.2689, 0]]; d prox/dW = mu W = [[0.1, 0], [0, 0.1]];
    the sum [[-0.1689, 0], [0.2689, 0.1]] (FedProx Eq. 2)."""
    method = FedProx(mu=0.1)
    W = torch.eye(2)
    ctx = context(received={"params": {"head.weight": torch.zeros(2, 2)}})
    loss, grad = loss_and_grad(method.local_loss, {"head.weight": W}, ctx)
    p1 = 1 / (E + 1)
    assert loss == pytest.approx(math.log(1 + 1 / E) + 0.1, abs=1e-6)
    assert torch.allclose(grad, torch.tensor([[-p1 + 0.1, 0.0], [p1, 0.1]]), atol=1e-6)


def test_fedprox_with_mu_zero_is_plain_cross_entropy():
    ctx = context(received={"params": {"head.weight": torch.full((2, 2), 5.0)}})
    loss, _ = loss_and_grad(FedProx(mu=0.0).local_loss, {"head.weight": torch.eye(2)}, ctx)
    assert loss == pytest.approx(math.log(1 + 1 / E), abs=1e-6)


# ---------------------------------------------------------------------- SCAFFOLD
def test_scaffold_loss_gradient_is_corrected_by_c_minus_c_i():
    """The corrected step g - c_i + c is the gradient of CE + <W, c - c_i>: with c = [[1, 2], [3, 4]] and
    c_i = [[0.5, 0.5], [0.5, 0.5]] the gradient is dCE/dW + [[0.5, 1.5], [2.5, 3.5]]."""
    method = Scaffold()
    c = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    c_i = torch.full((2, 2), 0.5)
    ctx = context(received={"params": {}, "control": {"head.weight": c}}, state={"control": {"head.weight": c_i}})
    _, grad = loss_and_grad(method.local_loss, {"head.weight": torch.eye(2)}, ctx)
    p1 = 1 / (E + 1)
    assert torch.allclose(grad, torch.tensor([[-p1, 0.0], [p1, 0.0]]) + c - c_i, atol=1e-6)


def test_scaffold_option_ii_control_update_and_server_rule():
    """Option II: c_i+ = c_i - c + (x - y_i) / (K lr). x = (1, 2), y = (0.5, 2.5), c = (0.1, 0.2),
    c_i = (0, 0.4), K = 5 steps, lr = 0.1: (x - y) / 0.5 = (1, -1), c_i+ = (0.9, -0.8), delta = (0.9, -1.2).
    Server with N = 4 clients, two uploading (the other delta (0.3, 0.4), n = 1 and 3):
    c = (0.1, 0.2) + ((0.9, -1.2) + (0.3, 0.4)) / 4 = (0.4, 0.0); x = the unweighted mean of the two models
    (Algorithm 1: x + (1/|S|) sum delta y_i, whatever their n) = ((0.5, 2.5) + (1.5, 0.5)) / 2 = (1.0, 1.5)."""
    method = Scaffold()
    x, c = torch.tensor([1.0, 2.0]), torch.tensor([0.1, 0.2])
    ctx = context(received={"params": {"w": x}, "control": {"w": c}},
                  state={"control": {"w": torch.tensor([0.0, 0.4])}}, size=1, lr=0.1)
    up = method.upload(ctx, {"local": {"w": torch.tensor([0.5, 2.5])}}, LocalResult(steps=5, loss=0.0))
    assert torch.allclose(ctx.state["control"]["w"], torch.tensor([0.9, -0.8]))
    assert torch.allclose(up["delta_control"]["w"], torch.tensor([0.9, -1.2]))

    server = Server(num_clients=4)
    method.init_server(server, {"w": torch.zeros(2)})
    server.state["control"]["w"] = c.clone()
    other = {"params": {"w": torch.tensor([1.5, 0.5])}, "n": 3, "delta_control": {"w": torch.tensor([0.3, 0.4])}}
    method.aggregate(server, {0: up, 2: other})
    assert torch.allclose(server.state["control"]["w"], torch.tensor([0.4, 0.0]), atol=1e-6)
    assert torch.allclose(server.state["global"]["w"], torch.tensor([1.0, 1.5]))


# ---------------------------------------------------------------------- Ditto
def test_ditto_trains_the_global_model_with_ce_then_the_personal_model_with_the_proximal_term():
    """Phase 1 trains the uploaded model w with plain CE; phase 2 the personal v with
    CE + (lam/2) ||v - w_global||^2: lam = 1, v = I, w_global = 0: loss = 0.3133 + 0.5 * 2 = 1.3133, and
    d/dv adds lam v = I to dCE/dv (Ditto Eq. 2)."""
    method = Ditto(lam=1.0)
    ctx = context(received={"params": {"head.weight": torch.zeros(2, 2)}}, model={"head.weight": torch.eye(2)})
    phases = method.local_phases(ctx)
    assert [p.target for p in phases] == ["local", "personal"]
    assert phases[0].loss is None and phases[1].loss == method.personal_loss
    loss, grad = loss_and_grad(method.personal_loss, {"head.weight": torch.eye(2)}, ctx)
    p1 = 1 / (E + 1)
    assert loss == pytest.approx(math.log(1 + 1 / E) + 1.0, abs=1e-6)
    assert torch.allclose(grad, torch.tensor([[-p1 + 1, 0.0], [p1, 1.0]]), atol=1e-6)


def test_ditto_personal_model_starts_at_w0_is_kept_and_is_what_the_client_evaluates():
    method = Ditto()
    w0 = {"head.weight": torch.eye(2)}
    ctx = context(received={"params": {"head.weight": torch.zeros(2, 2)}}, model=w0)
    models = method.receive(ctx)
    assert models["personal"] is w0                               # Algorithm 1: v^0 = w^0
    assert torch.equal(models["local"]["head.weight"], torch.zeros(2, 2))   # w starts from the global model
    v = {"head.weight": torch.full((2, 2), 3.0)}
    up = method.upload(ctx, {"local": {"head.weight": torch.ones(2, 2)}, "personal": v}, LocalResult(1, 0.0))
    assert torch.equal(up["params"]["head.weight"], torch.ones(2, 2))     # w is uploaded, v is not
    assert "personal" not in up and method.eval_params(ctx) is v


# ---------------------------------------------------------------------- FedRep and FedPer
def test_fedrep_trains_the_head_with_the_body_frozen_then_the_body_with_the_head_frozen():
    phases = FedRep(head_epochs=3, body_epochs=2).local_phases(context())
    assert [(p.trainable, p.epochs) for p in phases] == [(("head",), 3), (("body", "projector"), 2)]
    assert FedRep.shared == ("body", "projector") and FedRep.personalized and not FedRep.has_global_model


def test_fedbabu_trains_the_body_only_and_fine_tunes_the_whole_model_for_five_epochs_before_evaluation():
    """Oh et al.: the head stays at its random initialisation during training (only body and projector train
    and are averaged, so the global head is the initial one: 7 here); personalization fine-tunes the whole
    model for tau_f = 5 epochs with cross-entropy."""
    from fedlib.engine.core import cross_entropy_loss
    from fedlib.methods import FedBABU
    from fedlib.models import PARTS

    method = FedBABU()
    assert [p.trainable for p in method.local_phases(context())] == [("body", "projector")]
    tune = method.finetune_phase()
    assert (tune.trainable, tune.epochs, tune.loss) == (PARTS, 5, cross_entropy_loss)
    init = {"body.w": torch.zeros(1), "projector.w": torch.zeros(1), "head.w": torch.full((1,), 7.0)}
    server = Server(num_clients=2)
    method.init_server(server, init)
    ups = {i: method.upload(context(size=n), {"local": {k: torch.full((1,), v) for k in init}}, LocalResult(1, 0.0))
           for i, (n, v) in enumerate([(1, 0.0), (3, 4.0)])}
    method.aggregate(server, ups)
    assert server.state["global"]["body.w"].item() == pytest.approx(3.0)
    assert method.global_params(server)["head.w"].item() == 7.0


@pytest.mark.parametrize("method", [FedPer(), FedRep()])
def test_shared_parts_only_are_broadcast_uploaded_and_averaged(method):
    """Server: body and projector averaged by sample counts (1 and 3: (0 + 3 * 4) / 4 = 3), the head
    never leaves a client: the server's copy stays at init and is not broadcast."""
    init = {"body.w": torch.zeros(1), "projector.w": torch.zeros(1), "head.w": torch.full((1,), 7.0)}
    server = Server(num_clients=2)
    method.init_server(server, init)
    assert set(method.broadcast(server, 0)["params"]) == {"body.w", "projector.w"}
    ups = {i: method.upload(context(size=n), {"local": {k: torch.full((1,), v) for k in init}},
                            LocalResult(1, 0.0)) for i, (n, v) in enumerate([(1, 0.0), (3, 4.0)])}
    assert all(set(u["params"]) == {"body.w", "projector.w"} for u in ups.values())
    method.aggregate(server, ups)
    assert server.state["global"]["body.w"].item() == pytest.approx(3.0)
    assert server.state["global"]["head.w"].item() == 7.0
    mine = {"body.w": torch.zeros(1), "projector.w": torch.zeros(1), "head.w": torch.full((1,), -1.0)}
    ctx = context(received=method.broadcast(server, 0), model=mine)
    assert method.eval_params(ctx)["head.w"].item() == -1.0        # its own head, the averaged body
    assert method.eval_params(ctx)["body.w"].item() == pytest.approx(3.0)


# ---------------------------------------------------------------------- MOON
def test_moon_model_contrastive_term_by_hand():
    """z = (1, 0); the global model maps x = (1, 0) to z_glob = (1, 0) (projector I), the previous model to
    z_prev = (0, 1) (projector [[0, 1], [1, 0]]). tau = 0.5: sim/tau = 2 and 0, so
    l_con = -log(e^2 / (e^2 + e^0)) = log(1 + e^-2) = 0.1269; mu = 2: loss = CE + 0.2539 (MOON Eq. 3-4).
    On a client's first round the previous model is the global one: l_con = log 2."""
    method = Moon(mu=2.0, tau=0.5)
    head = torch.eye(2)
    teacher = {"head.weight": head, "projector.weight": torch.eye(2)}
    previous = {"head.weight": head, "projector.weight": torch.tensor([[0.0, 1.0], [1.0, 0.0]])}
    out = Out(z=torch.tensor([[1.0, 0.0]]), logits=X @ head.T)
    ce = math.log(1 + 1 / E)
    ctx = context(received={"params": teacher}, state={"previous": previous})
    loss = method.local_loss(out, BATCH, teacher, ctx).item()
    assert loss == pytest.approx(ce + 2 * math.log(1 + math.exp(-2)), abs=1e-6)
    first = context(received={"params": teacher}, state={"previous": None})
    assert method.local_loss(out, BATCH, teacher, first).item() == pytest.approx(ce + 2 * math.log(2), abs=1e-6)


def test_moon_keeps_the_trained_model_as_next_rounds_previous():
    method = Moon()
    state: dict = {}
    method.init_client(state, {})
    assert state["previous"] is None
    trained = {"head.weight": torch.ones(2, 2)}
    method.upload(context(state=state), {"local": trained}, LocalResult(1, 0.0))
    assert state["previous"] is trained



# ---------------------------------------------------------------------- FedProto's server
@pytest.mark.parametrize("weights, expected", [("counts", [0.75, 0.25]), ("uniform", [0.5, 0.5])])
def test_fedproto_global_prototypes_weighted_by_counts_or_uniformly(weights, expected):
    """Class 0: client A holds 3 samples with prototype (1, 0), client B 1 sample with (0, 1); class 1 only B,
    (2, 2). Eq. 6 (counts): C_bar^(0) = (3 (1, 0) + 1 (0, 1)) / 4 = (0.75, 0.25); the official code's plain mean
    over the clients holding the class: (0.5, 0.5). Class 1 is (2, 2) either way; a class nobody holds is absent."""
    from fedlib.methods import make_method

    method = make_method("fedproto", proto_weights=weights)
    server = Server(num_clients=2, num_classes=3)
    method.init_server(server, {"w": torch.zeros(1)})
    ups = {0: {"protos": torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]), "counts": torch.tensor([3, 0, 0])},
           1: {"protos": torch.tensor([[0.0, 1.0], [2.0, 2.0], [0.0, 0.0]]), "counts": torch.tensor([1, 4, 0])}}
    method.aggregate(server, ups)
    assert torch.allclose(server.state["protos"][0], torch.tensor(expected))
    assert torch.allclose(server.state["protos"][1], torch.tensor([2.0, 2.0]))
    assert server.state["present"].tolist() == [True, True, False]


def test_a_hyperparameter_added_later_keeps_the_cache_key_at_its_default():
    """FedProto's proto_weights came after committed records: at its default the key is the one the committed
    FedPCL records were made under; another value gives another key."""
    from fedlib.experiment import make_config

    plain = make_config(method="fedproto")
    assert make_config(method="fedproto", hyper={"proto_weights": "counts"}).key() == plain.key()
    assert make_config(method="fedproto", hyper={"proto_weights": "uniform"}).key() != plain.key()
    assert make_config(method="fedproto", drop_last=False).key() == plain.key()
    assert make_config(method="fedproto", drop_last=True).key() != plain.key()
