"""The board: every quest of this person, filtered by status, polled by htmx."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.vary import vary_on_headers

from quests import selectors
from quests.models import MissionStatus
from quests.web.pages import Problem, page, render_page

TEMPLATE = "quests/board.html"
FRAGMENTS = {"quest-list"}


@page("board", TEMPLATE, fragments=FRAGMENTS)
def board_context(request: HttpRequest, problem: Problem | None = None) -> dict[str, Any]:
    status = request.GET.get("status") or ""
    if status not in MissionStatus.values:
        status = ""
    return {
        **selectors.board(request.user, status or None),
        "status": status,
        "version": selectors.board_version(request.user),
        "problem": problem,
        "page_url": reverse("board") + (f"?status={status}" if status else ""),
        "api_missions_url": request.build_absolute_uri("/api/v1/missions"),
    }


@login_required
@vary_on_headers("HX-Request")
def board(request: HttpRequest) -> HttpResponse:
    since = request.GET.get("since")
    if request.htmx and since and since == selectors.board_version(request.user):
        return HttpResponse(status=204)
    return render_page(request, TEMPLATE, board_context(request), fragments=FRAGMENTS)
