"""The MCP tools' backend inside the Questlog server (questlog_client.mcp.backend.Backend): each
call is what the agent API's endpoint does — the body checked by the API's own input schema, one
service called for the token's actor, the answer shaped by the API's output schema — run on the
request's own thread (Django's database connection belongs to it), with a refusal raised as the
API's error object."""

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db.utils import InterfaceError, OperationalError
from ninja import Schema
from pydantic import BaseModel, ValidationError

from checkpoints.services import canonical_json
from questlog_client.errors import ApiError
from quests import storable
from quests.api import DATABASE_RETRY_AFTER, database_unavailable_message
from quests.api.schemas import TEXT_HELD, ApprovalIn, CheckpointIn, CompleteIn, FailIn, MissionIn, OperationIn, RecordIn, RunIn, StopIn
from quests.models import Mission
from quests.schemas import ApprovalOut, CheckpointOut, MissionOut, OperationOut, RecordOut, RunOut, RunStartOut
from quests.services import approvals, missions, operations, records, runs
from quests.services.access import visible
from quests.services.audit import Actor
from quests.services.bundle import bundle_schema
from quests.services.errors import InvalidInput, PayloadTooLarge, ServiceError

# Who the MCP request being served acts for: set by the `/mcp` view from its bearer token.
current_actor: ContextVar[Actor] = ContextVar("questlog_mcp_actor")

In = TypeVar("In", bound=BaseModel)
Json = dict[str, Any]


def out(schema: type[Schema], obj: Any) -> Json:
    return schema.from_orm(obj).model_dump(mode="json")


def dumped(schema_value: BaseModel) -> Json:
    return schema_value.model_dump(mode="json")


def checked(schema: type[In], body: Json, *, limit: int | None = None) -> In:
    """The body as the API would have accepted it: within the body limit, storable text and JSON
    (quests.storable), and valid for the endpoint's input schema; else the API's error."""
    limit = limit or settings.QUESTLOG_MAX_BODY_BYTES
    if len(canonical_json(body)) > limit:
        raise PayloadTooLarge(limit)
    try:
        storable.check_json(body, subject="Text", max_depth=None)
    except storable.Unstorable as exc:
        raise InvalidInput(exc.message, field=exc.path or None) from None
    try:
        return schema.model_validate(body, context={TEXT_HELD: True})  # held just above
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        raise InvalidInput(f"{field}: {first['msg']}" if field else first["msg"], field=field) from None


def as_api_error(exc: ServiceError) -> ApiError:
    return ApiError(exc.message, status=exc.status, code=exc.code, error={"code": exc.code, "message": exc.message, **exc.extra})


def refused(call: Callable[[], Any]) -> Any:
    """Run one service call; its refusal (or a database outage) becomes the API's error object."""
    try:
        return call()
    except ServiceError as exc:
        raise as_api_error(exc) from None
    except (OperationalError, InterfaceError) as exc:
        message = database_unavailable_message(exc)  # the API's 503, in the same words
        error = {"code": "unavailable", "message": message, "retry_after": DATABASE_RETRY_AFTER}
        raise ApiError(message, status=503, code="unavailable", error=error) from None


class ServiceBackend:
    """The backend of one MCP request, acting for its token's actor."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor

    async def _run(self, call: Callable[[], Any]) -> Any:
        # thread_sensitive: back on the request's thread, where its connection and transaction are.
        return await sync_to_async(refused, thread_sensitive=True)(call)

    async def create_mission(self, body: Json) -> Json:
        def call() -> Json:
            mission_in = checked(MissionIn, body)
            mission, _ = missions.mission_create(
                actor=self.actor,
                title=mission_in.title,
                objective=mission_in.objective,
                constraints=mission_in.constraints,
                planned_milestones=[],
                key=mission_in.key,
            )
            return out(MissionOut, mission)

        return await self._run(call)

    async def list_missions(self) -> list[Json]:
        def call() -> list[Json]:
            return [out(MissionOut, m) for m in visible(self.actor, Mission).with_progress().order_by("-created_at", "-id")]

        return await self._run(call)

    async def resume(self, mission_id: int) -> Json:
        return await self._run(lambda: dumped(bundle_schema(mission_id, actor=self.actor)))

    async def start_run(self, mission_id: int, body: Json) -> Json:
        def call() -> Json:
            run_in = checked(RunIn, body)
            run, replayed = runs.run_start(actor=self.actor, mission_id=mission_id, agent=run_in.agent or "", key=run_in.key)
            resume = bundle_schema(run.mission if not replayed else run.mission_id, actor=self.actor, for_new_run=run.is_active)
            return dumped(RunStartOut.model_construct(run=RunOut.from_orm(run), resume=resume))

        return await self._run(call)

    async def heartbeat(self, run_id: int) -> Json:
        return await self._run(lambda: out(RunOut, runs.run_heartbeat(actor=self.actor, run_id=run_id)))

    async def save_checkpoint(self, run_id: int, body: Json) -> Json:
        def call() -> Json:
            cp_in = checked(CheckpointIn, body)
            checkpoint, _ = records.checkpoint_create(
                actor=self.actor,
                run_id=run_id,
                agent_state=cp_in.agent_state,
                note=cp_in.note or "",
                key=cp_in.key,
            )
            return out(CheckpointOut, checkpoint)

        return await self._run(call)

    async def add_record(self, run_id: int, body: Json) -> Json:
        def call() -> Json:
            # Only raw tool output may use the larger body limit, as on the API.
            larger = body.get("kind") == "tool_output"
            record_in = checked(RecordIn, body, limit=settings.QUESTLOG_MAX_TOOL_OUTPUT_BYTES if larger else None)
            record, _ = records.record_create(
                actor=self.actor,
                run_id=run_id,
                kind=record_in.kind,
                text=record_in.text,
                data=record_in.data,
                resolves=record_in.resolves,
                key=record_in.key,
            )
            return out(RecordOut, record)

        return await self._run(call)

    async def plan_operation(self, run_id: int, body: Json) -> Json:
        def call() -> Json:
            op_in = checked(OperationIn, body)
            op, _ = operations.operation_plan(
                actor=self.actor,
                run_id=run_id,
                key=op_in.key,
                kind=op_in.kind,
                target=op_in.target,
                request=op_in.request,
                max_attempts=op_in.max_attempts,
            )
            return out(OperationOut, op)

        return await self._run(call)

    async def attempt_operation(self, operation_id: int) -> Json:
        return await self._run(lambda: out(OperationOut, operations.operation_attempt(actor=self.actor, operation_id=operation_id)))

    async def complete_operation(self, operation_id: int, body: Json) -> Json:
        def call() -> Json:
            done = checked(CompleteIn, body)
            op = operations.operation_complete(
                actor=self.actor,
                operation_id=operation_id,
                external_id=done.external_id,
                external_status=done.external_status,
                receipt=done.receipt,
            )
            return out(OperationOut, op)

        return await self._run(call)

    async def fail_operation(self, operation_id: int, body: Json) -> Json:
        def call() -> Json:
            failed = checked(FailIn, body)
            op = operations.operation_fail(actor=self.actor, operation_id=operation_id, error=failed.error, retryable=failed.retryable)
            return out(OperationOut, op)

        return await self._run(call)

    async def request_approval(self, run_id: int, body: Json) -> Json:
        def call() -> Json:
            asked = checked(ApprovalIn, body)
            approval, _ = approvals.approval_request(
                actor=self.actor,
                run_id=run_id,
                action=asked.action,
                payload=asked.payload,
                reason=asked.reason,
                agent_state=asked.agent_state,
                respond_by=asked.expires_at,
                key=asked.key,
                agent_ref=asked.agent_ref,
            )
            return out(ApprovalOut, approval)

        return await self._run(call)

    async def stop_run(self, run_id: int, body: Json) -> Json:
        def call() -> Json:
            stop = checked(StopIn, body)
            run = runs.run_stop(actor=self.actor, run_id=run_id, reason=stop.reason, detail=stop.detail, retry_at=stop.retry_at)
            return out(RunOut, run)

        return await self._run(call)


def backend_for_request() -> ServiceBackend:
    return ServiceBackend(current_actor.get())
