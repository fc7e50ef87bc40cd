"""A person signed in to Questlog with a browser session, for the people-only API (approve,
review, pause …). Agents never use this: bearer tokens get 403 there. Tests and `replaycheck` use
it to do what a person would do in the browser."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from questlog_client import errors
from questlog_client.models import Bundle


class PersonSession:
    """A person signed in with a session, for the people-only API: GET /accounts/login/ for the
    csrftoken cookie, POST the credentials, then send X-CSRFToken with every call."""

    def __init__(self, base_url: str, username: str, password: str, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, follow_redirects=False)
        self._lock = threading.Lock()
        login = f"{self.base_url}/accounts/login/"
        self._http.get(login)
        csrf = self._http.cookies.get("csrftoken")
        if not csrf:
            raise errors.Unauthenticated(f"{login} set no csrftoken cookie.")
        answer = self._http.post(login, data={"username": username, "password": password, "csrfmiddlewaretoken": csrf}, headers={"Referer": login})
        if answer.status_code != 302 or not self._http.cookies.get("sessionid"):
            raise errors.Unauthenticated(f"Could not sign in as {username!r} (HTTP {answer.status_code}).")
        self._http.headers["X-CSRFToken"] = self._http.cookies.get("csrftoken") or csrf
        self._http.headers["Referer"] = login

    def close(self) -> None:
        self._http.close()

    def page(self, path: str) -> httpx.Response:
        """GET one of the browser's pages (`/missions/7/`, `/approvals/`) with the session, as the
        browser's polling does."""
        with self._lock:
            return self._http.get(path)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        with self._lock:  # one request at a time: the session's cookies are shared state
            answer = self._http.request(method, f"/api/v1/{path}", json=body if method != "GET" else None)
        data = answer.json() if answer.content else None
        if answer.status_code >= 400:
            raise errors.error_for(answer.status_code, data)
        return data

    def mission(self, mission_id: int) -> dict[str, Any]:
        return self.call("GET", f"missions/{mission_id}")

    def resume(self, mission_id: int) -> Bundle:
        return Bundle.from_dict(self.call("GET", f"missions/{mission_id}/resume"))

    def review_milestone(self, milestone_id: int, action: str, note: str = "") -> dict[str, Any]:
        return self.call("POST", f"milestones/{milestone_id}/review", {"action": action, "note": note})

    def decide_approval(
        self, approval_id: int, decision: str, *, payload: dict[str, Any] | None = None, note: str = "", always: bool = False
    ) -> dict[str, Any]:
        """`always`: the decision stands for every request of this action in the mission."""
        body = {"decision": decision, "payload": payload, "note": note, "always": always}
        return self.call("POST", f"approvals/{approval_id}/decision", body)

    def revoke_standing_decision(self, mission_id: int, standing_id: int) -> dict[str, Any]:
        return self.call("POST", f"missions/{mission_id}/standing-decisions/{standing_id}/revoke")

    def add_constraint(self, mission_id: int, text: str, *, key: str | None = None) -> dict[str, Any]:
        return self.call("POST", f"missions/{mission_id}/constraints", {"text": text, "key": key})

    def retire_constraint(self, mission_id: int, constraint_id: int) -> dict[str, Any]:
        return self.call("POST", f"missions/{mission_id}/constraints/{constraint_id}/retire")

    def pause(self, mission_id: int) -> dict[str, Any]:
        return self.call("POST", f"missions/{mission_id}/pause")

    def unpause(self, mission_id: int) -> dict[str, Any]:
        return self.call("POST", f"missions/{mission_id}/unpause")

    def cancel(self, mission_id: int) -> dict[str, Any]:
        return self.call("POST", f"missions/{mission_id}/cancel")

    def restore(self, mission_id: int, checkpoint_id: int) -> dict[str, Any]:
        return self.call("POST", f"missions/{mission_id}/restore", {"checkpoint_id": checkpoint_id})

    def decide_memory(self, proposal_id: int, decision: str) -> dict[str, Any]:
        return self.call("POST", f"memory-proposals/{proposal_id}/decision", {"decision": decision})
