/*
 * retr: Lucene search whose hits cross into Python in bulk.
 *
 * Compiled with `javac --release 17` against the Anserini fat jar (`make java`); only Lucene's own
 * classes are used at compile time, because javac 17 cannot read Anserini's Java 21 class files.
 * The Anserini classes it needs (the bag-of-words query generator, the impact similarity, the
 * default analyser) are looked up by name at run time, so queries are built by Anserini's own code.
 */
package retr.lucene;

import java.io.Closeable;
import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.core.WhitespaceAnalyzer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.analysis.tokenattributes.OffsetAttribute;
import org.apache.lucene.index.BinaryDocValues;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexReader;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.MultiBits;
import org.apache.lucene.index.MultiDocValues;
import org.apache.lucene.index.NumericDocValues;
import org.apache.lucene.index.PostingsEnum;
import org.apache.lucene.index.Term;
import org.apache.lucene.index.TermState;
import org.apache.lucene.index.Terms;
import org.apache.lucene.index.TermsEnum;
import org.apache.lucene.search.BooleanClause;
import org.apache.lucene.search.BooleanQuery;
import org.apache.lucene.search.BoostQuery;
import org.apache.lucene.search.CollectionStatistics;
import org.apache.lucene.search.DocIdSetIterator;
import org.apache.lucene.search.Explanation;
import org.apache.lucene.search.FieldComparator;
import org.apache.lucene.search.FieldComparatorSource;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.LeafFieldComparator;
import org.apache.lucene.search.MatchNoDocsQuery;
import org.apache.lucene.search.Pruning;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.Scorable;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.Sort;
import org.apache.lucene.search.SortField;
import org.apache.lucene.search.TermQuery;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.similarities.BM25Similarity;
import org.apache.lucene.search.similarities.Similarity;
import org.apache.lucene.store.AlreadyClosedException;
import org.apache.lucene.store.FSDirectory;
import org.apache.lucene.util.Bits;
import org.apache.lucene.util.FixedBitSet;
import org.apache.lucene.util.BytesRef;

/**
 * Searches one opened Lucene index as Anserini's SimpleSearcher / SimpleImpactSearcher do: the same
 * query (built by Anserini's generator), the same similarity, the same order (score descending, ties
 * by the collection docid) and the same score rounding and tie adjustment; and returns each query's
 * hits as one byte array: n little-endian int32 Lucene doc numbers, then n float32 scores.
 *
 * <p>Ids. Anserini loads the stored document of every hit to read its id; here the id of doc number
 * d is {@code docids()[d]}, read once from the "id" doc values of the reader this searcher holds, so
 * the map belongs to that reader (a reopened index is a new HitSearcher, see {@link #reopen}).
 * Anserini breaks score ties with Lucene's STRING_VAL sort on those doc values (unsigned byte order
 * of the UTF-8 ids, then doc number); each document here has its rank in that order, as an int.
 *
 * <p>Two ways to the same top k. (1) Lucene's own: IndexSearcher.search with the sort (score, id
 * rank) and rescoring, what Anserini runs. (2) Exhaustive term at a time: every posting of every
 * query term is scored with the SimScorer Lucene's TermWeight builds (same similarity, statistics,
 * boost, norm), summed per document in a double and rounded to float once, as Lucene's disjunction
 * scorers do (they also sum in a double); then the top k by (score, id rank) are selected. The sum
 * of a query's float term scores is exact in a double, so the order in which either side adds them
 * cannot change the float, as long as the scores span fewer than about 29 - log2(terms) binary
 * orders of magnitude (BM25 term scores of ordinary queries span far less; impact scores are
 * integers). (2) does no priority-queue work per hit, so it wins when k is a large share of the
 * matching documents; (1) wins when Lucene can skip most postings (small k, large index). {@link
 * #setExhaustiveShare} sets where the switch lies; both give the same answers.
 */
public final class HitSearcher implements Closeable {
  public static final String ID = "id";
  public static final String CONTENTS = "contents";
  private static final String GENERATOR = "io.anserini.search.query.BagOfWordsQueryGenerator";
  private static final String IMPACT_SIMILARITY = "io.anserini.search.similarity.ImpactSimilarity";
  private static final String DEFAULT_ANALYZER_HOLDER = "io.anserini.index.IndexCollection";

  // Anserini's bag-of-words queries have a clause per distinct term; Lucene's default cap (1,024
  // clauses, JVM-wide) would refuse a long query, so the cap is lifted for every searcher in the JVM.
  static {
    IndexSearcher.setMaxClauseCount(Integer.MAX_VALUE);
  }

  private final IndexReader reader;
  private final boolean ownsReader;
  private final String[] docids;
  /** rank[d]: position of doc d in (id bytes, doc number) order; docByRank is its inverse. */
  private final int[] rank;
  private final int[] docByRank;
  /** Per leaf: the "contents" norms as bytes (null: the field has no norms, Lucene then uses 1). */
  private final byte[][] norms;
  private final boolean normsFit;
  /** Lucene 8 indexes: Anserini then keeps Lucene's own order (doc number tie break) and unrounded scores. */
  private final boolean lucene8;
  private final Sort sort;
  private final Object generator;
  private final Method textQuery;
  private final Method weightQuery;
  private final ThreadLocal<Scratch> scratch;
  /** The IndexSearcher with the similarity in use, and what the exhaustive path derives from it. */
  private volatile Scoring scoring;
  /** Each query term's per-leaf states and statistics, looked up in the terms dictionary once per reader. */
  private final ConcurrentHashMap<String, TermInfo> terms = new ConcurrentHashMap<>();
  private volatile Analyzer analyzer;
  /** Pseudo-relevance feedback (RM3, Rocchio) applied to text searches, or null. */
  private volatile Feedback feedback;
  /**
   * Exhaustive scoring when k >= share * (postings of the query's terms); 0: always, +inf: never.
   * The default is where the two paths cross in benchmarks/bench_bm25.py's measurement of both
   * (benchmarks/results/bm25.md, "Which path"): the exhaustive path costs a few ns per posting whatever k
   * is, Lucene's collector skips postings but pays per collected hit, and with a 100k-passage index
   * Lucene is faster only for small k over many postings (k=10 above about 20k postings, k=100 from
   * about 200k).
   */
  public static final double DEFAULT_EXHAUSTIVE_SHARE = 1.0 / 2048;

  private volatile double exhaustiveShare = DEFAULT_EXHAUSTIVE_SHARE;

  /** Opens the index's latest commit; the reader is closed with this searcher. */
  public static HitSearcher open(String path) throws IOException, ReflectiveOperationException {
    return new HitSearcher(DirectoryReader.open(FSDirectory.open(Paths.get(path))), true);
  }

  /** Searches {@code reader} (an opened commit or a near-real-time reader); closes it with this searcher iff {@code owns}. */
  public HitSearcher(IndexReader reader, boolean owns) throws IOException, ReflectiveOperationException {
    this.reader = reader;
    this.ownsReader = owns;
    int maxDoc = reader.maxDoc();
    this.docids = new String[maxDoc];
    this.rank = new int[maxDoc];
    this.docByRank = new int[maxDoc];
    rankIds(reader, docids, rank, docByRank);
    List<LeafReaderContext> leaves = reader.leaves();
    this.norms = new byte[leaves.size()][];
    boolean fit = true;
    for (LeafReaderContext ctx : leaves) {
      NumericDocValues nv = ctx.reader().getNormValues(CONTENTS);
      if (nv == null) continue;
      byte[] b = new byte[ctx.reader().maxDoc()];
      for (int d = nv.nextDoc(); d != DocIdSetIterator.NO_MORE_DOCS; d = nv.nextDoc()) {
        long v = nv.longValue();
        if (v != (byte) v) fit = false;
        b[d] = (byte) v;
      }
      norms[ctx.ord] = b;
    }
    this.normsFit = fit;
    this.lucene8 = !reader.toString().contains("lucene.version=9");
    this.sort = new Sort(SortField.FIELD_SCORE, new SortField(ID, new RankSource(rank)));
    Class<?> g = Class.forName(GENERATOR);
    this.generator = g.getConstructor().newInstance();
    this.textQuery = g.getMethod("buildQuery", String.class, Analyzer.class, String.class);
    this.weightQuery = g.getMethod("buildQuery", String.class, Map.class);
    this.analyzer = (Analyzer) Class.forName(DEFAULT_ANALYZER_HOLDER).getField("DEFAULT_ANALYZER").get(null);
    int maxLeafDoc = 0;
    for (LeafReaderContext ctx : leaves) maxLeafDoc = Math.max(maxLeafDoc, ctx.reader().maxDoc());
    final int scratchSize = maxLeafDoc;
    final int leafCount = leaves.size();
    this.scratch = ThreadLocal.withInitial(() -> new Scratch(scratchSize, leafCount));
    setBM25(0.9f, 0.4f);
  }

  /** BM25 with Lucene's BM25Similarity, as SimpleSearcher.set_bm25. */
  public void setBM25(float k1, float b) {
    setSimilarity(new BM25Similarity(k1, b));
  }

  /** Anserini's ImpactSimilarity (the stored term frequency is the score), as SimpleImpactSearcher. */
  public void setImpact() throws ReflectiveOperationException {
    setSimilarity((Similarity) Class.forName(IMPACT_SIMILARITY).getConstructor().newInstance());
  }

  public void setSimilarity(Similarity s) {
    IndexSearcher next = new IndexSearcher(reader);
    next.setSimilarity(s);
    try {
      scoring = new Scoring(next, next.collectionStatistics(CONTENTS));
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  public void setAnalyzer(Analyzer a) {
    analyzer = a;
  }

  /** Pre-tokenised text: split on whitespace only (Anserini's choice for pretokenized indexes). */
  public void setWhitespaceAnalyzer() {
    analyzer = new WhitespaceAnalyzer();
  }

  /**
   * Score exhaustively when k is at least {@code share} times the number of postings of the
   * query's terms (0: always; Double.POSITIVE_INFINITY: never, always Lucene's collector).
   */
  public void setExhaustiveShare(double share) {
    exhaustiveShare = share;
  }

  /** Our id of each Lucene doc number of this reader (null where a document has no id). */
  public String[] docids() {
    return docids;
  }

  public int numDocs() {
    return reader.numDocs();
  }

  public int maxDoc() {
    return reader.maxDoc();
  }

  /** The reader searched (for {@link BenchSearcher}). */
  IndexReader reader() {
    return reader;
  }

  /** The IndexSearcher with the similarity in use (for {@link BenchSearcher}). */
  IndexSearcher indexSearcher() {
    return scoring.searcher;
  }

  /** For {@link Feedback}: the analyser, the similarity, whether it searches a Lucene 8 index. */
  Analyzer analyzer() {
    return analyzer;
  }

  Similarity similarity() {
    return scoring.searcher.getSimilarity();
  }

  boolean lucene8() {
    return lucene8;
  }

  /** Text through the analyser into Anserini's bag-of-words query (a term's boost is its count). */
  public byte[] search(String text, int k) throws IOException {
    return run(searchQuery(text, k), k).pack();
  }

  /**
   * Search text with pseudo-relevance feedback ({@link Feedback}: RM3 or Rocchio, Anserini's own),
   * or without (null). Refused where the index stores no term vectors, which both read.
   */
  public void setFeedback(Feedback f) {
    if (f != null && !Feedback.hasTermVectors(reader, CONTENTS)) {
      throw new IllegalArgumentException("the index stores no document vectors");
    }
    feedback = f;
  }

  /** The query a text search of k hits runs: the text's query, expanded where feedback is set. */
  public Query searchQuery(String text, int k) throws IOException {
    return searchQuery(text, k, feedback);
  }

  /** {@link #searchQuery} with feedback {@code f} for this query alone (null: none), whatever is set. */
  public Query searchQuery(String text, int k, Feedback f) throws IOException {
    return f == null ? textQuery(text) : f.expand(this, text, k);
  }

  /** {@link #search} with feedback {@code f} for this call alone (null: none): a per-request setting. */
  public byte[] search(String text, int k, Feedback f) throws IOException {
    return run(searchQuery(text, k, f), k).pack();
  }

  /** {@link #batchSearch} with feedback {@code f} for this call alone (null: none). */
  public Batch batchSearch(String[] texts, int k, int threads, Feedback f) {
    return batch(texts.length, k, threads, i -> searchQuery(texts[i], k, f));
  }

  /** Whether this reader stores the term vectors feedback reads. */
  public boolean storesVectors() {
    return Feedback.hasTermVectors(reader, CONTENTS);
  }

  /** Integer term weights as SimpleImpactSearcher.search(Map&lt;String, Integer&gt;, k) takes them. */
  public byte[] searchWeighted(String[] terms, int[] weights, int k) throws IOException {
    return run(weightQuery(terms, weights, 0, terms.length), k).pack();
  }

  /**
   * The doc numbers of this reader whose id is one of {@code ids}, as a bitset for
   * {@link #searchAllowed} (deleted documents may be set too: the search skips them). One pass
   * over the doc numbers; the caller keeps the bitset for as long as it searches this reader.
   */
  public FixedBitSet allowedDocs(String[] ids) {
    HashSet<String> want = new HashSet<>(Arrays.asList(ids));
    FixedBitSet bits = new FixedBitSet(Math.max(1, docids.length));
    for (int d = 0; d < docids.length; d++) {
      if (docids[d] != null && want.contains(docids[d])) bits.set(d);
    }
    return bits;
  }

  /**
   * The query's top k among the documents of {@code allowed} (from {@link #allowedDocs}), ranked
   * and scored as an unfiltered search ranks and scores them, through the exhaustive path: only
   * allowed documents are accumulated, so a small filter costs the query's postings and nothing
   * else. Null where that path does not apply (another query shape, norms beyond a byte); the
   * caller then filters through Lucene (a FILTER clause).
   */
  public byte[] searchAllowed(Query q, int k, FixedBitSet allowed) throws IOException {
    Hits h = run(q, k, allowed);
    return h == null ? null : h.pack();
  }

  /** Many texts at once on {@code threads} Java threads; one array back for all of them. */
  public Batch batchSearch(String[] texts, int k, int threads) {
    return batch(texts.length, k, threads, i -> searchQuery(texts[i], k));
  }

  /**
   * Many weighted queries: query i has the terms/weights at positions offsets[i] .. offsets[i+1]-1
   * (offsets has one entry more than there are queries).
   */
  public Batch batchSearchWeighted(String[] terms, int[] weights, int[] offsets, int k, int threads) {
    return batch(offsets.length - 1, k, threads, i -> weightQuery(terms, weights, offsets[i], offsets[i + 1]));
  }

  /**
   * The query's mass: the most its term scorers can give one document, summed over the query's
   * terms that some document has. Each term is scored by the SimScorer its TermWeight uses, at an
   * unbounded frequency and the shortest length; for BM25 that is the term's boost times its idf,
   * so a hit's score over the mass is the share of the query it matched. 0 when no term occurs;
   * NaN for a query that is not a flat bag of terms.
   */
  public double queryMass(String text) throws IOException {
    return queryMass(this.scoring, null, text);
  }

  /** {@link #queryMass} under {@code scoring}, with the document frequencies of {@code g} where given. */
  private double queryMass(Scoring scoring, GlobalStats g, String text) throws IOException {
    List<Clause> cs = clauses(scoring.searcher.rewrite(textQuery(text)));
    if (cs == null) return Double.NaN;
    double mass = 0;
    for (Clause c : cs) {
      long[] gt = g == null ? null : g.term(c.term.text());
      TermInfo ti = gt == null ? termInfo(c.term) : new TermInfo(null, (int) gt[0], gt[1]);
      if (ti.df == 0) continue;  // no document has it, so no scorer either
      mass += scoring.scorer(c, ti).score(Float.MAX_VALUE, 1L);
    }
    return mass;
  }

  /** {@link #queryMass} of each text. */
  public double[] queryMasses(String[] texts) throws IOException {
    double[] out = new double[texts.length];
    for (int i = 0; i < texts.length; i++) out[i] = queryMass(texts[i]);
    return out;
  }

  // -- a shard of a sharded index (GlobalStats): statistics out, searches with the summed ones in ----

  /** This reader's maxDoc, docCount, sumTotalTermFreq and sumDocFreq of the contents field. */
  public long[] fieldStats() throws IOException {
    return GlobalStats.fieldStats(reader, CONTENTS);
  }

  /** This reader's (df, ttf) of each term of the contents field, as pairs. */
  public long[] termStats(String[] terms) throws IOException {
    return GlobalStats.termStats(reader, CONTENTS, terms);
  }

  private Scoring scoringWith(GlobalStats g) {
    if (g == null) return this.scoring;
    IndexSearcher s = g.searcher(reader, this.scoring.searcher.getSimilarity(), CONTENTS);
    try {
      return new Scoring(s, s.collectionStatistics(CONTENTS));
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** {@link #batchSearch} scored with {@code g} (null: this reader's statistics), raw float scores. */
  public Batch batchSearchWith(String[] texts, int k, int threads, GlobalStats g) {
    return batch(texts.length, k, threads, i -> textQuery(texts[i]), scoringWith(g), false);
  }

  /** {@link #batchSearchWeighted} scored with {@code g} (null: this reader's statistics), raw float scores. */
  public Batch batchSearchWeightedWith(String[] terms, int[] weights, int[] offsets, int k, int threads,
      GlobalStats g) {
    return batch(offsets.length - 1, k, threads, i -> weightQuery(terms, weights, offsets[i], offsets[i + 1]),
        scoringWith(g), false);
  }

  /**
   * Pseudo-relevance feedback on a sharded index ({@link ShardFeedback}): expanded queries, query i
   * the clauses at offsets[i] .. offsets[i+1]-1 ({@link ShardFeedback#query}: as Anserini's reranker
   * builds them), scored with {@code g}, raw float scores.
   */
  public Batch batchSearchBoostedWith(String[] terms, float[] boosts, int[] offsets, int k, int threads,
      GlobalStats g) {
    return batch(offsets.length - 1, k, threads, i -> ShardFeedback.query(terms, boosts, offsets[i], offsets[i + 1]),
        scoringWith(g), false);
  }

  /** {@link #searchAllowed} scored with {@code g}, raw float scores; null where the exhaustive path does not apply. */
  public byte[] searchAllowedWith(Query q, int k, FixedBitSet allowed, GlobalStats g) throws IOException {
    Hits h = run(scoringWith(g), q, k, allowed, false);
    return h == null ? null : h.pack();
  }

  /** Any query (a FILTER-clause search) scored with {@code g}, raw float scores. */
  public byte[] runWith(Query q, int k, GlobalStats g) throws IOException {
    return run(scoringWith(g), q, k, null, false).pack();
  }

  /** {@link #queryMasses} with the statistics of {@code g}. */
  public double[] queryMassesWith(String[] texts, GlobalStats g) throws IOException {
    Scoring sc = scoringWith(g);
    double[] out = new double[texts.length];
    for (int i = 0; i < texts.length; i++) out[i] = queryMass(sc, g, texts[i]);
    return out;
  }

  /**
   * Where the query's terms occur in each of {@code texts}, for highlighting: the query and each
   * text through the analyser this searcher builds its queries with (so "effects" in a text matches
   * the query's "effect" under Porter stemming), and the character offsets (UTF-16 units, as Java
   * strings count) of every token of a text whose term is one of the query's. One array: per text
   * the number of its spans, then every text's spans as (start, end) pairs, in order.
   */
  public int[] highlights(String query, String[] texts) throws IOException {
    Analyzer a = analyzer;
    HashSet<String> want = new HashSet<>();
    try (TokenStream ts = a.tokenStream(CONTENTS, query)) {
      CharTermAttribute term = ts.addAttribute(CharTermAttribute.class);
      ts.reset();
      while (ts.incrementToken()) want.add(term.toString());
      ts.end();
    }
    int[] counts = new int[texts.length];
    List<int[]> spans = new ArrayList<>();
    for (int i = 0; i < texts.length; i++) {
      if (want.isEmpty() || texts[i] == null || texts[i].isEmpty()) continue;
      try (TokenStream ts = a.tokenStream(CONTENTS, texts[i])) {
        CharTermAttribute term = ts.addAttribute(CharTermAttribute.class);
        OffsetAttribute off = ts.addAttribute(OffsetAttribute.class);
        ts.reset();
        while (ts.incrementToken()) {
          if (want.contains(term.toString())) {
            spans.add(new int[] {off.startOffset(), off.endOffset()});
            counts[i]++;
          }
        }
        ts.end();
      }
    }
    int[] out = new int[texts.length + 2 * spans.size()];
    System.arraycopy(counts, 0, out, 0, texts.length);
    int j = texts.length;
    for (int[] sp : spans) {
      out[j++] = sp[0];
      out[j++] = sp[1];
    }
    return out;
  }

  /**
   * Lucene's own explanations (IndexSearcher.explain, under the similarity in use) of the score of
   * the live document whose id is {@code id} for {@code q}: element 0 explains the whole query, and
   * for a flat bag of terms element i + 1 explains its i-th clause alone ({@link #clauseTerms}: the
   * clause's term query with the clause's boost), matched or not. Null where no live document has
   * that id. The clauses' scores are the terms the search sums for the document (in a double, then
   * rounded to float once), before Anserini's rounding of the sum to 4 decimals.
   */
  public Explanation[] explain(Query q, String id) throws IOException {
    return explainWith(q, id, null);  // null: this reader's own statistics (scoringWith)
  }

  /**
   * {@link #explain} scored with {@code g} (null: this reader's statistics): Lucene's own explanations
   * under the summed statistics of a sharded index (issue #30), the same IndexSearcher override the
   * {@code ...With} searches score with, so that each term's df, N, avgdl and idf are the whole
   * index's and the figures add up to the score the sharded search gives the document. Only
   * this shard's reader is read (the document is one of its live ones); the explanation's
   * "in N" names this shard's own doc number.
   */
  public Explanation[] explainWith(Query q, String id, GlobalStats g) throws IOException {
    if (!reader.tryIncRef()) {
      throw new AlreadyClosedException("this index reader was closed");
    }
    try {
      IndexSearcher s = scoringWith(g).searcher;
      int doc = liveDoc(id);
      if (doc < 0) return null;
      List<Clause> cs = clauses(s.rewrite(q));
      int m = cs == null ? 0 : cs.size();
      Explanation[] out = new Explanation[m + 1];
      out[0] = s.explain(q, doc);
      for (int i = 0; i < m; i++) {
        Clause c = cs.get(i);
        Query tq = new TermQuery(c.term);
        out[i + 1] = s.explain(c.boost == 1f ? tq : new BoostQuery(tq, c.boost), doc);
      }
      return out;
    } finally {
      reader.decRef();
    }
  }

  /** The terms of the clauses of a flat bag-of-words query, in order (null for any other shape). */
  public String[] clauseTerms(Query q) throws IOException {
    List<Clause> cs = clauses(scoring.searcher.rewrite(q));
    if (cs == null) return null;
    String[] out = new String[cs.size()];
    for (int i = 0; i < out.length; i++) out[i] = cs.get(i).term.text();
    return out;
  }

  /** The boosts (query weights) of {@link #clauseTerms}'s clauses, in the same order. */
  public float[] clauseBoosts(Query q) throws IOException {
    List<Clause> cs = clauses(scoring.searcher.rewrite(q));
    if (cs == null) return null;
    float[] out = new float[cs.size()];
    for (int i = 0; i < out.length; i++) out[i] = cs.get(i).boost;
    return out;
  }

  /** The doc number of the live document whose id is {@code id} in this reader, or -1. */
  private int liveDoc(String id) {
    Bits live = MultiBits.getLiveDocs(reader);
    for (int d = 0; d < docids.length; d++) {
      if (id.equals(docids[d]) && (live == null || live.get(d))) return d;
    }
    return -1;
  }

  /**
   * A searcher over the index's newest commit with this one's similarity and analyser, or null if the
   * index has not changed since this reader was opened. This searcher stays open (close it when the
   * searches that hold it are done: each search holds a reference to its reader while it runs).
   */
  public HitSearcher reopen() throws IOException, ReflectiveOperationException {
    if (!(reader instanceof DirectoryReader)) {
      throw new IllegalStateException("only a DirectoryReader can be reopened");
    }
    DirectoryReader r = DirectoryReader.openIfChanged((DirectoryReader) reader);
    if (r == null) {
      return null;
    }
    HitSearcher s = new HitSearcher(r, true);
    s.setSimilarity(scoring.searcher.getSimilarity());
    s.analyzer = analyzer;
    s.exhaustiveShare = exhaustiveShare;
    s.feedback = feedback;
    return s;
  }

  @Override
  public void close() throws IOException {
    if (ownsReader) {
      reader.close();
    }
  }

  // ------------------------------------------------------------------------------------------

  /** The answers of a batch: data holds, per query, the hit count (int32), then every query's doc numbers, then every query's scores; errors[i] is null or why query i failed (count 0). */
  public static final class Batch {
    public final byte[] data;
    public final String[] errors;

    Batch(byte[] data, String[] errors) {
      this.data = data;
      this.errors = errors;
    }
  }

  /** One query's hits, best first. */
  static final class Hits {
    static final Hits EMPTY = new Hits(new int[0], new float[0]);
    final int[] docs;
    final float[] scores;

    Hits(int[] docs, float[] scores) {
      this.docs = docs;
      this.scores = scores;
    }

    byte[] pack() {
      int n = docs.length;
      ByteBuffer buf = ByteBuffer.allocate(8 * n).order(ByteOrder.LITTLE_ENDIAN);
      buf.asIntBuffer().put(docs);
      buf.position(4 * n);
      buf.slice().order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().put(scores);
      return buf.array();
    }
  }

  /** Per-thread work arrays of the exhaustive path: sums sized to the largest leaf, candidates grown as needed. */
  private static final class Scratch {
    final double[] acc;
    final int[] mark;
    final int[] touched;
    final int[] hist = new int[1 << (31 - HIST_SHIFT)];
    int[] candDoc = new int[0];
    int[] candBits = new int[0];
    long[] keys = new long[0];
    long[] tmp = new long[0];
    int stamp;

    /** Per leaf, this thread's terms enumerator and postings enumerator (reused from query to query). */
    final TermsEnum[] enums;
    final PostingsEnum[] postings;

    Scratch(int maxLeafDoc, int leaves) {
      acc = new double[maxLeafDoc];
      mark = new int[maxLeafDoc];
      touched = new int[maxLeafDoc];
      enums = new TermsEnum[leaves];
      postings = new PostingsEnum[leaves];
    }

    TermsEnum termsEnum(LeafReaderContext ctx) throws IOException {
      TermsEnum te = enums[ctx.ord];
      if (te == null) {
        Terms t = ctx.reader().terms(CONTENTS);
        if (t == null) return null;
        te = enums[ctx.ord] = t.iterator();
      }
      return te;
    }

    void reserve(int n) {
      if (candDoc.length < n) {
        int size = Math.max(n, 2 * candDoc.length);
        candDoc = Arrays.copyOf(candDoc, size);
        candBits = Arrays.copyOf(candBits, size);
        keys = new long[size];
        tmp = new long[size];
      }
    }
  }

  /** Histogram buckets of the exhaustive path's selection: 8 exponent and 4 mantissa bits of a score (4,096 buckets). */
  private static final int HIST_MANTISSA_BITS = 4;
  private static final int HIST_SHIFT = 23 - HIST_MANTISSA_BITS;

  private interface QueryMaker {
    Query make(int i) throws IOException;
  }

  private Batch batch(int n, int k, int threads, QueryMaker make) {
    return batch(n, k, threads, make, null, true);
  }

  /** {@link #batch} scored by {@code sc} (null: this searcher's own), rounded by Anserini's rule where {@code adjust}. */
  private Batch batch(int n, int k, int threads, QueryMaker make, Scoring sc, boolean adjust) {
    Hits[] hits = new Hits[n];
    String[] errors = new String[n];
    AtomicInteger next = new AtomicInteger();
    AtomicInteger failed = new AtomicInteger();
    Runnable work = () -> {
      for (int i = next.getAndIncrement(); i < n; i = next.getAndIncrement()) {
        try {
          hits[i] = run(sc, make.make(i), k, null, adjust);
        } catch (Throwable e) {  // one bad query must not lose the others' answers
          hits[i] = Hits.EMPTY;
          errors[i] = e.toString();
          failed.incrementAndGet();
        }
      }
    };
    int t = Math.max(1, Math.min(threads, n));
    if (t == 1) {
      work.run();
    } else {
      Thread[] pool = new Thread[t - 1];
      for (int i = 0; i < pool.length; i++) {
        pool[i] = new Thread(work, "retr-search-" + i);
        pool[i].setDaemon(true);
        pool[i].start();
      }
      work.run();
      for (Thread th : pool) {
        try {
          th.join();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new IllegalStateException("interrupted while searching", e);
        }
      }
    }
    int total = 0;
    for (Hits h : hits) total += h.docs.length;
    ByteBuffer buf = ByteBuffer.allocate(4 * (n + 2 * total)).order(ByteOrder.LITTLE_ENDIAN);
    for (Hits h : hits) buf.putInt(h.docs.length);
    for (Hits h : hits) for (int d : h.docs) buf.putInt(d);
    for (Hits h : hits) for (float s : h.scores) buf.putFloat(s);
    return new Batch(buf.array(), failed.get() == 0 ? null : errors);
  }

  Query textQuery(String text) throws IOException {
    return invoke(textQuery, CONTENTS, analyzer, text);
  }

  private Query weightQuery(String[] terms, int[] weights, int from, int to) throws IOException {
    // SimpleImpactSearcher receives a HashMap<String, Integer> and copies it into a HashMap<String, Float>
    // before building the query; the same two maps here give the clauses in the same order.
    Map<String, Integer> ints = new HashMap<>();
    for (int i = from; i < to; i++) {
      ints.put(terms[i], weights[i]);
    }
    Map<String, Float> floats = new HashMap<>();
    for (Map.Entry<String, Integer> e : ints.entrySet()) {
      floats.put(e.getKey(), e.getValue().floatValue());
    }
    return invoke(weightQuery, CONTENTS, floats);
  }

  private Query invoke(Method m, Object... args) throws IOException {
    try {
      return (Query) m.invoke(generator, args);
    } catch (InvocationTargetException e) {
      Throwable c = e.getCause();
      if (c instanceof RuntimeException) throw (RuntimeException) c;
      if (c instanceof IOException) throw (IOException) c;
      throw new IllegalStateException(c);
    } catch (IllegalAccessException e) {
      throw new IllegalStateException(e);
    }
  }

  private Hits run(Query q, int k) throws IOException {
    return run(q, k, null);
  }

  /** The top k with Lucene's own scores, before Anserini's tie adjustment (what its rerankers are given). */
  Hits unadjusted(Query q, int k) throws IOException {
    return run(q, k, null, false);
  }

  private Hits run(Query q, int k, FixedBitSet allowed) throws IOException {
    return run(q, k, allowed, true);
  }

  /** With {@code allowed}: the exhaustive path restricted to it, or null where that path does not apply. */
  private Hits run(Query q, int k, FixedBitSet allowed, boolean adjust) throws IOException {
    return run(null, q, k, allowed, adjust);
  }

  /** {@link #run(Query, int, FixedBitSet, boolean)} scored by {@code given} (null: this searcher's own scoring; a sharded index's {@link GlobalStats}). */
  private Hits run(Scoring given, Query q, int k, FixedBitSet allowed, boolean adjust) throws IOException {
    if (!reader.tryIncRef()) {
      throw new AlreadyClosedException("this index reader was closed");
    }
    try {
      Scoring scoring = given == null ? this.scoring : given;
      IndexSearcher s = scoring.searcher;
      if (lucene8) {
        return allowed == null ? hits(s.search(q, k)) : null;
      }
      Hits h = exhaustive(scoring, q, k, allowed);
      if (h == null && allowed != null) return null;
      if (h == null) {
        TopDocs td = s.search(q, k, sort, true);
        h = hits(td);
      }
      if (adjust) adjustTies(h.scores);
      return h;
    } finally {
      reader.decRef();
    }
  }

  private static Hits hits(TopDocs td) {
    int n = td.scoreDocs.length;
    int[] d = new int[n];
    float[] s = new float[n];
    for (int i = 0; i < n; i++) {
      ScoreDoc sd = td.scoreDocs[i];
      d[i] = sd.doc;
      s[i] = sd.score;
    }
    return new Hits(d, s);
  }

  /** The most terms kept in the terms cache; past it the cache starts again empty (it only saves dictionary lookups). */
  private static final int TERM_CACHE_LIMIT = 1 << 16;

  /** A term's state in each leaf (null where absent) and its index-wide docFreq and totalTermFreq. */
  private static final class TermInfo {
    final TermState[] states;
    final int df;
    final long ttf;

    TermInfo(TermState[] states, int df, long ttf) {
      this.states = states;
      this.df = df;
      this.ttf = ttf;
    }
  }

  /**
   * What TermStates.build gathers for TermWeight (docFreq and totalTermFreq summed over the
   * leaves, each leaf's term state), once per term and reader: segments never change.
   */
  private TermInfo termInfo(Term term) throws IOException {
    TermInfo ti = terms.get(term.text());
    if (ti != null) return ti;
    List<LeafReaderContext> leaves = reader.leaves();
    TermState[] states = new TermState[leaves.size()];
    int df = 0;
    long ttf = 0;
    for (LeafReaderContext ctx : leaves) {
      Terms t = ctx.reader().terms(CONTENTS);
      if (t == null) continue;
      TermsEnum te = t.iterator();
      if (te.seekExact(term.bytes())) {
        states[ctx.ord] = te.termState();
        df += te.docFreq();
        ttf += te.totalTermFreq();
      }
    }
    ti = new TermInfo(states, df, ttf);
    if (terms.size() >= TERM_CACHE_LIMIT) terms.clear();
    terms.put(term.text(), ti);
    return ti;
  }

  /**
   * How the searches score, swapped whole by {@link #setSimilarity}: an IndexSearcher with its
   * similarity, the collection statistics and the SimScorers made for it (nothing to do with the
   * index folder's generations: one reader, one commit, whatever the similarity).
   */
  private static final class Scoring {
    final IndexSearcher searcher;
    final CollectionStatistics stats;
    final ConcurrentHashMap<Clause, Similarity.SimScorer> scorers = new ConcurrentHashMap<>();

    Scoring(IndexSearcher searcher, CollectionStatistics stats) {
      this.searcher = searcher;
      this.stats = stats;
    }

    /** The SimScorer TermWeight makes: similarity.scorer(boost, collection statistics, term statistics). */
    Similarity.SimScorer scorer(Clause c, TermInfo ti) throws IOException {
      Similarity.SimScorer sc = scorers.get(c);
      if (sc == null) {
        sc = searcher.getSimilarity().scorer(c.boost, stats, searcher.termStatistics(c.term, ti.df, ti.ttf));
        if (scorers.size() >= TERM_CACHE_LIMIT) scorers.clear();
        scorers.put(c, sc);
      }
      return sc;
    }
  }

  /** One SHOULD clause of a flat bag-of-words query. */
  static final class Clause {
    final Term term;
    final float boost;

    Clause(Term term, float boost) {
      this.term = term;
      this.boost = boost;
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Clause && ((Clause) o).term.equals(term)
          && Float.floatToIntBits(((Clause) o).boost) == Float.floatToIntBits(boost);
    }

    @Override
    public int hashCode() {
      return 31 * term.hashCode() + Float.floatToIntBits(boost);
    }
  }

  /** The clauses of a flat disjunction of (boosted) term queries on "contents"; null for any other shape. */
  static List<Clause> clauses(Query q) {
    List<Clause> out = new ArrayList<>();
    if (q instanceof MatchNoDocsQuery) {
      return out;
    }
    if (q instanceof BooleanQuery) {
      BooleanQuery bq = (BooleanQuery) q;
      if (bq.getMinimumNumberShouldMatch() != 0) return null;
      for (BooleanClause c : bq.clauses()) {
        if (c.getOccur() != BooleanClause.Occur.SHOULD || !addClause(c.getQuery(), out)) return null;
      }
      return out;
    }
    return addClause(q, out) ? out : null;
  }

  private static boolean addClause(Query q, List<Clause> out) {
    float boost = 1f;
    if (q instanceof BoostQuery) {
      boost = ((BoostQuery) q).getBoost();
      q = ((BoostQuery) q).getQuery();
    }
    if (!(q instanceof TermQuery)) return false;
    Term t = ((TermQuery) q).getTerm();
    if (!CONTENTS.equals(t.field())) return false;
    out.add(new Clause(t, boost));
    return true;
  }

  /**
   * The exhaustive path (see the class comment), or null where it does not apply (another query
   * shape, norms beyond a byte, a negative score) or Lucene's collector is expected to be faster.
   */
  private Hits exhaustive(Scoring scoring, Query q, int k, FixedBitSet allowed) throws IOException {
    if (!normsFit || exhaustiveShare == Double.POSITIVE_INFINITY) return null;
    IndexSearcher s = scoring.searcher;
    List<Clause> cs = clauses(s.rewrite(q));
    if (cs == null) return null;
    int m = cs.size();
    List<LeafReaderContext> leaves = reader.leaves();
    TermInfo[] infos = new TermInfo[m];
    Similarity.SimScorer[] scorers = new Similarity.SimScorer[m];
    long postings = 0;
    for (int i = 0; i < m; i++) {
      Clause c = cs.get(i);
      TermInfo ti = infos[i] = termInfo(c.term);
      if (ti.df == 0) continue;  // no document has the term: TermWeight has no scorer for it either
      scorers[i] = scoring.scorer(c, ti);
      postings += ti.df;
    }
    if (allowed == null && k < exhaustiveShare * postings) return null;
    Scratch w = scratch.get();
    // Leaf by leaf (a document's postings all lie in its own leaf): sum into leaf-sized scratch, then
    // keep each touched document's global number and float score as a candidate.
    double[] acc = w.acc;
    int[] mark = w.mark;
    int[] touched = w.touched;
    int n = 0;
    for (LeafReaderContext ctx : leaves) {
      TermsEnum te = w.termsEnum(ctx);
      if (te == null) continue;
      int stamp = ++w.stamp;
      if (stamp == 0) {  // wrapped around: clear the marks once
        Arrays.fill(mark, 0);
        stamp = w.stamp = 1;
      }
      Bits live = ctx.reader().getLiveDocs();
      byte[] nb = norms[ctx.ord];
      int base = ctx.docBase;
      int t = 0;
      PostingsEnum pe = w.postings[ctx.ord];
      for (int i = 0; i < m; i++) {
        TermState st = infos[i].states[ctx.ord];
        if (st == null || scorers[i] == null) continue;
        te.seekExact(cs.get(i).term.bytes(), st);
        pe = w.postings[ctx.ord] = te.postings(pe, PostingsEnum.FREQS);
        Similarity.SimScorer sc = scorers[i];
        for (int d = pe.nextDoc(); d != DocIdSetIterator.NO_MORE_DOCS; d = pe.nextDoc()) {
          if (live != null && !live.get(d)) continue;
          if (allowed != null && !allowed.get(base + d)) continue;
          float v = sc.score(pe.freq(), nb == null ? 1L : nb[d]);
          if (mark[d] != stamp) {
            mark[d] = stamp;
            acc[d] = v;
            touched[t++] = d;
          } else {
            acc[d] += v;
          }
        }
      }
      w.reserve(n + t);
      for (int j = 0; j < t; j++) {
        int d = touched[j];
        float f = (float) acc[d];
        if (!(f >= 0f)) return null;  // Lucene forbids negative scores; leave anything odd to Lucene
        w.candDoc[n] = base + d;
        w.candBits[n++] = Float.floatToRawIntBits(f);
      }
    }
    // The top k by (score desc, id rank asc). A histogram of the scores' float bits (sign, exponent
    // and the first HIST_MANTISSA_BITS of the mantissa: scores are non-negative, so the bits order as
    // the scores do) finds the bucket holding the k-th best score; only candidates from that bucket
    // up are keyed and sorted.
    int[] candDoc = w.candDoc;
    int[] candBits = w.candBits;
    int[] hist = w.hist;
    Arrays.fill(hist, 0);
    for (int i = 0; i < n; i++) hist[candBits[i] >>> HIST_SHIFT]++;
    int top = Math.min(k, n);
    int cut = hist.length - 1;
    for (int seen = hist[cut]; seen < top; seen += hist[cut]) cut--;
    long[] keys = w.keys;
    int c = 0;
    for (int i = 0; i < n; i++) {
      int bits = candBits[i];
      if ((bits >>> HIST_SHIFT) >= cut) {
        // ascending key = score descending, then id rank ascending
        keys[c++] = ((0x7fffffffL - bits) << 32) | rank[candDoc[i]];
      }
    }
    radixSort(keys, c, w.tmp);
    int[] docs = new int[top];
    float[] scores = new float[top];
    for (int i = 0; i < top; i++) {
      docs[i] = docByRank[(int) keys[i]];
      scores[i] = Float.intBitsToFloat((int) (0x7fffffffL - (keys[i] >>> 32)));
    }
    return new Hits(docs, scores);
  }

  /** Sorts a[0..n) of non-negative longs ascending: LSD radix, a byte per pass, passes where every key has the same byte skipped. */
  static void radixSort(long[] a, int n, long[] tmp) {
    if (n < 64) {
      Arrays.sort(a, 0, n);
      return;
    }
    int[][] count = new int[8][256];
    for (int i = 0; i < n; i++) {
      long v = a[i];
      for (int b = 0; b < 8; b++) count[b][(int) (v >>> (8 * b)) & 0xff]++;
    }
    long[] src = a, dst = tmp;
    for (int b = 0; b < 8; b++) {
      int[] c = count[b];
      if (c[(int) (a[0] >>> (8 * b)) & 0xff] == n) continue;  // this byte is the same in every key
      int sum = 0;
      for (int j = 0; j < 256; j++) {
        int t = c[j];
        c[j] = sum;
        sum += t;
      }
      int shift = 8 * b;
      for (int i = 0; i < n; i++) {
        long v = src[i];
        dst[c[(int) (v >>> shift) & 0xff]++] = v;
      }
      long[] t = src;
      src = dst;
      dst = t;
    }
    if (src != a) System.arraycopy(src, 0, a, 0, n);
  }

  /** Scores rounded to 4 decimals, and each run of (near-)equal scores pushed apart by 1e-6 steps: Anserini's ScoreTiesAdjusterReranker. */
  static void adjustTies(float[] s) {
    int run = 0;
    for (int i = 0; i < s.length; i++) {
      s[i] = (float) (Math.round((double) s[i] * 10000.0d) / 10000.0d);
      if (i == 0 || s[i - 1] - s[i] > 1e-4f) {
        run = 0;
      } else {
        run++;
        s[i] -= 1e-6f * run;
      }
    }
  }

  /**
   * Fills ids[d] from the BinaryDocValues field "id" (Anserini's DefaultLuceneDocumentGenerator
   * writes one per document) and ranks the documents by the unsigned byte order of their ids, then
   * by doc number; documents without an id come first, as STRING_VAL sorts a missing value.
   */
  private static void rankIds(IndexReader reader, String[] ids, int[] rank, int[] docByRank) throws IOException {
    int maxDoc = reader.maxDoc();
    byte[][] raw = new byte[maxDoc][];
    BinaryDocValues dv = MultiDocValues.getBinaryValues(reader, ID);
    if (dv != null) {
      for (int d = dv.nextDoc(); d != DocIdSetIterator.NO_MORE_DOCS; d = dv.nextDoc()) {
        BytesRef v = dv.binaryValue();
        raw[d] = Arrays.copyOfRange(v.bytes, v.offset, v.offset + v.length);
        ids[d] = v.utf8ToString();
      }
    }
    Integer[] order = new Integer[maxDoc];
    int missing = 0;
    for (int d = 0; d < maxDoc; d++) {
      if (raw[d] == null) order[missing++] = d;
    }
    int p = missing;
    for (int d = 0; d < maxDoc; d++) {
      if (raw[d] != null) order[p++] = d;
    }
    // a stable sort keeps doc number order among equal ids
    Arrays.sort(order, missing, maxDoc, (a, b) -> Arrays.compareUnsigned(raw[a], raw[b]));
    for (int r = 0; r < maxDoc; r++) {
      rank[order[r]] = r;
      docByRank[r] = order[r];
    }
  }

  /** Sorts by an int per document: its id rank. */
  private static final class RankSource extends FieldComparatorSource {
    private final int[] rank;

    RankSource(int[] rank) {
      this.rank = rank;
    }

    @Override
    public FieldComparator<?> newComparator(String field, int numHits, Pruning pruning, boolean reversed) {
      return new RankComparator(rank, numHits);
    }
  }

  /**
   * Compares the id ranks of documents. It is its own leaf comparator (as Lucene's STRING_VAL
   * comparator is): TopFieldCollector sets the bottom only when the queue changes, not when a new
   * leaf starts, so the bottom must outlive the leaf it was set in.
   */
  private static final class RankComparator extends FieldComparator<Integer> implements LeafFieldComparator {
    private final int[] rank;
    private final int[] slots;
    private int top;
    private int bottom;
    private int base;

    RankComparator(int[] rank, int numHits) {
      this.rank = rank;
      this.slots = new int[numHits];
    }

    @Override
    public int compare(int a, int b) {
      return Integer.compare(slots[a], slots[b]);
    }

    @Override
    public void setTopValue(Integer value) {
      top = value;
    }

    @Override
    public Integer value(int slot) {
      return slots[slot];
    }

    @Override
    public LeafFieldComparator getLeafComparator(LeafReaderContext ctx) {
      base = ctx.docBase;
      return this;
    }

    @Override
    public void setBottom(int slot) {
      bottom = slots[slot];
    }

    @Override
    public int compareBottom(int doc) {
      return Integer.compare(bottom, rank[base + doc]);
    }

    @Override
    public int compareTop(int doc) {
      return Integer.compare(top, rank[base + doc]);
    }

    @Override
    public void copy(int slot, int doc) {
      slots[slot] = rank[base + doc];
    }

    @Override
    public void setScorer(Scorable scorer) {}
  }
}
