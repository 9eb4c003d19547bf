"""QuantConfig: YAML round trip, rule matching and precedence, and every refusal."""

from __future__ import annotations

import re
import textwrap

import pytest

import lowbit
from lowbit.errors import ConfigError, LowbitError
from lowbit.ir import Graph, TensorType, dtypes
from lowbit.quant import config as cfg
from lowbit.quant.config import NodeSettings, QuantConfig, Rule


@pytest.fixture
def graph() -> Graph:
    g = Graph("tiny")
    v = g.add_input("x", TensorType(dtypes.FLOAT32, (1, 3, 8, 8)))
    for name, op in [("conv1", "Conv"), ("relu1", "Relu"), ("blocks.3.conv", "Conv"),
                     ("blocks.3.relu", "Relu"), ("blocks.30.conv", "Conv"), ("head", "Softmax")]:
        v = g.make_node(op, [v], name=name).output
    g.outputs = [v]
    return g


def _node(graph: Graph, name: str):
    return graph.node_map()[name]


def _load(text: str, source: str = "q.yaml") -> QuantConfig:
    return QuantConfig.from_yaml_text(textwrap.dedent(text), source)


def test_defaults_come_from_the_named_constants(graph):
    s = QuantConfig().settings_for(_node(graph, "conv1"))
    assert s == NodeSettings()
    assert (s.precision, s.per_channel, s.calibration, s.scheme) == (
        cfg.DEFAULT_PRECISION, cfg.DEFAULT_PER_CHANNEL, cfg.DEFAULT_CALIBRATION,
        cfg.DEFAULT_SCHEME,
    )  # fmt: skip
    assert (s.weight_precision, s.weight_scheme) == ("int8", "symmetric")
    assert s.precision == "int8" and s.scheme == "asymmetric" and s.per_channel
    assert s.matched_rules == () and s.quantized and s.dtype == dtypes.INT8
    assert lowbit.QuantConfig is QuantConfig


def test_docstring_example_loads_and_means_what_it_says(graph):
    doc = cfg.__doc__
    example = doc[doc.index("In YAML::") + len("In YAML::"): doc.index("`QuantConfig.from_yaml")]
    config = _load(example)
    assert config.default == NodeSettings()  # the example's default block is lowbit's defaults
    assert config.settings_for(_node(graph, "conv1")).precision == "float"
    assert config.settings_for(_node(graph, "blocks.3.conv")).precision == "int16"
    assert config.settings_for(_node(graph, "blocks.30.conv")).precision == "int8"
    assert config.settings_for(_node(graph, "head")).calibration == "minmax"
    assert config.check(graph) == []


def test_yaml_round_trip(tmp_path):
    config = QuantConfig(
        NodeSettings(precision="uint8", per_channel=False, calibration="percentile",
                     percentile=99.9, scheme="symmetric_uint8", weight_precision="int16",
                     weight_scheme="power_of_2"),
        [Rule(name="conv1", precision="float"),
         Rule(regex=r"blocks\.\d+\..*", precision="int16", per_channel=True),
         Rule(op_type="Softmax", calibration="entropy", scheme="power_of_2"),
         Rule(op_type="Conv", percentile=99, weight_scheme="asymmetric")],
    )  # fmt: skip
    path = tmp_path / "q.yaml"
    text = config.to_yaml(path)
    assert path.read_text() == text
    again = QuantConfig.from_yaml(path)
    assert again == config and again.source == str(path)
    assert QuantConfig.from_dict(config.to_dict()) == config
    assert again.to_yaml() == text
    assert again.rules[3].percentile == 99.0


def test_empty_file_means_all_defaults(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert QuantConfig.from_yaml(path) == QuantConfig()


def test_matching_by_name_regex_and_op_type(graph):
    by_name = Rule(name="blocks.3.conv", precision="fp16")
    by_regex = Rule(regex=r"blocks\.3\..*", precision="fp16")
    by_op = Rule(op_type="Relu", precision="fp16")
    names = [n.name for n in graph.nodes]
    assert [n for n in names if by_name.matches(_node(graph, n))] == ["blocks.3.conv"]
    assert [n for n in names if by_regex.matches(_node(graph, n))] == [
        "blocks.3.conv", "blocks.3.relu"]
    assert [n for n in names if by_op.matches(_node(graph, n))] == ["relu1", "blocks.3.relu"]
    # The regex must match the whole name: "conv" alone matches no node.
    assert not any(Rule(regex="conv", precision="fp16").matches(n) for n in graph.nodes)


def test_later_rules_override_earlier_ones_field_by_field(graph):
    rules = [
        Rule(op_type="Conv", precision="int16", calibration="entropy"),
        Rule(regex="blocks.*", precision="float", per_channel=False),
        Rule(name="blocks.3.conv", per_channel=True),
    ]
    config = QuantConfig(NodeSettings(scheme="symmetric"), rules)
    s = config.settings_for(_node(graph, "blocks.3.conv"))
    assert (s.precision, s.calibration, s.per_channel, s.scheme) == (
        "float", "entropy", True, "symmetric")
    assert s.matched_rules == (0, 1, 2) and not s.quantized and s.dtype == dtypes.FLOAT32
    s = config.settings_for(_node(graph, "conv1"))
    assert (s.precision, s.calibration, s.per_channel, s.matched_rules) == (
        "int16", "entropy", True, (0,))
    reversed_config = QuantConfig(NodeSettings(), [rules[1], rules[0]])
    assert reversed_config.settings_for(_node(graph, "blocks.3.conv")).precision == "int16"
    assert config.settings_for(_node(graph, "head")) == NodeSettings(scheme="symmetric")


def test_with_default_changes_only_the_default(graph):
    config = QuantConfig(rules=[Rule(name="head", calibration="minmax")])
    changed = config.with_default(calibration="mse", precision="int16")
    assert changed.settings_for(_node(graph, "conv1")).calibration == "mse"
    assert changed.settings_for(_node(graph, "head")).calibration == "minmax"
    assert changed.rules == config.rules
    with pytest.raises(ConfigError, match="unknown calibration 'kl'"):
        config.with_default(calibration="kl")
    with pytest.raises(ConfigError, match="unknown key 'calib'"):
        config.with_default(calib="mse")


def test_check_warns_for_rules_that_match_nothing(graph):
    config = QuantConfig(rules=[
        Rule(name="conv1", precision="float"),
        Rule(regex="conv", precision="int16"),
        Rule(op_type="Gemm", precision="int16"),
    ], source="q.yaml")  # fmt: skip
    warnings = config.check(graph)
    assert len(warnings) == 2
    assert warnings[0].startswith("q.yaml: rules[1]: regex 'conv' matches no node")
    assert "whole node name" in warnings[0]
    assert "rules[2]" in warnings[1] and "Conv, Relu, Softmax" in warnings[1]


@pytest.mark.parametrize(("op_type", "hint"), [("conv", " (did you mean 'Conv'"),
                                               ("Zzyzx", "; op types are spelled")])
def test_a_rule_with_an_unknown_op_type_is_an_error(op_type, hint):
    with pytest.raises(ConfigError, match=re.escape(f"op_type {op_type!r} is not an op lowbit "
                                                    f"knows{hint}")):
        QuantConfig.from_yaml_text(f"rules:\n  - op_type: {op_type}\n    precision: int16\n",
                                   "q.yaml")


def test_check_refuses_a_rule_naming_a_missing_node(graph):
    config = _load("""
        rules:
          - op_type: Conv
            precision: int16
          - name: blocks.3.cnv
            precision: float
    """)
    with pytest.raises(ConfigError) as info:
        config.check(graph)
    message = str(info.value)
    assert message.startswith("q.yaml: rules[1]: graph 'tiny' has no node named 'blocks.3.cnv'")
    assert "did you mean 'blocks.3.conv'" in message
    far = QuantConfig(rules=[Rule(name="zzz", precision="float")])
    with pytest.raises(ConfigError, match="its nodes are 'conv1', 'relu1'"):
        far.check(graph)


@pytest.mark.parametrize(
    "key,value,valid",
    [
        ("precision", "int4", "int8, uint8, int16, fp16, float"),
        ("calibration", "kl", "minmax, percentile, entropy, mse"),
        ("scheme", "affine", "asymmetric, symmetric, symmetric_uint8, power_of_2"),
        ("weight_precision", "uint8", "int8, int16"),
        ("weight_scheme", "symmetric_uint8", "symmetric, asymmetric, power_of_2"),
    ],
)
def test_unknown_choice_lists_valid_ones(key, value, valid):
    with pytest.raises(ConfigError) as info:
        _load(f"rules:\n  - op_type: Conv\n    precision: int16\n"
              f"  - op_type: Relu\n    {key}: {value}\n")
    message = str(info.value)
    assert message.startswith(f"q.yaml: rules[1]: unknown {key} '{value}'")
    assert message.endswith(f"valid: {valid}")
    with pytest.raises(ConfigError, match=f"q.yaml: default: unknown {key}"):
        _load(f"default:\n  {key}: {value}\n")
    with pytest.raises(ConfigError, match=f"unknown {key}"):
        NodeSettings(**{key: value})


def test_close_choice_is_suggested():
    with pytest.raises(ConfigError, match=r"unknown precision 'int9' \(did you mean 'int8'"):
        NodeSettings(precision="int9")


@pytest.mark.parametrize(
    "text,match",
    [
        ("default:\n  precison: int8\n",
         r"q.yaml: default: unknown key 'precison' \(did you mean 'precision'"),
        ("rules:\n  - name: conv1\n    precision: float\n  - name: head\n    calbration: mse\n",
         r"q.yaml: rules\[1\]: unknown key 'calbration'"),
        ("rule:\n  - name: conv1\n", r"q.yaml: unknown key 'rule' \(did you mean 'rules'"),
        ("default:\n  per_channel: 'yes'\n", "per_channel must be true or false"),
        ("default:\n  percentile: 0\n", r"percentile must be a number in \(0, 100\]"),
        ("default:\n  percentile: 100.5\n", "percentile must be a number"),
        ("default:\n  percentile: true\n", "percentile must be a number"),
        ("default: int8\n", "q.yaml: default must be a mapping"),
        ("rules:\n  name: conv1\n", "q.yaml: rules must be a list"),
        ("rules:\n  - conv1\n", r"q.yaml: rules\[0\]: a rule is a mapping"),
        ("- name: conv1\n", "q.yaml: a config is a mapping"),
        ("rules:\n  - name: 12\n    precision: float\n", r"rules\[0\]: name must be a non-emp"),
        ("rules:\n  - regex: '('\n    precision: float\n", r"rules\[0\]: regex '\(' does not"),
        ("rules:\n  - precision: float\n", r"rules\[0\]: a rule needs exactly one of name, "),
        ("rules:\n  - name: a\n    op_type: Conv\n    precision: float\n", "got name, op_type"),
        ("rules:\n  - op_type: Conv\n", r"rules\[0\]: rule op_type 'Conv' sets nothing"),
    ],
)
def test_invalid_config_refused_with_location(text, match):
    with pytest.raises(ConfigError, match=match):
        _load(text)


def test_malformed_yaml_names_file_and_line():
    with pytest.raises(ConfigError, match=r"q.yaml: malformed YAML: line 3, column 12: mapping"):
        _load("default:\n  precision: int8\n  scheme: a: b\n")
    with pytest.raises(ConfigError, match=r"q.yaml: malformed YAML: .*duplicate key 'precision'"):
        _load("default:\n  precision: int8\n  precision: int16\n")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"config file .*nope.yaml not found"):
        QuantConfig.from_yaml(tmp_path / "nope.yaml")


def test_python_construction_is_validated_too():
    with pytest.raises(ConfigError, match="exactly one of"):
        Rule(name="a", regex="b", precision="float")
    with pytest.raises(ConfigError, match="sets nothing"):
        Rule(name="a")
    with pytest.raises(ConfigError, match=r"rules\[0\] is a dict"):
        QuantConfig(rules=[{"name": "a"}])
    with pytest.raises(LowbitError, match="per_channel"):
        Rule(op_type="Conv", per_channel=1)
    assert repr(Rule(name="conv1", precision="float")) == "Rule(name='conv1', precision='float')"


def test_uses_input_moments_only_when_some_node_may_round_by_gptq():
    assert QuantConfig().uses_input_moments()
    nearest = QuantConfig.from_dict({"default": {"weight_rounding": "nearest"}})
    assert not nearest.uses_input_moments()
    assert not QuantConfig.from_dict({"default": {"weight_rounding": "nearest"},
                                      "rules": [{"op_type": "Conv", "precision": "int16"}]}
                                     ).uses_input_moments()
    assert QuantConfig.from_dict({"default": {"weight_rounding": "nearest"},
                                  "rules": [{"op_type": "Conv", "weight_rounding": "gptq"}]}
                                 ).uses_input_moments()
