"""`manage.py demo_agent`: the demo quest through the real HTTP API, waiting for a person."""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from questlog_client.fake_service import FakeService
from questlog_client.scenarios.demo import STEP_FREE
from questlog_client.testing import PersonSession, approve_everything
from quests.models import Mission

pytestmark = pytest.mark.django_db(transaction=True)


class Person(threading.Thread):
    """Alice in the browser: adds a constraint while she reviews the plan, approves everything.
    What stops her (an error answer, a lost connection) is kept in `failure`."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.session = PersonSession(url, "alice", "alice-password")
        self.done = threading.Event()
        self.acted: list[str] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.done.wait(0.1):
                self.look_and_decide()
        except BaseException as exc:
            self.failure = exc

    def look_and_decide(self) -> None:
        for mission in self.session.call("GET", "missions")["items"]:
            if mission["status"] == "waiting_for_approval":
                bundle = self.session.resume(mission["id"])
                if any(m.kind == "plan_approved" and m.review_status == "pending_review" for m in bundle.milestones):
                    self.session.add_constraint(mission["id"], STEP_FREE)
                approve_everything(self.session, bundle)
                self.acted.append(bundle.next_action)

    @classmethod
    @contextmanager
    def at_work(cls, url: str) -> Iterator["Person"]:
        person = cls(url)
        person.start()
        try:
            yield person
        finally:
            person.done.set()
            person.join()
        assert person.failure is None, f"Alice failed: {person.failure!r}"


GIVE_UP_AFTER = 120  # seconds: the quest takes a few; the agent waits for Alice without end


def demo_agent(person: Person, *args: str, stdout: StringIO) -> None:
    """`manage.py demo_agent` on a thread of its own while this one watches Alice: the agent waits
    for her without end, as `make demo` must, so if she fails, or the quest is not done within
    GIVE_UP_AFTER seconds, the test fails with the cause instead of hanging the run."""
    failure: list[BaseException] = []

    def work() -> None:
        try:
            call_command("demo_agent", *args, stdout=stdout)
        except BaseException as exc:
            failure.append(exc)
        finally:
            connection.close()

    agent = threading.Thread(target=work, daemon=True)
    agent.start()
    deadline = time.monotonic() + GIVE_UP_AFTER
    while agent.is_alive() and person.failure is None and time.monotonic() < deadline:
        agent.join(0.2)
    assert person.failure is None, f"Alice failed while the demo agent waited for her: {person.failure!r}\n{stdout.getvalue()}"
    assert not agent.is_alive(), f"the demo agent still ran after {GIVE_UP_AFTER} s:\n{stdout.getvalue()}"
    if failure:
        raise failure[0]


def test_it_works_the_demo_quest_and_waits_for_the_person_twice(live_server, alice, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    out = StringIO()
    with Person.at_work(live_server.url) as person:
        demo_agent(person, "--base-url", live_server.url, "--user", "alice", "--pace", "0", "--poll", "0.1", stdout=out)
    text = out.getvalue()
    mission = Mission.objects.get(owner=alice)
    assert mission.status == "completed" and mission.stop_reason == "completed"
    assert text.count("Your turn: ") == 2, text
    assert person.acted == ["await_approval", "await_approval"]
    assert "Decided: step-free access is needed" in text
    assert "Invitation sent: EMAIL-" in text and "Done: Quest complete." in text
    assert f"watch it at {live_server.url}/missions/{mission.pk}/" in text and f"decide at {live_server.url}/approvals/" in text
    calls = FakeService(tmp_path / "fake_service.sqlite3").calls()
    assert [c.kind for c in calls] == ["reservation.hold", "email.draft", "email.send"]
    assert STEP_FREE in calls[1].payload["honours"]  # the constraint added mid-quest reached the draft


def test_it_resumes_a_mission_it_finished_without_doing_anything_again(live_server, alice, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    with Person.at_work(live_server.url) as person:
        demo_agent(person, "--base-url", live_server.url, "--user", "alice", "--pace", "0", "--poll", "0.1", stdout=StringIO())
        mission = Mission.objects.get(owner=alice)
        out = StringIO()
        demo_agent(person, "--base-url", live_server.url, "--user", "alice", "--mission", str(mission.pk), stdout=out)
    assert "Done: Quest complete." in out.getvalue() and "Run " not in out.getvalue()


def test_it_says_how_to_start_the_server_when_none_answers(alice, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    with pytest.raises(CommandError, match="make run"):
        call_command("demo_agent", "--base-url", "http://127.0.0.1:9", "--user", "alice", stdout=StringIO())


def test_it_names_the_missing_user():
    with pytest.raises(CommandError, match="No user 'nobody'"):
        call_command("demo_agent", "--user", "nobody", stdout=StringIO())
