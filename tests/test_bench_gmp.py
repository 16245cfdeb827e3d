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


def test_the_stacked_count_is_six_kernels_per_layer_whatever_the_networks_and_bn():
    """A square layer-step of the stacked kernels: its three batched products (forward, input
    gradient, weight gradient into the product buffer) and the three stacked operators, for one
    network and for twelve, with and without BN; the torch reference launches many more; the bytes
    grow with the networks; the n x n bytes are eight passes (V by the forward and input-gradient
    products, the product written, then read with V and the buffer, V and the buffer written)."""
    kwargs = {"width": 32, "batch": 4, "in_features": 5, "depths": (2, 3)}
    twelve = bench.count_stacked(["ReLU", "Tanh-GPN", "SELU", "ELU-GPN", "GELU", "LeakyReLU"] * 2, **kwargs)
    for labels in (["ReLU"], ["ReLU", "Tanh-GPN"]):
        for batchnorm in (False, True):
            row = bench.count_stacked(labels, batchnorm, **kwargs)
            assert row["kernels_per_layer_step"] == 6, row
            assert row["operators_per_layer_step"] == {"bmm": 3, **dict.fromkeys(bench.STACKED_OPERATORS, 1)}, row
            assert row["square_bytes_per_layer_step"] == len(labels) * 8 * 32 * 32 * 4
    assert twelve["kernels_per_layer_step"] == 6 and twelve["bytes_per_layer_step"] > 5 * row["bytes_per_layer_step"]
    reference = bench.count_stacked(["ReLU", "Tanh-GPN"], kernels=False, **kwargs)
    assert reference["kernels_per_layer_step"] > 20 and reference["operators_per_layer_step"]["bmm"] == 3


def test_the_count_prints_one_json_object_with_every_mode_and_one_network():
    import json

    lines = []
    bench.count(print_fn=lines.append, labels=["ReLU", "SELU-GPN"], as_json=True, width=16, batch=4, in_features=5,
                depths=(2, 3))
    result = json.loads("\n".join(lines))
    rows = {(r["networks"], r["batchnorm"], r["mode"]): r["kernels_per_layer_step"] for r in result["rows"]}
    assert set(rows) == {(n, bn, m) for bn in (False, True) for n, m in ((2, "stacked kernels"), (2, "torch reference"),
                                                                        (1, "stacked kernels, one network"))}
    for bn in (False, True):
        assert rows[(2, bn, "stacked kernels")] == rows[(1, bn, "stacked kernels, one network")] == 6
    floor = result["floor_per_network_step"]
    assert floor["seconds"] == max(floor["flop_seconds"], floor["byte_seconds"]) > 0
