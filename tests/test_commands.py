"""Management commands: create_agent_token and sweep_stalled_runs."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client, override_settings

from checkpoints.models import Checkpoint
from quests.models import AgentToken, Mission, Run

from .conftest import ApiClient

pytestmark = pytest.mark.django_db


def create_token(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_agent_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def last_line(output: str) -> str:
    return output.rstrip("\n").splitlines()[-1]


def test_it_prints_the_token_alone_on_the_last_line_and_it_works(alice):
    out, _ = create_token("alice", "--name", "laptop")
    token = last_line(out)
    assert token == token.strip() and " " not in token
    api = ApiClient(Client(), token)
    mission = api.post("missions", {"title": "T", "objective": "O"})
    assert mission.status_code == 201
    assert Mission.objects.get(pk=mission.json()["id"]).owner == alice
    assert AgentToken.objects.get().name == "laptop"


def test_the_token_is_stored_hashed(alice):
    out, _ = create_token("alice")
    token = last_line(out)
    stored = AgentToken.objects.get()
    assert stored.token_hash != token
    assert not AgentToken.objects.filter(token_hash__contains=token).exists()
    assert token.startswith(stored.prefix)


def test_each_call_makes_a_new_token(alice):
    first = last_line(create_token("alice")[0])
    second = last_line(create_token("alice")[0])
    assert first != second
    assert AgentToken.objects.count() == 2


def test_mission_limits_the_token_to_that_mission(alice, agent):
    mine = agent.post("missions", {"title": "Mine", "objective": "O"}).json()
    other = agent.post("missions", {"title": "Other", "objective": "O"}).json()
    token = last_line(create_token("alice", "--mission", str(mine["id"]))[0])
    api = ApiClient(Client(), token)
    assert api.get(f"missions/{mine['id']}").status_code == 200
    assert api.post(f"missions/{mine['id']}/runs").status_code == 201
    assert api.get(f"missions/{other['id']}").status_code == 404
    assert api.post(f"missions/{other['id']}/runs").status_code == 404
    assert [m["id"] for m in api.get("missions").json()["items"]] == [mine["id"]]
    assert api.post("missions", {"title": "New", "objective": "O"}).status_code == 403


def test_it_refuses_an_unknown_user(alice):
    with pytest.raises(CommandError):
        create_token("nobody")
    assert not AgentToken.objects.exists()


def test_it_refuses_a_mission_of_another_user(alice, bob, bob_agent):
    theirs = bob_agent.post("missions", {"title": "Bob's", "objective": "O"}).json()
    before = AgentToken.objects.count()
    with pytest.raises(CommandError):
        create_token("alice", "--mission", str(theirs["id"]))
    with pytest.raises(CommandError):
        create_token("alice", "--mission", "999999")
    assert AgentToken.objects.count() == before


def sweep() -> str:
    out = StringIO()
    call_command("sweep_stalled_runs", stdout=out)
    return out.getvalue()


def test_the_sweep_ends_stale_runs_interrupted_with_a_stop_checkpoint(agent, mission, run, make_stale):
    agent.post(f"runs/{run['id']}/checkpoints", {"agent_state": {"step": 4}})
    make_stale(run["id"])
    output = sweep()
    assert "1" in output
    ended = Run.objects.get(pk=run["id"])
    assert (ended.ended_at is not None, ended.stop_reason) == (True, "interrupted")
    m = Mission.objects.get(pk=mission["id"])
    assert (m.status, m.stop_reason) == ("ready", "interrupted")
    head = m.head_checkpoint
    assert (head.trigger, head.run_id) == ("stop", run["id"])
    assert agent.get(f"checkpoints/{head.pk}").json()["agent_state"] == {"step": 4}
    response = agent.post(f"runs/{run['id']}/heartbeat")
    assert response.json()["error"] == {**response.json()["error"], "code": "run_ended", "stop_reason": "interrupted"}
    bundle = agent.post(f"missions/{mission['id']}/runs").json()["resume"]
    assert bundle["next_action"] == "resume"
    assert bundle["checkpoint"]["agent_state"] == {"step": 4}


def test_the_sweep_leaves_fresh_runs_alone(agent, mission, run):
    sweep()
    assert Run.objects.get(pk=run["id"]).ended_at is None
    assert not Checkpoint.objects.filter(mission_id=mission["id"], trigger="stop").exists()


def test_the_sweep_follows_the_heartbeat_timeout_setting(agent, mission, run):
    with override_settings(QUESTLOG_HEARTBEAT_TIMEOUT=-1):
        sweep()
    assert Run.objects.get(pk=run["id"]).stop_reason == "interrupted"


def test_the_sweep_ends_each_stale_run_once(agent, bob_agent, mission, run, make_stale):
    other = bob_agent.post("missions", {"title": "Bob's", "objective": "O"}).json()
    other_run = bob_agent.post(f"missions/{other['id']}/runs").json()["run"]
    make_stale(run["id"])
    make_stale(other_run["id"])
    sweep()
    sweep()
    assert set(Run.objects.values_list("stop_reason", flat=True)) == {"interrupted"}
    assert Checkpoint.objects.filter(trigger="stop").count() == 2
