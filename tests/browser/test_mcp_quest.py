"""An MCP host configured only with what the tokens page shows (the URL and the header) runs a quest
through the MCP SDK's client, asks for an approval that a person decides in Chromium, and in a new
session resumes from the `resume_mission` prompt without repeating an effect."""

import json

import pytest
from playwright.sync_api import expect

from checkpoints.models import Operation
from quests.models import Mission
from tests.mcp_support import McpHost, ok

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_full_quest_through_mcp_with_an_approval_decided_in_chromium(page, open_page, login, alice):
    login(alice)
    open_page("/tokens/")
    page.get_by_label("Name").first.fill("desktop host")
    page.get_by_role("button", name="Create token").click()
    config = json.loads(page.locator("#mcp-http").inner_text())["mcpServers"]["questlog"]

    first = McpHost.configured(config)
    try:
        mission_id = ok(
            first.call(
                "create_mission",
                title="Invite the team",
                objective="Book the lodge, then invite everyone once.",
                constraints=["Invitations only after a person approves them"],
            )
        )["mission_id"]
        run_id = ok(first.call("start_run", mission_id=mission_id, agent="desktop"))["run_id"]
        ok(first.call("add_record", run_id=run_id, kind="decision", text="Lakeside Lodge for 12"))
        hold = {"key": "book-lodge", "kind": "reservation.book", "target": "lakeside", "request": {"people": 12}}
        go = ok(first.call("begin_operation", run_id=run_id, **hold))
        assert go["status"] == "go"
        ok(first.call("complete_operation", operation_id=go["operation_id"], external_id="B-12", external_status="booked"))
        ok(first.call("save_checkpoint", run_id=run_id, agent_state={"next": "invitations"}))
        asked = ok(
            first.call("request_approval", run_id=run_id, action="send the invitations", payload={"to": "team@example.com"}, reason="emails cannot be unsent")
        )
        assert asked["status"] == "pending"
    finally:
        first.close()  # the session ends, as a host's conversation does

    open_page(f"/missions/{mission_id}/")
    expect(page.locator("#mission-status")).to_have_text("Waiting for approval")
    page.get_by_role("article", name="send the invitations").get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator("#mission-status")).to_have_text("Ready")

    second = McpHost.configured(config)
    try:
        briefing = second.prompt(mission_id)
        for expected in (
            "Book the lodge, then invite everyone once.",
            "Invitations only after a person approves them",
            "Lakeside Lodge for 12",
            "`book-lodge`",
            "B-12",
            "send the invitations (approval",
            "approved",
            '"next":"invitations"',
        ):
            assert expected in briefing, expected
        run_id = ok(second.call("start_run", mission_id=mission_id, agent="desktop"))["run_id"]
        again = ok(second.call("begin_operation", run_id=run_id, **hold))
        assert again["status"] == "completed" and again["receipt"]["external_id"] == "B-12"
        invite = {"key": "send-invitations", "kind": "email", "target": "team@example.com", "request": {"template": "offsite"}}
        go = ok(second.call("begin_operation", run_id=run_id, **invite))
        assert go["status"] == "go"
        ok(second.call("complete_operation", operation_id=go["operation_id"], external_id="M-1", external_status="sent"))
        ok(second.call("stop_run", run_id=run_id, reason="completed", detail="lodge booked, team invited"))
    finally:
        second.close()

    open_page(f"/missions/{mission_id}/")
    expect(page.locator("#mission-status")).to_have_text("Completed")
    assert Mission.objects.get(pk=mission_id).status == "completed"
    assert {op.key: op.attempts for op in Operation.objects.filter(mission_id=mission_id)} == {"book-lodge": 1, "send-invitations": 1}
