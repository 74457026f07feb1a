"""A tiny random-weight Llama, built in-process in milliseconds: for tests and harness speed.

It exercises the real :class:`~ap_gym.backbones.hf.TransformersBackbone` code paths (KV
reuse, one-pass scoring, batching) with no download and no model file. Its outputs are
noise, deterministic for a seed.
"""

from __future__ import annotations

from typing import Any

from ap_gym.backbones.loading import CHATML_TEMPLATE

__all__ = ["tiny_llama"]

_WORDS = ["system", "user", "assistant", "you", "are", "an", "agent", "in", "a", "text", "world", "task", "the", "to", "of", "and", "is", "go", "north", "south", "east", "west", "look", "inventory", "take", "put", "open", "close", "examine", "drop", "eat", "cook", "cut", "in", "on", "from", "with", "at", "room", "kitchen", "door", "key", "box", "coin", "table", "chest", "apple", "mug", "sink", "fridge", "microwave", "lamp", "shelf", ">", "action", "observation", "instruction", "guidance", "past", "attempts", "success", "failure", "reward", "score", "done", "1", "2", "3", "4", "5", "6", "7", "8", "9", "0", ".", ",", ":", ";", "!", "?", "'", '"', "(", ")", "[", "]", "-", "around", "focus", "move", "use", "activate", "wait"]


def tiny_llama(seed: int = 0, hidden_size: int = 64, layers: int = 2) -> tuple[Any, Any]:
    """A tiny random-weight Llama and a word-level tokenizer, built in-process in ms.

    Deterministic for a seed. Embeddings are untied: with tied ones greedy decoding just
    repeats the last prompt token.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
    vocab = {w: i for i, w in enumerate(specials + sorted(set(_WORDS)))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>", eos_token="<|im_end|>",
        bos_token="<|im_start|>",
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=8192, tie_word_embeddings=False,
        pad_token_id=vocab["<pad>"], eos_token_id=vocab["<|im_end|>"], bos_token_id=vocab["<|im_start|>"],
    )
    model = LlamaForCausalLM(config).eval()
    return model, tokenizer
