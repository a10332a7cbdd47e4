"""Long documents split into passages that fit the dense encoder's window.

A passage holds at most ``tokens`` word-pieces of the bundled MiniLM's WordPiece tokenizer (the dense
model's), counting its special tokens ([CLS], [SEP]) and the document's title, which every passage
repeats (the encoders see ``title + " " + text``); consecutive passages share about ``overlap`` tokens.
The defaults, 256 tokens with 32 overlapping, are MiniLM's window (``max_seq_length`` 256), so a dense
sub-index encodes each passage whole, and an eighth of it repeated so that a sentence cut at a
boundary is whole in one of the two passages.

Boundaries fall between words, never inside one: at the end of a paragraph where one lies in the
second half of the window, else at a sentence end, else at any space (only a single "word" longer
than the window, such as a long URL, is cut between word-pieces). Each passage is a slice of the
document's text: ``text[start:end]`` with the offsets kept in its metadata. Its id is
``DOCID#N``, N counting from 0 in document order, and its metadata adds ``document`` (the
document's id), ``passage`` (N), ``start`` and ``end`` to the document's own.

The tokenizer is read from the model's ``tokenizer.json`` by the ``tokenizers`` library
(transformers' fast tokenizers are the same Rust code): that imports in milliseconds, where
``transformers.AutoTokenizer`` imports torch (about 1.7 s). A model folder with only
``vocab.txt`` falls back to transformers.
"""
from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from indexes.errors import InputError, ParameterError
from retrieval.types import contents

DEFAULT_TOKENS = 256  # MiniLM's window (sentence_bert_config.json's max_seq_length)
DEFAULT_OVERLAP = 32
MIN_TOKENS = 16
CHUNK_FIELDS = ("document", "passage", "start", "end")  # the metadata a passage adds

_SENTENCE_END = re.compile(r"[.!?。！？][\"')\]»”’]*$")


@dataclass(frozen=True)
class Chunking:
    """How documents are split: at most ``tokens`` word-pieces per passage (special tokens and
    the repeated title included), ``overlap`` of them shared by neighbours; ``model`` names the
    tokenizer's model (None: the bundled MiniLM, the default dense encoder)."""

    tokens: int = DEFAULT_TOKENS
    overlap: int = DEFAULT_OVERLAP
    model: Optional[str] = None

    def validate(self) -> "Chunking":
        for name, v in (("tokens", self.tokens), ("overlap", self.overlap)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise ParameterError("{chunk} %s must be an integer, got {_v!r}" % name, _v=v)
        if self.tokens < MIN_TOKENS:
            raise ParameterError("{chunk_tokens} must be at least {_min}, got {_v}", _min=MIN_TOKENS, _v=self.tokens)
        if not 0 <= self.overlap <= self.tokens // 2:
            raise ParameterError("{chunk_overlap} must be between 0 and half of {chunk_tokens} ({_h}), got {_v}",
                                 _h=self.tokens // 2, _v=self.overlap)
        return self

    def describe(self) -> Dict[str, Any]:
        """The manifest's record (``Chunking(**record)`` makes it again)."""
        return asdict(self)


ChunkArg = Union[None, bool, int, dict, Chunking]


def resolve(chunk: ChunkArg, default_on: bool) -> Optional[Chunking]:
    """The chunking ``chunk`` asks for: None takes the corpus form's default (``default_on``: a
    folder of documents is chunked, a JSONL/TSV corpus is not), False none, True the defaults,
    an int that many tokens, a dict or :class:`Chunking` as it says."""
    if chunk is None:
        chunk = default_on
    if chunk is False:
        return None
    if chunk is True:
        return Chunking().validate()
    if isinstance(chunk, int):
        return Chunking(tokens=chunk).validate()
    if isinstance(chunk, dict):
        try:
            return Chunking(**chunk).validate()
        except TypeError as e:
            raise ParameterError("{chunk}: %s" % str(e).replace("{", "(").replace("}", ")")) from None
    if isinstance(chunk, Chunking):
        return chunk.validate()
    raise ParameterError("{chunk} is None, a bool, a token count or a retrieval.chunking.Chunking, not {_t}",
                         _t=type(chunk).__name__)


@functools.lru_cache(maxsize=4)
def _tokenizer(model: Optional[str]):
    """The model's tokenizer as a ``tokenizers.Tokenizer`` without truncation or padding."""
    from retrieval.models import resolve_model_path

    path = resolve_model_path(model)
    if (path / "tokenizer.json").is_file():
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    else:  # only vocab.txt: transformers builds the fast tokenizer (and imports torch)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path).backend_tokenizer
    tok.no_truncation()
    tok.no_padding()
    return tok


def token_count(texts: List[str], model: Optional[str] = None) -> List[int]:
    """Word-pieces per text as the model's encoder sees it (special tokens included)."""
    return [len(e.ids) for e in _tokenizer(model).encode_batch(texts, add_special_tokens=True)]


class Chunker:
    """Splits one document at a time (:meth:`split`) by ``chunking``."""

    def __init__(self, chunking: Chunking):
        self.chunking = chunking.validate()
        self.tok = _tokenizer(chunking.model)
        self.specials = self.tok.post_processor.num_special_tokens_to_add(False) if self.tok.post_processor else 0

    def _count(self, s: str) -> int:
        return len(self.tok.encode(s, add_special_tokens=False).ids) if s else 0

    def split(self, title: str, text: str) -> Tuple[str, List[Tuple[int, int]]]:
        """The title every passage carries ("" when it would take more than half the window: it
        stays in the metadata) and the passages' (start, end) character offsets in ``text``."""
        limit = self.chunking.tokens - self.specials
        title_n = self._count(title)
        if title and title_n > limit // 2:
            title, title_n = "", 0
        budget = limit - title_n
        spans = self.tok.encode(text, add_special_tokens=False).offsets
        if not spans:
            a = len(text) - len(text.lstrip())
            return title, [(a, len(text.rstrip()))] if text.strip() else []
        out: List[Tuple[int, int]] = []
        n, a = len(spans), 0
        while a < n:
            b = n if n - a <= budget else self._boundary(text, spans, a, a + budget)
            b = self._fit(title, text, spans, a, b, limit)
            out.append((spans[a][0], spans[b - 1][1]))
            if b >= n:
                break
            a = self._next_start(text, spans, a, b)
        return title, out

    def _gap(self, text: str, spans, i: int) -> str:
        """The characters between token i-1 and token i."""
        return text[spans[i - 1][1]:spans[i][0]]

    def _boundary(self, text: str, spans, a: int, h: int) -> int:
        """Where a passage starting at token ``a`` ends (exclusive), at most token ``h``: the last
        paragraph break in the window's second half, else sentence end, else space."""
        lo = a + max(1, (h - a) // 2)
        best = [None, None, None]  # paragraph, sentence, word
        for i in range(h, lo - 1, -1):
            gap = self._gap(text, spans, i)
            if not gap:
                continue  # inside a word, or punctuation stuck to it
            if best[2] is None:
                best[2] = i
            if best[1] is None and _SENTENCE_END.search(text[spans[i - 1][0]:spans[i - 1][1]]):
                best[1] = i
            if "\n\n" in gap or gap.count("\n") >= 2:
                best[0] = i
                break
        for b in best:
            if b is not None:
                return b
        return h  # one "word" longer than the window: cut between word-pieces

    def _fit(self, title: str, text: str, spans, a: int, b: int, limit: int) -> int:
        """``b``, moved back while the passage as encoded (title + text re-tokenised) exceeds the
        window: a cut inside a word can tokenise into more pieces than its share."""
        while b > a + 1 and self._count(contents(title, text[spans[a][0]:spans[b - 1][1]])) > limit:
            b -= 1
        return b

    def _next_start(self, text: str, spans, a: int, b: int) -> int:
        """The next passage's first token: within the last ``overlap`` tokens before ``b`` (so
        neighbours share at most that many), the first sentence start, else the first word start;
        ``b`` itself when there is neither; never before ``a + 1``."""
        ov = self.chunking.overlap
        if ov == 0:
            return b
        lo = max(b - ov, a + 1)
        words = [i for i in range(lo, b) if self._gap(text, spans, i)]
        for i in words:
            if _SENTENCE_END.search(text[spans[i - 1][0]:spans[i - 1][1]]):
                return i
        return words[0] if words else b


def chunk_document(chunker: Chunker, docid: str, title: str, text: str,
                   metadata: Optional[Dict[str, Any]]) -> Iterator[Tuple[str, str, str, Dict[str, Any]]]:
    """(passage id, title, text, metadata) of each passage of one document."""
    meta = dict(metadata or {})
    clash = [k for k in CHUNK_FIELDS if k in meta]
    if clash:
        raise InputError(f"document {docid[:80]!r}: metadata field {clash[0]!r} is the one a chunked passage "
                         f"sets ({', '.join(CHUNK_FIELDS)}); rename it or index without chunking")
    ptitle, spans = chunker.split(title, text)
    if not spans and title.strip():  # a title alone: one passage of it
        yield f"{docid}#0", title, "", dict(meta, document=docid, passage=0, start=0, end=0)
        return
    for n, (s, e) in enumerate(spans):
        yield f"{docid}#{n}", ptitle, text[s:e], dict(meta, document=docid, passage=n, start=s, end=e)


def document_of(docid: str, metadata: Optional[Dict[str, Any]]) -> str:
    """The document a passage belongs to: its metadata's ``document``, else its own id."""
    d = (metadata or {}).get("document")
    return d if isinstance(d, str) and d else docid
