"""What every page module shares. Thin views: each action parses a form, calls the one service
that owns the rule, and answers with the affected fragment (htmx) or a redirect back (a plain form
POST). A service's refusal is shown as a form error on the page it came from, never as a 500."""

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django_htmx.http import HttpResponseClientRefresh

from quests import storable
from quests.context_processors import inbox_badge
from quests.forms import first_error
from quests.services.access import get_for
from quests.services.audit import Actor
from quests.services.errors import NotFound, ServiceError
from quests.web import HtmxHttpRequest

M = TypeVar("M", bound=Model)
SEARCH_MAX = 200
ContextBuilder = Callable[..., dict[str, Any]]


@dataclass
class Problem:
    """Why the form a person just sent did nothing, with what they typed so it is not lost."""

    target: tuple[str, Any]
    message: str
    values: dict[str, Any] = field(default_factory=dict)
    # Sent while logged out: nothing in it was wrong, so no field is marked invalid.
    unsent: bool = False


@dataclass(frozen=True)
class Page:
    template: str
    build: ContextBuilder
    # The fragments an action on this page may swap (htmx targets, `page.html#fragment`).
    fragments: frozenset[str]


# url name -> page. Filled by the page modules as they are imported; `quests.web.urls` imports
# them all, so it is complete before the first request.
PAGES: dict[str, Page] = {}


def page(url_name: str, template: str, *, fragments: set[str]) -> Callable[[ContextBuilder], ContextBuilder]:
    """Register a context builder as the page an action may answer with (by the page's url name)."""

    def register(build: ContextBuilder) -> ContextBuilder:
        PAGES[url_name] = Page(template, build, frozenset(fragments))
        return build

    return register


def actor(request: HttpRequest) -> Actor:
    return Actor(user=request.user)


def get_or_404(request: HttpRequest, model: type[M], pk: int, among: QuerySet[M] | None = None) -> M:
    """The object if this person may see it (read from `among` if given: `get_for`); another user's
    object is a 404 like a missing one."""
    try:
        return get_for(actor(request), model, pk, among=among)
    except NotFound:
        raise Http404(f"No {model._meta.verbose_name} with id {pk}.") from None


# Larger numbers are no checkpoint's number or id (and would overflow the database's integers).
NUMBER_DIGITS = 9


def query_number(raw: str | None) -> int | None:
    """A number from a URL query (a checkpoint's number or id); anything else is None."""
    raw = (raw or "").strip()
    return int(raw) if raw.isdigit() and len(raw) <= NUMBER_DIGITS else None


def mission_url(mission_id: int) -> str:
    return reverse("mission", args=[mission_id])


def _with_inbox_count(request: HttpRequest, html: str, counted: int | None = None) -> str:
    # The navigation's inbox count changes with most actions: htmx swaps it out of band (counted
    # here unless the page counted it already).
    return html + render_to_string("quests/_inbox_count.html", inbox_badge(request.user, oob=True, counted=counted))


def render_page(request: HtmxHttpRequest, template: str, context: dict[str, Any], *, fragments: set[str] | frozenset[str], status: int = 200) -> HttpResponse:
    """The full page, or the fragment an htmx request targets (`page.html#fragment`)."""
    target = request.htmx.target if request.htmx else None
    if target is not None and target in fragments:
        html = render_to_string(f"{template}#{target.replace('-', '_')}", context, request)
        return HttpResponse(_with_inbox_count(request, html, context.get("inbox_count")), status=status)
    return render(request, template, context, status=status)


def _origin(request: HttpRequest, default: str) -> str:
    """Where the form was sent from (its hidden `next`), if that is one of our pages."""
    candidate = request.POST.get("next") or ""
    if candidate and url_has_allowed_host_and_scheme(candidate, allowed_hosts={request.get_host()}):
        try:
            if resolve(urlsplit(candidate).path).url_name in PAGES:
                return candidate
        except Resolver404:
            pass
    return default


def search_text(params: QueryDict, key: str = "q") -> str:
    """What a person typed into a search box, its spaces tidied and its length capped. Text no
    column can hold (quests.storable: a NUL character) raises Unstorable, for the page to show as
    a form error: it could match nothing, and the database refuses to be asked."""
    typed = storable.check_text(params.get(key) or "", subject="A search")
    return " ".join(typed.split())[:SEARCH_MAX]


def _as_seen_at(request: HttpRequest, origin: str) -> HttpRequest:
    """The request with the query string of the page the form came from (its page number, search,
    filter), so the page it re-renders is the one the person was looking at, not its first page."""
    seen = copy.copy(request)
    seen.GET = QueryDict(urlsplit(origin).query)
    return seen


def answer(request: HtmxHttpRequest, origin: str, problem: Problem | None) -> HttpResponse:
    """After an action: re-render the page it came from (the targeted fragment for htmx, the whole
    page when there is a form error) or redirect back to it."""
    match = resolve(urlsplit(origin).path)
    target_page = PAGES[match.url_name or ""]  # every page is named
    status = 422 if problem else 200
    if request.htmx and request.htmx.target not in target_page.fragments:
        return HttpResponseClientRefresh()
    if not request.htmx and not problem:
        return redirect(origin)
    context = target_page.build(_as_seen_at(request, origin), problem=problem, **match.kwargs)
    if request.htmx:
        return render_page(request, target_page.template, context, fragments=target_page.fragments, status=status)
    return render(request, target_page.template, context, status=status)


# What a person sent after their session had ended (quests.middleware.HtmxSessionEndedMiddleware):
# kept in the session, which survives logging in, and shown again on the page they return to.
UNSENT_KEY = "questlog_unsent"
# Characters of typed values kept; a bigger form is still named, its values are not carried.
UNSENT_MAX_CHARS = 100_000
# Where a form of each action shows its problem (the targets `act` is given by its views).
UNSENT_TARGETS: dict[str, Callable[[dict[str, Any]], tuple[str, Any]]] = {
    "approval-decide": lambda kw: ("approval", kw["pk"]),
    "milestone-review": lambda kw: ("milestone", kw["pk"]),
    "constraint-add": lambda kw: ("constraint", "add"),
    "constraint-edit": lambda kw: ("constraint", kw["cid"]),
    "mission-pause": lambda kw: ("controls", kw["pk"]),
    "mission-unpause": lambda kw: ("controls", kw["pk"]),
}
BUTTONS = {"approve": "Approve", "edit": "Edit and approve", "reject": "Reject", "correct": "Correct"}


def keep_unsent(request: HttpRequest) -> None:
    """Keep what an action sent without a session, to show it again after the person logs in."""
    values = {name: value for name, value in request.POST.items() if name != "csrfmiddlewaretoken"}
    if sum(len(value) for value in values.values()) > UNSENT_MAX_CHARS:
        values = {}
    request.session[UNSENT_KEY] = {"path": request.path, "values": values}


def unsent_problem(request: HttpRequest) -> Problem | None:
    """The action a person sent while logged out, once, as a problem on its form: nothing of it was
    applied, and what they chose and typed is there to send again."""
    kept = request.session.pop(UNSENT_KEY, None) if hasattr(request, "session") else None
    if not isinstance(kept, dict):
        return None
    values = kept.get("values") or {}
    try:
        match = resolve(str(kept.get("path") or ""))
    except Resolver404:
        return None
    target = UNSENT_TARGETS.get(match.url_name or "", lambda kw: ("unsent", None))(match.kwargs)
    pressed = BUTTONS.get(values.get("decision") or values.get("action") or "")
    what = f"your “{pressed}”" if pressed else "what you sent"
    message = f"You had been logged out, so {what} was not applied and nothing changed. It is shown again here: send it once more if you still want it."
    return Problem(target, message, values, unsent=True)


def act(request: HtmxHttpRequest, *, origin: str, target: tuple[str, Any], form=None, do: Callable[[], Any]) -> HttpResponse:
    """Validate the form, call the service, answer on the page the action came from."""
    problem = None
    if form is not None and not form.is_valid():
        problem = Problem(target, first_error(form), request.POST.dict())
    else:
        try:
            do()
        except NotFound:
            raise Http404("Nothing with that id here.") from None
        except ServiceError as exc:
            problem = Problem(target, exc.message, request.POST.dict())
    return answer(request, _origin(request, origin), problem)
