"""The servable `cairn bench --servable llm_bench --method generate` measures:
an LLM stage between two trivial Python stages, against /v1/completions on the
same model. Put (or link) the model at llm_bench/1/model.gguf; see
docs/performance.md for the command lines."""
import numpy as np
from mindspore_serving.server import register

model = register.declare_model(model_file="model.gguf", model_format="GGUF",
                               options={"temperature": 0.8, "ignore_eos": True})


def preprocess(prompt):
    return prompt


def count_tokens(tokens):
    return np.int32(len(tokens))


@register.register_method(output_names=["text", "n_tokens"])
def generate(prompt, max_tokens):
    prompt = register.add_stage(preprocess, prompt, outputs_count=1)
    text, tokens = register.add_stage(model, prompt, max_tokens=max_tokens, outputs_count=2)
    n_tokens = register.add_stage(count_tokens, tokens, outputs_count=1)
    return text, n_tokens
