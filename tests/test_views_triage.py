"""Triage: the inbox narrowed by quest and kind, and the board's cards telling quests apart."""

import pytest

from tests.builders import agent_for, fast_password_hashing, new_mission, waiting_on_approval, waiting_on_gate  # noqa: F401

pytestmark = pytest.mark.django_db


@pytest.fixture
def waiting(alice):
    agent = agent_for(alice)
    first, approval = waiting_on_approval(alice, "First quest", agent=agent)
    second, milestone = waiting_on_gate(alice, "Second quest", agent=agent)
    return first, second


def test_the_inbox_can_be_narrowed_to_one_quest(alice_client, waiting):
    first, second = waiting
    body = alice_client.get(f"/approvals/?quest={first.pk}").content.decode()
    assert "deploy to production" in body and "Venues shortlisted" not in body
    assert f'<option value="{first.pk}" selected>First quest (quest {first.pk})</option>' in body
    assert "1 waiting" in body
    # The navigation still counts everything waiting.
    assert 'data-count="2"' in body


def test_the_inbox_can_be_narrowed_to_one_kind(alice_client, waiting):
    body = alice_client.get("/approvals/?kind=milestone").content.decode()
    assert "Venues shortlisted" in body and "deploy to production" not in body
    body = alice_client.get("/approvals/?kind=approval").content.decode()
    assert "deploy to production" in body and "Venues shortlisted" not in body


def test_nothing_matching_says_so_and_offers_everything(alice_client, waiting):
    first, _ = waiting
    body = alice_client.get(f"/approvals/?quest={first.pk}&kind=milestone").content.decode()
    assert "Nothing that matches waits for you." in body and "Inbox zero" not in body


def test_a_filter_that_is_not_one_is_ignored(alice_client, waiting):
    body = alice_client.get("/approvals/?quest=abc&kind=everything").content.decode()
    assert "deploy to production" in body and "Venues shortlisted" in body


def test_another_persons_quest_narrows_to_nothing(alice_client, bob, waiting):
    theirs, _ = waiting_on_approval(bob, "Bob quest")
    body = alice_client.get(f"/approvals/?quest={theirs.pk}").content.decode()
    assert "Bob quest" not in body and "Nothing that matches" in body


def test_a_decision_from_a_narrowed_inbox_comes_back_to_it(alice_client, waiting):
    first, second = waiting
    approval = first.approvals.get()
    origin = f"/approvals/?quest={second.pk}"
    response = alice_client.post(f"/approvals/{approval.pk}/decide/", {"decision": "approve", "next": origin})
    assert response["Location"] == origin


def test_board_cards_tell_two_quests_of_the_same_title_apart(alice_client, alice):
    older = new_mission(alice, "Weekly report")
    newer = new_mission(alice, "Weekly report")
    body = alice_client.get("/").content.decode()
    assert f"Quest {older.pk} · started" in body and f"Quest {newer.pk} · started" in body
    assert body.count("last activity <time datetime=") == 2


def test_the_quest_filter_offers_a_bounded_list_the_busiest_quests_and_the_chosen_one(alice_client, alice, monkeypatch):
    """Issue 13: the inbox's size does not grow with the number of quests that wait. Past
    INBOX_QUEST_CHOICES the filter lists those with the most waiting (and always the one chosen)
    and says that others exist."""
    from quests.selectors import people

    monkeypatch.setattr(people, "INBOX_QUEST_CHOICES", 3)
    agent = agent_for(alice)
    quests = [waiting_on_approval(alice, f"Quest {letter}", agent=agent) for letter in "ABCDE"]
    busiest, approval = quests[4]  # "Quest E": last by title, first by what waits
    approval.pk = None
    approval.save()
    body = alice_client.get("/approvals/").content.decode()
    offered = [f"Quest {letter}" for letter in "ABCDE" if f">Quest {letter} (quest " in body]
    assert offered == ["Quest A", "Quest B", "Quest E"]
    assert 'id="inbox-quests-more"' in body
    chosen = quests[3][0]
    body = alice_client.get(f"/approvals/?quest={chosen.pk}").content.decode()
    assert f'<option value="{chosen.pk}" selected>Quest D (quest {chosen.pk})</option>' in body
    assert [f"Quest {letter}" for letter in "ABCDE" if f">Quest {letter} (quest " in body] == ["Quest A", "Quest D", "Quest E"]


def test_the_quest_filter_says_nothing_more_when_it_lists_every_quest(alice_client, waiting):
    assert 'id="inbox-quests-more"' not in alice_client.get("/approvals/").content.decode()
