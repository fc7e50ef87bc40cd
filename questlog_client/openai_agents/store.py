"""`RunStateStore`: save an OpenAI Agents run that waits for approvals as a Questlog mission, and
load it back, in any process, with the person's decisions applied (docs/openai-agents.md).

The store speaks to Questlog through the synchronous client, each call in a worker thread
(`asyncio.to_thread`), so the event loop the agents run on never waits on the network."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass
from typing import Any

from agents import Agent, RunState, ToolApprovalItem

from questlog_client import errors, models
from questlog_client.client import Questlog
from questlog_client.missions import Mission
from questlog_client.openai_agents import envelope as saved_state
from questlog_client.openai_agents.tools import APPROVED, ApprovedCall, Reconcile, guard_tools, runs_through_ledger
from questlog_client.runs import Run

# A mission in one of these waits for a person (or is over): loading it must not start anything.
STOPPED = {"paused": "paused_by_user", "cancelled": "cancelled_by_user", "failed": "failed_retry_budget", "completed": "completed"}
EXPIRED = "Nobody decided in time: the approval expired, so this tool call was not made."


@dataclass
class _Saved:
    """What `load` read: the mission, its saved envelope, and each paused call's approval."""

    mission: Mission
    envelope: dict[str, Any]
    approvals: dict[str, models.Approval]
    # The person's standing decisions by action: those in force, and the actions whose standing
    # decision was revoked (and not made again).
    standing: dict[str, models.StandingDecision]
    revoked: set[str]
    # Per call id, how many earlier approvals of the mission answered a call with that id.
    earlier: dict[str, int]


class RunStateStore:
    """`RunStateStore(base_url, token, *, agent_label, reconcile, takeover_timeout, **client_options)`.

    `agent_label` names the runs this store starts (shown to people). `reconcile` maps a tool's
    name to a hook asked, after a crash between a tool call and its receipt, what that call
    returned (None when it certainly did not happen); without one such a call is never repeated
    blindly (`ReconcileNeeded`). `takeover_timeout` is how long `load` waits for a crashed
    process's run to go stale before taking over. Other keywords go to `Questlog`.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        agent_label: str = "openai-agents",
        reconcile: dict[str, Reconcile] | None = None,
        takeover_timeout: float = 90.0,
        **client_options: Any,
    ) -> None:
        self.ql = Questlog(base_url, token, takeover_timeout=takeover_timeout, **client_options)
        self.agent_label = agent_label
        self.reconcile = dict(reconcile or {})
        # The run this store holds open per mission, from `load` until `save` or `finish` ends it.
        self._runs: dict[int, Run] = {}

    async def __aenter__(self) -> RunStateStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the heartbeats and the connection. Runs left open are not ended: their heartbeat
        lapses and the next `load` takes over (the ledger keeps what they did)."""
        for run in self._runs.values():
            run.close()
        self._runs.clear()
        await asyncio.to_thread(self.ql.close)

    async def save(
        self,
        result: saved_state.AnyRunResult,
        *,
        mission_id: int | None = None,
        title: str | None = None,
        objective: str | None = None,
        constraints: list[str] | None = None,
        key: str | None = None,
    ) -> int:
        """Ask a person about every tool call `result` paused on, and keep the RunState in the
        approval checkpoint. Creates a mission (`title`, `objective`) unless `mission_id` names
        one to continue; answers the mission's id. The run ends waiting for the approvals."""
        if not result.interruptions:
            raise ValueError("This result waits for no approval: there is nothing to save for a person.")
        state_json = result.to_state().to_json()
        items = saved_state.approval_items(result)
        agent_state = {saved_state.STATE_KEY: saved_state.envelope(result, state_json)}
        words = result.input if isinstance(result.input, str) else ""
        title = (title or words or f"{result.last_agent.name} run").strip()[:200]
        objective = (objective or words or title).strip()

        def save_now() -> int:
            if mission_id is None:
                mission = self.ql.missions.create(title, objective, constraints=constraints)
            else:
                mission = self.ql.missions.get(mission_id)
            run = self._open_run(mission)
            try:
                run.request_approvals(items, agent_state=agent_state, key=key)
            finally:
                run.close()
                self._runs.pop(mission.id, None)
            return mission.id

        return await asyncio.to_thread(save_now)

    async def load(self, mission_id: int, agent: Agent[Any], *, context_override: Any = None) -> RunState[Any, Agent[Any]]:
        """The saved RunState with the person's decisions applied, ready for `Runner.run(agent,
        state)`, on a run this store started (the ledger's fencing token).

        Raises `MissionNotStartable` (with `stop_reason`) when a person paused or cancelled the
        mission, `StillWaiting` while a decision is pending, and `RunStateMismatch` when this
        process cannot restore the state (schema, agents). Approve → `state.approve`; reject →
        `state.reject` with the person's note (none: the SDK's own message); edit → approved, and
        the tool runs with the person's arguments; expired → rejected with a message saying so.
        A decision the person made for every call of the tool in this quest (a standing decision)
        is the SDK's `always_approve` / `always_reject`; once revoked, the state forgets it."""
        saved = await asyncio.to_thread(self._read, mission_id, agent)
        run_state = forget_standing(copy.deepcopy(saved.envelope["run_state"]), saved.revoked)
        try:
            state = await RunState.from_json(agent, run_state, context_override=context_override)
        except Exception as exc:
            raise errors.RunStateMismatch(
                f"Mission {mission_id}: openai-agents could not restore the saved RunState "
                f"(saved by openai-agents {saved.envelope.get('sdk_version')}, schema {saved.envelope.get('schema_version')!r}, "
                f"agents {saved.envelope.get('agents')}): {exc}",
                saved={k: saved.envelope.get(k) for k in ("sdk_version", "schema_version", "agents")},
                available={"agents": saved_state.agent_names(agent)},
            ) from exc
        interruptions = state.get_interruptions()
        unknown = [item.call_id for item in interruptions if item.call_id not in saved.approvals]
        if unknown:
            raise errors.RunStateMismatch(
                f"Mission {mission_id}: the saved RunState waits on tool calls {unknown} that have no approval in Questlog.",
                saved={"calls": sorted(saved.approvals)},
                available={"calls": unknown},
            )
        run = await asyncio.to_thread(self._open_run, saved.mission, stopped_check=True)
        guard_tools(agent)
        for item in interruptions:
            self._decide(state, item, saved, run)
        return state

    async def finish(self, mission_id: int, detail: str = "") -> models.Run:
        """The agent is done: end its run `completed` (and so the mission). Call it when a run
        after `load` ended with a final output rather than new interruptions."""

        def finish_now() -> models.Run:
            mission = self.ql.missions.get(mission_id)
            run = self._open_run(mission)
            self._runs.pop(mission_id, None)
            return run.stop("completed", detail[:1000])

        return await asyncio.to_thread(finish_now)

    def _read(self, mission_id: int, agent: Agent[Any]) -> _Saved:
        mission = self.ql.missions.get(mission_id)
        bundle = mission.resume()
        _refuse_if_stopped(mission_id, bundle.mission)
        envelope = saved_state.check_restorable(mission_id, bundle.agent_state.get(saved_state.STATE_KEY), agent)
        calls = [call["call_id"] for call in envelope.get("calls", [])]
        # The newest approval for each call id: a call asked about again answers to the last word.
        by_ref = {approval.agent_ref: approval for approval in bundle.approvals if approval.agent_ref}
        approvals = {call_id: by_ref[call_id] for call_id in calls if call_id in by_ref}
        earlier = {call_id: sum(1 for a in bundle.approvals if a.agent_ref == call_id and a.id < approval.id) for call_id, approval in approvals.items()}
        pending = [approval for approval in approvals.values() if approval.status == "pending"]
        if pending:
            asked = ", ".join(f"#{a.id} {a.action}" for a in pending)
            raise errors.StillWaiting(f"Mission {mission_id} still waits for a person to decide: {asked}.", mission_id=mission_id, approvals=pending)
        standing = {decision.action: decision for decision in bundle.standing_decisions if decision.active}
        revoked = {decision.action for decision in bundle.standing_decisions if not decision.active} - set(standing)
        return _Saved(mission, envelope, approvals, standing, revoked, earlier)

    def _open_run(self, mission: Mission, *, stopped_check: bool = False) -> Run:
        """The run this store holds on `mission`, or a new one (taking over a stale one)."""
        run = self._runs.get(mission.id)
        if run is not None and not run.ended:
            return run
        try:
            run = mission.start_run(agent=self.agent_label)
        except errors.MissionNotStartable:
            if stopped_check:
                # A person acted between reading the bundle and starting: say what they did.
                _refuse_if_stopped(mission.id, mission.resume().mission)
            raise
        self._runs[mission.id] = run
        return run

    def _decide(self, state: RunState[Any, Agent[Any]], item: ToolApprovalItem, saved: _Saved, run: Run) -> None:
        call_id = item.call_id or ""  # a call without an id was never saved: no approval has the empty ref
        approval = saved.approvals[call_id]
        always = approval.always and approval.action in saved.standing
        if approval.status in ("approved", "edited"):
            edited = dict(approval.decided_payload or {}) if approval.status == "edited" else None
            occurrence = approval.id if saved.earlier.get(call_id) else None
            tool = item.name or ""
            if runs_through_ledger(item.agent, tool):
                APPROVED[call_id] = ApprovedCall(run, call_id, tool, edited, self.reconcile.get(tool), occurrence)
            state.approve(item, always_approve=always)
        elif approval.status == "rejected":
            # No note: the SDK's own answer (the run's tool_error_formatter, else its default).
            state.reject(item, always_reject=always, rejection_message=approval.note.strip() or None)
        else:
            state.reject(item, rejection_message=EXPIRED)


def forget_standing(run_state: dict[str, Any], actions: set[str]) -> dict[str, Any]:
    """The RunState without the SDK's "always" for `actions`, whose standing decision the person
    revoked: their later calls are asked again. Decisions about single calls are kept."""
    if not actions:
        return run_state
    context = run_state.get("context") or {}
    records = [decision for key, decision in (context.get("approvals") or {}).items() if key in actions]
    records += [entry.get("decision") or {} for entry in context.get("function_tool_approvals") or [] if entry.get("tool_key") in actions]
    for decision in records:
        for side in ("approved", "rejected"):
            if decision.get(side) is True:
                decision[side] = []
        for sticky in ("sticky_rejection_message", "sticky_scope"):
            decision.pop(sticky, None)
    return run_state


def _refuse_if_stopped(mission_id: int, mission: Any) -> None:
    if mission.status in STOPPED:
        reason = mission.stop_reason or STOPPED[mission.status]
        detail = f": {mission.stop_detail}" if mission.stop_detail else ""
        raise errors.MissionNotStartable(
            f"Mission {mission_id} is {mission.status} ({reason}){detail}; nothing was loaded or started.",
            status=409,
            code="mission_not_startable",
            error={"code": "mission_not_startable", "status": mission.status, "stop_reason": reason},
        )
