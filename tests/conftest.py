import json
from typing import Any

import pytest
from django.test import Client

from quests.services.tokens import token_create


class ApiClient:
    """A thin JSON client for /api/v1 that speaks as an agent (bearer token) or a person (session)."""

    def __init__(self, client: Client, token: str | None = None) -> None:
        self.client = client
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}

    def _call(self, method: str, path: str, body: Any = None, raw: bytes | str | None = None, **extra):
        url = path if path.startswith("/") else f"/api/v1/{path}"
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        kwargs = {**self.headers, **extra}
        if method == "get":
            return self.client.get(url, **kwargs)
        # Like a real agent's HTTP client: JSON, or an empty body for calls that take none.
        return getattr(self.client, method)(url, data=data or "", content_type="application/json", **kwargs)

    def get(self, path: str, **extra):
        return self._call("get", path, **extra)

    def post(self, path: str, body: Any = None, **extra):
        return self._call("post", path, body, **extra)

    def delete(self, path: str, **extra):
        return self._call("delete", path, **extra)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    # The default hasher costs about a second per user on this machine; tests don't need it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="alice-password")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="bob-password")


@pytest.fixture
def charlie(django_user_model):
    return django_user_model.objects.create_user("charlie", password="charlie-password")


@pytest.fixture
def agent(alice) -> ApiClient:
    """Alice's agent, with a bearer token for all of her missions."""
    _, raw = token_create(user=alice, name="test-agent")
    return ApiClient(Client(), raw)


@pytest.fixture
def person(alice) -> ApiClient:
    """Alice herself, signed in with a session (CSRF is enforced)."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    client.get("/accounts/login/")
    api = ApiClient(client)
    api.headers = {"HTTP_X_CSRFTOKEN": client.cookies["csrftoken"].value}
    return api


@pytest.fixture
def bob_agent(bob) -> ApiClient:
    _, raw = token_create(user=bob, name="bob-agent")
    return ApiClient(Client(), raw)


@pytest.fixture
def bob_person(bob) -> ApiClient:
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    client.get("/accounts/login/")
    api = ApiClient(client)
    api.headers = {"HTTP_X_CSRFTOKEN": client.cookies["csrftoken"].value}
    return api


@pytest.fixture
def mission(agent) -> dict:
    response = agent.post(
        "missions",
        {
            "title": "Book the offsite",
            "objective": "Find and book a venue for 12 people.",
            "constraints": ["Never email the client before Friday"],
            "planned_milestones": [{"kind": "research_complete", "title": "Research"}, {"kind": "plan_approved", "title": "Plan"}],
        },
    )
    assert response.status_code == 201, response.content
    return response.json()


@pytest.fixture
def run(agent, mission) -> dict:
    response = agent.post(f"missions/{mission['id']}/runs", {"agent": "test"})
    assert response.status_code == 201, response.content
    return response.json()["run"]


@pytest.fixture
def make_stale():
    """Ages a run's heartbeat past QUESTLOG_HEARTBEAT_TIMEOUT, as if its agent had gone silent."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from quests.models import Run

    def _make_stale(run_id: int) -> None:
        aged = timezone.now() - timedelta(seconds=settings.QUESTLOG_HEARTBEAT_TIMEOUT + 5)
        Run.objects.filter(pk=run_id).update(heartbeat_at=aged)

    return _make_stale
