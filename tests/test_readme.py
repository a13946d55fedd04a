"""The README's facts against the code: its options table gives each option's place, default
and choices as the plugin declares them; its list of commands is setup.py's console scripts;
every command line of its bash blocks parses with the program's own parser, and every hydra
command of it and of the recipes' page (examples/taco/README.md) names a recipe and known
fields."""

import argparse
import dataclasses
import re
import shlex

import pytest

from conftest import RECIPES, REPO, compose_recipe

README = REPO / "README.md"
#: The page of the pre-training recipes, with their fairseq-hydra-train commands.
RECIPES_PAGE = REPO / "examples" / "taco" / "README.md"
#: ``name = module:function`` entries of setup.py's console_scripts.
DECLARED = dict(re.findall(r'"(taco-[a-z-]+) = ([\w.]+):main"',
                           (REPO / "setup.py").read_text(encoding="utf-8")))


def _marked_block(marker: str) -> str:
    """The lines after the README's ``<!-- marker: ... -->`` comment, up to a blank line."""
    match = re.search(rf"<!-- {marker}:.*?-->\n((?:.+\n)+)", README.read_text(encoding="utf-8"))
    assert match, f"README.md lost its {marker} block"
    return match.group(1)


def _options_table():
    """Rows (option, where, default, meaning) of the options table."""
    rows = []
    for line in _marked_block("options").splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 4, line
        rows.append(cells)
    assert rows
    return rows


def _declared_options():
    """{where: {field name: dataclasses.Field}} of the plugin's task and criterion configs."""
    from taco_fairseq.criterion import MlmConfig, TacoConfig
    from taco_fairseq.task import TacoMaskedLMConfig

    return {where: {f.name: f for f in dataclasses.fields(config)}
            for where, config in (("task", TacoMaskedLMConfig), ("criterion", TacoConfig),
                                  ("criterion `mlm`", MlmConfig))}


def _model_defaults():
    from taco_fairseq.models import TacoRobertaModel

    parser = argparse.ArgumentParser()
    TacoRobertaModel.add_args(parser)
    return vars(parser.parse_args([]))


def _written(default) -> str:
    """A default as the table writes it."""
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, (int, float)):
        return str(float(default)) if isinstance(default, float) else str(default)
    return f"`{default}`"


def _field_name(option: str) -> str:
    return option.strip("`").removeprefix("--").replace("-", "_")


def test_the_options_table_gives_the_declared_places_defaults_and_choices():
    declared, model = _declared_options(), _model_defaults()
    for option, where, default, meaning in _options_table():
        name = _field_name(option)
        if where == "model":
            assert name in model, option
            assert default == _written(bool(model[name])), option
            continue
        fields = declared[where]
        assert name in fields, f"{option} is not a {where} option"
        assert default == _written(fields[name].default), option
        choices = fields[name].type
        if isinstance(choices, type) and hasattr(choices, "__members__"):  # ChoiceEnum
            assert all(f"`{choice.value}`" in default + meaning for choice in choices), option


def test_the_options_table_lists_every_tc_option():
    from taco_fairseq.criterion import DEPRECATED_DETACH_KEYS

    listed = {(where, _field_name(option)) for option, where, _, _ in _options_table()}
    for where in ("task", "criterion"):
        for name in _declared_options()[where]:
            if name == DEPRECATED_DETACH_KEYS:  # named in the row of its replacement
                assert "--" + DEPRECATED_DETACH_KEYS.replace("_", "-") in _marked_block("options")
            elif name.startswith("tc_"):
                assert (where, name) in listed, f"{where} option {name} is not in the table"


def test_the_commands_list_is_setup_py_s_console_scripts():
    listed = re.findall(r"^- `(taco-[a-z-]+)`: \S", _marked_block("commands"), re.M)
    assert sorted(listed) == sorted(DECLARED)


def test_the_commands_list_names_the_extras_each_command_needs():
    """A command that needs an extra declares it (its module's ``EXTRAS``, checked when it runs:
    tests/test_cli.py); the list says which."""
    import importlib

    for line in _marked_block("commands").splitlines():
        command = re.match(r"- `(taco-[a-z-]+)`", line).group(1)
        needs = re.search(r" Needs the extras? (`\w+`(?: and `\w+`)*)\.$", line)
        named = re.findall(r"`(\w+)`", needs.group(1)) if needs else []
        assert named == list(getattr(importlib.import_module(DECLARED[command]), "EXTRAS", ())), (
            command)


def _model_sizes():
    """{arch: (layers, hidden, heads, FFN, parameters, without embeddings)} of the table."""
    rows = {}
    for line in _marked_block("model-sizes").splitlines()[2:]:
        arch, *cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        rows[arch] = (*map(int, cells[:4]), *cells[4:])
    return rows


def test_the_model_sizes_are_the_architectures():
    from fairseq.models.roberta.model import base_architecture
    from taco_fairseq.models import SIZES

    base = argparse.Namespace()
    base_architecture(base)
    sizes = {**SIZES, "roberta_base": (base.encoder_layers, base.encoder_embed_dim,
                                       base.encoder_attention_heads, base.encoder_ffn_embed_dim)}
    assert {arch: row[:4] for arch, row in _model_sizes().items()} == sizes


@pytest.mark.slow
def test_the_model_sizes_give_the_parameters_of_the_built_models(tmp_path):
    """As the table says: a 30,522-piece vocabulary, 512 positions."""
    from fairseq import options, tasks

    # taco-prepare-data's dict.txt of --vocab-size 30522: the pieces but <unk>, <s>, </s>, <pad>
    (tmp_path / "dict.txt").write_text("".join(f"w{i} 1\n" for i in range(30522 - 4)))
    for arch, (*_, parameters, without_embeddings) in _model_sizes().items():
        args = options.parse_args_and_arch(options.get_training_parser(), [
            str(tmp_path), "--user-dir", str(REPO / "taco_fairseq"), "--task", "masked_lm",
            "--criterion", "masked_lm", "--arch", arch, "--tokens-per-sample", "512", "--cpu"])
        model = tasks.setup_task(args).build_model(args)
        total = sum(p.numel() for p in model.parameters())
        encoder = model.encoder.sentence_encoder
        embeddings = (encoder.embed_tokens.weight.numel()
                      + encoder.embed_positions.weight.numel())
        assert (parameters, without_embeddings) == (
            f"{total / 1e6:.1f} M", f"{(total - embeddings) / 1e6:.1f} M"), arch


def test_the_readme_says_what_a_save_directory_loads():
    from taco_fairseq.hub import CHECKPOINT_NAMES

    names = [f"`{name}`" for name in CHECKPOINT_NAMES]
    said = f"loads the first of {', '.join(names[:-1])} and {names[-1]} it holds"
    assert said in " ".join(README.read_text(encoding="utf-8").split())


def _bash_commands(path=README):
    """Every command line of the bash blocks of ``path`` (a markdown file), as words (comments
    dropped)."""
    text = path.read_text(encoding="utf-8")
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words:
                yield words


def test_every_taco_command_of_the_readme_parses():
    import importlib

    checked = 0
    for words in _bash_commands():
        if words[0] not in DECLARED:
            continue
        module = importlib.import_module(DECLARED[words[0]])
        own = words[1:words.index("--")] if "--" in words else words[1:]
        module.build_parser().parse_args(own)  # a wrong option exits with status 2
        checked += 1
    assert checked >= 3


def test_every_fairseq_train_command_of_the_readme_parses(monkeypatch):
    from fairseq import options

    monkeypatch.chdir(REPO)  # where --user-dir taco_fairseq points
    commands = [words for words in _bash_commands() if words[0] == "fairseq-train"]
    assert commands
    for words in commands:
        args = options.parse_args_and_arch(options.get_training_parser(), words[1:])
        assert (args.task, args.criterion) == ("taco_masked_lm", "taco")


@pytest.mark.parametrize("path", [README, RECIPES_PAGE], ids=lambda p: str(p.relative_to(REPO)))
def test_every_documented_hydra_command_names_a_recipe_and_known_fields(path):
    """An override is a field of fairseq's config group (the plugin's task config for ``task``)
    or, for groups a registry fills (``model``, ``lr_scheduler``, …), of the composed recipe;
    ``hydra.run.dir`` is hydra's own."""
    from fairseq.dataclass.configs import FairseqConfig
    from omegaconf import OmegaConf
    from taco_fairseq.task import TacoMaskedLMConfig

    groups = {f.name: f.type for f in dataclasses.fields(FairseqConfig)}
    groups["task"] = TacoMaskedLMConfig
    commands = [words for words in _bash_commands(path) if words[0] == "fairseq-hydra-train"]
    if path == RECIPES_PAGE:
        assert commands, f"{path} lost its fairseq-hydra-train commands"
    for words in commands:
        assert words[words.index("--config-dir") + 1] == str(RECIPES.relative_to(REPO))
        name = words[words.index("--config-name") + 1]
        assert (RECIPES / f"{name}.yaml").is_file()
        recipe = compose_recipe(name)
        for override in (word.split("=", 1)[0] for word in words[1:] if "=" in word):
            group, field = override.split(".", 1)
            if override == "hydra.run.dir":
                continue
            if dataclasses.is_dataclass(groups[group]):
                assert field in {f.name for f in dataclasses.fields(groups[group])}, override
            else:
                assert OmegaConf.select(recipe, override, default=KeyError) is not KeyError, (
                    override)
