"""The person's settings page: the time zone their times are shown in."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from quests.middleware import TIME_ZONE_COOKIE
from quests.services import preferences
from quests.services.errors import ServiceError


@login_required
@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    chosen = request.session.get(preferences.SESSION_TIME_ZONE, "")
    problem = None
    if request.method == "POST":
        try:
            chosen = preferences.time_zone_set(user=request.user, name=request.POST.get("time_zone", "")).time_zone
        except ServiceError as exc:
            problem = exc.message
            chosen = request.POST.get("time_zone", "")
        else:
            request.session[preferences.SESSION_TIME_ZONE] = chosen
            messages.success(request, f"Times are now shown in {chosen or 'your browser’s time zone'}.")
            return redirect("settings")
    context = {
        "zones": preferences.time_zone_names(),
        "chosen": chosen,
        "browser_zone": request.COOKIES.get(TIME_ZONE_COOKIE, ""),
        "problem": problem,
    }
    return render(request, "quests/settings.html", context, status=422 if problem else 200)
