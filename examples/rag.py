"""Feed retr hits into a RAG prompt.

    make demo                                   # builds work/scifact (BM25)
    .venv/bin/retr index --corpus ../shared/datasets/scifact --index work/scifact --dense   # adds dense
    .venv/bin/python examples/rag.py work/scifact "Does aspirin lower the risk of colorectal cancer?"

Uses bm25+dense when the index has a dense sub-index, else bm25. Prints the
prompt a generator would receive; plug in the LLM client of your choice.
"""
import sys

import retrieval

PROMPT = """Answer the question using only the passages below. Cite passages as [n].

{passages}

Question: {question}
Answer:"""


def build_prompt(index_dir: str, question: str, k: int = 5) -> str:
    idx = retrieval.open_index(index_dir)
    spec = "bm25+dense" if "dense" in idx.retrievers else "bm25"
    hits = idx.search(question, k=k, retriever=spec)
    passages = "\n\n".join(f"[{h.rank}] {h.title}\n{h.text}" for h in hits)
    return PROMPT.format(passages=passages, question=question)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(build_prompt(sys.argv[1], sys.argv[2]))
