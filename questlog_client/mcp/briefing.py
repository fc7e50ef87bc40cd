"""The `resume_mission` prompt: the resume bundle (docs/api.md) written as the briefing a model
reads at the start of its next session. It only arranges what the bundle says; what comes next
is the bundle's own `next_action` and `message`."""

from __future__ import annotations

import json
from typing import Any

Json = dict[str, Any]


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _section(title: str, lines: list[str], empty: str) -> list[str]:
    return [f"## {title}", *(lines or [empty]), ""]


def _receipt(op: Json) -> str:
    parts = [f"`{op['key']}` ({op['kind']} on {op['target']})"]
    if op.get("external_id"):
        parts.append(f"external id {op['external_id']}")
    if op.get("external_status"):
        parts.append(f"status {op['external_status']}")
    if op.get("receipt"):
        parts.append(f"receipt {_compact(op['receipt'])}")
    return "- " + ", ".join(parts)


def _approval(approval: Json) -> str:
    line = f"- {approval['action']} (approval {approval['id']}): {approval['status']}"
    if approval["status"] == "pending":
        return line + f", waiting for a person. Reason given: {approval['reason']}"
    if approval.get("decided_payload") is not None and approval["decided_payload"] != approval.get("payload"):
        line += f", with the person's edit {_compact(approval['decided_payload'])}"
    return line + (f'. Note: "{approval["note"]}"' if approval.get("note") else "")


def briefing(bundle: Json) -> str:
    mission = bundle["mission"]
    ops = bundle["operations"]
    checkpoint = bundle.get("checkpoint") or {}
    waiting = [_approval(a) for a in bundle["approvals"] if a["status"] == "pending"]
    waiting += [f'- Milestone "{m["title"]}" awaits a person\'s review.' for m in bundle["milestones"] if m["gate"] and m["review_status"] == "pending"]
    waiting += [f"- Open question: {r['text']}" for r in bundle["open_questions"]]
    waiting += [f"- Blocker: {r['text']}" for r in bundle["blockers"]]
    waiting += [f"- Dependency: {r['text']}" for r in bundle["dependencies"]]
    waiting += [
        f"- Operation `{op['key']}` was attempted with an unknown outcome: check {op['target']} "
        f"before anything else, then complete_operation or fail_operation."
        for op in ops["to_reconcile"]
    ]
    lines = [
        f"# Resuming mission {mission['id']}: {mission['title']}",
        f"Status: {mission['status']}" + (f" ({mission['stop_reason']})" if mission.get("stop_reason") else ""),
        "",
        *_section("Objective", [mission["objective"]], ""),
        *_section("Constraints (always keep to these)", [f"- {c['text']}" for c in bundle["constraints"]], "None."),
        *_section(
            "Decided", [f"- {r['text']}" for r in bundle["decisions"]] + [_approval(a) for a in bundle["approvals"] if a["status"] != "pending"], "Nothing yet."
        ),
        *_section("Done, with receipts (never repeat these)", [_receipt(op) for op in ops["completed"]], "No side effect yet."),
        *_section("Waiting (for whom and on what)", waiting, "Nothing."),
        *_section("Failed", [f"- `{op['key']}`: {op.get('error')}" + (" (retryable)" if op.get("retryable") else "") for op in ops["failed"]], "Nothing."),
        *_section(
            "Your saved state (the head checkpoint's agent_state)",
            [f"```json\n{_compact(checkpoint.get('agent_state'))}\n```"] if checkpoint.get("agent_state") else [],
            "None saved.",
        ),
        "## What to do next",
        f"`{bundle['next_action']}`: {bundle['message']}",
        "",
        "Start a run with start_run before working; call begin_operation before every side effect and act only on `go`; save_checkpoint after each step.",
    ]
    return "\n".join(lines)
