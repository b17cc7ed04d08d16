"""MindSpore Serving's tensor-add example, with the stages cairn's tests need."""
import time

import numpy as np
from mindspore_serving.server import register


def add_trans_datatype(x1, x2):
    return x1.astype(np.float32), x2.astype(np.float32)


def add(x1, x2):
    if x1.shape != x2.shape:
        raise ValueError("x1 has shape %s but x2 has shape %s" % (x1.shape, x2.shape))
    return x1 + x2


def add_batch(instances):
    # One call for several instances: Python code that batches its own work.
    for x1, x2 in instances:
        yield x1 + x2, len(instances)


def check_positive(x):
    if np.any(x < 0):
        raise ValueError("x has negative values")
    return x


def sleep_for(seconds):
    time.sleep(float(seconds))
    return seconds


def spin_for(seconds):
    end = time.time() + float(seconds)
    while time.time() < end:
        pass
    return seconds


def describe(s, b, flag, n, f):
    return "%s|%d|%s|%d|%.2f" % (s, len(b), flag, n, f), b[::-1]


@register.register_method(output_names=["y"])
def add_common(x1, x2):
    y = register.add_stage(add, x1, x2, outputs_count=1)
    return y


@register.register_method(output_names=["y"])
def add_cast(x1, x2):
    x1, x2 = register.add_stage(add_trans_datatype, x1, x2, outputs_count=2)
    y = register.add_stage(add, x1, x2, outputs_count=1)
    return y


@register.register_method(output_names=["y", "batch"])
def add_batched(x1, x2):
    y, batch = register.add_stage(add_batch, x1, x2, outputs_count=2, batch_size=4)
    return y, batch


@register.register_method(output_names=["y"])
def positive(x):
    return register.add_stage(check_positive, x, outputs_count=1)


@register.register_method(output_names=["slept"])
def sleep(seconds):
    return register.add_stage(sleep_for, seconds, outputs_count=1)


@register.register_method(output_names=["spun"])
def spin(seconds):
    return register.add_stage(spin_for, seconds, outputs_count=1)


@register.register_method(output_names=["text", "reversed"])
def scalars(s, b, flag, n, f):
    text, rev = register.add_stage(describe, s, b, flag, n, f, outputs_count=2)
    return text, rev
