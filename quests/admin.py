"""Admin for missions and everything people and agents act on. Rules live in services, so most
pages are view-only; holds and the retention policy are changed here through their services
(with their audit events), and audit events can never be changed at all."""

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from checkpoints.admin import ReadOnlyAdmin
from checkpoints.models import RetentionPolicy
from quests.langgraph.models import GraphCheckpoint, GraphWrite
from quests.models import (
    AgentToken,
    Approval,
    AuditEvent,
    Constraint,
    GraphThread,
    Hold,
    IdempotentRequest,
    MemoryItem,
    MemoryProposal,
    Milestone,
    Mission,
    PersonSettings,
    Run,
    StandingDecision,
)
from quests.retention.forms import RetentionPolicyForm
from quests.retention.services.holds import hold_place, hold_release
from quests.retention.services.policy import POLICY_FIELDS, retention_policy_update
from quests.services.audit import Actor
from quests.services.errors import ServiceError


class PurgedFilter(admin.SimpleListFilter):
    title = "purged"
    parameter_name = "purged"

    def lookups(self, request, model_admin):
        return (("yes", "Purged (tombstone)"), ("no", "Not purged"))

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(purged_at__isnull=self.value() == "no")
        return queryset


class ActiveHoldFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "active"

    def lookups(self, request, model_admin):
        return (("yes", "Active"), ("no", "Released"))

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(released_at__isnull=self.value() == "yes")
        return queryset


@admin.register(Mission)
class MissionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "title",
        "owner",
        "status",
        "stop_reason",
        "created_at",
        "ended_at",
        "retention_approved_at",
        "expires_at",
        "purged_at",
    )
    list_filter = ("status", "stop_reason", PurgedFilter, "retention_class", "created_at")
    search_fields = ("title", "objective", "owner__username")
    list_select_related = ("owner",)
    date_hierarchy = "created_at"


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "number", "agent", "started_at", "heartbeat_at", "ended_at", "stop_reason")
    list_filter = ("stop_reason",)
    search_fields = ("mission__title", "agent")
    list_select_related = ("mission",)


@admin.register(Constraint)
class ConstraintAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "text", "source", "created_at", "retired_at", "expires_at")
    list_filter = ("source", "retention_class")
    search_fields = ("text", "mission__title")
    list_select_related = ("mission",)


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "action", "status", "created_at", "respond_by", "decided_at", "decided_by", "expires_at")
    list_filter = ("status", "retention_class")
    search_fields = ("action", "reason", "mission__title")
    list_select_related = ("mission", "decided_by")


@admin.register(Milestone)
class MilestoneAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "kind", "title", "gate", "review_status", "withdrawn", "created_at", "reviewed_at", "expires_at")
    list_filter = ("kind", "review_status", "gate", "withdrawn", "retention_class")
    search_fields = ("title", "mission__title")
    list_select_related = ("mission",)


@admin.register(MemoryProposal)
class MemoryProposalAdmin(ReadOnlyAdmin):
    list_display = ("id", "owner", "mission", "name", "status", "created_at", "decided_at", "expires_at")
    list_filter = ("status",)
    search_fields = ("name", "owner__username", "mission__title")
    list_select_related = ("owner", "mission")


@admin.register(MemoryItem)
class MemoryItemAdmin(ReadOnlyAdmin):
    list_display = ("id", "owner", "name", "source_mission", "approved_at", "retention_approved_at", "expires_at")
    list_filter = ("approved_at", "expires_at")
    search_fields = ("name", "owner__username")
    list_select_related = ("owner", "source_mission")


@admin.register(GraphThread)
class GraphThreadAdmin(ReadOnlyAdmin):
    list_display = ("id", "thread_id", "owner", "mission", "created_at", "deleted_at")
    search_fields = ("thread_id", "owner__username", "mission__title")
    list_select_related = ("owner", "mission")


@admin.register(GraphCheckpoint)
class GraphCheckpointAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "ns", "graph_id", "parent_graph_id", "run_ref", "created_at")
    search_fields = ("graph_id", "run_ref", "mission__title")
    list_select_related = ("mission",)
    raw_id_fields = ("checkpoint", "mission")
    date_hierarchy = "created_at"


@admin.register(GraphWrite)
class GraphWriteAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "ns", "graph_id", "task_id", "idx", "channel", "created_at")
    search_fields = ("graph_id", "task_id", "channel")
    list_select_related = ("mission",)
    raw_id_fields = ("mission",)


@admin.register(AgentToken)
class AgentTokenAdmin(ReadOnlyAdmin):
    list_display = ("id", "user", "name", "prefix", "mission", "created_at", "last_used_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix", "user__username")
    list_select_related = ("user", "mission")
    exclude = ("token_hash",)


@admin.register(PersonSettings)
class PersonSettingsAdmin(ReadOnlyAdmin):
    list_display = ("id", "user", "time_zone")
    search_fields = ("user__username", "time_zone")
    list_select_related = ("user",)


@admin.register(IdempotentRequest)
class IdempotentRequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "owner", "scope", "key", "object_id", "created_at")
    search_fields = ("scope", "key", "owner__username")
    list_select_related = ("owner",)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Append-only: the admin shows audit events and can neither add, change nor delete one."""

    list_display = ("id", "created_at", "actor", "entity", "entity_id", "action", "from_state", "to_state", "mission")
    list_filter = ("entity", "action", "created_at")
    search_fields = ("actor", "action", "mission__title")
    list_select_related = ("mission",)
    date_hierarchy = "created_at"


class HoldForm(forms.ModelForm):
    class Meta:
        model = Hold
        fields = ("mission", "user", "reason")

    def clean(self):
        data = super().clean()
        if bool(data.get("mission")) == bool(data.get("user")):
            raise forms.ValidationError("A hold names either a quest or a user (one of them).")
        if not (data.get("reason") or "").strip():
            self.add_error("reason", "A hold needs a reason.")
        return data


@admin.register(Hold)
class HoldAdmin(admin.ModelAdmin):
    form = HoldForm
    list_display = ("id", "mission", "user", "reason", "placed_by", "created_at", "released_at")
    list_filter = (ActiveHoldFilter, "created_at")
    search_fields = ("reason", "mission__title", "user__username")
    list_select_related = ("mission", "user", "placed_by")
    raw_id_fields = ("mission", "user")
    actions = ("release_holds",)

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        # A hold is placed or released, never rewritten: what it covered stays on record.
        return ("mission", "user", "reason", "placed_by", "created_at", "released_at") if obj else ()

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Hold, form, change: bool) -> None:
        if change:
            return
        hold = hold_place(
            actor=Actor(user=request.user),
            reason=obj.reason,
            mission_id=obj.mission_id,
            username=obj.user.get_username() if obj.user is not None else None,
        )
        obj.pk, obj.placed_by_id, obj.created_at = hold.pk, hold.placed_by_id, hold.created_at
        obj._state.adding = False

    @admin.action(description="Release the selected holds")
    def release_holds(self, request: HttpRequest, queryset: QuerySet[Hold]) -> None:
        released = 0
        for hold in queryset.filter(released_at__isnull=True):
            try:
                hold_release(actor=Actor(user=request.user), hold_id=hold.pk)
                released += 1
            except ServiceError as exc:
                self.message_user(request, exc.message, messages.ERROR)
        self.message_user(request, f"Released {released} hold(s).")


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(admin.ModelAdmin):
    """Saving the policy in force writes a new version through the service; older versions are
    its history, shown read-only."""

    form = RetentionPolicyForm
    list_display = ("id", "in_force", *POLICY_FIELDS, "updated_at", "updated_by")
    fields = POLICY_FIELDS
    actions = None

    @admin.display(boolean=True, description="in force")
    def in_force(self, obj: RetentionPolicy) -> bool:
        return obj.pk == RetentionPolicy.current().pk

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not RetentionPolicy.objects.exists()

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return super().has_change_permission(request, obj) and (obj is None or obj.pk == RetentionPolicy.current().pk)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: RetentionPolicy, form, change: bool) -> None:
        values = {name: form.cleaned_data[name] for name in POLICY_FIELDS}
        policy = retention_policy_update(actor=Actor(user=request.user), **values)
        # The admin's message and redirect name the version just written, not the one edited.
        obj.pk, obj.updated_at, obj.updated_by = policy.pk, policy.updated_at, policy.updated_by
        obj._state.adding = False


@admin.register(StandingDecision)
class StandingDecisionAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "action", "decision", "created_at", "revoked_at")
