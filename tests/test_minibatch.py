"""The SBSNN author's protocol: the classic image, his encoder, Keras's schedule and Adam, mini-batch epochs."""

from __future__ import annotations

import math
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch

from gmp import minibatch as mb
from gmp.data import DataUnavailableError
from gmp.data.images import IMAGES, coordinate_grid, grey_image
from gmp.encoders import AuthorEncoding

SMALL = {"model": "sbsnn", "sizes": [2, 24, 16, 16, 1], "activation": "sin", "first_layer": "encoder"}


def test_the_classic_and_the_author_photographs_load_offline_and_differ_from_todays_skimage():
    classic, author = grey_image(512, "classic"), grey_image(256, "author")
    assert classic.shape == (512, 512) and author.shape == (256, 256)
    assert 0.0 <= float(author.min()) and float(author.max()) <= 1.0
    levels = author * 255
    assert torch.allclose(levels, levels.round(), atol=1e-4)  # the author's file read exactly, value / 255
    resized = grey_image(256, "classic")
    assert float(((resized - author) ** 2).mean()) < 0.005  # the same photograph
    pytest.importorskip("skimage")
    assert float(((grey_image(256, "skimage") - resized) ** 2).mean()) > 0.02  # a different photograph


def test_a_missing_photograph_fails_naming_the_file_the_source_and_gmp_data(tmp_path, monkeypatch):
    monkeypatch.setenv("GMP_DATA", str(tmp_path))

    def offline(*args, **kwargs):
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(DataUnavailableError) as err:
        grey_image(256, "author")
    text = str(err.value)
    assert IMAGES["author"].relpath in text and IMAGES["author"].url in text and "GMP_DATA" in text


def test_xy_grid_gives_column_then_row_coordinates():
    ij, xy = coordinate_grid(4), coordinate_grid(4, indexing="xy")
    assert torch.equal(xy, ij.flip(-1))
    assert xy[1].tolist() == pytest.approx([-1 / 3, -1.0])  # second pixel of the first row: next column


@pytest.mark.parametrize("rotated, levels", [(False, 48), (True, 16)])
def test_author_encoder_has_his_frequencies_count_amplitude_and_feature_order(rotated, levels):
    enc = AuthorEncoding(192, rotated=rotated, scale_factor=0.5)
    assert enc.levels == levels
    assert enc.frequencies.tolist() == [2.0 ** k for k in range(levels)]  # no factor pi
    p = torch.tensor([[0.3, -0.7]], dtype=torch.float64)
    out = enc(p)[0]
    f = enc.frequencies
    if not rotated:
        expected = torch.cat([torch.sin(0.3 * f), torch.sin(-0.7 * f), torch.cos(0.3 * f), torch.cos(-0.7 * f)])
    else:
        c, s = math.cos(2 * math.pi / 3), math.sin(2 * math.pi / 3)
        copies = [torch.eye(2, dtype=torch.float64), torch.tensor([[c, s], [s, c]], dtype=torch.float64),
                  torch.tensor([[c * c, s * s], [s * s, c * c]], dtype=torch.float64)]
        expected = torch.cat([torch.cat([torch.cos(q[0] * f), torch.cos(q[1] * f), torch.sin(q[0] * f),
                                         torch.sin(q[1] * f)]) for q in (p[0] @ a for a in copies)])
    assert out.shape == (192,)
    torch.testing.assert_close(out, expected)  # amplitude sqrt(2 * 0.5) = 1


def test_author_matrices_are_not_rotations_and_the_switch_gives_true_ones():
    author = AuthorEncoding(12, rotated=True).copy_matrices()
    true = AuthorEncoding(12, rotated=True, matrices="rotations").copy_matrices()
    assert torch.linalg.det(author[1]).item() == pytest.approx(-0.5)
    torch.testing.assert_close(author[2], torch.tensor([[0.25, 0.75], [0.75, 0.25]], dtype=torch.float64))
    for a in true:
        torch.testing.assert_close(a @ a.T, torch.eye(2, dtype=torch.float64))
        assert torch.linalg.det(a).item() == pytest.approx(1.0)
    p = torch.tensor([[0.5, 0.2]], dtype=torch.float64)
    torch.testing.assert_close(p @ true[1], (torch.tensor([[-0.5, -math.sqrt(3) / 2], [math.sqrt(3) / 2, -0.5]],
                                                          dtype=torch.float64) @ p.T).T)


def test_author_encoder_refuses_widths_it_cannot_fill_and_integer_input():
    with pytest.raises(ValueError, match="multiple of 12"):
        AuthorEncoding(100, rotated=True)
    with pytest.raises(ValueError, match="floating-point"):
        AuthorEncoding(12)(torch.tensor([[1, 0]]))


def test_keras_plateau_halves_at_the_patience_th_flat_epoch_with_an_absolute_min_delta():
    rule = mb.Plateau(0.5, 2, "keras")
    lrs = [1.0]
    for loss in [1.0, 0.99995, 0.9999, 0.5, 0.49995]:  # improvement needs loss < best - 1e-4
        lrs.append(rule.step(loss, lrs[-1]))
    assert lrs == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5]


def test_keras_plateau_halves_every_patience_epochs_once_the_loss_is_below_min_delta():
    rule, lr, history = mb.Plateau(0.5, 3, "keras"), 1.0, []
    for epoch in range(10):
        lr = rule.step(1e-5 / 2 ** epoch, lr)  # still falling fast, but by less than 1e-4 each epoch
        history.append(lr)
    assert history == [1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.125]


def test_torch_plateau_matches_torch_reduce_lr_on_plateau():
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=1.0)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=2)
    rule, lr = mb.Plateau(0.5, 2, "torch"), 1.0
    for loss in [1.0, 0.99995, 0.9999, 0.99, 0.99, 0.99, 0.99, 0.5, 0.5, 0.5, 0.5]:
        sched.step(loss)
        lr = rule.step(loss, lr)
        assert lr == pytest.approx(opt.param_groups[0]["lr"])


def test_keras_adam_step_matches_the_tf2_formula():
    p = torch.nn.Parameter(torch.tensor([[[1.0, -2.0]]]))
    adam = mb._Adam([p], "keras")
    grads = [torch.tensor([[[0.5, 1e-8]]]), torch.tensor([[[-0.3, 2e-8]]])]
    m = v = np.zeros(2)
    ref = np.array([1.0, -2.0])
    for t, g in enumerate(grads, start=1):
        adam.step([g], torch.tensor([1e-3]))
        gn = g.numpy().ravel().astype(float)
        m, v = 0.9 * m + 0.1 * gn, 0.999 * v + 0.001 * gn ** 2
        ref = ref - 1e-3 * math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t) * m / (np.sqrt(v) + 1e-7)
    np.testing.assert_allclose(p.detach().numpy().ravel(), ref, rtol=1e-6)


def test_an_epoch_visits_every_training_pixel_once_in_ceil_n_over_batch_updates(monkeypatch):
    held = mb.heldout_pixels(100, 0.25, seed=7)
    train = torch.tensor(sorted(set(range(100)) - set(held.tolist())))
    order = mb.epoch_order(train, [torch.Generator().manual_seed(s) for s in (0, 1)])
    for row in order:
        assert sorted(row.tolist()) == train.tolist()
    assert not torch.equal(order[0], order[1])
    calls = []
    real = mb._Adam.step
    monkeypatch.setattr(mb._Adam, "step", lambda self, grads, lrs: (calls.append(1), real(self, grads, lrs)))
    x, y = torch.randn(100, 24), torch.rand(100, 1)
    fits = mb.fit_stack(mb.layers(SMALL), [0], x, y, epochs=3, lr=1e-3, batch_size=32, heldout=held)
    assert fits[0].updates_per_epoch == math.ceil(75 / 32) == 3
    assert len(calls) == 3 * 3
    assert np.isfinite(fits[0].heldout_mse).all()


def test_held_out_pixels_are_fixed_by_seed_disjoint_and_of_the_asked_share():
    a, b, c = mb.heldout_pixels(1000, 0.25, 3), mb.heldout_pixels(1000, 0.25, 3), mb.heldout_pixels(1000, 0.25, 4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.numel() == 250 and a.unique().numel() == 250


def test_a_network_does_not_depend_on_its_stack_and_a_diverged_one_is_recorded():
    x, y = torch.randn(64, 24), torch.rand(64, 1)
    alone = mb.fit_stack(mb.layers(SMALL), [5], x, y, epochs=3, lr=1e-3, batch_size=16)[0]
    stacked = mb.fit_stack(mb.layers(SMALL), [9, 5], x, y, epochs=3, lr=[1e30, 1e-3], batch_size=16)
    np.testing.assert_allclose(stacked[1].train_mse, alone.train_mse, rtol=1e-5)
    assert stacked[0].diverged_at is not None and stacked[1].diverged_at is None


def test_an_interrupted_fit_resumes_to_the_same_curves(tmp_path, monkeypatch):
    x, y = torch.randn(64, 24), torch.rand(64, 1)
    kwargs = dict(epochs=4, lr=1e-3, batch_size=16, plateau={"factor": 0.5, "patience": 1}, checkpoint_every=2)
    whole = mb.fit_stack(mb.layers(SMALL), [1, 2], x, y, **kwargs)
    real, calls = mb._Adam.step, []

    def failing(self, grads, lrs):
        calls.append(1)
        if len(calls) > 2 * 4 + 1:  # in the third epoch, after the checkpoint of epoch 2
            raise KeyboardInterrupt
        real(self, grads, lrs)

    monkeypatch.setattr(mb._Adam, "step", failing)
    with pytest.raises(KeyboardInterrupt):
        mb.fit_stack(mb.layers(SMALL), [1, 2], x, y, checkpoint=tmp_path / "fit.pt", **kwargs)
    monkeypatch.setattr(mb._Adam, "step", real)
    resumed = mb.fit_stack(mb.layers(SMALL), [1, 2], x, y, checkpoint=tmp_path / "fit.pt", **kwargs)
    for a, b in zip(whole, resumed):
        np.testing.assert_array_equal(a.train_mse, b.train_mse)
        np.testing.assert_array_equal(a.lr, b.lr)



def test_a_checkpoint_holds_cpu_tensors_and_is_read_onto_the_cpu(tmp_path, monkeypatch):
    """A fit on a GPU writes a checkpoint that any machine reads: its Adam moments are saved from
    the CPU, and it is loaded onto the CPU (its shuffling generators are CPU generators, whose
    state cannot be set from a GPU tensor) and then moved to the parameters' device."""
    x, y = torch.randn(64, 24), torch.rand(64, 1)
    kwargs = dict(epochs=2, lr=1e-3, batch_size=16, checkpoint_every=1)
    seen, original = [], mb.load_checkpoint
    monkeypatch.setattr(mb, "load_checkpoint", lambda path, map_location, keys: seen.append(map_location)
                        or original(path, map_location=map_location, keys=keys))
    saved = []
    real_save = torch.save
    monkeypatch.setattr(torch, "save", lambda obj, f, *a, **k: saved.append(obj) or real_save(obj, f, *a, **k))
    first = mb.fit_stack(mb.layers(SMALL), [1], x, y, checkpoint=tmp_path / "fit.pt", **kwargs)
    assert saved and all(t.device.type == "cpu" for t in saved[-1]["m"] + saved[-1]["v"] + saved[-1]["params"])
    again = mb.fit_stack(mb.layers(SMALL), [1], x, y, checkpoint=tmp_path / "fit.pt", **kwargs)
    assert seen == ["cpu"]
    np.testing.assert_array_equal(again[0].train_mse, first[0].train_mse)


def test_an_adam_step_copies_nothing_from_the_host(monkeypatch):
    """No ``torch.tensor(...)`` per update: on a GPU each one is a copy from the host that waits for the device."""
    params = [torch.zeros(2, 3, requires_grad=True)]
    adam = mb._Adam(params, "torch")
    made = []
    real = torch.tensor
    monkeypatch.setattr(torch, "tensor", lambda *a, **k: made.append(a) or real(*a, **k))
    for _ in range(3):
        adam.step([torch.ones(2, 3)], torch.full((2,), 1e-3))
    assert made == [] and adam.t == 3 and float(adam._root_c2) == pytest.approx((1 - 0.999 ** 3) ** 0.5)


def test_a_fit_with_stop_below_ends_at_the_first_epoch_at_or_below_it_and_a_rerun_does_not_train_on(tmp_path):
    x, y = torch.randn(64, 24), torch.rand(64, 1)
    kwargs = dict(lr=1e-2, batch_size=64, checkpoint_every=100)
    full = mb.fit_stack(mb.layers(SMALL), [3], x, y, epochs=40, **kwargs)[0]
    threshold = float(full.train_mse[9])  # reached at epoch 10 (or earlier, if the curve is not monotone)
    first = int(np.flatnonzero(full.train_mse <= threshold)[0]) + 1
    stopped = mb.fit_stack(mb.layers(SMALL), [3], x, y, epochs=40, stop_below=threshold,
                           checkpoint=tmp_path / "fit.pt", **kwargs)[0]
    assert len(stopped.train_mse) == first < 40
    np.testing.assert_array_equal(stopped.train_mse, full.train_mse[:first])
    again = mb.fit_stack(mb.layers(SMALL), [3], x, y, epochs=40, stop_below=threshold,
                         checkpoint=tmp_path / "fit.pt", **kwargs)[0]
    np.testing.assert_array_equal(again.train_mse, stopped.train_mse)

def test_a_checkpoint_of_another_structure_is_refused_clearly(tmp_path):
    x, y = torch.randn(64, 24), torch.rand(64, 1)
    torch.save([1, 2], tmp_path / "fit.pt")
    with pytest.raises(ValueError, match="holds a list, not a dict"):
        mb.fit_stack(mb.layers(SMALL), [1], x, y, epochs=1, lr=1e-3, batch_size=16, checkpoint=tmp_path / "fit.pt")
    torch.save({"settings": {}}, tmp_path / "fit.pt")
    with pytest.raises(ValueError, match="lacks the entries"):
        mb.fit_stack(mb.layers(SMALL), [1], x, y, epochs=1, lr=1e-3, batch_size=16, checkpoint=tmp_path / "fit.pt")


def test_curves_round_trip_through_json_and_psnr_is_on_the_unit_scale():
    fit = mb.EpochCurves(np.array([1e-4, np.nan]), np.array([4e-4, 4e-6]), None, np.array([1e-3, 1e-3]),
                         np.array([1.0, 2.0]), 10, 0.25, 2)
    again = mb.EpochCurves.from_json(fit.to_json())
    np.testing.assert_allclose(again.psnr("train"), [40.0, 60.0])
    assert again.first_epoch_at(56.0) == 2 and again.diverged_at == 2
    with pytest.raises(ValueError, match="held out no pixels"):
        again.psnr("heldout")


def test_siren_spec_has_sirens_layers():
    spec = mb.layers({"model": "siren", "hidden_features": 8, "hidden_layers": 2})
    assert [(d.fan_in, d.fan_out, d.omega is not None) for d in spec] == [(2, 8, True), (8, 8, True), (8, 8, True),
                                                                         (8, 1, False)]
    with pytest.raises(ValueError, match="unknown activation|activation"):
        mb.layers({**SMALL, "activation": "nope"})


def _bad_stack_call(**change):
    """fit_stack on a 64-pixel image with one change to otherwise good arguments."""
    args = {"spec_layers": mb.layers(SMALL), "seeds": [1], "inputs": torch.randn(64, 24), "targets": torch.rand(64, 1),
            "epochs": 1, "lr": 1e-3, "batch_size": 16}
    args.update(change)
    return mb.fit_stack(args.pop("spec_layers"), args.pop("seeds"), args.pop("inputs"), args.pop("targets"), **args)


NAN_X = torch.randn(64, 24).index_put_((torch.tensor([3]), torch.tensor([2])), torch.tensor(float("nan")))


@pytest.mark.parametrize("change, error, message", [
    # silent before: each trained into NaN curves that read as "diverged at epoch 1", or broadcast and trained
    ({"lr": float("nan")}, ValueError, "lr must be a finite number > 0, got nan"),
    ({"lr": float("inf")}, ValueError, "lr must be a finite number > 0, got inf"),
    ({"seeds": [1, 2], "lr": [1e-3, float("nan")]}, ValueError, r"lr must be a finite number > 0, got nan \(in lr="),
    ({"inputs": torch.randn(0, 24), "targets": torch.rand(0, 1)}, ValueError, "hold no pixels"),
    ({"heldout": torch.arange(64)}, ValueError, "heldout covers all 64 pixels"),
    ({"inputs": NAN_X}, ValueError, "inputs holds 1 NaN or infinite values"),
    ({"targets": torch.rand(64, 1).index_fill_(0, torch.tensor([5]), float("inf"))}, ValueError, "targets holds 1 NaN"),
    ({"targets": torch.rand(64)}, ValueError, r"targets must be \(pixels, 1\) = \(64, 1\)"),
    ({"targets": torch.rand(1, 1)}, ValueError, r"targets must be \(pixels, 1\)"),
    # obscure before: a raw error from deep inside, or after an epoch
    ({"batch_size": 2.5}, TypeError, "batch_size must be an integer, got 2.5"),
    ({"batch_size": True}, TypeError, "batch_size must be an integer, got True"),
    ({"epochs": 2.5}, TypeError, "epochs must be an integer"),
    ({"seeds": []}, ValueError, "need at least one seed"),
    ({"seeds": [1.5]}, TypeError, "seeds must be a list of integers"),
    ({"inputs": torch.randn(64, 20)}, ValueError, "inputs has 20 features but the first layer takes 24"),
    ({"inputs": torch.randint(0, 5, (64, 24))}, TypeError, "inputs must be floating point, got dtype torch.int64"),
    ({"eval_chunk": 0}, ValueError, "eval_chunk must be at least 1"),
    ({"checkpoint_every": 0}, ValueError, "checkpoint_every must be at least 1"),
    ({"stop_below": float("nan")}, ValueError, "stop_below must be None or a finite number >= 0, got nan"),
    # issue 38, silent: PSNR +inf at every epoch (every bar reached at epoch 1), or every epoch never reached
    ({"mse_to_unit": 0.0}, ValueError, "mse_to_unit must be a finite number > 0 .*got 0.0"),
    ({"mse_to_unit": -0.25}, ValueError, "mse_to_unit must be a finite number > 0"),
    ({"mse_to_unit": float("nan")}, ValueError, "mse_to_unit must be a finite number > 0"),
    ({"mse_to_unit": float("inf")}, ValueError, "mse_to_unit must be a finite number > 0"),
    # issue 38, obscure: psnr() failed after the whole fit, or the model raised a raw RuntimeError
    ({"mse_to_unit": "0.25"}, TypeError, "mse_to_unit must be a number, got '0.25'"),
    ({"mse_to_unit": None}, TypeError, "mse_to_unit must be a number, got None"),
    ({"inputs": torch.randn(64, 24, dtype=torch.float64)}, TypeError,
     r"inputs must be torch.float32, as the networks' weights are, got torch.float64; convert it"),
    ({"inputs": torch.randn(64, 24).half()}, TypeError, "inputs must be torch.float32.*got torch.float16"),
    ({"targets": torch.rand(64, 1, dtype=torch.float64)}, TypeError, "targets must be torch.float32.*got torch.float64"),
])
def test_fit_stack_refuses_bad_arguments_up_front_naming_them(change, error, message):
    with pytest.raises(error, match=message):
        _bad_stack_call(**change)


def test_a_checkpoint_whose_tensors_do_not_fit_is_refused_as_damage(tmp_path):
    """A crafted checkpoint with the right settings but no parameters (zip stopped at the shortest list
    and trained from a fresh start as if resumed) or tensors of other shapes is refused by name."""
    path = tmp_path / "fit.pt"
    _bad_stack_call(epochs=2, checkpoint=path)
    state = torch.load(path, weights_only=True)
    for damage in ({"params": []}, {"m": [t[:, :1] for t in state["m"]]}):
        torch.save({**state, **damage}, path)
        with pytest.raises(ValueError, match=f"checkpoint {path}: its training state does not fit this fit.*"
                                             "delete it to start afresh"):
            _bad_stack_call(epochs=2, checkpoint=path)


def test_a_checkpoint_whose_epoch_disagrees_with_what_it_holds_is_refused(tmp_path):
    """A changed ``epoch`` was accepted: the curves came back padded with NaN (a later epoch) or
    shifted (an earlier one, trained over again). It must agree with the curves and the Adam updates."""
    path = tmp_path / "fit.pt"
    g = torch.Generator().manual_seed(0)
    args = dict(epochs=4, checkpoint_every=2, seeds=[1, 2], lr=[1e-3, 1e30],  # the second network diverges
                inputs=torch.randn(64, 24, generator=g), targets=torch.rand(64, 1, generator=g))
    _bad_stack_call(**{**args, "epochs": 2}, checkpoint=tmp_path / "first.pt")
    state = torch.load(tmp_path / "first.pt", weights_only=True)
    assert state["epoch"] == 2 and state["diverged"][1] is not None
    state["settings"]["epochs"] = 4  # as if a 4-epoch fit had stopped after its checkpoint of epoch 2
    state["curves"] = {k: torch.cat([v, torch.full_like(v, float("nan"))], dim=1) for k, v in state["curves"].items()}
    torch.save(state, path)
    whole = _bad_stack_call(**args)
    resumed = _bad_stack_call(**args, checkpoint=path)  # the genuine state resumes to the same curves
    np.testing.assert_array_equal(resumed[0].train_mse, whole[0].train_mse)
    updates = state["t"] // 2
    for change, message in (({"epoch": 3}, "its epoch 3 disagrees with its"),
                            ({"epoch": 1}, "its epoch 1 disagrees with its"),
                            ({"epoch": 1, "t": updates}, "its epoch 1 disagrees with its curves: network 0 has 2"),
                            ({"epoch": 0, "t": 0}, "its epoch 0 is not one of 1 to 4"),
                            ({"epoch": 9}, "its epoch 9 is not one of 1 to 4"),
                            ({"diverged": [None, None]}, "network 1 has"),
                            ({"curves": {k: v[:, :3] for k, v in state["curves"].items()}}, "curves have shape")):
        torch.save({**state, **change}, path)
        with pytest.raises(ValueError, match=f"checkpoint {path}: its training state does not fit this fit.*"
                                             f"{message}.*delete it to start afresh"):
            _bad_stack_call(**args, checkpoint=path)


def test_a_checkpoint_with_bad_rates_or_a_nan_in_a_measured_epoch_is_refused_naming_the_file(tmp_path):
    """Issue #48: a checkpoint with ``lrs=[nan, ...]``, a negative rate or NaN in a measured epoch's ``train_mse``
    was resumed; ``lrs`` cut to one entry trained every network at network 0's rate, and ``lrs`` or ``diverged``
    shortened failed with an IndexError naming no file."""
    path = tmp_path / "fit.pt"
    args = dict(epochs=3, checkpoint_every=1, seeds=[1, 2], lr=[1e-3, 2e-3])
    _bad_stack_call(**{**args, "epochs": 2}, checkpoint=tmp_path / "first.pt")
    state = torch.load(tmp_path / "first.pt", weights_only=True)
    state["settings"]["epochs"] = 3
    state["curves"] = {k: torch.cat([v, torch.full_like(v[:, :1], float("nan"))], dim=1)
                       for k, v in state["curves"].items()}
    torch.save(state, path)
    _bad_stack_call(**args, checkpoint=path)  # the genuine state resumes
    nan_mse = {**state["curves"], "train_mse": state["curves"]["train_mse"].clone()}
    nan_mse["train_mse"][1, 0] = float("nan")
    for change, message in (({"lrs": [float("nan"), 2e-3]}, "network 0's is nan"),
                            ({"lrs": [1e-3, -2e-3]}, "network 1's is -0.002"),
                            ({"lrs": [1e-3]}, r"its 'lrs' holds 1 entries, not one per network \(2\)"),
                            ({"diverged": [None]}, r"its 'diverged' holds 1 entries"),
                            ({"curves": nan_mse}, "its train_mse of network 1 at measured epoch 1 is nan")):
        torch.save({**state, **change}, path)
        with pytest.raises(ValueError, match=f"checkpoint {path}: its training state does not fit this fit.*"
                                             f"{message}.*delete it to start afresh"):
            _bad_stack_call(**args, checkpoint=path)


def test_a_checkpoint_that_is_a_folder_is_refused_before_training(tmp_path):
    """Issue #48's probe: ``checkpoint=<a folder>`` trained a whole epoch, then failed renaming a temporary file."""
    with pytest.raises(ValueError, match=rf"checkpoint {tmp_path} is a folder, not a file"):
        _bad_stack_call(checkpoint=tmp_path)
