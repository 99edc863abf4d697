"""Every SQL statement of the store, by area, each named for the operation that runs it;
``build`` holds the building blocks (parameters, the database clock, the fencing guard).
"""
