"""Facts about the implicit-representation networks and the image-fitting loop (SIREN, SBSNN)."""

import math

import numpy as np
import pytest
import torch
from skimage.metrics import peak_signal_noise_ratio

from gmp.data.images import cameraman, coordinate_grid, image_fitting_data
from gmp.implicit import (FitResult, build_model, default_levels, fit_image, mse_to_psnr, psnr, psnr_steps_table,
                          target_reading, unfinished_title)
from gmp.models.implicit import ImplicitMLP, SineLayer, Siren


def test_psnr_matches_skimage_after_mapping_and_clipping():
    gen = torch.Generator().manual_seed(0)
    target = torch.rand(32, 32, generator=gen) * 2 - 1
    prediction = target + 0.3 * torch.randn(32, 32, generator=gen)  # leaves [-1, 1] in places
    ours = psnr(prediction, target)
    p = ((prediction.numpy().astype(np.float64) + 1) / 2).clip(0, 1)
    t = (target.numpy().astype(np.float64) + 1) / 2
    assert ours == pytest.approx(peak_signal_noise_ratio(t, p, data_range=1), abs=1e-9)
    unclipped = 10 * math.log10(4 / torch.mean((prediction.double() - target.double()) ** 2).item())
    assert ours > unclipped  # clipping can only help


def test_mse_to_psnr():
    assert mse_to_psnr(1e-5) == pytest.approx(10 * math.log10(4e5))
    x = torch.linspace(-0.5, 0.5, 100)
    assert psnr(x + 0.01, x) == pytest.approx(mse_to_psnr(1e-4))


def test_siren_init_bounds():
    torch.manual_seed(0)
    model = Siren(2, 1, hidden_features=64, hidden_layers=3)
    first, *hidden, out = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert first.weight.abs().max() <= 1 / 2 and first.weight.abs().max() > 0.45
    bound = math.sqrt(6 / 64) / 30
    for layer in [*hidden, out]:
        assert layer.weight.abs().max() <= bound and layer.weight.abs().max() > 0.9 * bound
    for layer in hidden:  # PyTorch's default bias init is kept
        assert layer.bias.abs().max() <= 1 / math.sqrt(64) and layer.bias.abs().max() > 0.9 / math.sqrt(64)
    assert len(hidden) == 3
    x = torch.randn(5, 2)
    assert torch.allclose(model.net[0](x), torch.sin(30 * first(x)))


def test_siren_preactivations_are_roughly_standard_normal():
    # Sitzmann et al.: with their init, omega_0 W x of a hidden layer is ~ N(0, 1) (biases aside)
    torch.manual_seed(0)
    model = Siren(2, 1, hidden_features=512, hidden_layers=3)
    h = model.net[1](model.net[0](torch.rand(4096, 2) * 2 - 1))
    z = 30 * h @ model.net[2].linear.weight.T
    assert abs(z.std().item() - 1) < 0.1


def test_sbsnn_mlp_is_orthogonal_with_zero_bias_and_siren_first_layer():
    torch.manual_seed(0)
    model = ImplicitMLP("sin", hidden_features=48, hidden_layers=5)
    linears = [m for m in model.net if isinstance(m, torch.nn.Linear)]
    assert isinstance(model.net[0], SineLayer) and model.net[0].is_first
    assert len(linears) == 6  # five hidden layers and the output
    for layer in linears[:-1]:
        w = layer.weight
        assert torch.allclose(w @ w.T, torch.eye(48), atol=1e-5)
        assert torch.count_nonzero(layer.bias) == 0
    out = linears[-1].weight
    assert out.shape == (1, 48) and out.norm().item() == pytest.approx(1, abs=1e-5)


def test_encoder_model_dimensions():
    model = build_model({"model": "sbsnn", "activation": "gpn_tanh", "encoder": "rotated",
                         "first_layer": "orthogonal"}, side=256)
    first = model.net[0]
    assert first.in_features == 3 * 2 * 2 * default_levels(256) == 72
    assert model(torch.zeros(3, 2)).shape == (3, 1)
    assert default_levels(256) == 6 and default_levels(64) == 4


def test_coordinate_grid_and_cameraman():
    grid = coordinate_grid(4)
    assert grid.shape == (16, 2)
    assert torch.allclose(grid[1], torch.tensor([-1.0, -1 / 3]))  # row-major: second entry moves first
    img = cameraman(64)
    assert img.shape == (64, 64) and img.min() >= -1 and img.max() <= 1 and img.std() > 0.3
    coords, pixels = image_fitting_data(32)
    assert coords.shape == (1024, 2) and pixels.shape == (1024, 1)


def test_fit_reduces_error_records_curves_and_snapshots():
    torch.manual_seed(0)
    coords, pixels = image_fitting_data(16)
    model = build_model({"model": "sbsnn", "activation": "sin", "hidden_features": 32}, side=16)
    result = fit_image(model, coords, pixels, steps=60, lr=1e-3, plateau={"factor": 0.5, "patience": 5},
                       snapshot_steps=[0, 59], progress=False)
    assert result.mse[-1] < 0.5 * result.mse[0]
    assert result.psnr[-1] > result.psnr[0]
    assert set(result.snapshots) == {0, 59} and result.snapshots[0].shape == (16, 16)
    assert result.diverged_at is None
    assert result.lr[0] == 1e-3 and np.all(np.diff(result.lr) <= 0)
    back = FitResult.from_json(result.to_json())
    assert np.array_equal(back.mse, result.mse) and back.first_step_below(1.0) == result.first_step_below(1.0)


def test_divergence_is_recorded_not_raised():
    torch.manual_seed(0)
    coords, pixels = image_fitting_data(8)
    model = build_model({"model": "sbsnn", "activation": "sin", "hidden_features": 16}, side=8)
    with torch.no_grad():
        model.net[-1].weight.fill_(float("nan"))
    result = fit_image(model, coords, pixels, steps=5, lr=1e-3, progress=False)
    assert result.diverged_at == 0 and np.all(np.isnan(result.mse))


def test_bad_specs():
    with pytest.raises(ValueError):
        build_model({"model": "mlp"})
    with pytest.raises(ValueError):
        build_model({"model": "sbsnn", "activation": "sin", "encoder": "fourier"}, side=64)
    with pytest.raises(ValueError):
        ImplicitMLP("sin", first_layer="relu")


def _tiny_fit(**kwargs):
    torch.manual_seed(0)
    coords, pixels = image_fitting_data(8)
    model = build_model({"model": "sbsnn", "activation": "sin", "hidden_features": 16, "hidden_layers": 2}, side=8)
    return fit_image(model, coords, pixels, lr=1e-3, plateau={"factor": 0.5, "patience": 2}, progress=False, **kwargs)


def _interrupt_at_update_8(path, monkeypatch, **kwargs):
    """``_tiny_fit`` with a checkpoint at ``path`` every 3 updates, interrupted at Adam's 8th update."""
    calls = {"n": 0}
    adam_step = torch.optim.Adam.step

    def failing_step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 8:
            raise KeyboardInterrupt
        return adam_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", failing_step)
    with pytest.raises(KeyboardInterrupt):
        _tiny_fit(steps=12, checkpoint=path, checkpoint_every=3, **kwargs)
    monkeypatch.setattr(torch.optim.Adam, "step", adam_step)


def test_an_interrupted_fit_resumes_from_its_checkpoint_to_the_same_curves(tmp_path, monkeypatch):
    whole = _tiny_fit(steps=12, snapshot_steps=[2, 9])
    path = tmp_path / "fit.pt"
    _interrupt_at_update_8(path, monkeypatch, snapshot_steps=[2, 9])
    assert torch.load(path, weights_only=True)["step"] == 6  # the last checkpoint before step 8, tensors only
    resumed = _tiny_fit(steps=12, snapshot_steps=[2, 9], checkpoint=path, checkpoint_every=3)
    assert np.array_equal(resumed.mse, whole.mse) and np.array_equal(resumed.lr, whole.lr)
    assert all(np.array_equal(resumed.snapshots[k], whole.snapshots[k]) for k in (2, 9))
    again = _tiny_fit(steps=12, snapshot_steps=[2, 9], checkpoint=path)  # finished: returned as is
    assert np.array_equal(again.mse, whole.mse)
    with pytest.raises(ValueError, match="delete it or pass another"):
        _tiny_fit(steps=13, checkpoint=path)


def test_a_checkpoint_whose_step_disagrees_with_what_it_holds_is_refused(tmp_path, monkeypatch):
    # As fit_stack's epoch (issue 38): a changed step resumed with NaN-padded or shifted curves.
    path = tmp_path / "fit.pt"
    _interrupt_at_update_8(path, monkeypatch)
    state = torch.load(path, weights_only=True)
    assert state["step"] == 6
    mse = state["mse"].clone()
    mse[6] = 0.5
    for change, message in (({"step": 9}, "its step 9 disagrees with its curves, which hold 6"),
                            ({"step": 3}, "its step 3 disagrees with its curves, which hold 6"),
                            ({"step": 7, "mse": mse}, r"its step 7 disagrees with its optimiser's \[6.0\] steps"),
                            ({"step": 0}, "its step 0 is not one of 1 to 12"),
                            ({"step": 13}, "its step 13 is not one of 1 to 12")):
        torch.save({**state, **change}, path)
        with pytest.raises(ValueError, match=f"checkpoint {path}: its step does not fit this fit.*{message}"):
            _tiny_fit(steps=12, checkpoint=path, checkpoint_every=3)
    torch.save(state, path)
    assert np.array_equal(_tiny_fit(steps=12, checkpoint=path, checkpoint_every=3).mse, _tiny_fit(steps=12).mse)


class Payload:
    """An object whose unpickling would run code: what a crafted checkpoint could hold."""

    ran = False

    def __reduce__(self):
        return (setattr, (Payload, "ran", True))


def test_a_checkpoint_holding_other_objects_than_tensors_is_refused_not_unpickled(tmp_path):
    path = tmp_path / "fit.pt"
    torch.save({"settings": {}, "payload": Payload()}, path)
    with pytest.raises(ValueError, match="holds objects other than tensors and plain values"):
        _tiny_fit(steps=4, checkpoint=path)
    assert not Payload.ran


def test_a_checkpoint_of_another_structure_is_refused_clearly(tmp_path):
    path = tmp_path / "fit.pt"
    torch.save([1, 2], path)
    with pytest.raises(ValueError, match="holds a list, not a dict"):
        _tiny_fit(steps=4, checkpoint=path)
    torch.save({"settings": {}}, path)
    with pytest.raises(ValueError, match="lacks the entries"):
        _tiny_fit(steps=4, checkpoint=path)


def test_stop_below_ends_the_fit_at_the_target_after_min_steps():
    whole = _tiny_fit(steps=40)
    target = float(whole.mse[10])
    first = whole.first_step_below(target)
    early = _tiny_fit(steps=40, stop_below=target)
    assert len(early.mse) == first + 1 and np.array_equal(early.mse, whole.mse[:first + 1])
    later = _tiny_fit(steps=40, stop_below=target, min_steps=first + 6)
    assert len(later.mse) >= first + 6 and later.mse[-1] <= target


def test_compile_matches_eager_and_falls_back_when_compilation_fails(monkeypatch):
    eager = _tiny_fit(steps=4)
    compiled = _tiny_fit(steps=4, compile=True)
    assert np.allclose(compiled.mse, eager.mse, rtol=1e-4)

    def broken(model):
        def fail(x):
            raise RuntimeError("no C++ compiler")
        return fail

    monkeypatch.setattr(torch, "compile", broken)
    with pytest.warns(UserWarning, match="no C\\+\\+ compiler"):
        fallback = _tiny_fit(steps=4, compile=True)
    assert np.array_equal(fallback.mse, eager.mse)


def test_steps_to_psnr_levels_and_their_table():
    psnr_curve = np.array([10.0, 26.0, 31.0, 29.0, 36.0])
    fit = FitResult(4 / 10 ** (psnr_curve / 10), psnr_curve, np.full(5, 1e-3), {}, None, 0.0)
    steps = fit.steps_to_psnr()
    assert steps == {"25": 1, "30": 2, "35": 4, "40": None, "50": None}
    rows = {"a": {"steps_to_psnr": steps}, "b": {"steps_to_psnr": steps}}
    paper = {"a": {"steps_to_psnr": fit.steps_to_psnr([25, 30, 35, 40, 50])}, "c": {"steps_to_psnr": steps}}
    html = psnr_steps_table(rows, paper, {"a": "net A", "b": "net B", "c": "net C", "d": "net D"}).to_html()
    assert "2 / 2" in html and "never / never" in html and "2 / not run" in html and "net B" in html
    assert "not run / 2" in html and "net C" in html and "net D" not in html  # C ran at paper scale only


def test_the_reading_of_a_figure_names_who_reaches_the_target_and_who_fits_best():
    def row(first, at, best):
        return {"first_below_target": first, "psnr_at_compare": at, "best_psnr": best, "steps": 300}

    labels = {"s": "sin", "t": "tri", "r": "relu", "siren": "SIREN"}
    rows = {"s": row(None, 20.0, 30.0), "t": row(None, 22.0, 33.0), "r": row(None, 21.0, 35.0),
            "siren": row(250, 40.0, 56.2)}
    text = target_reading(rows, labels, ["s", "t"], 1e-5, 100)
    assert text.startswith("SIREN reaches an MSE of 1e-05 (56.0 dB) at step 250.")
    assert "At step 100 the networks of the SBSNN family stand at 20.0 dB (sin), 22.0 dB (tri)" in text
    assert "the best of them reaches 33.0 dB (tri, 300 steps)" in text
    assert text.endswith("Other networks fit better: SIREN (56.2 dB), relu (35.0 dB).")
    rows["t"] = row(120, 22.0, 57.0)
    text = target_reading({k: rows[k] for k in ("s", "t", "r")}, labels, ["s", "t"], 1e-5, 100)
    assert "tri reaches an MSE of 1e-05 (56.0 dB) at step 120" in text and "Other networks" not in text
    assert target_reading({"r": rows["r"]}, labels, ["s"], 1e-5, 100).startswith("no network reaches")


def test_an_unfinished_runs_title_says_whether_its_figure_is_complete():
    assert unfinished_title(3, 14, 256) == "paper scale, unfinished run: 3 of 14 networks so far (256×256)"
    assert unfinished_title(14, 14, 256) == "paper scale, unfinished run: all 14 networks of this figure (256×256)"


def test_first_gain_gives_unit_mean_square_preactivations_after_an_encoder():
    # A semi-orthogonal d -> width layer keeps the encoding's squared norm d exactly, so the
    # pre-activations have mean square d / width; the gain sqrt(width / d) makes it 1.
    from gmp.encoders import PositionalEncoding

    coords = coordinate_grid(16).reshape(-1, 2)
    encoder = PositionalEncoding(3, rotated=True)
    d = encoder.out_features(2)
    for gain, expected in ((1.0, d / 96), (math.sqrt(96 / d), 1.0)):
        torch.manual_seed(0)
        model = ImplicitMLP("sin", hidden_features=96, first_layer="orthogonal", encoder=encoder, first_gain=gain)
        z = model.net[0](encoder(coords))
        assert (z ** 2).sum(dim=1).mean().item() / 96 == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="first_gain"):
        ImplicitMLP("sin", first_gain=0.0)


def test_siren_scale_multiplies_the_first_layers_output_and_nothing_else():
    x = torch.rand(64, 2) * 2 - 1
    torch.manual_seed(0)
    plain = ImplicitMLP("sin", hidden_features=32)
    torch.manual_seed(0)
    scaled = ImplicitMLP("sin", hidden_features=32, siren_scale=math.sqrt(2))
    assert torch.allclose(scaled.net[0](x), math.sqrt(2) * plain.net[0](x))
    for a, b in zip(plain.parameters(), scaled.parameters()):
        assert torch.equal(a, b)
    assert build_model({"model": "sbsnn", "activation": "sin", "siren_scale": 2.0}).net[0].scale == 2.0
    with pytest.raises(ValueError, match="scale"):
        SineLayer(2, 4, scale=-1.0)


@pytest.mark.parametrize("change, error, message", [
    ({"lr": float("nan")}, ValueError, "lr must be a finite number > 0, got nan"),
    ({"pixels": torch.rand(64)}, ValueError, r"pixels must be \(pixels, 1\)"),
    ({"coords": torch.zeros(0, 2), "pixels": torch.zeros(0, 1)}, ValueError, "hold no pixels"),
    ({"pixels": torch.full((64, 1), float("nan"))}, ValueError, "pixels holds 64 NaN"),
    ({"coords": torch.zeros(64, 2, dtype=torch.long)}, TypeError, "coords must be floating point"),
    ({"steps": 2.5}, TypeError, "steps must be an integer"),
    ({"stop_below": float("nan")}, ValueError, "stop_below must be None or a finite number"),
    ({"min_steps": -1}, ValueError, "min_steps must be at least 0"),
])
def test_fit_image_refuses_bad_arguments_with_the_same_validation_as_fit_stack(change, error, message):
    coords, pixels = image_fitting_data(8)
    args = {"coords": coords, "pixels": pixels, "steps": 2, "lr": 1e-3, **change}
    model = build_model({"model": "sbsnn", "activation": "sin", "hidden_features": 8, "hidden_layers": 1}, side=8)
    with pytest.raises(error, match=message):
        fit_image(model, args.pop("coords"), args.pop("pixels"), progress=False, **args)


def test_a_checkpoint_with_an_empty_model_is_refused_by_name_not_by_torch(tmp_path):
    path = tmp_path / "fit.pt"
    _tiny_fit(steps=4, checkpoint=path)
    torch.save({**torch.load(path, weights_only=True), "model": {}}, path)
    with pytest.raises(ValueError, match=f"checkpoint {path}: its model does not fit this fit .*Missing key.*"
                                         "delete it to start afresh"):
        _tiny_fit(steps=4, checkpoint=path)


def test_the_refusal_of_a_crafted_checkpoint_never_suggests_loading_it_unsafely(tmp_path):
    path = tmp_path / "fit.pt"
    torch.save({"settings": {}, "payload": Payload(), "array": np.zeros(2)}, path)
    with pytest.raises(ValueError) as info:
        _tiny_fit(steps=4, checkpoint=path)
    message = str(info.value)
    assert "delete it to start afresh" in message and not Payload.ran
    assert "weights_only" not in message and "allowlist" not in message and "if you trust" not in message
