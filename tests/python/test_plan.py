"""larder.Plan against `larder plan`: the same ids for every option, and
the Python-side handling of deny-lists, epochs and errors."""

import os
import shutil

import pytest

import larder
from conftest import TREE_SAMPLES, larder_cli


def cli_ids(index, *args):
    return [int(x) for x in larder_cli("plan", index, *args).split()]


def plan_ids(plan):
    out = []
    for _, ids in plan:
        out.extend(ids)
    return out


CASES = [
    dict(),
    dict(seed=7, epoch=2, global_batch=16),
    dict(seed=7, epoch=2, global_batch=16, world=4, rank=2),
    dict(seed=1, global_batch=12, world=2, rank=1, workers=3, worker=1),
    dict(seed=1, global_batch=12, world=3, rank=0, start_step=3),
    dict(seed=1, global_batch=12, world=2, rank=1, workers=2, worker=0, start_step=3),
    dict(seed=5, global_batch=16, world=4, rank=3, pad=True),
    dict(seed=5, global_batch=8, mode="locality", locality_window=2),
    dict(seed=5, global_batch=8, world=2, rank=1, mode="locality"),
    dict(seed=5, global_batch=10, mode="none", world=5, rank=4),
    dict(seed=(1 << 64) - 1, global_batch=300, pad=True),  # G > n wraps
]


def cli_args(case):
    flag = {"seed": "--seed", "epoch": "--epoch", "global_batch": "--batch",
            "world": "--world", "rank": "--rank", "workers": "--workers", "worker": "--worker",
            "start_step": "--from-step", "mode": "--mode", "locality_window": "--window"}
    args = []
    for name, value in case.items():
        if name == "pad":
            args.append("--pad")
        else:
            args += [flag[name], str(value)]
    return args


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items())
                         or "defaults")
def test_plan_equals_cli(tree_index, case):
    with larder.Plan(tree_index, **case) as plan:
        assert plan_ids(plan) == cli_ids(tree_index, *cli_args(case))
        info = dict(line.split(": ") for line in
                    larder_cli("plan", tree_index, "--info", *cli_args(case)).splitlines())
        assert plan.steps == int(info["steps"])
        assert plan.info.dropped == int(info["dropped"])


def test_plan_info_and_positions(tree_index):
    ds = larder.Dataset(tree_index)
    plan = larder.Plan(ds, seed=3, epoch=1, global_batch=16, world=4, rank=1)
    assert plan.steps == TREE_SAMPLES // 16
    assert plan.global_batch == 16 and plan.local_batch == 4
    assert plan.num_samples == TREE_SAMPLES and plan.info.dropped == TREE_SAMPLES % 16
    order = [plan.sample_at(p) for p in range(TREE_SAMPLES)]
    assert sorted(order) == list(range(TREE_SAMPLES))
    assert [plan.position_of(i) for i in order] == list(range(TREE_SAMPLES))
    assert plan.batch(2) == order[2 * 16 + 4:2 * 16 + 8]
    assert plan.batch(plan.steps) == []
    with pytest.raises(IndexError):
        plan.sample_at(TREE_SAMPLES)
    with pytest.raises(KeyError):
        plan.position_of(TREE_SAMPLES)
    assert list(plan.worker_steps()) == list(range(plan.steps))
    assert plan.worker_step(plan.steps) is None


def test_set_epoch_rekeys(tree_index):
    plan = larder.Plan(tree_index, seed=9, global_batch=10)
    first = plan_ids(plan)
    plan.set_epoch(4)
    assert plan.epoch == 4
    fourth = plan_ids(plan)
    assert fourth != first
    assert fourth == plan_ids(larder.Plan(tree_index, seed=9, epoch=4, global_batch=10))
    assert fourth == cli_ids(tree_index, "--seed", "9", "--epoch", "4", "--batch", "10")


def test_bad_options(tree_index):
    with pytest.raises(larder.LarderError) as e:
        larder.Plan(tree_index, global_batch=8, world=3)
    assert e.value.code == larder.EUSAGE
    with pytest.raises(larder.LarderError):
        larder.Plan(tree_index, global_batch=8, world=2, rank=2)
    with pytest.raises(ValueError):
        larder.Plan(tree_index, mode="random")
    plan = larder.Plan(tree_index)
    plan.close()
    with pytest.raises(ValueError):
        plan.batch(0)


@pytest.fixture
def own_dataset(tree_index, tmp_path):
    """A private copy of the tree dataset, to put deny-lists beside."""
    shutil.copytree(os.path.dirname(tree_index), tmp_path / "ds")
    return str(tmp_path / "ds" / "index.larder")


def test_deny_lists(own_dataset, tmp_path):
    ds = larder.Dataset(own_dataset)
    denied_keys = ["sample00003", "sample00050"]
    denied_ids = [ds.index_of(k) for k in denied_keys] + [7, 7, 11]
    deny_file = tmp_path / "bad.deny"
    deny_file.write_text("# bad samples\n" + "\n".join(denied_keys) + "\n7\n7 # twice\n11\n")
    expected_denied = set(denied_ids)

    by_file = larder.Plan(ds, seed=2, global_batch=8, deny=deny_file)
    by_list = larder.Plan(ds, seed=2, global_batch=8, deny=denied_keys + [7, 7, "11"])
    cli = cli_ids(own_dataset, "--seed", "2", "--batch", "8", "--deny", deny_file)
    assert plan_ids(by_file) == plan_ids(by_list) == cli
    assert by_file.info.num_denied == len(expected_denied)
    assert by_file.num_samples == TREE_SAMPLES - len(expected_denied)
    assert not expected_denied & set(cli)

    # the customary INDEX.deny is used by default, like the CLI does
    plain = plan_ids(larder.Plan(ds, seed=2, global_batch=8))
    shutil.copy(deny_file, own_dataset + ".deny")
    default = larder.Plan(ds, seed=2, global_batch=8)
    assert default.deny_path == own_dataset + ".deny"
    assert plan_ids(default) == cli == cli_ids(own_dataset, "--seed", "2", "--batch", "8")
    assert plan_ids(larder.Plan(ds, seed=2, global_batch=8, deny=False)) == plain

    with pytest.raises(KeyError):
        larder.Plan(ds, deny=["no-such-key"])
    with pytest.raises(IndexError):
        larder.Plan(ds, deny=[TREE_SAMPLES])
    (tmp_path / "broken.deny").write_text("sample00001\n\nno-such-key\n")
    with pytest.raises(larder.LarderError) as e:
        larder.Plan(ds, deny=tmp_path / "broken.deny")
    assert e.value.code == larder.ENOTFOUND
    assert "broken.deny" in str(e.value) and "line 3" in str(e.value)
