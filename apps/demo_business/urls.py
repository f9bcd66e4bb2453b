from django.urls import path, re_path

from . import views

app_name = "demo_business"

urlpatterns = [
    path("openapi.json", views.openapi, name="openapi"),
    path("_log", views.log, name="log"),
    path("products", views.lookup_product, name="lookup_product"),
    path("orders/<str:order_id>", views.get_order_status, name="get_order_status"),
    path("stock-adjustments", views.adjust_stock, name="adjust_stock"),
    path("refunds", views.issue_refund, name="issue_refund"),
    path("customers/<str:customer_id>/notes", views.add_customer_note, name="add_customer_note"),
    re_path(r"^(?P<unmatched>.*)$", views.not_found),
]
