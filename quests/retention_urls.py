"""Pages about keeping and forgetting state (retention issue): /memory/, /account/export/, /staff/retention/."""

urlpatterns: list = []
