"""Request and response bodies of the HTTP API; FastAPI turns them into the OpenAPI document.

Numbers and booleans of requests are strict (``"k": "3"``, ``"k": true`` and ``"text_chars": false`` are
422, as the document says they are integers and booleans), and a string the server would refuse empty
says ``minLength`` in the document."""
from __future__ import annotations

from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from retrieval.kinds import PRIMARY

MAX_K = 1000
MAX_DEPTH = 10_000
MAX_QUERY_CHARS = 10_000
MAX_BATCH = 1_000
MAX_IDS = 1_000
MAX_WRITE_DOCS = 10_000
MAX_SPEC_CHARS = 200


def _utf8(s: Optional[str]) -> Optional[str]:
    if s is not None:
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return s


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DimselOptions(Strict):
    mode: Literal["none", "prf", "learned"] = Field(description="Query-aware dimension selection on dense retrievers.")
    alpha: Optional[float] = Field(None, gt=0, le=1, strict=True, description="Share of dimensions kept.")
    prf_k: Optional[int] = Field(None, ge=1, le=100, strict=True, description="Feedback documents (prf).")
    adaptive: bool = Field(False, strict=True, description="learned: a per-query count of dimensions.")


MAX_FB_TERMS = 1_000   # feedback terms and documents a request may ask for
MAX_FB_WEIGHT = 1_000.0


class Rm3Options(Strict):
    method: Literal["rm3"] = Field(description="RM3 (Anserini's Rm3Reranker, as Pyserini's set_rm3).")
    fb_terms: Optional[int] = Field(None, ge=1, le=MAX_FB_TERMS, strict=True, description="Expansion terms [10].")
    fb_docs: Optional[int] = Field(None, ge=1, le=MAX_FB_TERMS, strict=True,
                                   description="Feedback documents, among the first 50 hits [10].")
    original_query_weight: Optional[float] = Field(None, ge=0, le=1, strict=True,
                                                   description="Weight of the original query [0.5].")
    filter_terms: Optional[bool] = Field(None, strict=True,
                                         description="Only terms of 2 to 20 ASCII letters or digits [true].")


class RocchioOptions(Strict):
    method: Literal["rocchio"] = Field(description="Rocchio (Anserini's RocchioReranker, as Pyserini's set_rocchio).")
    fb_terms: Optional[int] = Field(None, ge=1, le=MAX_FB_TERMS, strict=True, description="Top documents' terms [10].")
    fb_docs: Optional[int] = Field(None, ge=1, le=MAX_FB_TERMS, strict=True, description="Top documents [10].")
    bottom_fb_terms: Optional[int] = Field(None, ge=1, le=MAX_FB_TERMS, strict=True,
                                           description="Bottom documents' terms (use_negative) [10].")
    bottom_fb_docs: Optional[int] = Field(None, ge=1, le=MAX_FB_TERMS, strict=True,
                                          description="Bottom documents (use_negative) [10].")
    alpha: Optional[float] = Field(None, ge=0, le=MAX_FB_WEIGHT, strict=True, description="Query weight [1].")
    beta: Optional[float] = Field(None, ge=0, le=MAX_FB_WEIGHT, strict=True, description="Top documents' weight [0.75].")
    gamma: Optional[float] = Field(None, ge=0, le=MAX_FB_WEIGHT, strict=True,
                                   description="Bottom documents' weight [0].")
    use_negative: Optional[bool] = Field(None, strict=True, description="Subtract the bottom documents [false].")


PRF_DOC = ("Pseudo-relevance feedback for this request: the query expanded from its own top documents by RM3 or "
           "Rocchio, on the retrievers that take it (BM25; the folder built with --docvectors). Unset parameters "
           "take Pyserini's defaults. A pipeline with no retriever that takes it is a 400.")
PrfOptions = Annotated[Union[Rm3Options, RocchioOptions], Field(discriminator="method", description=PRF_DOC)]


def prf_options(o) -> Optional[dict]:
    """A request's :data:`PrfOptions` as ``Index.search``'s ``prf`` (the parameters given; None: none)."""
    return None if o is None else o.model_dump(exclude_none=True)


FILTER_DOC = ("Metadata filter: {\"field\": value} for equality, {\"field\": {\"in\": [..]}}, "
              "{\"field\": {\"gte\": x, \"lt\": y}} (gt, gte, lt, lte), and {\"docid\": {\"in\": [..]}} as an id "
              "allow-list; all conditions must hold. The hits are the first k matching documents of the full "
              "ranking (fused pipelines: each member's filtered ranking, fused).")


PARTIAL_DOC = ("A sharded index (retr serve --sharded): when some shard has no live replica, answer with the other "
               "shards' hits, naming the missing shards in the response's \"partial\" (their documents are missing, "
               "and BM25 statistics are those of the shards that answered), instead of a 503 naming them. Ignored "
               "by an index that is not sharded.")


SOURCE_DOC = ("Why this pipeline ran: \"named\" (the request named it), else why it is the index's default: "
              "\"tuned\" (retr tune), \"untuned fusion\" (every sub-index fused) or \"only sub-index\".")


class SearchOptions(Strict):
    k: int = Field(10, ge=1, le=MAX_K, strict=True, description="Hits to return.")
    retriever: Optional[str] = Field(None, min_length=1, max_length=MAX_SPEC_CHARS,
                                     description="A sub-index (bm25, dense, deepct, ...) or a fused pipeline such "
                                                 "as bm25+dense or bm25+dense:rrf(k=60). Unset: the index's "
                                                 "default pipeline (its tuned one, else the untuned fusion of "
                                                 "every sub-index it holds; GET /v1/NAME names it).")
    fusion: Optional[str] = Field(None, min_length=1, max_length=MAX_SPEC_CHARS,
                                  description="Fusion for a+b retrievers, e.g. rrf(k=60), combmnz(norm=zscore).")
    depth: Optional[int] = Field(None, ge=1, le=MAX_DEPTH, strict=True, description="Candidates per fused retriever.")
    filter: Optional[Dict[str, Any]] = Field(None, description=FILTER_DOC)
    text: bool = Field(True, strict=True, description="Return title, text and metadata with each hit.")
    text_chars: Optional[int] = Field(None, ge=0, le=1_000_000, strict=True,
                                      description="Cut each hit's text to this many characters.")
    dimsel: Optional[DimselOptions] = None
    prf: Optional[PrfOptions] = None
    per_document: bool = Field(False, strict=True, description="One hit per document, its best passage (the passages "
                                                               "of a chunked document share its id in their "
                                                               "metadata); k documents. Not on a sharded index yet.")

    @field_validator("retriever", "fusion")
    @classmethod
    def _u(cls, v):
        return _utf8(v)


class SearchRequest(SearchOptions):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="Query text.")
    highlight: bool = Field(False, strict=True, description="Give each hit its highlights: the character spans of the words "
                                               "of its title and text that match the query's terms under the "
                                               "index's own analysis (the BM25 analyser: lower case, stop words, "
                                               "Porter stemming, so \"effects\" matches \"effect\"). Needs text.")
    ranks: bool = Field(False, strict=True, description="Give each hit its ranks: its rank in each retriever's own list "
                                           "(null: that list, cut at the fusion depth, lacks it).")
    allow_partial: bool = Field(False, strict=True, description=PARTIAL_DOC)

    @field_validator("query")
    @classmethod
    def _q(cls, v):
        return _utf8(v)


class ExplainRequest(Strict):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="Query text.")
    docid: str = Field(min_length=1, max_length=512, description="The document to explain.")
    retriever: Optional[str] = Field(None, min_length=1, max_length=MAX_SPEC_CHARS,
                                     description="A sub-index or a fused pipeline, as search takes it (unset: the "
                                                 "index's default pipeline).")
    fusion: Optional[str] = Field(None, min_length=1, max_length=MAX_SPEC_CHARS,
                                  description="Fusion for a+b retrievers.")
    depth: Optional[int] = Field(None, ge=1, le=MAX_DEPTH, strict=True,
                                 description="Candidates per retriever: the lists the document's ranks are looked "
                                             "up in and the fusion fuses [default: 100].")
    filter: Optional[Dict[str, Any]] = Field(None, description=FILTER_DOC)
    dimsel: Optional[DimselOptions] = None

    @field_validator("query", "docid", "retriever", "fusion")
    @classmethod
    def _u(cls, v):
        return _utf8(v)


class MemberExplanation(BaseModel):
    kind: str
    score: Optional[float] = Field(description="Its score of the document: the one in its list, else what it gives "
                                               "the document (null: its sub-index does not hold it).")
    rank: Optional[int] = Field(description="The document's rank in its list (null: not within the depth).")
    in_list: bool
    list_length: int
    explained: Optional[float] = Field(description="The parts added up (equal to score, to float precision).")
    formula: str = Field(description="How the parts make the score.")
    columns: List[List[str]] = Field(description="Keys of the parts worth a column in a table, with their headings.")
    parts: List[Dict[str, Any]] = Field(description="Each {label, value, ...}: a query term with its figures "
                                                    "(tf, df, idf, ...; query weight and stored impact), a "
                                                    "vector's inner product, a rounding step.")
    details: Dict[str, Any]
    notes: List[str]


class ExplainResponse(BaseModel):
    docid: str
    query: str
    retriever: str = Field(description="The pipeline as run, with its fusion spelled out.")
    depth: int
    filter: Optional[Dict[str, Any]] = None
    score: Optional[float] = Field(description="The score the search gives the document (fused, for a pipeline).")
    rank: Optional[int] = Field(description="Its rank (fused: among every document of the members' lists); null "
                                            "where it is not there.")
    retrievers: Dict[str, MemberExplanation]
    fusion: Optional[Dict[str, Any]] = Field(description="The fusion's arithmetic: per list its raw and normalised "
                                                         "scores, weights and contribution; the sum, multiplier, "
                                                         "fused score and rank. Null for one retriever.")
    notes: List[str]


class QueryItem(Strict):
    qid: str = Field(min_length=1, max_length=200)
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)

    @field_validator("qid", "query")
    @classmethod
    def _q(cls, v):
        return _utf8(v)


class BatchSearchRequest(SearchOptions):
    queries: List[Union[Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)], QueryItem]] = Field(min_length=1, max_length=MAX_BATCH,
                                                 description="Query texts (ids \"0\", \"1\", ...) or {qid, query}.")
    allow_partial: bool = Field(False, strict=True, description=PARTIAL_DOC)

    @field_validator("queries")
    @classmethod
    def _qs(cls, v):
        for q in v:
            if isinstance(q, str):
                if not q or len(q) > MAX_QUERY_CHARS:
                    raise ValueError(f"each query has 1 to {MAX_QUERY_CHARS} characters")
                _utf8(q)
        return v


class Highlights(BaseModel):
    title: List[List[int]] = Field(description="[start, end) character spans in the title, in order.")
    text: List[List[int]] = Field(description="[start, end) character spans in the text as returned (after "
                                              "text_chars), in order.")


class HitOut(BaseModel):
    docid: str
    rank: int
    score: float
    scores: Dict[str, Optional[float]] = Field(description="Each retriever's raw score (null: it did not return the document).")
    title: Optional[str] = None
    text: Optional[str] = None
    metadata: Optional[Dict[str, Any]] = None
    ranks: Optional[Dict[str, Optional[int]]] = Field(None, description="Only with \"ranks\": true in the search "
                                                                        "request: each retriever's rank of the "
                                                                        "document (null: not in its list).")
    highlights: Optional[Highlights] = Field(None, description="Only with \"highlight\": true in the search "
                                                               "request (null without text): where the query's terms "
                                                               "match, as character offsets (Unicode code points).")


class SearchResponse(BaseModel):
    index: str
    query: str
    retriever: str = Field(description="The pipeline as run, with its fusion spelled out.")
    pipeline_source: str = Field(description=SOURCE_DOC)
    k: int
    hits: List[HitOut]
    warnings: Optional[List[str]] = Field(None, description="Only where the filter names metadata fields no "
                                                         "document carries (they match nothing): what is wrong and "
                                                         "the fields there are.")
    partial: Optional[List[str]] = Field(None, description="Only where shards did not answer and the request allowed "
                                                         "it (allow_partial): the shards whose hits are missing.")


class QueryHits(BaseModel):
    qid: str
    hits: List[HitOut]


class BatchSearchResponse(BaseModel):
    index: str
    retriever: str
    pipeline_source: str = Field(description=SOURCE_DOC)
    k: int
    results: List[QueryHits]
    warnings: Optional[List[str]] = Field(None, description="Only where the filter names metadata fields no "
                                                         "document carries (they match nothing): what is wrong and "
                                                         "the fields there are.")
    partial: Optional[List[str]] = Field(None, description="Only where shards did not answer and the request allowed "
                                                         "it (allow_partial): the shards whose hits are missing.")


class DocumentIn(Strict):
    docid: str = Field(min_length=1, max_length=512, pattern=r"^\S+$")
    title: str = Field("", max_length=100_000)
    text: str = Field(max_length=10_000_000)
    metadata: Dict[str, Any] = Field(default_factory=dict)

    @field_validator("docid", "title", "text")
    @classmethod
    def _u(cls, v):
        return _utf8(v)


class DocumentOut(BaseModel):
    docid: str
    title: str
    text: str
    metadata: Dict[str, Any]


class IdsRequest(Strict):
    ids: List[Annotated[str, Field(min_length=1, max_length=512)]] = Field(min_length=1, max_length=MAX_IDS)

    @field_validator("ids")
    @classmethod
    def _ids(cls, v):
        for d in v:
            if len(d) > 512:
                raise ValueError("document ids have at most 512 characters")
            _utf8(d)
        return v


class DocumentsOut(BaseModel):
    documents: List[DocumentOut]
    missing: List[str]


class WriteRequest(Strict):
    documents: List[DocumentIn] = Field(min_length=1, max_length=MAX_WRITE_DOCS)


class WriteResult(BaseModel):
    index: str
    operation: str
    documents: int = Field(description="Documents added, updated or deleted.")
    total: int = Field(description="Documents in the index afterwards.")


class SubIndexOut(BaseModel):
    kind: str
    documents: Optional[int] = None
    config: Dict[str, Any] = Field(default_factory=dict)


class ShardOut(BaseModel):
    shard: str
    documents: int
    generation: int


class IndexOut(BaseModel):
    name: str
    documents: int
    generation: int = Field(0, description="The folder's generation these figures are of (each change makes one).")
    retrievers: Dict[str, SubIndexOut]
    pipelines: Dict[str, str] = Field(default_factory=dict, description="Tuned default fusion per retriever combination.")
    default_pipeline: Optional[Dict[str, str]] = Field(None, description="What a search that names no retriever runs: "
                                                                        "spec and source (tuned, untuned fusion, only "
                                                                        "sub-index).")
    fields: Dict[str, int] = Field(default_factory=dict, description="The metadata fields filters can name, with the "
                                                                    "number of documents carrying each (docid is "
                                                                    "always there).")
    writable: bool
    created_at: Optional[str] = None
    updated_at: Optional[str] = None
    shards: Optional[List[ShardOut]] = Field(None, description="A sharded index only: each shard's folder, documents "
                                                               "and generation (the index's generation is their sum).")


class IndexList(BaseModel):
    indexes: List[IndexOut]


class ErrorBody(BaseModel):
    status: int
    message: str


class ErrorResponse(BaseModel):
    error: ErrorBody


class Health(BaseModel):
    status: str


class Ready(BaseModel):
    ready: bool
    indexes: List[str]
