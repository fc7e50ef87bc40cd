"""Password reset by email, routed only with QUESTLOG_PASSWORD_RESET on (config/urls.py).

Off by default: until the server sends email, Django's reset pages promise a mail that never comes.
When on, every reset request is counted per address and per account (services.throttle), since
each one sends a mail: past the limit the form says when to try again (429) and sends nothing."""

from django.contrib.auth import views as auth_views
from django.http import HttpResponse
from django.urls import path

from quests.services import throttle
from quests.services.errors import RateLimited
from quests.web.login import client_address


class ThrottledPasswordResetView(auth_views.PasswordResetView):
    def form_valid(self, form) -> HttpResponse:
        try:
            throttle.password_reset_count(client_address(self.request), form.cleaned_data["email"])
        except RateLimited as limited:
            form.add_error("email", limited.message)
            response = self.form_invalid(form)
            response.status_code = 429
            response["Retry-After"] = str(limited.extra["retry_after"])
            return response
        return super().form_valid(form)


# Django's own names and paths (django.contrib.auth.urls), so its templates and emails find them.
urlpatterns = [
    path("password_reset/", ThrottledPasswordResetView.as_view(), name="password_reset"),
    path("password_reset/done/", auth_views.PasswordResetDoneView.as_view(), name="password_reset_done"),
    path("reset/<uidb64>/<token>/", auth_views.PasswordResetConfirmView.as_view(), name="password_reset_confirm"),
    path("reset/done/", auth_views.PasswordResetCompleteView.as_view(), name="password_reset_complete"),
]
