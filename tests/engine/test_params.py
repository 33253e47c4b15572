"""Backend parameter parsing: GPUStack's ``utils/command.py`` semantics."""

from __future__ import annotations

import pytest

from scheduler_core.params import BackendParameters, Flag, ParameterError, parse_flags


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


def test_bad_numbers_name_the_flag():
    """Bad input: a non-integer tp size is an error naming the flag."""
    with pytest.raises(ParameterError, match=r"--tp-size: 'two' is not an integer") as info:
        BackendParameters(["--tp-size", "two"]).find_int(["tp-size", "tensor-parallel-size"])
    assert info.value.field == "model.backend_parameters"
    with pytest.raises(ParameterError, match="is not a number"):
        BackendParameters(["--mem-fraction-static=high"]).find_float(["mem-fraction-static"])
