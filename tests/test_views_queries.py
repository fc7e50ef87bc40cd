"""Page server time stays flat as data grows: each page makes a fixed number of queries whatever
the number of missions, milestones, checkpoints or tokens."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from checkpoints.models import Checkpoint
from quests.services import milestones, records, runs
from quests.services.tokens import token_create
from tests.builders import (  # noqa: F401
    agent_for,
    fast_password_hashing,
    ledger_of,
    long_history,
    milestones_of,
    person,
    running,
    waiting_on_approval,
    waiting_on_gate,
)

pytestmark = pytest.mark.django_db

# Session, user, inbox count (2) and the page's own fixed set of queries (the inbox's includes the
# person's just-made decisions, approvals and milestones: 2, and the quests its filter offers: 1).
MAX_QUERIES = {"board": 8, "inbox": 10, "mission": 21, "checkpoint": 10, "tokens": 8}


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured)


def many_missions(user, count: int) -> None:
    """Quests in every state the board draws differently, with milestones, approvals and runs."""
    agent = agent_for(user)
    for i in range(count):
        kind = i % 4
        if kind == 0:
            waiting_on_approval(user, f"Quest {i}", agent=agent)
        elif kind == 1:
            mission, milestone = waiting_on_gate(user, f"Quest {i}", agent=agent)
            if i % 8 == 1:
                milestones.milestone_review(actor=person(user), milestone_id=milestone.pk, action="approve")
        elif kind == 2:
            running(user, f"Quest {i}", agent=agent)
        else:
            mission, run = running(user, f"Quest {i}", agent=agent)
            runs.run_stop(actor=agent, run_id=run.pk, reason="blocked_external", detail="CRM down")


@pytest.mark.long
def test_board_inbox_and_mission_page_make_the_same_queries_for_1_and_200_missions(client, alice, django_assert_max_num_queries):
    """Building 200 quests through the services is slow, so one test measures every page on them."""
    client.force_login(alice)
    many_missions(alice, 1)
    first = alice.missions.get()
    pages = {
        "/": "board",
        "/?status=waiting_for_approval": "board",
        "/approvals/": "inbox",
        f"/missions/{first.pk}/": "mission",
    }
    for url, page in pages.items():
        with django_assert_max_num_queries(MAX_QUERIES[page]):
            client.get(url)
    one = {url: queries(client, url) for url in pages}
    many_missions(alice, 199)
    assert alice.missions.count() == 200
    for url, page in pages.items():
        with django_assert_max_num_queries(MAX_QUERIES[page]):
            client.get(url)
    assert {url: queries(client, url) for url in pages} == one


@pytest.mark.long
def test_the_mission_page_makes_the_same_queries_for_1_and_200_milestones_and_checkpoints(client, alice, django_assert_max_num_queries):
    agent = agent_for(alice)
    mission, run = running(alice, agent=agent)
    client.force_login(alice)
    url = f"/missions/{mission.pk}/"

    def grow(n: int, start: int) -> None:
        for i in range(start, start + n):
            decision, _ = records.record_create(actor=agent, run_id=run.pk, kind="decision", text=f"Decision {i}")
            milestone, _ = milestones.milestone_claim(
                actor=agent, run_id=run.pk, kind="custom", title=f"Step {i}", evidence=[decision.pk], agent_state={"i": i}
            )
            if i % 2:
                milestones.milestone_review(actor=person(alice), milestone_id=milestone.pk, action="approve")

    grow(1, 1)  # one milestone, reviewed: the page reads the person's recent decisions at both sizes
    with django_assert_max_num_queries(MAX_QUERIES["mission"]):
        client.get(url)
    one = queries(client, url)
    grow(199, 2)
    with django_assert_max_num_queries(MAX_QUERIES["mission"]):
        client.get(url)
    assert queries(client, url) == one


def test_the_mission_page_makes_the_same_queries_for_5_and_300_operations_and_milestones(client, alice, django_assert_max_num_queries):
    """The ledger and the milestones are windows: what needs someone, the newest of the rest and counts."""
    client.force_login(alice)
    small, _ = running(alice, "Small")
    ledger_of(small, completed=2, attempted=1, failed=1, planned=1)
    milestones_of(small, approved=2, corrected=1, pending_review=1, withdrawn=1)
    large, _ = running(alice, "Large")
    ledger_of(large, completed=290, attempted=4, failed=4, planned=2)
    milestones_of(large, approved=150, corrected=100, expired=30, pending_review=10, withdrawn=10)
    for mission in (small, large):
        with django_assert_max_num_queries(MAX_QUERIES["mission"]):
            client.get(f"/missions/{mission.pk}/")
    assert queries(client, f"/missions/{small.pk}/") == queries(client, f"/missions/{large.pk}/")


def test_the_checkpoint_page_makes_the_same_queries_with_2_and_200_checkpoints(client, alice, django_assert_max_num_queries):
    agent = agent_for(alice)
    mission, run = running(alice, agent=agent)
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"i": 0})
    second, _ = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"i": 1})
    client.force_login(alice)
    one = queries(client, f"/checkpoints/{second.pk}/")
    last = second
    for i in range(2, 200):
        last, _ = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"i": i})
    with django_assert_max_num_queries(MAX_QUERIES["checkpoint"]):
        client.get(f"/checkpoints/{last.pk}/")
    assert queries(client, f"/checkpoints/{last.pk}/") == one


def test_the_tokens_page_makes_the_same_queries_for_1_and_200_tokens(client, alice, django_assert_max_num_queries):
    client.force_login(alice)
    mission, _ = running(alice)
    token_create(user=alice, name="t0", mission=mission)
    one = queries(client, "/tokens/")
    for i in range(1, 200):
        token_create(user=alice, name=f"t{i}", mission=mission if i % 2 else None)
    with django_assert_max_num_queries(MAX_QUERIES["tokens"]):
        client.get("/tokens/")
    assert queries(client, "/tokens/") == one


def test_the_mission_and_checkpoint_pages_make_the_same_queries_for_10_and_300_checkpoints_with_branches(client, alice, django_assert_max_num_queries):
    """Windows of the history (the tree around a checkpoint, a page of the timeline, the overview)
    cost the same whatever its length, restores and branches included."""
    client.force_login(alice)

    def urls(mission) -> list[tuple[str, str]]:
        seqs = dict(Checkpoint.objects.filter(mission=mission).values_list("seq", "pk"))
        middle = seqs[len(seqs) // 2]
        return [
            (f"/missions/{mission.pk}/", "mission"),
            (f"/missions/{mission.pk}/?at={middle}", "mission"),
            (f"/missions/{mission.pk}/?at={middle}&before=5", "mission"),
            (f"/checkpoints/{middle}/", "checkpoint"),
            (f"/checkpoints/{middle}/?compare=2", "checkpoint"),
            (f"/checkpoints/{mission.head_checkpoint_id}/?against={seqs[1]}", "checkpoint"),
        ]

    def measure(mission) -> list[int]:
        for url, page in urls(mission):
            with django_assert_max_num_queries(MAX_QUERIES[page]):
                client.get(url)
        return [queries(client, url) for url, _ in urls(mission)]

    assert measure(long_history(alice, 10, restore_every=4, verified_every=3)) == measure(
        long_history(alice, 300, restore_every=4, verified_every=3, title="Longer")
    )


def test_a_quest_without_milestones_skips_the_milestones_window(client, alice):
    """The page's read of its mission says there is none: neither the kind and status counts nor
    the numbered window is asked for, and the page says so as it did."""
    client.force_login(alice)
    mission, _ = running(alice, "No milestones yet")
    without = queries(client, f"/missions/{mission.pk}/")
    milestones_of(mission, pending_review=1)
    assert queries(client, f"/missions/{mission.pk}/") == without + 2
    page = client.get(f"/missions/{running(alice, 'Still none')[0].pk}/").content.decode()
    assert "No milestone claimed yet." in page


def test_a_quest_without_constraints_or_standing_decisions_skips_their_lists(client, alice):
    """The page's read of its mission says which lists it has at all: a quest with none of these
    sends neither query, and one with them shows them."""
    from quests.models import StandingDecision
    from quests.services import missions

    client.force_login(alice)
    mission, _ = missions.mission_create(actor=agent_for(alice), title="Nothing set yet", objective="Find a venue.")
    url = f"/missions/{mission.pk}/"
    without = queries(client, url)
    missions.constraint_add(actor=person(alice), mission_id=mission.pk, text="Keep the budget under 500 EUR.")
    assert queries(client, url) == without + 1
    StandingDecision.objects.create(mission=mission, action="send the weekly report", decision="approve")
    assert queries(client, url) == without + 2
    page = client.get(url).content.decode()
    assert "Keep the budget under 500 EUR." in page and "send the weekly report" in page


def test_a_page_query_built_once_numbers_each_mission_on_its_own():
    """The mission page's approvals and ledger windows are built once per process and filtered on
    the mission for each page: the filter goes to the numbered query's WHERE, so each mission's rows
    are numbered among themselves, exactly as when the mission is filtered first."""
    from django.db.models import Q

    from checkpoints.models import Operation, OperationStatus
    from quests.models import Approval, ApprovalStatus
    from quests.selectors.common import newest_per_group
    from quests.selectors.ledger import LEDGER_FIELDS, LEDGER_SHOWN, operations_shown
    from quests.selectors.reviews import DECIDED_SHOWN, approvals_shown

    pending, completed = Q(status=ApprovalStatus.PENDING), Q(status=OperationStatus.COMPLETED)
    filtered_first = (
        Approval.objects.filter(mission=7)
        .select_related("decided_by")
        .annotate(**newest_per_group(pending))
        .filter(pending | Q(newest__lte=DECIDED_SHOWN))
        .order_by("id")
    )
    assert str(approvals_shown().filter(mission=7).query) == str(filtered_first.query)
    filtered_first = (
        Operation.objects.filter(mission_id=7)
        .only(*LEDGER_FIELDS)
        .annotate(**newest_per_group(completed))
        .filter(~completed | Q(newest__lte=LEDGER_SHOWN))
        .order_by("-id")
    )
    assert str(operations_shown().filter(mission_id=7).query) == str(filtered_first.query)
