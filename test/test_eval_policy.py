"""Loading policies: project metadata, IsaacLab deploy.yaml, and the contract checks."""

import json

import numpy as np
import pytest

from bcg_ros import contract as ct
from bcg_ros.eval import synthetic
from bcg_ros.robot import g1
from bcg_ros.runtime.policy import contract_from_deploy, load_policy


def test_project_metadata_round_trip(tmp_path):
    c = ct.imitation_contract('stand', 101)
    path = synthetic.save_policy(tmp_path / 'p.onnx', c,
                                 extra_metadata={ct.TRAIN_PENETRATION_KEY: '3.25'})
    p = load_policy(path)
    assert p.contract == c
    assert p.source == 'metadata'
    assert p.train_penetration_mm == pytest.approx(3.25)
    np.testing.assert_array_equal(p.motor_ids, np.arange(g1.NUM_JOINTS))
    assert p.act(np.zeros(c.obs_size)).shape == (g1.NUM_JOINTS,)


def test_the_projects_policies_target_within_the_joint_ranges_in_training_too():
    # The trainer maps actions through this contract (with jax.numpy), so the targets
    # it simulates are the ones policy_node's executor lets through.
    import jax.numpy as jnp
    lo, hi = np.asarray(g1.JOINT_LOWER), np.asarray(g1.JOINT_UPPER)
    for residual in (False, True):
        c = ct.imitation_contract('stand', 101, residual=residual)
        ref = ct.RefObs(joint_pos=np.tile(np.asarray(g1.DEFAULT_POSE), (ct.REF_FUTURE, 1)),
                        root_quat=np.tile([1.0, 0, 0, 0], (ct.REF_FUTURE, 1)),
                        root_height=np.full(ct.REF_FUTURE, 0.79),
                        root_lin_vel=np.zeros((ct.REF_FUTURE, 3)))
        a = np.linspace(-40.0, 40.0, g1.NUM_JOINTS)
        q = np.asarray(c.action_to_targets(jnp.asarray(a), jnp, ref))
        assert np.all(q >= lo - 1e-6) and np.all(q <= hi + 1e-6)
        assert np.any(q <= lo + 1e-6) and np.any(q >= hi - 1e-6)   # both ends reached
        np.testing.assert_allclose(q, np.clip(np.asarray(g1.DEFAULT_POSE) + 0.25 * a, lo, hi),
                                   atol=1e-5)


def test_deploy_yaml_translates_joint_order_and_motor_order_gains(tmp_path):
    order = synthetic.isaaclab_joint_order()
    assert sorted(order) == sorted(g1.JOINT_NAMES) and order != g1.JOINT_NAMES
    c = synthetic.velocity_contract(order, history=3)
    d = synthetic.deploy_yaml(c)
    # unitree_rl_lab writes gains in motor order: slot 3 is the left knee (300 N m/rad).
    assert d['stiffness'][3] == g1.DEFAULT_KP[3] == 300.0
    back, ranges = contract_from_deploy(d)
    assert back.joint_names == order
    for name, kp, q0 in zip(back.joint_names, back.kp, back.default_pose):
        assert kp == g1.DEFAULT_KP[g1.joint_index(name)]
        assert q0 == g1.DEFAULT_POSE[g1.joint_index(name)]
    assert back.obs_size == c.obs_size == 3 * (3 + 3 + 3 + 3 * 29)
    assert ranges['lin_vel_x'] == (-0.5, 1.0)
    assert all(t.clip_first for t in back.obs_terms)


def test_isaaclab_history_is_per_term_oldest_first():
    """History in IsaacLab is per term, oldest frame first, terms in their listed order."""
    d = {'joint_ids_map': list(range(29)), 'step_dt': 0.02,
         'stiffness': list(g1.DEFAULT_KP), 'damping': list(g1.DEFAULT_KD),
         'default_joint_pos': [0.0] * 29,
         'actions': {'JointPositionAction': {'scale': 0.25, 'offset': 0.0, 'clip': None}},
         'observations': {'base_ang_vel': {'scale': [0.5, 0.5, 0.5], 'clip': None,
                                           'history_length': 3},
                          'velocity_commands': {'scale': 1.0, 'clip': [-1.0, 1.0],
                                                'history_length': 2}}}
    c, _ = contract_from_deploy(d)
    z = np.zeros(29)
    frames = []
    for k in range(3):
        obs = ct.RobotObs(quat=np.array([1.0, 0, 0, 0]),
                          gyro=np.array([k, 10 + k, 20 + k], float),
                          joint_pos=z, joint_vel=z, last_action=z,
                          command=np.array([0.5 * k, 3.0, -3.0]))
        frames.append(ct.observation_frame(c, obs, None))
    h = ct.init_history(c, frames[0])
    h = ct.push_history(h, frames[1])
    h = ct.push_history(h, frames[2])
    x = ct.flatten(h)
    # base_ang_vel, 3 frames, oldest (k = 0) first, each x 0.5:
    expect_gyro = 0.5 * np.array([0, 10, 20, 1, 11, 21, 2, 12, 22], float)
    # velocity_commands, 2 frames (k = 1, 2), clipped to [-1, 1] before the scale of 1:
    expect_cmd = np.array([0.5, 1.0, -1.0, 1.0, 1.0, -1.0])
    np.testing.assert_allclose(x, np.concatenate([expect_gyro, expect_cmd]))


def test_clip_before_scale_as_isaaclab():
    # Raw 4.0, clip [-1, 1] then scale 0.5 -> 0.5; the other order would give clip(2.0) = 1.0.
    d = {'joint_ids_map': list(range(29)), 'step_dt': 0.02, 'stiffness': [1.0] * 29,
         'damping': [1.0] * 29, 'default_joint_pos': [0.0] * 29,
         'actions': {'JointPositionAction': {'scale': 1.0}},
         'observations': {'base_ang_vel': {'scale': 0.5, 'clip': [-1.0, 1.0]}}}
    c, _ = contract_from_deploy(d)
    z = np.zeros(29)
    obs = ct.RobotObs(quat=np.array([1.0, 0, 0, 0]), gyro=np.array([4.0, 0.0, -4.0]),
                      joint_pos=z, joint_vel=z, last_action=z)
    np.testing.assert_allclose(ct.observation_frame(c, obs, None)[0], [0.5, 0.0, -0.5])


def test_deploy_action_scale_offset_and_target_clip():
    d = {'joint_ids_map': list(range(29)), 'step_dt': 0.02, 'stiffness': [1.0] * 29,
         'damping': [1.0] * 29, 'default_joint_pos': [0.1] * 29,
         'actions': {'JointPositionAction': {'scale': 0.5, 'offset': [0.2] * 29,
                                             'clip': [[-0.3, 0.3]] * 29}},
         'observations': {'projected_gravity': {}}}
    c, _ = contract_from_deploy(d)
    # 0.2 + 0.5 * a: a = 0.0 -> 0.2; a = 1.0 -> 0.7, clipped to 0.3; a = -2 -> -0.8 -> -0.3.
    a = np.zeros(29)
    a[1], a[2] = 1.0, -2.0
    q = c.action_to_targets(a)
    assert q[0] == pytest.approx(0.2) and q[1] == pytest.approx(0.3)
    assert q[2] == pytest.approx(-0.3)


def test_deploy_yaml_found_beside_the_policy(tmp_path):
    c = synthetic.velocity_contract(synthetic.isaaclab_joint_order())
    onnx_path = synthetic.save_policy(tmp_path / 'exported' / 'policy.onnx', None,
                                      obs_size=c.obs_size)
    yml = synthetic.write_deploy_yaml(tmp_path / 'params' / 'deploy.yaml', c)
    p = load_policy(onnx_path)
    assert p.source == str(yml)
    assert p.contract.joint_names == c.joint_names
    np.testing.assert_array_equal(p.motor_ids, [g1.joint_index(n) for n in c.joint_names])
    assert p.is_velocity_policy


def test_input_size_mismatch_names_field_and_both_values(tmp_path):
    c = ct.imitation_contract()
    path = synthetic.save_policy(tmp_path / 'p.onnx', c, obs_size=c.obs_size + 7)
    with pytest.raises(ct.ContractError, match=rf'obs_size.*{c.obs_size + 7}.*{c.obs_size}'):
        load_policy(path)


def test_joint_count_mismatch(tmp_path):
    c = synthetic.velocity_contract(g1.JOINT_NAMES[:12])
    synthetic.write_deploy_yaml(tmp_path / 'deploy.yaml', c)
    # An ONNX with 29 outputs for a 12-joint deploy file.
    path = synthetic.save_policy(tmp_path / 'p.onnx', None, obs_size=c.obs_size)
    with pytest.raises(ct.ContractError, match=r'joint_names.*29.*12'):
        load_policy(path)


def test_control_period_mismatch_between_metadata_and_deploy_yaml(tmp_path):
    c = synthetic.velocity_contract()
    path = synthetic.save_policy(tmp_path / 'p.onnx', None, obs_size=c.obs_size,
                                 extra_metadata={'control_dt': '0.01'})
    yml = synthetic.write_deploy_yaml(tmp_path / 'deploy.yaml', c)
    with pytest.raises(ct.ContractError, match=r'control_dt.*0\.01.*0\.02'):
        load_policy(path, yml)


def test_unknown_joint_and_unknown_term():
    c = synthetic.velocity_contract()
    d = synthetic.deploy_yaml(c)
    d['joint_ids_map'][0] = 40
    with pytest.raises(ct.ContractError, match=r'joint_ids_map\[0\] = 40'):
        contract_from_deploy(d)
    d = synthetic.deploy_yaml(c)
    d['observations']['gait_phase'] = {'history_length': 1}
    with pytest.raises(ct.ContractError, match='observations.gait_phase'):
        contract_from_deploy(d)


def test_policy_without_any_contract(tmp_path):
    path = synthetic.save_policy(tmp_path / 'p.onnx', None, obs_size=10)
    with pytest.raises(ct.ContractError, match='no deploy.yaml'):
        load_policy(path)


def test_non_finite_gains_are_refused_at_load(tmp_path):
    # A NaN stiffness in deploy.yaml, or a NaN kp in the ONNX contract, would run as
    # a policy whose motors do nothing and whose metrics are NaN: refused, naming the field.
    c = synthetic.velocity_contract()
    d = synthetic.deploy_yaml(c)
    d['stiffness'][4] = float('nan')
    with pytest.raises(ct.ContractError, match=r"'stiffness'\[4\] is nan"):
        contract_from_deploy(d, 'deploy.yaml')
    d = synthetic.deploy_yaml(c)
    d['damping'][0] = float('inf')
    with pytest.raises(ct.ContractError, match=r"deploy\.yaml: field 'damping'\[0\] is inf"):
        contract_from_deploy(d, 'deploy.yaml')
    d = synthetic.deploy_yaml(c)
    d['stiffness'][2] = -5.0
    with pytest.raises(ct.ContractError, match=r"deploy\.yaml: .*'kp'.*negative"):
        contract_from_deploy(d, 'deploy.yaml')
    meta = ct.imitation_contract().to_metadata()
    raw = json.loads(meta[ct.METADATA_KEY])
    raw['kp'][3] = float('nan')
    with pytest.raises(ct.ContractError, match=r"src: contract field 'kp': value 3 "
                                               r"\(left_knee_joint\) is nan"):
        ct.Contract.from_dict(raw, 'src')
    path = synthetic.save_policy(tmp_path / 'p.onnx', None, obs_size=c.obs_size)
    d = synthetic.deploy_yaml(c)
    d['stiffness'][1] = float('nan')
    import yaml
    (tmp_path / 'deploy.yaml').write_text(yaml.safe_dump(d))
    with pytest.raises(ct.ContractError, match=r"deploy\.yaml: field 'stiffness'\[1\] is nan"):
        load_policy(path)


def test_deploy_yaml_with_the_exporters_python_tags_loads(tmp_path):
    # IsaacLab's exporter dumps with yaml.dump: slices and tuples carry Python tags.
    import yaml
    c = synthetic.velocity_contract()
    d = synthetic.deploy_yaml(c)
    d['actions']['JointPositionAction']['joint_ids'] = slice(None, None, None)
    d['observations']['base_ang_vel']['scale'] = tuple(d['observations']['base_ang_vel']
                                                       .get('scale') or (0.2, 0.2, 0.2))
    text = yaml.dump(d, sort_keys=False)
    assert '!!python/object/apply:builtins.slice' in text and '!!python/tuple' in text
    (tmp_path / 'deploy.yaml').write_text(text)
    path = synthetic.save_policy(tmp_path / 'p.onnx', None, obs_size=c.obs_size)
    p = load_policy(path)
    assert p.contract.obs_size == c.obs_size and p.source.endswith('deploy.yaml')
    from bcg_ros.runtime.policy import read_yaml
    assert read_yaml(tmp_path / 'deploy.yaml')['actions']['JointPositionAction'][
        'joint_ids'] == slice(None, None, None)


@pytest.mark.parametrize('tag', ['!!python/object/apply:os.system ["touch {mark}"]',
                                 '!!python/name:os.system', '!!python/object/new:dict []',
                                 '!custom 1'])
def test_a_yaml_tag_that_could_run_code_is_refused_naming_file_line_and_tag(tmp_path, tag):
    from bcg_ros.runtime.policy import read_yaml
    mark = tmp_path / 'ran'
    path = tmp_path / 'deploy.yaml'
    path.write_text('step_dt: 0.02\nactions:\n  x: ' + tag.format(mark=mark) + '\n')
    with pytest.raises(ct.ContractError, match=rf"{path}: line 3: tag '.*' is not read"):
        read_yaml(path)
    assert not mark.exists()


def test_a_beyondmimic_export_is_refused_saying_exactly_what_is_missing(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    n_obs = 160
    graph = helper.make_graph(
        [helper.make_node('Gemm', ['obs', 'w', 'b'], ['actions'])], 'beyondmimic',
        [helper.make_tensor_value_info('obs', TensorProto.FLOAT, [1, n_obs]),
         helper.make_tensor_value_info('time_step', TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info('actions', TensorProto.FLOAT, [1, g1.NUM_JOINTS])],
        [numpy_helper.from_array(np.zeros((n_obs, g1.NUM_JOINTS), np.float32), 'w'),
         numpy_helper.from_array(np.zeros(g1.NUM_JOINTS, np.float32), 'b')])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
    model.ir_version = 8
    for k, v in {'anchor_body_name': 'torso_link', 'joint_names': ','.join(g1.JOINT_NAMES),
                 'observation_names': 'command,motion_anchor_ori_b,base_ang_vel,joint_pos,'
                                      'joint_vel,actions'}.items():
        model.metadata_props.add(key=k, value=v)
    path = tmp_path / 'policy.onnx'
    onnx.save(model, str(path))
    with pytest.raises(ct.ContractError) as err:
        load_policy(path)
    msg = str(err.value)
    assert str(path) in msg and "input(s) ['time_step']" in msg
    assert 'base_ang_vel (as base_ang_vel), joint_pos (as joint_pos_rel)' in msg
    assert "term 'command': not built" in msg and "term 'motion_anchor_ori_b': not built" in msg
    assert "'joint_vel': not built" not in msg
