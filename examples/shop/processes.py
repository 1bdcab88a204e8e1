"""The shop's background processes, each started as ``python processes.py ROLE DSN``.

- ``worker``: sends confirmation emails (4 at a time), delivers the webhook
  outbox, makes the scheduled reports, and runs the scheduler — every worker
  process runs one, and the store elects a single leader among them.
- ``projector``: keeps the ``shop_sales`` projection from the ``orders``
  stream, saving its offset in the same transaction as each batch's writes.

Both stop gracefully on SIGTERM and print what they did as one JSON line.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading

from orders import (
    EMAIL_QUEUE,
    EMAILS,
    ORDERS_STREAM,
    PROJECTION,
    REPORTS,
    WEBHOOKS,
    deliver_webhook,
    make_report,
    project_sale,
    send_confirmation,
)

import alkstore
from alkstore import Consumer, Worker


def work(store: alkstore.Store) -> dict[str, object]:
    workers = {
        "emails": Worker(
            store, store.queue(EMAILS, EMAIL_QUEUE), functools.partial(send_confirmation, store),
            concurrency=4,
        ),
        "webhooks": Worker(
            store, store.outbox(WEBHOOKS), functools.partial(deliver_webhook, store), concurrency=2
        ),
        "reports": Worker(store, REPORTS, functools.partial(make_report, store)),
    }  # fmt: skip
    with alkstore.stop_on_signals() as stop:
        threads = [threading.Thread(target=w.run, args=(stop,)) for w in workers.values()]
        threads.append(threading.Thread(target=store.run_schedules, args=(stop,)))
        for thread in threads:
            thread.start()
        print("ready", flush=True)
        stop.wait()
        for thread in threads:
            thread.join()
    done: dict[str, object] = {name: worker.stats().succeeded for name, worker in workers.items()}
    done["failed"] = sum(worker.stats().failed for worker in workers.values())
    return done


def project(store: alkstore.Store) -> dict[str, object]:
    consumer = Consumer(store, ORDERS_STREAM, PROJECTION, project_sale, transactional=True)
    print("ready", flush=True)
    consumer.run_forever()
    return {"events": consumer.stats().succeeded}


ROLES = {"worker": work, "projector": project}

if __name__ == "__main__":
    # The demo's failed sends are planned; a real app keeps these warnings.
    logging.getLogger("alkstore.worker").setLevel(logging.ERROR)
    role, dsn = sys.argv[1], sys.argv[2]
    with alkstore.open(dsn) as opened:
        done = ROLES[role](opened)
    print(json.dumps({"role": role, "pid": os.getpid(), **done}), flush=True)
