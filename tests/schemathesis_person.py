"""A schemathesis hook module (SCHEMATHESIS_HOOKS) for tests/test_openapi_schemathesis.py: every
request goes as a signed-in person, with the session cookie the document declares
(PersonSessionAuth), the CSRF cookie and the X-CSRFToken header an unsafe method needs. Given as
schemathesis's own auth, not as raw headers, so that its authentication probes can take the
session away (and must then be refused) while the CSRF pair stays."""

import os

import schemathesis


@schemathesis.auth()
class PersonSession:
    def get(self, case, context):
        return {"sessionid": os.environ["QUESTLOG_ST_SESSION"], "csrftoken": os.environ["QUESTLOG_ST_CSRF"]}

    def set(self, case, data, context):
        case.cookies = {**(case.cookies or {}), **data}
        case.headers = {**(case.headers or {}), "X-CSRFToken": data["csrftoken"]}
