def test_happy(basic_app, shared_worker, key):
    h = basic_app.five_steps.delay(key)
    assert h.get(timeout=30) == [10, 20, 30, 40, 50]
