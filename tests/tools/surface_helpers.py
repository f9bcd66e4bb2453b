from tests.tools.factories import STORE_SPEC

STORE_TOOLS = ["product_lookup", "order_status", "stock_adjust", "order_refund", "customer_note"]


def store_spec_with(old: str, new: str) -> bytes:
    """The demo store spec with one piece of text replaced (it must be there)."""
    text = STORE_SPEC.decode()
    assert old in text
    return text.replace(old, new, 1).encode()
