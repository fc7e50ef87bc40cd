"""An OpenAI Agents SDK run that waits for a person's approval in Questlog, then resumes.

    export QUESTLOG_URL=http://127.0.0.1:8000
    export QUESTLOG_TOKEN="$(.venv/bin/python manage.py create_agent_token demo --name inviter | tail -1)"
    .venv/bin/python examples/openai_agents_approval.py                 # approve in the browser at /approvals/
    .venv/bin/python examples/openai_agents_approval.py --user demo --password …   # or let it approve as you

ScriptedModel plays the model, so no API key is needed (swap in a real model for real use).
1. The agent wants to email the team; its `send_invitation` tool needs approval, so the run
   pauses and `RunStateStore.save` turns the paused call into a Questlog approval.
2. A person decides: in the inbox, or (with --user/--password) this script approves through the
   people API, as a person would in the browser.
3. `RunStateStore.load` gives back the run state with the decision applied (as a fresh process
   would load it), the run finishes, and the invitation is sent exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from questlog_client import StillWaiting
from questlog_client.openai_agents import RunStateStore
from questlog_client.people import PersonSession

set_tracing_disabled(True)  # nothing leaves this machine: no trace export either

SENT: list[dict[str, str]] = []  # stands in for your mail server


@function_tool(needs_approval=True)
def send_invitation(to: str, subject: str) -> str:
    """Email an invitation. Emails cannot be unsent, so a person approves each one."""
    SENT.append({"to": to, "subject": subject})
    print(f"[mail] sent to {to}: {subject}")
    return f"Sent to {to}."


def inviter(*turns: list) -> Agent:
    return Agent(name="Inviter", instructions="Invite the team to the offsite.", model=ScriptedModel(turns), tools=[send_invitation])


async def main(url: str, token: str, user: str | None, password: str | None, poll: float) -> int:
    async with RunStateStore(url, token, agent_label="inviter example") as store:
        # 1. Run until the tool call waits for approval, and save the run in Questlog.
        asking = inviter(
            [
                assistant_message("The venue is booked for May 14-16; I will email the team the invitation."),
                function_call("send_invitation", {"to": "team@example.com", "subject": "Offsite, May 14-16"}, call_id="call_invite"),
            ]
        )
        result = await Runner.run(asking, "Email the team about the offsite")
        mission_id = await store.save(result, title="Invite the team")
        print(f"Mission {mission_id} waits for your approval: {url}/approvals/")

        # 2. A person decides.
        if user and password:
            person = PersonSession(url, user, password)
            for approval in person.resume(mission_id).approvals:
                person.decide_approval(approval.id, "approve", note="Go ahead.")
                print(f"Approved #{approval.id} ({approval.action}) as {user}.")
            person.close()

        # 3. Later (in any process): load the state with the decision applied, and finish the run.
        while True:
            finishing = inviter([assistant_message("The invitation is out.")])
            try:
                state = await store.load(mission_id, finishing)
                break
            except StillWaiting as waiting:
                print(f"{waiting} Looking again in {poll:g} s.")
                await asyncio.sleep(poll)
        result = await Runner.run(finishing, state)
        await store.finish(mission_id, str(result.final_output))
        print(f"Agent: {result.final_output}")
        print(f"Mission {mission_id} completed; invitations sent: {len(SENT)}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("QUESTLOG_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("QUESTLOG_TOKEN"))
    parser.add_argument("--user", default=os.environ.get("QUESTLOG_USER"), help="approve as this person (people API)")
    parser.add_argument("--password", default=os.environ.get("QUESTLOG_PASSWORD"))
    parser.add_argument("--poll", type=float, default=2.0, help="seconds between looks while the decision is pending")
    args = parser.parse_args()
    if not args.token:
        parser.error("give --token or set QUESTLOG_TOKEN (manage.py create_agent_token USERNAME prints one)")
    raise SystemExit(asyncio.run(main(args.url, args.token, args.user, args.password, args.poll)))
