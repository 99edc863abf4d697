"""Runs as callers hold them: ``task`` (the workflow's Celery task: start, then delivery
through the engine), ``starting`` (a start's countdown and its publish after the caller's
commit), ``handle`` (look at, wait for and steer one run) and ``admin`` (list, show,
resume, fork, gc). It may import the engine and everything below it.
"""
