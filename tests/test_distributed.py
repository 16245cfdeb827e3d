"""gmp.classify: checkpoint/resume, the paper's schedule, and data parallelism (gloo, 2 processes)."""

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import gmp
from gmp.classify import GlobalBatchSampler, fit_classifier
from gmp.data.imagenet import ImageArrays


def data(n=20, seed=0, flip=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 1, 6, 6), generator=g, dtype=torch.uint8)
    y = torch.randint(0, 3, (n,), generator=g)
    return ImageArrays(x, y, mean=(0.5,), flip=flip, seed=seed)


def model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(gmp.GmPConv2d(1, 4, 3, padding=1, init="glorot"), gmp.MeanNorm(4),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))


def train(net, train_set, path=None, epochs=3, **kwargs):
    return fit_classifier(net, train_set, data(12, seed=1, flip=False), epochs=epochs, batch_size=8, lr=0.1,
                          workers=0, checkpoint=path, progress=False, **kwargs)


class Interrupted(RuntimeError):
    pass


class CrashingData(ImageArrays):
    """Dies when epoch ``crash_at`` starts, like a job killed between two epochs."""

    crash_at = 2

    def set_epoch(self, epoch):
        if epoch == self.crash_at:
            raise Interrupted
        super().set_epoch(epoch)


def test_resume_after_an_interruption_restores_identical_state(tmp_path):
    straight = model()
    history = train(straight, data(), tmp_path / "straight.pt")
    resumed = model()
    crashing = data()
    crashing.__class__ = CrashingData
    with pytest.raises(Interrupted):
        train(resumed, crashing, tmp_path / "resumed.pt")
    saved = torch.load(tmp_path / "resumed.pt", weights_only=True)
    assert len(saved["history"]["train_loss"]) == 2 and not saved["history"]["finished"]
    fresh = model(seed=123)  # other initial weights: everything must come from the checkpoint
    history_resumed = train(fresh, data(), tmp_path / "resumed.pt")
    for (name, a), b in zip(straight.state_dict().items(), fresh.state_dict().values()):
        assert torch.equal(a, b), name
    assert history_resumed.to_dict() | {"epoch_time_s": None} == history.to_dict() | {"epoch_time_s": None}
    assert history.finished and history.epochs == 3
    again = train(model(seed=5), data(), tmp_path / "resumed.pt")  # finished: returned at once
    assert again.train_loss == history.train_loss
    with pytest.raises(ValueError, match="another run"):
        train(model(), data(), tmp_path / "resumed.pt", epochs=4)


class Payload:
    """An object whose unpickling would run code: what a crafted checkpoint could hold."""

    ran = False

    def __reduce__(self):
        return (setattr, (Payload, "ran", True))


def test_a_checkpoint_holding_other_objects_than_tensors_is_refused_not_unpickled(tmp_path):
    torch.save({"identity": {}, "payload": Payload()}, tmp_path / "crafted.pt")
    with pytest.raises(ValueError, match="holds objects other than tensors and plain values"):
        train(model(), data(), tmp_path / "crafted.pt")
    assert not Payload.ran


def test_a_checkpoint_of_another_structure_is_refused_clearly(tmp_path):
    torch.save([1, 2], tmp_path / "other.pt")
    with pytest.raises(ValueError, match="holds a list, not a dict"):
        train(model(), data(), tmp_path / "other.pt")
    torch.save({"identity": {}}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="lacks the entries"):
        train(model(), data(), tmp_path / "other.pt")


def test_plateau_and_early_stopping_on_validation_top5():
    history = fit_classifier(model(), data(), data(12, seed=1, flip=False), epochs=10, batch_size=8, lr=1e-12,
                             workers=0, progress=False,
                             plateau=gmp.ReduceLROnPlateau(monitor="val_top5", mode="max", patience=1),
                             early_stopping=gmp.EarlyStopping(monitor="val_top5", mode="max", patience=2))
    assert history.lr == [1e-12, 1e-12, pytest.approx(1e-13)]
    assert history.stopped_early and history.epochs == 3 and history.best_epoch == 0
    assert all(0.0 <= v <= 1.0 for v in history.train_top1 + history.val_top5)
    assert all(a <= b for a, b in zip(history.val_top1, history.val_top5))
    with pytest.raises(ValueError, match="mode='max'"):
        fit_classifier(model(), data(), data(12, seed=1, flip=False), epochs=1, batch_size=8, lr=0.1,
                       early_stopping=gmp.EarlyStopping(monitor="val_top1", patience=2))


def test_best_epoch_follows_the_highest_validation_top5():
    history = fit_classifier(model(), data(40), data(12, seed=1, flip=False), epochs=6, batch_size=8, lr=0.3,
                             workers=0, progress=False)
    assert history.best_value == max(history.val_top5)
    assert history.val_top5[history.best_epoch] == history.best_value
    assert history.at_best("val_top1") == history.val_top1[history.best_epoch]


def test_global_batch_sampler_splits_every_global_batch_between_processes():
    one = GlobalBatchSampler(21, 8, seed=4)
    two = [GlobalBatchSampler(21, 8, world_size=2, rank=r, seed=4) for r in range(2)]
    for sampler in [one, *two]:
        sampler.set_epoch(3)
    batches = list(one)
    shares = [list(s) for s in two]
    assert [len(b) for b in batches] == [8, 8, 5] and len(shares[0]) == len(shares[1]) == 3
    for whole, first, second in zip(batches, *shares):
        assert sorted(first + second) == sorted(whole) and len(first) - len(second) in (0, 1)
    assert sorted(sum(batches, [])) == list(range(21))
    one.set_epoch(4)
    assert list(one) != batches  # a fresh order each epoch
    assert len(GlobalBatchSampler(17, 8, world_size=2)) == 2  # a last batch of 1 cannot be split: dropped
    with pytest.raises(ValueError, match="at least one example per process"):
        GlobalBatchSampler(10, 2, world_size=4)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, folder):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        net = nn.Sequential(*list(model())[:1], *list(model())[2:])  # no batch statistics
        history = train(net, data(21), epochs=2)
        if rank == 0:
            torch.save({"state": net.state_dict(), "history": history.to_dict()}, os.path.join(folder, "ddp.pt"))
    finally:
        dist.destroy_process_group()


def test_two_gloo_processes_take_the_steps_of_one_process_on_the_whole_batch(tmp_path):
    torch.set_num_threads(1)
    net = nn.Sequential(*list(model())[:1], *list(model())[2:])
    history = train(net, data(21), epochs=2)
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    ddp = torch.load(tmp_path / "ddp.pt", weights_only=False)
    for (name, a), b in zip(net.state_dict().items(), ddp["state"].values()):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5), name
    assert ddp["history"]["steps"] == history.steps == 6  # 21 examples: global batches 8, 8, 5 (split 3 + 2)
    for key in ("train_loss", "train_top1", "val_loss", "val_top5"):
        assert ddp["history"][key] == pytest.approx(getattr(history, key), abs=1e-5), key


def test_command_line_runs_one_configuration_of_a_chapter(capsys):
    from gmp.classify import main

    assert main(["chen_vgg", "--scale", "smoke", "--variant", "GmP+MN", "--batch-size", "1024", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "'variant': 'GmP+MN'" in printed and "'batch_size': 1024" in printed and "history" not in printed
