"""Threads and processes (wgml.h, "Threads" and "fork()"; wgml/_context.py): two threads on the
default context get right values and never crash (the library serialises calls on a context);
a child made by fork gets ContextError at once rather than hanging; the interpreter exits
cleanly while a daemon thread is inside a wgml call."""
import multiprocessing
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import wgml


def test_two_threads_on_the_default_context():
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(40):
                a = rng.uniform(-2, 2, size=(23, 17)).astype(np.float32)
                b = rng.uniform(-2, 2, size=(17, 9)).astype(np.float32)
                got = ((wgml.tensor(a) @ wgml.tensor(b)) * 0.5 + float(seed)).numpy()
                want = (a.astype(np.float64) @ b.astype(np.float64)) * 0.5 + seed
                if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                    failures.append("thread %d: max error %g" % (seed, np.abs(got - want).max()))
                    return
        except Exception as e:  # noqa: BLE001 - reported below, with the thread
            failures.append("thread %d: %r" % (seed, e))

    threads = [threading.Thread(target=work, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures


def _child_uses_parent_context(queue):
    import wgml as w
    try:
        x = w.tensor([1.0, 2.0, 3.0])
        queue.put(("no error", x.numpy().tolist()))
    except w.ContextError as e:
        queue.put(("ContextError", str(e)))
    except Exception as e:  # noqa: BLE001
        queue.put((type(e).__name__, str(e)))


def test_fork_child_gets_a_clear_error():
    # the parent uses the default context first: its device is then open
    assert wgml.tensor([1.0, 2.0]).sum().item() == 3.0
    mp = multiprocessing.get_context("fork")
    queue = mp.Queue()
    child = mp.Process(target=_child_uses_parent_context, args=(queue,))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung on its first op")
    kind, message = queue.get(timeout=5)
    assert kind == "ContextError", (kind, message)
    assert "fork" in message
    # the parent's context still works
    assert wgml.tensor([4.0, 5.0]).sum().item() == 9.0


_DAEMON_SCRIPT = r"""
import threading, time
import numpy as np
import wgml
x = wgml.tensor(np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64))
inside = threading.Event()
def loop():
    while True:
        inside.set()
        (x @ x).sum().item()
threading.Thread(target=loop, daemon=True).start()
inside.wait()
time.sleep(float(__import__("sys").argv[1]))
"""


def test_exit_while_a_daemon_thread_is_inside_a_call():
    # the main thread leaves while the daemon thread evaluates (varying where it is); every
    # exit must be clean: status 0, nothing on stderr
    for i in range(4):
        r = subprocess.run([sys.executable, "-c", _DAEMON_SCRIPT, str(0.003 * i)], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ))
        assert r.returncode == 0 and not r.stderr.strip(), (i, r.returncode, r.stderr[-2000:])
