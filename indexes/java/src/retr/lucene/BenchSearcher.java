/*
 * retr: what only the benchmarks ask of a HitSearcher (benchmarks/bench_bm25.py).
 *
 * Compiled into the same jar as HitSearcher (`make java`); retr's own search never loads it.
 */
package retr.lucene;

import java.io.IOException;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Measurements over a {@link HitSearcher}'s reader, with the same query (Anserini's generator, the
 * searcher's analyser) and the same similarity: Lucene alone, the floor any search of that index
 * pays ({@link #luceneOnly}, {@link #luceneOnlyBatch}), and the postings a query's terms have
 * ({@link #postings}, what the choice between HitSearcher's two paths is measured by). Each call
 * uses the searcher's similarity of the moment, as its searches do.
 */
public final class BenchSearcher {
  private final HitSearcher searcher;

  public BenchSearcher(HitSearcher searcher) {
    this.searcher = searcher;
  }

  /**
   * Lucene alone, for the benchmark's floor: the same query through IndexSearcher.search(query, k)
   * (Lucene's own top k, ties by doc number, no rescoring); returns the hit count, nothing crosses.
   */
  public int luceneOnly(String text, int k) throws IOException {
    return searcher.indexSearcher().search(searcher.textQuery(text), k).scoreDocs.length;
  }

  /**
   * Lucene alone on many queries, for the benchmark's floor: IndexSearcher.search(query, k) for each
   * text on {@code threads} Java threads; returns the total hit count, nothing crosses.
   */
  public long luceneOnlyBatch(String[] texts, int k, int threads) throws InterruptedException {
    AtomicInteger next = new AtomicInteger();
    AtomicLong total = new AtomicLong();
    Runnable work = () -> {
      try {
        for (int i = next.getAndIncrement(); i < texts.length; i = next.getAndIncrement()) {
          total.addAndGet(searcher.indexSearcher().search(searcher.textQuery(texts[i]), k).scoreDocs.length);
        }
      } catch (IOException e) {
        throw new IllegalStateException(e);
      }
    };
    Thread[] pool = new Thread[Math.max(0, Math.min(threads, texts.length) - 1)];
    for (int i = 0; i < pool.length; i++) {
      pool[i] = new Thread(work, "retr-floor-" + i);
      pool[i].setDaemon(true);
      pool[i].start();
    }
    work.run();
    for (Thread t : pool) t.join();
    return total.get();
  }

  /** How many postings the exhaustive path would score for this text (the sum of its terms' document frequencies). */
  public long postings(String text) throws IOException {
    List<HitSearcher.Clause> cs = HitSearcher.clauses(searcher.indexSearcher().rewrite(searcher.textQuery(text)));
    long n = 0;
    if (cs != null) {
      for (HitSearcher.Clause c : cs) n += searcher.reader().docFreq(c.term);
    }
    return n;
  }
}
