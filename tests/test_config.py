"""The config registry: every registered option composes, builds, and is documented in
configs/README.md; unknown names list the known ones; typed objects reach the builders."""

import pytest
from omegaconf import OmegaConf

from scheda.config import GROUPS, groups_markdown, load_components, typed
from scheda.errors import ConfigError

from conftest import REPO, compose_cfg

load_components()
OPTIONS = [(group, name) for group, schemas in GROUPS.items() for name in schemas]


def test_configs_readme_is_current():
    assert (REPO / "configs" / "README.md").read_text().strip() == groups_markdown().strip(), \
        "regenerate it: python -m scheda.config > configs/README.md"


@pytest.mark.parametrize("group, name", OPTIONS, ids=[f"{g}={n}" for g, n in OPTIONS])
def test_every_registered_option_composes_to_its_checked_schema(group, name):
    cfg = compose_cfg([f"{group}={name}"])
    spec = typed(group, cfg[group])
    assert isinstance(spec, GROUPS[group][name])
    # what a run's saved config.yaml holds (a plain mapping) gives the same object
    assert typed(group, OmegaConf.to_container(cfg[group], resolve=True)) == spec


@pytest.mark.parametrize("group", sorted(g for g, schemas in GROUPS.items() if "default" not in schemas))
def test_an_unknown_name_lists_the_known_ones(group):
    with pytest.raises(ConfigError) as exc:
        typed(group, {"name": "nonesuch"})
    assert str(exc.value) == f"{group}.name='nonesuch' is unknown: use one of {', '.join(GROUPS[group])}"


def test_a_wrong_type_in_a_saved_config_is_one_line():
    with pytest.raises(ConfigError, match="schedule") as exc:
        typed("schedule", {"name": "constant", "nu": "high", "epochs": 3})
    assert "\n" not in str(exc.value)
