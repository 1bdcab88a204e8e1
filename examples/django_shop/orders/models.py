"""An order: placed by the web view, confirmed by the worker."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    customer = models.CharField(max_length=200)
    total = models.DecimalField(max_digits=10, decimal_places=2)
    confirmed = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("created", "id")

    def __str__(self) -> str:
        state = "confirmed" if self.confirmed else "placed"
        return f"order {self.pk} of {self.customer} for {self.total} ({state})"

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.pk,
            "customer": self.customer,
            "total": str(self.total),
            "confirmed": self.confirmed,
            "created": self.created.isoformat(),
        }
