"""Agent tokens: create one (shown once) and revoke."""

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers

from quests import selectors
from quests.forms import TokenForm, first_error
from quests.services import tokens
from quests.services.errors import ServiceError
from quests.web.pages import Problem, act, page, render_page

TEMPLATE = "quests/tokens.html"
FRAGMENTS = {"tokens"}


@page("tokens", TEMPLATE, fragments=FRAGMENTS)
def tokens_context(request: HttpRequest, problem: Problem | None = None, *, form: TokenForm | None = None, new_token: str = "") -> dict[str, Any]:
    return {
        "tokens": selectors.tokens(request.user),
        "form": form or TokenForm(missions=selectors.token_missions(request.user)),
        "new_token": new_token,
        "problem": problem,
        "page_url": reverse("tokens"),
        "api_missions_url": request.build_absolute_uri("/api/v1/missions"),
    }


@login_required
@vary_on_headers("HX-Request")
@require_http_methods(["GET", "POST"])
def token_list(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return render_page(request, TEMPLATE, tokens_context(request), fragments=FRAGMENTS)
    form = TokenForm(request.POST, missions=selectors.token_missions(request.user))
    if not form.is_valid():
        return _refused(request, form, first_error(form))
    try:
        _, raw = tokens.token_create(user=request.user, name=form.cleaned_data["name"], mission=form.cleaned_data["mission"])
    except ServiceError as exc:
        return _refused(request, form, exc.message)
    # Shown once, in this answer only: it is stored as a hash and cannot be shown again.
    return render_page(request, TEMPLATE, tokens_context(request, new_token=raw), fragments=FRAGMENTS)


def _refused(request: HttpRequest, form: TokenForm, message: str) -> HttpResponse:
    problem = Problem(("token", "create"), message, request.POST.dict())
    return render_page(request, TEMPLATE, tokens_context(request, problem, form=form), fragments=FRAGMENTS, status=422)


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    return act(
        request, origin=reverse("tokens"), target=("agenttoken", pk),
        do=lambda: tokens.token_revoke(user=request.user, token_id=pk),
    )
