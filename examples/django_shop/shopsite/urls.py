"""The shop's URLs: everything is the orders app's."""

from django.urls import include, path

urlpatterns = [path("", include("orders.urls"))]
