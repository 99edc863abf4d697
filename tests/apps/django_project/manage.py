"""``python tests/apps/django_project/manage.py ...``, from the repository's root."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # The repository's root, not this folder (whose celery.py would shadow Celery).
    sys.path[0] = str(Path(__file__).resolve().parents[3])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.apps.django_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
