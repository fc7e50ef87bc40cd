"""The mission page's milestones at any size: every milestone awaiting review (with its review
form) and the newest reviewed ones, the newest approved ones as badges, and progress counted over
all of them."""

import re

import pytest

from quests.models import Milestone, Mission
from quests.selectors.reviews import BADGES_SHOWN, MILESTONES_SHOWN
from tests.builders import fast_password_hashing, milestones_of, running  # noqa: F401

pytestmark = pytest.mark.django_db


def page(client, mission) -> str:
    response = client.get(f"/missions/{mission.pk}/")
    assert response.status_code == 200
    return response.content.decode()


def listed(html: str) -> list[str]:
    """The titles of the milestones the page lists, in its order."""
    return re.findall(r'<h3 id="milestone-\d+-title">([^<]+)</h3>', html)


def badges(html: str) -> list[str]:
    return re.findall(r'<li class="badge milestone-badge"[^>]*><span aria-hidden="true">★</span> ([^<]+)</li>', html)


def test_every_milestone_awaiting_review_and_the_newest_reviewed_ones_are_listed(alice_client, alice):
    mission, _ = running(alice)
    milestones_of(mission, approved=10, corrected=8, expired=4, withdrawn=3, pending_review=2)
    body = page(alice_client, mission)
    shown = listed(body)
    assert shown[-2:] == ["pending_review 0", "pending_review 1"]  # claimed last, listed in claim order
    newest_reviewed = [
        *(f"approved {n}" for n in range(7, 10)),
        *(f"corrected {n}" for n in range(8)),
        *(f"expired {n}" for n in range(4)),
        *(f"withdrawn {n}" for n in range(3)),
    ][-MILESTONES_SHOWN:]
    assert shown[:-2] == newest_reviewed
    assert f"The newest {MILESTONES_SHOWN} of 25 reviewed milestones are shown." in body
    assert body.count('name="action" value="approve"') >= 2  # the pending ones carry their review forms


def test_a_few_milestones_are_all_listed_with_no_count(alice_client, alice):
    mission, _ = running(alice)
    milestones_of(mission, approved=3, pending_review=1)
    body = page(alice_client, mission)
    assert listed(body) == ["approved 0", "approved 1", "approved 2", "pending_review 0"]
    assert "reviewed milestones are shown" not in body and "more</li>" not in body


def test_the_newest_approved_milestones_are_badges_and_the_rest_a_count(alice_client, alice):
    mission, _ = running(alice)
    milestones_of(mission, approved=15, corrected=12)
    body = page(alice_client, mission)
    assert badges(body) == [f"approved {n}" for n in range(15 - BADGES_SHOWN, 15)]
    assert "+5 more</li>" in body


@pytest.mark.parametrize(
    "states",
    [
        {"approved": 15, "corrected": 12, "pending_review": 2},
        {"approved": 1, "withdrawn": 3, "expired": 2},
        {"pending_review": 4},
        {},
    ],
)
def test_progress_counts_every_milestone(alice_client, alice, states):
    mission, _ = running(alice)
    milestones_of(mission, **states)
    mission = Mission.objects.get(pk=mission.pk)
    expected = mission.progress_of(list(Milestone.objects.filter(mission=mission)))
    assert mission.progress == expected  # the API's figures, counted in the database
    body = page(alice_client, mission)
    assert f'value="{expected["approved"]}"' in body
    assert f"{expected['approved']} of {expected['planned']} milestone{'s' if expected['planned'] != 1 else ''} approved" in body
