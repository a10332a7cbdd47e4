"""Masking for MLM pre-training of the dense encoder: BERT's random whole-word masking and
ROM, retrieval-oriented masking (issue #26).

Both strategies work on one passage at a time, on whole words, and mask the same number of
tokens per passage; they differ only in the order in which words are offered for masking:

- :func:`words` tokenizes a passage with a fast Hugging Face tokenizer and groups its word-piece
  positions into words by ``Encoding.word_ids()`` (special tokens belong to no word and are never
  masked).
- :func:`mask_budget` is the number of tokens to mask: ``floor(rate * n + 0.5)`` (``rate * n``
  rounded half up) for a passage of ``n`` maskable tokens, at least 1.
- Whole words meet the budget by one rule for both strategies (:func:`_select`): the target is the
  largest total of whole-word lengths that does not exceed the budget (when every word is longer
  than the budget, the shortest word's length: a passage always gets one word to predict). The
  target depends on the passage's word lengths alone, never on the draw, so ``random`` and ``rom``
  mask exactly the same number of tokens in every passage. It equals the budget whenever any set of
  words adds up to it, in particular whenever the passage has at least that many single-piece words.
  Words are then taken in the strategy's order; a word is skipped only when taking it would leave
  the target out of reach of the words not yet offered.
- :func:`random_mask`: words offered in a uniformly random order (BERT's whole-word masking).
- :func:`rom_mask`: words offered in the order of weighted sampling without replacement, each draw
  proportional to the word's importance weight (Efraimidis & Spirakis' keys ``log(u) / w``, so a
  word of weight 2 is twice as likely as one of weight 1 to come next). Words of weight 0 come
  after every weighted word, in random order: they are masked only when the weighted words cannot
  fill the target, and a passage whose words all weigh 0 is masked uniformly. A word is still masked
  whole, so a word of many pieces competes for the budget's room as well as for the draw: it is
  masked less often than a one-piece word of the same weight (as under BERT's whole-word masking,
  where it is skipped when it would overflow). Two knobs, both off by
  default: ``temperature`` (draw in proportion to ``w ** (1 / temperature)``; 1 keeps the weights
  as they are) and ``uniform_mix`` (``(1 - m) * p_importance + m * p_uniform``; 0 is pure
  importance). They are retr's, not the paper's (see below), for measuring how sharp the
  preference should be.
- The masked positions then follow BERT's replacement rule, each token on its own draw: 80% become
  ``[MASK]``, 10% a random token of the vocabulary (special tokens excluded), 10% stay as they
  are. ``labels`` hold the original id at every masked position (the unchanged 10% included) and
  ``-100`` everywhere else, the value Hugging Face's MLM loss ignores.
- Importance: a mapping ``word -> weight`` (looked up by the word's text, lower-cased and without
  accents, or by ``key``), a callable ``text -> mapping`` (the hook for DeepCT: a trained DeepCT
  model's word weights of the passage; this module loads no model), or one weight per word.
  :func:`idf_importance` turns the BM25 index's document frequencies into weights: Lucene's BM25
  idf ``log(1 + (N - df + 0.5) / (df + 0.5))`` (what Anserini's BM25 scores with), 0 for stop
  words and for words without a letter or digit.

Every draw comes from the ``numpy.random.Generator`` passed in (or one seeded with the int passed
in), so the same seed gives the same masks.

Sources of the facts used here (the wording and code are ours):

- ROM: D. Long, Y. Zhang, G. Xu, P. Xie, "Retrieval Oriented Masking Pre-training Language Model
  for Dense Passage Retrieval", arXiv:2210.15133 (2022); abstract at
  https://huggingface.co/papers/2210.15133 and https://huggingface.openai4gpt.trade/papers/2210.15133.md.
  Used: random masking spends much of its budget on tokens of little use to retrieval (stop words,
  punctuation); ROM gives more important tokens a higher probability of being masked, using term
  importance weights; it changes neither the model's architecture nor its MLM objective. Only the
  abstract and the opening of the introduction could be read in the copies available when this was
  written: the paper's exact mapping from weights to probabilities, its masking rate and whether it
  mixes in uniform masking were not found, so this module draws in proportion to the weights, uses
  BERT's rate (0.15) and mixes nothing by default. Those defaults are retr's own choices, not taken
  from the paper; check them against its method section before relying on them.
- BERT's masking: google-research/bert, ``create_pretraining_data.py`` (whole-word version):
  ``num_to_predict = max(1, int(round(len(tokens) * masked_lm_prob)))`` with ``masked_lm_prob``
  0.15; words in shuffled order, a word skipped when its pieces would exceed ``num_to_predict``;
  each masked token replaced by ``[MASK]`` with probability 0.8, else kept or replaced by a random
  vocabulary word with probability 0.5 each (80/10/10). Whole Word Masking (the repository's README
  of 2019-05-31, mirrored at https://github.com/luomai/bert, and the model card
  https://huggingface.co/bert-large-cased-whole-word-masking): all the tokens of a word are masked
  at once, the overall masking rate stays the same, and each masked piece is still predicted on its
  own. Differences here: the budget counts the passage's maskable tokens (not [CLS]/[SEP]) and
  rounds half up (Python's ``round`` rounds half to even), no ``max_predictions_per_seq`` cap
  (truncate with ``max_length`` instead), the fill rule above reaches the target exactly where
  BERT's skip rule may stop short of it, and random replacements never draw a special token.
- idf (from Lucene's own formula; not re-checked against a stored copy for this module): Lucene's
  ``BM25Similarity.idf``, ``log(1 + (docCount - docFreq + 0.5) / (docFreq + 0.5))``;
  stop words: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (the list Anserini's default
  English analyzer removes, so BM25 gives those words no weight either).
"""
from __future__ import annotations

import functools
import math
import unicodedata
import weakref
from dataclasses import dataclass
from typing import Callable, Collection, Mapping, Sequence, Tuple, Union

import numpy as np

from indexes.errors import InputError, ParameterError

#: The label Hugging Face's masked-LM loss ignores.
IGNORE_INDEX = -100

#: BERT's masking rate.
DEFAULT_RATE = 0.15

#: BERT's replacement rule: shares of masked tokens that become [MASK] / a random token / stay.
MASK_SHARE, RANDOM_SHARE = 0.8, 0.1

#: Lucene's English stop words (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET), which Anserini's default
#: analyzer drops: the BM25 index holds none of them.
LUCENE_STOPWORDS = frozenset("""
a an and are as at be but by for if in into is it no not of on or such that the their then there these
they this to was will with
""".split())

#: A term-importance provider: passage text -> {word: weight}. DeepCT's word weights of a passage
#: fit here (the training code wraps the trained model; this module loads none).
ImportanceProvider = Callable[[str], Mapping[str, float]]
Importance = Union[Mapping[str, float], ImportanceProvider, Sequence[float], np.ndarray]
RngLike = Union[np.random.Generator, int, None]


@dataclass(frozen=True)
class Words:
    """A tokenized passage: its ids (special tokens included) and its words' token positions."""

    text: str
    input_ids: np.ndarray                 # int64, the whole encoding
    spans: Tuple[Tuple[int, int], ...]    # per word: [start, end) positions in input_ids
    texts: Tuple[str, ...]                # per word: its text in the passage

    def __len__(self) -> int:
        return len(self.spans)

    @property
    def lengths(self) -> np.ndarray:
        """Word-pieces per word."""
        return np.array([e - s for s, e in self.spans], dtype=np.int64)

    @property
    def n_tokens(self) -> int:
        """Maskable tokens: every token that belongs to a word."""
        return int(sum(e - s for s, e in self.spans))


@dataclass(frozen=True)
class Masked:
    """One masked passage: model inputs, MLM labels and which words were masked."""

    input_ids: np.ndarray   # int64, the replacement rule applied
    labels: np.ndarray      # int64, the original id where masked, IGNORE_INDEX elsewhere
    masked_words: Tuple[int, ...]  # indices into Words.spans, ascending

    @property
    def n_masked(self) -> int:
        return int((self.labels != IGNORE_INDEX).sum())


def words(tokenizer, text: str, max_length: int | None = None) -> Words:
    """Tokenize ``text`` and group its word-pieces into whole words (special tokens excluded).

    ``tokenizer`` must be a fast Hugging Face tokenizer (``word_ids()`` needs one); with
    ``max_length`` the encoding is truncated to that many tokens, special tokens included.
    Raises :class:`InputError` for a passage with no token to mask."""
    return words_of(tokenizer, [text], max_length)[0]


def words_of(tokenizer, texts: Sequence[str], max_length: int | None = None) -> list:
    """:func:`words` of every text, tokenized in one call of the fast tokenizer (its Rust code
    splits the batch over the cores; one call per text cost ~4 s on SciFact's 5,183 passages, the
    batch ~1 s), each text truncated on its own as :func:`words` truncates it."""
    if not getattr(tokenizer, "is_fast", False):
        raise InputError("masking needs a fast tokenizer (a model folder with tokenizer.json): "
                         "whole words come from its word_ids()")
    texts = list(texts)
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise InputError(f"{'a passage' if len(texts) == 1 else f'passage {bad}'} must be a string, got "
                         f"{type(texts[bad]).__name__}")
    if not texts:
        return []
    kwargs = {"truncation": True, "max_length": int(max_length)} if max_length is not None else {}
    enc = tokenizer(texts, return_offsets_mapping=True, return_attention_mask=False,
                    return_token_type_ids=False, **kwargs)
    out = []
    for i, text in enumerate(texts):
        wid = np.array([-1 if w is None else w for w in enc.word_ids(i)], dtype=np.int64)
        # a word starts where the word id changes to a real one; it ends where the next id differs
        starts = np.flatnonzero((wid >= 0) & (wid != np.concatenate(([-2], wid[:-1]))))
        ends = np.flatnonzero((wid >= 0) & (wid != np.concatenate((wid[1:], [-2])))) + 1
        if not len(starts):
            raise InputError("empty passage: it has no token to mask" if len(texts) == 1 else
                             f"passage {i} is empty: it has no token to mask")
        offsets = enc["offset_mapping"][i]
        spans = tuple(zip(starts.tolist(), ends.tolist()))
        out.append(Words(text, np.asarray(enc["input_ids"][i], dtype=np.int64), spans,
                         tuple(text[offsets[s][0]:offsets[e - 1][1]] for s, e in spans)))
    return out


def mask_budget(n_tokens: int, rate: float = DEFAULT_RATE) -> int:
    """Tokens to mask in a passage of ``n_tokens`` maskable tokens: ``rate * n_tokens`` rounded
    half up, at least 1."""
    _check_rate(rate)
    if n_tokens < 1:
        raise InputError("empty passage: it has no token to mask")
    return max(1, math.floor(rate * n_tokens + 0.5))


def random_mask(tokenizer, passage: str | Words, *, rate: float = DEFAULT_RATE, rng: RngLike = None,
                max_length: int | None = None) -> Masked:
    """BERT's whole-word masking: words in a uniformly random order fill the budget."""
    _check_rate(rate)
    ws = passage if isinstance(passage, Words) else words(tokenizer, passage, max_length)
    gen = _generator(rng)
    return _masked(tokenizer, ws, gen.permutation(len(ws)), rate, gen)


_WEIGHTING = {"temperature": 1.0, "uniform_mix": 0.0, "key": None, "missing": 0.0}


def rom_mask(tokenizer, passage: str | Words, importance: Importance, *, rate: float = DEFAULT_RATE,
             rng: RngLike = None, max_length: int | None = None, **weighting) -> Masked:
    """ROM: the same budget as :func:`random_mask`, words drawn without replacement with
    probabilities from their importance (see the module's docstring for ``importance``, ``key``
    and ``missing``, the weight of a word the mapping lacks). ``**weighting``: ``temperature``
    (default 1.0) and ``uniform_mix`` (0.0), as :func:`masking_probabilities` takes them, ``key``
    (None) and ``missing`` (0.0), as :func:`word_weights` takes them; another keyword is a TypeError
    naming it."""
    bad = sorted(set(weighting) - set(_WEIGHTING))
    if bad:
        raise TypeError(f"rom_mask() got an unexpected keyword argument {bad[0]!r}")
    w = {**_WEIGHTING, **weighting}
    temperature, uniform_mix, key, missing = w["temperature"], w["uniform_mix"], w["key"], w["missing"]
    _check_rate(rate)
    if not (math.isfinite(temperature) and temperature > 0):
        raise ParameterError("{temperature} must be a positive number, got {got}", got=temperature)
    if not (math.isfinite(uniform_mix) and 0.0 <= uniform_mix <= 1.0):
        raise ParameterError("{uniform_mix} must lie in [0, 1], got {got}", got=uniform_mix)
    ws = passage if isinstance(passage, Words) else words(tokenizer, passage, max_length)
    probs = masking_probabilities(word_weights(ws, importance, key=key, missing=missing),
                                  temperature=temperature, uniform_mix=uniform_mix)
    gen = _generator(rng)
    return _masked(tokenizer, ws, _weighted_order(probs, gen), rate, gen)


def word_weights(ws: Words, importance: Importance, *, key: Callable[[str], str] | None = None,
                 missing: float = 0.0) -> np.ndarray:
    """One importance weight per word of ``ws``, checked finite and non-negative."""
    if callable(importance) and not isinstance(importance, Mapping):
        importance = importance(ws.text)
    if isinstance(importance, Mapping):
        norm = key or _plain
        w = np.array([importance.get(norm(t), missing) for t in ws.texts], dtype=np.float64)
    else:
        try:
            w = np.asarray(importance, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError("importance must be a mapping word -> weight, a callable text -> mapping, "
                             "or one number per word") from None
        if w.shape != (len(ws),):
            raise InputError(f"importance has {w.size} weights for a passage of {len(ws)} words")
    if not np.isfinite(w).all():
        raise InputError("importance weights must be finite numbers")
    if (w < 0).any():
        bad = [ws.texts[i] for i in np.flatnonzero(w < 0)[:3]]
        raise InputError(f"importance weights must not be negative (words {', '.join(map(repr, bad))})")
    return w


def masking_probabilities(weights: np.ndarray, *, temperature: float = 1.0,
                          uniform_mix: float = 0.0) -> np.ndarray:
    """Draw probabilities of the words: ``weights ** (1 / temperature)`` normalised, mixed with
    the uniform distribution by ``uniform_mix``. All-zero weights give all-zero probabilities
    (unless mixed): such a passage is masked in uniformly random order."""
    w = np.asarray(weights, dtype=np.float64)
    if temperature != 1.0:
        w = np.where(w > 0, w ** (1.0 / temperature), 0.0)
    total = w.sum()
    p = w / total if total > 0 else np.zeros_like(w)
    if uniform_mix > 0:
        p = (1.0 - uniform_mix) * p + uniform_mix / len(p)
    return p


def idf_importance(doc_freqs: Mapping[str, int], n_docs: int, *,
                   stopwords: Collection[str] = LUCENE_STOPWORDS) -> dict:
    """Word weights from document frequencies: Lucene's BM25 idf
    ``log(1 + (n_docs - df + 0.5) / (df + 0.5))``, 0 for stop words and for words without a
    letter or digit. Use the same key for the mapping and for :func:`rom_mask`'s ``key``."""
    if isinstance(n_docs, bool) or not isinstance(n_docs, (int, np.integer)) or n_docs < 1:
        raise ParameterError("{n_docs} must be a whole number of at least 1, got {got}", got=n_docs)
    out = {}
    for word, df in doc_freqs.items():
        if isinstance(df, bool) or not isinstance(df, (int, np.integer)) or not 0 <= df <= n_docs:
            raise InputError(f"document frequency of {word!r} must be a whole number in [0, {n_docs}], "
                             f"got {df!r}")
        if word in stopwords or not any(c.isalnum() for c in word):
            out[word] = 0.0
        else:
            out[word] = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
    return out


# -- internals ---------------------------------------------------------------------------------

def _check_rate(rate: float) -> None:
    if isinstance(rate, bool) or not isinstance(rate, (int, float, np.floating)) or not (0.0 < rate < 1.0):
        raise ParameterError("{rate} must lie strictly between 0 and 1, got {got}", got=rate)


def _generator(rng: RngLike) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)):
        return np.random.default_rng(rng)
    raise InputError(f"rng must be a numpy Generator or an int seed, got {type(rng).__name__}")


@functools.lru_cache(maxsize=1 << 18)
def _plain(word: str) -> str:
    """The default lookup key: lower-cased, accents stripped (as an uncased BERT reads a word);
    cached, since a corpus repeats its words."""
    word = word.lower()
    if word.isascii():
        return word
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


def _weighted_order(probs: np.ndarray, gen: np.random.Generator) -> np.ndarray:
    """A draw without replacement of every word, each next word in proportion to ``probs``
    (Efraimidis & Spirakis: sort by ``log(u) / p``); words of probability 0 last, shuffled."""
    u = 1.0 - gen.random(len(probs))          # in (0, 1]: log(u) is finite
    tie = gen.random(len(probs))
    with np.errstate(divide="ignore"):
        keys = np.where(probs > 0, np.log(u) / np.where(probs > 0, probs, 1.0), -np.inf)
    return np.lexsort((tie, -keys))


def _target(lengths: np.ndarray, budget: int) -> int:
    """The largest total of whole-word lengths not above ``budget``; the shortest word's length
    when every word is longer than the budget."""
    limit = (1 << (budget + 1)) - 1
    reach = 1
    for n in lengths.tolist():
        if n <= budget:
            reach = (reach | (reach << n)) & limit
    best = reach.bit_length() - 1
    return best if best > 0 else int(lengths.min())


def _reachable(total: int, counts: dict) -> bool:
    """Whether some words of the multiset ``counts`` (length -> how many) sum to ``total``."""
    if total == 0 or counts.get(1, 0) >= total:
        return True
    reach, limit = 1, (1 << (total + 1)) - 1
    for n, c in counts.items():
        for _ in range(min(c, total // n)):
            reach = (reach | (reach << n)) & limit
        if reach >> total & 1:
            return True
    return False


def _select(lengths: np.ndarray, order: np.ndarray, target: int) -> list:
    """Words taken in ``order`` whose lengths sum to exactly ``target``: each word is taken
    unless that would leave the rest of the target out of reach of the words after it."""
    counts: dict = {}
    for n in lengths.tolist():
        counts[n] = counts.get(n, 0) + 1
    left, chosen = target, []
    for i in order.tolist():
        n = int(lengths[i])
        counts[n] -= 1
        if n <= left and _reachable(left - n, counts):
            chosen.append(i)
            left -= n
            if left == 0:
                break
    return sorted(chosen)


_VOCAB: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _vocabulary(tokenizer) -> Tuple[int, np.ndarray]:
    """The tokenizer's [MASK] id and the ids a random replacement may draw (no special token)."""
    try:
        got = _VOCAB.get(tokenizer)
    except TypeError:
        got = None
    if got is None:
        mask_id = getattr(tokenizer, "mask_token_id", None)
        if mask_id is None:
            raise InputError("the tokenizer has no mask token: MLM masking needs one")
        ids = np.setdiff1d(np.arange(len(tokenizer), dtype=np.int64),
                           np.asarray(tokenizer.all_special_ids, dtype=np.int64))
        got = (int(mask_id), ids)
        try:
            _VOCAB[tokenizer] = got
        except TypeError:
            pass
    return got


def _masked(tokenizer, ws: Words, order: np.ndarray, rate: float, gen: np.random.Generator) -> Masked:
    """Fill the budget from ``order`` and apply the 80/10/10 replacement rule."""
    mask_id, vocab = _vocabulary(tokenizer)
    lengths = ws.lengths
    chosen = _select(lengths, order, _target(lengths, mask_budget(ws.n_tokens, rate)))
    pos = np.concatenate([np.arange(*ws.spans[i]) for i in chosen]).astype(np.int64)
    ids = ws.input_ids.copy()
    labels = np.full_like(ids, IGNORE_INDEX)
    labels[pos] = ids[pos]
    draw = gen.random(len(pos))
    replacement = vocab[gen.integers(0, len(vocab), size=len(pos))]
    ids[pos[draw < MASK_SHARE]] = mask_id
    swap = (draw >= MASK_SHARE) & (draw < MASK_SHARE + RANDOM_SHARE)
    ids[pos[swap]] = replacement[swap]
    return Masked(ids, labels, tuple(chosen))
