"""Byte-level BPE tokenizer for the planner, trained with `tokenizers` on the corpus text.

Byte-level with no normalizer, so decode(encode(text)) == text for any text. Words, punctuation runs and
whitespace runs are separate pre-tokens (no GPT-2 style leading space on words): an object name is the same token
sequence in the prompt ("look for the cat") and in the plan ("s('cat');"), which makes copying easy to learn.
Saved as a transformers PreTrainedTokenizerFast directory (loads with AutoTokenizer.from_pretrained).
"""
from __future__ import annotations

from typing import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
DEFAULT_VOCAB = 2048
PRE_TOKEN = r"[^\W\d_]+|\d+|_\d*|[^\w\s]+|\s+"  # letters | digits | _1-style variables | punctuation | spaces


def train_tokenizer(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on ``texts``; special tokens bos/eos/pad get ids 0/1/2."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRE_TOKEN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS, PAD], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=BOS, eos_token=EOS, pad_token=PAD,
                                   clean_up_tokenization_spaces=False)


def encode_example(tokenizer: PreTrainedTokenizerFast, prompt: str, plan: str) -> tuple[list[int], int]:
    """Token ids of ``prompt + ' ' + plan + EOS`` and the number of prompt tokens.

    The prompt is encoded on its own, exactly as at inference, and the plan (with its leading space) after it.
    """
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    plan_ids = tokenizer.encode(" " + plan, add_special_tokens=False)
    return prompt_ids + plan_ids + [tokenizer.eos_token_id], len(prompt_ids)
