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


def test_the_stacked_count_is_per_layer_and_its_products_are_five_per_layer():
    """A square layer's forward product, its input gradient, the two batch Gram matrices of its
    gradient norm and its weight gradient taken into the momentum buffer: five batched products
    per layer whatever the number of networks; the bytes grow with the networks."""
    one = bench.count_stacked(["ReLU"], width=8, batch=4, in_features=5)
    two = bench.count_stacked(["ReLU", "ReLU"], width=8, batch=4, in_features=5)
    assert one["operators_per_layer_step"]["bmm"] == two["operators_per_layer_step"]["bmm"] == 4
    assert one["operators_per_layer_step"]["baddbmm_"] == two["operators_per_layer_step"]["baddbmm_"] == 1
    assert one["kernels_per_layer_step"] == two["kernels_per_layer_step"]
    assert two["bytes_per_layer_step"] > one["bytes_per_layer_step"] > 3 * 8 * 8 * 4  # at least one weight read
    prediction = bench.lease_prediction(1e6, 10, 1e12, depth=100, steps=1000, seconds=1.0)
    assert prediction["seconds_per_network_step"] == 1e-4 and prediction["networks"] == 10
    assert abs(prediction["break_even_us_per_kernel"] - 1.0) < 1e-9  # 10 networks x 0.1 ms over 1000 kernels


def test_the_compiled_count_has_fewer_kernels_and_bytes_and_sees_the_generated_kernels():
    """Compiled, a stacked layer-step launches the four batched products, the product into the
    momentum buffer and the kernels Inductor generates for the element-wise work: fewer kernels
    and bytes than eager, where each operator of the masked activations is a kernel of its own."""
    kwargs = {"width": 32, "batch": 4, "in_features": 5, "depths": (2, 3)}
    eager = bench.count_stacked(["ReLU", "Tanh-GPN"], **kwargs)
    compiled = bench.count_stacked(["ReLU", "Tanh-GPN"], compile=True, **kwargs)
    assert eager["operators_per_layer_step"]["bmm"] == compiled["operators_per_layer_step"]["bmm"] == 4
    assert eager["operators_per_layer_step"]["baddbmm_"] == compiled["operators_per_layer_step"]["baddbmm_"] == 1
    generated = compiled["kernels_per_layer_step"] - sum(compiled["operators_per_layer_step"].values())
    assert 3 <= generated <= 6  # row norms with the update, activation forward, its backward, radial term
    assert compiled["kernels_per_layer_step"] < eager["kernels_per_layer_step"] / 2
    assert compiled["bytes_per_layer_step"] < eager["bytes_per_layer_step"]
    # V read by the forward and the input-gradient products, the buffer read and written by the product
    # taken into it, V and the buffer read and written by the update (which also gives the row norms)
    assert compiled["square_bytes_per_layer_step"] == 2 * 8 * 32 * 32 * 4
    assert eager["square_bytes_per_layer_step"] == 2 * 11 * 32 * 32 * 4  # and separate passes for the norms, the update
    grouped = bench.count_grouped(["ReLU", "ReLU-GPN", "Tanh"], **kwargs)
    assert grouped["groups"] == 2 and grouped["kernels_per_layer_step"] == sum(
        bench.count_stacked(g, **kwargs)["kernels_per_layer_step"] for g in (["ReLU", "ReLU-GPN"], ["Tanh"]))
