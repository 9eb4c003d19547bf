"""Every in-scope ONNX node conformance case passes, or is refused for a listed reason."""

from __future__ import annotations

import pytest

from conformance import all_cases, assert_case_matches, in_scope, is_quantized_case, refusals
from lowbit.errors import LowbitError

ALL = sorted(all_cases())
# In scope: cases whose ops are all registered, and every quantized-operator case.
CASES = [n for n in ALL if in_scope(all_cases()[n]) or is_quantized_case(n)]


@pytest.mark.parametrize("name", CASES)
def test_conformance_case(name: str) -> None:
    case = all_cases()[name]
    assert in_scope(case), f"{name}: quantized-operator cases must all be supported"
    reason = refusals().get(name)
    if reason is not None:
        with pytest.raises(LowbitError):
            assert_case_matches(case)
        return
    assert_case_matches(case)


def test_refusal_list_names_real_cases() -> None:
    unknown = sorted(set(refusals()) - set(ALL))
    assert not unknown, f"refusal entries name no conformance case: {unknown}"


def test_all_45_quantized_cases_exist() -> None:
    assert sum(is_quantized_case(n) for n in ALL) == 45
