"""What the dense kind adds to the command line: ``--dense`` and its encoder and faiss
options (`retr index`), query-aware dimension selection (`retr search --dimsel`),
`retr train dimsel` (the learned selector) and `retr train dense` (the encoder itself)."""
from __future__ import annotations

import json
from pathlib import Path

import click

from cli import params
from retrieval.dense.train_config import DenseTrainConfig
from retrieval.kinds import KindOptions

_D = DenseTrainConfig()  # the training defaults, read by `retr train dense`'s options

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class DenseOptions(KindOptions):
    title = "Dense"
    flag = "--dense"
    index = (
        click.option("--dense", "dense_model", is_flag=False, flag_value="minilm", default=None, metavar="[MODEL]",
                     help="Add a dense sub-index: bundled all-MiniLM-L6-v2 by default, or 'splade-tiny', "
                          "or a local Hugging Face folder."),
        click.option("--pooling", default="mean", show_default=True,
                     help="Dense pooling: mean, cls, first-last or ditto."),
        click.option("--faiss", "factory", default="Flat", show_default=True,
                     help="faiss factory string for the dense index (Flat, HNSW32, IVF1024,PQ32, ...)."),
        click.option("--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True,
                     help="Precision of the stored dense vectors."),
        click.option("--sts-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
                     help="STS data folder, for --pooling ditto when no (layer, head) is stored for the model "
                          "(`retr ditto-select`) [default: $RETR_STS, $RETR_DATA/sts or ../shared/datasets/sts]."),
    )
    search = (
        click.option("--dimsel", type=click.Choice(["none", "prf", "learned", "oracle"]), default=None,
                     help="Query-aware dimension selection on the dense retriever (learned: `retr train dimsel`)."),
        click.option("--alpha", type=params.SHARE_OPEN_CLOSED, default=None,
                     help="Share of dimensions kept [default: 0.5; learned: the selector's]."),
        click.option("--prf-k", type=click.IntRange(min=1), default=None, help="Feedback documents for --dimsel prf [5]."),
        click.option("--adaptive", is_flag=True, help="--dimsel learned: per-query count (cumulative importance)."),
        click.option("--dimsel-qrels", type=click.Path(path_type=Path), default=None,
                     help="Labels for --dimsel oracle (an upper-bound analysis, not a search method)."),
    )
    flags = {"dense": "--dense", "pooling": "--pooling", "factory": "--faiss", "dtype": "--dtype",
             "alpha": "--alpha", "prf_k": "--prf-k", "dimsel": "--dimsel", "qrels": "--dimsel-qrels",
             "sts_dir": "--sts-dir"}

    def specs(self, values):
        if values["dense_model"] is None:
            return {}
        from retrieval.dense.subindex import DenseSpec

        model = values["dense_model"]
        return {"dense": DenseSpec(model=None if model == "minilm" else model, pooling=values["pooling"],
                                   factory=values["factory"], dtype=values["dtype"], device=values["device"],
                                   batch_size=values["batch_size"],
                                   sts_dir=str(values["sts_dir"]) if values["sts_dir"] else None)}

    def search_args(self, values):
        return {"dimsel": dimsel_options(values["dimsel"], values["alpha"], values["prf_k"], values["dimsel_qrels"],
                                         values["adaptive"])}

    def tag(self, values):
        # a run with dimension selection is not the plain dense run: its tag says which selection ran
        mode = values.get("dimsel")
        if mode is None:
            return None
        word = f"dimsel-{mode}" + ("-adaptive" if values.get("adaptive") else "")
        if values.get("alpha") is not None:
            word += f"(alpha={values['alpha']:g})"
        if mode == "prf" and values.get("prf_k") is not None:
            word += f"(prf_k={values['prf_k']})"
        return word

    def commands(self):
        return [("train", dimsel), ("train", dense_train)]


@click.command("dimsel", context_settings=CONTEXT)
@click.option("--index", "index_dir", required=True, type=click.Path(path_type=Path), help="Index folder.")
@click.option("--queries", required=True, type=click.Path(path_type=Path),
              help="Training queries: BEIR JSONL, TSV or TREC topics.")
@click.option("--qrels", required=True, type=click.Path(path_type=Path),
              help="Training qrels (only training queries: never the test split).")
@click.option("--retriever", default="dense", show_default=True, help="Dense sub-index to train for.")
@click.option("--output", "-o", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Selector folder (new, empty, or one this command wrote) [default: INDEX/<retriever>/dimsel, "
                   "recorded in the manifest].")
@click.option("--epochs", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--lr", type=params.POSITIVE, default=1e-3, show_default=True)
@click.option("--hidden", type=click.IntRange(min=1), default=256, show_default=True, help="MLP hidden size.")
@click.option("--loss", type=click.Choice(["kl", "rank", "kl+rank"]), default="kl+rank", show_default=True,
              help="KL to the softmaxed oracle, contrastive ranking through a soft top-alpha mask, or both.")
@click.option("--arch", type=click.Choice(["qv", "free"]), default="qv", show_default=True,
              help="qv: importance = q * (q + MLP(q)) (residual around q*q); free: MLP(q).")
@click.option("--alpha", type=params.SHARE_OPEN_CLOSED, default=None,
              help="Fixed share of dimensions to keep [default: chosen on the held-out training queries].")
@click.option("--dev-share", type=params.SHARE_CLOSED_OPEN, default=0.2, show_default=True,
              help="Share of the training queries held out to pick the epoch and alpha.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def dimsel(index_dir, queries, qrels, retriever, output, epochs, lr, hidden, loss, arch, alpha, dev_share, seed,
           quiet):
    """Train a query-aware dimension selector: an MLP from the query embedding to per-dimension
    importance, distilled from label-oracle importance (see retrieval/dense/dimsel/)."""
    from retrieval.dense.dimsel.masks import check_alpha
    from retrieval.dense.dimsel.selector import SelectorConfig
    from retrieval.dense.dimsel.training import train_selector
    from retrieval.index import open_index

    if alpha is not None:
        check_alpha(alpha)
    cfg = SelectorConfig(epochs=epochs, lr=lr, hidden=hidden, loss=loss, arch=arch, alpha=alpha,
                         dev_share=dev_share, seed=seed)
    idx = open_index(index_dir)
    with params.flags({"output": "--output"}):
        sel = train_selector(idx, queries, qrels, output=output, retriever=retriever, cfg=cfg, quiet=quiet)
    t = sel.config["training"]
    where = output or Path(index_dir) / retriever / "dimsel"
    if not quiet:
        click.echo(f"trained dimension selector on {t['queries']} queries ({t['dev_queries']} held out) in "
                   f"{t['seconds']:.1f} s: loss {t['first_train_loss']:.4f} -> {t['final_train_loss']:.4f}", err=True)
        if t["dev_queries"]:
            click.echo(f"held-out nDCG@10: full dims {t['dev_full_ndcg10']:.4f}, selector at alpha "
                       f"{sel.config['alpha']:g} {t['dev_ndcg10_by_alpha'][str(sel.config['alpha'])]:.4f}",
                       err=True)
        click.echo(f"saved to {where}", err=True)


_TRAIN_FLAGS = {"queries": "--queries", "qrels": "--qrels", "pretrain": "--pretrain", "importance": "--importance",
                "mask_rate": "--mask-rate", "epochs": "--epochs", "pretrain_epochs": "--pretrain-epochs",
                "lr": "--lr", "batch_size": "--batch-size", "max_length": "--max-length", "overwrite": "--overwrite",
                "output": "--output",
                "resume": "--resume", "pretrain_passages": "--pretrain-passages", "hard_negatives": "--hard-negatives",
                "negative_pool": "--hard-negatives", "positives_per_query": "--positives-per-query", "dev_share": "--dev-share", "pooling": "--pooling",
                "device": "--device", "base": "--base", "threads": "--threads"}


@click.command("dense", context_settings=CONTEXT)
@params.training_options
@click.option("--pretrain", type=click.Choice(["none", "random", "rom"]), default="none", show_default=True,
              help="Masked-LM pre-training on the corpus first: BERT's random masking or ROM.")
@click.option("--importance", default="bm25", show_default=True, metavar="bm25|deepct:MODEL",
              help="ROM's term importance: BM25 idf over the corpus, or a DeepCT model's weights.")
@click.option("--mask-rate", type=params.FiniteFloatRange(0, 1, min_open=True, max_open=True), default=_D.mask_rate,
              show_default=True, help="Share of each passage's tokens masked (both strategies).")
@click.option("--pretrain-epochs", type=click.IntRange(min=1), default=_D.pretrain_epochs, show_default=True)
@click.option("--pretrain-passages", type=click.IntRange(min=1), default=None,
              help="Pre-train on at most this many passages (a seeded sample) [all].")
@click.option("--epochs", type=click.IntRange(min=1), default=_D.epochs, show_default=True, help="Fine-tuning epochs.")
@click.option("--lr", type=params.POSITIVE, default=_D.lr, show_default=True, help="Fine-tuning learning rate.")
@click.option("--batch-size", type=click.IntRange(min=1), default=_D.batch_size, show_default=True,
              help="Fine-tuning batch (queries; each brings its positive and hard negatives).")
@click.option("--hard-negatives", type=click.IntRange(min=0, max=_D.negative_pool), default=_D.hard_negatives,
              show_default=True,
              help="BM25-mined hard negatives per query and step (0: in-batch negatives only).")
@click.option("--positives-per-query", type=click.IntRange(min=1), default=_D.positives_per_query,
              help="At most this many relevant passages of a query per epoch, drawn anew each epoch (for qrels with "
                   "many relevant passages a query) [all].")
@click.option("--max-length", type=click.IntRange(min=8, max=4096), default=_D.max_length, show_default=True,
              help="Passage tokens in fine-tuning.")
@click.option("--pooling", type=click.Choice(["mean", "cls"]), default="mean", show_default=True,
              help="Pooling trained for (index with the same --pooling).")
@click.option("--dev-share", type=params.SHARE_CLOSED_OPEN, default=_D.dev_share, show_default=True,
              help="Share of training queries held out to pick the best epoch.")
@click.option("--index", "index_dir", type=click.Path(path_type=Path), default=None,
              help="An index folder of the corpus to mine hard negatives from [a BM25 folder built for the run].")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--threads", type=click.IntRange(min=1, max=256), default=None,
              help="torch threads [torch's default]; the same count makes runs repeatable.")
@click.option("--resume", is_flag=True, help="Continue an interrupted run from OUTPUT/.checkpoint.")
@click.option("--overwrite", is_flag=True, help="Replace what is in --output.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output.")
def dense_train(corpus, queries, qrels, output, base, pretrain, importance, mask_rate, pretrain_epochs,
                pretrain_passages, epochs, lr, batch_size, hard_negatives, positives_per_query, max_length, pooling,
                dev_share, index_dir, seed, device, threads, resume, overwrite, quiet):
    """Train the dense encoder: masked-LM pre-training on the corpus (--pretrain random|rom) and/or
    contrastive fine-tuning on training qrels (in-batch + BM25 hard negatives).

    Ctrl-C keeps the last finished epoch in OUTPUT/.checkpoint; --resume continues from it. Writes a
    model folder with retr_train.json and README.md (the model card)."""
    from retrieval.dense.training import train

    cfg = DenseTrainConfig(base=base, pretrain=pretrain, importance=importance, mask_rate=mask_rate,
                           pretrain_epochs=pretrain_epochs, pretrain_passages=pretrain_passages, epochs=epochs,
                           lr=lr, batch_size=batch_size, hard_negatives=hard_negatives,
                           positives_per_query=positives_per_query, max_length=max_length,
                           pooling=pooling, dev_share=dev_share, seed=seed, device=device, threads=threads)
    with params.flags(_TRAIN_FLAGS):
        out = train(corpus, output, queries, qrels, cfg, index=index_dir, resume=resume, overwrite=overwrite,
                    quiet=quiet)
    card = json.loads((out / "retr_train.json").read_text())
    ft = card["history"]["finetune"]
    what = [f"pre-trained ({pretrain})"] if pretrain != "none" else []
    if ft:
        best = ft[card["best_epoch"] - 1]
        what.append(f"fine-tuned {len(ft)} epoch(s), kept epoch {best['epoch']} (held-out nDCG@10 "
                    f"{best['dev_ndcg10']}, base {card['data'].get('dev_ndcg10_base')})")
    click.echo(f"{' and '.join(what)} in {sum(v for k, v in card['seconds'].items()):.0f} s; saved to {out} "
               f"(index it with: retr index --dense {out} --pooling {pooling})")


def dimsel_options(mode, alpha, prf_k, qrels, adaptive: bool = False):
    """The ``dimsel=`` argument of Index.search for `retr search --dimsel MODE ...` (None without
    --dimsel; the selection options alone are a usage error)."""
    if mode is None:
        if alpha is not None or prf_k is not None or qrels is not None or adaptive:
            raise click.UsageError("--alpha, --prf-k, --dimsel-qrels and --adaptive need --dimsel")
        return None
    from retrieval.dense.dimsel.masks import check_alpha

    if alpha is not None:
        check_alpha(alpha)
    if adaptive and mode != "learned":
        raise click.UsageError("--adaptive applies to --dimsel learned")
    opts = {"mode": mode, "alpha": alpha, "prf_k": prf_k or 5, "adaptive": adaptive}
    if qrels is not None:
        if mode != "oracle":
            raise click.UsageError("--dimsel-qrels applies to --dimsel oracle")
        opts["qrels"] = str(qrels)
    return opts


OPTIONS = DenseOptions()
