"""flake8 with the ament settings (99 columns), over the whole package."""

import pytest

ament_flake8 = pytest.importorskip('ament_flake8.main', reason='ament_flake8 not installed')


@pytest.mark.linter
def test_flake8():
    rc, errors = ament_flake8.main_with_errors(argv=[])
    assert rc == 0, f'Found {len(errors)} code style errors / warnings:\n' + '\n'.join(errors)
