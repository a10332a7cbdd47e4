/*
 * retr: pseudo-relevance feedback (RM3, Rocchio) by Anserini's own rerankers.
 *
 * Anserini's classes are Java 21 class files that javac 17 cannot read, so they are reached by name
 * at run time (as HitSearcher reaches Anserini's query generator); only Lucene is compiled against.
 */
package retr.lucene;

import java.io.IOException;
import java.lang.reflect.Constructor;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.List;

import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.document.Document;
import org.apache.lucene.index.FieldInfo;
import org.apache.lucene.index.FieldInfos;
import org.apache.lucene.index.IndexReader;
import org.apache.lucene.search.IndexSearcher;
import org.apache.lucene.search.Query;
import org.apache.lucene.search.ScoreDoc;
import org.apache.lucene.search.Sort;
import org.apache.lucene.search.TopDocs;
import org.apache.lucene.search.TopFieldDocs;
import org.apache.lucene.search.TotalHits;
import org.apache.lucene.search.similarities.Similarity;

/**
 * RM3 or Rocchio feedback as Anserini's SimpleSearcher runs it (what Pyserini's LuceneSearcher's
 * set_rm3 / set_rocchio switch on): the first ranking of the query, with Lucene's own scores
 * (before the tie adjustment, as SimpleSearcher hands them to its reranker cascade), goes to
 * Anserini's {@code Rm3Reranker} or {@code RocchioReranker}, which read the feedback documents'
 * stored term vectors and build the expanded query. The reranker would then search that query
 * itself, loading every hit's stored document; here the searcher it is given only records the
 * query, and {@link HitSearcher} ranks it on its own path (same similarity, same order, same
 * rounding). So the feedback model is Anserini's code, and the ranking is exactly Anserini's.
 *
 * <p>The first ranking's depth is SimpleSearcher's: Anserini's rerank cutoff (50) for RM3, and the
 * hits asked for (k) for Rocchio (SimpleSearcher deepens only RM3's first search), so feedback
 * documents, and Rocchio's bottom documents, are the same documents Pyserini uses.
 */
public final class Feedback {
  private static final String RM3 = "io.anserini.rerank.lib.Rm3Reranker";
  private static final String ROCCHIO = "io.anserini.rerank.lib.RocchioReranker";
  private static final String CONTEXT = "io.anserini.rerank.RerankerContext";
  private static final String ARGS = "io.anserini.search.SearchCollection$Args";
  private static final String SCORED_DOCS = "io.anserini.search.ScoredDocs";
  private static final String ANALYZER_UTILS = "io.anserini.analysis.AnalyzerUtils";
  private static final String COLLECTION = "io.anserini.collection.DocumentCollection";

  private final boolean rm3;
  private final Object[] params;  // the reranker's constructor arguments after (analyzer, parser, field)
  private final Constructor<?> make;
  private final Constructor<?> context;
  private final Constructor<?> args;
  private final Class<?> scoredDocs;
  private final Method rerank;
  private final Method analyze;

  private Feedback(boolean rm3, Object... params) throws ReflectiveOperationException {
    this.rm3 = rm3;
    this.params = params;
    Class<?> r = Class.forName(rm3 ? RM3 : ROCCHIO);
    Class<?>[] types = new Class<?>[3 + params.length];
    types[0] = Analyzer.class;
    types[1] = Class.class;
    types[2] = String.class;
    for (int i = 0; i < params.length; i++) {
      Object p = params[i];
      types[3 + i] = p instanceof Integer ? int.class : p instanceof Float ? float.class : boolean.class;
    }
    this.make = r.getConstructor(types);
    this.scoredDocs = Class.forName(SCORED_DOCS);
    Class<?> ctx = Class.forName(CONTEXT);
    Class<?> a = Class.forName(ARGS);
    this.context = ctx.getConstructor(IndexSearcher.class, Object.class, Query.class, String.class, String.class,
        List.class, Query.class, a);
    this.args = a.getConstructor();
    this.rerank = r.getMethod("rerank", scoredDocs, ctx);
    this.analyze = Class.forName(ANALYZER_UTILS).getMethod("analyze", Analyzer.class, String.class);
    Class.forName(COLLECTION);  // (the reranker's parser type; none is given: term vectors are read)
  }

  /** RM3 with SimpleSearcher.set_rm3's parameters (filterTerms: keep only [a-z0-9] terms of 2 to 20 chars). */
  public static Feedback rm3(int fbTerms, int fbDocs, float originalQueryWeight, boolean filterTerms)
      throws ReflectiveOperationException {
    return new Feedback(true, fbTerms, fbDocs, originalQueryWeight, false, filterTerms);
  }

  /** Rocchio with SimpleSearcher.set_rocchio's parameters. */
  public static Feedback rocchio(int topFbTerms, int topFbDocs, int bottomFbTerms, int bottomFbDocs, float alpha,
      float beta, float gamma, boolean useNegative) throws ReflectiveOperationException {
    return new Feedback(false, topFbTerms, topFbDocs, bottomFbTerms, bottomFbDocs, alpha, beta, gamma, false,
        useNegative);
  }

  /** Whether the reader stores term vectors of {@code field}, which both rerankers read. */
  public static boolean hasTermVectors(IndexReader reader, String field) {
    FieldInfo fi = FieldInfos.getMergedFieldInfos(reader).fieldInfo(field);
    return fi != null && fi.hasVectors();
  }

  /**
   * The expanded query of {@code text}, built by Anserini's reranker from {@code hs}'s first
   * ranking of it, for a search of {@code k} hits.
   */
  Query expand(HitSearcher hs, String text, int k) throws IOException {
    Query q = hs.textQuery(text);
    HitSearcher.Hits first = hs.unadjusted(q, depth(k));
    String[] ids = new String[first.docs.length];
    for (int i = 0; i < ids.length; i++) ids[i] = hs.docids()[first.docs[i]];
    return reranked(hs, text, q, k, ids, first.docs, first.scores, hs.reader());
  }

  /**
   * The query Anserini's reranker builds for {@code text} (whose first-stage query is {@code q}) in a
   * search of {@code k} hits, from the first ranking {@code ids} (doc numbers {@code docs} of
   * {@code reader}, raw {@code scores}, best first); {@code hs} gives the analyser and similarity.
   */
  private Query reranked(HitSearcher hs, String text, Query q, int k, String[] ids, int[] docs, float[] scores,
      IndexReader reader) throws IOException {
    Analyzer analyzer = hs.analyzer();
    try {
      Object a = args.newInstance();
      a.getClass().getField("hits").setInt(a, k);
      a.getClass().getField("arbitraryScoreTieBreak").setBoolean(a, hs.lucene8());
      Object first = scoredDocs.getConstructor().newInstance();
      scoredDocs.getField("docids").set(first, ids);
      scoredDocs.getField("lucene_docids").set(first, docs);
      scoredDocs.getField("scores").set(first, scores);
      // The rerankers read only how many documents there are from this array, never a document.
      scoredDocs.getField("lucene_documents").set(first, new Document[ids.length]);
      Recorder rec = new Recorder(reader, hs.similarity());
      @SuppressWarnings("unchecked")
      List<String> tokens = (List<String>) analyze.invoke(null, analyzer, text);
      Object ctx = context.newInstance(rec, null, q, null, text, tokens, null, a);
      Object[] cargs = new Object[3 + params.length];
      cargs[0] = analyzer;
      cargs[1] = null;
      cargs[2] = HitSearcher.CONTENTS;
      System.arraycopy(params, 0, cargs, 3, params.length);
      rerank.invoke(make.newInstance(cargs), first, ctx);
      if (rec.query == null) {
        throw new IOException("Anserini's " + (rm3 ? "RM3" : "Rocchio") + " reranker built no query");
      }
      return rec.query;
    } catch (InvocationTargetException e) {
      Throwable c = e.getCause();
      if (c instanceof RuntimeException) throw (RuntimeException) c;
      if (c instanceof IOException) throw (IOException) c;
      throw new IllegalStateException(c);
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException(e);
    }
  }

  // -- a sharded index (issue #30): the same reranker over the global first ranking ---------------

  /**
   * How deep the first ranking of a search of {@code k} hits is read: Anserini's rerank cutoff
   * (50) for RM3, {@code k} for Rocchio, as {@link #expand} reads it. A sharded index's router
   * merges its shards' first rankings to this depth.
   */
  public int depth(int k) {
    try {
      Object a = args.newInstance();
      return rm3 ? a.getClass().getField("rerankcutoff").getInt(a) : k;
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * {@link #expand} for a sharded index: Anserini's reranker given the first ranking of the whole
   * index ({@code ids} and their raw {@code scores}, best first, as one folder's {@code
   * HitSearcher.unadjusted} would give them; doc number i is position i) and {@code reader}, whose
   * term vectors, document frequencies and document count are the whole index's
   * ({@link ShardFeedback#reader}). {@code hs} (any shard) gives the analyser, similarity and query
   * generator, which are the same on every shard. The reranker's own code builds the query, so it
   * is the query one folder of every shard's documents expands to.
   */
  Query expandWith(HitSearcher hs, String text, int k, String[] ids, float[] scores, IndexReader reader)
      throws IOException {
    int[] numbers = new int[ids.length];
    for (int i = 0; i < numbers.length; i++) numbers[i] = i;
    return reranked(hs, text, hs.textQuery(text), k, ids, numbers, scores, reader);
  }

  /** A searcher that records the query a reranker searches and answers it with no hits. */
  private static final class Recorder extends IndexSearcher {
    Query query;

    Recorder(IndexReader reader, Similarity similarity) {
      super(reader);
      setSimilarity(similarity);
    }

    @Override
    public TopFieldDocs search(Query q, int n, Sort sort, boolean doDocScores) {
      query = q;
      return new TopFieldDocs(new TotalHits(0, TotalHits.Relation.EQUAL_TO), new ScoreDoc[0], sort.getSort());
    }

    @Override
    public TopDocs search(Query q, int n) {
      query = q;
      return new TopDocs(new TotalHits(0, TotalHits.Relation.EQUAL_TO), new ScoreDoc[0]);
    }
  }
}
