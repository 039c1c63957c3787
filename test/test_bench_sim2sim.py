"""bcg-bench sim2sim: a policy over DDS through g1_sim_node and policy_node, trial by trial."""

import re

import pytest

from bcg_ros import testing
from bcg_ros.bench import cli

pytestmark = [pytest.mark.ros]


@pytest.fixture(autouse=True)
def _ros():
    pytest.importorskip('rclpy')
    pytest.importorskip('unitree_hg.msg', reason='unitree_hg is not built; run '
                                                 'scripts/build_interfaces.sh')


def test_a_standing_policy_stays_up_and_a_nan_policy_is_an_e_stop(tmp_path, capsys):
    # A zero policy holds the default pose off the gantry; a NaN one is caught by the
    # executor (damping) and counted as a fall, with its reason.
    zero = testing.constant_policy(tmp_path / 'zero.onnx', 0.0)
    nan = testing.constant_policy(tmp_path / 'nan.onnx', float('nan'))
    for policy, falls in ((zero, 0), (nan, 1)):
        assert cli.main(['sim2sim', str(policy), '--trials', '1', '--hold', '1.0',
                         '--real-time-factor', '0.5']) == 0
        out = capsys.readouterr().out.strip().splitlines()
        assert re.fullmatch(rf'sim2sim_falls: {falls}/1', out[-1]), out
        (trial,) = [line for line in out if line.startswith('trial 0')]
        if falls:
            assert 'damping (' in trial and 'policy' in trial, trial
        else:
            assert 'up for 1.0' in trial, trial
            height = float(re.search(r'pelvis down to ([0-9.]+) m', trial).group(1))
            assert height > 0.6, trial
            # A policy step's targets go out within a control period of its state.
            p50, p99 = map(float, re.search(r'action age p50 ([0-9.]+) ms, p99 ([0-9.]+) ms',
                                            trial).groups())
            assert 0.0 < p50 <= p99 and p50 < 20.0, trial
