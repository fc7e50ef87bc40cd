"""The operation ledger at any size: the mission page shows what needs someone and the newest
completed operations; /missions/<id>/ledger/ pages through the whole ledger, filtered by status."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quests.selectors.ledger import LEDGER_PAGE_SIZE, LEDGER_SHOWN
from tests.builders import fast_password_hashing, ledger_of, new_mission, running  # noqa: F401

pytestmark = pytest.mark.django_db


def ledger_url(mission) -> str:
    return f"/missions/{mission.pk}/ledger/"


def keys(html: str) -> list[str]:
    """The operation keys the page's ledger table lists, in its order."""
    return re.findall(r'<td data-label="Key"><code>([^<]+)</code>', html)


def get(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


# --- the mission page ----------------------------------------------------------------------------


def test_the_mission_page_shows_every_actionable_operation_and_the_newest_completed_ones(alice_client, alice):
    mission, _ = running(alice)
    ledger_of(mission, completed=30, attempted=2, failed=1)
    body = get(alice_client, f"/missions/{mission.pk}/")
    shown = keys(body)
    assert {"attempted-0", "attempted-1", "failed-0"} <= set(shown)
    assert [k for k in shown if k.startswith("completed-")] == [f"completed-{n}" for n in range(29, 29 - LEDGER_SHOWN, -1)]
    assert len(shown) == 3 + LEDGER_SHOWN
    assert f"The newest {LEDGER_SHOWN} of 30 completed operations are shown." in body
    assert f'href="{ledger_url(mission)}"' in body and "See the whole ledger." in body


def test_a_short_ledger_is_shown_whole_with_no_count(alice_client, alice):
    mission, _ = running(alice)
    ledger_of(mission, completed=3, planned=1)
    body = get(alice_client, f"/missions/{mission.pk}/")
    assert sorted(keys(body)) == ["completed-0", "completed-1", "completed-2", "planned-0"]
    assert "completed operations are shown" not in body
    assert "See the whole ledger." in body


def test_a_count_in_the_thousands_is_grouped(alice_client, alice):
    mission, _ = running(alice)
    ledger_of(mission, completed=1234)
    body = get(alice_client, f"/missions/{mission.pk}/")
    assert f"The newest {LEDGER_SHOWN} of 1,234 completed operations are shown." in body


# --- the ledger page -----------------------------------------------------------------------------


def test_the_ledger_page_lists_the_whole_ledger_newest_first(alice_client, alice):
    mission, _ = running(alice, "Send the invitations")
    ledger_of(mission, completed=3, attempted=1, failed=1, planned=1)
    body = get(alice_client, ledger_url(mission))
    assert keys(body) == ["planned-0", "failed-0", "attempted-0", "completed-2", "completed-1", "completed-0"]
    assert "<title>Operation ledger · Send the invitations" in body
    assert f'<a href="/missions/{mission.pk}/">Send the invitations</a>' in body  # the breadcrumbs
    assert "6 operations." in body
    assert 'rel="next"' not in body and 'rel="prev"' not in body
    for text in ("Mailbox full", "msg-2", "1 / 3", "Completed", "Attempted"):
        assert text in body


def test_51_operations_are_two_pages(alice_client, alice):
    mission, _ = running(alice)
    ledger_of(mission, completed=51)
    first = get(alice_client, ledger_url(mission))
    assert len(keys(first)) == LEDGER_PAGE_SIZE == 50
    assert keys(first)[0] == "completed-50"
    assert "Page 1 of 2" in first and 'rel="next" href="?page=2">Older operations' in first and 'rel="prev"' not in first
    assert "51 operations." in first
    second = get(alice_client, ledger_url(mission) + "?page=2")
    assert keys(second) == ["completed-0"]
    assert 'rel="prev" href="?page=1">Newer operations' in second and 'rel="next"' not in second


@pytest.mark.parametrize(
    "group, expected",
    [
        ("completed", ["completed-1", "completed-0"]),
        ("to_reconcile", ["attempted-0"]),
        ("failed", ["failed-0"]),
        ("planned", ["planned-1", "planned-0"]),
    ],
)
def test_the_ledger_page_filters_by_status_group(alice_client, alice, group, expected):
    mission, _ = running(alice)
    ledger_of(mission, completed=2, attempted=1, failed=1, planned=2)
    body = get(alice_client, ledger_url(mission) + f"?status={group}")
    assert keys(body) == expected
    assert f'href="?status={group}" aria-current="true"' in body


def test_the_pager_keeps_the_filter(alice_client, alice):
    mission, _ = running(alice)
    ledger_of(mission, completed=60, attempted=3)
    body = get(alice_client, ledger_url(mission) + "?status=completed")
    assert 'href="?status=completed&amp;page=2"' in body
    assert keys(get(alice_client, ledger_url(mission) + "?status=completed&page=2")) == [f"completed-{n}" for n in range(9, -1, -1)]


@pytest.mark.parametrize("query", ["?status=nonsense", "?status=", "?status=COMPLETED", "?status=completed%00", "?status=a&status=b"])
def test_an_unknown_status_is_no_filter(alice_client, alice, query):
    mission, _ = running(alice)
    ledger_of(mission, completed=1, failed=1)
    assert sorted(keys(get(alice_client, ledger_url(mission) + query))) == ["completed-0", "failed-0"]


@pytest.mark.parametrize(
    "page, expected_page",
    [
        ("abc", 1),
        ("0", 2),
        ("-1", 2),
        ("3", 2),
        ("99999999999999999999999", 2),
        ("1.5", 1),
        ("", 1),
        ("%00", 1),
    ],
)
def test_a_bad_page_number_is_the_first_or_last_page(alice_client, alice, page, expected_page):
    mission, _ = running(alice)
    ledger_of(mission, completed=LEDGER_PAGE_SIZE + 1)
    body = get(alice_client, ledger_url(mission) + f"?page={page}")
    assert f"Page {expected_page} of 2" in body


def test_an_empty_ledger(alice_client, alice):
    mission = new_mission(alice)
    body = get(alice_client, ledger_url(mission))
    assert "0 operations." in body and keys(body) == []


def test_another_persons_mission_is_404(client, alice, bob):
    mission, _ = running(alice)
    ledger_of(mission, completed=1)
    client.force_login(bob)
    assert client.get(ledger_url(mission)).status_code == 404
    assert client.get("/missions/999999/ledger/").status_code == 404


def test_anonymous_is_sent_to_sign_in(client, alice):
    mission, _ = running(alice)
    response = client.get(ledger_url(mission))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_ledger_page_makes_the_same_queries_with_5_and_300_operations(alice_client, alice):
    def queries(mission, query: str = "") -> int:
        with CaptureQueriesContext(connection) as captured:
            get(alice_client, ledger_url(mission) + query)
        return len(captured)

    small, _ = running(alice, "Small")
    ledger_of(small, completed=4, failed=1)
    large, _ = running(alice, "Large")
    ledger_of(large, completed=295, failed=5)
    assert queries(small) == queries(large)
    assert queries(small, "?status=failed") == queries(large, "?status=failed&page=2")
