"""The bridge's own check of a stdio line (bailinghub_mcp.envelope.line_error)."""

from bailinghub_mcp import envelope


def test_a_line_its_utf8_check_cannot_write_again_is_answered_not_raised(monkeypatch):
    # json.dumps needs a level more than json.loads: on Python 3.11 a line nested ~994 deep raised
    # RecursionError out of the UTF-8 check, out of the stdin reader, and the server died.
    def too_deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(envelope.json, "dumps", too_deep)
    error = envelope.line_error("[[1]]")
    assert error is not None and error["error"]["code"] == -32600  # the envelope's own answer: a batch
