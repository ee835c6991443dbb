"""The progress thread: completes async ops in issue order and runs what was waiting on
them (a DDP hook's future, a Horovod handle's decompression). Ops finish in the order
they were issued, so waiting for the oldest first never waits longer than needed. The
wait itself runs in C with the GIL released: training threads keep running."""
import collections
import threading
import traceback


class Progress:
    def __init__(self):
        self._q = collections.deque()
        self._cv = threading.Condition()
        self._th = None

    def submit(self, handle, fn):
        """fn(error) runs on the progress thread once handle completes (error is None or
        the DdprtError)."""
        with self._cv:
            self._q.append((handle, fn))
            if self._th is None or not self._th.is_alive():
                self._th = threading.Thread(target=self._run, name="ddprt-progress", daemon=True)
                self._th.start()
            self._cv.notify()

    def pending(self):
        with self._cv:
            return len(self._q)

    def drain(self, timeout):
        """Waits until every submitted op has completed and its callback ran (each op is
        bounded by its deadline; timeout bounds the whole). True when drained."""
        import time
        end = time.monotonic() + timeout
        with self._cv:
            while self._q and self._th is not None and self._th.is_alive() and time.monotonic() < end:
                self._cv.wait(0.05)
            return not self._q

    def _run(self):
        while True:
            with self._cv:
                while not self._q:
                    self._cv.wait(1.0)
                handle, fn = self._q[0]
            err = None
            try:
                handle.wait()
            except Exception as e:  # DdprtError: the callback hands it on
                err = e
            try:
                fn(err)
            except Exception:
                traceback.print_exc()
            with self._cv:
                self._q.popleft()
                self._cv.notify_all()


progress = Progress()
