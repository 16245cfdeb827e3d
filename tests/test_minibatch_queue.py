"""The stacked fit of a queue of fits (gmp.minibatch_queue) against each fit run by itself (gmp.minibatch.fit_stack)."""

import math

import numpy as np
import pytest
import torch

from gmp.minibatch import fit_stack, layers
from gmp.minibatch_queue import FitJob, NotStackable, QueueTraining, fit_jobs, planned, replayed

SIDE, WIDTH = 16, 12


def _image():
    grid = torch.linspace(-1, 1, SIDE)
    coords = torch.stack(torch.meshgrid(grid, grid, indexing="xy"), -1).reshape(-1, 2)
    pixels = (0.5 + 0.4 * torch.sin(3 * coords[:, :1]) * torch.cos(2 * coords[:, 1:])).float()
    features = [torch.cat([torch.sin((k + 1) * coords @ torch.tensor([[1.0, 0.3], [0.2, 1.0]]) * (1 + r)) for k in
                           range(WIDTH // 4)] + [torch.cos((k + 1) * coords * (1 + r)) for k in range(WIDTH // 4)], 1)
                for r in (0.0, 0.5)]
    return coords, pixels, features


def _spec(activation, first_layer):
    return {"model": "sbsnn", "sizes": [2] + [WIDTH] * 4 + [1], "activation": activation, "first_layer": first_layer}


def _calls():
    """Fits like Part III's queue at a tiny size: SIREN-first-layer stacks (Fig. 4) and encoder stacks of two
    activations and two encoders (Fig. 6), different epochs and rates; one stops early (``stop_below``)."""
    coords, pixels, (nerf, rotated) = _image()
    plateau = {"factor": 0.5, "patience": 1, "rule": "keras"}
    return [
        dict(spec_layers=layers({**_spec("sin", "siren")}), seeds=[1, 2], inputs=coords, targets=pixels, epochs=3,
             lr=2e-3, plateau=plateau),
        dict(spec_layers=layers(_spec("triangle", "siren")), seeds=[3], inputs=coords, targets=pixels, epochs=4,
             lr=1e-3, plateau=plateau),
        dict(spec_layers=layers(_spec("sin", "encoder")), seeds=[1, 2], inputs=nerf, targets=pixels, epochs=4,
             lr=2e-3, plateau=plateau),
        dict(spec_layers=layers(_spec("gpn_relu", "encoder")), seeds=[1, 2], inputs=rotated, targets=pixels,
             epochs=4, lr=[1e-3, 3e-3], plateau=plateau),
        dict(spec_layers=layers(_spec("abs_sin", "encoder")), seeds=[4], inputs=torch.stack([rotated]), targets=pixels,
             epochs=4, lr=2e-3, plateau=None, stop_below=2.0),  # stops after its second epoch
    ]


def _same_curves(stacked, alone):
    assert len(stacked) == len(alone)
    for a, b in zip(stacked, alone):
        assert a.diverged_at == b.diverged_at and a.updates_per_epoch == b.updates_per_epoch
        assert a.epoch_loss.shape == b.epoch_loss.shape
        np.testing.assert_allclose(a.lr, b.lr, rtol=0, atol=0)
        for name in ("epoch_loss", "train_mse"):
            np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=2e-5, atol=0, err_msg=name)


def test_the_stacked_queue_equals_each_fit_alone_including_one_that_stops_early():
    torch.set_num_threads(1)
    calls = _calls()
    jobs = [FitJob.of_call(**call) for call in calls]
    training = QueueTraining(jobs)
    assert [[head.count for head in stack.heads] for stack in training.stacks] == [[3, 5]]  # one trunk, two heads
    assert [len(head.weights) for head in training.stacks[0].heads] == [1, 0]  # a SIREN first layer; encoded inputs
    assert [len(runs) for runs in training.stacks[0].trunk.slices] == [5, 5, 5, 1]  # activations by head, linear output
    assert training.stacks[0].heads[1].features.shape[0] == 2  # the two encoders' features, once each
    ended = []
    stacked = fit_jobs(jobs, on_end=lambda j, curves: ended.append((j, len(curves[0].epoch_loss))))
    assert ended == [(4, 2), (0, 3), (1, 4), (2, 4), (3, 4)]
    for call, fits in zip(calls, stacked):
        _same_curves(fits, fit_stack(**call))
    assert len(stacked[4][0].epoch_loss) == 2 and len(stacked[0][0].epoch_loss) == 3


def test_a_network_that_diverges_stops_alone_as_in_its_own_fit():
    coords, pixels, _ = _image()
    calls = [dict(spec_layers=layers(_spec("sin", "siren")), seeds=[1, 2], inputs=coords, targets=pixels, epochs=3,
                  lr=[1e-3, 1e38]),
             dict(spec_layers=layers(_spec("sin", "siren")), seeds=[5], inputs=coords, targets=pixels, epochs=2,
                  lr=1e-3)]
    stacked = fit_jobs([FitJob.of_call(**call) for call in calls])
    alone = [fit_stack(**call) for call in calls]
    assert alone[0][1].diverged_at is not None and alone[0][0].diverged_at is None
    for fits, own in zip(stacked, alone):
        _same_curves(fits, own)


def test_a_unit_is_planned_by_its_fits_and_built_from_the_stacked_curves(monkeypatch):
    """A chapter unit's ``fit_stack`` calls are read without training (``planned``); replayed with the stacked
    fit's curves, the unit gives the value its own run gives (same code builds it), to float rounding."""
    import types

    calls = _calls()
    module = types.SimpleNamespace(fit_stack=fit_stack)

    def unit():
        first = module.fit_stack(**calls[0])
        second = module.fit_stack(**calls[2])
        return {"a": [f.to_json() for f in first], "b": second[1].to_json()}

    with planned(module) as jobs:
        unit()
    assert len(jobs) == 2 and module.fit_stack is fit_stack
    curves = fit_jobs(jobs)
    with replayed(module, jobs, curves):
        value = unit()
    own = unit()
    for got, want in [(value["b"], own["b"]), *zip(value["a"], own["a"])]:
        np.testing.assert_allclose(np.array(got["train_mse"], float), np.array(want["train_mse"], float), rtol=2e-5)
        assert got.keys() == want.keys()
    with pytest.raises(RuntimeError, match="differ from those it was planned"), replayed(module, jobs[::-1], curves):
        unit()
    with pytest.raises(NotStackable, match="keeps its trained model"), planned(module):
        module.fit_stack(**calls[0], keep={})


def test_the_compiled_step_trains_as_the_eager_one_and_the_probe_predicts_the_queue():
    """``torch.compile`` (the mode the GPU runs, with its CUDA graph) fuses the step without changing it beyond
    float rounding; :func:`probe` times a throw-away stack in the first mode that works and predicts the queue."""
    from gmp.minibatch_queue import probe

    calls = _calls()
    jobs = [FitJob.of_call(**calls[i]) for i in (0, 3)]
    notes = []
    compiled = fit_jobs(jobs, mode="compiled", notes=notes)
    assert notes == ["mode: compiled"]
    for fits, call in zip(compiled, (calls[0], calls[3])):
        for a, b in zip(fits, fit_stack(**call)):
            np.testing.assert_allclose(a.train_mse, b.train_mse, rtol=1e-5)
    notes = []
    probed = probe(jobs, modes=["no such mode", "eager"], steps=3, notes=notes)
    assert probed["mode"] == "eager" and notes[0].startswith("no such mode failed: KeyError")
    assert probed["groups"] == [[2, 2]] and probed["ms_per_step"] > 0
    assert probed["predicted_minutes"] == pytest.approx(
        4 * (8 * probed["ms_per_step"] / 1e3 + probed["s_per_epoch_besides_updates"]) / 60)  # 4 epochs of 8 updates


def test_a_queue_that_would_end_past_its_deadline_stops_after_handing_over_the_fits_that_ended():
    import time

    calls = _calls()
    jobs = [FitJob.of_call(**{**calls[0], "epochs": 2}), FitJob.of_call(**calls[2])]
    ended = []
    with pytest.raises(TimeoutError, match="stopped after epoch 2: .* the 2 epochs left would end past the deadline"):
        fit_jobs(jobs, deadline=time.monotonic(), on_end=lambda j, curves: ended.append(j))
    assert ended == [0]


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True, "1"])
def test_a_job_refuses_every_bad_mse_to_unit_as_fit_stack_does(bad):
    """Issue #48: ``FitJob.of_call(..., mse_to_unit=0)`` was accepted on the stacked GPU path (PSNR inf, every
    target reached at epoch 1); it is refused with fit_stack's own message."""
    call = {**_calls()[0], "mse_to_unit": bad}
    with pytest.raises((TypeError, ValueError), match="mse_to_unit must be a") as by_job:
        FitJob.of_call(**call)
    with pytest.raises((TypeError, ValueError)) as by_fit:
        fit_stack(**call)
    assert str(by_job.value) == str(by_fit.value)
