"""Forms of the retention pages: they check what a person typed; the services hold the rules."""

from django import forms

from checkpoints.models import RetentionPolicy
from quests.retention.services.policy import POLICY_FIELDS


class RetentionPolicyForm(forms.ModelForm):
    class Meta:
        model = RetentionPolicy
        fields = POLICY_FIELDS
        labels = {
            "grace_days": "Grace period after a quest ends (days)",
            "approved_max_days": "Kept history, when its owner chose to keep it (days)",
            "memory_max_days": "Memory items live for (days, renewable by the person)",
            "snapshot_prune_days": "Prune background snapshots older than (days)",
            "snapshot_keep_newest": "Background snapshots always kept per quest",
            "purge_batch_size": "Purge batch size (quests or memory items per transaction)",
        }
        help_texts = {
            "grace_days": "Working state of a completed or cancelled quest is deleted this long after it ended.",
            "purge_batch_size": "Each batch is one transaction: an interrupted purge never leaves anything half-deleted.",
        }

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The admin's read-only view of an older version builds this form without its fields.
        batch = self.fields.get("purge_batch_size")
        if batch is not None:
            batch.widget.attrs["min"] = 1
            batch.validators.append(_at_least_one)


class StaffPolicyForm(RetentionPolicyForm):
    """The staff page's policy form: a grace period of 0 days is saved only once confirmed."""

    # Asked for only when the grace period sent is 0 (the form is shown again with it).
    zero_grace_confirmed = forms.BooleanField(required=False, label="Yes, delete a quest's working state as soon as the quest ends")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if str(self.data.get("grace_days", "")).strip() != "0":
            del self.fields["zero_grace_confirmed"]

    def clean(self) -> dict:
        data = super().clean()
        assert data is not None  # Form.clean answers cleaned_data
        if data.get("grace_days") == 0 and not data.get("zero_grace_confirmed"):
            self.add_error(
                "grace_days",
                "A grace period of 0 days deletes a quest's working state the moment it ends, with no time to "
                "change one's mind. Tick the confirmation below to save it.",
            )
        return data


def _at_least_one(value: int) -> None:
    if value is not None and value < 1:
        raise forms.ValidationError("A batch holds at least one item.")


class HoldForm(forms.Form):
    mission_id = forms.IntegerField(required=False, min_value=1, label="Quest id")
    username = forms.CharField(required=False, max_length=150, label="or username")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=2000, label="Reason")

    def clean(self) -> dict:
        data = super().clean()
        assert data is not None  # Form.clean answers cleaned_data
        has_mission = data.get("mission_id") is not None
        has_user = bool((data.get("username") or "").strip())
        if has_mission == has_user and not self.errors.get("mission_id"):
            raise forms.ValidationError("Name either a quest id or a username (one of them).")
        return data


class PurgeForm(forms.Form):
    dry_run = forms.BooleanField(required=False, initial=True, label="Dry run (count what would go, delete nothing)")


class MemoryDecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Remember"), ("decline", "Don't remember")])
