"""A tiny llama-architecture model in GGUF for tests against a real llama-server (scripts/llama.sh).

    .cache/python/bin/python scripts/tiny_llm.py OUT.gguf [HF_DIR]
    .cache/python/bin/python scripts/tiny_llm.py --hf-model DIR

With HF_DIR, the same tokenizer and chat template are also written as a Hugging Face model directory
(tokenizer.json, tokenizer_config.json): what `trajflow gateway --tokenizer-dir` renders prompts with in the
gateway itself, so the tests can compare its ids with llama-server's for the same conversations.

With --hf-model, a whole Hugging Face checkpoint for vLLM (scripts/vllm.sh): the same tokenizer and template,
a Llama config and random weights in safetensors (written here with numpy; no torch needed). Its shape differs
from the GGUF's because vLLM's CPU attention takes head dimensions of 32 and up (16 fails on the first request,
"Unsupported CPU attention configuration"): width 128, 2 query heads of 64, 1 KV head, 2 layers.

Everything is generated here, from a fixed seed, so the file is the same on every machine and nothing is
downloaded:
- weights: random (normal, seed 20261124), two layers of width 64, float32 (about 0.3 MB): it loads in
  milliseconds and samples hundreds of tokens a second on one CPU core. What it says is noise, which is what
  the tests want: nearly uniform sampling over a small vocabulary picks single byte tokens often, so an answer
  regularly splits a multi-byte UTF-8 character over several tokens (the case where llama-server leaves out
  logprob entries; docs/engines.md).
- tokenizer: GPT-2 style byte-level BPE (`tokenizer.ggml.model = gpt2`): the 256 byte tokens, merges learned
  from the short multilingual text below (some of them join the bytes of one multi-byte character, some
  join a character with its neighbour), and the ChatML special tokens. `<tool_call>` and `</tool_call>` are
  added tokens, as in Qwen2.5, so a tool call's markup is one token each.
- chat template: ChatML with tools and tool calls in the Hermes / Qwen2.5 layout, so `llama-server --jinja`
  accepts `tools`, `tool_choice` and assistant `tool_calls` in the history, and parses `<tool_call>` blocks
  in an answer into OpenAI `tool_calls`. Unlike Qwen2.5 the JSON follows `<tool_call>` without a newline:
  llama-server's grammar lets content precede the calls even with `tool_choice: required` and starts a call
  at its opening marker, so one token (`<tool_call>`, which a test can raise with `logit_bias`) opens a call
  here, where Qwen2.5's layout needs `<tool_call>` and then a newline, which a random model rarely samples.
- context: 65,536 positions, so the harness tests can send Claude Code's and Codex's whole prompts (30-40k
  tokens here: the vocabulary is nearly bytes); prefill runs at thousands of tokens a second on 2 cores.
"""

import collections
import json
import os
import re
import sys

import gguf
import numpy as np

SEED = 20261124
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_LAYER = 2
N_CTX = 65536
N_MERGES = 200

# Text the merges are learned from: English, accented Latin, Greek, CJK and emoji, so that merges inside
# multi-byte characters exist next to plain byte tokens.
TEXT = """
The quick brown fox jumps over the lazy dog. The agent calls a tool, reads the answer and calls another tool.
Tool calls carry a name and arguments; the answer carries the result. The weather in Paris is mild today.
Crème brûlée, déjà vu, naïve café, façade, Straße, Ärger, Übermut, smörgåsbord, año, niño, señor.
Καλημέρα κόσμε, η γλώσσα είναι ελληνική. Привет, мир: это проверка.
你好，世界。这是一个测试。中文的字符需要三个字节。今天天气很好。我们调用工具。
こんにちは世界。ツールを呼び出します。🙂 🚀 🎉 ✓ → ← ∑ ∞ €
"""

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<tool_call>", "</tool_call>"]

# ChatML with tools, the layout of Qwen2.5's template (Hermes 2 Pro tool calls), which llama.cpp's chat
# parser recognises.
CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable characters (what byte-level BPE vocabularies store)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def learn_merges(text, n_merges):
    """Plain BPE over the words of `text` (a leading space stays with its word, as GPT-2 splits)."""
    enc = bytes_to_unicode()
    words = collections.Counter(re.findall(r" ?\w+| ?[^\s\w]+|\s+", text))
    splits = {w: [enc[b] for b in w.encode("utf-8")] for w in words}
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, count in words.items():
            parts = splits[w]
            for a, b in zip(parts, parts[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        # the most frequent pair; ties broken by the pair itself so the result does not depend on dict order
        (a, b), _count = max(pairs.items(), key=lambda item: (item[1], item[0]))
        merges.append((a, b))
        for w in words:
            parts = splits[w]
            out = []
            i = 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            splits[w] = out
    return merges


def vocabulary():
    """The tokens (bytes, then merges, then the added and special tokens), their GGUF types and the merges."""
    enc = bytes_to_unicode()
    merges = learn_merges(TEXT, N_MERGES)
    tokens = [enc[b] for b in range(256)]
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            tokens.append(a + b)
            seen.add(a + b)
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for t in ADDED:
        tokens.append(t)
        types.append(gguf.TokenType.USER_DEFINED)
    for t in SPECIALS:
        tokens.append(t)
        types.append(gguf.TokenType.CONTROL)
    return tokens, types, merges


def main(path, hf_dir=None):
    tokens, types, merges = vocabulary()
    n_vocab = len(tokens)
    ids = {t: i for i, t in enumerate(tokens)}

    w = gguf.GGUFWriter(path, "llama")
    w.add_name("trajflow tiny test model (random weights)")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in merges])
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_eos_token_id(ids["<|im_end|>"])
    w.add_eot_token_id(ids["<|im_end|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    rng = np.random.default_rng(SEED)

    def weight(rows, cols, scale):
        # numpy (rows, cols) is ggml's (ne0 = cols, ne1 = rows): a matrix mapping cols inputs to rows outputs
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    head_dim = N_EMBD // N_HEAD
    w.add_tensor("token_embd.weight", weight(n_vocab, N_EMBD, 1.0))
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", weight(N_EMBD, N_EMBD, 0.1))
        w.add_tensor(f"blk.{i}.attn_k.weight", weight(N_HEAD_KV * head_dim, N_EMBD, 0.1))
        w.add_tensor(f"blk.{i}.attn_v.weight", weight(N_HEAD_KV * head_dim, N_EMBD, 0.1))
        w.add_tensor(f"blk.{i}.attn_output.weight", weight(N_EMBD, N_EMBD, 0.1))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weight(N_FF, N_EMBD, 0.1))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weight(N_FF, N_EMBD, 0.1))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weight(N_EMBD, N_FF, 0.1))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    # Output scale 0.15: logits spread by about 1.2 nats, so sampling at temperature 1 is far from greedy
    # (every token is drawn now and then) but the logprobs still differ from token to token.
    w.add_tensor("output.weight", weight(n_vocab, N_EMBD, 0.15))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{path}: vocabulary {n_vocab} ({len(merges)} merges), {N_LAYER} layers of {N_EMBD}")
    if hf_dir is not None:
        write_hf_dir(hf_dir, tokens, types, merges)
        print(f"{hf_dir}: tokenizer.json, tokenizer_config.json")


def write_hf_dir(directory, tokens, types, merges):
    """The tokenizer and template as `tokenizers` and `transformers` read them: a byte-level BPE whose ids are
    the GGUF's (bytes, then merges), the added and special tokens split out before pre-tokenization as
    llama.cpp's parse_special does, and the chat template with its BOS and EOS tokens."""
    os.makedirs(directory, exist_ok=True)
    vocab = {t: i for i, (t, kind) in enumerate(zip(tokens, types)) if kind == gguf.TokenType.NORMAL}
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": kind == gguf.TokenType.CONTROL}
        for i, (t, kind) in enumerate(zip(tokens, types)) if kind != gguf.TokenType.NORMAL
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    config = {"chat_template": CHAT_TEMPLATE, "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "add_bos_token": False, "model_max_length": N_CTX,
              "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)


# The vLLM checkpoint's shape (see the module's docstring).
HF_HIDDEN = 128
HF_HEADS = 2
HF_KV_HEADS = 1
HF_HEAD_DIM = 64
HF_FF = 256
HF_LAYERS = 2
# Claude Code asks max_tokens 128000, and vLLM refuses a max_tokens above its --max-model-len (it clamps one
# that only overflows with the prompt): the checkpoint's positions allow a 131,072-token context.
HF_CTX = 131072


def write_safetensors(path, tensors):
    """The safetensors layout: an 8-byte little-endian header length, the JSON header (names, dtypes, shapes,
    byte ranges; padded with spaces to 8 bytes), then the tensors' bytes in the header's order."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, array in tensors:
        size = array.nbytes
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for _name, array in tensors:
            f.write(np.ascontiguousarray(array, dtype="<f4").tobytes())


def write_hf_model(directory):
    """A Llama checkpoint vLLM serves: tokenizer and template (write_hf_dir), config.json,
    generation_config.json and model.safetensors with random weights from the fixed seed."""
    tokens, types, merges = vocabulary()
    write_hf_dir(directory, tokens, types, merges)
    ids = {t: i for i, t in enumerate(tokens)}
    n_vocab = len(tokens)
    rng = np.random.default_rng(SEED + 1)

    def weight(rows, cols, scale):
        # (out_features, in_features), as torch's Linear stores them
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float32)

    h, kv = HF_HIDDEN, HF_KV_HEADS * HF_HEAD_DIM
    tensors = [("model.embed_tokens.weight", weight(n_vocab, h, 1.0))]
    for i in range(HF_LAYERS):
        p = f"model.layers.{i}."
        tensors += [
            (p + "input_layernorm.weight", np.ones(h, dtype=np.float32)),
            (p + "self_attn.q_proj.weight", weight(HF_HEADS * HF_HEAD_DIM, h, 0.1)),
            (p + "self_attn.k_proj.weight", weight(kv, h, 0.1)),
            (p + "self_attn.v_proj.weight", weight(kv, h, 0.1)),
            (p + "self_attn.o_proj.weight", weight(h, HF_HEADS * HF_HEAD_DIM, 0.1)),
            (p + "post_attention_layernorm.weight", np.ones(h, dtype=np.float32)),
            (p + "mlp.gate_proj.weight", weight(HF_FF, h, 0.1)),
            (p + "mlp.up_proj.weight", weight(HF_FF, h, 0.1)),
            (p + "mlp.down_proj.weight", weight(h, HF_FF, 0.1)),
        ]
    tensors.append(("model.norm.weight", np.ones(h, dtype=np.float32)))
    # Scale 0.106 = 1.2 / sqrt(128): logits spread by about 1.2 nats, as the GGUF's (see main).
    tensors.append(("lm_head.weight", weight(n_vocab, h, 1.2 / np.sqrt(h))))
    write_safetensors(os.path.join(directory, "model.safetensors"), tensors)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "intermediate_size": HF_FF, "num_attention_heads": HF_HEADS, "num_key_value_heads": HF_KV_HEADS,
        "head_dim": HF_HEAD_DIM, "num_hidden_layers": HF_LAYERS, "vocab_size": n_vocab,
        "max_position_embeddings": HF_CTX, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "float32", "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
    }
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    # Only the stop token: vLLM takes a checkpoint's generation_config as the default sampling parameters.
    with open(os.path.join(directory, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"]}, f, indent=1)
    print(f"{directory}: Llama checkpoint, vocabulary {n_vocab}, {HF_LAYERS} layers of {h}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--hf-model":
        write_hf_model(sys.argv[2])
    elif len(sys.argv) in (2, 3) and not sys.argv[1].startswith("--"):
        main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None)
    else:
        sys.exit("usage: tiny_llm.py OUT.gguf [HF_DIR] | tiny_llm.py --hf-model DIR")
