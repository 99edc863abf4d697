"""Runs as callers hold them: ``task`` (the workflow's Celery task: start, then delivery
through the engine), ``handle`` (look at, wait for and steer one run) and ``admin`` (list,
show, resume, fork, gc). It may import the engine and everything below it.
"""
