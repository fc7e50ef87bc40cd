"""The glossary pass: quests, not missions, on people's pages; plain words for a milestone the
quest waits for, one the agent took back, its checkpoint and its evidence; people's words, not
field names, in the checkpoint diff."""

import pytest

from checkpoints.models import Checkpoint
from quests.services import milestones, records
from quests.templatetags.questlog import readable, words
from tests.builders import agent_for, fast_password_hashing, person, running, waiting_on_gate  # noqa: F401

pytestmark = pytest.mark.django_db


def test_field_names_and_status_values_read_as_words():
    assert words("stop_reason") == "Why it stopped"
    assert words("#4 › review_status") == "#4 › Review"
    assert words("something_else") == "Something else"
    assert str(readable({"review_status": "pending_review"})) == '<dl class="kv"><dt>Review</dt><dd>waiting for your review</dd></dl>'


def test_the_checkpoint_diff_shows_peoples_words(client, alice):
    agent = agent_for(alice)
    mission, run = running(alice, agent=agent)
    milestone, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="custom", title="Draft", agent_state={"step": 1})
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": 2})
    milestones.milestone_review(actor=person(alice), milestone_id=milestone.pk, action="approve")
    records.checkpoint_create(actor=agent, run_id=run.pk, agent_state={"step": 3})
    client.force_login(alice)
    latest = Checkpoint.objects.filter(mission=mission).latest("seq")
    first = Checkpoint.objects.filter(mission=mission).earliest("seq")
    body = client.get(f"/checkpoints/{latest.pk}/?against={first.pk}").content.decode()
    diff = body[body.index('id="diff"') : body.index("</table>", body.index('id="diff"'))]
    assert "pending_review" not in diff and "review_status" not in diff
    assert "waiting for your review" in diff and "Review" in diff


def test_a_gate_milestone_in_the_inbox_speaks_plainly(client, alice):
    mission, milestone = waiting_on_gate(alice)
    client.force_login(alice)
    body = client.get("/approvals/").content.decode()
    assert ">Quest waits for this</span>" in body and ">Gate<" not in body
    assert f'Claimed at <a href="/checkpoints/{milestone.checkpoint_id}/">checkpoint #' in body and "Bound to" not in body


def test_the_quest_pages_say_quest(client, alice):
    mission, run = running(alice)
    client.force_login(alice)
    body = client.get(f"/missions/{mission.pk}/").content.decode()
    assert ">Cancel quest</button>" in body and "a quest resumes, it never starts over" in body
    assert ">Cancel mission<" not in body
