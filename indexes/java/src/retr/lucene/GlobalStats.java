/*
 * retr: the statistics of a sharded index (issue #30), summed over its shards, for scoring each
 * shard as one index holding every shard's documents would score (Elasticsearch's
 * DFS_QUERY_THEN_FETCH does the same).
 */
package retr.lucene;

import java.io.IOException;
import java.util.HashMap;

import org.apache.lucene.index.IndexReader;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.Term;
import org.apache.lucene.index.Terms;
import org.apache.lucene.index.TermsEnum;
import org.apache.lucene.search.CollectionStatistics;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.TermStatistics;
import org.apache.lucene.search.similarities.Similarity;

/**
 * The collection statistics of the "contents" field and the statistics of some terms, summed over
 * the shards of a sharded index. {@link #searcher} is an IndexSearcher over one shard's reader
 * whose {@code collectionStatistics} and {@code termStatistics} (the two methods Lucene's
 * TermWeight asks, and so BM25Similarity reads) answer these sums instead of the shard's own, so
 * the shard's documents get the scores one index of every shard's documents gives them.
 */
public final class GlobalStats {
  private final long maxDoc;
  private final long docCount;
  private final long sumTotalTermFreq;
  private final long sumDocFreq;
  private final HashMap<String, long[]> terms = new HashMap<>();

  /** terms[i] has document frequency df[i] and total term frequency ttf[i], summed over the shards. */
  public GlobalStats(long maxDoc, long docCount, long sumTotalTermFreq, long sumDocFreq, String[] terms,
      long[] df, long[] ttf) {
    this.maxDoc = maxDoc;
    this.docCount = docCount;
    this.sumTotalTermFreq = sumTotalTermFreq;
    this.sumDocFreq = sumDocFreq;
    for (int i = 0; i < terms.length; i++) {
      this.terms.put(terms[i], new long[] {df[i], ttf[i]});
    }
  }

  /**
   * One reader's statistics of {@code field} as IndexSearcher.collectionStatistics sums them over
   * its leaves: maxDoc, docCount, sumTotalTermFreq, sumDocFreq (zeros where no document has it).
   */
  public static long[] fieldStats(IndexReader reader, String field) throws IOException {
    long[] out = new long[] {reader.maxDoc(), 0, 0, 0};
    for (LeafReaderContext leaf : reader.leaves()) {
      Terms t = leaf.reader().terms(field);
      if (t == null) continue;
      out[1] += t.getDocCount();
      out[2] += t.getSumTotalTermFreq();
      out[3] += t.getSumDocFreq();
    }
    return out;
  }

  /** One reader's document frequency and total term frequency of each term, as pairs (df, ttf). */
  public static long[] termStats(IndexReader reader, String field, String[] terms) throws IOException {
    long[] out = new long[2 * terms.length];
    for (LeafReaderContext leaf : reader.leaves()) {
      Terms t = leaf.reader().terms(field);
      if (t == null) continue;
      TermsEnum te = t.iterator();
      for (int i = 0; i < terms.length; i++) {
        if (te.seekExact(new Term(field, terms[i]).bytes())) {
          out[2 * i] += te.docFreq();
          out[2 * i + 1] += te.totalTermFreq();
        }
      }
    }
    return out;
  }

  /** The summed (df, ttf) of a term, or null where these statistics do not hold it. */
  long[] term(String text) {
    return terms.get(text);
  }

  /** An IndexSearcher over {@code reader} that scores with these statistics for {@code field}. */
  IndexSearcher searcher(IndexReader reader, Similarity similarity, String field) {
    IndexSearcher s = new IndexSearcher(reader) {
      @Override
      public CollectionStatistics collectionStatistics(String f) throws IOException {
        if (!field.equals(f)) return super.collectionStatistics(f);
        if (docCount == 0) return null;
        return new CollectionStatistics(f, maxDoc, docCount, sumTotalTermFreq, sumDocFreq);
      }

      @Override
      public TermStatistics termStatistics(Term term, int df, long ttf) throws IOException {
        long[] g = field.equals(term.field()) ? terms.get(term.text()) : null;
        if (g == null || g[0] <= 0) return super.termStatistics(term, df, ttf);
        return new TermStatistics(term.bytes(), g[0], g[1]);
      }
    };
    s.setSimilarity(similarity);
    return s;
  }
}
