"""One mission's page and its controls: pause, unpause, cancel and restore (the last two with a
confirmation step)."""

from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from checkpoints.models import Checkpoint
from quests.forms import RestoreForm
from quests.models import Mission
from quests.selectors.board import mission_version
from quests.selectors.mission import HistoryWindow, MissionPage, mission_page, mission_page_read
from quests.selectors.people import recent_decisions
from quests.services import machine, missions
from quests.services.bundle import pending_of
from quests.web import HtmxHttpRequest
from quests.web.live import poll_every
from quests.web.pages import Problem, act, actor, answer, get_or_404, mission_url, page, query_number, render_page, unsent_problem

TEMPLATE = "quests/mission.html"
FRAGMENTS = {"mission-body"}


def history_window(request: HttpRequest) -> HistoryWindow:
    """The window of history the page shows, from its URL query. After an action the page comes
    back as it was (pages.answer hands the query of the form's `next` on as the request's GET).
    Anything unreadable is the default."""
    params = request.GET
    return HistoryWindow(
        at=query_number(params.get("at")),
        near=query_number(params.get("near")),
        before=query_number(params.get("before")),
    )


def page_mission(request: HttpRequest, pk: int) -> tuple[Mission, machine.Pending]:
    """The mission this page draws with what it waits for (the bundle's rules) and which of its
    lists it has at all, in one read."""
    mission = get_or_404(request, Mission, pk, among=mission_page_read())
    return mission, pending_of(mission)


@page("mission", TEMPLATE, fragments=FRAGMENTS)
def mission_context(request: HttpRequest, pk: int, problem: Problem | None = None) -> dict[str, Any]:
    mission, pending = page_mission(request, pk)
    window = history_window(request)
    page_data = mission_page(mission, window, pending)
    query = urlencode(window.query())
    inline = {("constraint", "add"), ("controls", pk), ("restore", pk)}
    inline |= {("approval", a.pk) for a in page_data.pending_approvals}
    inline |= {("milestone", m.pk) for m in page_data.milestones if m.is_awaiting_review}
    inline |= {("constraint", c.pk) for c in page_data.constraints if c.retired_at is None}
    return {
        "page": page_data,
        "mission": page_data.mission,
        "version": mission_version(page_data.mission),
        "poll_every": poll_every([page_data.mission.status], running="mission", idle="mission_idle"),
        "problem": problem,
        # A form that vanished with the change (an approval someone else decided) shows its
        # problem at the top instead.
        "problem_inline": problem is not None and problem.target in inline,
        # The page's own address keeps its window (shareable; the back button and the poll keep it).
        "page_url": mission_url(page_data.mission.pk) + (f"?{query}" if query else ""),
        "window_query": query,
        # What the person just decided here, with Undo while the agent has not started again.
        # (Nothing to read on a quest where nothing was ever decided or reviewed, as it first waits.)
        "just_decided": recent_decisions(request.user, mission_id=page_data.mission.pk) if page_data.has_decisions else [],
        "undo_seconds": settings.QUESTLOG_UNDO_SECONDS,
        "links": window_links(mission_url(page_data.mission.pk), page_data),
    }


def window_links(base: str, page_data: MissionPage) -> dict[str, str | None]:
    """The addresses that move one window and keep the other."""
    window, tree, timeline = page_data.window, page_data.tree, page_data.timeline

    def url(**changes: Any) -> str:
        query = urlencode(window.query(**changes))
        return base + (f"?{query}" if query else "")

    return {
        "earlier": url(at=tree.earlier.pk, near=None) if tree.earlier else None,
        "later": url(at=tree.later.pk, near=None) if tree.later else None,
        "head": url(at=None, near=None) if window.at is not None or window.near is not None else None,
        "older": url(before=timeline.older) if timeline.older else None,
        "newer": url(before=timeline.newer) if not timeline.is_latest and timeline.newer else None,
        "latest": url(before=None) if not timeline.is_latest else None,
        # The overview strip's links (`?near=<number>`) keep the timeline's page.
        "keep_before": f"&{urlencode({'before': window.before})}" if window.before is not None else "",
    }


@login_required
@vary_on_headers("HX-Request")
def mission_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    since = request.GET.get("since") if request.htmx else None
    if since:
        # A live page asking whether anything changed: the mission row alone says.
        if since == mission_version(get_or_404(request, Mission, pk)):
            return HttpResponse(status=204)
    problem = None if request.htmx else unsent_problem(request)
    return render_page(request, TEMPLATE, mission_context(request, pk, problem), fragments=FRAGMENTS)


@login_required
@require_POST
def mission_pause(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    get_or_404(request, Mission, pk)
    return act(request, origin=mission_url(pk), target=("controls", pk), do=lambda: missions.mission_pause(actor=actor(request), mission_id=pk))


@login_required
@require_POST
def mission_unpause(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    get_or_404(request, Mission, pk)
    return act(request, origin=mission_url(pk), target=("controls", pk), do=lambda: missions.mission_unpause(actor=actor(request), mission_id=pk))


def _confirm(request: HtmxHttpRequest, context: dict[str, Any], *, status: int = 200) -> HttpResponse:
    """The confirmation step: a panel in place for htmx, its own page for a plain browser."""
    if request.htmx:
        return render(request, "quests/confirm.html#confirm_panel", context, status=status)
    return render(request, "quests/confirm.html", context, status=status)


@login_required
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def mission_cancel(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    mission = get_or_404(request, Mission, pk)
    if request.method == "GET" or request.POST.get("confirmed") != "yes":
        return _confirm(request, {"mission": mission, "what": "cancel", "page_url": mission_url(pk)})
    return act(request, origin=mission_url(pk), target=("controls", pk), do=lambda: missions.mission_cancel(actor=actor(request), mission_id=pk))


@login_required
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def mission_restore(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    mission = get_or_404(request, Mission, pk)
    form = RestoreForm(request.POST if request.method == "POST" else request.GET)
    if request.method == "POST" and form.is_valid() and form.cleaned_data["confirmed"]:
        checkpoint_id = form.cleaned_data["checkpoint"]
        return act(
            request,
            origin=mission_url(pk),
            target=("restore", pk),
            do=lambda: missions.mission_restore(actor=actor(request), mission_id=pk, checkpoint_id=checkpoint_id),
        )
    target = None
    if form.is_valid():
        target = Checkpoint.objects.filter(mission=mission, pk=form.cleaned_data["checkpoint"]).first()
    if target is None:
        problem = Problem(("restore", pk), "Choose one of this mission's checkpoints to restore to.")
        if request.htmx:
            context = {"mission": mission, "what": "restore", "problem": problem, "page_url": mission_url(pk)}
            return _confirm(request, context, status=422)
        return answer(request, mission_url(pk), problem)
    facts = {
        "constraints": mission.constraints.filter(retired_at__isnull=True).count(),
        "operations": mission.operations.count(),
        "later": Checkpoint.objects.filter(mission=mission, seq__gt=target.seq).count(),
    }
    return _confirm(request, {"mission": mission, "what": "restore", "target": target, "facts": facts, "page_url": mission_url(pk)})
