"""Backend parameter parsing: GPUStack's ``utils/command.py`` semantics."""

from __future__ import annotations

import pytest

from scheduler_core.params import (
    BackendParameters,
    Flag,
    ParameterError,
    flatten_to_argv,
    is_parameter_key,
    parse_flags,
)

#: (backend_parameters, the argv GPUStack's flatten_to_argv makes of it, find_int_parameter(tp-size)).
#: Each expected argv was checked against gpustack/utils/command.py at 47277d79.
TOKENISER_TABLE = [
    # one token per element, --k=v, and a whole "--k v" written as one element
    (["--tp-size", "4"], ["--tp-size", "4"], 4),
    (["--tp-size=4"], ["--tp-size=4"], 4),
    (["--tp-size 4"], ["--tp-size", "4"], 4),
    (["  --tp-size  4 "], ["--tp-size", "4"], 4),
    (["--tp-size 2 --pp-size 2"], ["--tp-size", "2", "--pp-size", "2"], 2),
    # quotes are the shell's: stripped, and they keep spaces inside one value
    (['--tp-size="2"'], ["--tp-size=2"], 2),
    (
        ["--served-model-name 'my model' --tp-size 2"],
        ["--served-model-name", "my model", "--tp-size", "2"],
        2,
    ),
    # a JSON value after = is kept whole, quotes and spaces included
    (
        ['--json-model-override-args={"rope_scaling": {"type": "yarn", "factor": 4}} --tp-size 2'],
        ['--json-model-override-args={"rope_scaling": {"type": "yarn", "factor": 4}}', "--tp-size", "2"],
        2,
    ),
    (
        ['--lora-modules=[{"name": "a b", "path": "/x y"}]'],
        ['--lora-modules=[{"name": "a b", "path": "/x y"}]'],
        None,
    ),
    # backslash-newline continuations of a pasted command, and a stray trailing backslash
    (["--tp-size 2 \\\n  --pp-size 2"], ["--tp-size", "2", "--pp-size", "2"], 2),
    (["--tp-size 2 \\\r\n--dp-size 2"], ["--tp-size", "2", "--dp-size", "2"], 2),
    (["--tp-size 2 \\"], ["--tp-size", "2"], 2),
    # negative numbers are values; "-", "--", paths and JSON blobs are single tokens
    (
        ["--x", "-1", "--y -0.5", "--z", "-.5", "--w", "-inf"],
        ["--x", "-1", "--y", "-0.5", "--z", "-.5", "--w", "-inf"],
        None,
    ),
    (
        ["-.5", "--", "-", "/path/with space", '{"a": 1}'],
        ["-.5", "--", "-", "/path/with space", '{"a": 1}'],
        None,
    ),
    # a bare occurrence followed by a valued one: the valued one is read
    (["--tp-size", "--tp-size=2"], ["--tp-size", "--tp-size=2"], 2),
    # empty elements vanish; an element whose first word is not a key is never re-split
    (["", "   ", "--tp-size", "2"], ["--tp-size", "2"], 2),
    (["positional --tp-size 4"], ["positional --tp-size 4"], None),
    # a non-integer is unset, not an error
    (["--tp-size two"], ["--tp-size", "two"], None),
]


@pytest.mark.parametrize(("parameters", "argv", "tp"), TOKENISER_TABLE)
def test_tokeniser_table(parameters, argv, tp):
    """Rule: flatten_to_argv / find_int_parameter, every written form (gpustack/utils/command.py)."""
    assert flatten_to_argv(parameters) == argv
    params = BackendParameters(parameters)
    assert list(params.argv) == argv
    assert params.find_int(["tp-size", "tensor-parallel-size"]) == tp


@pytest.mark.parametrize(
    ("token", "is_key"),
    [("--tp-size", True), ("-x", True), ("-1", False), ("-0.5", False), ("-.5", False), ("-inf", False),
     ("-", False), ("--", False), ("tp", False), ("-1e3", False), ("--1", True)],
)
def test_is_parameter_key(token, is_key):
    """Rule: is_parameter_key: '-', '--' and anything float() accepts are values."""
    assert is_parameter_key(token) is is_key


@pytest.mark.parametrize("parameters", [['--tp-size "2'], ["--served-model-name 'a"]])
def test_unbalanced_quotes_fail_with_shlex_message(parameters):
    """Bad input: shlex's own error, naming the field (GPUStack raises it from the selector's constructor)."""
    with pytest.raises(ParameterError, match=r"^No closing quotation$") as info:
        BackendParameters(parameters)
    assert info.value.field == "model.backend_parameters"


def test_values_after_equals_split_at_the_first_equals_only():
    """Rule: --k=v splits at the first '=' (a value may contain '=')."""
    assert parse_flags(["--a=b=c"]) == (Flag("a", "b=c"),)


def test_three_token_forms_and_positional_arguments():
    """Rule: --k=v, --k v and bare --k; stray positionals are ignored."""
    flags = parse_flags(
        ["model-path", "--tp-size=2", "--mem-fraction-static", "0.8", "--trust-remote-code", "--x", "-1"]
    )
    assert flags == (
        Flag("tp-size", "2"),
        Flag("mem-fraction-static", "0.8"),
        Flag("trust-remote-code", None),
        Flag("x", "-1"),
    )


def test_aliases_and_first_occurrence_wins():
    """Rule: any alias matches; the first matching flag is the one read."""
    params = BackendParameters(["--tensor-parallel-size", "4", "--tp-size", "8"])
    assert params.find_int(["tp-size", "tensor-parallel-size"]) == 4


def test_bare_flag_has_no_value_but_is_true_as_bool():
    """Rule: find_parameter returns None for a bare flag; find_bool_parameter reads it as True."""
    params = BackendParameters(["--enable-dp-attention", "--language-only", "false"])
    assert params.find(["enable-dp-attention"]) is None
    assert params.find_bool(["enable-dp-attention"]) is True
    assert params.find_bool(["language-only"]) is False
    assert params.find_bool(["absent"]) is False


@pytest.mark.parametrize("word", ["0", "false", "no", "off", "f", "n", "FALSE", "Off"])
def test_bool_false_words(word):
    """Rule: 0/false/no/off/f/n (any case) read as False, anything else as True."""
    assert BackendParameters(["--flag", word]).find_bool(["flag"]) is False
    assert BackendParameters(["--flag", "maybe"]).find_bool(["flag"]) is True


def test_mixed_chunk_uses_strtobool_so_bare_flag_is_false():
    """Rule: --enable-mixed-chunk is read with find_parameter + strtobool: bare → False."""
    assert BackendParameters(["--enable-mixed-chunk"]).find_strtobool(["enable-mixed-chunk"]) is False
    assert BackendParameters(["--enable-mixed-chunk=true"]).find_strtobool(["enable-mixed-chunk"]) is True
    with pytest.raises(ParameterError, match="invalid truth value 'perhaps'"):
        BackendParameters(["--enable-mixed-chunk", "perhaps"]).find_strtobool(["enable-mixed-chunk"])


def test_non_integer_is_unset_and_bad_float_has_pythons_message():
    """Rule: find_int_parameter treats a non-integer value as unset; a float flag that does not
    parse fails with float()'s own message, naming the field."""
    assert BackendParameters(["--tp-size", "two"]).find_int(["tp-size", "tensor-parallel-size"]) is None
    assert BackendParameters(["--tp-size", "2.0"]).find_int(["tp-size"]) is None
    with pytest.raises(ParameterError, match="could not convert string to float: 'high'") as info:
        BackendParameters(["--mem-fraction-static=high"]).find_float(["mem-fraction-static"])
    assert info.value.field == "model.backend_parameters"
