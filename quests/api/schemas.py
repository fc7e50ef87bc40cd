"""Request bodies of the agent API (API.md). Each field states in the OpenAPI document what the
API enforces, so a body that is valid by the schema is accepted: no NUL character or lone
surrogate anywhere (PostgreSQL cannot store them), no blank titles, whole numbers as JSON
integers (never "3" or 3.0), and a free-form object's keys and values held to the same rule
(quests.storable), nesting at most quests.limits.JSON_DEPTH_MAX levels."""

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, Strict, StringConstraints, ValidationInfo, WithJsonSchema
from pydantic_core import PydanticCustomError

from quests import limits, storable
from quests.limits import JSON_DEPTH_MAX
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
# parser (quests.api.StorableJsonParser), whatever its depth, and the schemas hold its depth
# (StorableJson). The document names that value once, as a component that quests.api adds: any
# JSON value, with the rule in words. Not as a recursive anyOf of the JSON types: client
# generators cannot parse a schema that refers to itself (openapi-python-client dropped every
# operation whose body held one), and a schema with no type is what each of them reads as "any
# JSON". Pydantic refuses a reference to a schema it did not make, so a field carries a marker
# that quests.api replaces by the reference.
JSON_VALUE_MARKER = {"x-questlog": "JsonValue"}
JSON_VALUE_REF = {"$ref": "#/components/schemas/JsonValue"}
JSON_VALUE = {
    # JSON Schema cannot say "no NUL" of every string inside a free value, nor bound its depth:
    # the description and an extension say it.
    "description": (
        f"Any JSON value: no NUL character or lone surrogate in a string or key, numbers within a double's range, "
        f"and a free value (each field that takes one) nests at most {JSON_DEPTH_MAX} levels of objects and arrays."
    ),
    "x-questlog-max-depth": JSON_DEPTH_MAX,
}


# A query parameter whose text is a JSON object (the LangGraph listing's `filter`). The document
# says so the way OpenAPI describes such a parameter, with `content` in place of `schema`, so that a
# client sends (and schemathesis generates) a JSON object rather than any text; quests.api makes
# that swap where a parameter's schema carries this marker.
JSON_QUERY_MARKER = {"x-questlog": "JsonQuery"}
JSON_QUERY_CONTENT = {
    "application/json": {
        "schema": {
            "type": "object",
            "description": "A JSON object, sent as the parameter's text (at most 10,000 characters); its values are free JSON values.",
            "propertyNames": {"pattern": STORABLE},
            "additionalProperties": JSON_VALUE_REF,
        },
    },
}


# Said of a body whose text and numbers were held to quests.storable's rule before validation:
# by the API's body parser (an attribute of the request, which ninja hands the schemas as
# context) or by the MCP backend (in the context it validates with).
TEXT_HELD = "questlog_text_held"


def text_held(context: Any) -> bool:
    if not isinstance(context, dict):
        return False
    return bool(context.get(TEXT_HELD) or getattr(context.get("request"), TEXT_HELD, False))


def _storable_json(value: Any, info: ValidationInfo) -> Any:
    # The depth is counted from the free value itself, so an envelope (a LangGraph channel's
    # {"version", "value": {"type", "data"}}) costs it nothing. Text and numbers the body's
    # reader held already are not walked again: only the containers are.
    try:
        if text_held(info.context):
            return storable.check_depth(value)
        return storable.check_json(value)
    except storable.Unstorable as exc:
        raise PydanticCustomError("unstorable", "{message}", {"message": exc.message}) from None


# A free JSON value a client hands Questlog to keep, held to quests.storable's whole rule.
StorableJson = AfterValidator(_storable_json)
JsonObject = Annotated[
    dict[str, Any],
    StorableJson,
    Field(max_length=limits.OBJECT_KEYS_MAX),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": limits.OBJECT_KEYS_MAX,
            "propertyNames": {"pattern": STORABLE},
            "additionalProperties": JSON_VALUE_MARKER,
        }
    ),
]


def at_most(item: Any, max_items: int) -> Any:
    """A list of `item`s bounded by one of quests.limits (a longer one is a 422 naming the field)."""
    return Annotated[list[item], Field(max_length=max_items)]


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
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("Input should be a date-time between the years 1 and 9999 in UTC") from None


Moment = Annotated[datetime, BeforeValidator(_rfc3339), AfterValidator(_in_utc)]
Key = Annotated[str, StringConstraints(min_length=1, max_length=limits.IDEMPOTENCY_KEY, pattern=STORABLE)] | None
Int = Annotated[int, BeforeValidator(_json_integer), Strict()]
Bool = Annotated[bool, Strict()]


# Fields a body does not name are ignored, but the parser holds their text to the same rule.
ANY_OTHER_FIELDS: dict[str, Any] = {"propertyNames": {"pattern": STORABLE}, "additionalProperties": JSON_VALUE_MARKER}


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
    kind: Literal[tuple(MilestoneKind.values)]
    title: Annotated[str, StringConstraints(min_length=1, max_length=limits.PLANNED_MILESTONE_TITLE, pattern=STORABLE)]


class MissionIn(In):
    title: text(max_length=limits.MISSION_TITLE)
    objective: text()
    constraints: at_most(text(max_length=limits.CONSTRAINT_TEXT), limits.MISSION_CONSTRAINTS_MAX) | None = None
    planned_milestones: at_most(PlannedMilestoneIn, limits.MISSION_PLANNED_MILESTONES_MAX) | None = None
    key: Key = None


class ConstraintIn(In):
    text: text(max_length=limits.CONSTRAINT_TEXT)
    key: Key = None


class RunIn(In):
    agent: text(max_length=limits.AGENT_NAME, blank=True) | None = None
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
    key: Annotated[str, StringConstraints(min_length=1, max_length=limits.OPERATION_KEY, pattern=STORABLE)]
    kind: Annotated[str, StringConstraints(min_length=1, max_length=limits.OPERATION_KIND, pattern=STORABLE)]
    target: Annotated[str, StringConstraints(min_length=1, max_length=limits.OPERATION_TARGET, pattern=STORABLE)]
    request: JsonObject
    max_attempts: Int = Field(3, ge=1, le=1000)


class CompleteIn(In):
    external_id: text(max_length=limits.EXTERNAL_ID, blank=True)
    external_status: Annotated[str, StringConstraints(min_length=1, max_length=limits.EXTERNAL_STATUS, pattern=STORABLE)]
    receipt: JsonObject | None = None


class FailIn(In):
    error: Annotated[str, StringConstraints(min_length=1, pattern=STORABLE)]
    retryable: Bool


class ObserveIn(In):
    external_status: Annotated[str, StringConstraints(min_length=1, max_length=limits.EXTERNAL_STATUS, pattern=STORABLE)]
    receipt: JsonObject | None = None


class ApprovalIn(In):
    action: text(max_length=limits.APPROVAL_ACTION)
    payload: JsonObject
    reason: text()
    agent_state: JsonObject | None = None
    expires_at: Moment | None = None
    key: Key = None
    agent_ref: text(max_length=limits.AGENT_REF, blank=True) = ""


class ApprovalItemIn(In):
    action: text(max_length=limits.APPROVAL_ACTION)
    payload: JsonObject
    reason: text()
    expires_at: Moment | None = None
    agent_ref: text(max_length=limits.AGENT_REF, blank=True) = ""


class ApprovalBatchIn(In):
    items: list[ApprovalItemIn] = Field(min_length=1, max_length=limits.APPROVAL_BATCH_ITEMS_MAX)
    agent_state: JsonObject | None = None
    key: Key = None


class MilestoneIn(In):
    kind: Literal[tuple(MilestoneKind.values)]
    title: text(max_length=limits.MILESTONE_TITLE)
    summary: text(blank=True) = ""
    evidence: at_most(Int, limits.MILESTONE_EVIDENCE_MAX) | None = None
    gate: Bool = False
    agent_state: JsonObject | None = None
    key: Key = None


class MemoryProposalIn(In):
    name: text(max_length=limits.MEMORY_NAME)
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
    note: text(max_length=limits.DECISION_NOTE, blank=True) = ""
    # Stand for every request of this action in the mission, until revoked (approve or reject only).
    always: bool = False


class ReviewIn(In):
    # A correction becomes a constraint the agent must follow: it needs words.
    model_config = ConfigDict(json_schema_extra=required_when("action", "correct", {"note": {"type": "string", "pattern": NOT_BLANK}}))

    action: Literal["approve", "correct", "pause"]
    note: text(max_length=limits.REVIEW_NOTE, blank=True) = ""


class RestoreIn(In):
    checkpoint_id: Int


class MemoryDecisionIn(In):
    decision: Literal["approve", "decline"]
