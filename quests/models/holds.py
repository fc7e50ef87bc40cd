"""Staff holds: what the retention purge must keep, whatever its expiry."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from quests.models.mission import Mission


class Hold(models.Model):
    """Staff hold: held state is never purged, whatever its expiry."""

    mission = models.ForeignKey(Mission, null=True, blank=True, on_delete=models.CASCADE, related_name="holds")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="holds")
    reason = models.TextField()
    placed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(mission__isnull=False) | Q(user__isnull=False), name="hold_names_mission_or_user")]
