"""pep257 docstring conventions with the ament settings."""

import pytest

ament_pep257 = pytest.importorskip('ament_pep257.main', reason='ament_pep257 not installed')


@pytest.mark.linter
def test_pep257():
    rc = ament_pep257.main(argv=['.', 'test'])
    assert rc == 0, 'Found code style errors / warnings'
