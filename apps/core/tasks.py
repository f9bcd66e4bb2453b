from celery import shared_task


@shared_task(name="core.ping")
def ping(value: str) -> dict[str, str]:
    """Round-trip check for the broker and a worker: echoes what it was given."""
    return {"pong": value}
