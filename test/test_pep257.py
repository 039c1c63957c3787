"""pep257 docstring conventions with the ament settings."""

import pytest

ament_pep257 = pytest.importorskip('ament_pep257.main', reason='ament_pep257 not installed')


@pytest.mark.linter
def test_pep257():
    # D401-D403 and D301 (imperative mood, capitalised first word, signature, raw
    # strings) are not enforced yet; the rest of the ament settings are.
    rc = ament_pep257.main(argv=['.', 'test', '--add-ignore', 'D301,D401,D402,D403'])
    assert rc == 0, 'Found code style errors / warnings'
