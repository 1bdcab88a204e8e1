"""What the worker does with each confirmation job: confirm the order through the ORM."""

from __future__ import annotations

from django.db import close_old_connections, connection, transaction

import alkstore

from .models import Order
from .store import ORDERS_STREAM, get_store


def confirm_order(job: alkstore.Job) -> None:
    """Mark the job's order confirmed, and publish ``confirmed`` in the same transaction.

    A real shop would send the confirmation mail here. Returning acks the
    job; raising retries it on the queue's backoff curve. Delivery is at
    least once, so a repeated job finds the order confirmed and does nothing.

    The worker runs handlers on threads of its own, and Django opens one
    connection per thread: closing it around each job, as Django does around
    each request, keeps none open past ``CONN_MAX_AGE`` (nor past the worker).
    """
    close_old_connections()
    try:
        order_id = job.payload["order_id"]
        store = get_store()
        with transaction.atomic():
            confirmed = Order.objects.filter(pk=order_id, confirmed=False).update(confirmed=True)
            if confirmed:
                store.adopt_tx(connection).publish_tx(
                    ORDERS_STREAM, {"event": "confirmed", "order_id": order_id}
                )
    finally:
        close_old_connections()
