"""``POST /orders``: the order row, its confirmation job and its event, in one transaction.

The view writes the ``Order`` through the ORM and, in the same
``transaction.atomic()`` block, enqueues the confirmation job and publishes
the ``placed`` event through ``store.adopt_tx(connection)``: alkstore writes
them on Django's own connection, in Django's transaction. When the block
commits, all three exist; when anything inside it raises (here: the pretend
payment provider declining), none does — no job for a missing order, no
order without its job.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation

from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from .models import Order
from .store import CONFIRMATIONS, ORDERS_STREAM, get_store


class PaymentDeclined(Exception):
    """The payment provider refused the order: it must leave no trace."""


def charge(order: Order) -> None:
    """Charge the customer (pretend): a negative total is declined.

    It runs last inside the transaction, after the job and the event are
    written, as a real payment call would: its refusal rolls back all of them.
    """
    if order.total < 0:
        raise PaymentDeclined(f"a charge of {order.total} for {order.customer} was declined")


def _order_fields(body: bytes) -> tuple[str, Decimal] | str:
    """(customer, total) from the JSON body, or what is wrong with it."""
    try:
        data = json.loads(body)
        customer, total = data["customer"], Decimal(str(data["total"]))
    except (ValueError, TypeError, KeyError, InvalidOperation):
        return 'the body must be JSON: {"customer": "...", "total": 12.50}'
    if not isinstance(customer, str) or not customer or not total.is_finite():
        return "customer must be a non-empty string and total a number"
    return customer, total


@csrf_exempt  # a JSON API for other programs, not a form in a browser session
@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    """Place an order: 201 with the order and its job's id; 402 when the charge is declined."""
    fields = _order_fields(request.body)
    if isinstance(fields, str):
        return JsonResponse({"error": fields}, status=400)
    customer, total = fields
    store = get_store()  # before atomic(): opening the store may write (see get_store)
    try:
        with transaction.atomic():
            order = Order.objects.create(customer=customer, total=total)
            tx = store.adopt_tx(connection)  # Django's connection, Django's transaction
            job_id = tx.enqueue_tx(CONFIRMATIONS, None, {"order_id": order.pk})
            tx.publish_tx(ORDERS_STREAM, {"event": "placed", "order_id": order.pk})
            charge(order)  # raising here rolls back the order, the job and the event
    except PaymentDeclined as exc:
        return JsonResponse({"error": str(exc)}, status=402)
    return JsonResponse({"order": order.as_json(), "job": job_id}, status=201)


@require_GET
def order_detail(request: HttpRequest, order_id: int) -> JsonResponse:
    """Read an order: ``confirmed`` turns true once the worker has handled its job."""
    try:
        order = Order.objects.get(pk=order_id)
    except Order.DoesNotExist:
        return JsonResponse({"error": f"no order {order_id}"}, status=404)
    return JsonResponse({"order": order.as_json()})
