"""The stacked trainer of the lu_real chapter (several depth-L networks as one batched
computation), the first author's protocol in the built model, journals that name their
device and precision, and the prepared GPU command run on a CPU."""

import copy
import json
import math
import os

import numpy as np
import pytest
import torch

import gmp
from gmp import gpu
from gmp.config import Config
from gmp.experiments import lu_real
from gmp.propagation import parameter_gradient_norms

LABELS = ["SELU", "SELU-GPN", "SELU-BN", "ReLU-GPN-BN", "GELU", "Tanh-GPN"]


def _cfg(**changes):
    values = {**gmp.load_config("lu_real", "smoke").as_dict(), "width": 8, "depth": 3, "batch_size": 16,
              "ratio_every": 2, "epochs": {"digits": 3, "mnist1d": 3}, "data": {"mnist": "digits", "cifar10": "digits"},
              "activations": ["ReLU", "SELU"], **changes}
    return Config("lu_real", "smoke", values)


def _data(seed=0, rows=70, features=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, features, generator=g)
    return (x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()), (x[:20] + 0.1, (x[:20, 0] > 0).long())


CHAOTIC = {"ReLU-GPN-BN"}
"""The networks of ``LABELS`` whose float64 training at depth 50 amplifies a change of summation
order to visible differences within three steps (asserted by the test below): their trajectories
are compared only at step 0, and every step from the same weights."""


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 5, generator=g, dtype=torch.float64), torch.randint(0, 3, (16,), generator=g))
            for _ in range(3)]


def _one_step(net, xb, yb):
    """Loss and per-layer gradient norms of ``net`` on one mini-batch."""
    net.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(net(xb), yb)
    loss.backward()
    return loss.item(), parameter_gradient_norms(net)


def test_the_stacked_trainer_equals_the_one_network_trainer_in_float64():
    """Six depth-50 networks (two with BN, SELU plain, GPN and with BN) trained three steps at
    once give, at every step, each network's own loss and per-layer gradient norms computed
    from the stacked network's weights of that step; and, for every network whose trajectory is
    not chaotic, the losses and gradient norms of the one-network trainer run alone (its own
    SGD with momentum) to 1e-8. A chaotic network's trajectory is defined only at step 0: a
    change of summation order moves it within a step or two (the next test)."""
    cfg = _cfg(width=12, depth=50, lr=1e-4)  # the paper's rate
    batches = _batches()
    stack = lu_real.StackedTraining(LABELS, 5, cfg, dtype=torch.float64)
    stack.allocate(3)
    before, stacked = [], []
    for xb, yb in batches:
        before.append(copy.deepcopy(stack.model))
        stacked.append(stack._train_step(xb, yb))
    for i, label in enumerate(LABELS):
        one = lu_real.Training(label.removesuffix("-BN"), label.endswith("-BN"), 5, cfg)
        one.model.double()
        same = copy.deepcopy(one.model)
        for step, (xb, yb) in enumerate(batches):
            loss, norms = _one_step(before[step].load_into(i, same), xb, yb)
            np.testing.assert_allclose(float(stacked[step][0][i]), loss, rtol=1e-8, err_msg=f"{label} {step}")
            np.testing.assert_allclose(stacked[step][1][:, i].numpy(), norms, rtol=1e-6, err_msg=f"{label} {step}")
            loss, norms = _one_step(one.model, xb, yb)
            one.opt.step()
            if step == 0 or label not in CHAOTIC:
                np.testing.assert_allclose(float(stacked[step][0][i]), loss, rtol=1e-8, err_msg=f"{label} {step}")
                np.testing.assert_allclose(stacked[step][1][:, i].numpy(), norms, rtol=1e-6, err_msg=f"{label} {step}")
        assert len(norms) == 50 and np.ptp(norms) > 0


def test_only_the_chaotic_networks_amplify_a_change_of_summation_order():
    """Reversing the rows of every mini-batch changes only the order of the sums: the non-chaotic
    networks of the test above keep their losses to 1e-12 over three float64 steps, ReLU-GPN-BN's
    moves by more than 1e-4 by the third (2% and 9% with 2 threads and 1 on one processor)."""
    from gmp.experiments.lu_real.sensitivity import order_sensitivity

    batches = _batches()
    x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
    change = order_sensitivity(LABELS, x, y, _cfg(width=12, depth=50, lr=1e-4, batch_size=16), steps=3,
                               dtype=torch.float64)
    for label, moved in change.items():
        assert moved[0] < 1e-9, (label, moved)
        if label in CHAOTIC:
            assert moved[2] > 1e-4, (label, moved)
        else:
            assert np.all(moved < 1e-12), (label, moved)


def test_the_stacked_trainer_equals_the_one_network_trainer_epoch_by_epoch():
    cfg, (train, test) = _cfg(), _data()
    labels = ["ReLU", "ReLU-GPN", "SELU-BN", "SELU-GPN-BN"]
    stack = lu_real.StackedTraining(labels, 5, cfg)
    singles = [lu_real.Training(label.removesuffix("-BN"), label.endswith("-BN"), 5, cfg) for label in labels]
    for epoch in (1, 2, 3):
        together = stack.run_epoch(train, test, final=epoch == 3)
        for one, got in zip(singles, together):
            want = one.run_epoch(train, test, final=epoch == 3)
            assert set(want) <= set(got)
            for key in ("epoch", "steps", "ratio_steps", "diverged", "test_acc", "train_acc_running", "device",
                        "precision", "ratio_undefined_steps") + (("train_acc",) if epoch == 3 else ()):
                assert got[key] == want[key], (one.name, epoch, key)
            for key in ("train_loss", "ratio_max"):
                assert got[key] == pytest.approx(want[key], rel=1e-5), (one.name, epoch, key)
            np.testing.assert_allclose(got["ratio"], want["ratio"], rtol=1e-5)
            np.testing.assert_allclose(got["drift"], want["drift"], rtol=1e-4)
    assert stack.step == singles[0].step == 3 * 5 and stack.mode == "eager, stacked kernels"


def test_a_network_forced_non_finite_diverges_alone_and_the_others_are_unchanged():
    cfg, (train, test) = _cfg(), _data()
    labels = ["ReLU", "SELU-GPN", "SELU-BN"]
    clean, broken = (lu_real.StackedTraining(labels, 5, cfg) for _ in range(2))
    with torch.no_grad():
        broken.model.V[1][1].fill_(math.nan)
    for epoch in (1, 2):
        a, b = clean.run_epoch(train, test, False), broken.run_epoch(train, test, False)
        for i in (0, 2):
            assert {k: v for k, v in a[i].items() if k != "seconds"} == {k: v for k, v in b[i].items() if k != "seconds"}
        assert not a[1]["diverged"]
        if epoch == 1:
            assert b[1]["diverged"] and b[1]["diverged_step"] == 0 and b[1]["train_loss"] is None
        else:
            assert b[1] == {"epoch": 2, "diverged": True, "after_divergence": True, "device": "cpu",
                            "precision": "float32, TF32 off"}
    for name in ("first_weight", "last_weight"):
        assert torch.equal(getattr(clean.model, name)[0], getattr(broken.model, name)[0])


def test_a_journal_from_another_device_or_precision_is_refused_for_replay(tmp_path):
    cfg, (train, test) = _cfg(), _data()

    def make():
        return lu_real.Training("Tanh", False, train[0].shape[1], cfg)

    _, first = lu_real.train_epoch(None, make, 1, 3, train, test, None)
    assert first["device"] == "cpu" and first["precision"] == "float32, TF32 off"
    again, _ = lu_real.train_epoch(None, make, 2, 3, train, test, tmp_path / "a.pt", {1: first})
    assert again.epoch == 2
    for change in ({"device": "cuda (NVIDIA H100 80GB HBM3)"}, {"precision": "float32, TF32 on"},
                   {"device": None}):
        entry = {**first, **change}
        entry = {k: v for k, v in entry.items() if v is not None}
        with pytest.raises(lu_real.ForeignJournal, match=r"Tanh: its journalled epochs were computed on .* never "
                                                         r"replayed on another"):
            lu_real.train_epoch(None, make, 2, 3, train, test, tmp_path / "b.pt", {1: entry})


def test_a_checkpoint_is_read_onto_the_cpu_and_then_moved(tmp_path, monkeypatch):
    """A network on a GPU resumes its checkpoint through the CPU: its shuffling generator is a
    CPU generator, which a state loaded straight onto the GPU cannot set."""
    cfg, (train, test) = _cfg(), _data()
    training = lu_real.Training("Tanh", False, 5, cfg)
    training.run_epoch(train, test, False)
    training.save(tmp_path / "net.pt")
    seen = []
    original = lu_real.training.load_checkpoint
    monkeypatch.setattr(lu_real.training, "load_checkpoint", lambda path, map_location, keys: seen.append(map_location)
                        or original(path, map_location=map_location, keys=keys))
    lu_real.Training("Tanh", False, 5, cfg).resume(tmp_path / "net.pt")
    assert seen == ["cpu"]


def _author_forward(model, x, constants):
    """The first author's ``mnist.py`` forward pass, written from his code's description, with
    our model's parameters: fc1 with bias, the activation, ``x @ (V / column norms)`` with V
    his orientation (ours transposed), the activation, ..., out with bias."""
    a, b = constants

    def act(h):
        return a * torch.nn.functional.selu(h) + b

    h = act(x @ model.first.weight.T + model.first.bias)
    for layer in model.layers:
        V = layer.V.detach().T
        h = act(h @ (V / V.pow(2).sum(0, keepdim=True).sqrt()))
    return h @ model.last.weight.T + model.last.bias


def test_the_paper_scale_model_follows_the_first_authors_protocol():
    cfg = gmp.load_config("lu_real", "paper")
    assert cfg.protocol == "author" and cfg.gpn_constants == "author"
    model = lu_real.build("SELU-GPN", False, 784, cfg, 0)
    assert model.depth == 200 and model.width == 500 and model.first_activation
    for layer in (model.first, model.last):
        W = layer.weight.detach().double()
        assert layer.bias is not None
        torch.testing.assert_close(W @ W.T, torch.eye(W.shape[0], dtype=torch.float64), atol=1e-5, rtol=0)
    assert all(layer.bias is None for layer in model.layers)
    V = model.layers[7].V.detach().double()
    torch.testing.assert_close(V @ V.T, torch.eye(500, dtype=torch.float64), atol=1e-5, rtol=0)  # Haar start
    assert (model.phi.a, model.phi.b) == gmp.gpn.AUTHOR_CONSTANTS["selu"] == (0.9660, 0.2585)
    x = torch.randn(4, 784, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(x), _author_forward(model, x, (0.9660, 0.2585)), rtol=1e-4, atol=1e-4)
    entries = [{"diverged": False, "ratio": [], "ratio_steps": [], "max_grad": [], "steps": 1, "seconds": 1.0,
                "train_loss": 1.0, "train_acc_running": 0.97, "test_acc": 0.96, "drift": [0.0], "train_acc": 0.99,
                "ratio_max": 1.5, "ratio_undefined_steps": 0}]
    result = lu_real.network_result(entries, 1)
    assert result["train_acc"] == 0.97 and result["train_acc_eval"] == 0.99  # Table 2's Train is the running count


def test_the_authors_gpn_constants_are_the_quadratures_to_four_decimals():
    """Within one unit of the fourth decimal; all correctly rounded but the b of Tanh (0.3886 for
    0.38854) and of SELU (0.2585 for 0.25845; the author's MATLAB script has 0.2584)."""
    for key, (a, b) in gmp.gpn.AUTHOR_CONSTANTS.items():
        exact_a, b_plus, b_minus = gmp.gpn_constants(key)
        exact_b = b_minus if gmp.gpn.PAPER_ROOTS[key] == "-" else b_plus
        assert abs(a - exact_a) < 1e-4 and abs(b - exact_b) < 1e-4, key
        assert (round(exact_a, 4), round(exact_b, 4) + 0.0) == (a, b) or key in ("tanh", "selu"), key


def test_the_next_group_is_the_first_with_networks_not_journalled():
    cfg = _cfg(activations=["ReLU"])
    key = lu_real.epoch_key
    assert gpu.next_group(cfg, {}) == ("digits", ["ReLU", "ReLU-GPN"])
    whole = {key("digits", label, 0, e): {"diverged": False} for label in ("ReLU", "ReLU-GPN") for e in (1, 2, 3)}
    assert gpu.next_group(cfg, whole) == ("digits", ["ReLU-BN", "ReLU-GPN-BN"])
    diverged = {**whole, key("digits", "ReLU-BN", 0, 1): {"diverged": True}}
    assert gpu.next_group(cfg, diverged) == ("digits", ["ReLU-GPN-BN"])
    with pytest.raises(RuntimeError, match="holds 1 of 3 epochs"):
        gpu.next_group(cfg, {**whole, key("digits", "ReLU-BN", 0, 1): {"diverged": False}})


def test_chapter_code_runs_without_papermill_or_ipython_magics(root):
    code = gpu.chapter_code(root / "book" / "part2" / "lu_real.ipynb", "smoke", "cuda")
    compile(code, "lu_real", "exec")
    assert "!git clone" not in code and "%pip" not in code
    parameters = code.index('SCALE = os.environ.get("GMP_SCALE", "small")')
    assert code.index("SCALE = 'smoke'\nDEVICE = 'cuda'") > parameters


def test_the_gpu_command_runs_on_a_cpu_at_smoke_scale(tmp_path, monkeypatch, root):
    """The rehearsal of a lease: ``python -m gmp.gpu OUT --device cpu --scale smoke`` in a process (and its
    children) that cannot import what the GPU image lacks (``tests/gpu_image``): one chapter's code, the
    ``cuda`` tests collected, then the next group of lu_real's smoke run journalled whole, then the Part III
    units, the full-batch chapters' first; everything under OUT within what comes back from a GPU machine (the
    reports folded into the summary); ``merge`` adds all of it to a repository's journals, each Part III unit
    with its device."""
    import re
    import subprocess
    import sys

    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "results"))
    monkeypatch.delenv(results.STAGING_ENV, raising=False)
    out = tmp_path / "out"
    program = ("import os, sys\nfrom gmp import gpu, results\nrc = gpu.main(sys.argv[1:])\n"
               "assert results.STAGING_ENV not in os.environ  # set for the journal's write only\nsys.exit(rc)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "tests" / "gpu_image"), str(root)])}
    # --seconds is a deadline, not a length: the work ends when done (minutes on an idle machine); at 420 s a loaded
    # CI machine stopped the last unit job at it, so the margin is wide.
    done = subprocess.run([sys.executable, "-c", program, str(out), "--device", "cpu", "--scale", "smoke",
                           "--seconds", "840", "--smoke-seconds", "120", "--chapters", "lu_gpn"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["smoke"]["chapters"] == summary["smoke"]["chapters_ok"] == 1, summary["smoke"]
    run = summary["lu_real"]
    assert run["finished"] and run["networks"] == ["ReLU", "ReLU-GPN", "GELU", "GELU-GPN"]
    assert run["mode"] == "stacked kernels"
    cfg = gmp.load_config("lu_real", "smoke")
    journal = out / "lu_real" / "_partial" / f"smoke-{cfg.digest}.jsonl"
    entries = results.journal_entries(journal)
    assert [e["key"] for e in entries] == [lu_real.epoch_key("digits", label, 0, 1) for label in run["networks"]]
    assert all(e["value"]["device"] == "cpu" and e["value"]["stacked"] == 4 for e in entries)
    assert [p["networks"] for p in run["probes"]] == [4]  # the whole group, measured on the device: it fits
    assert summary["folded"] == {"smoke.jsonl": "smoke_log"}  # 9 files else
    tests = summary["smoke_log"][-1]
    skipped = re.search(r"(\d+) skipped", tests["output_tail"])  # without a GPU: collected, then skipped
    assert tests["rc"] == 0 and skipped and int(skipped[1]) == (root / "tests" / "test_cuda.py").read_text().count(
        "\ndef test_"), tests
    units, stacked = summary["units"], summary["units_stacked"]  # the second job, with the time the group left
    assert list(units) == list(gpu.UNIT_CHAPTERS) == ["sbsnn_gap", "sbsnn_fitting", "sbsnn_encoders", "sbsnn_author",
                                                      "sbsnn_author_figs"]
    full_batch = [chapter for chapter in units if chapter not in gpu.STACKED_CHAPTERS]
    for chapter in full_batch:  # every unit, unit by unit
        assert list(units[chapter]["done"]) == gpu.unit_keys(chapter, gmp.load_config(chapter, "smoke")), units[chapter]
    assert stacked["returncode"] == 0 and stacked["queues"], stacked.get("log")  # then the stacked fit
    assert all(q["status"] == "trained" and q["probe_mode"] == "eager" for q in stacked["queues"]), stacked["queues"]
    assert {unit.split("/")[0] for unit in stacked["units"]} == set(gpu.STACKED_CHAPTERS)
    for job in units.values():  # then, unit by unit, what it could not take
        assert job["returncode"] == 0 and list(job["done"]) == job["pending"], job
    by_unit = {f"{chapter}/{key}" for chapter, job in units.items() for key in job["done"]}
    assert by_unit - {f"{c}/{key}" for c in full_batch for key in units[c]["done"]} == set(stacked["not_stacked"])
    assert not by_unit & set(stacked["done"])
    assert {"sbsnn_author_figs/fig4seeds-sin-0", "sbsnn_author/heldout-0"} <= set(stacked["done"]) | by_unit
    assert "sbsnn_author_figs/fig4seeds-sin-0" in stacked["done"] and "sbsnn_author/heldout-0" in by_unit
    part3 = {chapter: gmp.load_config(chapter, "smoke").digest for chapter in units}
    journals = {chapter: out / chapter / "_partial" / f"smoke-{digest}.jsonl" for chapter, digest in part3.items()}
    written = [journals[chapter].stat().st_mtime for chapter in (*full_batch, "sbsnn_author_figs")]
    assert written == sorted(written)  # the full-batch chapters' units first, in order, then the stacked fit's
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == sorted(["gpu.json", "summary.json", f"lu_real/_partial/smoke-{cfg.digest}.jsonl",
                            *(str(path.relative_to(out)) for path in journals.values())])  # at most 8 files come back
    assert gpu.return_problems(out) == [] == summary["return_problems"] == summary["left_out"]
    added = gpu.merge(out, tmp_path / "repo")
    assert len(added) == 4 + len(by_unit) + len(stacked["done"]) and gpu.merge(out, tmp_path / "repo") == []
    merged = [e for chapter in part3 for e in results.journal_entries(
        tmp_path / "repo" / chapter / "_partial" / journals[chapter].name)]
    assert len(merged) == len(by_unit) + len(stacked["done"]) and {e["device"] for e in merged} == {"cpu"}
    (out / "lu_real" / "_partial" / "smoke-0000000000000000.jsonl").write_text(journal.read_text())
    with pytest.raises(ValueError, match="written for config 0000000000000000"):
        gpu.merge(out, tmp_path / "repo")


def _entries(label, epochs, diverged_at=None):
    out = []
    for e in range(1, epochs + 1):
        value = {"epoch": e, "diverged": diverged_at is not None and e >= diverged_at}
        if diverged_at is not None and e > diverged_at:
            value["after_divergence"] = True
        out.append({"key": lu_real.epoch_key("digits", label, 0, e), "value": value, "seconds": 1.0})
    return out


def test_merge_adds_whole_networks_only_and_never_splices_two_runs(tmp_path, monkeypatch):
    """A network cut short (a write interrupted), or one the repository's journal already holds
    an epoch of (another machine's run), is left out whole."""
    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "results"))
    cfg = gmp.load_config("lu_real", "smoke")  # one epoch per network
    source = tmp_path / "out" / "lu_real" / "_partial" / f"smoke-{cfg.digest}.jsonl"
    source.parent.mkdir(parents=True)
    lines = _entries("ReLU", 1) + _entries("GELU", 1) + _entries("GELU-GPN", 1)
    lines[2]["value"]["epoch"] = 2  # not epoch 1: not a whole run
    source.write_text("".join(json.dumps(e) + "\n" for e in lines))
    target = tmp_path / "repo" / "lu_real" / "_partial" / source.name
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(_entries("GELU", 1)[0] | {"seconds": 2.0}) + "\n")
    assert gpu.merge(tmp_path / "out", tmp_path / "repo") == [lu_real.epoch_key("digits", "ReLU", 0, 1)]
    assert [e["seconds"] for e in results.journal_entries(target)] == [2.0, 1.0]
    whole = gpu.returned._whole
    assert whole(_entries("ReLU", 3, diverged_at=2), 3) and not whole(_entries("ReLU", 2), 3)


def test_the_second_job_journals_the_missing_part3_units_whole_and_merge_adds_only_new_ones(tmp_path, monkeypatch):
    """``python -m gmp.gpu``'s second job: the Part III units that neither the repository's journal nor its
    cache holds, computed in a child process; only the journal comes back, and merging it twice adds nothing
    the second time. A journal of another config is refused."""
    import time

    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cfg = gmp.load_config("sbsnn_author", "smoke")
    keys = gpu.missing_units("sbsnn_author", "smoke")
    journal = tmp_path / "repo" / "sbsnn_author" / "_partial" / f"smoke-{cfg.digest}.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text(json.dumps({"key": keys[0], "value": {"from": "the repository"}}) + "\n")
    assert gpu.missing_units("sbsnn_author", "smoke") == keys[1:]
    done = gpu.units_job(tmp_path / "out", ["sbsnn_author"], "smoke", "cpu", time.monotonic() + 300, 0)["sbsnn_author"]
    assert done["returncode"] == 0 and list(done["done"]) == keys[1:], done.get("log")
    returned = [p.relative_to(tmp_path / "out").as_posix() for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert sorted(returned) == ["gpu.json", f"sbsnn_author/_partial/smoke-{cfg.digest}.jsonl"]  # the form's gpu.json
    assert gpu.merge(tmp_path / "out") == keys[1:]
    assert gpu.missing_units("sbsnn_author", "smoke") == [] and gpu.merge(tmp_path / "out") == []
    assert results.journal_units(journal)[keys[0]] == {"from": "the repository"}
    stale = tmp_path / "out" / "sbsnn_author" / "_partial" / "smoke-0000000000000000.jsonl"
    stale.write_text("")
    with pytest.raises(ValueError, match="other settings"):
        gpu.merge(tmp_path / "out")


def test_queued_settings_add_units_to_the_second_job_without_making_the_chapters_config_stale(tmp_path, monkeypatch):
    """A chapter's ``QUEUED`` settings give the second job the units they add, journalled under the digest of
    the config with them, which ``merge`` accepts; the chapter's own config and digest stay as they are."""
    import time

    from gmp import results
    from gmp.experiments import sbsnn_author_figs as figs

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    today = gmp.load_config("sbsnn_author_figs", "smoke")
    monkeypatch.setitem(figs.CONFIG, "smoke", {k: v for k, v in today.as_dict().items() if k != "more_seeds"})
    without = gmp.load_config("sbsnn_author_figs", "smoke")
    assert gpu.unit_config("sbsnn_author_figs", "smoke").digest == without.digest  # nothing queued at smoke
    monkeypatch.setattr(figs, "QUEUED", {"smoke": {"more_seeds": [1]}})
    queued = gpu.unit_config("sbsnn_author_figs", "smoke")
    assert queued.digest == today.digest != without.digest == gmp.load_config("sbsnn_author_figs", "smoke").digest
    journal = tmp_path / "repo" / "sbsnn_author_figs" / "_partial" / f"smoke-{queued.digest}.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text("".join(json.dumps({"key": k, "value": {}}) + "\n" for k in figs.units_keys(without, 0)))
    added = ["fig4seeds-sin-0"] + [f"fig6seeds-{a}-{e}-0" for a in ("sin", "gpn_relu") for e in ("nerf", "rotated")]
    assert gpu.missing_units("sbsnn_author_figs", "smoke") == added
    # the job's child process imports the chapter afresh: its CONFIG has more_seeds and nothing is queued, the
    # same config as this one's queued one (same digest), so it computes the same units
    done = gpu.units_job(tmp_path / "out", ["sbsnn_author_figs"], "smoke", "cpu", time.monotonic() + 300, 0)
    assert list(done["sbsnn_author_figs"]["done"]) == added, done["sbsnn_author_figs"].get("log")
    gpu.files.write_json(tmp_path / "out" / "gpu.json", gpu.environment("cpu"))
    assert gpu.merge(tmp_path / "out") == added and gpu.missing_units("sbsnn_author_figs", "smoke") == []
    monkeypatch.setattr(figs, "QUEUED", {"smoke": {"more_seeds": [2], "epochs": 9}})
    with pytest.raises(ValueError, match=r"sets \['epochs'\], which its CONFIG has already"):
        gpu.unit_config("sbsnn_author_figs", "smoke")


def test_units_journalled_under_todays_config_are_not_computed_again_for_a_queued_one(tmp_path, monkeypatch):
    """A unit that a CPU run journalled under the chapter's own config, not yet assembled into its cache, is
    present for the second job even while ``QUEUED`` settings give the job another config (digest)."""
    from gmp import results
    from gmp.experiments import sbsnn_author_figs as figs

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    today = gmp.load_config("sbsnn_author_figs", "smoke")
    monkeypatch.setattr(figs, "QUEUED", {"smoke": {"queued_setting": 1}})
    assert gpu.unit_config("sbsnn_author_figs", "smoke").digest != today.digest
    keys = gpu.missing_units("sbsnn_author_figs", "smoke")
    journal = tmp_path / "repo" / "sbsnn_author_figs" / "_partial" / f"smoke-{today.digest}.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text(json.dumps({"key": keys[-1], "value": {}}) + "\n")
    assert gpu.missing_units("sbsnn_author_figs", "smoke") == keys[:-1]


def test_a_unit_resumes_from_the_checkpoint_the_repository_holds_for_it(tmp_path, monkeypatch):
    """The second job copies a unit's returned checkpoint (put in the repository by ``merge``) to where the
    unit checkpoints, before computing it; the fit then continues from there (``fit_stack``'s resumption)."""
    import time

    from gmp import results
    from gmp.experiments import sbsnn_author_figs as figs

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    cfg = gpu.unit_config("sbsnn_author_figs", "smoke")
    keys = ["fig4seeds-sin-0", "fig4seeds-triangle-0"]
    monkeypatch.setattr(figs, "units_keys", lambda cfg, seed: keys)
    monkeypatch.setattr(figs, "units", lambda cfg, store, seed, device: {
        k: (lambda k=k: {"found": store.scratch(k).read_text() if store.scratch(k).is_file() else None}) for k in keys})
    saved = tmp_path / "repo" / "sbsnn_author_figs" / "_partial" / f"smoke-{cfg.digest}" / "fig4seeds-sin-0.pt"
    saved.parent.mkdir(parents=True)
    saved.write_text("epoch 7 of the unit")
    summary = gpu.compute_units(tmp_path / "out", "sbsnn_author_figs", "smoke", "cpu", time.monotonic() + 60)
    assert summary["resumed"] == ["fig4seeds-sin-0"] and list(summary["done"]) == keys
    journal = tmp_path / "out" / "sbsnn_author_figs" / "_partial" / f"smoke-{cfg.digest}.jsonl"
    assert results.journal_units(journal) == {keys[0]: {"found": "epoch 7 of the unit"}, keys[1]: {"found": None}}


def test_the_checkpoint_of_a_unit_cut_short_comes_back_and_merge_keeps_the_furthest(tmp_path, monkeypatch):
    """A unit's checkpoint (``_partial/<scale>-<digest>/<unit>.pt``, three folders below OUT: it would not come
    back) moves to ``_partial/<scale>-<digest>.<unit>.pt``, and ``merge`` puts it where the unit checkpoints."""
    import torch

    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "repo"))
    digest = gpu.unit_config("sbsnn_author_figs", "smoke").digest
    folder = tmp_path / "out" / "sbsnn_author_figs"
    scratch = folder / "_partial" / f"smoke-{digest}"
    scratch.mkdir(parents=True)
    (folder / "_partial" / f"smoke-{digest}.jsonl").write_text(json.dumps({"key": "fig4seeds-sin-0", "value": 1}) + "\n")
    for key, epoch in (("fig4seeds-sin-0", 3), ("fig4seeds-triangle-0", 20), ("fig6seeds-sin-nerf-0", 10)):
        torch.save({"epoch": epoch}, scratch / f"{key}.pt")
    (scratch / "fig4seeds-triangle-0.lock").write_text("")
    (folder / ".staging-smoke" / "run-code").mkdir(parents=True)
    (folder / ".staging-smoke" / "run-code" / "1.json").write_text("{}")
    gpu.files.keep_returned(folder)  # fig4seeds-sin-0 finished: its checkpoint does not come back
    returned = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    assert returned == ["_partial", f"_partial/smoke-{digest}.fig4seeds-triangle-0.pt",
                        f"_partial/smoke-{digest}.fig6seeds-sin-nerf-0.pt", f"_partial/smoke-{digest}.jsonl"]
    assert gpu.return_problems(tmp_path / "out") == []
    torch.save({"epoch": 3}, folder / "_partial" / f"smoke-{digest}.fig4seeds-sin-0.pt")  # had it come back
    gpu.files.write_json(tmp_path / "out" / "gpu.json", gpu.environment("cpu"))
    repo = tmp_path / "repo" / "sbsnn_author_figs" / "_partial" / f"smoke-{digest}"
    repo.mkdir(parents=True)
    torch.save({"epoch": 30}, repo / "fig4seeds-triangle-0.pt")  # a CPU run got further
    assert gpu.merge(tmp_path / "out") == ["fig4seeds-sin-0"]
    assert sorted(p.name for p in repo.iterdir()) == ["fig4seeds-triangle-0.pt", "fig6seeds-sin-nerf-0.pt"]
    assert gpu.returned._checkpoint_progress(repo / "fig4seeds-triangle-0.pt") == 30
    assert gpu.returned._checkpoint_progress(repo / "fig6seeds-sin-nerf-0.pt") == 10
    torch.save({"epoch": 1}, folder / "_partial" / "smoke-0000000000000000.fig4seeds-sin-0.pt")
    with pytest.raises(ValueError, match="written for config 0000000000000000"):
        gpu.merge(tmp_path / "out")


def test_store_record_journals_many_units_in_one_write_as_memo_journals_one(tmp_path, monkeypatch):
    from gmp import results

    monkeypatch.setenv(results.STAGING_ENV, str(tmp_path / "lu_real" / ".staging"))
    cfg = gmp.load_config("lu_real", "smoke")
    store = results.Store("lu_real", cfg)
    store.memo("a", lambda: {"x": 1})
    store.record({"b": ({"x": 2}, 3.0), "c": ({"x": 3}, 4.0)})
    entries = results.journal_entries(tmp_path / "lu_real" / "_partial" / f"smoke-{cfg.digest}.jsonl")
    assert [(e["key"], e["value"]) for e in entries] == [("a", {"x": 1}), ("b", {"x": 2}), ("c", {"x": 3})]
    assert [e["seconds"] for e in entries[1:]] == [3.0, 4.0]
    assert {k for e in entries for k in e} - {"modules", "hash"} == set(entries[1])
    assert store.journalled("c") == {"x": 3}


@pytest.mark.parametrize("dtype, rtol", [(torch.float32, 2e-5), (torch.float64, 1e-11)])
def test_the_update_in_the_backward_pass_is_sgd_with_momentum(dtype, rtol):
    """Three steps of the stacked trainer, whose square layers take SGD with momentum in the
    backward pass (the product into the momentum buffer, the gradient never formed, its norm
    from two Gram matrices), equal three steps of ``torch.optim.SGD(momentum)`` on the autograd
    gradients of a copy of the same stack: every parameter, momentum buffer and gradient norm,
    to the rounding of ``dtype``."""
    cfg = _cfg(width=12, depth=4, lr=0.05, momentum=0.9)
    labels = ["ReLU", "SELU-GPN", "Tanh-BN", "GELU-GPN-BN"]
    stack = lu_real.StackedTraining(labels, 5, cfg, dtype=dtype)
    stack.allocate(3)
    ref = copy.deepcopy(stack.model)
    ref.sgd = None  # autograd gives the square layers' gradients
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for xb, yb in _batches():
        norms = stack._train_step(xb.to(dtype), yb)[1]
        opt.zero_grad(set_to_none=True)
        logits = ref(xb.to(dtype))
        torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), yb.repeat(len(labels)),
                                          reduction="none").view(len(labels), -1).mean(1).sum().backward()
        want = torch.stack([V.grad.flatten(1).norm(dim=1) for V in ref.V])
        opt.step()
        torch.testing.assert_close(norms, want, rtol=rtol, atol=0)
        for (name, p), buf, q in zip(stack.model.named_parameters(), stack.momentum_buffers, ref.parameters()):
            torch.testing.assert_close(p, q, rtol=rtol, atol=rtol * 1e-2, msg=name)
            torch.testing.assert_close(buf, opt.state[q]["momentum_buffer"], rtol=rtol, atol=rtol * 1e-2, msg=name)


def test_the_inverse_row_norms_kept_from_the_update_are_computed_anew_when_a_weight_changes():
    """The next forward pass reads the row norms the update left (no pass over ``V``), unless ``V``
    was changed since: then it computes them from ``V``, and the stack gives what a fresh copy gives."""
    cfg = _cfg(width=12, depth=3)
    stack = lu_real.StackedTraining(["ReLU", "SELU-GPN"], 5, cfg, dtype=torch.float64)
    stack.allocate(2)
    xb, yb = _batches()[0]
    stack._train_step(xb, yb)
    assert all(v == V._version for v, V in zip(stack._square.versions, stack.model.V))
    with torch.no_grad():
        stack.model.V[1].mul_(torch.linspace(0.5, 2.0, 12, dtype=torch.float64).view(1, 12, 1))
    fresh = copy.deepcopy(stack.model)
    fresh.sgd = None
    torch.testing.assert_close(stack.model(xb), fresh(xb), rtol=1e-14, atol=0)


def test_the_stacked_benchmark_times_one_network_and_each_stack_in_one_run():
    from gmp import bench

    lines = []
    rows = bench.stacked(depth=3, width=16, batch=8, in_features=5, stacks=(1, 3), steps=2, print_fn=lines.append)
    assert [(r["what"], r["networks"]) for r in rows] == [
        ("one network (Training, foreach SGD)", 1), ("StackedTraining (eager, stacked kernels)", 1),
        ("StackedTraining (eager, stacked kernels)", 3)]
    assert all(r["ms_per_network_step"] > 0 for r in rows) and rows[0]["speedup"] == 1.0
    assert rows[2]["gflops"] == pytest.approx(6 * 8 * 16 ** 2 * 3 / rows[2]["ms_per_network_step"] / 1e6)
    assert "depth 3, width 16, batch 8" in lines[0] and not any("projected" in line for line in lines)


def test_the_planner_cuts_a_group_the_measured_time_cannot_finish_and_measures_again(tmp_path, monkeypatch):
    """The whole group is probed first; where its measured time exceeds what the lease has left, it is cut to
    what the measured time per network allows and probed again; a group that even one network cannot finish
    is never started."""
    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "results"))
    monkeypatch.delenv(results.STAGING_ENV, raising=False)
    cfg = gmp.load_config("lu_real", "smoke")
    seconds = {4: 60.0, 3: 45.0}
    monkeypatch.setattr(gpu.lu_real, "probe", lambda labels, *args, **kwargs: {
        "mode": "stacked kernels", "networks": len(labels), "seconds_per_step": seconds[len(labels)],
        "epoch_eval_seconds": 0.0, "final_seconds": 0.0})
    import time

    group = gpu.load_group(cfg)
    steps = math.ceil(group[2][0][0].shape[0] / int(cfg["batch_size"]))
    summary = gpu.train_group(tmp_path / "out", cfg, "cpu", time.monotonic() + 1e6, 0, None, group,
                              lease_deadline=time.monotonic() + 50 * steps)
    assert [p["networks"] for p in summary["probes"]] == [4, 3]  # 4 need 60 s a step: cut to 3, measured again
    assert summary["finished"] and summary["networks"] == group[1][:3]
    seconds[1] = 1e9
    summary = gpu.train_group(tmp_path / "out", cfg, "cpu", time.monotonic() + 1e6, 0, 1, group,
                              lease_deadline=time.monotonic() + 100)
    assert "nothing trained" in summary["status"] and "networks" not in summary


def test_build_group_equals_building_each_network():
    """The networks of a group share their first network's draw (one seed, one shape): copying it equals
    building each, for plain, GPN and BN networks."""
    cfg = _cfg(width=8, depth=3)
    labels = ["Tanh", "SELU-GPN", "ReLU-BN", "GELU-GPN-BN"]
    for net, label in zip(lu_real.build_group(labels, 5, cfg, 3), labels):
        want = lu_real.build(label.removesuffix("-BN"), label.endswith("-BN"), 5, cfg, 3)
        assert net.state_dict().keys() == want.state_dict().keys()
        for key, value in want.state_dict().items():
            assert torch.equal(net.state_dict()[key], value), (label, key)
        assert type(net.phi) is type(want.phi) and repr(net.phi) == repr(want.phi)


def test_a_stack_saved_after_an_epoch_continues_bit_for_bit(tmp_path):
    """Stopping after one epoch, saving the whole state and continuing in a new stack gives the curves and
    weights of one uninterrupted run bit for bit (with and without BN)."""
    cfg, (train, test) = _cfg(), _data()
    labels = ["ReLU", "SELU-GPN", "Tanh-BN", "GELU-GPN-BN"]
    whole = lu_real.StackedTraining(labels, 5, cfg)
    straight = [whole.run_epoch(train, test, final=epoch == 3) for epoch in (1, 2, 3)]
    first = lu_real.StackedTraining(labels, 5, cfg)
    resumed = [first.run_epoch(train, test, final=False)]
    first.save(tmp_path / "state.pt", {"kept": 1})
    second = lu_real.StackedTraining(labels, 5, cfg)
    assert second.load(tmp_path / "state.pt") == {"kept": 1} and second.epoch == 1
    resumed += [second.run_epoch(train, test, final=epoch == 3) for epoch in (2, 3)]
    drop = {"seconds"}
    assert [[{k: v for k, v in m.items() if k not in drop} for m in epoch] for epoch in resumed] == \
        [[{k: v for k, v in m.items() if k not in drop} for m in epoch] for epoch in straight]
    for a, b in zip(whole.params + whole.momentum_buffers, second.params + second.momentum_buffers):
        assert torch.equal(a, b)
    other = lu_real.StackedTraining(labels[:2], 5, cfg)
    with pytest.raises(ValueError, match="state.pt: the saved stack is of"):
        other.load(tmp_path / "state.pt")


def test_a_group_continues_across_two_commands_of_one_lease(tmp_path, monkeypatch):
    """With a state folder, a group that one command cannot finish saves its state at the command's deadline
    (nothing journalled, its epochs labelled unfinished), and the next command continues it from there and
    journals it whole, with the epochs of one uninterrupted run."""
    import time

    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "results"))
    monkeypatch.delenv(results.STAGING_ENV, raising=False)
    cfg = Config("lu_real", "smoke", {**gmp.load_config("lu_real", "smoke").as_dict(),
                                      "epochs": {"digits": 3, "mnist1d": 1}})
    group = gpu.load_group(cfg)
    now = time.monotonic()
    monkeypatch.setattr(gpu.lu_real, "probe", lambda labels, *args, **kwargs: {
        "mode": "stacked kernels", "networks": len(labels), "seconds_per_step": 1.0, "epoch_eval_seconds": 0.0,
        "final_seconds": 0.0})
    steps = math.ceil(group[2][0][0].shape[0] / int(cfg["batch_size"]))
    clock = {"t": now}
    monkeypatch.setattr(gpu.lu_real.time, "monotonic", lambda: clock["t"])
    original = lu_real.StackedTraining.run_epoch

    def epoch_takes_its_steps(self, *args, **kwargs):  # each epoch advances the clock by its measured time
        clock["t"] += steps * 1.0
        return original(self, *args, **kwargs)

    monkeypatch.setattr(lu_real.StackedTraining, "run_epoch", epoch_takes_its_steps)
    first = gpu.train_group(tmp_path / "out1", cfg, "cpu", now + 1.5 * steps + 20, 0, None, group, tmp_path / "state",
                            lease_deadline=now + 100 * steps)
    assert not first["finished"] and first["epochs_done"] == 1 and "state" in first
    assert not (tmp_path / "out1" / "lu_real" / "_partial").exists()
    second = gpu.train_group(tmp_path / "out2", cfg, "cpu", clock["t"] + 100 * steps, 0, None, group,
                             tmp_path / "state", lease_deadline=clock["t"] + 100 * steps)
    assert second["finished"] and second["epochs_done"] == 3 and "resumed_from" in second
    assert not list((tmp_path / "state").iterdir())
    monkeypatch.setattr(lu_real.StackedTraining, "run_epoch", original)
    straight = lu_real.StackedTraining(group[1], group[2][0][0].shape[1], cfg)
    want = {lu_real.epoch_key("digits", label, 0, epoch): m for epoch in (1, 2, 3)
            for label, m in zip(group[1], straight.run_epoch(*group[2], final=epoch == 3))}
    got = {e["key"]: e["value"] for e in results.journal_entries(
        tmp_path / "out2" / "lu_real" / "_partial" / f"smoke-{cfg.digest}.jsonl")}
    assert got.keys() == want.keys()
    for key in want:
        assert {k: v for k, v in got[key].items() if k != "seconds"} == {
            k: v for k, v in want[key].items() if k != "seconds"}, key


def test_the_lease_script_rehearses_on_a_cpu_and_leaves_only_what_comes_back(tmp_path, monkeypatch, root):
    """``python -m gmp.gpu lease OUT`` on a CPU at smoke scale, in a process that cannot import what the GPU
    image lacks: the next group probed and trained whole in the stacked kernels' mode, journalled, its state
    folder left empty; under OUT only what comes back; ``merge`` adds the journal and keeps the summary."""
    import subprocess
    import sys

    from gmp import results

    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "results"))
    monkeypatch.delenv(results.STAGING_ENV, raising=False)
    out, state = tmp_path / "out", tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "tests" / "gpu_image"), str(root)])}
    done = subprocess.run([sys.executable, "-m", "gmp.gpu", "lease", str(out), "--device", "cpu", "--scale", "smoke",
                           "--state", str(state), "--smoke-seconds", "0", "--seconds", "300"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    run = summary["lu_real"]
    assert run["finished"] and run["mode"] == "stacked kernels" and [p["networks"] for p in run["probes"]] == [4]
    assert summary["smoke"] == {"skipped": "--smoke-seconds 0"} and not list(state.glob("*"))
    cfg = gmp.load_config("lu_real", "smoke")
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["gpu.json", f"lu_real/_partial/smoke-{cfg.digest}.jsonl", "summary.json"]
    assert gpu.return_problems(out) == [] == summary["return_problems"]
    added = gpu.merge(out, tmp_path / "repo")
    assert len(added) == 4 and [p.name.split("-", 2)[2] for p in sorted((tmp_path / "repo" / "lu_real" / "leases")
                                                                       .iterdir())] == ["summary.json"]


def test_the_lease_skips_the_smoke_run_once_a_kept_lease_has_shown_it_passing(tmp_path):
    from gmp.gpu.lease import smoke_shown_passing

    leases = tmp_path / "leases"
    leases.mkdir()
    (leases / "20261128-164413-summary.json").write_text(json.dumps(
        {"smoke": {"chapters_ok": 18, "chapters": 18, "failed": [], "cuda_tests_rc": 1}}))
    assert smoke_shown_passing(leases) is None  # a cuda test failed
    (leases / "20261129-100000-summary.json").write_text(json.dumps(
        {"smoke": {"chapters_ok": 18, "chapters": 18, "failed": [], "cuda_tests_rc": 0}}))
    assert smoke_shown_passing(leases) == "20261129-100000-summary.json"

