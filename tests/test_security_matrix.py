"""Issue 24's security matrix: every route, generated from the URL conf (Django's resolver and the
ninja API's operations, as tests/test_authorization_matrix.py walks them, so that a new route
cannot be missed), asked by every caller that must not get at the owner's things:

- another person's session (`other_session`),
- another person's agent token (`other_token`),
- the owner's own token limited to another of her missions (`other_mission_token`),
- the owner's own agent token, on every people-only route (`owner_token`).

Each answer is the one tests/test_authorization_matrix.py's EXPECTED table gives (the one place
where who may call what is written down), and the whole database, every table of every installed
app, is compared before and after each request:

- a refused request (4xx, or sent to a sign-in page) changes nothing at all;
- an answered one (a caller's own collection: its own missions, tokens, LangGraph threads) may add
  rows of the caller's, but changes or removes no row that was there before.

Bookkeeping that any authenticated request may write is left out, and only that: a token's last
use, the sessions table, a sign-in's last_login and django-axes' login records."""

from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pytest
from django.apps import apps
from django.conf import settings
from django.db import transaction

from tests.test_authorization_matrix import EXPECTED, all_rows, ask, build_world, owner_fingerprint, request_for

pytestmark = pytest.mark.django_db

HOSTILE = ("other_session", "other_token", "other_mission_token")
# Columns a request writes for its own caller, whatever it asks: not a change to anyone's things.
BOOKKEEPING_COLUMNS = {"quests.AgentToken": {"last_used_at"}, "auth.User": {"last_login"}}
BOOKKEEPING_APPS = {"sessions", "axes"}
SIGN_IN_PAGES = (settings.LOGIN_URL, "/admin/login/")


def people_only(row: tuple[str, str]) -> bool:
    """An API operation that refuses every agent token (403), or any page: pages are for people,
    and a token on a page is no one. `/mcp` is for agents, as the API is."""
    method, route = row
    if route.startswith("/api/v1/") or route == "mcp":
        return EXPECTED[row]["owner_token"] == 403
    return True


def cases() -> list[tuple[str, str, str]]:
    rows = all_rows()
    return [(method, route, caller) for method, route in rows for caller in HOSTILE] + [
        (method, route, "owner_token") for method, route in rows if people_only((method, route))
    ]


Snapshot = dict[str, dict[object, tuple]]


def database_snapshot() -> Snapshot:
    """Every row of every table (models and their many-to-many tables), by primary key."""
    snapshot: Snapshot = {}
    for model in apps.get_models(include_auto_created=True):
        if model._meta.app_label in BOOKKEEPING_APPS or not model._meta.managed or model._meta.proxy:
            continue
        label = model._meta.label
        skipped = BOOKKEEPING_COLUMNS.get(label, set())
        columns = [f.attname for f in model._meta.concrete_fields if f.attname not in skipped]
        pk = model._meta.pk.attname
        snapshot[label] = {row[0]: row for row in model.objects.order_by(pk).values_list(pk, *columns)}
    return snapshot


@dataclass
class Difference:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # changed or removed

    def __bool__(self) -> bool:
        return bool(self.added or self.changed)

    def __str__(self) -> str:
        return f"added {self.added or 'nothing'}; changed or removed {self.changed or 'nothing'}"


def difference(before: Snapshot, after: Snapshot) -> Difference:
    found = Difference()
    for label, rows in before.items():
        now = after[label]
        found.changed += [f"{label} {pk}" for pk, row in rows.items() if now.get(pk) != row]
        found.added += [f"{label} {pk}" for pk in now.keys() - rows.keys()]
    return found


def refused(response) -> bool:
    if response.status_code >= 400:
        return True
    return response.status_code in (301, 302) and urlsplit(response["Location"]).path in SIGN_IN_PAGES


def test_the_matrix_covers_every_route_and_every_hostile_caller():
    rows = set(all_rows())
    asked = cases()
    assert {(method, route) for method, route, caller in asked if caller == "other_session"} == rows
    owner_rows = {(method, route) for method, route, caller in asked if caller == "owner_token"}
    # The people-only API operations are all there (pause, decide, review, restore, forget, …) and
    # every page a person has to be signed in for.
    assert {route for _, route in owner_rows if route.startswith("/api/v1/")} >= {
        "/api/v1/approvals/{int:approval_id}/decision",
        "/api/v1/missions/{int:mission_id}/pause",
        "/api/v1/memory/{int:item_id}",
        "/api/v1/missions/{int:mission_id}/restore",
    }
    assert ("POST", "tokens/<int:pk>/revoke/") in owner_rows and ("GET", "missions/<int:pk>/") in owner_rows
    assert len(asked) > 4 * 100


@pytest.mark.long
def test_no_hostile_caller_gets_more_than_its_answer_or_changes_anything(settings):
    # As in the authorization matrix: the walk may outlast the heartbeat timeout on a loaded machine.
    settings.QUESTLOG_HEARTBEAT_TIMEOUT = 3600
    world = build_world()
    alice = world.ids["alice"]
    before = database_snapshot()
    owner_before = owner_fingerprint(alice)
    wrong: list[str] = []
    changed: list[str] = []
    refusals = 0
    for method, route, caller in cases():
        url, body, form = request_for(method, route, world.ids)
        cookies = {name: morsel.value for name, morsel in world.clients[caller].cookies.items()}
        # In a savepoint rolled back afterwards: every request meets the same database.
        with transaction.atomic():
            response = ask(world, caller, method, url, body, form)
            diff = difference(before, database_snapshot())
            owner_touched = owner_fingerprint(alice) != owner_before
            transaction.set_rollback(True)
        # Signing out changes the client's cookies: they are put back.
        world.clients[caller].cookies.clear()
        for name, value in cookies.items():
            world.clients[caller].cookies[name] = value
        asked = f"{method} {route} by {caller} ({response.status_code})"
        expected = EXPECTED[(method, route)][caller]
        if response.status_code != expected:
            wrong.append(f"{asked}, expected {expected}")
        if refused(response):
            refusals += 1
            if diff:
                changed.append(f"{asked}, refused yet {diff}")
        elif diff.changed or owner_touched:
            changed.append(f"{asked}: {diff}{'; the owner’s things changed' if owner_touched else ''}")
    assert not wrong, "\n".join(wrong)
    assert not changed, "\n".join(changed)
    assert refusals > 300  # most of the matrix is refusals: the check above is not vacuous


def test_the_snapshot_sees_a_change_an_addition_and_a_bookkeeping_write_apart(alice):
    """The comparison the matrix relies on does see what it must, and only that."""
    from quests.models import AgentToken
    from quests.services.tokens import token_authenticate, token_create

    token, raw = token_create(user=alice, name="probe")
    before = database_snapshot()
    token_authenticate(raw)  # records the token's last use
    assert AgentToken.objects.get(pk=token.pk).last_used_at is not None
    assert not difference(before, database_snapshot())
    AgentToken.objects.filter(pk=token.pk).update(name="renamed")
    assert difference(before, database_snapshot()).changed == [f"quests.AgentToken {token.pk}"]
    another, _ = token_create(user=alice, name="another")
    assert f"quests.AgentToken {another.pk}" in difference(before, database_snapshot()).added
