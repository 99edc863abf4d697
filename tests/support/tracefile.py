"""A test span exporter that appends finished spans to a file as JSON lines, so a test can
read the spans of worker subprocesses (every pool process appends to the same file)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


def span_record(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    return {
        "name": span.name,
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
        "parent_id": None if span.parent is None else format(span.parent.span_id, "016x"),
        "links": [format(link.context.span_id, "016x") for link in span.links],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "start": span.start_time,
    }


class FileExporter(SpanExporter):  # type: ignore[misc]
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(s)) + "\n" for s in spans)
        with self.path.open("a") as out:  # one small append per span batch: whole lines
            out.write(lines)
        return SpanExportResult.SUCCESS


def install_file_exporter(path: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(path)))
    trace.set_tracer_provider(provider)


def read_spans(path: str) -> list[dict[str, Any]]:
    file = Path(path)
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
