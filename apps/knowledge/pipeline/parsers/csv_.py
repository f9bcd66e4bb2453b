"""CSV: each row becomes one record, `header: value; header: value`, under the header's names."""

from __future__ import annotations

import csv
import io

from apps.knowledge.pipeline.parsers.base import Block, ConversionFailed, ParsedDocument, Section, TextBudget
from apps.knowledge.pipeline.parsers.text import text_decode

_DELIMITERS = ",\t;|"


def _rows(data: bytes) -> list[list[str]]:
    text = text_decode(data)
    try:
        dialect = csv.Sniffer().sniff(text[:8192], delimiters=_DELIMITERS)
        delimiter = dialect.delimiter
    except csv.Error:
        delimiter = ","
    try:
        return [row for row in csv.reader(io.StringIO(text), delimiter=delimiter, strict=True) if any(
            cell.strip() for cell in row)]
    except csv.Error as exc:
        raise ConversionFailed(f"The file is not valid CSV: {exc}.") from exc


def parse(data: bytes, budget: TextBudget) -> ParsedDocument:
    rows = _rows(data)
    if not rows:
        return ParsedDocument(file_type="csv", sections=())
    header = [name.strip() for name in rows[0]]
    blocks = []
    for row in rows[1:]:
        fields = []
        for index, cell in enumerate(row):
            value = cell.strip()
            if not value:
                continue
            name = header[index] if index < len(header) and header[index] else f"column_{index + 1}"
            fields.append(f"{name}: {value}")
        if fields:
            # Each value repeats its column's name: long names over many rows multiply the text.
            record = "; ".join(fields)
            budget.spend(len(record))
            blocks.append(Block(text=record, kind="record"))
    return ParsedDocument(file_type="csv", sections=(Section(headings=(), blocks=tuple(blocks)),) if blocks else ())


def check(data: bytes) -> None:
    _rows(data)
