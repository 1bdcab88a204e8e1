#!/usr/bin/env python
"""Django's command-line utility for the shop: ``python manage.py help`` lists the commands."""

import os
import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shopsite.settings")
    execute_from_command_line(sys.argv)
