"""
Robot logs in and out: rosbag2 files of LowState, LowCmd and odometry as arrays.

Round trips through both storage formats; the column codec against rosbags' own
(de)serializer, so that neither side checks only itself; a bag laid out as
Humble's ``ros2 bag record`` writes one; every bad input named by file and topic;
and, over DDS, bag_recorder_node's file against the bytes DDS delivered and
against rclpy's serialization of the messages sent.
"""

import dataclasses
import os
import random
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from rosbags.rosbag2 import Reader, StoragePlugin, Writer

from bcg_ros import testing
from bcg_ros.real2sim import logs
from bcg_ros.robot import crc, lowlevel

J = logs.NUM_JOINTS
START_NS = 1_700_000_000_123_456_789
DOMAIN_ID = random.randint(1, 232)
"""A DDS domain of this module's own, so parallel runs do not record each other."""


def _f32(rng, *shape):
    """Random values that float32 holds exactly, so that round trips compare equal."""
    return rng.normal(size=shape).astype(np.float32).astype(np.float64)


def sample_log(n=40, m=8, seed=0) -> logs.RobotLog:
    """A log of n LowStates and LowCmds (interleaved at 500 Hz) and m odometry messages."""
    rng = np.random.default_rng(seed)
    ns = np.arange(n) * 2_000_000  # times as ns / 1e9, as a reader computes them
    state = logs.StateLog(
        t=ns / 1e9, tick=1000 + 2 * np.arange(n), mode_pr=np.zeros(n, np.uint8),
        mode_machine=np.full(n, 5, np.uint8), q=_f32(rng, n, J), dq=_f32(rng, n, J),
        tau_est=_f32(rng, n, J), quat=_f32(rng, n, 4), gyro=_f32(rng, n, 3),
        acc=_f32(rng, n, 3))
    mode = np.ones((n, J), np.uint8)
    mode[0] = 0
    cmd = logs.CommandLog(
        t=(ns + 1_000_000) / 1e9, mode_pr=np.zeros(n, np.uint8),
        mode_machine=np.full(n, 5, np.uint8), mode=mode, q=_f32(rng, n, J), dq=_f32(rng, n, J),
        kp=np.abs(_f32(rng, n, J)), kd=np.abs(_f32(rng, n, J)), tau=_f32(rng, n, J),
        crc_ok=np.ones(n, bool))
    odom = logs.OdometryLog(
        t=np.arange(m) * 10_000_000 / 1e9, stamp_ns=np.arange(m) * 10_000_000 + 5,
        pos=_f32(rng, m, 3), quat=_f32(rng, m, 4), lin_vel=_f32(rng, m, 3),
        ang_vel=_f32(rng, m, 3))
    return logs.RobotLog(state, cmd, odom, start_ns=START_NS)


def assert_streams_equal(a, b):
    """Every field of two stream dataclasses equal (arrays elementwise, dtype aside)."""
    assert type(a) is type(b)
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, str):
            assert x == y, name
        else:
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)


def assert_logs_equal(a: logs.RobotLog, b: logs.RobotLog):
    """Both logs hold the same streams with the same values and the same start."""
    assert a.start_ns == b.start_ns
    for name in ('lowstate', 'lowcmd', 'odom'):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert_streams_equal(x, y)


# --- round trips -----------------------------------------------------------

@pytest.mark.parametrize('storage', logs.STORAGES)
def test_written_log_reads_back_the_same(tmp_path, storage):
    log = sample_log()
    path = logs.write_log(log, tmp_path / 'bag', storage)
    back = logs.read_log(path)
    assert_logs_equal(log, back)
    assert back.source == str(path) and back.joint_names[0] == 'left_hip_pitch_joint'
    meta = yaml.safe_load((path / 'metadata.yaml').read_text())['rosbag2_bagfile_information']
    assert meta['storage_identifier'] == storage
    assert meta['message_count'] == 40 + 40 + 8


@pytest.mark.parametrize('storage, suffix', [('mcap', '.mcap'), ('sqlite3', '.db3')])
def test_a_storage_file_alone_and_an_unclosed_bag_read(tmp_path, storage, suffix):
    """The .db3/.mcap file itself, and its directory without metadata.yaml (killed recorder)."""
    log = sample_log()
    path = logs.write_log(log, tmp_path / 'bag', storage)
    assert_logs_equal(log, logs.read_log(path / f'bag{suffix}'))
    (path / 'metadata.yaml').unlink()
    assert_logs_equal(log, logs.read_log(path))


def test_streams_can_be_left_out(tmp_path):
    log = sample_log()
    path = logs.write_log(logs.RobotLog(log.lowstate, start_ns=7), tmp_path / 'bag')
    back = logs.read_log(path, logs.LogTopics(lowcmd=''))
    assert back.lowcmd is None and back.odom is None and back.start_ns == 7
    assert_streams_equal(log.lowstate, back.lowstate)


def test_custom_topics_and_time_order(tmp_path):
    """Streams on other topics; t counts from the first message of any stream."""
    log = sample_log()
    topics = logs.LogTopics(lowstate='/robot/lowstate', lowcmd='/robot/lowcmd', odom='/odom')
    path = logs.write_log(log, tmp_path / 'bag', 'sqlite3', topics)
    back = logs.read_log(path, topics)
    assert_logs_equal(log, back)
    raw = logs.read_raw(path, {'/robot/lowstate': logs.LOWSTATE_TYPE})['/robot/lowstate']
    assert np.all(np.diff(raw.stamps) > 0) and raw.stamps[0] == START_NS


# --- the column codec against rosbags' deserializer --------------------------

def test_encoded_messages_are_what_rosbags_and_the_robot_read(tmp_path):
    """Our CDR columns, read field by field by rosbags; crcs as the robot checks them."""
    log = sample_log(n=5)
    store = logs.typestore()
    for i, data in enumerate(logs.encode_lowstate(log.lowstate)):
        msg = store.deserialize_cdr(data, logs.LOWSTATE_TYPE)
        s = log.lowstate
        assert msg.tick == s.tick[i] and msg.mode_machine == 5
        np.testing.assert_array_equal([m.q for m in msg.motor_state[:J]], s.q[i])
        np.testing.assert_array_equal([m.tau_est for m in msg.motor_state[:J]], s.tau_est[i])
        np.testing.assert_array_equal(msg.imu_state.quaternion, s.quat[i])
        np.testing.assert_array_equal(msg.imu_state.accelerometer, s.acc[i])
        assert msg.crc == crc.lowstate_crc(msg)
        assert bytes(store.serialize_cdr(msg, logs.LOWSTATE_TYPE)) == data
    for i, data in enumerate(logs.encode_lowcmd(log.lowcmd)):
        msg = store.deserialize_cdr(data, logs.LOWCMD_TYPE)
        c = log.lowcmd
        np.testing.assert_array_equal([m.kp for m in msg.motor_cmd[:J]], c.kp[i])
        np.testing.assert_array_equal([m.mode for m in msg.motor_cmd], np.r_[c.mode[i], [0] * 6])
        assert msg.crc == crc.lowcmd_crc(msg)
        assert lowlevel.read_lowcmd_cdr(data)[1]
        assert bytes(store.serialize_cdr(msg, logs.LOWCMD_TYPE)) == data


def _rosbags_lowstate(store, s: logs.StateLog, i: int):
    """Row i of ``s`` as a rosbags LowState object, built without our codec."""
    T = store.types
    motors = [T['unitree_hg/msg/MotorState'](
        mode=1, q=s.q[i, k] if k < J else 0.0, dq=s.dq[i, k] if k < J else 0.0, ddq=0.0,
        tau_est=s.tau_est[i, k] if k < J else 0.0, temperature=np.zeros(2, np.int16),
        vol=0.0, sensor=np.zeros(2, np.uint32), motorstate=0,
        reserve=np.zeros(4, np.uint32)) for k in range(lowlevel.NUM_SLOTS)]
    imu = T['unitree_hg/msg/IMUState'](
        quaternion=s.quat[i].astype(np.float32), gyroscope=s.gyro[i].astype(np.float32),
        accelerometer=s.acc[i].astype(np.float32), rpy=np.zeros(3, np.float32), temperature=0)
    return T[logs.LOWSTATE_TYPE](
        version=np.zeros(2, np.uint32), mode_pr=int(s.mode_pr[i]),
        mode_machine=int(s.mode_machine[i]), tick=int(s.tick[i]), imu_state=imu,
        motor_state=motors, wireless_remote=np.zeros(40, np.uint8),
        reserve=np.zeros(4, np.uint32), crc=0)


def _rosbags_lowcmd(store, c: logs.CommandLog, i: int, good_crc: bool = True):
    """Row i of ``c`` as a serialized rosbags LowCmd, crc stamped (or spoiled)."""
    T = store.types

    def slot(name, k):
        return float(getattr(c, name)[i, k]) if k < J else 0.0
    motors = [T['unitree_hg/msg/MotorCmd'](
        mode=int(c.mode[i, k]) if k < J else 0, q=slot('q', k), dq=slot('dq', k),
        tau=slot('tau', k), kp=slot('kp', k), kd=slot('kd', k), reserve=k)
        for k in range(lowlevel.NUM_SLOTS)]
    msg = T[logs.LOWCMD_TYPE](mode_pr=0, mode_machine=5, motor_cmd=motors,
                              reserve=np.array([1, 2, 3, 4], np.uint32), crc=0)
    msg.crc = crc.lowcmd_crc(msg) ^ (0 if good_crc else 1)
    return bytes(store.serialize_cdr(msg, logs.LOWCMD_TYPE))


# --- a bag as Humble's ros2 bag record writes it -------------------------------

_HUMBLE_QOS = ('- history: 3\n  depth: 0\n  reliability: 1\n  durability: 2\n'
               '  deadline:\n    sec: 2147483647\n    nsec: 4294967295\n'
               '  lifespan:\n    sec: 2147483647\n    nsec: 4294967295\n  liveliness: 1\n'
               '  liveliness_lease_duration:\n    sec: 2147483647\n    nsec: 4294967295\n'
               '  avoid_ros_namespace_conventions: false')


def humble_sqlite_bag(path, messages):
    """
    A bag as rosbag2 on Humble records it: metadata.yaml version 5, sqlite3 schema 3.

    No message definitions or type hashes in the file (Humble stores none);
    ``messages`` is a list of (topic, type, receive time [ns], CDR bytes).
    """
    path.mkdir()
    db = path / f'{path.name}_0.db3'
    con = sqlite3.connect(db)
    con.executescript(
        'CREATE TABLE schema(schema_version INTEGER PRIMARY KEY, ros_distro TEXT NOT NULL);'
        "INSERT INTO schema VALUES (3, 'humble');"
        'CREATE TABLE topics(id INTEGER PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL,'
        ' serialization_format TEXT NOT NULL, offered_qos_profiles TEXT NOT NULL);'
        'CREATE TABLE messages(id INTEGER PRIMARY KEY, topic_id INTEGER NOT NULL,'
        ' timestamp INTEGER NOT NULL, data BLOB NOT NULL);'
        'CREATE INDEX timestamp_idx ON messages (timestamp ASC);')
    topics = {}
    for topic, msgtype, _, _ in messages:
        topics.setdefault(topic, (len(topics) + 1, msgtype))
    con.executemany('INSERT INTO topics VALUES (?, ?, ?, ?, ?)',
                    [(i, t, ty, 'cdr', _HUMBLE_QOS) for t, (i, ty) in topics.items()])
    con.executemany('INSERT INTO messages (topic_id, timestamp, data) VALUES (?, ?, ?)',
                    [(topics[t][0], stamp, data) for t, _, stamp, data in messages])
    con.commit()
    con.close()
    stamps = [m[2] for m in messages]
    span = {'starting_time': {'nanoseconds_since_epoch': min(stamps)},
            'duration': {'nanoseconds': max(stamps) - min(stamps)},
            'message_count': len(messages)}
    info = {'version': 5, 'storage_identifier': 'sqlite3', **span,
            'topics_with_message_count': [
                {'topic_metadata': {'name': t, 'type': ty, 'serialization_format': 'cdr',
                                    'offered_qos_profiles': _HUMBLE_QOS},
                 'message_count': sum(1 for m in messages if m[0] == t)}
                for t, (_, ty) in topics.items()],
            'compression_format': '', 'compression_mode': '',
            'relative_file_paths': [db.name], 'files': [{'path': db.name, **span}]}
    (path / 'metadata.yaml').write_text(yaml.safe_dump({'rosbag2_bagfile_information': info}))
    return path


def test_a_humble_sqlite_bag_reads(tmp_path):
    """Messages serialized by rosbags (not our codec) in Humble's layout, a crc spoiled."""
    log = sample_log(n=6)
    store = logs.typestore()
    s, c = log.lowstate, log.lowcmd
    messages = [('/rosout', 'rcl_interfaces/msg/Log', START_NS - 5, b'\x00\x01\x00\x00')]
    for i in range(6):
        stamp = START_NS + int(round(s.t[i] * 1e9))
        messages.append(('/lowstate', logs.LOWSTATE_TYPE, stamp, bytes(
            store.serialize_cdr(_rosbags_lowstate(store, s, i), logs.LOWSTATE_TYPE))))
        messages.append(('/lowcmd', logs.LOWCMD_TYPE, stamp + 1_000_000,
                         _rosbags_lowcmd(store, c, i, good_crc=i != 3)))
    back = logs.read_log(humble_sqlite_bag(tmp_path / 'humble', messages))
    assert back.odom is None and back.start_ns == START_NS
    assert_streams_equal(s, back.lowstate)
    for name in ('mode', 'q', 'dq', 'kp', 'kd', 'tau', 't'):
        np.testing.assert_array_equal(getattr(back.lowcmd, name), getattr(c, name),
                                      err_msg=name)
    np.testing.assert_array_equal(back.lowcmd.crc_ok, [True, True, True, False, True, True])


# --- bad input, named by file and topic ---------------------------------------

def _write_raw(path, storage, messages, msgdef=None, rihs01=None):
    """A bag of (topic, type, stamp, bytes) written by rosbags directly, maybe empty."""
    with Writer(path, version=Writer.VERSION_LATEST,
                storage_plugin=StoragePlugin[storage.upper()]) as w:
        conns = {}
        for topic, msgtype, stamp, data in messages:
            if topic not in conns:
                conns[topic] = w.add_connection(topic, msgtype, typestore=logs.typestore(),
                                                msgdef=msgdef, rihs01=rihs01)
            if data is not None:
                w.write(conns[topic], stamp, data)
    return path


def _string(text):
    store = logs.typestore()
    msg = store.types['std_msgs/msg/String'](data=text)
    return bytes(store.serialize_cdr(msg, 'std_msgs/msg/String'))


def _bad_bags(tmp_path):
    """name -> (path, words the error must contain)."""
    good = logs.write_log(sample_log(), tmp_path / 'good', 'sqlite3')
    state = logs.encode_lowstate(sample_log(n=2).lowstate)
    cases = {'absent': (tmp_path / 'nothing_here', ['nothing_here'])}
    cases['no_lowcmd'] = (logs.write_log(logs.RobotLog(sample_log().lowstate),
                                         tmp_path / 'no_lowcmd'), ['no topic /lowcmd'])
    cases['wrong_type'] = (_write_raw(tmp_path / 'wrong_type', 'mcap', [
        ('/lowstate', logs.LOWSTATE_TYPE, 1, state[0]),
        ('/lowcmd', 'std_msgs/msg/String', 2, _string('hello'))]),
        ['/lowcmd', 'std_msgs/msg/String', logs.LOWCMD_TYPE])
    cases['empty'] = (_write_raw(tmp_path / 'empty', 'sqlite3', [
        ('/lowstate', logs.LOWSTATE_TYPE, 0, None)]), ['no messages'])
    cases['silent_topic'] = (_write_raw(tmp_path / 'silent_topic', 'mcap', [
        ('/lowstate', logs.LOWSTATE_TYPE, 1, state[0]),
        ('/lowcmd', logs.LOWCMD_TYPE, 0, None)]), ['/lowcmd', 'has no messages'])
    cases['short_message'] = (_write_raw(tmp_path / 'short_message', 'sqlite3', [
        ('/lowstate', logs.LOWSTATE_TYPE, 1, state[0]),
        ('/lowstate', logs.LOWSTATE_TYPE, 2, state[1][:-8]),
        ('/lowcmd', logs.LOWCMD_TYPE, 3, logs.encode_lowcmd(sample_log(n=1).lowcmd)[0])]),
        ['/lowstate', 'message 1', '2084 bytes'])
    cases['other_definition'] = (_write_raw(tmp_path / 'other_definition', 'mcap', [
        ('/lowstate', logs.LOWSTATE_TYPE, 1, state[0])], msgdef='uint32 tick\n',
        rihs01='RIHS01_' + '0' * 64), ['/lowstate', 'another definition'])
    for storage, suffix in (('sqlite3', 'db3'), ('mcap', 'mcap')):
        bad = logs.write_log(sample_log(), tmp_path / f'truncated_{storage}', storage)
        f = bad / f'truncated_{storage}.{suffix}'
        f.write_bytes(f.read_bytes()[:f.stat().st_size // 2])
        cases[f'truncated_{storage}'] = (bad, ['cannot read it as a rosbag2'])
    not_a_bag = tmp_path / 'notes.txt'
    not_a_bag.write_text('hello')
    cases['not_a_bag'] = (not_a_bag, ['not a rosbag2'])
    assert logs.read_log(good).lowcmd is not None
    return cases


BAD = ('absent', 'no_lowcmd', 'wrong_type', 'empty', 'silent_topic', 'short_message',
       'other_definition', 'truncated_sqlite3', 'truncated_mcap', 'not_a_bag')


@pytest.fixture(scope='module')
def bad_bags(tmp_path_factory):
    return _bad_bags(tmp_path_factory.mktemp('bad'))


@pytest.mark.parametrize('case', BAD)
def test_bad_input_names_file_and_topic(bad_bags, case):
    path, words = bad_bags[case]
    with pytest.raises(logs.LogError) as info:
        logs.read_log(path)
    message = str(info.value)
    assert str(path) in message, message
    for word in words:
        assert word in message, message


def test_required_odometry_and_bad_arrays_are_named(tmp_path):
    path = logs.write_log(logs.RobotLog(sample_log().lowstate, sample_log().lowcmd),
                          tmp_path / 'bag')
    with pytest.raises(logs.LogError, match='no topic /g1_sim_node/odom'):
        logs.read_log(path, require_odom=True)
    s = sample_log().lowstate
    with pytest.raises(logs.LogError, match=r'StateLog.q: shape \(40, 12\)'):
        dataclasses.replace(s, q=s.q[:, :12])
    with pytest.raises(logs.LogError, match='exists already'):
        logs.BagWriter(path)
    with pytest.raises(logs.LogError, match='/x: type my_msgs/msg/Nope is unknown'):
        with logs.BagWriter(tmp_path / 'other') as bag:
            bag.add_topic('/x', 'my_msgs/msg/Nope')


# --- bag_recorder_node over DDS -------------------------------------------------

@pytest.fixture(scope='module')
def ros():
    """rclpy and the built unitree_hg messages, or skip."""
    rclpy = pytest.importorskip('rclpy', reason='rclpy is not installed')
    try:
        from unitree_hg.msg import LowCmd, LowState
        LowState()
    except Exception as exc:  # ImportError, or type support that fails to load
        pytest.skip(f'unitree_hg is not importable ({exc!r}); build it with '
                    'scripts/build_interfaces.sh')
    from nav_msgs.msg import Odometry
    return rclpy, LowState, LowCmd, Odometry


def _sent_messages(ros, n):
    """n LowStates (crc as the robot stamps it), n LowCmds (one crc spoiled), n Odometry."""
    _, LowState, LowCmd, Odometry = ros
    log = sample_log(n=n, m=n, seed=3)
    s, c, o = log.lowstate, log.lowcmd, log.odom
    states, cmds, odoms = [], [], []
    for i in range(n):
        msg = LowState()
        msg.tick, msg.mode_machine = int(s.tick[i]), 5
        for k in range(J):
            m = msg.motor_state[k]
            m.mode, m.q, m.dq, m.tau_est = 1, s.q[i, k], s.dq[i, k], s.tau_est[i, k]
        msg.imu_state.quaternion = s.quat[i].tolist()
        msg.imu_state.gyroscope = s.gyro[i].tolist()
        msg.imu_state.accelerometer = s.acc[i].tolist()
        msg.crc = crc.lowstate_crc(msg)
        states.append(msg)
        cmd = lowlevel.pd_command(c.q[i], c.kp[i], c.kd[i], 5, dq=c.dq[i], tau=c.tau[i])
        cmd_msg = lowlevel.fill_lowcmd(LowCmd(), cmd)
        if i == 1:
            cmd_msg.crc ^= 1
        cmds.append(cmd_msg)
        odom = Odometry()
        odom.header.stamp.sec, odom.header.stamp.nanosec = divmod(int(o.stamp_ns[i]), 10**9)
        odom.header.frame_id, odom.child_frame_id = 'world', 'pelvis'
        p, q = odom.pose.pose.position, odom.pose.pose.orientation
        p.x, p.y, p.z = o.pos[i].tolist()
        q.w, q.x, q.y, q.z = o.quat[i].tolist()
        odom.twist.twist.linear.x, odom.twist.twist.linear.y, odom.twist.twist.linear.z = \
            o.lin_vel[i].tolist()
        odom.twist.twist.angular.x, odom.twist.twist.angular.y, \
            odom.twist.twist.angular.z = o.ang_vel[i].tolist()
        odoms.append(odom)
    return log, {'/lowstate': states, '/lowcmd': cmds, '/g1_sim_node/odom': odoms}


def _canonical(data: bytes, msgtype: str) -> bytes:
    """CDR bytes with the padding zeroed (DDS leaves padding bytes as its buffer had them)."""
    store = logs.typestore()
    return bytes(store.serialize_cdr(store.deserialize_cdr(data, msgtype), msgtype))


def _spin_until(executors, done, timeout, what):
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f'{what} within {timeout} s (domain {DOMAIN_ID})'
        for executor in executors:
            executor.spin_once(timeout_sec=0.02)


@pytest.fixture
def contexts(ros):
    """Two rclpy contexts (two DDS participants) on this module's domain."""
    rclpy = ros[0]
    made = []
    for _ in range(2):
        context = rclpy.Context()
        rclpy.init(context=context, domain_id=DOMAIN_ID)
        made.append(context)
    yield made
    for context in made:
        rclpy.try_shutdown(context=context)


TYPES = {'/lowstate': logs.LOWSTATE_TYPE, '/lowcmd': logs.LOWCMD_TYPE,
         '/g1_sim_node/odom': logs.ODOMETRY_TYPE}


@pytest.mark.ros
@pytest.mark.parametrize('storage', logs.STORAGES)
def test_recorder_bag_holds_what_dds_delivered(ros, contexts, tmp_path, storage):
    """
    The recorder's bag: the values sent, the bytes DDS delivered, rclpy's bytes.

    A second raw subscriber, beside the recorder, sees the same DDS samples: the
    bag must hold exactly those bytes. rclpy's serialize_message of the sent
    message differs from them only in padding (neither side clears it).
    """
    rclpy, LowState, LowCmd, Odometry = ros
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from rclpy.serialization import serialize_message
    from bcg_ros.nodes.bag_recorder_node import BagRecorderNode

    n = 6
    log, sent = _sent_messages(ros, n)
    pub_ctx, rec_ctx = contexts
    pub_node = rclpy.create_node('logs_test_publisher', context=pub_ctx)
    classes = {'/lowstate': LowState, '/lowcmd': LowCmd, '/g1_sim_node/odom': Odometry}
    pubs = {t: pub_node.create_publisher(cls, t, 10) for t, cls in classes.items()}
    recorder = BagRecorderNode(context=rec_ctx, parameter_overrides=[
        Parameter('output', value=str(tmp_path / 'bag')), Parameter('storage', value=storage)])
    delivered = {t: [] for t in classes}
    listener = rclpy.create_node('logs_test_listener', context=rec_ctx)
    for t, cls in classes.items():
        listener.create_subscription(cls, t, delivered[t].append, 100, raw=True)
    executors = []
    for ctx, nodes in ((pub_ctx, [pub_node]), (rec_ctx, [recorder, listener])):
        executor = SingleThreadedExecutor(context=ctx)
        for node in nodes:
            executor.add_node(node)
        executors.append(executor)
    try:
        _spin_until(executors, lambda: len(recorder.recording) == 3 and all(
            p.get_subscription_count() == 2 for p in pubs.values()), 30.0,
            'the recorder and the listener subscribed')
        for i in range(n):
            for t, pub in pubs.items():
                pub.publish(sent[t][i])
            _spin_until(executors, lambda: min(map(len, delivered.values())) > i, 10.0,
                        f'message {i} delivered')
        _spin_until(executors, lambda: min(recorder.bag.counts.values()) == n, 10.0,
                    'every message recorded')
        type_hashes = {t: str(p.topic_type_hash) for t in classes
                       for p in pub_node.get_publishers_info_by_topic(t)}
    finally:
        recorder.destroy_node()
        listener.destroy_node()
        pub_node.destroy_node()
        for executor in executors:
            executor.shutdown()

    back = logs.read_log(tmp_path / 'bag')
    for name in ('lowstate', 'odom'):  # all but t, the receive times
        got = getattr(back, name)
        assert_streams_equal(getattr(log, name), dataclasses.replace(got, t=getattr(log, name).t))
    for name in ('q', 'dq', 'kp', 'kd', 'tau', 'mode'):
        np.testing.assert_array_equal(getattr(back.lowcmd, name), getattr(log.lowcmd, name)
                                      if name != 'mode' else np.ones((n, J)), err_msg=name)
    np.testing.assert_array_equal(back.lowcmd.crc_ok, [i != 1 for i in range(n)])
    assert np.all(np.diff(back.lowstate.t) >= 0) and back.lowstate.t[0] >= 0

    raw = logs.read_raw(tmp_path / 'bag', TYPES)
    for topic, msgtype in TYPES.items():
        assert raw[topic].data == [bytes(d) for d in delivered[topic]], topic
        for data, msg in zip(raw[topic].data, sent[topic]):
            assert len(data) == len(serialize_message(msg))
            assert _canonical(data, msgtype) == _canonical(serialize_message(msg), msgtype)
    with Reader(tmp_path / 'bag') as reader:
        assert {c.topic: c.digest for c in reader.connections} == type_hashes


@pytest.mark.ros
def test_recorder_closes_the_bag_on_ctrl_c(ros, contexts, tmp_path):
    """bag_recorder_node as a process: SIGINT leaves a closed bag with every message."""
    rclpy, LowState, LowCmd, _ = ros
    from rclpy.duration import Duration
    from rclpy.executors import SingleThreadedExecutor

    n = 20
    _, sent = _sent_messages(ros, n)
    bag = tmp_path / 'bag'
    env = dict(os.environ, ROS_DOMAIN_ID=str(DOMAIN_ID), PYTHONUNBUFFERED='1')
    proc = subprocess.Popen(
        [sys.executable, '-m', 'bcg_ros.nodes.bag_recorder_node', '--ros-args',
         '-p', f'output:={bag}', '-p', 'storage:=sqlite3',
         '-p', 'topics:=[/lowstate, /lowcmd]'],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    node = rclpy.create_node('logs_test_sigint_publisher', context=contexts[0])
    executor = SingleThreadedExecutor(context=contexts[0])
    executor.add_node(node)
    pubs = {'/lowstate': node.create_publisher(LowState, '/lowstate', 10),
            '/lowcmd': node.create_publisher(LowCmd, '/lowcmd', 10)}
    try:
        _spin_until([executor], lambda: proc.poll() is not None or all(
            p.get_subscription_count() for p in pubs.values()), 60.0, 'the recorder subscribed')
        assert proc.poll() is None, proc.stdout.read()
        for i in range(n):
            for t, pub in pubs.items():
                pub.publish(sent[t][i])
            executor.spin_once(timeout_sec=0.01)
        for pub in pubs.values():  # reliable: the recorder's reader has every message
            assert pub.wait_for_all_acked(Duration(seconds=10.0))
        time.sleep(1.0)  # and its executor takes them (a spin period is 0.1 s)
    finally:
        out = testing.stop_process(proc, timeout=20.0)
        node.destroy_node()
        executor.shutdown()
    assert proc.returncode == 0, out
    assert 'closed' in out and f'/lowstate: {n}' in out, out
    back = logs.read_log(bag)
    assert len(back.lowstate.t) == n and len(back.lowcmd.t) == n
    assert (bag / 'metadata.yaml').is_file()
