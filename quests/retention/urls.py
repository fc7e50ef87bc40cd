"""Pages about keeping and forgetting state (retention issue): /memory/, /account/export/, a quest's
retention choice, and /staff/retention/."""

from django.urls import path

from quests.retention import views

app_name = "retention"

urlpatterns = [
    path("memory/", views.memory_page, name="memory"),
    path("memory/items/<int:pk>/forget/", views.memory_forget, name="memory-forget"),
    path("memory/items/<int:pk>/renew/", views.memory_renew, name="memory-renew"),
    path("memory/proposals/<int:pk>/decide/", views.memory_decide, name="memory-decide"),
    path("account/export/", views.account_export, name="export"),
    path("missions/<int:pk>/retention/keep/", views.mission_keep, name="mission-keep"),
    path("missions/<int:pk>/retention/withdraw/", views.mission_withdraw, name="mission-withdraw"),
    path("missions/<int:pk>/retention/delete/", views.mission_delete, name="mission-delete"),
    path("staff/retention/", views.staff_retention, name="staff"),
    path("staff/retention/policy/", views.staff_policy, name="staff-policy"),
    path("staff/retention/holds/", views.staff_hold_place, name="staff-hold-place"),
    path("staff/retention/holds/<int:pk>/release/", views.staff_hold_release, name="staff-hold-release"),
    path("staff/retention/purge/", views.staff_purge, name="staff-purge"),
]
