"""Agent tokens: create one (shown once) and revoke. The mission a token is limited to is found by
a search (live with htmx, or with the Find button without JavaScript), so the page stays the same
size however many missions the person has."""

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from quests.forms import TokenForm, first_error
from quests.selectors import people
from quests.services import tokens
from quests.services.errors import ServiceError
from quests.storable import Unstorable
from quests.web import HtmxHttpRequest
from quests.web.pages import Problem, act, page, query_number, render_page, search_text

TEMPLATE = "quests/tokens.html"
FRAGMENTS = {"tokens", "mission-choices"}


@page("tokens", TEMPLATE, fragments=FRAGMENTS)
def tokens_context(request: HttpRequest, problem: Problem | None = None, *, new_token: str = "") -> dict[str, Any]:
    # What the person typed into the create form: from a search (GET, or the Find button's POST) or
    # a refused POST. A token just made, or a revoke, starts the form afresh.
    typing = request.POST if request.method == "POST" and "name" in request.POST and not new_token else request.GET
    try:
        mission_q, search_problem = (search_text(typing, "mission_q") if "mission_q" in typing else None), ""
    except Unstorable as exc:
        mission_q, search_problem = None, exc.message  # not searched: the choices say why
    chosen = query_number(typing.get("mission"))
    choices = people.token_mission_choices(request.user, mission_q, chosen)
    if not any(m.pk == chosen for m in choices.missions):
        chosen = None  # not one the person may choose: "All my missions" is the one checked
    listed = people.tokens(request.user, request.GET.get("page") or 1)
    return {
        "tokens": listed,
        "typed_name": typing.get("name", "")[:100],
        "mission_q": mission_q or "",
        "search_problem": search_problem,
        "chosen": chosen,
        "choices": choices,
        "new_token": new_token,
        "problem": problem,
        "page_url": reverse("tokens") + (f"?{urlencode({'page': listed.number})}" if listed.number > 1 else ""),
        "api_missions_url": request.build_absolute_uri("/api/v1/missions"),
        "api_base_url": request.build_absolute_uri("/").rstrip("/"),
        **(mcp_host_configs(request, new_token) if new_token else {}),
    }


def mcp_host_configs(request: HttpRequest, token: str) -> dict[str, str]:
    """What an MCP host's configuration needs for this token (README, "MCP hosts"): the `/mcp` URL
    with the bearer header, or the `questlog-mcp` command with its environment. JSON written by
    json.dumps, so that any URL or token is quoted correctly."""
    base = request.build_absolute_uri("/").rstrip("/")
    http: dict[str, Any] = {"type": "http", "url": request.build_absolute_uri(reverse("mcp")), "headers": {"Authorization": f"Bearer {token}"}}
    stdio = {"command": "questlog-mcp", "env": {"QUESTLOG_URL": base, "QUESTLOG_TOKEN": token}}
    return {
        "mcp_url": http["url"],
        "mcp_http_config": json.dumps({"mcpServers": {"questlog": http}}, indent=2),
        "mcp_stdio_config": json.dumps({"mcpServers": {"questlog": stdio}}, indent=2),
    }


# never_cache: Cache-Control: no-store (and private) on every answer of this page, since one of them
# carries a new token in clear: no browser, proxy or back button may keep a copy. The page's other
# answers are sent so too, so that no answer of the page ever escapes it.
@never_cache
@login_required
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def token_list(request: HtmxHttpRequest) -> HttpResponse:
    if request.method == "GET" or "find" in request.POST:
        context = tokens_context(request)
        return render_page(request, TEMPLATE, context, fragments=FRAGMENTS, status=422 if context["search_problem"] else 200)
    form = TokenForm(request.POST, missions=people.token_missions(request.user))
    if not form.is_valid():
        return _refused(request, first_error(form))
    try:
        _, raw = tokens.token_create(user=request.user, name=form.cleaned_data["name"], mission=form.cleaned_data["mission"])
    except ServiceError as exc:
        return _refused(request, exc.message)
    # Shown once, in this answer only: it is stored as a hash and cannot be shown again.
    return render_page(request, TEMPLATE, tokens_context(request, new_token=raw), fragments=FRAGMENTS)


def _refused(request: HtmxHttpRequest, message: str) -> HttpResponse:
    problem = Problem(("token", "create"), message, request.POST.dict())
    return render_page(request, TEMPLATE, tokens_context(request, problem), fragments=FRAGMENTS, status=422)


@login_required
@require_POST
def token_revoke(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return act(
        request,
        origin=reverse("tokens"),
        target=("agenttoken", pk),
        do=lambda: tokens.token_revoke(user=request.user, token_id=pk),
    )
