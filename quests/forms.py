"""Forms for the pages: they only parse what a person typed. Whether an action is allowed is for
the services to say (their ServiceError message is shown as the form error)."""

import json
from typing import Any

from django import forms

from quests.models import Mission


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject"), ("edit", "Edit and approve")])
    note = forms.CharField(required=False, max_length=5000)
    payload = forms.CharField(required=False, max_length=1_000_000)
    # The decision stands for every later call of this tool in this quest (until revoked).
    always = forms.BooleanField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("decision") == "edit":
            text = (data.get("payload") or "").strip()
            try:
                data["payload_json"] = json.loads(text)
            except json.JSONDecodeError as exc:
                raise forms.ValidationError(
                    f"The payload is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}). Nothing was changed."
                )
            if not isinstance(data["payload_json"], dict):
                raise forms.ValidationError("The payload must be a JSON object, like {\"key\": \"value\"}. Nothing was changed.")
        return data


class ReviewForm(forms.Form):
    action = forms.ChoiceField(choices=[("approve", "Approve"), ("correct", "Correct")])
    note = forms.CharField(required=False, max_length=5000)


class ConstraintForm(forms.Form):
    text = forms.CharField(max_length=2000, error_messages={"required": "Write the constraint first."})

    def clean_text(self) -> str:
        text = self.cleaned_data["text"].strip()
        if not text:
            raise forms.ValidationError("Write the constraint first.")
        return text


class RestoreForm(forms.Form):
    checkpoint = forms.IntegerField(min_value=1, error_messages={"required": "Choose a checkpoint to restore to."})
    confirmed = forms.BooleanField(required=False)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, error_messages={"required": "Give the token a name, so you know which agent uses it."})
    # Checked against `missions` one id at a time: the page offers a searched few, never them all.
    mission = forms.ModelChoiceField(
        queryset=Mission.objects.none(), required=False,
        error_messages={"invalid_choice": "That mission is not one of your open missions. Search again, or choose All my missions."},
    )

    def __init__(self, *args: Any, missions=None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if missions is not None:
            self.fields["mission"].queryset = missions


def first_error(form: forms.Form) -> str:
    """One sentence for the person: the first problem the form found."""
    for errors in form.errors.values():
        for error in errors:
            return str(error)
    return "Something in the form is not right."
