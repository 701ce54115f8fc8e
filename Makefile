# Two entry points: `make demo` and `make test`. Both build .venv from scratch when needed:
# the Python packages from pyproject.toml, the JVM jars (Delta's Spark connector) from
# pom.xml into .venv/jars, then the class archive every later Spark session maps
# (docs: start/demo.md). Maven caches the jars in ~/.m2, so a rebuild downloads nothing.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test check typecheck docs bench ui chromium mermaid

# The fault proxy the storage tests put between every client and the S3 test server
# (tests/storage/faults.py), built from the Go module proxy into the venv.
GO ?= $(shell command -v go || echo /usr/local/go/bin/go)
TOXIPROXY_VERSION := v2.5.0
TOXIPROXY := $(VENV)/bin/toxiproxy-server

$(STAMP): pyproject.toml pom.xml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	rm -rf $(VENV)/jars
	mvn --quiet --batch-mode -f pom.xml dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory=$(VENV)/jars
	$(VENV)/bin/reclock class-archive
	touch $(STAMP)

$(TOXIPROXY): | $(STAMP)
	GOBIN=$(CURDIR)/$(VENV)/toxiproxy $(GO) install \
		github.com/Shopify/toxiproxy/v2/cmd/server@$(TOXIPROXY_VERSION)
	mv $(VENV)/toxiproxy/server $(TOXIPROXY)
	rmdir $(VENV)/toxiproxy

demo: $(STAMP)
	$(VENV)/bin/reclock demo --workdir demo

# The Dagster UI on the demo's instance: every window `make demo` ran, with its checks.
# A warm Spark Connect server runs beside it (docs: guides/spark-connect.md): runs started from
# the UI, the sensor and the schedule attach to it instead of starting a JVM each.
SPARK_PORT ?= 15002
ui: $(STAMP)
	mkdir -p demo/dagster
	$(VENV)/bin/reclock spark-server --port $(SPARK_PORT) & server=$$!; \
	trap 'kill $$server 2>/dev/null; wait $$server' EXIT INT TERM; \
	DAGSTER_HOME=$(CURDIR)/demo/dagster SPARK_REMOTE=sc://localhost:$(SPARK_PORT) \
		RECLOCK_WEBSERVER_URL=http://127.0.0.1:3000 \
		$(VENV)/bin/dagster dev -h 127.0.0.1 -p 3000

# Two workers, one per core of the machine CI runs on; a file's tests stay on one worker
# (its module fixtures are built once), and the session's lakes are built once per run
# (tests/conftest.py). docs: development/index.md, "Shared fixtures".
test: $(STAMP) chromium $(TOXIPROXY)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(MAKE) docs
	$(VENV)/bin/pytest -n 2 --dist loadfile

# The quick tier, for working between full runs: ruff, the type checker and every test
# that starts no JVM (tests/conftest.py marks the others `jvm`). docs: development/index.md.
check: $(STAMP) $(TOXIPROXY)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -m "not jvm"

# mypy on the installed packages ([tool.mypy] in pyproject.toml).
typecheck: $(STAMP)
	$(VENV)/bin/mypy

# The documentation site (docs/, mkdocs.yml) into site/: --strict fails on a broken link,
# anchor or page; its reference pages are generated from this checkout's code
# (docgen/hooks.py). The development pages of the site say how the docs are checked.
docs: $(STAMP)
	PYTHONPATH=$(CURDIR) NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# The site's diagrams render offline: mermaid's browser bundle is kept in the site
# (docs/assets/javascripts, with its licence), taken from its npm package by this target.
MERMAID ?= 11.17.2
mermaid:
	cd "$$(mktemp -d)" && npm pack -q mermaid@$(MERMAID) && tar xzf mermaid-$(MERMAID).tgz && \
	cp package/dist/mermaid.min.js $(CURDIR)/docs/assets/javascripts/mermaid.min.js && \
	cp package/LICENSE $(CURDIR)/docs/assets/javascripts/mermaid-LICENSE.txt

# The UI test drives headless Chromium. As root (CI on a clean Debian machine) it is
# installed when missing; otherwise that test skips and says why.
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
		echo "chromium is not installed: the UI test will skip (as root: apt-get install chromium)"; \
	fi

bench: $(STAMP)
	$(VENV)/bin/python -m benchmarks.bench $(ARGS)
