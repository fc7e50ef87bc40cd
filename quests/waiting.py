"""What waits for a person: approvals and milestones, kept beside their mission's owner (abstract:
quests.models builds Approval and Milestone on it)."""

from django.conf import settings
from django.db import models


class WaitingQuerySet(models.QuerySet):
    def bulk_create(self, objs, *args, **kwargs):
        objs = list(objs)
        for obj in objs:
            obj.copy_owner()
        return super().bulk_create(objs, *args, **kwargs)


class WaitsForAPerson(models.Model):
    """What waits for a person (approvals, milestones) waits for its mission's owner. The owner is
    copied onto the row, once, when it is written (a mission never changes hands): the inbox and
    its count in every page's navigation then read one index of what waits for this person, not a
    join through every mission she has (10,000 missions made it the slowest part of each page)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", editable=False)

    class Meta:
        abstract = True

    def copy_owner(self) -> None:
        if self.owner_id is None:
            self.owner_id = self.mission.owner_id

    def save(self, *args, **kwargs):
        self.copy_owner()
        super().save(*args, **kwargs)
