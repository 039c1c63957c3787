"""bcg-bench compile: a cold compile of the training step, in its own process."""

import re

from bcg_ros.bench import cli


def test_quick_bench_prints_the_compile_time_last(capsys):
    assert cli.main(['compile', '--quick']) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    m = re.fullmatch(r'train_step_compile_s: (\d+\.\d+)', last)
    assert m, last
    assert float(m.group(1)) > 0
