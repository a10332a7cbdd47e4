import gc
import threading

from indexes.bulk import no_gc


def test_no_gc_nests_and_restores_the_collector_as_it_found_it():
    assert gc.isenabled()
    with no_gc():
        assert not gc.isenabled()
        with no_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an outer holder is still inside
    assert gc.isenabled()
    gc.disable()
    try:
        with no_gc():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def test_no_gc_is_shared_by_threads():
    inside, leave = threading.Event(), threading.Event()

    def hold():
        with no_gc():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    inside.wait(10)
    with no_gc():
        pass
    assert not gc.isenabled()  # the other thread still holds it
    leave.set()
    t.join()
    assert gc.isenabled()
