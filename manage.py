#!/usr/bin/env python
import os
import sys

from config.deploy import secret_key_refusal

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # The settings would refuse too, but Django's command runner turns that into a traceback or
    # an "Unknown command"; one line says what to do.
    if refusal := secret_key_refusal(os.environ):
        sys.exit(refusal)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
