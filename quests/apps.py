from django.apps import AppConfig


class QuestsConfig(AppConfig):
    name = "quests"
    verbose_name = "Quests"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from quests import checks  # noqa: F401 - registers the deploy checks
        from quests.services import preferences

        user_logged_in.connect(preferences.remember_on_login, dispatch_uid="questlog-time-zone")
