"""Export a GPT-2-small-class decoder with Hugging Face transformers and torch.onnx, in the form
serving stacks use: `input_ids`, `attention_mask` and `past_key_values.N.{key,value}` in,
`logits` and `present.N.{key,value}` out, every length symbolic.

The configuration is transformers' `GPT2Config()` default (GPT-2 small: 12 layers, hidden 768,
12 heads, vocabulary 50257, 1024 positions); the weights are a seeded random initialisation, as
no hub download is reachable and the analysis reads only shapes. Used by the test that checks
the built-in `gpt2` preset against a real exporter's graph (tests/it/llm.rs).

usage: export_gpt2.py OUT.onnx
"""

import sys

import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.cache_utils import DynamicCache


class DecoderWithPast(torch.nn.Module):
    """The model with its cache as flat tensors, the layout of an ONNX decoder export."""

    def __init__(self, model, config):
        super().__init__()
        self.model = model
        self.config = config

    def forward(self, input_ids, attention_mask, *past):
        cache = DynamicCache(config=self.config)
        for index, layer in enumerate(cache.layers):
            key, value = past[2 * index], past[2 * index + 1]
            # Set the layer's tensors directly: `update` would concatenate them onto an empty
            # cache, an extra copy of the past per layer that no serving export has.
            layer.lazy_initialization(key, value)
            layer.keys, layer.values = key, value
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            past_key_values=cache,
            use_cache=True,
        )
        present = []
        for layer in out.past_key_values.layers:
            present += [layer.keys, layer.values]
        return (out.logits, *present)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    config = GPT2Config()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    layers, heads = config.n_layer, config.n_head
    head_dim = config.n_embd // heads
    batch, sequence, past_length = 1, 1, 8
    ids = torch.zeros(batch, sequence, dtype=torch.long)
    mask = torch.ones(batch, past_length + sequence, dtype=torch.long)
    past = [torch.zeros(batch, heads, past_length, head_dim) for _ in range(2 * layers)]
    cache_names = [f"{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    inputs = ["input_ids", "attention_mask"] + [f"past_key_values.{n}" for n in cache_names]
    outputs = ["logits"] + [f"present.{n}" for n in cache_names]
    dynamic = {
        "input_ids": {0: "batch_size", 1: "sequence_length"},
        "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
        "logits": {0: "batch_size", 1: "sequence_length"},
    }
    dynamic.update({n: {0: "batch_size", 2: "past_sequence_length"} for n in inputs[2:]})
    dynamic.update({n: {0: "batch_size", 2: "total_sequence_length"} for n in outputs[1:]})
    with torch.no_grad():
        torch.onnx.export(
            DecoderWithPast(model, config),
            (ids, mask, *past),
            sys.argv[1],
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=dynamic,
            opset_version=17,
            dynamo=False,
        )
    print(f"exported GPT-2 small (torch {torch.__version__}, transformers "
          f"{transformers.__version__}) to {sys.argv[1]}")


if __name__ == "__main__":
    main()
