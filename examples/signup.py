"""The quickstart's "your own first workflow": two emails three days apart, on Redis (or the
broker ``CELERY_BROKER_URL`` names) and the store ``CELERY_DURABLE_DATABASE_URL`` names
(a SQLite file in the working directory without it).

Save it as ``signup.py``, then, from its directory::

    celery -A signup durable migrate
    celery -A signup worker --loglevel=INFO
    python -c "import signup; print(signup.onboarding.delay('ada@example.com').id)"
"""

from __future__ import annotations

# --8<-- [start:signup]
import os

from celery import Celery

import celery_durable as cd
from celery_durable import Durable

app = Celery("signup", broker=os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0"))
durable = Durable(app)  # the store: celery_durable.sqlite3 in the working directory


@durable.step
def send_email(address: str, template: str) -> str:
    print(f"sending {template} to {address}")  # your mail API call
    return f"{template}-sent"


@durable.workflow
def onboarding(address: str) -> list:
    sent = [send_email(address, "welcome")]
    cd.sleep(3 * 24 * 3600)  # a durable timer: the run waits in the store, not in a worker
    sent.append(send_email(address, "tips"))
    return sent


# --8<-- [end:signup]
