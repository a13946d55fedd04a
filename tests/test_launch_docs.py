"""The multi-node commands of examples/taco/README.md (torchrun, SLURM) parse as fairseq options
and, in the environment each launcher sets, fairseq's own launcher logic derives the documented
rendezvous, ranks, GPUs and world size. No GPU or cluster is needed: the environment and
``torch.cuda.device_count`` are faked. The documented ``--user-dir`` loads the plugin from any
directory."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.distributed import utils as distributed_utils

from conftest import REPO, USER_DIR

#: Sequences per update of the paper's recipes.
SEQUENCES_PER_UPDATE = 1280
LAUNCH_VARIABLES = (
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "SLURM_JOB_NODELIST",
    "SLURM_STEP_NODELIST", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE", "SLURM_NTASKS",
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_JOB_ID",
)


def _documented_block(marker: str) -> str:
    text = (REPO / "examples" / "taco" / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"<!-- {marker}:.*?-->\s*```bash\n(.*?)```", text, re.S)
    assert match, f"examples/taco/README.md lost its {marker} block"
    return match.group(1)


def _fairseq_cfg(words, monkeypatch):
    """fairseq's configuration for the words after the program name (parsed in the repo, where
    ``--user-dir taco_fairseq`` points)."""
    monkeypatch.chdir(REPO)
    args = options.parse_args_and_arch(options.get_training_parser(), words)
    return convert_namespace_to_omegaconf(args)


@pytest.fixture
def eight_gpus(monkeypatch):
    """A node with 8 GPUs and no launcher variables; returns the devices fairseq selects."""
    for name in LAUNCH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    selected = []
    monkeypatch.setattr(torch.cuda, "set_device", selected.append)
    return selected


def _sequences_per_update(cfg) -> int:
    world = cfg.distributed_training.distributed_world_size
    return cfg.dataset.batch_size * cfg.optimization.update_freq[0] * world


def _negative_pool(cfg) -> int:
    """Sequences each anchor's negatives are drawn from (examples/taco/README.md, "Sequences
    per update"): one step's batches of all workers with --tc-cross-worker-negatives."""
    assert cfg.task.tc_cross_worker_negatives
    return cfg.dataset.batch_size * cfg.distributed_training.distributed_world_size


def test_torchrun_command(eight_gpus, monkeypatch):
    words = shlex.split(_documented_block("launch-torchrun").replace("\\\n", " "))
    launcher = words[: words.index("-m")]
    assert launcher[0] == "torchrun" and words[words.index("-m") + 1] == "fairseq_cli.train"
    nodes = int(launcher[launcher.index("--nnodes") + 1])
    per_node = int(launcher[launcher.index("--nproc-per-node") + 1])
    cfg = _fairseq_cfg(words[words.index("-m") + 2:], monkeypatch)
    assert _sequences_per_update(cfg) == SEQUENCES_PER_UPDATE
    assert _negative_pool(cfg) == 256  # the official code's one forward: 256-512
    # what torchrun sets for the 4th process of node 1
    rank = 1 * per_node + 3
    for name, value in (("MASTER_ADDR", "node0"), ("MASTER_PORT", "29500"),
                        ("WORLD_SIZE", str(nodes * per_node)), ("RANK", str(rank)),
                        ("LOCAL_RANK", "3")):
        monkeypatch.setenv(name, value)
    dist = cfg.distributed_training
    distributed_utils.infer_init_method(dist)
    assert dist.distributed_init_method == "env://"
    assert (dist.distributed_world_size, dist.distributed_rank, dist.device_id) == (16, rank, 3)
    assert dist.distributed_no_spawn and eight_gpus == [3]


def test_slurm_command(eight_gpus, monkeypatch, tmp_path):
    block = _documented_block("launch-slurm")
    sbatch = dict(re.findall(r"#SBATCH --([\w-]+)=(\S+)", block))
    words = shlex.split(block.split("srun", 1)[1].replace("\\\n", " "))
    assert words[0] == "fairseq-train"
    cfg = _fairseq_cfg(words[1:], monkeypatch)
    dist = cfg.distributed_training
    assert int(sbatch["nodes"]) * int(sbatch["ntasks-per-node"]) == dist.distributed_world_size
    assert int(sbatch["gpus-per-node"]) == int(sbatch["ntasks-per-node"])  # one task per GPU
    assert _sequences_per_update(cfg) == SEQUENCES_PER_UPDATE
    assert _negative_pool(cfg) == 256  # the official code's one forward: 256-512
    scontrol = tmp_path / "scontrol"  # SLURM's `scontrol show hostnames gpu[01-02]`
    scontrol.write_text("#!/bin/sh\nprintf 'gpu01\\ngpu02\\n'\n")
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    # what srun sets for task 13 (node 1, its 6th task)
    for name, value in (("SLURM_JOB_NODELIST", "gpu[01-02]"), ("SLURM_NNODES", sbatch["nodes"]),
                        ("SLURM_NTASKS_PER_NODE", sbatch["ntasks-per-node"]),
                        ("SLURM_PROCID", "13"), ("SLURM_LOCALID", "5"), ("SLURM_NODEID", "1")):
        monkeypatch.setenv(name, value)
    distributed_utils.infer_init_method(dist)
    assert dist.distributed_init_method == f"tcp://gpu01:{dist.distributed_port}"
    assert (dist.distributed_world_size, dist.distributed_rank, dist.device_id) == (16, 13, 5)
    assert dist.distributed_no_spawn and eight_gpus == [5]


@pytest.mark.slow
def test_the_documented_user_dir_loads_the_plugin_from_any_directory(tmp_path):
    """fairseq resolves ``--user-dir`` against the working directory before the plugin loads,
    so a relative one fails outside the repository root and under hydra, which changes the
    working directory (README, "Pre-train"). The docs' hydra commands give it absolute, and
    an absolute one loads the plugin from anywhere."""
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
            *sorted((REPO / "examples" / "taco").glob("*.md"))]
    blocks = [block for path in docs
              for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.S)]
    given = [value for block in blocks for value in re.findall(r"common\.user_dir=(\S+)", block)]
    assert given and set(given) == {"$PWD/taco_fairseq"}
    train = Path(sys.executable).with_name("fairseq-train")
    result = subprocess.run([str(train), "--user-dir", USER_DIR, "--help"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ",mlm,taco,sentence_prediction_summable}" in result.stdout  # the criteria it adds


@pytest.mark.slow
def test_an_installed_package_is_found_by_a_relative_user_dir_from_any_directory(tmp_path):
    """An installed (not editable) package sits beside fairseq in site-packages, where fairseq
    also looks for a relative ``--user-dir`` it cannot find in the working directory, so
    ``--user-dir taco_fairseq`` (and hydra's ``common.user_dir=taco_fairseq``) works from any
    directory (docs/reliability.md, section 5). Simulated with a site-packages holding copies
    of fairseq and the plugin (copies: fairseq's ``fairseq/../taco_fairseq`` would follow a link
    back to the real site-packages), run from another directory."""
    import shutil

    import fairseq
    import fairseq_cli

    site = tmp_path / "site-packages"
    shutil.copytree(REPO / "taco_fairseq", site / "taco_fairseq",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for package in (fairseq, fairseq_cli):  # with their __pycache__: nothing to recompile
        shutil.copytree(Path(package.__file__).parent, site / package.__name__, symlinks=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    program = ("import sys; from fairseq_cli.train import cli_main; "
               "sys.argv = ['fairseq-train', '--user-dir', 'taco_fairseq', '--help']; cli_main()")
    environment = {**os.environ, "PYTHONPATH": str(site)}
    result = subprocess.run([sys.executable, "-c", program], cwd=elsewhere, env=environment,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ",mlm,taco,sentence_prediction_summable}" in result.stdout
    # and the plugin came from the installed copy, not from this checkout
    check = subprocess.run(
        [sys.executable, "-c", "import taco_fairseq; print(taco_fairseq.__file__)"],
        cwd=elsewhere, env=environment, capture_output=True, text=True, timeout=300)
    assert check.stdout.strip() == str(site / "taco_fairseq" / "__init__.py"), check.stderr
