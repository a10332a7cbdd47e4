/*
 * retr: pseudo-relevance feedback (RM3, Rocchio) on a sharded index (issue #30), equal to one folder.
 */
package retr.lucene;

import java.io.IOException;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

import org.apache.lucene.document.Document;
import org.apache.lucene.index.BaseTermsEnum;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.Fields;
import org.apache.lucene.index.FilterLeafReader;
import org.apache.lucene.index.ImpactsEnum;
import org.apache.lucene.index.IndexReader;
import org.apache.lucene.index.IndexWriter;
import org.apache.lucene.index.IndexWriterConfig;
import org.apache.lucene.index.LeafReader;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.PostingsEnum;
import org.apache.lucene.index.Term;
import org.apache.lucene.index.TermVectors;
import org.apache.lucene.index.Terms;
import org.apache.lucene.index.TermsEnum;
import org.apache.lucene.search.BooleanClause;
import org.apache.lucene.search.BooleanQuery;
import org.apache.lucene.search.BoostQuery;
import org.apache.lucene.search.DocIdSetIterator;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.store.AlreadyClosedException;
import org.apache.lucene.store.ByteBuffersDirectory;
import org.apache.lucene.util.Bits;
import org.apache.lucene.util.BytesRef;

/**
 * RM3 and Rocchio on a sharded index, by Anserini's own rerankers, as one folder holding every
 * shard's documents runs them ({@link Feedback#expand}).
 *
 * <p>What the rerankers read (Anserini 1.7.1's Rm3Reranker and RocchioReranker): the first ranking
 * (its doc numbers, and for RM3 its raw scores), the term vectors of its first fbDocs documents
 * (Rocchio with useNegative: also its last bottomFbDocs), and of the reader only {@code numDocs()}
 * and {@code docFreq(contents:term)} of each term of those vectors (the rule that skips a term in
 * more than 10% of the documents). The query's own tokens come from the analyser. So the split is:
 *
 * <ul>
 *   <li>the router (Python, no index) merges the shards' first rankings (raw scores, ordered as one
 *       folder orders them), asks the shard that owns each feedback document for its term vector
 *       ({@link #vectors}) and every shard for its document count and the (df, ttf) of the vectors'
 *       terms ({@link GlobalStats#termStats}), and sums them;
 *   <li>one shard runs the reranker over a reader made of those global figures ({@link #expand}:
 *       {@link #reader} answers numDocs, docFreq and the term vectors, nothing else), and returns
 *       the expanded query as terms and boosts in clause order ({@link Boosted});
 *   <li>every shard searches that query ({@link #query}: the same clauses in the same order) with
 *       the global statistics ({@link HitSearcher#batchSearchBoostedWith}), and the router merges.
 * </ul>
 *
 * Shipping term vectors and figures rather than feature vectors keeps every float operation of the
 * feedback model inside Anserini's code, where one folder runs it, so the boosts are bit for bit
 * the folder's; the expansion is a pure function of what is shipped, so any shard may run it.
 */
public final class ShardFeedback {
  private ShardFeedback() {}

  /** Term vectors of some documents: document i has counts[i] terms (-1: none here), then all terms and frequencies in order. */
  public static final class Vectors {
    public final int[] counts;
    public final String[] terms;
    public final long[] freqs;

    Vectors(int[] counts, String[] terms, long[] freqs) {
      this.counts = counts;
      this.terms = terms;
      this.freqs = freqs;
    }
  }

  /** An expanded query: its clauses' terms and boosts, in clause order. */
  public static final class Boosted {
    public final String[] terms;
    public final float[] boosts;

    Boosted(String[] terms, float[] boosts) {
      this.terms = terms;
      this.boosts = boosts;
    }
  }

  /**
   * The "contents" term vector (terms in the vector's own order, each with its frequency in the
   * document) of the live document of each id in {@code hs}'s reader; count -1 where no live
   * document has the id or it stores no vector.
   */
  public static Vectors vectors(HitSearcher hs, String[] ids) throws IOException {
    IndexReader reader = hs.reader();
    if (!reader.tryIncRef()) {
      throw new AlreadyClosedException("this index reader was closed");
    }
    try {
      TermVectors tv = reader.termVectors();
      int[] counts = new int[ids.length];
      java.util.ArrayList<String> terms = new java.util.ArrayList<>();
      java.util.ArrayList<Long> freqs = new java.util.ArrayList<>();
      for (int i = 0; i < ids.length; i++) {
        int doc = liveDoc(reader, ids[i]);
        Terms t = doc < 0 ? null : tv.get(doc, HitSearcher.CONTENTS);
        if (t == null) {
          counts[i] = -1;
          continue;
        }
        TermsEnum te = t.iterator();
        int n = 0;
        for (BytesRef b = te.next(); b != null; b = te.next()) {
          terms.add(b.utf8ToString());
          freqs.add(te.totalTermFreq());
          n++;
        }
        counts[i] = n;
      }
      long[] f = new long[freqs.size()];
      for (int i = 0; i < f.length; i++) f[i] = freqs.get(i);
      return new Vectors(counts, terms.toArray(new String[0]), f);
    } finally {
      reader.decRef();
    }
  }

  /** The doc number of the live document whose id is {@code id} (its "id" postings), or -1. */
  static int liveDoc(IndexReader reader, String id) throws IOException {
    Term t = new Term(HitSearcher.ID, id);
    for (LeafReaderContext ctx : reader.leaves()) {
      PostingsEnum pe = ctx.reader().postings(t, PostingsEnum.NONE);
      if (pe == null) continue;
      Bits live = ctx.reader().getLiveDocs();
      for (int d = pe.nextDoc(); d != DocIdSetIterator.NO_MORE_DOCS; d = pe.nextDoc()) {
        if (live == null || live.get(d)) return ctx.docBase + d;
      }
    }
    return -1;
  }

  /**
   * The expanded query of {@code text} for a search of {@code k} hits, built by {@code f}'s
   * Anserini reranker from the whole index's first ranking ({@code ids}, raw {@code scores}, best
   * first, {@link Feedback#depth} deep), the term vectors of its positions ({@code counts[i]} terms
   * of position i, -1 where none is given, then {@code terms}/{@code freqs}), the index's
   * document count and the document frequencies {@code dfs} of {@code dfTerms}.
   */
  public static Boosted expand(Feedback f, HitSearcher hs, String text, int k, String[] ids, float[] scores,
      int[] counts, String[] terms, long[] freqs, String[] dfTerms, int[] dfs, int numDocs) throws IOException {
    return boosted(f.expandWith(hs, text, k, ids, scores, reader(numDocs, dfTerms, dfs, counts, terms, freqs)));
  }

  /** The clauses of a reranker's query (a BooleanQuery of boosted term queries on "contents"), in order. */
  static Boosted boosted(Query q) {
    if (!(q instanceof BooleanQuery)) {
      throw new IllegalStateException("a feedback query of another shape: " + q);
    }
    java.util.List<BooleanClause> cs = ((BooleanQuery) q).clauses();
    String[] terms = new String[cs.size()];
    float[] boosts = new float[cs.size()];
    for (int i = 0; i < terms.length; i++) {
      BooleanClause c = cs.get(i);
      Query inner = c.getQuery();
      if (c.getOccur() != BooleanClause.Occur.SHOULD || !(inner instanceof BoostQuery)
          || !(((BoostQuery) inner).getQuery() instanceof TermQuery)) {
        throw new IllegalStateException("a feedback query of another shape: " + q);
      }
      Term t = ((TermQuery) ((BoostQuery) inner).getQuery()).getTerm();
      if (!HitSearcher.CONTENTS.equals(t.field())) {
        throw new IllegalStateException("a feedback query of another field: " + q);
      }
      terms[i] = t.text();
      boosts[i] = ((BoostQuery) inner).getBoost();
    }
    return new Boosted(terms, boosts);
  }

  /** The query the rerankers build: a SHOULD clause per term, BoostQuery(TermQuery(contents:term), boost), in order. */
  public static Query query(String[] terms, float[] boosts) {
    return query(terms, boosts, 0, terms.length);
  }

  static Query query(String[] terms, float[] boosts, int from, int to) {
    BooleanQuery.Builder b = new BooleanQuery.Builder();
    for (int i = from; i < to; i++) {
      b.add(new BoostQuery(new TermQuery(new Term(HitSearcher.CONTENTS, terms[i])), boosts[i]),
          BooleanClause.Occur.SHOULD);
    }
    return b.build();
  }

  // -- the reader the reranker reads -----------------------------------------------------------

  private static LeafReader empty;

  /** A leaf of one empty document (what a FilterLeafReader needs beneath it; never read). */
  private static synchronized LeafReader empty() throws IOException {
    if (empty == null) {
      ByteBuffersDirectory dir = new ByteBuffersDirectory();
      try (IndexWriter w = new IndexWriter(dir, new IndexWriterConfig())) {
        w.addDocument(new Document());
      }
      empty = DirectoryReader.open(dir).leaves().get(0).reader();
    }
    return empty;
  }

  /**
   * A reader that answers what the rerankers read as the whole index would: {@code numDocs()},
   * {@code docFreq(contents:t)} (from {@code dfTerms}/{@code dfs}; 0 for other terms) and
   * {@code termVectors().get(i)} (position i's vector, from {@code counts}/{@code terms}/{@code freqs}).
   */
  static LeafReader reader(int numDocs, String[] dfTerms, int[] dfs, int[] counts, String[] terms, long[] freqs)
      throws IOException {
    Map<String, Integer> df = new HashMap<>();
    for (int i = 0; i < dfTerms.length; i++) df.put(dfTerms[i], dfs[i]);
    Fields[] vectors = new Fields[counts.length];
    int at = 0;
    for (int i = 0; i < counts.length; i++) {
      if (counts[i] < 0) continue;
      vectors[i] = new VectorFields(terms, freqs, at, at + counts[i]);
      at += counts[i];
    }
    return new GlobalReader(empty(), numDocs, df, vectors);
  }

  private static final class GlobalReader extends FilterLeafReader {
    private final int numDocs;
    private final Map<String, Integer> df;
    private final Fields[] vectors;

    GlobalReader(LeafReader in, int numDocs, Map<String, Integer> df, Fields[] vectors) {
      super(in);
      this.numDocs = numDocs;
      this.df = df;
      this.vectors = vectors;
    }

    @Override
    public int numDocs() {
      return numDocs;
    }

    @Override
    public Terms terms(String field) {
      return HitSearcher.CONTENTS.equals(field) ? new DfTerms(df) : null;
    }

    @Override
    public TermVectors termVectors() {
      return new TermVectors() {
        @Override
        public Fields get(int doc) {
          return doc >= 0 && doc < vectors.length ? vectors[doc] : null;
        }
      };
    }

    @Override
    public Fields getTermVectors(int doc) {
      return doc >= 0 && doc < vectors.length ? vectors[doc] : null;
    }

    @Override
    public CacheHelper getCoreCacheHelper() {
      return null;
    }

    @Override
    public CacheHelper getReaderCacheHelper() {
      return null;
    }
  }

  /**
   * A terms enum that can only step or seek exactly: what the rerankers and LeafReader.docFreq call.
   * The rest of TermsEnum is never reached by them and says so.
   */
  private abstract static class ExactTermsEnum extends BaseTermsEnum {
    @Override
    public SeekStatus seekCeil(BytesRef text) {
      throw new UnsupportedOperationException();
    }

    @Override
    public void seekExact(long ord) {
      throw new UnsupportedOperationException();
    }

    @Override
    public long ord() {
      throw new UnsupportedOperationException();
    }

    @Override
    public long totalTermFreq() {
      throw new UnsupportedOperationException();
    }

    @Override
    public PostingsEnum postings(PostingsEnum reuse, int flags) {
      throw new UnsupportedOperationException();
    }

    @Override
    public ImpactsEnum impacts(int flags) {
      throw new UnsupportedOperationException();
    }
  }

  /** Terms with frequencies and nothing else (no offsets, positions or payloads). */
  private abstract static class FreqTerms extends Terms {
    @Override
    public boolean hasFreqs() {
      return true;
    }

    @Override
    public boolean hasOffsets() {
      return false;
    }

    @Override
    public boolean hasPositions() {
      return false;
    }

    @Override
    public boolean hasPayloads() {
      return false;
    }
  }

  /** The "contents" terms as far as LeafReader.docFreq reads them: seekExact, then docFreq. */
  private static final class DfTerms extends FreqTerms {
    private final Map<String, Integer> df;

    DfTerms(Map<String, Integer> df) {
      this.df = df;
    }

    @Override
    public TermsEnum iterator() {
      return new ExactTermsEnum() {
        private BytesRef term;
        private int freq;

        @Override
        public boolean seekExact(BytesRef text) {
          Integer n = df.get(text.utf8ToString());
          term = n == null ? null : BytesRef.deepCopyOf(text);
          freq = n == null ? 0 : n;
          return n != null && n > 0;
        }

        @Override
        public BytesRef term() {
          return term;
        }

        @Override
        public int docFreq() {
          return freq;
        }

        @Override
        public BytesRef next() {
          return null;
        }
      };
    }

    @Override
    public long size() {
      return df.size();
    }

    @Override
    public long getSumTotalTermFreq() {
      return -1;
    }

    @Override
    public long getSumDocFreq() {
      return -1;
    }

    @Override
    public int getDocCount() {
      return -1;
    }
  }

  /** One document's term vector: its "contents" terms in the shipped (the vector's own) order. */
  private static final class VectorFields extends Fields {
    private final String[] terms;
    private final long[] freqs;
    private final int from;
    private final int to;

    VectorFields(String[] terms, long[] freqs, int from, int to) {
      this.terms = terms;
      this.freqs = freqs;
      this.from = from;
      this.to = to;
    }

    @Override
    public Iterator<String> iterator() {
      return Collections.singletonList(HitSearcher.CONTENTS).iterator();
    }

    @Override
    public int size() {
      return 1;
    }

    @Override
    public Terms terms(String field) {
      if (!HitSearcher.CONTENTS.equals(field)) return null;
      return new FreqTerms() {
        @Override
        public TermsEnum iterator() {
          return new ExactTermsEnum() {
            private int i = from - 1;

            @Override
            public BytesRef next() {
              return ++i < to ? new BytesRef(terms[i]) : null;
            }

            @Override
            public BytesRef term() {
              return i >= from && i < to ? new BytesRef(terms[i]) : null;
            }

            @Override
            public long totalTermFreq() {
              return freqs[i];
            }

            @Override
            public int docFreq() {
              return 1;
            }

            @Override
            public long ord() {
              return i - from;
            }
          };
        }

        @Override
        public long size() {
          return to - from;
        }

        @Override
        public long getSumTotalTermFreq() {
          long s = 0;
          for (int j = from; j < to; j++) s += freqs[j];
          return s;
        }

        @Override
        public long getSumDocFreq() {
          return to - from;
        }

        @Override
        public int getDocCount() {
          return 1;
        }
      };
    }
  }
}
