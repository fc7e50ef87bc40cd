"""The pages people use. No app namespace: templates and tests name them plainly ("mission")."""

from django.urls import path

from quests.web import board, checkpoints, constraints, inbox, ledger, missions, preferences, tokens

urlpatterns = [
    path("", board.board, name="board"),
    path("missions/<int:pk>/", missions.mission_detail, name="mission"),
    path("missions/<int:pk>/pause/", missions.mission_pause, name="mission-pause"),
    path("missions/<int:pk>/unpause/", missions.mission_unpause, name="mission-unpause"),
    path("missions/<int:pk>/cancel/", missions.mission_cancel, name="mission-cancel"),
    path("missions/<int:pk>/restore/", missions.mission_restore, name="mission-restore"),
    path("missions/<int:pk>/ledger/", ledger.mission_ledger, name="mission-ledger"),
    path("missions/<int:pk>/constraints/", constraints.constraint_add, name="constraint-add"),
    path("missions/<int:pk>/constraints/<int:cid>/edit/", constraints.constraint_edit, name="constraint-edit"),
    path("missions/<int:pk>/constraints/<int:cid>/retire/", constraints.constraint_retire, name="constraint-retire"),
    path("missions/<int:pk>/standing-decisions/<int:sid>/revoke/", inbox.standing_decision_revoke, name="standing-decision-revoke"),
    path("checkpoints/<int:pk>/", checkpoints.checkpoint_detail, name="checkpoint"),
    path("approvals/", inbox.inbox, name="inbox"),
    path("approvals/count/", inbox.inbox_count_badge, name="inbox-count"),
    path("approvals/<int:pk>/decide/", inbox.approval_decide, name="approval-decide"),
    path("approvals/<int:pk>/undo/", inbox.approval_undo, name="approval-undo"),
    path("milestones/<int:pk>/review/", inbox.milestone_review, name="milestone-review"),
    path("settings/", preferences.settings_page, name="settings"),
    path("tokens/", tokens.token_list, name="tokens"),
    path("tokens/<int:pk>/revoke/", tokens.token_revoke, name="token-revoke"),
]
