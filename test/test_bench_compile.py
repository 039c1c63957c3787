"""bcg-bench compile: a cold compile of the training step, in its own process."""

import re

from bcg_ros.bench import cli


def test_quick_bench_prints_the_compile_time_last(capsys):
    assert cli.main(['compile', '--quick']) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    m = re.fullmatch(r'train_step_compile_s: (\d+\.\d+)', last)
    assert m, last
    assert float(m.group(1)) > 0


def test_bcg_cost_bench_marks_a_run_where_bcg_never_triggers(capsys):
    # The toy env has no contact: BCG cannot trigger, and the bench must say so.
    from bcg_ros.bench import cli
    assert cli.main(['bcg-cost', '--quick', '--preset', 'toy']) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith('bcg_cost_ratio: ')
    assert float(out[-1].split()[-1]) > 0
    assert any('bundle rate 0.000' in line for line in out)
    assert any('BCG never triggered' in line for line in out)
