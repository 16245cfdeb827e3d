"""`python -m gmp.bench` (the GmPLinear benchmark) runs and reports what it says it does."""

import torch

from gmp import bench


def test_run_reports_every_thread_count_and_batch_and_restores_the_threads():
    before = torch.get_num_threads()
    lines = []
    rows = bench.run(width=16, batches=(4, 8), repeats=1, threads=(1,), print_fn=lines.append)
    assert [(r["threads"], r["batch"]) for r in rows] == [(1, 4), (1, 8)]
    for row in rows:
        assert row["ratio"] == row["gmp_ms"] / row["linear_relu_ms"] > 0
        assert row["map_share"] == row["map_ms"] / row["gmp_ms"] > 0 and row["torch_map_ms"] > 0
    assert len(lines) == 2 + len(rows) and torch.get_num_threads() == before
    assert "map: compiled (gmp._native, OpenMP threads)" in lines[0]  # this machine has a C compiler and libgomp
