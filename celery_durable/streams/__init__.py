"""Streams: values a run writes with ``write_stream`` (in its body or in a step) and
readers follow by offset from any process (``handle.read_stream``, ``durable tail``, the
dashboard's Server-Sent Events), from their statements to the readers' waits."""
