"""What the BM25 kind adds to the command line, as data: its build options (`retr index`) and
its search options (`retr search`): k1 and b, and pseudo-relevance feedback (RM3, Rocchio) with
the flags of Pyserini's `python -m pyserini.search.lucene` (--bm25, --rm3, --rocchio,
--rocchio-use-negative) and of Anserini's SearchCollection (feedback terms and documents)."""
from __future__ import annotations

from retrieval.bm25.subindex import BM25Spec
from retrieval.kinds import KindOptions
from retrieval.options import B, K1, Option, Range, UsageError

COUNT = Range(1, 2 ** 31 - 1)
WEIGHT = Range(min=0)
#: the feedback flags' parameters -> retrieval.bm25.prf's names, and which method takes each
RM3_FLAGS = {"fb_terms": "fb_terms", "fb_docs": "fb_docs", "original_query_weight": "original_query_weight"}
ROCCHIO_FLAGS = {"fb_terms": "fb_terms", "fb_docs": "fb_docs", "rocchio_bottom_fb_terms": "bottom_fb_terms",
                 "rocchio_bottom_fb_docs": "bottom_fb_docs", "rocchio_alpha": "alpha", "rocchio_beta": "beta",
                 "rocchio_gamma": "gamma"}


class BM25Options(KindOptions):
    title = "BM25"
    options = (
        Option("--k1", type="float", range=K1, default=BM25Spec.k1, applies_to="index",
               help="Default BM25 k1 stored in the index."),
        Option("--b", type="float", range=B, default=BM25Spec.b, applies_to="index",
               help="Default BM25 b stored in the index."),
        Option("--docvectors", type="bool", applies_to="index",
               help="Also store Lucene document vectors (for feedback models)."),
        Option("--bm25", name="bm25_flag", type="bool", applies_to="search",
               help="Search the BM25 sub-index (Pyserini's flag; the same as --retriever bm25)."),
        Option("--k1", type="float", range=K1, applies_to="search", help="Override BM25 k1 for this search."),
        Option("--b", type="float", range=B, applies_to="search", help="Override BM25 b for this search."),
        Option("--rm3", type="bool", applies_to="search", help="RM3 pseudo-relevance feedback (Anserini's "
               "Rm3Reranker, as Pyserini's --rm3; needs an index built with --docvectors)."),
        Option("--rocchio", type="bool", applies_to="search", help="Rocchio pseudo-relevance feedback (Anserini's "
               "RocchioReranker, as Pyserini's --rocchio; needs --docvectors)."),
        Option("--fb-terms", type="int", range=COUNT, applies_to="search", help="Feedback terms [RM3, Rocchio: 10]."),
        Option("--fb-docs", type="int", range=COUNT, applies_to="search",
               help="Feedback documents, from the top [10; RM3 reads them among the first 50 hits, "
                    "Rocchio among the k hits, as Anserini]."),
        Option("--original-query-weight", type="float", range=B, applies_to="search",
               help="RM3: weight of the original query [0.5]."),
        Option("--rocchio-alpha", type="float", range=WEIGHT, applies_to="search",
               help="Rocchio: weight of the query [1]."),
        Option("--rocchio-beta", type="float", range=WEIGHT, applies_to="search",
               help="Rocchio: weight of the top documents' mean vector [0.75]."),
        Option("--rocchio-gamma", type="float", range=WEIGHT, applies_to="search",
               help="Rocchio: weight of the bottom documents' mean vector [0; 0.15 with "
                    "--rocchio-use-negative]."),
        Option("--rocchio-bottom-fb-terms", type="int", range=COUNT, applies_to="search",
               help="Rocchio: terms of the bottom documents [10]."),
        Option("--rocchio-bottom-fb-docs", type="int", range=COUNT, applies_to="search",
               help="Rocchio: bottom documents (the last of the k hits) [10]."),
        Option("--rocchio-use-negative", type="bool", applies_to="search",
               help="Rocchio: subtract the bottom documents (Pyserini's flag: gamma 0.15 unless given)."),
    )
    flags = {"k1": "--k1", "b": "--b", "prf": "--rm3/--rocchio", "store_docvectors": "`retr index --docvectors`"}

    def specs(self, values):
        return {"bm25": BM25Spec(values["k1"], values["b"], values["docvectors"])}

    def configure(self, values):
        return {"k1": values["k1"], "b": values["b"], "prf": self._prf(values)}

    def retriever(self, values):
        return "bm25" if values.get("bm25_flag") else None

    def tag(self, values):
        # feedback changes what runs: the tag says which (rm3, rocchio(...))
        spec = self._prf(values)
        return spec.spec() if spec is not None else None

    @staticmethod
    def _prf(values):
        """The feedback setting the flags ask for (None: none asked), or one error line."""
        from retrieval.bm25.prf import Feedback

        rm3, rocchio = values.get("rm3"), values.get("rocchio")
        if rm3 and rocchio:
            raise UsageError("--rm3 and --rocchio are alternatives; give one")
        given = {k for k in {**RM3_FLAGS, **ROCCHIO_FLAGS} if values.get(k) is not None}
        if values.get("rocchio_use_negative"):
            given.add("rocchio_use_negative")
        takes = RM3_FLAGS if rm3 else ROCCHIO_FLAGS if rocchio else {}
        stray = sorted(given - set(takes) - ({"rocchio_use_negative"} if rocchio else set()))
        if stray:
            flag = "--" + stray[0].replace("_", "-")
            if not (rm3 or rocchio):
                raise UsageError(f"{flag} needs --rm3 or --rocchio")
            raise UsageError(f"{flag} does not apply to {'--rm3' if rm3 else '--rocchio'}")
        if not (rm3 or rocchio):
            return None
        settings = {takes[k]: values[k] for k in given if k in takes}
        if rocchio and values.get("rocchio_use_negative"):
            settings["use_negative"] = True
            settings.setdefault("gamma", 0.15)
        return Feedback("rm3" if rm3 else "rocchio", **settings).validate()


OPTIONS = BM25Options()
