make demo   # creates .venv, installs fsstate, runs a streaming query with tiered state
make test   # every test: engine and Spark suites, the docs' examples, the docs' strict build
