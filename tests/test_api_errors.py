"""Auth and errors exactly as API.md: 401/403/404/400/422/413, always a JSON error body, never a 500."""

import json

import pytest
from django.test import Client

from quests.models import Mission, Run
from quests.services.tokens import token_create, token_revoke

from .conftest import ApiClient

pytestmark = pytest.mark.django_db


def assert_error(response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert isinstance(error["code"], str) and error["code"] == error["code"].lower()
    assert isinstance(error["message"], str) and error["message"]
    if code:
        assert error["code"] == code
    return error


@pytest.fixture
def world(agent, person, mission, run) -> dict:
    """One of each object alice owns, for calls that need ids."""
    op = agent.post(f"runs/{run['id']}/operations", {"key": "k", "kind": "email", "target": "t", "request": {}}).json()
    cp = agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"a": 1}}).json()
    milestone = agent.post(f"runs/{run['id']}/milestones", {"kind": "custom", "title": "m"}).json()
    proposal = agent.post(f"runs/{run['id']}/memory-proposals", {"name": "n", "value": "v", "reason": "r"}).json()
    approval = agent.post(f"runs/{run['id']}/approvals", {"action": "a", "payload": {}, "reason": "r"}).json()
    person.post(f"memory-proposals/{proposal['id']}/decision", {"decision": "approve"})
    item = agent.get("memory").json()["items"][0]
    constraint_id = Mission.objects.get(pk=mission["id"]).constraints.get().pk
    return {
        "mission": mission["id"],
        "run": run["id"],
        "op": op["id"],
        "cp": cp["id"],
        "milestone": milestone["id"],
        "approval": approval["id"],
        "item": item["id"],
        "constraint": constraint_id,
    }


# (method, path template, body) for every endpoint that takes an id in its path.
ID_CALLS = [
    ("get", "missions/{mission}", None),
    ("post", "missions/{mission}/constraints", {"text": "x"}),
    ("post", "missions/{mission}/runs", {}),
    ("get", "missions/{mission}/resume", None),
    ("get", "missions/{mission}/checkpoints", None),
    ("get", "checkpoints/{cp}", None),
    ("post", "runs/{run}/heartbeat", None),
    ("post", "runs/{run}/checkpoints", {"agent_state": {}}),
    ("post", "runs/{run}/records", {"kind": "note", "text": "x"}),
    ("post", "runs/{run}/operations", {"key": "k2", "kind": "e", "target": "t", "request": {}}),
    ("post", "operations/{op}/attempt", None),
    ("post", "operations/{op}/complete", {"external_id": "x", "external_status": "sent"}),
    ("post", "operations/{op}/fail", {"error": "x", "retryable": True}),
    ("post", "operations/{op}/observe", {"external_status": "x"}),
    ("post", "runs/{run}/approvals", {"action": "a", "payload": {}, "reason": "r"}),
    ("post", "runs/{run}/milestones", {"kind": "custom", "title": "t"}),
    ("post", "runs/{run}/memory-proposals", {"name": "n", "value": "v", "reason": "r"}),
    ("post", "runs/{run}/stop", {"reason": "completed"}),
    ("post", "approvals/{approval}/decision", {"decision": "approve"}),
    ("post", "milestones/{milestone}/review", {"action": "approve"}),
    ("post", "missions/{mission}/pause", None),
    ("post", "missions/{mission}/unpause", None),
    ("post", "missions/{mission}/cancel", None),
    ("post", "missions/{mission}/restore", {"checkpoint_id": 1}),
    ("post", "missions/{mission}/constraints/{constraint}/retire", None),
    ("post", "memory-proposals/{item}/decision", {"decision": "approve"}),
    ("delete", "memory/{item}", None),
]
CALL_IDS = [f"{m} {p}" for m, p, _ in ID_CALLS]

PEOPLE_ONLY = [
    ("approvals/{approval}/decision", {"decision": "approve"}),
    ("milestones/{milestone}/review", {"action": "approve"}),
    ("missions/{mission}/pause", None),
    ("missions/{mission}/unpause", None),
    ("missions/{mission}/cancel", None),
    ("missions/{mission}/restore", {"checkpoint_id": 0}),
    ("missions/{mission}/constraints/{constraint}/retire", None),
    ("memory-proposals/{item}/decision", {"decision": "approve"}),
]


def is_people_only(template: str) -> bool:
    return template in {p for p, _ in PEOPLE_ONLY} or template.startswith("memory/")


def call(api, method: str, path: str, body):
    return api.get(path) if method == "get" else getattr(api, method)(path, body) if method == "post" else api.delete(path)


@pytest.mark.parametrize("method, template, body", ID_CALLS, ids=CALL_IDS)
def test_a_malformed_or_unknown_id_is_not_found(agent, person, method, template, body):
    for bad_id in ("abc", "99999999", "99999999999999999999999", "0", "1.5", "-1", "1e3", "%20"):
        path = template.format_map({k: bad_id for k in ("mission", "run", "op", "cp", "milestone", "approval", "item", "constraint")})
        assert_error(call(person, method, path, body), 404)
        response = call(agent, method, path, body)
        if is_people_only(template) and response.status_code == 403:
            # A bearer token is refused on a people-only path whatever the id: that leaks nothing either.
            assert_error(response, 403, "forbidden")
        else:
            assert_error(response, 404)


def test_another_users_objects_are_not_found(bob_agent, bob_person, world):
    for method, template, body in ID_CALLS:
        path = template.format_map(world)
        assert_error(call(bob_person, method, path, body), 404, "not_found")
        response = call(bob_agent, method, path, body)
        if is_people_only(template) and response.status_code == 403:
            continue  # a people-only action refuses bob's token before looking anything up
        assert_error(response, 404, "not_found")
    assert Run.objects.get(pk=world["run"]).stop_reason == "waiting_for_approval"
    assert Mission.objects.get(pk=world["mission"]).status == "waiting_for_approval"


@pytest.mark.parametrize("template, body", PEOPLE_ONLY, ids=[p for p, _ in PEOPLE_ONLY])
def test_people_only_actions_refuse_a_bearer_token(agent, world, template, body):
    path = template.format_map(world)
    if template.startswith("memory-proposals"):
        path = f"memory-proposals/{Mission.objects.get(pk=world['mission']).memory_proposals.get().pk}/decision"
    assert_error(agent.post(path, body), 403, "forbidden")


def test_forgetting_memory_refuses_a_bearer_token(agent, world):
    assert_error(agent.delete(f"memory/{world['item']}"), 403, "forbidden")


def test_no_credentials_is_unauthenticated(world):
    anonymous = ApiClient(Client())
    for method, template, body in ID_CALLS:
        assert_error(call(anonymous, method, template.format_map(world), body), 401, "unauthenticated")


@pytest.mark.parametrize("header", ["Bearer qlt_not-a-real-token", "Bearer ", "Basic YWxpY2U6YWxpY2U=", "qlt_raw"])
def test_a_bad_token_is_unauthenticated(mission, header):
    response = Client().get("/api/v1/missions", HTTP_AUTHORIZATION=header)
    assert_error(response, 401, "unauthenticated")


@pytest.mark.parametrize("header", ["", "Bearer qlt_not-a-real-token", "Basic YWxpY2U6YWxpY2U="])
def test_credentials_sent_beside_a_session_are_judged_alone(person, mission, header):
    """A bad or empty Authorization header is refused even when a signed-in session comes along."""
    assert person.get("missions").status_code == 200
    assert_error(person.client.get("/api/v1/missions", HTTP_AUTHORIZATION=header), 401, "unauthenticated")


def test_a_revoked_token_is_unauthenticated(alice, mission):
    token, raw = token_create(user=alice, name="short-lived")
    api = ApiClient(Client(), raw)
    assert api.get("missions").status_code == 200
    token_revoke(user=alice, token_id=token.pk)
    assert_error(api.get("missions"), 401)


def test_unauthenticated_lists_are_refused_too():
    assert_error(Client().get("/api/v1/missions"), 401)
    assert_error(Client().get("/api/v1/memory"), 401)
    assert_error(Client().post("/api/v1/missions", data="{}", content_type="application/json"), 401)


def test_a_session_write_needs_the_csrf_token(alice, mission):
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(f"/api/v1/missions/{mission['id']}/pause", data="", content_type="application/json")
    assert_error(response, 403)
    assert Mission.objects.get(pk=mission["id"]).status == "ready"
    response = client.post(f"/api/v1/missions/{mission['id']}/pause", data="", content_type="application/json", HTTP_X_CSRFTOKEN="x" * 32)
    assert_error(response, 403)
    assert client.get(f"/api/v1/missions/{mission['id']}").status_code == 200


def test_a_bearer_token_needs_no_csrf_token(alice, mission):
    _, raw = token_create(user=alice, name="plain-http-client")
    client = Client(enforce_csrf_checks=True)
    response = client.post(f"/api/v1/missions/{mission['id']}/runs", data="{}", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 201


def test_an_inactive_users_token_is_unauthenticated(alice, mission):
    _, raw = token_create(user=alice, name="t")
    alice.is_active = False
    alice.save()
    assert_error(ApiClient(Client(), raw).get("missions"), 401)


def test_a_person_logs_in_at_the_login_page_and_uses_the_api(alice, agent, mission):
    client = Client(enforce_csrf_checks=True)
    login_page = client.get("/accounts/login/")
    assert login_page.status_code == 200
    csrf = client.cookies["csrftoken"].value
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-password", "csrfmiddlewaretoken": csrf})
    assert response.status_code == 302
    assert "sessionid" in client.cookies
    csrf = client.cookies["csrftoken"].value
    response = client.post(f"/api/v1/missions/{mission['id']}/pause", data="", content_type="application/json", HTTP_X_CSRFTOKEN=csrf)
    assert response.status_code == 200
    assert response.json()["status"] == "paused"


@pytest.mark.parametrize("path", ["missions", "runs/{run}/checkpoints", "runs/{run}/records", "runs/{run}/operations", "operations/{op}/complete"])
def test_malformed_json_is_400(agent, world, path):
    for raw in ("{bad json", '{"title": "x",}', "\x00\xff", "{"):
        assert_error(agent.post(path.format_map(world), raw=raw), 400)


@pytest.mark.parametrize(
    "path, raw",
    [
        ("runs/{run}/records", '{"kind": "decision", "text": "x", "data": {"n": NaN}}'),
        ("runs/{run}/operations", '{"key": "k9", "kind": "e", "target": "t", "request": {"n": Infinity}}'),
        ("runs/{run}/checkpoints", '{"agent_state": {"n": -Infinity}}'),
        ("runs/{run}/records", '{"kind": "decision", "text": "x", "data": {"n": 1e400}}'),
        ("runs/{run}/checkpoints", '{"agent_state": {"n": -1e999}}'),
    ],
)
def test_numbers_json_cannot_hold_are_refused_not_500(agent, mission, run, path, raw):
    """NaN and infinities are not JSON (Python's parser accepts them; PostgreSQL's jsonb does not)."""
    assert_error(agent.post(path.format(run=run["id"]), raw=raw), 400)


def test_large_finite_numbers_are_kept(agent, run):
    response = agent.post(f"runs/{run['id']}/records", raw='{"kind": "note", "text": "x", "data": {"n": 1e300, "m": 123456789012345678901234567890}}')
    assert response.status_code == 201
    assert response.json()["data"] == {"n": 1e300, "m": 123456789012345678901234567890}


ALL_POSTS = [
    "missions",
    "missions/{mission}/constraints",
    "missions/{mission}/runs",
    "runs/{run}/checkpoints",
    "runs/{run}/records",
    "runs/{run}/operations",
    "operations/{op}/attempt",
    "operations/{op}/complete",
    "operations/{op}/fail",
    "operations/{op}/observe",
    "runs/{run}/approvals",
    "runs/{run}/milestones",
    "runs/{run}/memory-proposals",
    "runs/{run}/stop",
    "approvals/{approval}/decision",
    "milestones/{milestone}/review",
    "missions/{mission}/restore",
]


BAD_BODIES = [
    [],
    "text",
    42,
    None,
    {"key": 5},
    {"key": "k" * 201},
    {"key": ["k"]},
    {
        "title": ["x"],
        "objective": 1,
        "kind": {},
        "text": 3,
        "agent_state": "x",
        "reason": 1,
        "decision": None,
        "action": [],
        "name": 1,
        "value": 2,
        "external_id": {},
        "external_status": [],
        "error": 1,
        "retryable": "perhaps",
        "checkpoint_id": "x",
        "payload": [1],
        "request": "r",
        "key": "fine",
    },
]


@pytest.mark.parametrize("path", ALL_POSTS)
def test_bad_bodies_are_client_errors_never_500s(agent, person, world, path):
    for body in BAD_BODIES:
        for api in (agent, person):
            response = api.post(path.format_map(world), raw=json.dumps(body))
            assert 400 <= response.status_code < 500, (path, body, response.status_code, response.content)
            assert response.json()["error"]["message"]


@pytest.mark.parametrize(
    "path, body",
    [
        ("missions", {"title": "x", "objective": "y", "key": "k" * 201}),
        ("missions", {"title": "", "objective": "y"}),
        ("missions", {"title": "x" * 201, "objective": "y"}),
        ("missions", {"title": "x", "objective": "y", "constraints": "not a list"}),
        ("runs/{run}/records", {"kind": "note", "text": "x", "key": "k" * 201}),
    ],
)
def test_an_invalid_field_is_named(agent, world, path, body):
    response = agent.post(path.format_map(world), body)
    assert response.status_code in (400, 422)
    error = response.json()["error"]
    field = {k for k in body if k not in ("objective",)} - {"kind", "text"}
    assert error["field"] in field or error["field"].split(".")[0] in field


def test_a_body_over_the_limit_is_413_with_a_json_error(agent, mission):
    body = {"title": "x", "objective": "y" * (1024 * 1024)}
    assert_error(agent.post("missions", body), 413, "payload_too_large")
    assert Mission.objects.count() == 1


def test_the_body_limit_is_a_setting(agent, run, settings):
    settings.QUESTLOG_MAX_BODY_BYTES = 500
    assert_error(agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"x": "y" * 600}}), 413)
    assert agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"x": "y"}}).status_code == 201


def test_an_unknown_api_path_is_a_json_404(agent):
    assert_error(agent.get("no-such-thing"), 404)


@pytest.fixture
def limited(alice, agent) -> tuple[ApiClient, dict, dict]:
    """A token limited to one of alice's two missions."""
    first = agent.post("missions", {"title": "One", "objective": "O"}).json()
    second = agent.post("missions", {"title": "Two", "objective": "O"}).json()
    token, raw = token_create(user=alice, name="limited", mission=Mission.objects.get(pk=first["id"]))
    return ApiClient(Client(), raw), first, second


def test_a_mission_limited_token_acts_on_its_mission(limited):
    api, mine, _ = limited
    assert api.get(f"missions/{mine['id']}").status_code == 200
    run = api.post(f"missions/{mine['id']}/runs").json()["run"]
    assert api.post(f"runs/{run['id']}/checkpoints", {"agent_state": {}}).status_code == 201
    assert [m["id"] for m in api.get("missions").json()["items"]] == [mine["id"]]


def test_a_mission_limited_token_sees_nothing_of_other_missions(limited, agent):
    api, _, other = limited
    other_run = agent.post(f"missions/{other['id']}/runs").json()["run"]
    op = agent.post(f"runs/{other_run['id']}/operations", {"key": "k", "kind": "e", "target": "t", "request": {}}).json()
    cp = agent.post(f"runs/{other_run['id']}/checkpoints", {"agent_state": {}}).json()
    assert_error(api.get(f"missions/{other['id']}"), 404)
    assert_error(api.get(f"missions/{other['id']}/resume"), 404)
    assert_error(api.post(f"missions/{other['id']}/runs"), 404)
    assert_error(api.post(f"runs/{other_run['id']}/heartbeat"), 404)
    assert_error(api.post(f"operations/{op['id']}/attempt"), 404)
    assert_error(api.get(f"checkpoints/{cp['id']}"), 404)


def test_a_mission_limited_token_cannot_create_missions(limited):
    api, _, _ = limited
    assert_error(api.post("missions", {"title": "New", "objective": "O"}), 403)


def test_the_openapi_schema_describes_the_api(agent):
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in (
        "/api/v1/missions",
        "/api/v1/missions/{mission_id}/runs",
        "/api/v1/missions/{mission_id}/resume",
        "/api/v1/runs/{run_id}/checkpoints",
        "/api/v1/operations/{operation_id}/attempt",
        "/api/v1/approvals/{approval_id}/decision",
        "/api/v1/milestones/{milestone_id}/review",
    ):
        assert path in paths, path


def test_the_docs_page_is_served(agent):
    response = Client().get("/api/v1/docs")
    assert response.status_code == 200
    assert b"openapi.json" in response.content


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/nope",
        "/api/v1/memory/null,null",
        "/api/v1/checkpoints/null,null",
        "/api/v1/missions/1/nope",
        "/api",
        "/api/",
        "/api/v1",
        "/api/v1/",
        "/api/v2/missions",
        "/api/v1/missions/",
    ],
)
def test_a_path_the_api_does_not_have_is_a_json_404_with_debug_on_or_off(settings, agent, path, debug):
    settings.DEBUG = debug
    assert_error(agent.get(path), 404, "not_found")
    # Not a redirect to the path with a slash either (under DEBUG a POST would be Django's HTML
    # RuntimeError page): an API path is exact.
    assert_error(agent.post(path, {"title": "t"}), 404, "not_found")


@pytest.mark.parametrize("debug", [False, True])
def test_a_method_a_path_does_not_take_is_a_json_405_naming_the_allowed_ones(settings, agent, debug):
    settings.DEBUG = debug
    response = agent._call("put", "missions", {"title": "t"})
    assert_error(response, 405, "method_not_allowed")
    assert set(response["Allow"].replace(" ", "").split(",")) == {"GET", "POST"}
    assert_error(agent.delete("missions"), 405, "method_not_allowed")


@pytest.mark.parametrize("debug", [False, True])
@pytest.mark.parametrize("path", ["/api/v1/openapi.json", "/api/v1/docs"])
def test_the_document_and_its_docs_page_take_only_get_and_head(settings, agent, path, debug):
    settings.DEBUG = debug
    for method in ("post", "delete"):
        response = agent._call(method, path, {})
        assert_error(response, 405, "method_not_allowed")
        assert set(response["Allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}
    assert agent.client.head(path).status_code == 200
