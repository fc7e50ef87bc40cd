"""The authorization matrix, generated from the URL conf: every page route (Django's resolver) and
every API operation (the ninja API's operations), for every method, asked by every kind of caller.
The expected answers live in ONE table (EXPECTED); a route or operation without a row fails
test_every_route_has_a_row_and_every_row_a_route, so a new endpoint cannot skip its check. Pages
are asked with GET and POST each; API operations with their declared methods.

Every path parameter names a real object of the owner (Alice), so "another user's object is 404"
and "an agent token cannot reach a people-only action (403)" are tested against objects that
exist. Each request runs in a savepoint rolled back afterwards: every caller meets the same world,
and one caller's success (a cancel, a decision) never changes what the next one sees; and no caller
but the owner changes anything of the owner's (compared row by row), whatever status it got."""

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from checkpoints.models import Checkpoint, Operation, Record
from notifications.models import WebhookEndpoint
from quests.api import api
from quests.langgraph.models import GraphCheckpoint, GraphWrite
from quests.models import (
    AgentToken,
    Approval,
    Constraint,
    GraphThread,
    Hold,
    MemoryItem,
    MemoryProposal,
    Milestone,
    Mission,
    Run,
    StandingDecision,
)
from quests.services import approvals, memory, milestones, operations, runs
from quests.services.audit import Actor
from quests.services.tokens import token_create
from tests.builders import new_mission

pytestmark = pytest.mark.django_db

CALLERS = (
    "anonymous",
    "owner_session",
    "owner_token",
    "other_mission_token",
    "revoked_token",
    "other_session",
    "other_token",
    "staff",
)
TOKEN_CALLERS = ("owner_token", "other_mission_token", "revoked_token", "other_token")


def answers(**by_caller: int) -> dict[str, int]:
    assert set(by_caller) == set(CALLERS), set(CALLERS) ^ set(by_caller)
    return by_caller


# --- Named classes of answers -------------------------------------------------------------------
# Pages: only a session signs in; a bearer token on a page is no one (redirected to sign in).
# Another person's object is 404, like the API.


def people_page(ok: int = 200) -> dict[str, int]:
    """A page about one of the owner's objects."""
    return answers(
        anonymous=302,
        owner_session=ok,
        owner_token=302,
        other_mission_token=302,
        revoked_token=302,
        other_session=404,
        other_token=302,
        staff=404,
    )


def own_page(ok: int = 200) -> dict[str, int]:
    """A page about the signed-in person's own things (board, inbox, tokens, memory): everyone
    signed in gets their own."""
    return answers(
        anonymous=302,
        owner_session=ok,
        owner_token=302,
        other_mission_token=302,
        revoked_token=302,
        other_session=ok,
        other_token=302,
        staff=ok,
    )


def staff_page(ok: int = 200) -> dict[str, int]:
    """Staff pages and actions: a 404 for everyone else, signed in or not."""
    return {**public(404), "staff": ok}


def public(status: int = 200) -> dict[str, int]:
    return {caller: status for caller in CALLERS}


def not_allowed() -> dict[str, int]:
    """A method the view does not take: 405 for whoever asks (pages check the method first)."""
    return public(405)


def login_first_405() -> dict[str, int]:
    """A method the view does not take, behind the sign-in check: 302 for whoever is not signed in."""
    return answers(
        anonymous=302,
        owner_session=405,
        owner_token=302,
        other_mission_token=302,
        revoked_token=302,
        other_session=405,
        other_token=302,
        staff=405,
    )


# API: a bearer token or a session; a revoked token is 401 (never falls back to a session).


def agent_api(ok: int = 200) -> dict[str, int]:
    """An action on one of the owner's objects that agents (and the owner in person) may take."""
    return answers(
        anonymous=401,
        owner_session=ok,
        owner_token=ok,
        other_mission_token=404,
        revoked_token=401,
        other_session=404,
        other_token=404,
        staff=404,
    )


def people_only_api(ok: int = 200) -> dict[str, int]:
    """Only a person may do this (decide, review, pause, restore, forget): every agent token is
    403, before its object is looked up; other people are 404."""
    return answers(
        anonymous=401,
        owner_session=ok,
        owner_token=403,
        other_mission_token=403,
        revoked_token=401,
        other_session=404,
        other_token=403,
        staff=404,
    )


def own_people_api(ok: int = 200) -> dict[str, int]:
    """A collection of the person's own things that only a person may see or add to (webhooks)."""
    return answers(
        anonymous=401,
        owner_session=ok,
        owner_token=403,
        other_mission_token=403,
        revoked_token=401,
        other_session=ok,
        other_token=403,
        staff=ok,
    )


def own_api(ok: int = 200) -> dict[str, int]:
    """A collection of the caller's own things, or a new one of them: any valid caller."""
    return answers(
        anonymous=401,
        owner_session=ok,
        owner_token=ok,
        other_mission_token=ok,
        revoked_token=401,
        other_session=ok,
        other_token=ok,
        staff=ok,
    )


# MCP (`/mcp`): bearer tokens only; a session is no one there. An MCP answer is 200 whatever the
# tool said: another person's object (or another mission's) is a tool error, `not_found`, inside it
# (tests/test_mcp.py reads those), and the security matrix checks that it changed nothing.


def mcp_post() -> dict[str, int]:
    return answers(
        anonymous=401,
        owner_session=401,
        owner_token=200,
        other_mission_token=200,
        revoked_token=401,
        other_session=401,
        other_token=200,
        staff=401,
    )


def mcp_other_method() -> dict[str, int]:
    """Stateless: no server stream (GET) and no session to end (DELETE), 405 once the token is known."""
    return answers(
        anonymous=401,
        owner_session=401,
        owner_token=405,
        other_mission_token=405,
        revoked_token=401,
        other_session=401,
        other_token=405,
        staff=401,
    )


# --- THE table ----------------------------------------------------------------------------------
# (method, route) → expected status per caller. Pages are Django routes (GET and POST each);
# API routes are the ninja paths under /api/v1/.
EXPECTED: dict[tuple[str, str], dict[str, int]] = {
    # Django's sign-in pages: public, or the signed-in person's own.
    ("GET", "accounts/login/"): public(200),
    ("GET", "mcp"): mcp_other_method(),
    ("POST", "mcp"): mcp_post(),
    ("POST", "accounts/login/"): public(302),  # Alice's name and password sign anyone in as her
    ("GET", "accounts/logout/"): public(405),
    ("POST", "accounts/logout/"): public(302),
    ("GET", "accounts/password_change/"): own_page(200),
    ("POST", "accounts/password_change/"): own_page(200),  # an empty form, shown again with its errors
    ("GET", "accounts/password_change/done/"): own_page(200),
    ("POST", "accounts/password_change/done/"): login_first_405(),
    # No password reset: it is not routed until the server sends email (tests/test_password_reset.py).
    # The person's own pages.
    ("GET", ""): own_page(200),
    ("POST", ""): own_page(200),  # the board answers a POST like a GET; it changes nothing
    ("GET", "approvals/"): own_page(200),
    ("POST", "approvals/"): own_page(200),  # the inbox answers a POST like a GET; it changes nothing
    ("GET", "approvals/count/"): own_page(200),  # the navigation's badge, polled by every page
    ("POST", "approvals/count/"): login_first_405(),
    ("GET", "tokens/"): own_page(200),
    ("POST", "tokens/"): own_page(200),  # a new token is shown once, on the page itself
    ("GET", "settings/"): own_page(200),
    ("POST", "settings/"): own_page(302),  # saved, then back to the page
    ("GET", "settings/notifications/"): own_page(200),
    ("POST", "settings/notifications/"): login_first_405(),
    ("GET", "settings/notifications/preferences/"): login_first_405(),
    ("POST", "settings/notifications/preferences/"): own_page(302),  # saved (nothing sent: nothing changes)
    ("GET", "settings/notifications/webhooks/"): login_first_405(),
    ("POST", "settings/notifications/webhooks/"): own_page(422),  # an empty form: the page with its error
    ("GET", "settings/notifications/webhooks/<int:pk>/test/"): login_first_405(),
    ("POST", "settings/notifications/webhooks/<int:pk>/test/"): people_page(302),
    ("GET", "settings/notifications/webhooks/<int:pk>/remove/"): login_first_405(),
    ("POST", "settings/notifications/webhooks/<int:pk>/remove/"): people_page(302),
    # An email's unsubscribe link needs no sign-in: the signed token is the proof (a made-up one: 404).
    ("GET", "settings/notifications/unsubscribe/<str:token>/"): public(404),
    ("POST", "settings/notifications/unsubscribe/<str:token>/"): public(404),
    ("GET", "memory/"): own_page(200),
    ("POST", "memory/"): login_first_405(),
    ("GET", "account/export/"): own_page(200),
    ("POST", "account/export/"): login_first_405(),
    # Pages about one of the owner's objects.
    ("GET", "missions/<int:pk>/"): people_page(200),
    ("POST", "missions/<int:pk>/"): people_page(200),  # the mission page answers a POST like a GET
    ("GET", "checkpoints/<int:pk>/"): people_page(200),
    ("POST", "checkpoints/<int:pk>/"): people_page(200),  # likewise
    ("GET", "missions/<int:pk>/cancel/"): people_page(200),  # the confirmation page
    ("POST", "missions/<int:pk>/cancel/"): people_page(302),
    ("GET", "missions/<int:pk>/restore/"): people_page(422),  # no checkpoint chosen: the form's error
    ("POST", "missions/<int:pk>/restore/"): people_page(422),  # an active run must stop first: a form error
    ("GET", "missions/<int:pk>/retention/delete/"): people_page(200),  # the confirmation page
    ("GET", "missions/<int:pk>/ledger/"): people_page(200),
    ("POST", "missions/<int:pk>/ledger/"): login_first_405(),  # a page to read: it takes no form
    ("POST", "missions/<int:pk>/retention/delete/"): people_page(302),
    ("GET", "missions/<int:pk>/pause/"): login_first_405(),
    ("POST", "missions/<int:pk>/pause/"): people_page(302),
    ("GET", "missions/<int:pk>/unpause/"): login_first_405(),
    ("POST", "missions/<int:pk>/unpause/"): people_page(422),  # it is not paused: the page says so
    ("GET", "missions/<int:pk>/constraints/"): login_first_405(),
    ("POST", "missions/<int:pk>/constraints/"): people_page(302),
    ("GET", "missions/<int:pk>/constraints/<int:cid>/edit/"): login_first_405(),
    ("POST", "missions/<int:pk>/constraints/<int:cid>/edit/"): people_page(302),
    ("GET", "missions/<int:pk>/constraints/<int:cid>/retire/"): login_first_405(),
    ("POST", "missions/<int:pk>/constraints/<int:cid>/retire/"): people_page(302),
    ("GET", "missions/<int:pk>/standing-decisions/<int:sid>/revoke/"): login_first_405(),
    ("POST", "missions/<int:pk>/standing-decisions/<int:sid>/revoke/"): people_page(302),
    ("GET", "missions/<int:pk>/retention/keep/"): login_first_405(),
    ("POST", "missions/<int:pk>/retention/keep/"): people_page(302),
    ("GET", "missions/<int:pk>/retention/withdraw/"): login_first_405(),
    ("POST", "missions/<int:pk>/retention/withdraw/"): people_page(302),
    ("GET", "approvals/<int:pk>/decide/"): login_first_405(),
    ("POST", "approvals/<int:pk>/decide/"): people_page(302),
    ("GET", "approvals/<int:pk>/undo/"): login_first_405(),
    ("POST", "approvals/<int:pk>/undo/"): people_page(422),  # it is still pending, nothing to undo: the page says so
    ("GET", "milestones/<int:pk>/review/"): login_first_405(),
    ("POST", "milestones/<int:pk>/review/"): people_page(302),
    ("GET", "tokens/<int:pk>/revoke/"): login_first_405(),
    ("POST", "tokens/<int:pk>/revoke/"): people_page(302),
    ("GET", "memory/items/<int:pk>/forget/"): login_first_405(),
    ("POST", "memory/items/<int:pk>/forget/"): people_page(302),
    ("GET", "memory/items/<int:pk>/renew/"): login_first_405(),
    ("POST", "memory/items/<int:pk>/renew/"): people_page(302),
    ("GET", "memory/proposals/<int:pk>/decide/"): login_first_405(),
    ("POST", "memory/proposals/<int:pk>/decide/"): people_page(302),
    # Staff pages: a 404 for everyone else, signed in or not (their existence is not advertised).
    ("GET", "staff/retention/"): staff_page(200),
    ("POST", "staff/retention/"): staff_page(405),
    ("GET", "staff/retention/policy/"): staff_page(405),
    ("POST", "staff/retention/policy/"): staff_page(302),
    ("GET", "staff/retention/holds/"): staff_page(405),
    ("POST", "staff/retention/holds/"): staff_page(302),
    ("GET", "staff/retention/holds/<int:pk>/release/"): staff_page(405),
    ("POST", "staff/retention/holds/<int:pk>/release/"): staff_page(302),
    ("GET", "staff/retention/purge/"): staff_page(405),
    ("POST", "staff/retention/purge/"): staff_page(302),
    # Django's admin site (every one of its routes is behind the same staff check as its index).
    ("GET", "admin/"): answers(
        anonymous=302,
        owner_session=302,
        owner_token=302,
        other_mission_token=302,
        revoked_token=302,
        other_session=302,
        other_token=302,
        staff=200,
    ),
    # The API's own documents (its operations are walked below).
    ("GET", "api/v1/"): public(404),  # django-ninja's root: nothing there
    ("POST", "api/v1/"): public(404),
    ("GET", "api/v1/openapi.json"): public(200),
    ("POST", "api/v1/openapi.json"): public(405),  # read-only documents take GET and HEAD (issue 25: a wrong method is 405)
    ("GET", "api/v1/docs"): public(200),
    ("POST", "api/v1/docs"): public(405),
    # --- API: collections of the caller's own things ---
    ("GET", "/api/v1/missions"): own_api(200),
    # A token limited to one mission cannot start another.
    ("POST", "/api/v1/missions"): {**own_api(201), "other_mission_token": 403},
    ("GET", "/api/v1/memory"): own_api(200),
    # --- API: agent actions on the owner's objects ---
    ("GET", "/api/v1/missions/{int:mission_id}"): agent_api(200),
    ("POST", "/api/v1/missions/{int:mission_id}/constraints"): agent_api(201),
    # After the access check: the mission already has an active run, so the owner meets a conflict.
    ("POST", "/api/v1/missions/{int:mission_id}/runs"): agent_api(409),
    ("GET", "/api/v1/missions/{int:mission_id}/resume"): agent_api(200),
    ("GET", "/api/v1/missions/{int:mission_id}/checkpoints"): agent_api(200),
    ("GET", "/api/v1/checkpoints/{int:checkpoint_id}"): agent_api(200),
    ("POST", "/api/v1/runs/{int:run_id}/heartbeat"): agent_api(200),
    ("POST", "/api/v1/runs/{int:run_id}/checkpoints"): agent_api(201),
    ("POST", "/api/v1/runs/{int:run_id}/records"): agent_api(201),
    ("POST", "/api/v1/runs/{int:run_id}/operations"): agent_api(201),
    ("POST", "/api/v1/operations/{int:operation_id}/attempt"): agent_api(200),
    ("POST", "/api/v1/operations/{int:operation_id}/complete"): agent_api(200),
    ("POST", "/api/v1/operations/{int:operation_id}/fail"): agent_api(200),
    ("POST", "/api/v1/operations/{int:operation_id}/observe"): agent_api(200),
    ("POST", "/api/v1/runs/{int:run_id}/approvals"): agent_api(201),
    ("POST", "/api/v1/runs/{int:run_id}/approvals/batch"): agent_api(201),
    ("POST", "/api/v1/runs/{int:run_id}/milestones"): agent_api(201),
    ("POST", "/api/v1/runs/{int:run_id}/memory-proposals"): agent_api(201),
    ("POST", "/api/v1/runs/{int:run_id}/stop"): agent_api(200),
    # --- API: people-only actions ---
    ("POST", "/api/v1/approvals/{int:approval_id}/decision"): people_only_api(200),
    ("POST", "/api/v1/milestones/{int:milestone_id}/review"): people_only_api(200),
    ("POST", "/api/v1/missions/{int:mission_id}/pause"): people_only_api(200),
    ("POST", "/api/v1/missions/{int:mission_id}/unpause"): people_only_api(409),  # it is not paused
    ("POST", "/api/v1/missions/{int:mission_id}/cancel"): people_only_api(200),
    ("POST", "/api/v1/missions/{int:mission_id}/restore"): people_only_api(409),  # its active run must stop first
    ("POST", "/api/v1/missions/{int:mission_id}/constraints/{int:constraint_id}/retire"): people_only_api(200),
    ("POST", "/api/v1/missions/{int:mission_id}/standing-decisions/{int:standing_id}/revoke"): people_only_api(200),
    ("POST", "/api/v1/memory-proposals/{int:proposal_id}/decision"): people_only_api(200),
    ("DELETE", "/api/v1/memory/{int:item_id}"): people_only_api(200),
    # A person's own webhooks: any person, never an agent token.
    ("GET", "/api/v1/webhooks"): own_people_api(200),
    ("POST", "/api/v1/webhooks"): own_people_api(201),
    ("DELETE", "/api/v1/webhooks/{int:webhook_id}"): people_only_api(200),
    ("POST", "/api/v1/webhooks/{int:webhook_id}/test"): people_only_api(202),
    ("GET", "/api/v1/webhooks/{int:webhook_id}/deliveries"): people_only_api(200),
    # --- API: LangGraph. A thread id names a thread of the CALLER's: another user asking with the
    # owner's thread id reads nothing of hers and writes to (or creates) a thread of their own;
    # test_nothing_of_the_owner_changes_but_by_the_owner proves her thread untouched. A token
    # limited to another mission cannot create a thread (a new mission): 403. ---
    ("POST", "/api/v1/langgraph/checkpoints"): {**own_api(201), "other_mission_token": 403},
    ("GET", "/api/v1/langgraph/checkpoints"): own_api(200),  # another caller's own (empty) list
    ("POST", "/api/v1/langgraph/writes"): {**own_api(200), "other_mission_token": 403},
    ("GET", "/api/v1/langgraph/thread"): agent_api(200),
    ("GET", "/api/v1/langgraph/delta-history"): own_api(200),  # another caller's thread of that id has no history
    ("POST", "/api/v1/langgraph/session"): {**own_api(200), "other_mission_token": 403},
    # Deleting, copying or pruning a thread the caller does not have changes nothing (LangGraph's
    # savers answer so too).
    ("POST", "/api/v1/langgraph/threads/delete"): own_api(200),
    ("POST", "/api/v1/langgraph/delete-for-runs"): own_api(200),
    # The copy is a new mission, which a limited token cannot make: refused whatever the threads.
    ("POST", "/api/v1/langgraph/copy"): {**own_api(200), "other_mission_token": 403},
    ("POST", "/api/v1/langgraph/prune"): own_api(200),
}


# --- The world ------------------------------------------------------------------------------------


@dataclass
class World:
    ids: dict[str, object]
    clients: dict[str, Client]
    headers: dict[str, dict[str, str]]


def build_world() -> World:
    User = get_user_model()
    alice = User.objects.create_user("alice", password="x")
    bob = User.objects.create_user("bob", password="x")
    staff = User.objects.create_user("sam", password="x", is_staff=True)
    owner_token, owner_raw = token_create(user=alice, name="owner-agent")
    agent = Actor(user=alice, token=owner_token)
    person = Actor(user=alice)
    mission = new_mission(alice, agent=agent)
    other_mission = new_mission(alice, "Another quest", agent=agent)
    _, limited_raw = token_create(user=alice, name="limited", mission=other_mission)
    revoked, revoked_raw = token_create(user=alice, name="revoked")
    revoked.revoked_at = timezone.now()
    revoked.save(update_fields=["revoked_at"])
    _, bob_raw = token_create(user=bob, name="bob-agent")
    run, _ = runs.run_start(actor=agent, mission_id=mission.pk, agent="matrix")
    op, _ = operations.operation_plan(actor=agent, run_id=run.pk, key="k", kind="email", target="t", request={})
    # Asking for an approval ends its run, so the pending approval waits in a third quest.
    waiting = new_mission(alice, "Waiting quest", agent=agent)
    waiting_run, _ = runs.run_start(actor=agent, mission_id=waiting.pk, agent="matrix")
    approval, _ = approvals.approval_request(actor=agent, run_id=waiting_run.pk, action="send", payload={}, reason="r")
    milestone, _ = milestones.milestone_claim(actor=agent, run_id=run.pk, kind="research_complete", title="R", gate=False)
    kept, _ = memory.memory_propose(actor=agent, run_id=run.pk, name="tz", value="UTC", reason="r")
    memory.memory_decide(actor=person, proposal_id=kept.pk, decision="approve")
    proposal, _ = memory.memory_propose(actor=agent, run_id=run.pk, name="lang", value="en", reason="r")
    hold = Hold.objects.create(mission=waiting, reason="audit", placed_by=staff)
    standing = StandingDecision.objects.create(mission=mission, action="send", decision="approve", decided_by=alice)
    ids = {
        "mission": mission.pk,
        "run": run.pk,
        "checkpoint": Checkpoint.objects.filter(mission=mission).latest("seq").pk,
        "operation": op.pk,
        "approval": approval.pk,
        "milestone": milestone.pk,
        "proposal": proposal.pk,
        "item": MemoryItem.objects.get(owner=alice).pk,
        "constraint": Constraint.objects.filter(mission=mission).first().pk,
        "token": owner_token.pk,
        "hold": hold.pk,
        "standing": standing.pk,
        "webhook": WebhookEndpoint.objects.create(owner=alice, url="https://hooks.example.com/q", events=["approval.requested"], secret="whsec_" + "A" * 44).pk,
        "thread": f"thread-{mission.pk}",
        "alice": alice,
    }
    assert MemoryProposal.objects.filter(pk=proposal.pk, status="pending").exists()

    def session(user) -> Client:
        client = Client(raise_request_exception=False)
        client.force_login(user)
        return client

    raws = {"owner_token": owner_raw, "other_mission_token": limited_raw, "revoked_token": revoked_raw, "other_token": bob_raw}
    clients = {caller: Client(raise_request_exception=False) for caller in ("anonymous", *TOKEN_CALLERS)}
    clients |= {"owner_session": session(alice), "other_session": session(bob), "staff": session(staff)}
    headers = {caller: {"HTTP_AUTHORIZATION": f"Bearer {raw}"} for caller, raw in raws.items()}
    world = World(ids=ids, clients=clients, headers=headers)
    # The LangGraph thread that the thread-id bodies and queries name.
    response = ask(world, "owner_token", "POST", "/api/v1/langgraph/session", {"thread_id": ids["thread"], "mission_id": mission.pk})
    assert response.status_code in (200, 201), response.content
    response = ask(
        world,
        "owner_token",
        "POST",
        "/api/v1/langgraph/checkpoints",
        {
            "thread_id": ids["thread"],
            "checkpoint": {**GRAPH_CHECKPOINT, "id": "1f0000000000000001"},
        },
    )
    assert response.status_code == 201, response.content
    ids["graph_checkpoint"] = "1f0000000000000001"
    return world


# --- Discovery: every route and method ------------------------------------------------------------


def page_routes() -> list[str]:
    """Every route of the URL conf, as written in it, but the API's operations (walked through
    ninja, with their methods: api_operations) and the admin site's own routes (Django's, behind
    one staff check: one row)."""
    operations = {"api/v1/" + django_route(route) for _, route in api_operations()}
    found: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                if route == "admin/":
                    found.append(route)
                    continue
                walk(pattern.url_patterns, route)
            elif isinstance(pattern, URLPattern) and route not in operations:
                found.append(route)

    walk(get_resolver().url_patterns, "")
    return found


def django_route(api_path: str) -> str:
    """/api/v1/runs/{int:run_id} → runs/<int:run_id>, as the resolver writes it."""
    return re.sub(r"\{(?:(\w+):)?(\w+)\}", r"<\1:\2>", api_path).removeprefix("/api/v1/")


def api_operations() -> list[tuple[str, str]]:
    found = []
    for prefix, router in api._routers:
        for path, path_view in router.path_operations.items():
            for operation in path_view.operations:
                for method in operation.methods:
                    found.append((method, "/api/v1/" + (prefix + path).lstrip("/").replace("//", "/")))
    return found


def all_rows() -> list[tuple[str, str]]:
    pages = [(method, route) for route in page_routes() if route != "admin/" for method in ("GET", "POST")]
    return pages + [("GET", "admin/")] + api_operations()


# --- Asking ----------------------------------------------------------------------------------------

API_PARAMS = {
    "mission_id": "mission",
    "run_id": "run",
    "checkpoint_id": "checkpoint",
    "operation_id": "operation",
    "approval_id": "approval",
    "milestone_id": "milestone",
    "proposal_id": "proposal",
    "item_id": "item",
    "constraint_id": "constraint",
    "standing_id": "standing",
    "webhook_id": "webhook",
}
# Page routes name their objects `pk` (and `cid`, a constraint): which object a pk is, by route.
PAGE_PK = {
    "missions/": "mission",
    "checkpoints/": "checkpoint",
    "approvals/": "approval",
    "milestones/": "milestone",
    "tokens/": "token",
    "memory/items/": "item",
    "memory/proposals/": "proposal",
    "staff/retention/holds/": "hold",
    "settings/notifications/webhooks/": "webhook",
}


def page_url(route: str, ids: dict) -> str:
    url = "/" + route
    for prefix, name in PAGE_PK.items():
        if route.startswith(prefix):
            url = url.replace("<int:pk>", str(ids[name]))
    url = url.replace("<int:cid>", str(ids["constraint"])).replace("<int:sid>", str(ids["standing"]))
    return url.replace("<uidb64>", "MQ").replace("<token>", "set-password")


def api_url(path: str, ids: dict) -> str:
    return re.sub(r"\{(?:\w+:)?(\w+)\}", lambda m: str(ids[API_PARAMS[m.group(1)]]), path)


def ask(world: World, caller: str, method: str, url: str, body=None, form: dict | None = None):
    client = world.clients[caller]
    extra = world.headers.get(caller, {})
    if url == "/mcp":
        extra = {**extra, "HTTP_ACCEPT": "application/json, text/event-stream"}  # what an MCP client accepts
    if method == "GET":
        return client.get(url, body or {}, **extra)
    if form is not None:
        return client.generic(method, url, urlencode(form), content_type="application/x-www-form-urlencoded", **extra)
    data = json.dumps(body) if body is not None else ""
    return client.generic(method, url, data, content_type="application/json", **extra)


def request_for(method: str, route: str, ids: dict) -> tuple[str, dict | None, dict | None]:
    """(url, JSON body or GET query, form) for one row: a minimal valid request, so that what is
    tested is who may ask."""
    if route.startswith("/api/v1/"):
        return api_url(route, ids), API_BODIES.get((method, route), lambda ids: None)(ids), None
    if route == "admin/":
        return "/admin/", None, None
    if route == "mcp" and method == "POST":  # a tool call on the owner's run, as a host sends it
        arguments = {"run_id": ids["run"], "kind": "decision", "text": "Use Lakeside"}
        return "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add_record", "arguments": arguments}}, None
    form = PAGE_FORMS.get(route, lambda ids: {})(ids) if method == "POST" else None
    return page_url(route, ids), None, form


Body = Callable[[dict], dict]
GRAPH_CHECKPOINT = {"v": 4, "ts": "2026-12-03T00:00:00+00:00", "channel_versions": {}, "versions_seen": {}}
# Minimal valid bodies (and GET queries) per API operation, keyed as in EXPECTED.
API_BODIES: dict[tuple[str, str], Body] = {
    ("POST", "/api/v1/missions"): lambda ids: {"title": "Another", "objective": "o"},
    # A public address written as one: registration checks it without a DNS lookup.
    ("POST", "/api/v1/webhooks"): lambda ids: {"url": "https://93.184.215.14/hook", "events": ["approval.requested"]},
    ("POST", "/api/v1/missions/{int:mission_id}/constraints"): lambda ids: {"text": "Never book before noon"},
    ("POST", "/api/v1/missions/{int:mission_id}/runs"): lambda ids: {"agent": "matrix"},
    ("POST", "/api/v1/runs/{int:run_id}/checkpoints"): lambda ids: {"agent_state": {"step": 1}},
    ("POST", "/api/v1/runs/{int:run_id}/records"): lambda ids: {"kind": "decision", "text": "Use Lakeside"},
    ("POST", "/api/v1/runs/{int:run_id}/operations"): lambda ids: {"key": "k2", "kind": "email", "target": "t", "request": {}},
    ("POST", "/api/v1/operations/{int:operation_id}/complete"): lambda ids: {"external_id": "E1", "external_status": "sent"},
    ("POST", "/api/v1/operations/{int:operation_id}/fail"): lambda ids: {"error": "timeout", "retryable": True},
    ("POST", "/api/v1/operations/{int:operation_id}/observe"): lambda ids: {"external_status": "held"},
    ("POST", "/api/v1/runs/{int:run_id}/approvals"): lambda ids: {"action": "send", "payload": {}, "reason": "r"},
    ("POST", "/api/v1/runs/{int:run_id}/approvals/batch"): lambda ids: {"items": [{"action": "send", "payload": {}, "reason": "r"}]},
    ("POST", "/api/v1/runs/{int:run_id}/milestones"): lambda ids: {"kind": "research_complete", "title": "Shortlist"},
    ("POST", "/api/v1/runs/{int:run_id}/memory-proposals"): lambda ids: {"name": "n", "value": "v", "reason": "r"},
    ("POST", "/api/v1/runs/{int:run_id}/stop"): lambda ids: {"reason": "blocked_external"},
    ("POST", "/api/v1/approvals/{int:approval_id}/decision"): lambda ids: {"decision": "approve"},
    ("POST", "/api/v1/milestones/{int:milestone_id}/review"): lambda ids: {"action": "approve"},
    ("POST", "/api/v1/missions/{int:mission_id}/restore"): lambda ids: {"checkpoint_id": ids["checkpoint"]},
    ("POST", "/api/v1/memory-proposals/{int:proposal_id}/decision"): lambda ids: {"decision": "approve"},
    ("POST", "/api/v1/langgraph/checkpoints"): lambda ids: {
        "thread_id": ids["thread"],
        "checkpoint": {**GRAPH_CHECKPOINT, "id": "1f0000000000000002"},
        "parent_checkpoint_id": ids["graph_checkpoint"],
    },
    ("GET", "/api/v1/langgraph/checkpoints"): lambda ids: {"thread_id": ids["thread"]},
    ("POST", "/api/v1/langgraph/writes"): lambda ids: {
        "thread_id": ids["thread"],
        "checkpoint_id": ids["graph_checkpoint"],
        "task_id": "t1",
        "writes": [],
    },
    ("GET", "/api/v1/langgraph/thread"): lambda ids: {"thread_id": ids["thread"]},
    ("GET", "/api/v1/langgraph/delta-history"): lambda ids: {"thread_id": ids["thread"], "channel": "messages"},
    ("POST", "/api/v1/langgraph/session"): lambda ids: {"thread_id": ids["thread"]},
    ("POST", "/api/v1/langgraph/threads/delete"): lambda ids: {"thread_id": ids["thread"]},
    ("POST", "/api/v1/langgraph/delete-for-runs"): lambda ids: {"run_ids": ["lg-run-1"]},
    ("POST", "/api/v1/langgraph/copy"): lambda ids: {"source_thread_id": ids["thread"], "target_thread_id": "copied"},
    ("POST", "/api/v1/langgraph/prune"): lambda ids: {"thread_ids": [ids["thread"]]},
}
# Minimal valid forms per page route (POST).
PAGE_FORMS: dict[str, Body] = {
    "memory/proposals/<int:pk>/decide/": lambda ids: {"decision": "approve"},
    "missions/<int:pk>/retention/delete/": lambda ids: {"confirmed": "yes"},
    "missions/<int:pk>/cancel/": lambda ids: {"confirmed": "yes"},
    "missions/<int:pk>/restore/": lambda ids: {"checkpoint": ids["checkpoint"], "confirmed": "on"},
    "missions/<int:pk>/constraints/": lambda ids: {"text": "Never book before noon"},
    "missions/<int:pk>/constraints/<int:cid>/edit/": lambda ids: {"text": "Never email before Monday"},
    "approvals/<int:pk>/decide/": lambda ids: {"decision": "approve"},
    "milestones/<int:pk>/review/": lambda ids: {"action": "approve"},
    "tokens/": lambda ids: {"name": "laptop agent"},
    "staff/retention/policy/": lambda ids: {
        "grace_days": 30,
        "approved_max_days": 365,
        "memory_max_days": 180,
        "snapshot_prune_days": 14,
        "snapshot_keep_newest": 20,
        "purge_batch_size": 100,
    },
    "staff/retention/holds/": lambda ids: {"reason": "audit", "mission_id": ids["mission"]},
    "staff/retention/purge/": lambda ids: {"dry_run": "on"},
    "accounts/login/": lambda ids: {"username": "alice", "password": "x"},
}


OWNER_CALLERS = ("owner_session", "owner_token")


def owner_fingerprint(alice) -> dict[str, list]:
    """Everything of the owner's that a request could change (a token's last use aside)."""
    by_mission = {"mission__owner": alice}
    return {
        model.__name__: list(model.objects.filter(**where).order_by("pk").values())
        for model, where in (
            (Mission, {"owner": alice}),
            (Run, by_mission),
            (Checkpoint, by_mission),
            (Record, by_mission),
            (Operation, by_mission),
            (Approval, by_mission),
            (Milestone, by_mission),
            (Constraint, by_mission),
            (MemoryProposal, by_mission),
            (MemoryItem, {"owner": alice}),
            (GraphThread, {"owner": alice}),
            (GraphCheckpoint, by_mission),
            (GraphWrite, by_mission),
        )
    } | {"AgentToken": list(AgentToken.objects.filter(user=alice).order_by("pk").values("pk", "revoked_at", "mission_id"))}


def test_every_route_has_a_row_and_every_row_a_route():
    rows = all_rows()
    missing = [row for row in rows if row not in EXPECTED]
    assert not missing, f"routes without a row in EXPECTED (add one, with who may call them): {missing}"
    stale = [row for row in EXPECTED if row not in rows]
    assert not stale, f"rows in EXPECTED for routes that no longer exist: {stale}"
    assert len(rows) > 100  # the walk found the pages and the API operations


@pytest.mark.long
def test_every_caller_gets_the_expected_answer_on_every_route(settings):
    # The walk asks about a thousand questions; on a loaded machine that can outlast the heartbeat
    # timeout, and a silent run may then be taken over (201 instead of 409). Timing is not what
    # this test is about: the world's run stays alive for the whole walk.
    settings.QUESTLOG_HEARTBEAT_TIMEOUT = 3600
    world = build_world()
    alice = world.ids["alice"]
    before = owner_fingerprint(alice)
    wrong: list[str] = []
    touched: list[str] = []
    owner_changes = 0
    for method, route in all_rows():
        url, body, form = request_for(method, route, world.ids)
        for caller in CALLERS:
            cookies = copy.deepcopy(world.clients[caller].cookies)
            # Each request in a savepoint rolled back: every caller meets the same world.
            with transaction.atomic():
                status = ask(world, caller, method, url, body, form).status_code
                changed = owner_fingerprint(alice) != before
                if changed and caller not in OWNER_CALLERS:
                    touched.append(f"{method} {route} by {caller} ({status})")
                owner_changes += changed and caller in OWNER_CALLERS
                transaction.set_rollback(True)
            # Signing out or changing a password changes the client's cookies: they are put back too.
            world.clients[caller].cookies = cookies
            expected = EXPECTED[(method, route)][caller]
            if status != expected:
                wrong.append(f"{method} {route} by {caller}: {status}, expected {expected}")
    assert not wrong, "\n".join(wrong)
    assert not touched, "changed the owner's things:\n" + "\n".join(touched)
    assert owner_changes > 40  # the fingerprint does see changes: the owner's own writes show in it


def test_authentication_comes_before_validation_on_every_api_operation():
    """With a body that is not even JSON, no caller without valid credentials learns anything
    about it: 401, never a 400 or 422. (With valid credentials, a body is validated before its
    objects are looked up: a bad body from another user is a 4xx about the body, never a 5xx and
    never the object.)"""
    world = build_world()
    wrong = []
    for method, route in api_operations():
        url = api_url(route, world.ids)
        for caller in ("anonymous", "revoked_token"):
            extra = world.headers.get(caller, {})
            client = world.clients[caller]
            if method == "GET":
                response = client.get(url, {"limit": "not a number"}, **extra)
            else:
                response = client.generic(method, url, "{not json", content_type="application/json", **extra)
            if response.status_code != 401:
                wrong.append(f"{method} {route} by {caller}: {response.status_code}")
    assert not wrong, wrong


def test_the_classes_say_what_the_issue_asks():
    """Agent tokens never reach people-only actions; other users' objects are 404."""
    for (method, route), expected in EXPECTED.items():
        if expected == people_only_api(expected["owner_session"]):
            assert {expected[c] for c in ("owner_token", "other_mission_token", "other_token")} == {403}, route
        if route.startswith("/api/v1/") and "{" in route:
            assert {expected[c] for c in ("other_session", "staff")} == {404}, route
            assert expected["other_token"] in (403, 404), route
        if expected["anonymous"] < 400 and route.startswith("/api/v1/"):
            raise AssertionError(f"{method} {route} answers anonymous callers")
