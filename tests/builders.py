"""Missions in the states people meet, built through the services (as an agent would), for the
page tests and the browser tests."""

import re
from dataclasses import dataclass

import pytest

from checkpoints.models import Checkpoint, Operation, Trigger
from quests.models import Approval, Milestone, Mission, Run
from quests.services import approvals, milestones, missions, operations, records, runs
from quests.services.audit import Actor
from quests.services.tokens import token_create


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Page tests log people in many times; the real hasher's cost buys nothing here. Import this
    fixture into a test module to use it there."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def agent_for(user) -> Actor:
    token, _ = token_create(user=user, name="builder-agent")
    return Actor(user=user, token=token)


def person(user) -> Actor:
    return Actor(user=user)


def new_mission(user, title: str = "Book the offsite", *, agent: Actor | None = None) -> Mission:
    mission, _ = missions.mission_create(
        actor=agent or agent_for(user),
        title=title,
        objective="Find and book a venue for 12 people.",
        constraints=["Never email the client before Friday"],
        planned_milestones=[{"kind": "research_complete", "title": "Research"}, {"kind": "plan_approved", "title": "Plan"}],
    )
    return mission


def running(user, title: str = "Write the report", *, agent: Actor | None = None) -> tuple[Mission, Run]:
    agent = agent or agent_for(user)
    mission = new_mission(user, title, agent=agent)
    run, _ = runs.run_start(actor=agent, mission_id=mission.pk, agent="test-agent")
    mission.refresh_from_db()
    return mission, run


def waiting_on_approval(
    user, title: str = "Ship the pricing page", *, action: str = "deploy to production", agent: Actor | None = None
) -> tuple[Mission, Approval]:
    agent = agent or agent_for(user)
    mission, run = running(user, title, agent=agent)
    approval, _ = approvals.approval_request(
        actor=agent,
        run_id=run.pk,
        action=action,
        payload={"environment": "production", "version": "1.2"},
        reason="Deploying changes the public site.",
        agent_state={"step": "deploy"},
    )
    mission.refresh_from_db()
    return mission, approval


def waiting_on_gate(user, title: str = "Plan the offsite", *, agent: Actor | None = None) -> tuple[Mission, Milestone]:
    agent = agent or agent_for(user)
    mission, run = running(user, title, agent=agent)
    milestone, _ = milestones.milestone_claim(
        actor=agent,
        run_id=run.pk,
        kind="research_complete",
        title="Venues shortlisted",
        summary="Two venues under budget.",
        gate=True,
        agent_state={"step": "plan"},
    )
    mission.refresh_from_db()
    return mission, milestone


@dataclass
class Verified:
    """A mission with a verified checkpoint, a later branch of work, and a completed operation."""

    mission: Mission
    verified_checkpoint_id: int
    later_decision_id: int


def verified_then_more_work(user, title: str = "Book the Lisbon trip", *, agent: Actor | None = None) -> Verified:
    agent = agent or agent_for(user)
    mission, run = running(user, title, agent=agent)
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": "search"})
    milestone, _ = milestones.milestone_claim(
        actor=agent,
        run_id=run.pk,
        kind="plan_approved",
        title="Plan approved",
        agent_state={"step": "plan", "hotel": "Avenida"},
    )
    milestones.milestone_review(actor=person(user), milestone_id=milestone.pk, action="approve")
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="flight-1", kind="flight.book", target="TP1351", request={"seats": 1})
    operations.operation_attempt(actor=agent, operation_id=op.pk)
    operations.operation_complete(actor=agent, operation_id=op.pk, external_id="PNR-7QX2", external_status="confirmed", receipt={"price": "312 EUR"})
    decision, _ = records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Switch to Hotel Miradouro.")
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": "hotel", "hotel": "Miradouro"})
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external", detail="Hotel site down")
    milestone.refresh_from_db()
    mission.refresh_from_db()
    return Verified(mission=mission, verified_checkpoint_id=milestone.checkpoint_id, later_decision_id=decision.pk)


def opening_tag(html: str, element_id: str) -> str:
    """The start tag of the element with this id: where a region says whether it polls (the
    navigation's inbox badge, on every page, polls too)."""
    found = re.search(rf'<[a-z]+\b[^>]*\bid="{re.escape(element_id)}"[^>]*>', html)
    assert found, f"no element with id {element_id!r}"
    return found.group(0)


def long_history(
    user,
    count: int,
    *,
    restore_every: int = 250,
    verified_every: int = 100,
    run_length: int = 25,
    title: str = "A long history",
) -> Mission:
    """A stopped mission with `count` checkpoints written in a few statements (the services would
    take minutes for thousands): runs of `run_length` checkpoints, every `verified_every`-th
    verified, and every `restore_every`-th a restore to three checkpoints back, which sets the two
    between aside. (Restores and verifications are a person's acts: the defaults keep them rare.)"""
    agent = agent_for(user)
    mission, run = running(user, title, agent=agent)
    first, _ = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": 0})
    runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external", detail="Waiting")
    start = Checkpoint.objects.filter(mission=mission).order_by("-seq").first()
    seqs = range(start.seq + 1, count + 1)
    run_rows = Run.objects.bulk_create(
        Run(mission=mission, number=2 + i, agent="bulk-agent", ended_at=start.created_at, stop_reason="blocked_external")
        for i in range(len(seqs) // run_length + 1)
    )
    rows = Checkpoint.objects.bulk_create(
        Checkpoint(
            mission=mission,
            seq=seq,
            run=None if seq % restore_every == 0 else run_rows[(seq - start.seq) // run_length],
            trigger=Trigger.RESTORE if seq % restore_every == 0 else Trigger.AGENT,
            hash=start.hash,
            verified=seq % verified_every == 0,
            note=f"Restored from #{seq - 3}" if seq % restore_every == 0 else "",
            state_refs=start.state_refs,
            agent_state_refs=first.agent_state_refs,
            size_bytes=start.size_bytes,
        )
        for seq in seqs
    )
    by_seq = {c.seq: c for c in [start, *rows]}
    for c in rows:
        parent_seq = c.seq - 3 if c.trigger == Trigger.RESTORE else c.seq - 1
        c.parent = by_seq.get(parent_seq) or by_seq.get(c.seq - 1)
    Checkpoint.objects.bulk_update(rows, ["parent"], batch_size=2000)
    head = rows[-1] if rows else start
    verified = [c for c in rows if c.verified]
    Mission.objects.filter(pk=mission.pk).update(
        head_checkpoint=head,
        last_verified_checkpoint=verified[-1] if verified else None,
        next_checkpoint_seq=head.seq + 1,
    )
    mission.refresh_from_db()
    return mission


def ledger_of(mission: Mission, **by_status: int) -> list[Operation]:
    """Operations written straight into the ledger, oldest first, `completed=30, attempted=2, ...`
    of each status (keys `<status>-<n>`, receipts on the completed ones): many rows without the
    thousands of service calls that would make them."""
    rows = [
        Operation(
            mission=mission,
            key=f"{status}-{n}",
            request_hash="0" * 64,
            kind="email.send",
            target=f"person{n}@example.com",
            status=status,
            attempts=0 if status == "planned" else 1,
            external_id=f"msg-{n}" if status == "completed" else "",
            receipt={"message_id": f"msg-{n}"} if status == "completed" else None,
            error="Mailbox full" if status == "failed" else "",
        )
        for status, count in by_status.items()
        for n in range(count)
    ]
    return Operation.objects.bulk_create(rows)


def milestones_of(mission: Mission, **by_state: int) -> list[Milestone]:
    """Milestones written straight into the mission, oldest first, `approved=15, corrected=5,
    pending_review=2, withdrawn=1, ...` of each review state (`withdrawn`: a pending one withdrawn
    from the inbox; titles `<state> <n>`; kinds alternate between a planned one and a custom one)."""
    rows = [
        Milestone(
            mission=mission,
            kind="research_complete" if n % 2 else "custom",
            title=f"{state} {n}",
            review_status="pending_review" if state == "withdrawn" else state,
            withdrawn=state == "withdrawn",
        )
        for state, count in by_state.items()
        for n in range(count)
    ]
    return Milestone.objects.bulk_create(rows)
