"""The resume bundle's cost: a fixed number of queries through the API however much is live, the
access rule of every other read, and the same answer whichever way the mission is handed in."""

import json

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.test import Client

from checkpoints.models import Operation, OperationStatus, Record
from quests.models import Approval, Milestone, Mission
from quests.services import milestones, missions, records, runs
from quests.services.audit import Actor
from quests.services.bundle import bundle_schema
from quests.services.tokens import token_create
from tests.conftest import ApiClient

# 1 query for the token, 1 statement for everything the bundle shows (the engine's one read).
RESUME_QUERIES = 2
BUDGET = 8  # issue 10's ceiling for GET /missions/{id}/resume with token auth
KINDS = ("decision", "open_question", "blocker", "dependency", "note")
STATUSES = (OperationStatus.COMPLETED, OperationStatus.ATTEMPTED, OperationStatus.PLANNED, OperationStatus.FAILED)


def busy_mission(alice, live: int) -> tuple[Mission, Actor]:
    """A mission with a head checkpoint, a verified one, and `live` live records, plus hundreds
    of operations, milestones and approvals once `live` is large (built in bulk: the test is
    about reading them)."""
    token, _ = token_create(user=alice, name="builder")
    agent = Actor(user=alice, token=token)
    mission, _ = missions.mission_create(actor=agent, title="Busy", objective="O", constraints=["c1", "c2"])
    run, _ = runs.run_start(actor=agent, mission_id=mission.pk)
    milestone, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="custom", title="M", agent_state={"m": 1})
    milestones.milestone_review(actor=Actor(user=alice), milestone_id=milestone.pk, action="approve")
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"head": True})
    ledger = max(live // 4, 4)
    Record.objects.bulk_create(Record(mission=mission, run=run, kind=KINDS[i % len(KINDS)], text=f"r{i}", data={"i": i}) for i in range(live))
    Operation.objects.bulk_create(
        Operation(
            mission=mission,
            run=run,
            key=f"k{i}",
            request_hash="h",
            kind="email",
            target="t",
            request={"i": i},
            status=STATUSES[i % len(STATUSES)],
            receipt={"ok": i},
        )
        for i in range(ledger)
    )
    Milestone.objects.bulk_create(Milestone(mission=mission, run=run, kind="custom", title=f"m{i}") for i in range(ledger))
    Approval.objects.bulk_create(Approval(mission=mission, run=run, action=f"a{i}", payload={"i": i}, reason="r", status="approved") for i in range(ledger))
    return mission, agent


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("live", [10, 1000])
def test_get_resume_costs_the_same_few_queries_however_much_is_live(alice, live, django_assert_num_queries, django_assert_max_num_queries):
    mission, _ = busy_mission(alice, live)
    _, raw = token_create(user=alice, name="reader")
    api = ApiClient(Client(), raw)
    with django_assert_max_num_queries(BUDGET):
        response = api.get(f"missions/{mission.pk}/resume")
    assert response.status_code == 200
    body = response.json()
    assert len(body["decisions"]) + len(body["open_questions"]) + len(body["blockers"]) + len(body["dependencies"]) == live * 4 // 5
    assert sum(len(group) for group in body["operations"].values()) == max(live // 4, 4)
    assert body["checkpoint"]["agent_state"] == {"head": True}
    assert body["last_verified_checkpoint"] is not None
    with django_assert_num_queries(RESUME_QUERIES):
        api.get(f"missions/{mission.pk}/resume")


@pytest.mark.django_db
def test_the_bundle_is_the_same_from_a_mission_row_and_from_an_id(alice):
    mission, agent = busy_mission(alice, 40)
    row = Mission.objects.select_related("head_checkpoint", "last_verified_checkpoint").get(pk=mission.pk)
    bare = Mission.objects.get(pk=mission.pk)  # its checkpoints are read with the bundle
    as_json = lambda schema: json.dumps(schema.model_dump(), cls=DjangoJSONEncoder)  # noqa: E731
    from_id = as_json(bundle_schema(mission.pk, actor=agent))
    assert as_json(bundle_schema(row)) == from_id
    assert as_json(bundle_schema(bare)) == from_id
    assert as_json(bundle_schema(row, for_new_run=True)) == as_json(bundle_schema(mission.pk, actor=agent, for_new_run=True))


@pytest.mark.django_db
def test_the_resume_of_a_mission_out_of_reach_is_not_found(alice, bob, agent, bob_agent):
    mission, _ = busy_mission(alice, 10)
    other = Mission.objects.create(owner=alice, title="Other", objective="O")
    _, limited = token_create(user=alice, name="limited", mission=other)
    assert agent.get(f"missions/{mission.pk}/resume").status_code == 200
    assert bob_agent.get(f"missions/{mission.pk}/resume").status_code == 404
    assert ApiClient(Client(), limited).get(f"missions/{mission.pk}/resume").status_code == 404
    assert ApiClient(Client(), limited).get(f"missions/{other.pk}/resume").status_code == 200
    assert agent.get("missions/999999/resume").status_code == 404
