# Autodidax, the interactive course. `make help` lists the targets.
SHELL := /bin/bash
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed
export PATH := $(abspath $(BIN)):$(PATH)
export PYTHONHASHSEED := 0
export TF_CPP_MIN_LOG_LEVEL := 3

.PHONY: help setup book serve test lab exercises grade gradebook gradescope bench clean
help:
	@echo "make book      build the website into _build/html (warnings are errors)"
	@echo "make serve     build, then serve it on http://localhost:8000"
	@echo "make test      run every test"
	@echo "make lab       JupyterLab on the exercises (LAB_ARGS=\"--no-browser --port=8899\" passes flags on)"
	@echo "make exercises regenerate the learners' stub notebooks from exercises/source"
	@echo "make grade SUBMISSIONS=dir   grade a folder (or .zip) of notebooks, each in a sandbox: grades/grades.{csv,html}"
	@echo "              also: feedback/<student>/<chapter>.html, feedback.zip, and the gradebook"
	@echo "make gradebook the course table from grades/gradebook.sqlite (ROSTER=roster.csv: Canvas, Moodle CSVs)"
	@echo "make gradescope gradescope/autograder.zip, Gradescope's autograder (GRADESCOPE_ARGS=\"--visibility visible\")"
	@echo "make bench     run the benchmarks, write benchmarks/results.md"

setup: $(STAMP)
$(STAMP): requirements.txt pyproject.toml scripts/setup.sh scripts/fetch_widget_js.sh
	bash scripts/setup.sh

book: $(STAMP)
	bash scripts/build_book.sh
	@echo "The book is at file://$(CURDIR)/_build/html/index.html  (make serve to serve it)"

serve: book
	$(BIN)/python -m http.server --directory _build/html --bind 127.0.0.1 8000

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadfile -q $(PYTEST_ARGS)

export LAB_ARGS
lab: $(STAMP)
	bash scripts/lab.sh

exercises: $(STAMP)
	$(BIN)/python -m coursekit.stubs

SUBMISSIONS ?= submissions
grade: $(STAMP)
	$(BIN)/python -m coursekit.grade $(SUBMISSIONS) --out $(or $(GRADES),grades) $(GRADE_ARGS)

gradebook: $(STAMP)
	$(BIN)/python -m coursekit.gradebook --db $(or $(GRADES),grades)/gradebook.sqlite $(if $(ROSTER),--roster $(ROSTER)) $(GRADEBOOK_ARGS)

gradescope: $(STAMP)
	$(BIN)/python -m coursekit.gradescope build --out gradescope/autograder.zip $(GRADESCOPE_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf _build .jupyter_cache
