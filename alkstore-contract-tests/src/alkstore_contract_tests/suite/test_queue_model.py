"""Random interleavings of queue operations checked against a model.

A hypothesis state machine enqueues, claims (one and in batches), acks,
retries, fails, heartbeats and acks in batches, from two workers on two
stores, and after every step compares what the engine says with a model of
the contract: each ready job goes to exactly one claimer, in claim order;
settled handles are fenced; attempts and states add up.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

import alkstore
from alkstore import EnqueueOpts, QueueOpts
from alkstore.engine import StoreTarget, TestProvider
from alkstore_contract_tests.suite._api import StoreOpener


@dataclass
class ModelJob:
    id: int
    priority: int
    ready: int
    """When it turned ready, as a sequence number: enqueues and retries advance it."""
    state: str = "pending"
    attempts: int = 0
    max_attempts: int = 3


class QueueMachine(RuleBasedStateMachine):
    """Two stores on one target, one queue with long visibility (no lapses)."""

    provider: TestProvider
    api: str
    claimed = Bundle("claimed")

    def __init__(self) -> None:
        super().__init__()
        self.target: StoreTarget = self.provider.create_target()
        self.opener = StoreOpener(self.provider, self.api)
        self.stores = [self.opener.open(self.target) for _ in range(2)]
        self.queues = [s.queue("model", QueueOpts(visibility_timeout_s=300)) for s in self.stores]
        self.jobs: dict[int, ModelJob] = {}
        self.enqueued = 0
        self.clock = 0

    def teardown(self) -> None:
        self.opener.close()
        self.provider.drop_target(self.target)

    @initialize()
    def start(self) -> None:
        pass

    @rule(priority=st.integers(-2, 2), max_attempts=st.integers(1, 3), via=st.integers(0, 1))
    def enqueue(self, priority: int, max_attempts: int, via: int) -> None:
        opts = EnqueueOpts(priority=priority, max_attempts=max_attempts)
        job_id = self.queues[via].enqueue(self.enqueued, opts)
        assert job_id not in self.jobs
        self.clock += 1
        self.jobs[job_id] = ModelJob(job_id, priority, self.clock, max_attempts=max_attempts)
        self.enqueued += 1

    def _expected_claims(self, n: int) -> list[int]:
        pending = [j for j in self.jobs.values() if j.state == "pending"]
        pending.sort(key=lambda j: (-j.priority, j.ready, j.id))
        return [j.id for j in pending[:n]]

    @rule(target=claimed, via=st.integers(0, 1), n=st.integers(1, 3))
    def claim(self, via: int, n: int) -> object:
        expected = self._expected_claims(n)
        jobs = self.queues[via].claim_batch(f"worker-{via}", n)
        assert [job.id for job in jobs] == expected, "claim order or exclusivity broken"
        for job in jobs:
            model = self.jobs[job.id]
            model.state = "processing"
            model.attempts += 1
            assert job.attempts == model.attempts
        return jobs

    @rule(jobs=consumes(claimed))
    def ack(self, jobs: list[alkstore.Job]) -> None:
        for job in jobs:
            assert job.ack()
            self.jobs.pop(job.id).state = "gone"
            assert not job.ack(), "an acked job's handle must be fenced"

    @rule(jobs=consumes(claimed))
    def retry_now(self, jobs: list[alkstore.Job]) -> None:
        for job in jobs:
            model = self.jobs[job.id]
            assert job.retry("again", 0)
            model.state = "pending" if model.attempts < model.max_attempts else "dead"
            self.clock += 1
            model.ready = self.clock  # ready again from now: behind jobs that waited
            assert not job.retry("again", 0), "a retried job's old handle must be fenced"

    @rule(jobs=consumes(claimed))
    def fail(self, jobs: list[alkstore.Job]) -> None:
        for job in jobs:
            assert job.fail("broken")
            self.jobs[job.id].state = "dead"

    @rule(jobs=claimed)
    def heartbeat(self, jobs: list[alkstore.Job]) -> None:
        for job in jobs:
            assert job.heartbeat(300) == self._holds(job)

    @rule(jobs=consumes(claimed), via=st.integers(0, 1))
    def ack_batch(self, jobs: list[alkstore.Job], via: int) -> None:
        mine = [job for job in jobs if job.worker_id == f"worker-{via}"]
        live = [job for job in mine if self._holds(job)]
        assert self.queues[via].ack_batch([job.id for job in jobs], f"worker-{via}") == len(live)
        for job in live:
            self.jobs.pop(job.id)

    def _holds(self, job: alkstore.Job) -> bool:
        """Whether the model says ``job``'s claim still holds."""
        held = self.jobs.get(job.id)
        return held is not None and held.state == "processing" and held.attempts == job.attempts

    @invariant()
    def states_agree(self) -> None:
        for job_id, model in self.jobs.items():
            info = self.queues[0].get_job(job_id)
            assert info is not None
            assert (info.state, info.attempts) == (model.state, model.attempts)


@pytest.mark.parametrize("_", [None])
def test_queue_operations_agree_with_the_model(provider: TestProvider, api: str, _: None) -> None:
    QueueMachine.provider = provider
    QueueMachine.api = api
    QueueMachine.TestCase.settings = settings(
        max_examples=15, stateful_step_count=25, deadline=None
    )
    QueueMachine.TestCase().runTest()
