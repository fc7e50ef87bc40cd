"""Pages about keeping and forgetting: the person's memory, their data export, a quest's retention
choice and "delete now", and the staff retention page. Thin: each calls one retention or memory
service; a refusal becomes a message or a form error, never a 500. Like the other pages, an htmx
action is answered with the fragment it changed, a plain form POST with a redirect back."""

from collections.abc import Callable
from datetime import timedelta
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from checkpoints.models import PurgeLog, RetentionPolicy
from quests.models import MemoryItem, MemoryProposal, Mission
from quests.retention.forms import HoldForm, MemoryDecisionForm, PurgeForm, StaffPolicyForm
from quests.retention.services import export
from quests.retention.services.expiry import expiring_soon, retention_keep, retention_withdraw
from quests.retention.services.holds import active_holds, hold_place, hold_release
from quests.retention.services.policy import POLICY_FIELDS, policy_history, require_staff, retention_policy_update
from quests.retention.services.purge import retention_delete_now, retention_purge
from quests.services import memory
from quests.services.errors import InvalidInput, NotFound, ServiceError
from quests.web import HtmxHttpRequest
from quests.web.pages import act, actor, get_or_404, mission_url, render_page

PURGE_LOG_ROWS = 25


def _attempt(request: HttpRequest, do: Callable[[], Any], *, done: str) -> bool:
    """Run one service call; another user's object is a 404, any other refusal a message."""
    try:
        do()
    except NotFound as exc:
        raise Http404(exc.message) from None
    except ServiceError as exc:
        messages.error(request, exc.message)
        return False
    messages.success(request, done)
    return True


# ---- the person's memory -------------------------------------------------------------------------

MEMORY_TEMPLATE = "retention/memory.html"
MEMORY_FRAGMENTS = {"memory-body"}


def _memory_context(request: HttpRequest, *, with_messages: bool = False) -> dict[str, Any]:
    owner_id = request.user.pk  # the pages need a login
    return {
        "items": MemoryItem.objects.filter(owner_id=owner_id).select_related("source_mission").order_by("name", "id"),
        "proposals": MemoryProposal.objects.filter(owner_id=owner_id, status=MemoryProposal.Status.PENDING).select_related("mission").order_by("id"),
        "now": timezone.now(),
        # A full page shows messages in the layout; a swapped fragment carries its own.
        "fragment_messages": with_messages,
    }


def _memory_answer(request: HtmxHttpRequest) -> HttpResponse:
    if request.htmx:
        return render_page(request, MEMORY_TEMPLATE, _memory_context(request, with_messages=True), fragments=MEMORY_FRAGMENTS)
    return redirect("retention:memory")


@login_required
@vary_on_headers("HX-Request")
@require_GET
def memory_page(request: HtmxHttpRequest) -> HttpResponse:
    return render_page(request, MEMORY_TEMPLATE, _memory_context(request), fragments=MEMORY_FRAGMENTS)


@login_required
@require_POST
def memory_forget(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    _attempt(request, lambda: memory.memory_forget(actor=actor(request), item_id=pk), done="Forgotten: Questlog no longer remembers it.")
    return _memory_answer(request)


@login_required
@require_POST
def memory_renew(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    _attempt(request, lambda: memory.memory_renew(actor=actor(request), item_id=pk), done="Kept for another year.")
    return _memory_answer(request)


@login_required
@require_POST
def memory_decide(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    form = MemoryDecisionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose Remember or Don't remember.")
        return _memory_answer(request)
    decision = form.cleaned_data["decision"]
    done = "Remembered." if decision == "approve" else "Not remembered; the proposal goes with its quest's working state."
    _attempt(request, lambda: memory.memory_decide(actor=actor(request), proposal_id=pk, decision=decision), done=done)
    return _memory_answer(request)


# ---- the person's data -----------------------------------------------------------------------------


# Everything of the person, agents' saved states included (which may hold their secrets): no
# browser cache or proxy may keep a copy (Cache-Control: no-store, as the tokens page).
@never_cache
@login_required
@require_GET
def account_export(request: HttpRequest) -> StreamingHttpResponse:
    # Streamed: a long history is written as it is read, never held whole.
    response = StreamingHttpResponse(export.account_export(actor=actor(request)), content_type="application/json")
    filename = f"questlog-{request.user.get_username()}-{timezone.now():%Y-%m-%d}.json"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


# ---- one quest: keep its history, withdraw, delete now ------------------------------------------


def _retention_url(pk: int) -> str:
    return mission_url(pk) + "#retention"


def _keep_choice(request: HtmxHttpRequest, pk: int, do: Callable[[], Any], *, done: str) -> HttpResponse:
    """htmx swaps the mission page's body (the panel is in it); a plain POST goes back to the panel."""
    if request.htmx:
        return act(request, origin=mission_url(pk), target=("retention", pk), do=do)
    _attempt(request, do, done=done)
    return redirect(_retention_url(pk))


@login_required
@require_POST
def mission_keep(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _keep_choice(
        request,
        pk,
        lambda: retention_keep(actor=actor(request), mission_id=pk),
        done="This quest's history will be kept.",
    )


@login_required
@require_POST
def mission_withdraw(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    return _keep_choice(
        request,
        pk,
        lambda: retention_withdraw(actor=actor(request), mission_id=pk),
        done="No longer kept: its working state expires like any other quest's.",
    )


@login_required
@require_http_methods(["GET", "POST"])
def mission_delete(request: HttpRequest, pk: int) -> HttpResponse:
    mission = get_or_404(request, Mission, pk)
    if request.method == "GET" or request.POST.get("confirmed") != "yes":
        return render(request, "retention/delete_confirm.html", {"mission": mission, "mission_url": _retention_url(pk)})
    _attempt(
        request,
        lambda: retention_delete_now(actor=actor(request), mission_id=pk),
        done="Deleted: only the quest's title, status and dates remain.",
    )
    return redirect(_retention_url(pk))


# ---- staff -------------------------------------------------------------------------------------------


def staff_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Staff pages and actions are a 404 for everyone else, signed in or not."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            require_staff(actor(request))
        except NotFound:
            raise Http404("No such page.") from None
        return view(request, *args, **kwargs)

    return wrapper


def _staff_page(request: HttpRequest, *, status: int = 200, **forms: Any) -> HttpResponse:
    policy = RetentionPolicy.current()
    context = {
        "policy": policy,
        "policy_history": policy_history(),
        "policy_form": forms.get("policy_form") or StaffPolicyForm(instance=policy),
        "hold_form": forms.get("hold_form") or HoldForm(),
        "purge_form": PurgeForm(),
        "expiring": expiring_soon(),
        "holds": active_holds(),
        "logs": [_with_summary(log) for log in PurgeLog.objects.all()[:PURGE_LOG_ROWS]],
    }
    return render(request, "retention/staff.html", context, status=status)


def counts_summary(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items()) or "nothing"


def _with_summary(log: PurgeLog) -> PurgeLog:
    # The staff page's template reads both beside the row's own fields.
    log.summary = counts_summary(log.counts)  # type: ignore[attr-defined]
    # A purge run with --as-of (time travel) shows the moment it purged for.
    log.time_travel = abs(log.as_of - log.created_at) > timedelta(minutes=1)  # type: ignore[attr-defined]
    return log


@staff_only
@require_GET
def staff_retention(request: HttpRequest) -> HttpResponse:
    return _staff_page(request)


@staff_only
@require_POST
def staff_policy(request: HttpRequest) -> HttpResponse:
    form = StaffPolicyForm(request.POST, instance=RetentionPolicy.current())
    if not form.is_valid():
        return _staff_page(request, status=422, policy_form=form)
    try:
        retention_policy_update(actor=actor(request), **{name: form.cleaned_data[name] for name in POLICY_FIELDS})
    except InvalidInput as exc:
        form.add_error(exc.extra.get("field"), exc.message)
        return _staff_page(request, status=422, policy_form=form)
    messages.success(request, "Retention policy saved. It applies to quests that end from now on.")
    return redirect("retention:staff")


@staff_only
@require_POST
def staff_hold_place(request: HttpRequest) -> HttpResponse:
    form = HoldForm(request.POST)
    if not form.is_valid():
        return _staff_page(request, status=422, hold_form=form)
    data = form.cleaned_data
    try:
        hold_place(
            actor=actor(request),
            reason=data["reason"],
            mission_id=data.get("mission_id"),
            username=(data.get("username") or "").strip() or None,
        )
    except InvalidInput as exc:
        field = exc.extra.get("field")
        form.add_error(field if field in form.fields else None, exc.message)
        return _staff_page(request, status=422, hold_form=form)
    messages.success(request, "Hold placed: nothing it covers will be purged until it is released.")
    return redirect("retention:staff")


@staff_only
@require_POST
def staff_hold_release(request: HttpRequest, pk: int) -> HttpResponse:
    _attempt(request, lambda: hold_release(actor=actor(request), hold_id=pk), done="Hold released.")
    return redirect("retention:staff")


@staff_only
@require_POST
def staff_purge(request: HttpRequest) -> HttpResponse:
    form = PurgeForm(request.POST)
    dry_run = form.is_valid() and form.cleaned_data["dry_run"]
    log = retention_purge(dry_run=dry_run, trigger="staff", actor=actor(request))
    messages.success(request, f"{'Dry run: would delete' if dry_run else 'Purged'} {counts_summary(log.counts)}.")
    return redirect("retention:staff")
