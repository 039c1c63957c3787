"""
Unitree's published G1 velocity policy, exactly as unitree_rl_lab ships it, walks from the stick.

g1_sim_node and policy_node run over DDS as in test_sim2sim_dds; policy_node loads
``exported/policy.onnx`` with the IsaacLab ``../params/deploy.yaml`` beside it and takes
its command from the remote's left stick, which this test writes into g1_sim_node's
wireless_remote. The files are Unitree's, not bcg_ros's: point ``UNITREE_RL_LAB`` at a
checkout of github.com/unitreerobotics/unitree_rl_lab to run it.
"""

import json
import os
import pathlib
import random
import time

import numpy as np
import pytest

from bcg_ros import testing

rclpy = pytest.importorskip('rclpy')
pytest.importorskip('unitree_hg.msg',
                    reason='unitree_hg is not built; run scripts/build_interfaces.sh')

from dds_harness import Observer, REPO, spawn  # noqa: E402

POLICY_DIRS = ('deploy/robots/g1/config/policy/velocity/v0',
               'deploy/robots/g1_29dof/config/policy/velocity/v0')
"""Where unitree_rl_lab keeps its G1 (29 DoF) velocity policy, in the layouts it has used."""
STICK_LY = 0.6
"""Left stick forward: past the 0.1 dead band, 0.56 of the +1.0 m/s range."""
WALK_S = 5.0
SETTLE_S = 3.0
DOMAIN_ID = random.randint(1, 29)


def _policy() -> pathlib.Path:
    root = os.environ.get('UNITREE_RL_LAB')
    if not root:
        pytest.skip('UNITREE_RL_LAB is not set (a checkout of unitreerobotics/unitree_rl_lab)')
    for d in POLICY_DIRS:
        path = pathlib.Path(root) / d / 'exported' / 'policy.onnx'
        if path.is_file():
            return path
    pytest.skip(f'no G1 velocity policy under {root} ({", ".join(POLICY_DIRS)})')


def test_unitree_velocity_policy_runs_in_bcg_eval(tmp_path):
    from bcg_ros.eval import cli
    out = tmp_path / 'report'
    rc = cli.main([str(_policy()), '--command', '0.8', '0.0', '0.0', '--runs', '2',
                   '--duration', '5.0', '--out', str(out), '--quiet', '--no-plots'])
    assert rc == 0
    result = json.loads((out / 'result.json').read_text())
    assert result['contract_source'].endswith('params/deploy.yaml')
    s = result['summary']
    print(f"bcg-eval, Unitree velocity policy at 0.8 m/s: falls {s['falls']}/2, "
          f"velocity error {s['lin_vel_error']:.3f} m/s")
    assert s['falls'] == 0
    assert s['lin_vel_error'] < 0.2


@pytest.fixture(scope='module')
def world():
    policy_path = _policy()
    rclpy.init(domain_id=DOMAIN_ID)
    sim = spawn('bcg_ros.nodes.g1_sim_node', DOMAIN_ID, '--params-file',
                str(REPO / 'config' / 'g1_sim_node.yaml'), '-p', 'elastic_band:=true')
    policy = spawn('bcg_ros.nodes.policy_node', DOMAIN_ID, '--params-file',
                   str(REPO / 'config' / 'policy_node.yaml'),
                   '-p', f'policy_path:={policy_path}', '-p', 'stand_duration:=1.0',
                   '-p', 'stale_timeout:=0.1')
    obs = Observer()
    obs.watch_mode('policy_node')
    w = dict(obs=obs, logs={})
    yield w
    obs.close()
    w['logs']['policy'] = testing.stop_process(policy)
    w['logs']['sim'] = testing.stop_process(sim)
    rclpy.shutdown()
    for name, log in w['logs'].items():
        print(f'--- {name} ---\n{log[-3000:]}')


def _pose_at(obs: Observer, t: float) -> np.ndarray:
    """The pelvis (x, y, z) in the last ground-truth message at or before ``t``."""
    with obs.lock:
        return np.array([p[1:] for p in obs.positions if p[0] <= t][-1])


@pytest.mark.ros
def test_unitree_velocity_policy_walks_from_the_stick_and_stops(world):
    obs = world['obs']
    obs.activate_and_stand()
    time.sleep(1.5)
    assert obs.set_bool('/g1_sim_node/elastic_band', False)
    time.sleep(0.5)
    response = obs.trigger('/policy_node/start')
    assert response.success, response.message
    obs.sticks()
    time.sleep(1.0)
    t0 = time.monotonic()
    obs.sticks(ly=STICK_LY)
    time.sleep(WALK_S)
    t1 = time.monotonic()
    obs.sticks()
    time.sleep(SETTLE_S)
    t2 = time.monotonic()
    time.sleep(1.0)
    t3 = time.monotonic()
    assert obs.mode('policy_node') == 'policy', obs.modes['policy_node']
    with obs.lock:
        heights = np.array([p[3] for p in obs.positions if p[0] >= t0])
    p0, p1, p2, p3 = (_pose_at(obs, t) for t in (t0, t1, t2, t3))
    forward, drift = p1[0] - p0[0], abs(p1[1] - p0[1])
    still = np.linalg.norm((p3 - p2)[:2]) / (t3 - t2)
    print(f'Unitree velocity policy: {forward:.2f} m forward, {drift:.2f} m sideways in '
          f'{WALK_S:.0f} s of stick; {still:.3f} m/s {SETTLE_S:.0f} s after release; '
          f'pelvis {heights.min():.3f}..{heights.max():.3f} m')
    assert heights.min() > 0.5, 'the robot fell'
    assert forward >= 1.0
    assert drift <= 0.3
    assert still < 0.1, 'released, it does not come to a stand'
