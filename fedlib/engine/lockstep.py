"""Many experiments in one batched step: federations that share a method (one instance), a model
architecture and the data tensors advance round by round together, and every client of every run
trains in the same vmapped step (``train_cohorts``).

Each federation keeps everything that is its own: seed, partition, client sampling, server hooks on
its own uploads, evaluation, history and checkpoint; it may start at another round (resumed from its
checkpoint) and run for another number of rounds. A run whose loss becomes non-finite, or whose hooks
raise, leaves the group with its exception; the others go on.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fedlib.engine.batched import BatchedTrainer
from fedlib.engine.executors import Cohort, train_cohorts
from fedlib.engine.loop import Federation


@dataclass
class Member:
    federation: Federation
    next_round: int = 0
    error: BaseException | None = None
    bar: Any = None   # its tqdm progress bar, if any
    done: bool = False
    in_round: bool = False   # between open_round and end_round: its state is not a finished round's


class Lockstep:
    """Advances ``federations`` together. ``batched``: the trainer their batched executor shares (built on
    the data tensors every federation's trainer holds)."""

    def __init__(self, federations: list[Federation], batched: BatchedTrainer):
        first = federations[0].trainer
        for fed in federations:
            if fed.trainer.x is not first.x or fed.method is not federations[0].method:
                raise ValueError("run-batched federations must share the data tensors and the method instance")
        self.members = [Member(fed) for fed in federations]
        self.batched = batched

    def active(self) -> list[Member]:
        return [m for m in self.members if not m.done]

    def run(self, on_round=None, on_end=None, deadline: float | None = None) -> list[Member]:
        """Run every federation to its last round. ``on_round(member)`` after each of a member's rounds,
        ``on_end(member)`` once when it finished or failed; ``deadline`` (time.time()): start no round after
        it (members then stay unfinished, their checkpoints hold the last finished round)."""
        for m in self.members:
            m.federation._resume()
            m.next_round = m.federation.start_round
            m.done = m.next_round >= m.federation.rounds
            m.bar = m.federation.progress_bar()
            if m.done and on_end:
                on_end(m)
        try:
            while self.active() and (deadline is None or time.time() < deadline):
                self.step(on_round, on_end)
        finally:
            for m in self.members:
                if m.bar is not None:
                    m.bar.close()
                m.federation.executor.close()
                if not m.done and not m.in_round:   # stopped by the deadline: keep every finished round
                    m.federation.flush(m.next_round)
        return self.members

    def step(self, on_round=None, on_end=None) -> None:
        """One round of every active member: one ``train_cohorts`` call trains all their clients."""
        members = self.active()
        started = time.perf_counter()
        cohorts = []
        for m in members:
            fed = m.federation
            m.in_round = True
            cohorts.append(Cohort(fed.method, fed.setup, fed.trainer, fed.open_round(m.next_round)))
        outcomes = train_cohorts(self.batched, cohorts)
        share = (time.perf_counter() - started) / len(members)   # each run is charged its share of the step
        for m, outcome in zip(members, outcomes):
            fed, t = m.federation, m.next_round
            own = time.perf_counter()
            try:
                if isinstance(outcome, BaseException):
                    raise outcome
                trained = fed.close_round(outcome)
                fed.end_round(t, trained, own - share)
            except Exception as exc:
                m.error, m.done = exc, True
                if on_end:
                    on_end(m)
                continue
            m.in_round = False
            if m.bar is not None:
                m.bar.update(1)
            m.next_round = t + 1
            if on_round:
                on_round(m)
            if m.next_round >= fed.rounds:
                m.done = True
                if on_end:
                    on_end(m)
