from django.urls import path

from notifications import views

urlpatterns = [
    path("settings/notifications/", views.notifications_page, name="notifications"),
    path("settings/notifications/preferences/", views.preferences_save, name="notification-preferences"),
    path("settings/notifications/webhooks/", views.webhook_add, name="webhook-add"),
    path("settings/notifications/webhooks/<int:pk>/test/", views.webhook_send_test, name="webhook-test"),
    path("settings/notifications/webhooks/<int:pk>/remove/", views.webhook_remove, name="webhook-remove"),
    path("settings/notifications/unsubscribe/<str:token>/", views.unsubscribe, name="notification-unsubscribe"),
]
