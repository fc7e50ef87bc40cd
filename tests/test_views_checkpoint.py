"""The checkpoint page /checkpoints/<id>/: readable state and a key-by-key diff."""

import pytest

from checkpoints.models import Checkpoint
from quests.selectors.compare import ADDED, CHANGED, REMOVED, diff
from quests.services import records
from tests.builders import agent_for, fast_password_hashing, running, verified_then_more_work  # noqa: F401

pytestmark = pytest.mark.django_db


def test_the_diff_matches_list_items_by_id_and_compares_key_by_key():
    old = {"constraints": [{"id": 1, "text": "a"}, {"id": 2, "text": "b"}], "mission": {"status": "running"}, "agent_state": {"step": 1}}
    new = {"constraints": [{"id": 2, "text": "B"}, {"id": 3, "text": "c"}], "mission": {"status": "ready"}, "agent_state": {"step": 1, "hotel": "x"}}
    changes = {(c.path, c.kind): (c.old, c.new) for c in diff(old, new)}
    assert changes == {
        (("agent_state", "hotel"), ADDED): (None, "x"),
        (("constraints", "#1"), REMOVED): ({"id": 1, "text": "a"}, None),
        (("constraints", "#2", "text"), CHANGED): ("b", "B"),
        (("constraints", "#3"), ADDED): (None, {"id": 3, "text": "c"}),
        (("mission", "status"), CHANGED): ("running", "ready"),
    }
    assert diff(old, old) == []


def test_it_shows_the_state_readably_and_the_changes_against_the_parent(client, alice):
    agent = agent_for(alice)
    mission, run = running(alice, agent=agent)
    first, _ = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": "search"})
    records.record_create(actor=agent, run_id=run.pk, kind="open_question", text="Does anyone need step-free access?")
    second, _ = records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": "plan", "shortlist": ["Lakeside"]})
    client.force_login(alice)
    body = client.get(f"/checkpoints/{second.pk}/").content.decode()
    assert "Checkpoint #2" in body
    assert "Does anyone need step-free access?" in body
    assert "Never email the client before Friday" in body
    assert "<dt>Step</dt><dd>plan</dd>" in body  # the agent's state, readable
    assert "From #1 to #2" in body
    assert "Open questions" in body and ">Added<" in body and ">Changed<" in body
    assert "{&quot;" not in body  # not a JSON dump


def test_it_compares_with_any_checkpoint_of_the_same_mission_only(client, alice):
    built = verified_then_more_work(alice)
    other = verified_then_more_work(alice, "Other")
    checkpoints = list(Checkpoint.objects.filter(mission=built.mission).order_by("seq"))
    client.force_login(alice)
    body = client.get(f"/checkpoints/{checkpoints[-1].pk}/?against={checkpoints[0].pk}").content.decode()
    assert f"From #{checkpoints[0].seq} to #{checkpoints[-1].seq}" in body
    foreign = Checkpoint.objects.filter(mission=other.mission).first()
    body = client.get(f"/checkpoints/{checkpoints[-1].pk}/?against={foreign.pk}").content.decode()
    assert f"From #{checkpoints[-2].seq} to #{checkpoints[-1].seq}" in body  # falls back to the parent


def test_the_first_checkpoint_has_nothing_to_compare_with(client, alice):
    built = verified_then_more_work(alice)
    first = Checkpoint.objects.filter(mission=built.mission).order_by("seq").first()
    client.force_login(alice)
    assert "nothing before it to compare with" in client.get(f"/checkpoints/{first.pk}/").content.decode()


def test_another_users_checkpoint_is_404(client, alice, bob):
    built = verified_then_more_work(alice)
    client.force_login(bob)
    assert client.get(f"/checkpoints/{built.verified_checkpoint_id}/").status_code == 404


def test_it_offers_restore_to_this_checkpoint(client, alice):
    built = verified_then_more_work(alice)
    client.force_login(alice)
    body = client.get(f"/checkpoints/{built.verified_checkpoint_id}/").content.decode()
    assert f'action="/missions/{built.mission.pk}/restore/"' in body and ">Restore<" in body
