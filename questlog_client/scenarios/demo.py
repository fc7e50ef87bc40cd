"""The demo quest: plan a team offsite.

Research with tool outputs and decisions → a plan milestone that a person must review (a gate) →
drafting with side effects against the fake service (a venue hold, an email draft) → an approval
for the risky step (emailing the whole team) → sending it → completion.

The agent keeps no memory of its own between processes: everything it needs to carry on is in the
resume bundle (its `agent_state` at the head checkpoint, the decisions, the constraints, the
approvals and the operation ledger). Every write has a key derived from what it is, so a fresh
process that redoes part of a phase replays the same records instead of writing new ones, and
every side effect goes through `run.operation`, so it is never done twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from questlog_client.client import Questlog, Run
from questlog_client.fake_service import FakeService
from questlog_client.models import Bundle

AGENT_NAME = "demo-agent"
SEND_ACTION = "send the invitation to the team"
STEP_FREE = "Everyone must have step-free access to the venue."

MISSION: dict[str, Any] = {
    "title": "Plan the team offsite",
    "objective": "Find a venue for 12 people in May, hold it, and invite the team.",
    "constraints": ["Budget is at most 4,000 EUR", "Never email the team before the venue is held"],
    "planned_milestones": [
        {"kind": "research_complete", "title": "Venues shortlisted"},
        {"kind": "plan_approved", "title": "Plan approved"},
        {"kind": "draft_ready", "title": "Invitation drafted"},
    ],
}

SEARCH_RESULTS = (
    "venue search (May, 12 people, within 90 minutes of the office)\n"
    "1. Lakeside Lodge — 3,200 EUR for 3 nights, 14 beds, ground-floor meeting room\n"
    "2. Old Mill — 3,900 EUR for 3 nights, 12 beds, meeting room on the 2nd floor (no lift)\n"
    "3. City Loft — 4,600 EUR for 3 nights, 16 beds, lift\n"
)
AVAILABILITY = "availability check\nLakeside Lodge: free May 14–16 and May 21–23\nOld Mill: free May 21–23 only\n"
VENUE: dict[str, Any] = {"venue": "Lakeside Lodge", "slug": "lakeside-lodge", "dates": "May 14–16", "people": 12, "price_eur": 3200}

Say = Callable[[str], None]


def demo_agent(ql: Questlog, mission_id: int, service: FakeService, *, say: Say | None = None, pace: float = 0.0) -> Bundle:
    """Work on the mission until it is complete, waiting whenever a person must act."""
    say = say or (lambda _line: None)
    mission = ql.missions.get(mission_id)

    def waiting(bundle: Bundle) -> None:
        say(f"Your turn: {bundle.message}")

    while True:
        bundle = mission.wait_for_person(on_wait=waiting)
        if bundle.next_action == "none":
            say(f"Done: {bundle.message}")
            return bundle
        with mission.start_run(agent=AGENT_NAME) as run:
            say(f"Run {run.info.number} started ({bundle.message})")
            _work(run, service, say, pace)


def _work(run: Run, service: FakeService, say: Say, pace: float) -> None:
    def step(line: str) -> None:
        say(line)
        if pace:
            time.sleep(pace)

    state = run.bundle.agent_state
    phase = state.get("phase", "research")
    if phase == "research":
        state = _research(run, step)
        phase = state["phase"]
    if phase == "plan":
        _plan(run, state, step)
    elif phase == "draft":
        _draft(run, state, service, step)
    elif phase == "send":
        _send(run, state, service, step)


def _research(run: Run, step: Say) -> dict[str, Any]:
    search = run.record("tool_output", SEARCH_RESULTS, data={"tool": "venue_search"}, key="research:search")
    step("Searched for venues (3 found).")
    shortlist = run.record("decision", "Shortlist Lakeside Lodge and Old Mill; City Loft is over the 4,000 EUR budget.", key="research:shortlist")
    step("Decided: shortlist Lakeside Lodge and Old Mill.")
    availability = run.record("tool_output", AVAILABILITY, data={"tool": "availability"}, key="research:availability")
    step("Checked availability.")
    question = run.record("open_question", "Does anyone on the team need step-free access?", key="research:access-question")
    step("Open question: does anyone need step-free access?")
    venue = run.record("decision", "Pick Lakeside Lodge for May 14–16: cheapest, free on our dates, ground-floor meeting room.", key="research:venue")
    step("Decided: Lakeside Lodge, May 14–16.")
    state = {
        "phase": "plan",
        "venue": VENUE["venue"],
        "evidence_ids": [search.id, shortlist.id, availability.id, venue.id],
        "question_id": question.id,
    }
    run.checkpoint(state, note="Research done", key="research:done")
    step("Checkpoint: research done.")
    return state


def _plan(run: Run, state: dict[str, Any], step: Say) -> None:
    run.milestone(
        "research_complete",
        "Venues shortlisted",
        summary="Two venues under budget; Lakeside Lodge is free on our dates.",
        evidence=state["evidence_ids"],
        key="milestone:research",
    )
    step("Milestone: venues shortlisted.")
    claimed = run.milestone(
        "plan_approved",
        "Plan: Lakeside Lodge, May 14–16",
        summary="Hold Lakeside Lodge (3,200 EUR), draft the invitation, and send it once you approve.",
        gate=True,
        agent_state={**state, "phase": "draft"},
        key="milestone:plan",
    )
    if claimed.run_ended:
        step("Asked you to review the plan.")


def _draft(run: Run, state: dict[str, Any], service: FakeService, step: Say) -> None:
    # Rebuilt from what research decided, not from whatever the head holds: a phase redone after a
    # crash must send exactly the bodies it sent the first time, or its keys would be refused.
    state = {k: state[k] for k in ("venue", "evidence_ids", "question_id")}
    bundle = run.bundle
    constraints = [c.text for c in bundle.constraints]
    question = next((q for q in bundle.open_questions if q.id == state.get("question_id")), None)
    if question is not None and STEP_FREE in constraints:
        run.record(
            "decision",
            f"Step-free access is required ({STEP_FREE}) — Lakeside Lodge's meeting room is on the ground floor.",
            resolves=question.id,
            key="draft:access",
        )
        step("Decided: step-free access is needed; the ground-floor room fits.")
    hold_request = {k: VENUE[k] for k in ("venue", "dates", "people", "price_eur")}
    hold = run.operation(
        "hold-venue",
        kind="reservation.hold",
        target=VENUE["slug"],
        request=hold_request,
        reconcile=service.lookup,
    )(service.effect("reservation.hold", VENUE["slug"], hold_request, status="held"))
    step(f"Venue held: {hold.external_id}{' (already done earlier)' if hold.replayed else ''}.")
    run.checkpoint({**state, "phase": "draft", "hold_id": hold.external_id}, note="Venue held", key="draft:held")
    invite: dict[str, Any] = {
        "to": "team@example.com",
        "subject": "Team offsite: Lakeside Lodge, May 14–16",
        "body": "We are going to Lakeside Lodge on May 14–16. The meeting room is on the ground floor.",
        "honours": constraints,
    }
    draft = run.operation(
        "draft-invite",
        kind="email.draft",
        target=invite["to"],
        request=invite,
        reconcile=service.lookup,
    )(service.effect("email.draft", invite["to"], invite, status="drafted"))
    step(f"Invitation drafted: {draft.external_id}{' (already done earlier)' if draft.replayed else ''}.")
    run.milestone(
        "draft_ready",
        "Invitation drafted",
        summary=invite["subject"],
        agent_state={**state, "phase": "draft", "hold_id": hold.external_id, "draft_id": draft.external_id},
        key="milestone:draft",
    )
    step("Milestone: invitation drafted.")
    run.propose_memory(
        "Offsite venues",
        "The team needs venues with step-free access.",
        "You asked for step-free access on this offsite; future offsites likely need it too.",
        key="memory:step-free",
    )
    step("Proposed a memory: the team needs step-free venues.")
    asked = run.request_approval(
        SEND_ACTION,
        {"draft_id": draft.external_id, "to": invite["to"], "subject": invite["subject"]},
        "Emailing 12 people cannot be undone, so a person should confirm the wording and the dates.",
        agent_state={**state, "phase": "send", "hold_id": hold.external_id, "draft_id": draft.external_id},
        key="approval:send",
    )
    if asked.run_ended:
        step("Asked you to approve sending the invitation.")


def _send(run: Run, state: dict[str, Any], service: FakeService, step: Say) -> None:
    approval = run.bundle.approval(SEND_ACTION)
    if approval is None or not approval.granted:
        note = approval.note if approval else "no approval was found"
        run.record("decision", f"Not sending the invitation: {note or 'you declined'}.", key="send:declined")
        run.stop("completed", "The venue is held; the invitation was not sent because you declined.")
        step("You declined; the invitation stays a draft.")
        return
    payload = approval.decided_payload or approval.payload
    sent = run.operation(
        "send-invite",
        kind="email.send",
        target=payload["to"],
        request=payload,
        reconcile=service.lookup,
    )(service.effect("email.send", payload["to"], payload, status="sent"))
    step(f"Invitation sent: {sent.external_id}{' (already done earlier)' if sent.replayed else ''}.")
    run.stop("completed", "The venue is held and the team is invited.")


def demo_person(person: Any, bundle: Bundle) -> None:
    """What the person does in `replaycheck`: adds a constraint while reviewing the plan, then
    approves the plan and the send."""
    for milestone in bundle.milestones:
        if milestone.gate and milestone.review_status == "pending_review":
            if milestone.kind == "plan_approved":
                person.add_constraint(bundle.mission.id, STEP_FREE, key="person:step-free")
            person.review_milestone(milestone.id, "approve", note="Looks good.")
    for approval in bundle.approvals:
        if approval.status == "pending":
            person.decide_approval(approval.id, "approve", note="Go ahead.")
