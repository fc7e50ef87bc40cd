from django.apps import AppConfig


class QuestsConfig(AppConfig):
    name = "quests"
    verbose_name = "Quests"
