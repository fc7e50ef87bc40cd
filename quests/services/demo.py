"""A demo user and mission so a newcomer's first page is not empty."""

from django.contrib.auth import get_user_model
from django.db import transaction

from quests.services import milestones, missions, operations, records, runs
from quests.services.audit import Actor

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "questlog-demo"


def seed_demo() -> tuple[str, str] | None:
    User = get_user_model()
    if User.objects.exists():
        return None
    with transaction.atomic():
        user = User.objects.create_user(DEMO_USERNAME, password=DEMO_PASSWORD)
        person = Actor(user=user)
        mission, _ = missions.mission_create(
            actor=person,
            title="Plan the team offsite",
            objective="Find a venue for 12 people in May, book it, and invite the team.",
            constraints=["Budget is at most 4,000 EUR", "Never email the team before the venue is confirmed"],
            planned_milestones=[
                {"kind": "research_complete", "title": "Venues shortlisted"},
                {"kind": "plan_approved", "title": "Plan approved"},
                {"kind": "draft_ready", "title": "Invitation drafted"},
            ],
        )
        agent = Actor(user=user)
        run, _ = runs.run_start(actor=agent, mission_id=mission.pk, agent="demo-agent")
        records.record_create(
            actor=agent, run_id=run.pk, kind="tool_output", text="Search results: Lakeside Lodge (3,200 EUR), Old Mill (3,900 EUR), City Loft (4,600 EUR)"
        )
        records.record_create(actor=agent, run_id=run.pk, kind="decision", text="Shortlist Lakeside Lodge and Old Mill; City Loft is over budget.")
        records.record_create(actor=agent, run_id=run.pk, kind="open_question", text="Does anyone need step-free access?")
        records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": "research", "shortlist": ["Lakeside Lodge", "Old Mill"]})
        op, _ = operations.operation_plan(
            actor=agent, run_id=run.pk, key="hold-lakeside", kind="reservation.hold", target="lakeside-lodge", request={"dates": "May 14-16", "people": 12}
        )
        operations.operation_attempt(actor=agent, operation_id=op.pk)
        operations.operation_complete(actor=agent, operation_id=op.pk, external_id="HOLD-4471", external_status="held", receipt={"until": "April 30"})
        milestones.milestone_claim(
            actor=agent,
            run_id=run.pk,
            kind="research_complete",
            title="Venues shortlisted",
            summary="Two venues under budget, one on hold until April 30.",
            gate=True,
            agent_state={"step": "plan", "shortlist": ["Lakeside Lodge", "Old Mill"]},
        )
    return DEMO_USERNAME, DEMO_PASSWORD
