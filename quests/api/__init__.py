"""The agent API (API.md), built with django-ninja. Endpoints are thin: they validate the body,
call one service, and shape the answer."""

import copy
from typing import Any

from django.db.utils import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser

from quests import storable
from quests.api.auth import AgentTokenAuth, PersonSessionAuth, refused_before_the_service
from quests.api.schemas import JSON_QUERY_CONTENT, JSON_QUERY_MARKER, JSON_VALUE, JSON_VALUE_MARKER, JSON_VALUE_REF, TEXT_HELD
from quests.middleware import RequestDeadlineExceeded
from quests.services.errors import InvalidInput, ServiceError, Unauthenticated


class StorableJsonParser(Parser):
    """JSON bodies that keep to quests.storable's rule, refused here with a clear 400 or 422
    rather than failing deep in the database with a 500. Depth is held per free value by the
    schemas (quests.api.schemas.JsonObject): an envelope's own levels do not count against it."""

    def parse_body(self, request: HttpRequest):
        try:
            text = storable.decoded(request.body, subject="The request body")
            # Python's json accepts NaN and Infinity, which are not JSON and which jsonb refuses.
            data = storable.parse_json(text, subject="The request body")
        except storable.Unstorable as exc:
            raise ServiceError(exc.message, code="malformed_json", **({"field": exc.path} if exc.path is not None else {})) from None
        if data is None:
            return {}  # `null` says "no body", as an empty one does (the optional run body)
        if not isinstance(data, dict):
            raise ServiceError("The request needs a JSON object body.", code="invalid")
        # Both kinds of unstorable text can only arrive as \u escapes (storable.decoded refuses a
        # surrogate's bytes): most bodies skip the walk.
        if storable.may_escape(text):
            try:
                storable.check_json(data, subject="Text", max_depth=None)
            except storable.Unstorable as exc:
                raise InvalidInput(exc.message, field=exc.path or None) from None
        # The schemas' free values then need only their depth checked (quests.api.schemas).
        setattr(request, TEXT_HELD, True)
        return data


class QuestlogAPI(NinjaAPI):
    def on_exception(self, request: HttpRequest, exc: Any) -> HttpResponse:
        # A body refused before a service that authenticates its token could: the token is
        # authenticated now, so that an invalid one is still 401 whatever the body.
        answered: Any = exc
        try:
            if refused_before_the_service(request):
                answered = AuthenticationError()
        except ServiceError as over_the_rate:
            answered = over_the_rate
        return super().on_exception(request, answered)

    def get_openapi_schema(self, *args: Any, **kwargs: Any):
        # The document depends only on the code, yet building it takes seconds (pydantic builds a
        # JSON schema per model): built once per process and prefix, and copied for each caller,
        # so the docs page and a client that polls it cost a copy, not a build.
        key = repr((args, sorted(kwargs.items())))
        built = self.__dict__.setdefault("_openapi_built", {})
        if key not in built:
            schema = super().get_openapi_schema(*args, **kwargs)
            # Referenced by every free-form object of a request body (quests.api.schemas.JsonObject).
            schema["components"].setdefault("schemas", {})["JsonValue"] = JSON_VALUE
            _replace_markers(schema)
            _json_query_parameters(schema)
            built[key] = schema
        return copy.deepcopy(built[key])


def _json_query_parameters(schema: dict[str, Any]) -> None:
    """A query parameter marked as JSON text (quests.api.schemas.JSON_QUERY_MARKER) is described by
    its `content`: the JSON object its text holds, not a string any text would match."""
    for item in schema["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", ()):
                declared = parameter.get("schema", {})
                if JSON_QUERY_MARKER in (declared, *declared.get("anyOf", ())):
                    del parameter["schema"]
                    parameter["content"] = JSON_QUERY_CONTENT


def _replace_markers(node: Any) -> None:
    stack = [node]
    while stack:
        item = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for key, child in item.items() if isinstance(item, dict) else enumerate(children):
            if child == JSON_VALUE_MARKER:
                item[key] = JSON_VALUE_REF
            elif isinstance(child, (dict, list)):
                stack.append(child)


api = QuestlogAPI(
    title="Questlog agent API",
    version="1",
    description="Save states for long-running agents: checkpoint, resume, never repeat a side effect.",
    auth=[AgentTokenAuth(), PersonSessionAuth()],
    urls_namespace="api",
    parser=StorableJsonParser(),
    # The document and its docs page are read-only: another method is 405 like on any route.
    docs_decorator=require_safe,
)


# How long a client should wait before retrying while the database is unreachable: long enough
# not to hammer a restarting server, short enough that agents resume soon after it is back.
DATABASE_RETRY_AFTER = 5


def database_unavailable_message(exc: BaseException | None = None) -> str:
    if timed_out(exc):
        return "The database did not answer within the request's deadline; nothing was written. Try again shortly."
    return "The database is unreachable; nothing was written. Try again shortly."


def database_unavailable_response(exc: BaseException | None = None) -> JsonResponse:
    response = error_response(503, "unavailable", database_unavailable_message(exc), retry_after=DATABASE_RETRY_AFTER)
    response["Retry-After"] = str(DATABASE_RETRY_AFTER)
    return response


def timed_out(exc: BaseException | None) -> bool:
    """Whether a database error is a deadline (config/database.py) rather than an outage: PostgreSQL
    cancelled a statement (SQLSTATE 57014), SQLite's busy timeout ran out, or the request's own."""
    cause = getattr(exc, "__cause__", None)
    return isinstance(exc, RequestDeadlineExceeded) or getattr(cause, "sqlstate", None) == "57014" or "database is locked" in str(exc)


def error_response(http_status: int, code: str, message: str, /, **extra) -> JsonResponse:
    # Positional-only: a conflict's own extra fields (its current `status`, say) must not collide.
    return JsonResponse({"error": {"code": code, "message": message, **extra}}, status=http_status)


@api.exception_handler(ServiceError)
def on_service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    response = error_response(exc.status, exc.code, exc.message, **exc.extra)
    if "retry_after" in exc.extra:
        response["Retry-After"] = str(exc.extra["retry_after"])
    return response


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def on_database_unavailable(request: HttpRequest, exc: Exception) -> HttpResponse:
    # The same answer as config.urls.handler500 gives a database error raised outside ninja.
    return database_unavailable_response(exc)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    loc = _field_path(first.get("loc", ()))
    field = ".".join(loc) or None
    if first.get("type") == "missing" and not loc:
        return error_response(400, "invalid", "The request needs a JSON object body.", field=None)
    message = f"{field}: {first.get('msg', 'invalid value')}" if field else first.get("msg", "Invalid request.")
    details = [{"field": ".".join(_field_path(e.get("loc", ()))), "message": e.get("msg")} for e in exc.errors]
    return error_response(422, "invalid", message, field=field, details=details)


def _field_path(loc: tuple[Any, ...]) -> list[str]:
    # ninja's location starts with where the value came from and, for a body, the view's
    # parameter that holds it: ("body", "body", "payload", …), ("query", "limit"). Only what
    # follows is the client's field (which may itself be called "payload").
    skip = {"body": 2, "query": 1, "path": 1}.get(loc[0] if loc else "", 0)
    return [str(part) for part in loc[skip:]]


@api.exception_handler(AuthenticationError)
@api.exception_handler(Unauthenticated)
def on_unauthenticated(request: HttpRequest, exc: Exception) -> HttpResponse:
    return error_response(401, "unauthenticated", Unauthenticated.MESSAGE)


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if isinstance(exc.__cause__, ServiceError):
        return on_service_error(request, exc.__cause__)  # refused by the body parser
    if exc.status_code == 400:
        return error_response(400, "malformed_json", "The request body is not valid JSON.")
    if exc.status_code == 403:
        return error_response(403, "forbidden", str(exc))
    return error_response(exc.status_code, "error", str(exc))


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(404, "not_found", "Nothing with that id here.")


from notifications.api import router as webhooks_router  # noqa: E402  (the notifications app's people API)
from quests.api import agent, people  # noqa: E402  (routers register on `api`)
from quests.langgraph.api import router as langgraph_router  # noqa: E402  (the LangGraph checkpointer's endpoints)

api.add_router("", agent.router)
api.add_router("", people.router)
api.add_router("", langgraph_router)
api.add_router("", webhooks_router)
