"""The per-epoch training of the lu_real chapter (Section 3.2 of Lu et al.): checkpoints that
resume exactly, the journal of epochs, divergence, and the curves' round trip."""

import json

import pytest
import torch

import gmp
from gmp.config import Config
from gmp.experiments import lu_real
from gmp.results import PARTLY, STAGING_ENV, Store


def _cfg(**changes):
    values = {**gmp.load_config("lu_real", "smoke").as_dict(), "width": 8, "depth": 3, "batch_size": 16,
              "ratio_every": 2, "epochs": {"digits": 3, "mnist1d": 3}, "data": {"mnist": "digits", "cifar10": "digits"},
              "activations": ["ReLU"], **changes}
    return Config("lu_real", "smoke", values)


def _data(seed=0, rows=70, features=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, features, generator=g)
    return (x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()), (x[:20] + 0.1, (x[:20, 0] > 0).long())


def _without_seconds(metrics):
    return {k: v for k, v in metrics.items() if k != "seconds"}


@pytest.mark.parametrize("variant, batchnorm", [("ReLU-GPN", False), ("GELU", True)])
def test_resuming_from_the_epoch_checkpoint_gives_the_same_weights(tmp_path, variant, batchnorm):
    """Interrupted after every epoch and resumed from its checkpoint (weights, momentum, BN
    statistics, shuffling generator), a network ends bitwise equal to the uninterrupted one."""
    cfg, (train, test) = _cfg(), _data()

    def make():
        return lu_real.Training(variant, batchnorm, train[0].shape[1], cfg)

    whole, metrics = None, []
    for epoch in (1, 2, 3):
        whole, m = lu_real.train_epoch(whole, make, epoch, 3, train, test, None)
        metrics.append(m)
    checkpoint = tmp_path / "net.pt"
    for epoch in (1, 2, 3):
        resumed, m = lu_real.train_epoch(None, make, epoch, 3, train, test, checkpoint)  # a new process each epoch
        assert _without_seconds(m) == _without_seconds(metrics[epoch - 1])
        assert checkpoint.is_file() == (epoch < 3)  # deleted once the network has finished
    for (name, a), (_, b) in zip(whole.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), name
    assert resumed.step == whole.step == 3 * 5  # 70 rows in batches of 16
    assert not torch.equal(whole.model.state_dict()["layers.0.V"], make().model.state_dict()["layers.0.V"])
    assert metrics[2]["train_acc"] is not None and "train_acc" not in metrics[1]
    assert [m["ratio_steps"] for m in metrics] == [[0, 2, 4], [6, 8], [10, 12, 14]]
    assert len(metrics[0]["drift"]) == 3 and all(d > 0 for d in metrics[0]["drift"])


def test_a_missing_checkpoint_trains_the_network_again_from_its_first_epoch(tmp_path):
    cfg, (train, test) = _cfg(), _data()

    def make():
        return lu_real.Training("Tanh", False, train[0].shape[1], cfg)

    whole = None
    for epoch in (1, 2):
        whole, expected = lu_real.train_epoch(whole, make, epoch, 3, train, test, None)
    again, metrics = lu_real.train_epoch(None, make, 2, 3, train, test, tmp_path / "absent.pt")
    assert again.epoch == 2 and _without_seconds(metrics) == _without_seconds(expected)
    assert torch.equal(again.model.layers[0].V, whole.model.layers[0].V)


def test_a_replay_that_does_not_give_the_journalled_epochs_stops(tmp_path):
    """Without its checkpoint a network is trained again through its journalled epochs; where
    that replay differs from the journal (another device), continuing would splice two runs."""
    cfg, (train, test) = _cfg(), _data()

    def make():
        return lu_real.Training("Tanh", False, train[0].shape[1], cfg)

    whole, first = lu_real.train_epoch(None, make, 1, 3, train, test, None)
    journalled = {1: json.loads(json.dumps(first))}  # as the journal returns it
    again, _ = lu_real.train_epoch(None, make, 2, 3, train, test, tmp_path / "a.pt", journalled)
    assert again.epoch == 2
    journalled[1] = {**journalled[1], "test_acc": journalled[1]["test_acc"] + 0.05}
    with pytest.raises(lu_real.ReplayMismatch, match=r"Tanh: epoch 1 .*test_acc.*checkpoint"):
        lu_real.train_epoch(None, make, 2, 3, train, test, tmp_path / "b.pt", journalled)


def _run(cfg, staging, monkeypatch):
    monkeypatch.setenv(STAGING_ENV, str(staging))
    monkeypatch.setattr(lu_real.runs, "load_split", lambda dataset, train, max_rows=None: _data()[0 if train else 1])
    return lu_real.run(cfg, Store("lu_real", cfg), "cpu", 0)


def _timeless(payload):
    text = json.dumps(payload)
    out = json.loads(text)
    for runs in out["runs"].values():
        for result in runs.values():
            result.pop("wall_time_s")
    return out


def test_an_interrupted_run_resumes_from_the_journal_and_its_checkpoints(tmp_path, monkeypatch):
    """Stopped in its second epoch (epoch-major: every network has done one), rerun: the journal
    of epochs and the checkpoints give what an uninterrupted run gives."""
    cfg = _cfg(activations=["ReLU", "Tanh"])
    whole = _run(cfg, tmp_path / "a" / "lu_real" / ".staging", monkeypatch)
    calls = {"n": 0}
    original = lu_real.Training.run_epoch

    def interrupted(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 6:  # 4 networks without BN: the second epoch of the second network
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    staging = tmp_path / "b" / "lu_real" / ".staging"
    monkeypatch.setattr(lu_real.Training, "run_epoch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _run(cfg, staging, monkeypatch)
    journal = staging.parent / "_partial" / f"smoke-{cfg.digest}.jsonl"
    keys = [json.loads(line)["key"] for line in journal.read_text().splitlines()]
    assert keys == [lu_real.epoch_key("digits", label, 0, 1) for label in ("ReLU", "ReLU-GPN", "Tanh", "Tanh-GPN")] \
        + [lu_real.epoch_key("digits", "ReLU", 0, 2)]
    checkpoints = sorted(p.name for p in journal.with_suffix("").glob("*.pt"))
    assert len(checkpoints) == 4  # one per network, after its last journalled epoch
    monkeypatch.setattr(lu_real.Training, "run_epoch", original)
    calls["n"] = 0
    resumed = _run(cfg, staging, monkeypatch)
    assert _timeless(resumed) == _timeless(whole)
    assert resumed["epochs_reached"] == {"digits": {"no BN": 3, "BN": 3}}
    assert not list(journal.with_suffix("").glob("*.pt"))  # finished networks keep no checkpoint


@pytest.mark.parametrize("lr", [2e-2, 1e30])
def test_units_of_two_workers_journal_what_the_run_computes(tmp_path, monkeypatch, lr):
    """``--jobs 2``: worker i takes every second unit (so the same networks every epoch, each
    from its checkpoint); the notebook's run from that journal equals an uninterrupted run,
    diverged networks (lr 1e30) included."""
    cfg = _cfg(activations=["ReLU", "Tanh"], lr=lr)
    whole = _run(cfg, tmp_path / "a" / "lu_real" / ".staging", monkeypatch)
    staging = tmp_path / "b" / "lu_real" / ".staging"
    monkeypatch.setenv(STAGING_ENV, str(staging))
    store = Store("lu_real", cfg)
    todo = lu_real.units(cfg, store, 0, "cpu")
    keys = list(todo)
    assert keys == [lu_real.epoch_key(d, label, 0, e) for d, label, e in lu_real.schedule(cfg, 0)]
    for worker in (1, 0):  # one worker after the other: neither needs the other's networks
        for key in keys[worker::2]:
            store.memo(key, todo[key])
    monkeypatch.setattr(lu_real.Training, "run_epoch", lambda *a, **k: pytest.fail("trained again"))
    assert _timeless(_run(cfg, staging, monkeypatch)) == _timeless(whole)


def test_a_diverged_network_is_journalled_at_its_epoch_and_not_trained_further(monkeypatch, tmp_path):
    cfg = _cfg(lr=1e30)
    payload = _run(cfg, tmp_path / "lu_real" / ".staging", monkeypatch)
    result = payload["runs"]["digits"]["ReLU"]
    assert result["diverged"] and result["epochs_run"] == result["diverged_epoch"] + 1
    assert result["train_acc"] is None and result["test_curve"][-1] is None
    light, arrays = lu_real.split_curves(payload)
    assert json.loads(json.dumps(lu_real.join_curves(light, arrays))) == json.loads(json.dumps(payload))


def test_assemble_says_how_far_an_unfinished_run_got():
    cfg = _cfg(activations=["ReLU"])
    metrics = {"diverged": False, "ratio": [1.0], "ratio_steps": [0], "max_grad": [0.1], "steps": 5, "seconds": 1.0,
               "train_loss": 2.0, "train_acc_running": 0.3, "test_acc": 0.25, "drift": [0.1, 0.2, 0.3]}
    units = {lu_real.epoch_key("digits", label, 0, e): {**metrics, "epoch": e}
             for label, epochs in (("ReLU", 2), ("ReLU-GPN", 1), ("ReLU-BN", 0)) for e in range(1, epochs + 1)}
    payload = lu_real.assemble(cfg, units, 0)
    assert payload["epochs_reached"] == {"digits": {"no BN": 1, "BN": 0}}
    relu = payload["runs"]["digits"]["ReLU"]
    assert relu["epochs_run"] == 2 and not relu["finished"] and relu["train_acc"] == 0.3
    assert relu["drift_max"] == [0.3, 0.3] and "ReLU-BN" not in payload["runs"]["digits"]


def _epoch(acc, drift=0.01):
    return {"diverged": False, "ratio": [2.0], "ratio_steps": [0], "max_grad": [0.1], "steps": 938, "seconds": 1.0,
            "train_loss": 2.0, "train_acc_running": acc, "test_acc": acc, "drift": [drift] * 200}


def test_an_unfinished_run_is_shown_and_judged_at_the_epoch_all_its_networks_reached(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from gmp import results

    cfg = gmp.load_config("lu_real", "paper")
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    chance = {"ReLU", "LeakyReLU", "GELU"}
    units = {}
    for variant in lu_real.variants(lu_real.ACTIVATIONS):
        for epoch in (1, 2) if variant != "SELU" else (1,):  # SELU lags: the group stands at epoch 1
            units[lu_real.epoch_key("mnist", variant, 0, epoch)] = {
                **_epoch(0.1 if variant in chance else 0.2 + 0.3 * epoch), "epoch": epoch}
    journal = tmp_path / "lu_real" / "_partial" / f"paper-{cfg.digest}.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text("".join(json.dumps({"key": k, "value": v}) + "\n" for k, v in units.items()))

    payload = lu_real.unfinished(results.cached("lu_real", "runs").units)
    assert payload["unfinished"] and payload["epochs_reached"]["mnist"] == {"no BN": 1, "BN": 0}
    assert {r["epochs_run"] for r in payload["runs"]["mnist"].values()} == {1}  # cut to the common epoch
    assert lu_real.epoch_text(payload, "mnist") == "MNIST, depth 200, epoch 1 of 50 (BN networks not started)"
    _, title = lu_real.figure_source("mnist", {}, payload, "small")
    assert title.startswith("MNIST, depth 200, epoch 1 of 50")
    table = lu_real.table2({"data": {}, "runs": {}}, payload, "small")
    column = ("Ours, paper scale (unfinished run)", "MNIST, depth 200, epoch 1 of 50 (BN networks not started)", "Train")
    assert table.loc["ReLU-GPN", column] == "50.00 (—)" and table.loc["ReLU", column] == "10.00 (—)"
    assert table.loc["ReLU", ("Ours, paper scale (unfinished run)", "CIFAR-10", "Test")] == results.NOT_RUN
    lu_real.plot_drift(payload["runs"]["mnist"], "drift")

    judged = {claim.key: (measured, verdict) for claim, measured, verdict in results._judged("lu_real")}
    measured, verdict = judged["lu-real-untrainable"]
    assert measured.startswith("unfinished run: 3/3") and "epoch 1 of 50" in measured
    assert verdict == results.PARTLY  # reproduced on MNIST, but CIFAR-10 is not run
    assert judged["lu-real-gpn-trainable"][0].startswith("unfinished run: 3/3")
    for key in ("lu-real-bn-explodes", "lu-real-gpn-stable", "lu-real-gpn-train-accuracy"):
        assert judged[key] == ("—", results.NOT_RUN)  # BN not started; the other waits for the full run


def test_the_stability_claim_of_an_unfinished_run_waits_for_the_bn_networks_and_compares_with_them():
    """Stability is judged against the same GPN network with BN (the paper's contrast, no bound of our own):
    an unfinished run is judged once both groups have an epoch, and the verdict may still move."""
    claim = next(c for c in lu_real.CLAIMS if c.key == "lu-real-gpn-stable")
    units = {}
    for variant in lu_real.variants(lu_real.ACTIVATIONS):
        peak = 12.0 if variant in ("Tanh-GPN", "ReLU-GPN") else 2.0
        units[lu_real.epoch_key("mnist", variant, 0, 1)] = {**_epoch(0.5), "ratio": [2.0, peak], "ratio_steps": [0, 10],
                                                            "max_grad": [0.1, 0.1], "epoch": 1}
    assert claim.unfinished(units) is None  # no BN network yet: nothing to compare with
    for variant in lu_real.variants(lu_real.ACTIVATIONS):
        units[lu_real.epoch_key("mnist", f"{variant}-BN", 0, 1)] = {
            **_epoch(0.5), "ratio": [2.0, 100.0], "ratio_steps": [0, 10], "max_grad": [0.1, 0.1], "epoch": 1}
    payload = claim.unfinished(units)
    assert payload is not None and payload["epochs_reached"]["mnist"] == {"no BN": 1, "BN": 1}
    measured, verdict = claim.check(payload)
    assert measured.startswith("4/6 GPN networks") and "epoch 1 of 50" in measured
    assert verdict == PARTLY  # 12 is not 10 x below 100; CIFAR-10 is not run
    assert "against batch normalisation" in claim.rule and "final" not in claim.rule


def test_progress_says_how_far_the_run_got():
    units = {lu_real.epoch_key("mnist", v, 0, e): {**_epoch(0.5), "epoch": e, "seconds": 360.0}
             for v in lu_real.variants(lu_real.ACTIVATIONS) for e in ((1, 2) if v == "Tanh" else (1,))}
    text = lu_real.progress(units)
    assert text == ("its journal holds 13 epochs of training (1.3 hours of computing): every MNIST network without BN "
                    "has finished 1 of 50 epochs, 1 of them 2; the MNIST networks with BN have not started.")
    assert lu_real.progress({}) == "its journal holds no finished epoch yet."


def test_a_run_journalled_a_few_whole_networks_at_a_time_shows_them_and_says_how_many():
    units = {lu_real.epoch_key("mnist", v, 0, e): {**_epoch(0.5), "epoch": e, "seconds": 3.0}
             for v in ("Tanh", "Tanh-GPN", "ReLU") for e in range(1, 51)}
    payload = lu_real.unfinished(units)
    assert set(payload["runs"]["mnist"]) == {"Tanh", "Tanh-GPN", "ReLU"}
    assert payload["networks_started"]["mnist"] == {"no BN": 3, "BN": 0}
    assert lu_real.epoch_text(payload, "mnist") == ("MNIST, depth 200, epoch 50 of 50 (3 of 12 networks without BN) "
                                                    "(BN networks not started)")
    assert "3 of the 12 MNIST networks without BN have finished 50 of 50 epochs" in lu_real.progress(units)


def test_the_earlier_readings_retired_run_is_summarised_from_its_journal():
    payload = lu_real.earlier_reading()
    assert payload is not None and payload["epochs_reached"]["mnist"]["no BN"] == 5
    text = lu_real.earlier_text(payload)
    assert text.startswith("After 5 of 50 epochs its 12 MNIST networks without BN had test accuracies from ")
    assert lu_real.earlier_text(None) == "Its journal is not at hand in this copy of the book."


def test_a_run_keeps_its_networks_in_memory_from_epoch_to_epoch(tmp_path, monkeypatch):
    """Under gmp.runs every epoch is checkpointed, but the process that trains a network from one
    epoch to the next does not read it back (a rebuild of 0.4 GB a network at paper scale)."""
    cfg = _cfg(activations=["ReLU", "Tanh"])
    reads = []
    original = lu_real.Training.resume
    monkeypatch.setattr(lu_real.Training, "resume", lambda self, path: reads.append(path) or original(self, path))
    payload = _run(cfg, tmp_path / "lu_real" / ".staging", monkeypatch)
    assert reads == [] and payload["epochs_reached"] == {"digits": {"no BN": 3, "BN": 3}}
    staging = tmp_path / "w" / "lu_real" / ".staging"
    monkeypatch.setenv(STAGING_ENV, str(staging))
    store = Store("lu_real", cfg)
    todo = lu_real.units(cfg, store, 0, "cpu")
    for key in list(todo)[0::2]:  # one worker of two
        store.memo(key, todo[key])
    assert reads == []


def test_the_chapter_says_its_paper_scale_runs_with_the_gpu_command(tmp_path, monkeypatch):
    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path))
    assert "`python -m gmp.gpu OUT` on a GPU" in results.cached("lu_real", "runs").describe()
    assert "`python -m gmp.runs chen_levy --scale paper`" in results.cached("chen_levy", "fits").describe()
