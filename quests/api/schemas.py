"""Request bodies of the agent API (API.md). Each field states in the OpenAPI document what the
API enforces, so a body that is valid by the schema is accepted: no NUL character or lone
surrogate anywhere (PostgreSQL cannot store them), no blank titles, whole numbers as JSON
integers (never "3" or 3.0), and a free-form object's keys and values held to the same rule."""

import re
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, Strict, StringConstraints, WithJsonSchema

from quests.models import MilestoneKind

# Lone surrogates are refused too (quests.api.StorableJsonParser), but they are not Unicode
# text: no JSON Schema regex engine can name them, and a UTF-8 client cannot send them.
STORABLE = r"^[^\u0000]*$"
# Python's str.isspace() set, spelled out: `\s` means different sets in Python and in
# ECMA-262 regexes, and the server strips exactly these (str.strip).
SPACE = r"\t\n\u000b\u000c\r\u001c-\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NOT_BLANK = rf"^[^\u0000]*[^\u0000{SPACE}][^\u0000]*$"
# An RFC 3339 date-time with its offset, as `format: date-time` means; pydantic alone would also
# take a bare date, a time without offset or a number of seconds.
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$", re.ASCII)

# Every string in a free-form object, keys included, is held to the same rule by the body
# parser (quests.api.StorableJsonParser), whatever its depth: the document says so with a
# recursive schema, a component that quests.api adds. Pydantic refuses a reference to a schema
# it did not make, so a field carries a marker that quests.api replaces by the reference.
JSON_VALUE_MARKER = {"x-questlog": "JsonValue"}
JSON_VALUE_REF = {"$ref": "#/components/schemas/JsonValue"}
JSON_VALUE = {
    "anyOf": [
        {"type": "string", "pattern": STORABLE},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": JSON_VALUE_REF},
        {"type": "object", "propertyNames": {"pattern": STORABLE}, "additionalProperties": JSON_VALUE_REF},
    ],
}
JsonObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "propertyNames": {"pattern": STORABLE}, "additionalProperties": JSON_VALUE_MARKER}),
]


def text(*, max_length: int | None = None, blank: bool = False) -> Any:
    """A string field. Unless `blank`, it needs a character that is not white space and is
    stored stripped; limits apply to the text as sent, as the schema says."""
    if blank:
        return Annotated[str, StringConstraints(max_length=max_length, pattern=STORABLE)]
    return Annotated[str, StringConstraints(min_length=1, max_length=max_length, pattern=NOT_BLANK), AfterValidator(str.strip)]


def _rfc3339(value: Any) -> Any:
    if not isinstance(value, str) or not RFC3339.match(value):
        raise ValueError("Input should be an RFC 3339 date-time with an offset, like 2030-01-31T09:00:00Z")
    return value.upper()


def _json_integer(value: Any) -> Any:
    # JSON has one number type: 3.0 is the integer 3 (as JSON Schema says), but "3" and true are
    # not numbers at all.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _in_utc(value: datetime) -> datetime:
    # PostgreSQL keeps offsets only up to ±15:59 while RFC 3339 allows ±23:59: the moment is the
    # same in UTC, and nothing else reads the offset it came with.
    try:
        return value.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError("Input should be a date-time between the years 1 and 9999 in UTC") from None


Moment = Annotated[datetime, BeforeValidator(_rfc3339), AfterValidator(_in_utc)]
Key = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=STORABLE)] | None
Int = Annotated[int, BeforeValidator(_json_integer), Strict()]
Bool = Annotated[bool, Strict()]


# Fields a body does not name are ignored, but the parser holds their text to the same rule.
ANY_OTHER_FIELDS = {"propertyNames": {"pattern": STORABLE}, "additionalProperties": JSON_VALUE_MARKER}


def required_when(field: str, value: str, then: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema rule for what the services require only for one choice of `field`."""
    return {
        **ANY_OTHER_FIELDS,
        "if": {"properties": {field: {"const": value}}, "required": [field]},
        "then": {"properties": then, "required": list(then)},
    }


class In(Schema):
    # Python's `re` reads the patterns above as a JSON Schema validator does.
    model_config = ConfigDict(regex_engine="python-re", json_schema_extra=ANY_OTHER_FIELDS)


class PlannedMilestoneIn(In):
    kind: Literal[tuple(MilestoneKind.values)]  # type: ignore[valid-type]
    title: Annotated[str, StringConstraints(min_length=1, max_length=300, pattern=STORABLE)]


class MissionIn(In):
    title: text(max_length=200)
    objective: text()
    constraints: list[text()] | None = None
    planned_milestones: list[PlannedMilestoneIn] | None = None
    key: Key = None


class ConstraintIn(In):
    text: text()
    key: Key = None


class RunIn(In):
    agent: text(max_length=200, blank=True) | None = None
    key: Key = None


class CheckpointIn(In):
    agent_state: JsonObject
    note: text(blank=True) | None = None
    key: Key = None


class RecordIn(In):
    kind: Literal["decision", "open_question", "blocker", "dependency", "evidence", "note", "tool_output"]
    # Kept exactly as sent: a tool's output may begin or end with white space that matters.
    text: Annotated[str, StringConstraints(min_length=1, pattern=STORABLE)]
    data: JsonObject | None = None
    resolves: Int | None = None
    key: Key = None


class OperationIn(In):
    key: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=STORABLE)]
    kind: Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=STORABLE)]
    target: Annotated[str, StringConstraints(min_length=1, max_length=500, pattern=STORABLE)]
    request: JsonObject
    max_attempts: Int = Field(3, ge=1, le=1000)


class CompleteIn(In):
    external_id: text(max_length=500, blank=True)
    external_status: Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=STORABLE)]
    receipt: JsonObject | None = None


class FailIn(In):
    error: Annotated[str, StringConstraints(min_length=1, pattern=STORABLE)]
    retryable: Bool


class ObserveIn(In):
    external_status: Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=STORABLE)]
    receipt: JsonObject | None = None


class ApprovalIn(In):
    action: text(max_length=500)
    payload: JsonObject
    reason: text()
    agent_state: JsonObject | None = None
    expires_at: Moment | None = None
    key: Key = None
    agent_ref: text(max_length=200, blank=True) = ""


class ApprovalItemIn(In):
    action: text(max_length=500)
    payload: JsonObject
    reason: text()
    expires_at: Moment | None = None
    agent_ref: text(max_length=200, blank=True) = ""


class ApprovalBatchIn(In):
    items: list[ApprovalItemIn] = Field(min_length=1, max_length=100)
    agent_state: JsonObject | None = None
    key: Key = None


class MilestoneIn(In):
    kind: Literal[tuple(MilestoneKind.values)]  # type: ignore[valid-type]
    title: text(max_length=300)
    summary: text(blank=True) = ""
    evidence: list[Int] | None = None
    gate: Bool = False
    agent_state: JsonObject | None = None
    key: Key = None


class MemoryProposalIn(In):
    name: text(max_length=200)
    value: text()
    reason: text()
    key: Key = None


class StopIn(In):
    reason: Literal["completed", "blocked_external", "failed_retry_budget"]
    detail: text(blank=True) = ""
    retry_at: Moment | None = None


class DecisionIn(In):
    model_config = ConfigDict(json_schema_extra=required_when("decision", "edit", {"payload": {"type": "object"}}))

    decision: Literal["approve", "reject", "edit"]
    payload: JsonObject | None = None
    note: text(blank=True) = ""
    # Stand for every request of this action in the mission, until revoked (approve or reject only).
    always: bool = False


class ReviewIn(In):
    # A correction becomes a constraint the agent must follow: it needs words.
    model_config = ConfigDict(json_schema_extra=required_when("action", "correct", {"note": {"type": "string", "pattern": NOT_BLANK}}))

    action: Literal["approve", "correct", "pause"]
    note: text(blank=True) = ""


class RestoreIn(In):
    checkpoint_id: Int


class MemoryDecisionIn(In):
    decision: Literal["approve", "decline"]
