"""Updates: a request to a running workflow that gets an answer (``handle.update``)."""
