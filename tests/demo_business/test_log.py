"""The request log, over HTTP as a hub test would read it, and under concurrent re-sends."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from django.db import connection
from django.test import Client

from apps.demo_business import views
from apps.demo_business.models import RequestLogEntry, StockAdjustment, StockLevel

from .conftest import ShopClient

ADJUST = "/demo-business/stock-adjustments"
RECEIVE = {"sku": "SKU-1005", "direction": "increase", "quantity": 7, "reason": "Goods received"}


@pytest.mark.django_db
def test_the_log_lists_each_request_and_its_outcome(shop):
    shop.get("/demo-business/orders/SO-240001")
    shop.post(ADJUST, RECEIVE, key="adj-9", job_id="job-9")
    shop.post(ADJUST, RECEIVE, key="adj-9", job_id="job-9")
    shop.get("/demo-business/orders/SO-240001", secret="wrong")
    entries = shop.get("/demo-business/_log").json()["entries"]
    assert [(entry["operation"], entry["status"], entry["outcome"], entry["error"]) for entry in entries] == [
        ("get_order_status", 200, "read", ""),
        ("adjust_stock", 200, "applied", ""),
        ("adjust_stock", 200, "replayed", ""),
        ("get_order_status", 401, "rejected", "invalid_signature"),
    ]
    assert (entries[1]["job_id"], entries[1]["idempotency_key"], entries[1]["path"]) == ("job-9", "adj-9", ADJUST)


@pytest.mark.django_db
def test_the_log_filters_by_operation_and_position(shop):
    shop.get("/demo-business/orders/SO-240001")
    shop.post(ADJUST, RECEIVE, key="adj-1")
    shop.post(ADJUST, RECEIVE, key="adj-2")
    entries = shop.get("/demo-business/_log?operation=adjust_stock").json()["entries"]
    later = shop.get(f"/demo-business/_log?operation=adjust_stock&after={entries[0]['id']}").json()["entries"]
    assert [entry["idempotency_key"] for entry in entries] == ["adj-1", "adj-2"]
    assert [entry["idempotency_key"] for entry in later] == ["adj-2"]


@pytest.mark.django_db
def test_the_log_is_not_served_unsigned(shop, client):
    shop.get("/demo-business/orders/SO-240001", on_behalf_of="王芳")
    response = client.get("/demo-business/_log")
    assert (response.status_code, response.json()["error"]) == (401, "invalid_signature")
    assert RequestLogEntry.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_resends_of_one_write_take_effect_once(mounted):
    answers: list[tuple[int, dict]] = []
    barrier = threading.Barrier(8)

    def send():
        try:
            shop = ShopClient(Client())
            barrier.wait()
            response = shop.post(ADJUST, RECEIVE, key="adj-concurrent")
            answers.append((response.status_code, response.json()))
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 8
    assert {status for status, _ in answers} == {200}
    assert len({body["adjustment_id"] for _, body in answers}) == 1
    assert StockAdjustment.objects.count() == 1
    assert StockLevel.objects.get(sku="SKU-1005").on_hand == 82
    assert sorted(RequestLogEntry.objects.values_list("outcome", flat=True)) == ["applied"] + ["replayed"] * 7


def most_in_flight(entries: list[RequestLogEntry]) -> int:
    events = sorted([(entry.received_at, 1) for entry in entries] + [(entry.created_at, -1) for entry in entries])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.django_db(transaction=True)
def test_the_log_shows_how_many_calls_were_in_flight_at_once(mounted, settings, monkeypatch):
    settings.DEMO_BUSINESS_RESPONSE_DELAY_MS = 300
    barrier = threading.Barrier(3)
    # Each call, after its delay, waits until all three have been received: a thread scheduled
    # 300 ms late (a loaded machine) arrived after another had answered, and two were in flight.
    in_flight = threading.Barrier(3)

    def delay_then_meet(seconds: float) -> None:
        time.sleep(seconds)
        in_flight.wait(timeout=60)

    monkeypatch.setattr(views, "time", SimpleNamespace(time=time.time, sleep=delay_then_meet))

    def send(number: int):
        try:
            shop = ShopClient(Client())
            barrier.wait()
            shop.post("/demo-business/customers/C-1002/notes", {"note": f"call {number}"}, key=f"note-{number}")
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(number,)) for number in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = list(RequestLogEntry.objects.all())
    assert [entry.outcome for entry in entries] == ["applied"] * 3
    assert most_in_flight(entries) == 3


@pytest.mark.django_db
def test_one_call_at_a_time_is_never_more_than_one_in_flight(shop):
    shop.post("/demo-business/customers/C-1002/notes", {"note": "first"}, key="n-1")
    shop.post("/demo-business/customers/C-1002/notes", {"note": "second"}, key="n-2")
    entries = list(RequestLogEntry.objects.all())
    assert all(entry.received_at <= entry.created_at for entry in entries)
    assert most_in_flight(entries) == 1
