"""An order: ``new`` when placed, ``paid`` once its checkout has charged it."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    quantity = models.PositiveIntegerField(default=1)
    status = models.CharField(max_length=20, default="new")
    receipt = models.CharField(max_length=100, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.pk,
            "item": self.item,
            "quantity": self.quantity,
            "status": self.status,
            "receipt": self.receipt,
        }
