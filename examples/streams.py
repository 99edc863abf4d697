"""Streams: a run's tokens and progress, read live from another process, on the embedded
default.

Run it (no server needed)::

    python examples/streams.py

A summary is written token by token by a step, as an LLM would; this driver reads the
tokens as they are written, stops halfway as if its browser went away, then comes back
with the last offset it saw and gets the rest: nothing lost, nothing twice.
"""

from __future__ import annotations

import time

from celery import Celery
from scratch import data_dir, file_broker, worker

import celery_durable as cd
from celery_durable import Durable

DATA = data_dir("STREAMS_DIR", driver=__name__ == "__main__")

app = Celery("streams", broker="filesystem://localhost/")
app.conf.broker_transport_options = file_broker(DATA)
durable = Durable(app, database_url=f"sqlite:///{DATA}/durable.sqlite3", poll_interval=0.2)


# --8<-- [start:workflow]
@durable.step
def generate(text: str) -> str:
    summary = []
    for word in text.split():  # a model's tokens, as they come
        time.sleep(0.05)
        cd.write_stream("tokens", word)  # readers see it now
        summary.append(word)
    return " ".join(summary)


@durable.workflow
def summarise(text: str) -> str:
    cd.write_stream("progress", {"stage": "generating"})
    summary = generate(text)
    cd.write_stream("progress", {"stage": "done", "words": len(summary.split())})
    return summary  # the run settles: its open streams are closed


# --8<-- [end:workflow]

TEXT = "durable streams keep every token a step writes in order with its offset"


# --8<-- [start:driver]
def demo() -> None:
    handle = summarise.delay(TEXT)
    seen = []
    for offset, word in handle.read_stream("tokens", timeout=60, with_offsets=True):
        print(f"token {offset}: {word}", flush=True)
        seen.append(offset)
        if len(seen) == 5:
            break  # the reader goes away (a closed tab, a dropped connection)
    # Back later, from the offset after the last one seen: nothing lost, nothing twice.
    rest = list(handle.read_stream("tokens", start=seen[-1] + 1, timeout=60))
    print(f"resumed at offset {seen[-1] + 1}: {' '.join(rest)}")
    print(f"progress: {list(handle.read_stream('progress'))}")
    print(f"result: {handle.get(timeout=60)}")


# --8<-- [end:driver]


def main() -> None:
    durable.migrate()
    with worker("streams", "STREAMS_DIR", DATA, "-c", "2", "--loglevel=WARNING"):
        demo()


if __name__ == "__main__":
    main()
