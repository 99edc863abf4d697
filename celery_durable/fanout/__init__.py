"""Fan-out and fan-in: ``cd.map``, batches, steps started on other queues, ``cd.gather``
and children, from their item rows to the item and batch tasks that run them."""
