"""Questlog as the save state of OpenAI Agents SDK runs that wait for a person.

    from questlog_client.openai_agents import RunStateStore

    store = RunStateStore("http://127.0.0.1:8000", token)
    result = await Runner.run(agent, "Email the team about the offsite")
    if result.interruptions:
        mission_id = await store.save(result, title="Invite the team")
    # … later, in another process, after a person decided in the browser:
    state = await store.load(mission_id, agent)      # StillWaiting while a decision is pending
    result = await Runner.run(agent, state)
    await store.finish(mission_id, result)

Each tool call awaiting approval becomes a Questlog approval; the serialized RunState is the
approval checkpoint's agent state; an approved function tool runs through the operation ledger,
keyed by its call id, so it runs once however often the state is loaded. docs/openai-agents.md
has the whole mapping. Needs the `openai-agents` extra (the SDK); `import questlog_client` alone
does not import it."""

from questlog_client.openai_agents.store import RunStateStore

__all__ = ["RunStateStore"]
