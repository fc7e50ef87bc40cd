"""Forms for the pages: they only parse what a person typed. Whether an action is allowed is for
the services to say (their ServiceError message is shown as the form error)."""

from typing import Any, cast

from django import forms

from quests import limits, storable
from quests.models import Mission


def json_object(text: str, *, subject: str) -> dict[str, Any]:
    """The JSON object a person typed, held to the rule of every JSON value a client sends
    (quests.storable), or a form error saying what is wrong; nothing is changed either way."""
    try:
        value = storable.json_value(text.strip(), subject=subject)
    except storable.Unstorable as exc:
        raise forms.ValidationError(f"{exc.message} Nothing was changed.", code="unstorable") from None
    if not isinstance(value, dict):
        raise forms.ValidationError(f'{subject} must be a JSON object, like {{"key": "value"}}. Nothing was changed.')
    return value


def limited_text(limit: int, what: str, **kwargs: Any) -> forms.CharField:
    """A text field held to its limit from quests/limits.py, refused in the services' own words."""
    messages = {"max_length": f"{what} can be at most {limit:,} characters; this one has %(show_value)s. Nothing was saved."}
    return forms.CharField(max_length=limit, error_messages={**messages, **kwargs.pop("error_messages", {})}, **kwargs)


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject"), ("edit", "Edit and approve")])
    note = limited_text(limits.DECISION_NOTE, "A note", required=False)
    payload = forms.CharField(required=False, max_length=1_000_000)
    # The decision stands for every later call of this tool in this quest (until revoked).
    always = forms.BooleanField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        assert data is not None  # Form.clean answers cleaned_data
        # The page's promise (its hint): a rejection says why, so the agent knows what to do instead.
        if data.get("decision") == "reject" and not (data.get("note") or "").strip():
            raise forms.ValidationError("Say why you reject it in the note: the agent reads it to know what to do instead. Nothing was changed.")
        if data.get("decision") == "edit":
            data["payload_json"] = json_object(data.get("payload") or "", subject="The payload")
        return data


class ReviewForm(forms.Form):
    action = forms.ChoiceField(choices=[("approve", "Approve"), ("correct", "Correct")])
    note = limited_text(limits.REVIEW_NOTE, "A constraint", required=False)


class ConstraintForm(forms.Form):
    text = limited_text(limits.CONSTRAINT_TEXT, "A constraint", error_messages={"required": "Write the constraint first."})

    def clean_text(self) -> str:
        text = self.cleaned_data["text"].strip()
        if not text:
            raise forms.ValidationError("Write the constraint first.")
        return text


class RestoreForm(forms.Form):
    checkpoint = forms.IntegerField(min_value=1, error_messages={"required": "Choose a checkpoint to restore to."})
    confirmed = forms.BooleanField(required=False)


class TokenForm(forms.Form):
    name = forms.CharField(max_length=limits.TOKEN_NAME, error_messages={"required": "Give the token a name, so you know which agent uses it."})
    # Checked against `missions` one id at a time: the page offers a searched few, never them all.
    mission = forms.ModelChoiceField(
        queryset=Mission.objects.none(),
        required=False,
        error_messages={"invalid_choice": "That quest is not one of your open quests. Search again, or choose All my quests."},
    )

    def __init__(self, *args: Any, missions=None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if missions is not None:
            cast(forms.ModelChoiceField, self.fields["mission"]).queryset = missions


def first_error(form: forms.Form) -> str:
    """One sentence for the person: the first problem the form found."""
    for errors in form.errors.values():
        for error in errors:
            return str(error)
    return "Something in the form is not right."
