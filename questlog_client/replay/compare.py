"""One execution of a scenario crashed after a step, against the uninterrupted one: side effects
repeated or missing, constraints missing from a bundle, decisions, approvals or reviews forgotten,
and other differences in the final state."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from questlog_client.replay.execution import Execution

FORGETTABLE = ("decisions", "approvals", "milestones")


@dataclass
class PointResult:
    point: int
    step: str
    repeated_side_effects: int = 0
    constraints_missing: int = 0
    forgotten: int = 0
    state_differences: int = 0
    errors: int = 0
    seconds: float = 0.0
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.repeated_side_effects or self.constraints_missing or self.forgotten or self.state_differences or self.errors)


def _multiset_diff(a: Iterable[str], b: Iterable[str]) -> tuple[list[str], list[str]]:
    ca, cb = Counter(a), Counter(b)
    return sorted((ca - cb).elements()), sorted((cb - ca).elements())


def compare(baseline: Execution, ex: Execution) -> PointResult:
    assert ex.point is not None
    label = baseline.steps[ex.point - 1] if ex.point <= len(baseline.steps) else "?"
    row = PointResult(ex.point, label, seconds=ex.seconds)
    row.errors = len(ex.errors)
    row.details += ex.errors
    for effect, count in ex.effects.items():
        extra = count - max(1, baseline.effects.get(effect, 0))
        if extra > 0:
            row.repeated_side_effects += extra
            row.details.append(f"side effect done {count}× (uninterrupted: {baseline.effects.get(effect, 0)}×): {effect[0]} → {effect[1]}")
    for effect, count in baseline.effects.items():
        missing = count - ex.effects.get(effect, 0)
        if missing > 0:
            row.state_differences += missing
            row.details.append(f"side effect done {ex.effects.get(effect, 0)}× (uninterrupted: {count}×): {effect[0]} → {effect[1]}")
    for effect in ex.effects.keys() - baseline.effects.keys():
        row.state_differences += 1
        row.details.append(f"side effect not in the uninterrupted run: {effect[0]} → {effect[1]} {effect[2][:80]}")
    _check_bundles(ex, row)
    for key, expected in baseline.final.items():
        actual = ex.final.get(key)
        if isinstance(expected, list):
            absent, added = _multiset_diff(expected, actual or [])
            count = len(absent) + len(added)
            if key in FORGETTABLE:
                row.forgotten += count
            else:
                row.state_differences += count
            row.details += [f"{key}: missing {m!r}" for m in absent] + [f"{key}: extra {e!r}" for e in added]
        elif actual != expected:
            row.state_differences += 1
            row.details.append(f"{key}: {actual!r}, uninterrupted: {expected!r}")
    return row


def _check_bundles(ex: Execution, row: PointResult) -> None:
    """Every bundle an agent process was given must hold what was known before it asked: the
    constraints, the unresolved decisions, the approvals and what the person decided."""
    known_constraints: list[tuple[float, set[int]]] = [(0.0, set(ex.initial_constraints))]
    decided: list[tuple[float, dict[str, dict[int, str]]]] = []
    for entry in ex.person:
        known_constraints.append((entry["at"], set(entry["constraints"])))
        decided.append(
            (entry["at"], {"approvals": {int(k): v for k, v in entry["approvals"].items()}, "milestones": {int(k): v for k, v in entry["milestones"].items()}})
        )
    decisions: dict[int, float] = {}
    resolved: dict[int, float] = {}
    approvals: dict[int, float] = {}
    events = sorted(ex.events, key=lambda e: e.get("at", e.get("asked_at", 0.0)))
    for event in events:
        if event["type"] == "step":
            answer, sent = event.get("answer") or {}, event.get("sent") or {}
            if event["path"].endswith("/records") and answer.get("kind") == "decision":
                decisions.setdefault(answer["id"], event["at"])
            if event["path"].endswith("/records") and sent.get("resolves"):
                resolved.setdefault(sent["resolves"], event["at"])
            for approval_id in _approvals_asked(event["path"], answer):
                approvals.setdefault(approval_id, event["at"])
        elif event["type"] == "bundle":
            asked, bundle = event["asked_at"], event["bundle"]
            known_constraints.append((event["got_at"], {c["id"] for c in bundle["constraints"]}))
            _check_one_bundle(bundle, asked, known_constraints, decided, decisions, resolved, approvals, row)


def _approvals_asked(path: str, answer: dict[str, Any]) -> list[int]:
    """The approvals a step asked for: one (POST /runs/{id}/approvals), several at once
    (…/approvals/batch), or those a LangGraph interrupt became (POST /langgraph/writes)."""
    if path.endswith("/approvals") and "id" in answer:
        return [answer["id"]]
    if path.endswith("/approvals/batch"):
        return [item["id"] for item in answer.get("items") or []]
    if path.endswith("langgraph/writes"):
        return [item["id"] for item in answer.get("approvals") or []]
    return []


def _check_one_bundle(
    bundle: dict[str, Any],
    asked: float,
    known_constraints: list[tuple[float, set[int]]],
    decided: list[tuple[float, dict[str, dict[int, str]]]],
    decisions: dict[int, float],
    resolved: dict[int, float],
    approvals: dict[int, float],
    row: PointResult,
) -> None:
    have = {c["id"] for c in bundle["constraints"]}
    # The newest snapshot from before this bundle was asked for (a person's, or an earlier bundle's)
    # is what it must hold at least: so a constraint a person retired is not expected any more.
    expected = max(((at, ids) for at, ids in known_constraints if at < asked), key=lambda pair: pair[0])[1]
    for cid in sorted(expected - have):
        row.constraints_missing += 1
        row.details.append(f"constraint {cid} missing from a bundle")
    have_decisions = {r["id"] for r in bundle["decisions"]}
    for rid, at in decisions.items():
        if at < asked and rid not in have_decisions and not (rid in resolved and resolved[rid] < asked):
            row.forgotten += 1
            row.details.append(f"decision {rid} missing from a bundle")
    have_approvals = {a["id"]: a["status"] for a in bundle["approvals"]}
    for aid, at in approvals.items():
        if at < asked and aid not in have_approvals:
            row.forgotten += 1
            row.details.append(f"approval {aid} missing from a bundle")
    reviews = {m["id"]: m["review_status"] for m in bundle["milestones"]}
    for at, done in decided:
        if at >= asked:
            continue
        for aid, status in done["approvals"].items():
            if have_approvals.get(aid) != status:
                row.forgotten += 1
                row.details.append(f"approval {aid} was {status}, a bundle said {have_approvals.get(aid)}")
        for mid, status in done["milestones"].items():
            if reviews.get(mid) != status:
                row.forgotten += 1
                row.details.append(f"milestone {mid} was {status}, a bundle said {reviews.get(mid)}")
