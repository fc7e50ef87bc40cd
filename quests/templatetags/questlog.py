"""Presentation helpers for the pages: labels, readable values, form problems, demo credentials."""

import json
from datetime import UTC, datetime
from typing import Any

from django import template
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince, timeuntil

from quests import limits
from quests.services.demo import DEMO_PASSWORD, DEMO_USERNAME
from quests.services.preferences import moment

register = template.Library()

STOP_REASONS = {
    "waiting_for_approval": "Stopped to wait for your approval",
    "blocked_external": "Blocked by something outside",
    "failed_retry_budget": "Failed after using its retries",
    "paused_by_user": "Paused by you",
    "cancelled_by_user": "Cancelled by you",
    "thread_deleted": "Ended: the agent deleted its LangGraph thread",
    "interrupted": "Stopped unexpectedly (no heartbeat)",
    "completed": "Completed",
}

# Field names of the save state as people read them on the checkpoint page (anything else: its
# name with spaces, `label`).
FIELD_WORDS = {
    "stop_reason": "Why it stopped",
    "stop_detail": "What stopped it",
    "review_status": "Review",
    "status": "Status",
    "agent_state": "The agent's own state",
    "decided_payload": "What you approved",
    "payload": "What the agent asked to do",
    "idempotency_key": "Key (never done twice)",
    "external_id": "Id outside Questlog",
    "external_status": "Status outside Questlog",
    "retry_at": "Tries again at",
    "respond_by": "Answer by",
    "gate": "The quest waits for it",
    "withdrawn": "Taken back by the agent",
    "evidence": "What it is based on",
    "checkpoint_id": "Checkpoint",
    "tool_outputs": "Tool outputs",
    "open_questions": "Open questions",
    "size_bytes": "Size (bytes)",
}
# Status values stored in the state, in words (a string of the agent's own that happens to be one
# of these reads the same; they are words, not codes, to a person).
VALUE_WORDS = {
    "pending_review": "waiting for your review",
    "pending": "waiting for you",
    "waiting_for_approval": "waiting for your approval",
    "blocked_external": "blocked by something outside",
    "failed_retry_budget": "failed after its retries",
    "paused_by_user": "paused by you",
    "cancelled_by_user": "cancelled by you",
}


def words(name: Any) -> str:
    """A save-state field name (or a path of them, "a › b") in people's words; `#4` stays `#4`."""
    parts = str(name).split(" › ")
    return " › ".join(part if part.startswith("#") else FIELD_WORDS.get(part, label(part)) for part in parts)


register.filter("words", words)

TRIGGERS = {
    "agent": "saved by the agent",
    "background": "background snapshot",
    "approval": "approval requested",
    "milestone": "milestone claimed",
    "stop": "run stopped",
    "restore": "restored",
}


@register.filter
def label(value: Any) -> str:
    """`waiting_for_approval` → `Waiting for approval`."""
    text = str(value or "").replace("_", " ").strip()
    return text[:1].upper() + text[1:]


# A milestone's kind as the thing it is, not a state it claims: a kind named "plan_approved" read
# "Plan approved" on a plan still waiting for review.
MILESTONE_KINDS = {
    "research_complete": "Research",
    "plan_approved": "Plan",
    "data_verified": "Data check",
    "draft_ready": "Draft",
    "deployment_paused": "Deployment pause",
    "milestone_reviewed": "Review",
    "custom": "Milestone",
}


@register.filter
def milestone_kind(value: str) -> str:
    return MILESTONE_KINDS.get(value, label(value))


@register.filter
def stop_reason(value: str | None) -> str:
    return STOP_REASONS.get(value or "", label(value))


@register.filter
def stop_sentence(obj: Any) -> str:
    """Why a run (or a saved mission state) stopped, in one sentence: the reason, and the detail
    when it says more than the reason does."""
    reason = obj.get("stop_reason") if isinstance(obj, dict) else obj.stop_reason
    detail = ((obj.get("stop_detail") if isinstance(obj, dict) else obj.stop_detail) or "").strip()
    if not reason:
        return detail
    if reason in ("paused_by_user", "cancelled_by_user") or not detail:
        return STOP_REASONS.get(reason, label(reason))
    if reason == "waiting_for_approval":
        return detail
    return f"{STOP_REASONS.get(reason, label(reason))}: {detail}"


@register.filter
def trigger(value: str) -> str:
    return TRIGGERS.get(value, label(value))


# A person's act on the timeline, by (entity, action) of its audit event; {subject} is what it was about.
ACT_WORDS = {
    ("approval", "approve"): "Approved “{subject}”",
    ("approval", "edit"): "Approved an edited “{subject}”",
    ("approval", "reject"): "Rejected “{subject}”",
    ("approval", "undo"): "Took back the decision on “{subject}”",
    ("milestone", "approve"): "Approved the milestone “{subject}”",
    ("milestone", "correct"): "Corrected the milestone “{subject}”",
}


@register.filter
def act_words(event: Any) -> str:
    """`event` (an AuditEvent of a decision or review) in a person's words."""
    subject = (event.data or {}).get("subject") or f"{event.entity} {event.entity_id}"
    pattern = ACT_WORDS.get((event.entity, event.action), "{action} “{subject}”")
    return pattern.format(subject=subject, action=label(event.action))


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@register.filter
def problem_for(problem: Any, what: Any) -> Any:
    """The problem of the form about `what` (a model instance, or `kind` / `kind:id`), else None."""
    if problem is None:
        return None
    kind, ident = problem.target
    if isinstance(what, str):
        want_kind, _, want_id = what.partition(":")
        return problem if kind == want_kind and (not want_id or str(ident) == want_id) else None
    return problem if (kind, ident) == (what._meta.model_name, what.pk) else None


@register.filter
def value_of(problem: Any, name: str) -> str:
    """What the person typed into field `name` of the form that had a problem."""
    return (problem.values.get(name, "") if problem is not None else "") or ""


@register.filter
def get(mapping: dict, key: Any) -> Any:
    return mapping.get(key) if isinstance(mapping, dict) else None


@register.filter
def readable(value: Any) -> SafeString:
    """A JSON value as nested HTML a person can read: objects as definition lists, lists as lists."""
    return _readable(value, depth=0)


def _readable(value: Any, depth: int) -> SafeString:
    if depth > 12:
        return format_html("<code>{}</code>", json.dumps(value, ensure_ascii=False))
    if isinstance(value, dict):
        if not value:
            return mark_safe('<span class="muted">(empty)</span>')
        items = format_html_join("", "<dt>{}</dt><dd>{}</dd>", ((words(k), _readable(v, depth + 1)) for k, v in value.items()))
        return format_html('<dl class="kv">{}</dl>', items)
    if isinstance(value, list):
        if not value:
            return mark_safe('<span class="muted">(none)</span>')
        if all(not isinstance(v, (dict, list)) for v in value) and len(value) <= 8:
            return format_html_join(", ", "{}", ((_scalar(v),) for v in value))
        return format_html('<ul class="plain">{}</ul>', format_html_join("", "<li>{}</li>", ((_readable(v, depth + 1),) for v in value)))
    return _scalar(value)


def _scalar(value: Any) -> SafeString:
    if value is None:
        return mark_safe('<span class="muted">—</span>')
    if isinstance(value, bool):
        return mark_safe("yes" if value else "no")
    if isinstance(value, str) and value in VALUE_WORDS:
        return format_html("{}", VALUE_WORDS[value])
    return format_html("{}", value)


@register.simple_tag
def demo_credentials() -> tuple[str, str] | None:
    """The demo login, shown on the login page in DEBUG only (and only while the demo user exists)."""
    if not settings.DEBUG:
        return None
    if not get_user_model().objects.filter(username=DEMO_USERNAME).exists():
        return None
    return DEMO_USERNAME, DEMO_PASSWORD


@register.simple_tag
def when(value: datetime | None, relative: bool = False) -> SafeString:
    """A `<time>` element for a moment: the date and time, or with `relative` how long ago (or how
    soon) it is, the exact moment then in its title. A minute or less either way is "just now"."""
    if value is None:
        return mark_safe("")
    written = moment(value)
    text = written
    if relative:
        now = timezone.now()
        if abs((now - value).total_seconds()) < 60:
            text = "just now"
        elif value < now:
            text = f"{timesince(value, now, depth=1)} ago"
        else:
            text = f"in {timeuntil(value, now, depth=1)}"
    return format_html('<time datetime="{}" title="{}">{}</time>', value.astimezone(UTC).isoformat(), written, text)


@register.simple_tag
def limit(name: str) -> int:
    """A text limit from quests/limits.py, for a field's `maxlength`."""
    return getattr(limits, name)


@register.simple_tag
def counter(name: str, *field_id: Any) -> SafeString:
    """The hint under a field that states its limit (`name` in quests/limits.py); the field's id is
    `field_id` joined, the hint's that with "-count". static/js/questlog.js counts as the person types."""
    most = getattr(limits, name)
    return format_html('<p class="hint counter" id="{}-count" data-limit="{}">Up to {} characters.</p>', "".join(map(str, field_id)), most, f"{most:,}")
