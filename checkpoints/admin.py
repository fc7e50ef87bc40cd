"""Admin for the save-state layer. Stored state is immutable or changed only by services (the
purge, the pruner, the agent API), so these pages are for looking, never for editing. The
retention policy is edited through its service, so it is registered by `quests.admin`."""

from django.contrib import admin
from django.http import HttpRequest

from checkpoints.models import Blob, Checkpoint, Operation, OperationEvent, PurgeLog, Record, RefMap, SnapshotRequest

LIFECYCLE_FIELDS = ("retention_class", "retention_approved_at", "expires_at")


class ReadOnlyAdmin(admin.ModelAdmin):
    """View-only: a change made here would bypass the services' rules and audit. The one definition,
    here in the lower layer, which `quests.admin` uses too."""

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Blob)
class BlobAdmin(ReadOnlyAdmin):
    list_display = ("short_hash", "size_bytes", "media_type", "created_at")
    list_filter = ("media_type", "created_at")
    search_fields = ("sha256",)
    exclude = ("data",)
    date_hierarchy = "created_at"

    @admin.display(description="sha256", ordering="sha256")
    def short_hash(self, obj: Blob) -> str:
        return obj.sha256[:16]


@admin.register(RefMap)
class RefMapAdmin(ReadOnlyAdmin):
    list_display = ("sha256",)
    search_fields = ("sha256",)


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "seq", "trigger", "verified", "size_bytes", "new_bytes", "created_at", "expires_at")
    list_filter = ("trigger", "verified", "retention_class", "created_at")
    search_fields = ("mission__title", "hash", "note")
    list_select_related = ("mission",)
    raw_id_fields = ("mission", "run", "parent")
    date_hierarchy = "created_at"


@admin.register(Record)
class RecordAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "kind", "short_text", "resolved", "abandoned", "archived", "size_bytes", "created_at", "expires_at")
    list_filter = ("kind", "resolved", "abandoned", "archived", "retention_class")
    search_fields = ("text", "mission__title")
    list_select_related = ("mission",)
    raw_id_fields = ("mission", "run", "blob", "resolved_by")

    @admin.display(description="text")
    def short_text(self, obj: Record) -> str:
        return obj.text[:80]


class OperationEventInline(admin.TabularInline):
    model = OperationEvent
    extra = 0
    can_delete = False
    fields = ("created_at", "event", "external_status", "receipt", "error")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "key", "kind", "target", "status", "attempts", "max_attempts", "external_id", "external_status", "updated_at")
    list_filter = ("status", "kind", "retryable", "retention_class")
    search_fields = ("key", "target", "external_id", "mission__title")
    list_select_related = ("mission",)
    raw_id_fields = ("mission", "run")
    inlines = (OperationEventInline,)


@admin.register(OperationEvent)
class OperationEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "operation", "event", "external_status", "created_at", "expires_at")
    list_filter = ("event", "retention_class", "created_at")
    search_fields = ("operation__key", "external_status")
    list_select_related = ("operation",)
    raw_id_fields = ("operation",)


@admin.register(SnapshotRequest)
class SnapshotRequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "mission", "status", "requested_at", "not_before", "claimed_at", "attempts", "completed_at", "outcome")
    list_filter = ("status", "outcome")
    search_fields = ("mission__title",)
    list_select_related = ("mission",)
    raw_id_fields = ("mission", "checkpoint")


@admin.register(PurgeLog)
class PurgeLogAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_at", "trigger", "actor", "dry_run", "as_of", "counts_summary", "finished_at", "error")
    list_filter = ("dry_run", "trigger", "created_at")
    search_fields = ("actor", "error")
    date_hierarchy = "created_at"

    @admin.display(description="deleted")
    def counts_summary(self, obj: PurgeLog) -> str:
        return ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in obj.counts.items()) or "nothing"
