"""The body API: what workflow code calls while it runs, and the replay that makes a call
return its recorded result. ``context`` (the run being executed), ``step`` (record once,
replay ever after), ``suspend`` (sleep, wait for a signal), ``state``, ``fanout`` (parallel
steps, ``cd.map``, children), ``fanin`` (gather, futures), ``patching``, ``compensation`` and
``continue_as_new``. It may import ``store``, ``core`` and ``errors``; never the engine.
"""
