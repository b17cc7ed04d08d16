"""A GGUF model between Python pre- and post-processing."""
import numpy as np
from mindspore_serving.server import register

model = register.declare_model(model_file="model.gguf", model_format="GGUF",
                               options={"max_tokens": 12, "temperature": 0.0})


def preprocess(text):
    return text.strip()


def postprocess(text):
    return text, np.int32(len(text))


def generate_in_python(text):
    # The model called from Python, as MindSpore Serving allows.
    first = model.call(text, max_tokens=4)
    return first + "|" + model.call(text + first, max_tokens=4)


@register.register_method(output_names=["text", "length"])
def generate(prompt):
    prompt = register.add_stage(preprocess, prompt, outputs_count=1)
    text = register.add_stage(model, prompt, outputs_count=1)
    text, length = register.add_stage(postprocess, text, outputs_count=2)
    return text, length


@register.register_method(output_names=["text", "tokens", "finish_reason"])
def raw(prompt, max_tokens):
    text, tokens, reason = register.add_stage(model, prompt, max_tokens=max_tokens,
                                              outputs_count=3)
    return text, tokens, reason


@register.register_method(output_names=["text"])
def stream(prompt):
    return register.add_stage(model, prompt, outputs_count=1)


@register.register_method(output_names=["text"])
def nested(prompt):
    return register.add_stage(generate_in_python, prompt, outputs_count=1)
