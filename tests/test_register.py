"""When the plugin registers with fairseq: ``--user-dir taco_fairseq`` (fairseq imports the
package) and :func:`taco_fairseq.register` do, whatever was imported first; ``import
taco_fairseq`` alone imports no fairseq (the commands' ``--help``). Registering silences exactly
fairseq's known hydra deprecation warnings; a command's configuration error ends in one line."""

import json
import subprocess
import sys
import warnings

import pytest

from conftest import REPO, USER_DIR

#: Prints what the plugin registered, as JSON on the last line.
REGISTERED = """
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.tasks import TASK_REGISTRY
print(json.dumps({
    "task": "taco_masked_lm" in TASK_REGISTRY,
    "criteria": [c for c in ("taco", "mlm", "sentence_prediction_summable")
                 if c in CRITERION_REGISTRY],
    "arch": "roberta_tiny" in ARCH_MODEL_REGISTRY,
}))
"""
EVERYTHING = {"task": True, "criteria": ["taco", "mlm", "sentence_prediction_summable"],
              "arch": True}
#: A fairseq-train command line of the plugin's task, criterion and model.
TRAIN_ARGS = ["data", "--user-dir", USER_DIR, "--task", "taco_masked_lm", "--criterion", "taco",
              "--arch", "roberta_tiny", "--cpu"]
#: Parses TRAIN_ARGS as fairseq-train does (the plugin registers): ``args``.
PARSE_TRAIN_ARGS = f"""
from fairseq import options
args = options.parse_args_and_arch(options.get_training_parser(), {TRAIN_ARGS!r})
"""


def _run(script: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    return result


def _last_json(result):
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_import_alone_loads_no_fairseq_and_register_registers_once():
    result = _run("""
import json, sys
import taco_fairseq
print(json.dumps(["fairseq" in sys.modules, "torch" in sys.modules]))
taco_fairseq.register()
hook, trainer_init = sys.excepthook, __import__("fairseq.trainer").trainer.Trainer.__init__
taco_fairseq.register()  # idempotent: nothing wrapped twice
assert sys.excepthook is hook and hook.__module__ == "taco_fairseq.errors"
assert __import__("fairseq.trainer").trainer.Trainer.__init__ is trainer_init
""" + REGISTERED)
    assert json.loads(result.stdout.splitlines()[0]) == [False, False]
    assert _last_json(result) == EVERYTHING


@pytest.mark.slow
def test_user_dir_registers_the_plugin_imported_before_fairseq():
    # fairseq's import_user_module leaves a package imported before alone: a command (or a
    # test) that imported taco_fairseq first and then parses a fairseq-train command line
    result = _run("""
import json
import taco_fairseq.cli.glue
""" + PARSE_TRAIN_ARGS + """
assert (args.task, args.criterion, args.arch) == ("taco_masked_lm", "taco", "roberta_tiny")
""" + REGISTERED)
    assert _last_json(result) == EVERYTHING


def _training_config():
    """What a fairseq-train start does with its command line: parse it (the plugin registers)
    and compose fairseq's hydra config, which gives the deprecation warnings."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), TRAIN_ARGS)
    return convert_namespace_to_omegaconf(args)


#: A start of each of fairseq's hydra deprecation warnings (FAIRSEQ_HYDRA_WARNINGS).
HYDRA_WARNINGS = ("hydra.experimental.initialize() is no longer experimental",
                  "hydra.experimental.compose() is no longer experimental",
                  "The version_base parameter is not specified",
                  "In 'config': Usage of deprecated keyword in package header",
                  "'config' is validated against ConfigStore schema",
                  "The strict flag in the compose API is deprecated")


def _hydra_warnings(caught):
    """The HYDRA_WARNINGS among ``caught`` (not counting this file's own)."""
    return sorted({start for w in caught for start in HYDRA_WARNINGS
                   if str(w.message).lstrip().startswith(start) and w.filename != __file__})


def test_exactly_fairseq_s_hydra_deprecation_warnings_are_silenced():
    import taco_fairseq

    taco_fairseq.register()  # before: registering in the blocks below would silence them
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # in front of the filters register() added
        _training_config()
    assert _hydra_warnings(caught) == sorted(HYDRA_WARNINGS)  # what fairseq gives
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        taco_fairseq.silence_fairseq_hydra_warnings()
        _training_config()
        warnings.warn("The version_base parameter is not specified by the user", UserWarning)
        warnings.warn("a warning of the plugin's own", UserWarning)
    assert _hydra_warnings(caught) == []
    assert [str(w.message) for w in caught] == [
        "The version_base parameter is not specified by the user",  # not from hydra
        "a warning of the plugin's own"]


@pytest.mark.slow
def test_a_fairseq_train_start_shows_other_warnings_but_not_hydra_s():
    result = _run(PARSE_TRAIN_ARGS + """
import warnings
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
convert_namespace_to_omegaconf(args)
warnings.warn("a warning of the plugin's own")
""")
    assert "UserWarning: a warning of the plugin's own" in result.stderr
    assert not any(start in result.stderr for start in HYDRA_WARNINGS), result.stderr[-3000:]


@pytest.mark.slow
def test_a_command_s_configuration_error_is_one_line():
    result = subprocess.run([sys.executable, "-c", """
from taco_fairseq.logs import configure_logging
configure_logging()  # a command's start
from taco_fairseq.errors import OptionError
raise OptionError("--tc-window 4: must be odd")
"""], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert (result.returncode, result.stderr) == (1, "error: --tc-window 4: must be odd\n")
