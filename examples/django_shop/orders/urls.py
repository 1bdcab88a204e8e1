"""``POST /orders`` places an order, ``GET /orders/<id>`` reads one."""

from django.urls import path

from . import views

app_name = "orders"
urlpatterns = [
    path("orders", views.place_order, name="place"),
    path("orders/<int:order_id>", views.order_detail, name="detail"),
]
