"""retr's standalone evaluator: ir_measures' measures through its providers (trec_eval's, exact, through
pytrec_eval), condensed lists
for unjudged documents, partial-annotation analysis and significance tests. Imports nothing else of retr."""
from .errors import EvalError, SkippedQueries
from .frames import qrels_frame, read_qrels_frame, read_run_frame, run_frame, write_qrels_frame, write_run_frame
from .io import SubtopicQrels, as_qrels, as_run, read_qrels, read_run, read_subtopic_qrels, write_qrels, write_run
from .measures import DEFAULT_MEASURES, Evaluator, Measure, aggregate, evaluate, evaluate_runs, parse_measure, unjudged_report

__all__ = ["EvalError", "SkippedQueries", "as_qrels", "as_run", "read_qrels", "read_run", "write_qrels", "write_run", "DEFAULT_MEASURES", "Evaluator", "Measure",
           "aggregate", "evaluate", "evaluate_runs", "parse_measure", "unjudged_report", "run_frame", "qrels_frame",
           "read_run_frame", "write_run_frame", "read_qrels_frame", "write_qrels_frame", "SubtopicQrels",
           "read_subtopic_qrels"]
