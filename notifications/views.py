"""The notifications settings page, beside the person's settings: what to be told of and how,
and their webhooks (added with the secret shown once, tested, removed, their recent deliveries).
Plain forms that work without JavaScript; every change is a POST."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core import signing
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from notifications import sending, services
from notifications.models import EventKind, Format, Mode
from quests.services.audit import Actor
from quests.services.errors import ServiceError

SECRET_SHOWN = "notifications.secret_shown"


def _page(request: HttpRequest, *, problem: str = "", form: dict | None = None, status: int = 200) -> HttpResponse:
    actor = Actor(user=request.user)
    chosen = services.preferences_of(request.user)
    endpoints = services.webhook_list(actor=actor)
    context = {
        "kinds": [(kind, label, chosen[kind]) for kind, label in EventKind.choices],
        "modes": Mode.choices,
        "formats": Format.choices,
        "endpoints": [(e, services.webhook_deliveries(actor=actor, endpoint_id=e.pk)[:5]) for e in endpoints],
        "new_secret": request.session.pop(SECRET_SHOWN, None),
        "problem": problem,
        "form": form or {"events": [EventKind.APPROVAL_REQUESTED, EventKind.MILESTONE_AWAITING_REVIEW]},
        "has_email": bool(getattr(request.user, "email", "")),  # the page needs a login: a User
    }
    return render(request, "notifications/settings.html", context, status=status)


@login_required
@require_http_methods(["GET"])
def notifications_page(request: HttpRequest) -> HttpResponse:
    return _page(request)


@login_required
@require_POST
def preferences_save(request: HttpRequest) -> HttpResponse:
    try:
        for kind in EventKind.values:
            if kind in request.POST:
                services.preference_set(user=request.user, kind=kind, mode=request.POST[kind])
    except ServiceError as exc:
        return _page(request, problem=exc.message, status=422)
    messages.success(request, "Your notification choices are saved.")
    return redirect("notifications")


@login_required
@require_POST
def webhook_add(request: HttpRequest) -> HttpResponse:
    form: dict[str, Any] = {
        "url": request.POST.get("url", "").strip(),
        "events": request.POST.getlist("events"),
        "format": request.POST.get("format", "standard"),
    }
    try:
        endpoint = services.webhook_create(actor=Actor(user=request.user), url=form["url"], events_wanted=form["events"], format=form["format"])
    except ServiceError as exc:
        return _page(request, problem=exc.message, form=form, status=422)
    request.session[SECRET_SHOWN] = {"id": endpoint.pk, "secret": endpoint.secret}
    messages.success(request, f"Webhook added for {endpoint.url}.")
    return redirect("notifications")


@login_required
@require_POST
def webhook_send_test(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        services.webhook_test(actor=Actor(user=request.user), endpoint_id=pk)
    except ServiceError as exc:
        return _page(request, problem=exc.message, status=exc.status)
    messages.success(request, "A test event is on its way; its delivery appears below.")
    return redirect("notifications")


@login_required
@require_POST
def webhook_remove(request: HttpRequest, pk: int) -> HttpResponse:
    try:
        services.webhook_delete(actor=Actor(user=request.user), endpoint_id=pk)
    except ServiceError as exc:
        return _page(request, problem=exc.message, status=exc.status)
    messages.success(request, "Webhook removed.")
    return redirect("notifications")


@require_http_methods(["GET", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """The link in every email. A GET only asks (mail scanners open links); the POST, from the
    signed link itself, turns that kind of email off. No sign-in needed: the link is the proof."""
    try:
        claim = signing.loads(token, salt=sending.UNSUBSCRIBE_SALT)
    except signing.BadSignature:
        return render(request, "notifications/unsubscribe.html", {"invalid": True}, status=404)
    label = dict(EventKind.choices).get(claim["k"], "The daily digest")
    done = request.method == "POST" and services.unsubscribe(user_id=claim["u"], kind=claim["k"])
    return render(request, "notifications/unsubscribe.html", {"label": label, "done": done, "kind": claim["k"]})
