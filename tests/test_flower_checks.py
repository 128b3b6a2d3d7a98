"""The server trusts no node (``fedlib.flower.checks``): a table of hostile replies, each refused in one line that
names the node, the client and the round, and the honest reply that passes."""
import math

import pytest
import torch

from fedlib.flower.checks import check_evaluate_reply, check_train_reply

SENT = [{"client_id": 3, "received": {"params": {"w": torch.zeros(2, 2), "b": torch.zeros(2)}}},
        {"client_id": 5, "received": {"params": {"w": torch.zeros(2, 2), "b": torch.zeros(2)}}}]
SIZES = {3: 40, 5: 60}
MODEL = {"w": torch.zeros(2, 2), "b": torch.zeros(2)}


def honest(t: int = 2) -> dict:
    return {"round": t, "diverged": {},
            "results": [{"client_id": i, "upload": {"params": {"w": torch.ones(2, 2), "b": torch.ones(2)}, "n": n},
                         "result": {"steps": 4, "loss": 0.5, "phase_losses": ()}} for i, n in ((3, 40), (5, 60))]}


def lying(change) -> dict:
    reply = honest()
    change(reply)
    return reply


HOSTILE = {
    "speaks for a client of another node": (lambda r: r["results"][1].update(client_id=7), "which it was not sent"),
    "drops a client from its reply": (lambda r: r["results"].pop(), "left client(s) [5] out"),
    "reports a client twice": (lambda r: r["results"].append(dict(r["results"][1])), "a client twice"),
    "replays an earlier round": (lambda r: r.update(round=0), "answered for round 0 when asked about round 3"),
    "sends NaN": (lambda r: r["results"][0]["upload"]["params"]["w"].fill_(math.nan), "NaN or infinite"),
    "sends inf": (lambda r: r["results"][0]["upload"]["params"]["b"].fill_(math.inf), "NaN or infinite"),
    "sends a wrong shape": (lambda r: r["results"][0]["upload"]["params"].update(w=torch.ones(3, 2)),
                            "is (3, 2) torch.float32, the model it was sent has (2, 2)"),
    "sends integers": (lambda r: r["results"][0]["upload"]["params"].update(b=torch.ones(2, dtype=torch.int64)),
                       "torch.int64"),
    "sends a parameter the model lacks": (lambda r: r["results"][0]["upload"]["params"].update(rogue=torch.ones(1)),
                                          "parameters the model does not: ['rogue']"),
    "claims 10^9 samples": (lambda r: r["results"][0]["upload"].update(n=10 ** 9), "a sample count of 1000000000"),
    "claims a negative count": (lambda r: r["results"][1]["upload"].update(n=-5), "a sample count of -5"),
    "reports a NaN loss": (lambda r: r["results"][0]["result"].update(loss=math.nan), "a training report"),
    "sends no results": (lambda r: r.pop("results"), "without its results"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_round_reply_is_refused_naming_the_node_the_client_and_the_round(case):
    change, words = HOSTILE[case]
    problem = check_train_reply(9, 2, SENT, lying(change), SIZES, MODEL)
    assert problem and problem.startswith("node 9") and "\n" not in problem, case
    if words:
        assert words in problem, (case, problem)


def test_the_honest_reply_and_a_diverged_client_pass():
    assert check_train_reply(9, 2, SENT, honest(), SIZES, MODEL) == ""
    part = honest()
    part["results"][0]["upload"]["params"].pop("b")   # a part of the model (a method that shares the body only)
    assert check_train_reply(9, 2, SENT, part, SIZES, MODEL) == ""
    diverged = honest()
    diverged["results"].pop()
    diverged["diverged"] = {5: "loss became nan"}   # an outcome of training, reported as such: not a lie
    assert check_train_reply(9, 2, SENT, diverged, SIZES, MODEL) == ""


def test_a_hostile_evaluation_reply_is_refused():
    counts = {"personal_local": [{"": torch.tensor([[3, 1], [0, 4]])}, {"": torch.tensor([[2, 0], [1, 5]])}]}
    good = {"round": 2, "confusions": counts}
    assert check_evaluate_reply(9, 2, SENT, ["personal_local"], good) == ""
    negative = {"round": 2, "confusions": {"personal_local": [{"": torch.tensor([[3, -1], [0, 4]])},
                                                               counts["personal_local"][1]]}}
    assert "negative or not finite" in check_evaluate_reply(9, 2, SENT, ["personal_local"], negative)
    short = {"round": 2, "confusions": {"personal_local": counts["personal_local"][:1]}}
    assert "one entry per client" in check_evaluate_reply(9, 2, SENT, ["personal_local"], short)
    assert "round 1 when asked" in check_evaluate_reply(9, 2, SENT, ["personal_local"], {**good, "round": 1})
    print(f"hostile-node table: {len(HOSTILE) + 3} hostile replies tried, every one refused in one line")
