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


def test_the_kernel_counter_counts_each_kernel_and_its_bytes_but_no_view():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with bench._KernelCounter() as counter:
        c = a.t().t() @ b  # two views, then one product
        c.relu_()  # in place: reads and writes c
    assert counter.kernels == 2 and counter.names == {"mm": 1, "relu_": 1}
    assert counter.bytes == 4 * (12 + 20 + 15) + 4 * (15 + 15)


def test_the_stacked_count_is_per_layer_and_its_products_are_three_per_layer():
    """A square layer's forward product, its input gradient and its weight gradient: three batched
    products per layer whatever the number of networks; the bytes grow with the networks."""
    one = bench.count_stacked(["ReLU"], width=8, batch=4, in_features=5)
    two = bench.count_stacked(["ReLU", "ReLU"], width=8, batch=4, in_features=5)
    assert one["operators_per_layer_step"]["bmm"] == two["operators_per_layer_step"]["bmm"] == 3
    assert one["kernels_per_layer_step"] == two["kernels_per_layer_step"]
    assert two["bytes_per_layer_step"] > one["bytes_per_layer_step"] > 3 * 8 * 8 * 4  # at least one weight read
    prediction = bench.lease_prediction(1e6, 10, 1e12, depth=100, steps=1000, seconds=1.0)
    assert prediction["seconds_per_network_step"] == 1e-4 and prediction["networks"] == 10
    assert abs(prediction["break_even_us_per_kernel"] - 1.0) < 1e-9  # 10 networks x 0.1 ms over 1000 kernels
