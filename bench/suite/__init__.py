"""Cairn's benchmark suite: Cairn and its peers measured on the same data in the same
run (TPC-H, YCSB, storage micro-benchmarks), results as JSON lines and a Markdown
report in bench/results/. Run it with bench/run (see bench/run --help)."""
