# As Django's tests/runtests.py: settings, django.setup(), the configured runner at --verbosity 2.
import os
import sys

import django
from django.conf import settings
from django.test.utils import get_runner

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
django.setup()
runner = get_runner(settings)(verbosity=2, interactive=False, parallel=1)
failures = runner.run_tests(["app"])
sys.exit(bool(failures))
