from django.apps import AppConfig


class QuestsConfig(AppConfig):
    name = "quests"
    verbose_name = "Quests"

    def ready(self) -> None:
        from quests import checks  # noqa: F401 - registers the deploy checks
