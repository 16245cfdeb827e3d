"""Tests of gmp.train: Keras-compatible schedules, divergence handling, determinism."""

import json
import math
import re

import pytest
import torch
from torch import nn

import gmp
from gmp.train import EarlyStopping, History, ReduceLROnPlateau, accuracy, evaluate, fit, top_k_accuracy


def _data(n=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(n, generator=g)
    return x, y.unsqueeze(1)


def _model(seed=0):
    torch.manual_seed(seed)
    return nn.Linear(3, 1)


def _scripted(values, real_weight=0.0):
    """A loss whose value in call i is values[i] (plus an optional small real MSE term)."""
    calls = iter(values)

    def loss(pred, target):
        return next(calls) + real_weight * (pred - target).pow(2).mean() + 0.0 * pred.sum()

    return loss


def test_exports():
    assert gmp.fit is fit and gmp.History is History


def test_plateau_reduces_lr_as_keras():
    # Keras ReduceLROnPlateau(monitor="loss", factor=0.5, patience=2, min_delta=0), traced by hand:
    # e0 best=1.0; e1 0.9 best; e2, e3 wait 1, 2 -> lr halves for e4; e4 wait 1; e5 0.8 best;
    # e6, e7 wait 1, 2 -> halves for e8; e8, e9 wait 1, 2 -> halves after e9.
    losses = [1.0, 0.9, 0.9, 0.95, 0.9, 0.8, 0.8, 0.8, 0.8, 0.8]
    history = fit(_model(), _data(), epochs=10, lr=1.0, optimizer="sgd", loss=_scripted(losses),
                  plateau=ReduceLROnPlateau(monitor="loss", factor=0.5, patience=2, min_delta=0.0))
    assert history.lr == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25]
    assert history.train_loss == pytest.approx(losses)


def test_plateau_min_delta_cooldown_and_min_lr():
    # Keras default min_delta=1e-4: 0.99995 is no improvement over 1.0. Patience 1, cooldown 2
    # (Keras decrements the cooldown before testing it, so cooldown c skips c - 1 epochs):
    # e0 best; e1 no improvement -> lr 0.1, cooldown 2; e2 cooldown 1 (not counted);
    # e3 cooldown 0, wait 1 -> lr 0.01, floored at min_lr 0.02; e4 cooldown; e5 wait 1 but
    # lr == min_lr: stays.
    losses = [1.0, 0.99995, 0.99995, 0.99995, 0.99995, 0.99995, 0.99995]
    history = fit(_model(), _data(), epochs=7, lr=1.0, optimizer="sgd", loss=_scripted(losses),
                  plateau=ReduceLROnPlateau(monitor="loss", factor=0.1, patience=1, cooldown=2, min_lr=0.02))
    assert history.lr == pytest.approx([1.0, 1.0, 0.1, 0.1, 0.02, 0.02, 0.02])


def test_plateau_on_validation_accuracy_is_maximised():
    x, y = _data()
    labels = (y.squeeze(1) > 0).float()
    accs = iter([0.5, 0.6, 0.6, 0.6, 0.7, 0.7, 0.7])
    history = fit(_model(), (x, labels.unsqueeze(1)), epochs=7, lr=0.1, loss="bce_logits",
                  validation=(x, labels), metrics={"accuracy": lambda p, t: next(accs)},
                  plateau=ReduceLROnPlateau(monitor="val_accuracy", patience=2, factor=0.1))
    assert history.metrics["accuracy"] == [0.5, 0.6, 0.6, 0.6, 0.7, 0.7, 0.7]
    # "auto" mode maximises accuracies: rises at e1 and e4 reset the wait; e2, e3 reduce after e3.
    assert history.lr == pytest.approx([0.1, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01])
    assert len(history.val_loss) == 7


def test_early_stopping_restores_best_weights():
    losses = [5.0, 4.0, 1.0, 3.0, 2.0, 2.5, 9.0, 9.0, 9.0, 9.0]
    snapshots = []
    model = _model()
    history = fit(model, _data(), epochs=10, lr=0.05, loss=_scripted(losses, real_weight=1e-6),
                  early_stopping=EarlyStopping(monitor="loss", patience=3, restore_best_weights=True),
                  callbacks=[lambda epoch, m: snapshots.append(m.weight.detach().clone())])
    # best at epoch 2; epochs 3, 4, 5 without improvement -> stopped after epoch 5
    assert history.best_epoch == 2 and history.best_value == pytest.approx(1.0, abs=1e-3)
    assert history.stopped_early and history.stopped_epoch == 5 and history.restored_best
    assert history.epochs == 6 and len(snapshots) == 6
    assert torch.equal(model.weight, snapshots[2])
    assert not torch.equal(snapshots[2], snapshots[5])


def test_early_stopping_without_restore_keeps_last_weights():
    losses = [1.0, 2.0, 2.0, 2.0]
    snapshots = []
    model = _model()
    history = fit(model, _data(), epochs=4, lr=0.05, loss=_scripted(losses, real_weight=1e-6),
                  early_stopping=EarlyStopping(monitor="loss", patience=2),
                  callbacks=[lambda epoch, m: snapshots.append(m.weight.detach().clone())])
    assert history.stopped_epoch == 2 and not history.restored_best
    assert torch.equal(model.weight, snapshots[-1])


def test_scripted_nan_is_recorded_as_divergence():
    losses = [1.0, 0.5, 0.4, math.nan, 0.1]
    history = fit(_model(), _data(), epochs=5, lr=0.1, loss=_scripted(losses))
    assert history.diverged and history.diverged_epoch == 3 and history.diverged_step == 3
    assert history.epochs == 4 and math.isnan(history.train_loss[-1])
    text = json.dumps(history.to_dict(), allow_nan=False)
    back = History.from_dict(json.loads(text))
    assert back.diverged_epoch == 3 and math.isnan(back.train_loss[3])
    assert back.train_loss[:3] == pytest.approx(losses[:3])


def test_huge_learning_rate_diverges_at_the_right_epoch():
    x, y = _data(n=20)
    model = _model()
    reference = _model()
    opt = torch.optim.SGD(reference.parameters(), lr=1e3)
    expected = None
    for epoch in range(100):
        loss = (reference(x) - y).pow(2).mean()
        if not torch.isfinite(loss):
            expected = epoch
            break
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert expected is not None and expected > 1
    history = fit(model, (x, y), epochs=100, lr=1e3, optimizer="sgd", loss="mse")
    assert history.diverged and history.diverged_epoch == expected
    assert history.diverged_step == expected and history.epochs == expected + 1
    assert all(math.isfinite(v) for v in history.train_loss[:-1])


def test_divergence_mid_epoch_reports_the_step():
    losses = [1.0, 1.0, 1.0, 1.0, float("inf"), 1.0]
    history = fit(_model(), _data(n=10), epochs=3, lr=0.1, batch_size=4, loss=_scripted(losses))
    # 3 steps per epoch: the 5th batch (step 4) is in epoch 1
    assert history.diverged_epoch == 1 and history.diverged_step == 4 and history.steps == 4


def test_full_batch_is_one_step_per_epoch_and_minibatches_cover_the_data():
    seen = []
    history = fit(_model(), _data(n=10), epochs=3, lr=0.01, step_callbacks=[lambda s, m: seen.append(s)])
    assert history.steps == 3 and seen == [0, 1, 2]
    sizes = []

    def loss(pred, target):
        sizes.append(pred.shape[0])
        return (pred - target).pow(2).mean()

    history = fit(_model(), _data(n=10), epochs=2, lr=0.01, batch_size=4, loss=loss)
    assert history.steps == 6 and sizes == [4, 4, 2, 4, 4, 2]


def test_epoch_loss_is_batch_weighted_mean_before_updates():
    values = []

    def loss(pred, target):
        value = (pred - target).pow(2).mean()
        values.append((value.item(), pred.shape[0]))
        return value

    history = fit(_model(), _data(n=10), epochs=1, lr=0.01, batch_size=4, loss=loss)
    expected = sum(v * n for v, n in values) / sum(n for _, n in values)
    assert history.train_loss[0] == pytest.approx(expected)


def test_step_callbacks_see_gradients():
    norms = []

    def grad_norm(step, model):
        norms.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]).norm().item())

    fit(_model(), _data(), epochs=2, lr=0.01, batch_size=5, step_callbacks=[grad_norm])
    assert len(norms) == 4 and all(n > 0 for n in norms)


def test_seed_determines_the_run():
    def run(seed):
        model = _model()
        fit(model, _data(n=32), epochs=3, lr=0.05, batch_size=8, seed=seed)
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()])

    assert torch.equal(run(1), run(1))
    assert not torch.equal(run(1), run(2))


def test_float64_is_respected():
    dtypes = []
    model = _model()
    history = fit(model, _data(), epochs=2, lr=0.01, dtype=torch.float64,
                  step_callbacks=[lambda s, m: dtypes.append(m.weight.grad.dtype)])
    assert model.weight.dtype == torch.float64 and dtypes == [torch.float64, torch.float64]
    assert history.epochs == 2


def test_data_loader_and_validation_metrics():
    x, y = _data(n=12)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=5)
    history = fit(_model(), loader, epochs=2, lr=0.01, validation=(x, y), metrics={"rmse": gmp.train.rmse})
    assert history.steps == 6
    model_eval = evaluate(_model(), (x, y), loss="mse", metrics={"rmse": gmp.train.rmse})
    assert model_eval["rmse"] == pytest.approx(math.sqrt(model_eval["loss"]))
    assert history.metrics["rmse"][0] == pytest.approx(math.sqrt(history.val_loss[0]))


def test_accuracy_metrics():
    logits = torch.tensor([[2.0], [-1.0], [0.5], [-3.0]])
    assert accuracy(logits, torch.tensor([1, 0, 0, 0])) == pytest.approx(0.75)
    multi = torch.tensor([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.3, 0.3, 0.4]])
    target = torch.tensor([1, 2, 0])
    assert accuracy(multi, target) == pytest.approx(1 / 3)
    assert top_k_accuracy(2)(multi, target) == pytest.approx(2 / 3)
    assert top_k_accuracy(3)(multi, target) == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(optimizer="rmsprop"), "unknown optimizer"),
    (dict(loss="hinge"), "unknown loss"),
    (dict(epochs=0), "epochs"),
    (dict(batch_size=0), "batch_size"),
    (dict(optimizer="adam", momentum=0.9), "momentum"),
    (dict(early_stopping=EarlyStopping(monitor="val_loss", patience=3)), "cannot monitor"),
    (dict(plateau=ReduceLROnPlateau(monitor="accuracy")), "cannot monitor"),
])
def test_bad_arguments_raise(kwargs, message):
    options = dict(epochs=2, lr=0.01)
    options.update(kwargs)
    with pytest.raises(ValueError, match=message):
        fit(_model(), _data(), **options)


def test_bad_schedules_and_data_raise():
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping(monitor="loss", patience=-1)
    with pytest.raises(ValueError, match="mode"):
        ReduceLROnPlateau(monitor="loss", mode="up")
    with pytest.raises(ValueError, match="factor"):
        ReduceLROnPlateau(monitor="loss", factor=1.5)
    x, y = _data()
    with pytest.raises(ValueError, match="rows"):
        fit(_model(), (x, y[:5]), epochs=1, lr=0.01)
    with pytest.raises(ValueError, match="rows"):
        fit(_model(), (x, y), epochs=1, lr=0.01, validation=(x[:3], y))


def test_sgd_momentum_matches_a_plain_torch_loop():
    x, y = _data(n=16)
    model, reference = _model(), _model()
    fit(model, (x, y), epochs=5, lr=0.05, optimizer="sgd", momentum=0.9, loss="mse")
    opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for _ in range(5):
        opt.zero_grad()
        (reference(x) - y).pow(2).mean().backward()
        opt.step()
    assert torch.allclose(model.weight, reference.weight) and torch.allclose(model.bias, reference.bias)


def test_adam_options_are_passed_to_torch():
    x, y = _data(n=16)
    model, reference = _model(), _model()
    fit(model, (x, y), epochs=3, lr=0.1, optimizer_options={"eps": 1e-1}, loss="mse")
    opt = torch.optim.Adam(reference.parameters(), lr=0.1, eps=1e-1)
    for _ in range(3):
        opt.zero_grad()
        (reference(x) - y).pow(2).mean().backward()
        opt.step()
    assert torch.allclose(model.weight, reference.weight)


def test_augment_maps_every_training_batch_only():
    seen = []

    def augment(xb):
        seen.append(xb.shape[0])
        return -xb

    x, y = _data(n=10)
    history = fit(_model(), (x, y), epochs=2, lr=0.01, batch_size=5, augment=augment, validation=(x, y))
    assert seen == [5, 5, 5, 5] and history.epochs == 2


def test_patience_zero_never_stops_after_the_first_epoch():
    # Keras stops when wait >= patience "and epoch > 0": with patience 0 the first epoch,
    # always an improvement over +inf, cannot stop the run; the first non-improvement does.
    history = fit(_model(), _data(), epochs=5, lr=0.01, loss=_scripted([3.0, 2.0, 2.5, 1.0, 1.0]),
                  early_stopping=EarlyStopping(monitor="loss", patience=0))
    assert history.stopped_epoch == 2 and history.best_epoch == 1


def test_divergence_restores_best_weights_when_early_stopping_keeps_them():
    snapshots = []
    model = _model()
    history = fit(model, _data(), epochs=5, lr=0.05, loss=_scripted([3.0, 1.0, 2.0, math.nan, 1.0], 1e-6),
                  early_stopping=EarlyStopping(monitor="loss", patience=10, restore_best_weights=True),
                  callbacks=[lambda e, m: snapshots.append(m.weight.detach().clone())])
    assert history.diverged and history.diverged_epoch == 3 and history.restored_best
    assert torch.equal(model.weight, snapshots[1])


def _checkpoint_bytes():
    import io
    state = {"settings": {"a": 1}, "model": {f"w{i}": torch.randn(16, 16) for i in range(4)}, "step": 5}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def test_a_damaged_checkpoint_is_reported_as_damaged_not_as_foreign_objects(tmp_path):
    import numpy as np

    data, path = _checkpoint_bytes(), tmp_path / "fit.pt"
    path.write_bytes(data)
    assert gmp.train.load_checkpoint(path)["step"] == 5
    flipped = bytearray(data)
    flipped[data.index(b"archive/data/0") + 200] ^= 1  # a byte of a tensor: it would load a wrong weight
    np.savez(tmp_path / "arrays.npz", a=np.ones(3))
    damaged = [data[:cut] for cut in (0, 10, len(data) // 2, *range(len(data) - 900, len(data), 37))]
    damaged += [bytes(flipped), b"not a checkpoint\n" * 20, bytes(range(256)) * 4, (tmp_path / "arrays.npz").read_bytes()]
    for content in damaged:
        path.write_bytes(content)
        with pytest.raises(ValueError, match=rf"checkpoint {re.escape(str(path))} is damaged or not a checkpoint \(.+\); "
                                             "delete it to start afresh"):
            gmp.train.load_checkpoint(path)


def test_a_checkpoint_of_another_structure_is_refused_with_what_it_lacks(tmp_path):
    path = tmp_path / "fit.pt"
    torch.save([1, 2], path)
    with pytest.raises(ValueError, match=rf"checkpoint {re.escape(str(path))} holds a list, not a dict"):
        gmp.train.load_checkpoint(path, keys=("settings",))
    torch.save({"settings": {}}, path)
    with pytest.raises(ValueError, match=r"lacks the entries 'model', 'step', so it was not written by this fit; delete it"):
        gmp.train.load_checkpoint(path, keys=("settings", "model", "step"))


@pytest.mark.parametrize("loss, optimizer, batch_size", [("mae", "adam", None), ("mse", "adam", 4), ("mse", "sgd", 4)])
def test_fit_equals_a_plain_torch_loop_with_keras_schedules_bitwise(loss, optimizer, batch_size):
    """fit's parts (one epoch of updates, validation, plateau and early stopping) compose to the loop Keras runs,
    written out here: mini-batches drawn by a generator seeded with ``seed``, each augmented, its loss taken before
    its update; then the validation loss, the plateau's rate and the early stop with the best weights restored."""
    x, y = _data(n=10, seed=1)
    xv, yv = _data(n=6, seed=2)
    losses = {"mae": lambda p, t: (p - t).abs().mean(), "mse": lambda p, t: (p - t).pow(2).mean()}
    model, reference = _model(3), _model(3)
    history = fit(model, (x, y), epochs=40, lr=0.2, loss=loss, optimizer=optimizer, batch_size=batch_size, seed=5,
                  augment=lambda xb: 1.5 * xb, validation=(xv, yv),
                  plateau=ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=2, cooldown=1, min_delta=0.0),
                  early_stopping=EarlyStopping(monitor="val_loss", patience=4, restore_best_weights=True))
    opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(reference.parameters(), lr=0.2)
    generator, lr, val_losses = torch.Generator().manual_seed(5), 0.2, []
    plateau_best, wait, cooldown, stop_best, stop_wait, best, best_epoch = math.inf, 0, 0, math.inf, 0, None, None
    for epoch in range(40):
        order = torch.randperm(10, generator=generator) if batch_size else torch.arange(10)
        for start in range(0, 10, batch_size or 10):
            index = order[start:start + (batch_size or 10)]
            opt.zero_grad(set_to_none=True)
            losses[loss](reference(1.5 * x[index]), y[index]).backward()
            opt.step()
        with torch.no_grad():
            current = losses[loss](reference(xv), yv).item()
        val_losses.append(current)
        if cooldown > 0:
            cooldown, wait = cooldown - 1, 0
        if current < plateau_best:
            plateau_best, wait = current, 0
        elif cooldown == 0:
            wait += 1
            if wait >= 2:
                lr, cooldown, wait = lr * 0.5, 1, 0
                for group in opt.param_groups:
                    group["lr"] = lr
        best = best or {k: v.clone() for k, v in reference.state_dict().items()}
        stop_wait += 1
        if current < stop_best:
            stop_best, stop_wait, best_epoch = current, 0, epoch
            best = {k: v.clone() for k, v in reference.state_dict().items()}
        elif stop_wait >= 4 and epoch > 0:
            reference.load_state_dict(best)
            break
    assert history.val_loss == val_losses and history.best_epoch == best_epoch and history.stopped_early
    assert torch.equal(model.weight, reference.weight) and torch.equal(model.bias, reference.bias)
    assert history.lr[-1] < 0.2 and history.restored_best


@pytest.mark.parametrize("where", ["inputs", "targets", "validation", "loader"])
def test_nan_data_is_refused_not_read_as_divergence(where):
    """Issue #48: NaN inputs made ``fit`` report ``diverged=True`` at epoch 0, which Part I's rules count as a
    diverged run (chance level); bad data is refused, naming what holds it."""
    x, y = _data()
    bad_x, bad_y = x.clone(), y.clone()
    (bad_y if where == "targets" else bad_x)[3, 0] = math.nan
    kwargs = dict(epochs=2, lr=0.01)
    if where == "validation":
        train, kwargs["validation"], message = (x, y), (bad_x, y), "validation data: its inputs hold 1 NaN"
    elif where == "loader":
        train, message = [(bad_x[:5], y[:5]), (bad_x[5:], y[5:])], "training batch of step 0: its inputs hold 1 NaN"
    else:
        train, message = (bad_x, bad_y), f"training data: its {where} hold 1 NaN"
    with pytest.raises(ValueError, match=message):
        fit(_model(), train, **kwargs)
