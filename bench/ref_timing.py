"""The timing of the PyTorch references (ref_models.py, ref_gpt.py): two warm-up steps,
then steps timed together; the process's peak RSS."""
import resource
import time


def timed(step, steps):
    """(seconds for `steps` calls of step() after 2 untimed ones, peak RSS in MiB)"""
    for _ in range(2):
        step()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    dt = time.perf_counter() - t
    return dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
