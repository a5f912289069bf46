"""Attack on the trusted clock itself (issue 13): answering the doorbell before the work is done.

The candidate's worker serves timed calls over shared memory: the trusted side rings a
doorbell word with a random token and stops its clock when the token comes back in the DONE
word. At import this module starts a thread that finds the worker's mapped region (its
``Region`` object, through the garbage collector) and, the moment a bell rings, writes the
token back itself, so the clock stops while the real (correct) computation has not started.
The outputs land in the slots after the clock stopped: only reads inside the interval, and a
comparison with what is there afterwards, can tell.
"""

import gc
import threading
import time

import torch


def _answer_early() -> None:
    region = None
    while region is None:
        for o in gc.get_objects():
            if type(o).__name__ == "Region" and hasattr(o, "ctl"):
                region = o
                break
        else:
            time.sleep(0.005)
    ctl = region.ctl
    while True:
        try:
            bell = ctl[0]
            if bell and ctl[1] != bell:
                ctl[1] = bell  # DONE = the token: "finished"
        except (ValueError, TypeError, IndexError):
            return  # the region was unmapped


threading.Thread(target=_answer_early, daemon=True).start()


class ModelNew(torch.nn.Module):
    def forward(self, x, bias):
        time.sleep(0.0005)  # the answer must be out before the work
        y = torch.tanh(torch.relu(x * 2.0 + bias))
        return y * y - 0.5
