"""The CI switch of the test suite (tests.helpers.in_ci): one parse of the CI variable, used by
every test that needs a real component: missing, it fails in CI and skips elsewhere."""

from __future__ import annotations

import pytest

from tests.helpers import fail_or_skip, in_ci, require_program


@pytest.mark.parametrize(("value", "expected"), [
    (None, False), ("", False), ("0", False), ("false", False), ("False", False),
    ("no", False), (" NO ", False), ("true", True), ("1", True), ("yes", True),
    ("gitlab", True),
])
def test_ci_is_on_unless_unset_empty_or_false(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: bool
) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert in_ci() is expected


def test_a_missing_requirement_fails_in_ci_and_skips_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        require_program("make", "a test")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="make is not installed"):
        require_program("make", "a test")
    with pytest.raises(pytest.skip.Exception, match="why"):
        fail_or_skip("why")
