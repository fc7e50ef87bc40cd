"""The agent API (API.md), built with django-ninja. Endpoints are thin: they validate the body,
call one service, and shape the answer."""

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from quests.api.auth import AgentTokenAuth, PersonSessionAuth
from quests.services.errors import ServiceError

api = NinjaAPI(
    title="Questlog agent API",
    version="1",
    description="Save states for long-running agents: checkpoint, resume, never repeat a side effect.",
    auth=[AgentTokenAuth(), PersonSessionAuth()],
    urls_namespace="api",
)


def error_response(status: int, code: str, message: str, **extra) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, **extra}}, status=status)


@api.exception_handler(ServiceError)
def on_service_error(request: HttpRequest, exc: ServiceError) -> HttpResponse:
    return error_response(exc.status, exc.code, exc.message, **exc.extra)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    first = exc.errors[0] if exc.errors else {}
    loc = [str(part) for part in first.get("loc", []) if part not in ("body", "payload", "path", "query")]
    field = ".".join(loc) or None
    if first.get("type") == "missing" and not loc:
        return error_response(400, "invalid", "The request needs a JSON object body.", field=None)
    message = f"{field}: {first.get('msg', 'invalid value')}" if field else first.get("msg", "Invalid request.")
    details = [{"field": ".".join(str(p) for p in e.get("loc", []) if p not in ("body", "payload")), "message": e.get("msg")} for e in exc.errors]
    return error_response(422, "invalid", message, field=field, details=details)


@api.exception_handler(AuthenticationError)
def on_unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(401, "unauthenticated", "Send a valid agent token (Authorization: Bearer …) or sign in.")


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    if exc.status_code == 400:
        return error_response(400, "malformed_json", "The request body is not valid JSON.")
    if exc.status_code == 403:
        return error_response(403, "forbidden", str(exc))
    return error_response(exc.status_code, "error", str(exc))


@api.exception_handler(Http404)
def on_not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(404, "not_found", "Nothing with that id here.")


from quests.api import agent, people  # noqa: E402  (routers register on `api`)

api.add_router("", agent.router)
api.add_router("", people.router)
