"""Read-only admin: staff see what was sent, what fails and which endpoint is disabled, and change
nothing (a delivery is a record of what happened)."""

from django.contrib import admin

from notifications.models import Delivery, Notification, NotificationPreference, WebhookEndpoint


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(ReadOnly):
    list_display = ("message_id", "channel", "endpoint", "status", "attempts", "response_status", "next_attempt_at", "delivered_at")
    list_filter = ("status", "channel")
    search_fields = ("message_id", "endpoint__url", "last_error")
    list_select_related = ("endpoint",)


@admin.register(Notification)
class NotificationAdmin(ReadOnly):
    list_display = ("event_id", "kind", "owner", "mission", "created_at", "in_digest")
    list_filter = ("kind",)
    list_select_related = ("owner", "mission")


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnly):
    list_display = ("url", "owner", "format", "created_at", "disabled_at")
    list_filter = ("format",)
    exclude = ("secret",)  # the owner's to keep; staff need not read it
    list_select_related = ("owner",)


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(ReadOnly):
    list_display = ("owner", "kind", "mode")
    list_filter = ("kind", "mode")
    list_select_related = ("owner",)
