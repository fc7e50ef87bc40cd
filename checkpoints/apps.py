from django.apps import AppConfig


class CheckpointsConfig(AppConfig):
    name = "checkpoints"
    verbose_name = "Save state storage"
