"""Endpoints of the LangGraph checkpointer (`questlog_client.langgraph.QuestlogSaver`). Thread ids
are LangGraph's own strings (any text, slashes included), so they travel in bodies and query
strings rather than in paths."""

from typing import Annotated, Any, Literal, get_args

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import AfterValidator, Field, StringConstraints, WithJsonSchema

from quests import limits, storable
from quests.api.auth import actor, authenticated_by_service
from quests.api.responses import ACT, BODY, READ, answers
from quests.api.schemas import JSON_QUERY_MARKER, JSON_VALUE_MARKER, STORABLE, In, Int, JsonObject, StorableJson
from quests.langgraph.services import history, reads, saves, threads
from quests.schemas import ApprovalOut, RunOut
from quests.services.errors import InvalidInput

# Each operation names its id: ninja derives one from the module, and the module moved from
# quests/api/graph.py here; the OpenAPI document (and the clients generated from it) keep theirs.
router = Router(tags=["langgraph"])


def _string(max_length: int, *, min_length: int = 1) -> Any:
    return Annotated[str, StringConstraints(min_length=min_length, max_length=max_length, pattern=STORABLE)]


ThreadId = _string(300)
Namespace = _string(500, min_length=0)
GraphId = _string(100)
JsonValue = Annotated[Any, StorableJson, WithJsonSchema(JSON_VALUE_MARKER)]


def _bounded(ge: int, le: int) -> Any:
    # The bounds first, then Int's own rules: pydantic then writes them as `minimum`/`maximum`
    # in the document (after them, it would not).
    return Annotated[int, Field(ge=ge, le=le), *get_args(Int)[1:]]


Index = _bounded(-1000, 1_000_000)
MissionRef = _bounded(1, 2**62)
# A thread that does not exist yet, or was deleted: 404 and 410; a paused or cancelled mission: 409.
WRITE = (*ACT, *BODY, 404, 409, 410)


class Encoded(In):
    """A value as the client's serializer encoded it: `data` is JSON when `type` is "json", else
    the serialized bytes in base64. Opaque to the server."""

    type: _string(100)
    data: JsonValue = None


class ChannelIn(In):
    version: _string(100)
    value: Encoded


def _has_id(checkpoint: dict[str, Any]) -> dict[str, Any]:
    value = checkpoint.get("id")
    if not isinstance(value, str) or not 1 <= len(value) <= 100:
        raise ValueError("the checkpoint needs its id: text of 1 to 100 characters")
    return checkpoint


# LangGraph's checkpoint without its channel values: its `id`, and whatever else it holds (v, ts,
# channel_versions, versions_seen, …), kept as sent.
CheckpointBody = Annotated[
    dict[str, Any],
    Field(max_length=limits.OBJECT_KEYS_MAX),
    AfterValidator(_has_id),
    StorableJson,
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": limits.OBJECT_KEYS_MAX,
            "required": ["id"],
            "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 100, "pattern": STORABLE}},
            "propertyNames": {"pattern": STORABLE},
            "additionalProperties": JSON_VALUE_MARKER,
        }
    ),
]


class GraphCheckpointIn(In):
    thread_id: ThreadId
    checkpoint_ns: Namespace = ""
    checkpoint: CheckpointBody
    metadata: JsonObject = {}
    parent_checkpoint_id: GraphId | None = None
    channels: Annotated[dict[_string(500), ChannelIn], Field(max_length=limits.GRAPH_CHANNELS_MAX)] = {}
    title: _string(200, min_length=0) = ""
    # An existing mission to hold the thread when it is new (config `questlog_mission_id`).
    mission_id: MissionRef | None = None


class WriteIn(In):
    idx: Index
    channel: _string(500)
    value: Encoded


class InterruptIn(In):
    id: GraphId
    action: _string(500)
    payload: JsonObject
    reason: _string(10_000)
    # Which node asked, and which of its questions this is (1 for its first interrupt()).
    node: _string(200, min_length=0) = ""
    question: int | None = Field(default=None, ge=1, le=10_000)


class GraphWritesIn(In):
    thread_id: ThreadId
    checkpoint_ns: Namespace = ""
    checkpoint_id: GraphId
    task_id: _string(100)
    task_path: _string(500, min_length=0) = ""
    writes: list[WriteIn] = Field(max_length=limits.GRAPH_WRITES_MAX)
    interrupts: list[InterruptIn] = Field(default=[], max_length=limits.GRAPH_INTERRUPTS_MAX)
    title: _string(200, min_length=0) = ""
    mission_id: MissionRef | None = None


class PendingWriteOut(Schema):
    task_id: str
    task_path: str
    idx: int
    channel: str
    value: Any


class GraphTupleOut(Schema):
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    channel_values: dict[str, Any]
    pending_writes: list[PendingWriteOut]
    mission_id: int
    questlog_checkpoint_id: int


class GraphTupleList(Schema):
    items: list[GraphTupleOut]


class SavedOut(Schema):
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    mission_id: int
    questlog_checkpoint_id: int


class WritesOut(Schema):
    approvals: list[ApprovalOut]


class GraphListQuery(Schema):
    thread_id: ThreadId | None = None
    checkpoint_ns: Namespace | None = None
    checkpoint_id: GraphId | None = None
    before: GraphId | None = None
    # The metadata filter as a JSON object: {"source": "input", "step": 2}.
    filter: Annotated[_string(10_000), WithJsonSchema(JSON_QUERY_MARKER)] | None = None
    limit: Annotated[int, Field(ge=1, le=saves.LIST_LIMIT)] = saves.LIST_LIMIT


class DeltaHistoryQuery(Schema):
    thread_id: ThreadId
    checkpoint_ns: Namespace = ""
    # None: the namespace's newest checkpoint.
    checkpoint_id: GraphId | None = None
    # Repeated: ?channel=messages&channel=log
    channel: list[_string(500)] = Field(min_length=1, max_length=100)


class DeltaWriteOut(Schema):
    task_id: str
    channel: str
    value: Any


class DeltaChannelOut(Schema):
    writes: list[DeltaWriteOut]
    # The value the nearest ancestor holding one had, encoded; absent when none did.
    seed: dict[str, Any] | None = None


class DeltaHistoryOut(Schema):
    channels: dict[str, DeltaChannelOut]


class ThreadIn(In):
    thread_id: ThreadId


class SessionIn(ThreadIn):
    mission_id: MissionRef | None = None


class ThreadQuery(Schema):
    thread_id: ThreadId
    # Interrupt ids, comma separated: only the approvals they became.
    refs: _string(10_000, min_length=0) | None = None


class ThreadOut(Schema):
    thread_id: str
    mission_id: int
    status: str
    stop_reason: str | None
    stop_detail: str
    approvals: list[ApprovalOut]


class RunsIn(In):
    run_ids: list[_string(100)] = Field(max_length=limits.GRAPH_RUN_IDS_MAX)


class CopyIn(In):
    source_thread_id: ThreadId
    target_thread_id: ThreadId


class PruneIn(In):
    thread_ids: list[ThreadId] = Field(max_length=limits.GRAPH_THREAD_IDS_MAX)
    strategy: Literal["keep_latest", "delete"] = "keep_latest"


class CountOut(Schema):
    deleted: int


class CopyOut(Schema):
    # The target thread's new mission; none when the source thread does not exist.
    mission_id: int | None


def _metadata_filter(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    # Held to the rule of every JSON value a client sends: a NUL in a key or NaN would otherwise
    # reach the database's jsonb containment and fail there.
    try:
        value = storable.json_value(text, subject="filter")
    except storable.Unstorable as exc:
        raise InvalidInput(exc.message, field="filter") from None
    if not isinstance(value, dict):
        raise InvalidInput("filter must be a JSON object.", field="filter")
    return value


@router.post("/langgraph/checkpoints", response=answers({201: SavedOut}, *WRITE), operation_id="quests_api_graph_put_checkpoint")
def put_checkpoint(request: HttpRequest, body: GraphCheckpointIn):
    row = saves.graph_put(
        actor=authenticated_by_service(request),
        thread_id=body.thread_id,
        ns=body.checkpoint_ns,
        graph_id=body.checkpoint["id"],
        parent_graph_id=body.parent_checkpoint_id,
        skeleton=body.checkpoint,
        metadata=body.metadata,
        channels={name: {"version": item.version, "value": item.value.dict()} for name, item in body.channels.items()},
        title=body.title,
        mission_id=body.mission_id,
    )
    saved = {
        "thread_id": body.thread_id,
        "checkpoint_ns": row.ns,
        "checkpoint_id": row.graph_id,
        "mission_id": row.mission_id,
        "questlog_checkpoint_id": row.checkpoint.pk,
    }
    return Status(201, saved)


@router.post("/langgraph/writes", response=answers(WritesOut, *WRITE), operation_id="quests_api_graph_put_writes")
def put_writes(request: HttpRequest, body: GraphWritesIn):
    made = saves.graph_put_writes(
        actor=authenticated_by_service(request),
        thread_id=body.thread_id,
        ns=body.checkpoint_ns,
        graph_id=body.checkpoint_id,
        task_id=body.task_id,
        task_path=body.task_path,
        title=body.title,
        mission_id=body.mission_id,
        writes=[{"idx": w.idx, "channel": w.channel, "value": w.value.dict()} for w in body.writes],
        interrupts=[item.dict() for item in body.interrupts],
    )
    return {"approvals": made}


@router.get("/langgraph/checkpoints", response=answers(GraphTupleList, *READ, 422), operation_id="quests_api_graph_list_checkpoints")
def list_checkpoints(request: HttpRequest, query: Query[GraphListQuery]):
    items = reads.graph_checkpoints(
        actor=authenticated_by_service(request),
        thread_id=query.thread_id,
        ns=query.checkpoint_ns,
        graph_id=query.checkpoint_id,
        before=query.before,
        metadata=_metadata_filter(query.filter),
        limit=query.limit,
    )
    return {"items": items}


@router.get("/langgraph/delta-history", response=answers(DeltaHistoryOut, *READ, 422), operation_id="quests_api_graph_delta_history")
def delta_history(request: HttpRequest, query: Query[DeltaHistoryQuery]):
    channels = history.graph_delta_history(
        actor=actor(request),
        thread_id=query.thread_id,
        ns=query.checkpoint_ns,
        graph_id=query.checkpoint_id,
        channels=query.channel,
    )
    return {"channels": channels}


@router.get("/langgraph/thread", response=answers(ThreadOut, *READ, 404, 410, 422), operation_id="quests_api_graph_get_thread")
def get_thread(request: HttpRequest, query: Query[ThreadQuery]):
    refs = [ref for ref in query.refs.split(",") if ref] if query.refs is not None else None
    return saves.graph_thread(actor(request), query.thread_id, refs=refs)


@router.post("/langgraph/session", response=answers(RunOut, *WRITE), operation_id="quests_api_graph_session")
def session(request: HttpRequest, body: SessionIn):
    return saves.graph_session(actor(request), body.thread_id, mission_id=body.mission_id)


@router.post("/langgraph/threads/delete", response=answers(CountOut, *ACT, *BODY, 409), operation_id="quests_api_graph_delete_thread")
def delete_thread(request: HttpRequest, body: ThreadIn):
    return {"deleted": int(threads.graph_delete_thread(actor=actor(request), thread_id=body.thread_id))}


# A retention hold on a quest whose checkpoints these would delete: 409 `held`.
@router.post("/langgraph/delete-for-runs", response=answers(CountOut, *ACT, *BODY, 409), operation_id="quests_api_graph_delete_for_runs")
def delete_for_runs(request: HttpRequest, body: RunsIn):
    return {"deleted": threads.graph_delete_for_runs(actor=actor(request), run_ids=body.run_ids)}


@router.post("/langgraph/copy", response=answers(CopyOut, *ACT, *BODY, 409, 410), operation_id="quests_api_graph_copy_thread")
def copy_thread(request: HttpRequest, body: CopyIn):
    target = threads.graph_copy_thread(actor=actor(request), source_thread_id=body.source_thread_id, target_thread_id=body.target_thread_id)
    return {"mission_id": target.pk if target else None}


@router.post("/langgraph/prune", response=answers(CountOut, *ACT, *BODY, 409), operation_id="quests_api_graph_prune")
def prune(request: HttpRequest, body: PruneIn):
    return {"deleted": threads.graph_prune(actor=actor(request), thread_ids=body.thread_ids, strategy=body.strategy)}
