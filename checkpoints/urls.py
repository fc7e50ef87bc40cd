"""The admin's pages of the checkpoint tables moved from /admin/checkpoints/ to /admin/quests/ when
the tables joined the `quests` app (docs/architecture.md, "One app for the tables"): the old
addresses, bookmarked or linked, answer a permanent redirect to the same page, query included."""

from django.urls import path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/quests/", permanent=True, query_string=True)),
    path("<path:rest>", RedirectView.as_view(url="/admin/quests/%(rest)s", permanent=True, query_string=True)),
]
