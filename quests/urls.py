from django.urls import path

from quests import views

urlpatterns = [
    path("", views.board, name="board"),
    path("missions/<int:pk>/", views.mission_detail, name="mission"),
    path("missions/<int:pk>/pause/", views.mission_pause, name="mission-pause"),
    path("missions/<int:pk>/unpause/", views.mission_unpause, name="mission-unpause"),
    path("missions/<int:pk>/cancel/", views.mission_cancel, name="mission-cancel"),
    path("missions/<int:pk>/restore/", views.mission_restore, name="mission-restore"),
    path("missions/<int:pk>/constraints/", views.constraint_add, name="constraint-add"),
    path("missions/<int:pk>/constraints/<int:cid>/edit/", views.constraint_edit, name="constraint-edit"),
    path("missions/<int:pk>/constraints/<int:cid>/retire/", views.constraint_retire, name="constraint-retire"),
    path("checkpoints/<int:pk>/", views.checkpoint_detail, name="checkpoint"),
    path("approvals/", views.inbox, name="inbox"),
    path("approvals/<int:pk>/decide/", views.approval_decide, name="approval-decide"),
    path("milestones/<int:pk>/review/", views.milestone_review, name="milestone-review"),
    path("tokens/", views.token_list, name="tokens"),
    path("tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
]
