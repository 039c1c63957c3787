"""Tiny inline MJCF models and their simulators, shared by the simulator and BCG tests."""

import mujoco

from bcg_ros.core import sim as simulator

HOPPER_XML = """
<mujoco model="hopper_box">
  <compiler angle="radian"/>
  <option timestep="0.005"/>
  <worldbody>
    <body name="base" pos="0 0 0.2">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="z" type="slide" axis="0 0 1"/>
      <geom type="box" size="0.1 0.05 0.05" mass="10"/>
      <body name="foot" pos="0 0 -0.1">
        <joint name="leg" type="slide" axis="0 0 1" range="-0.05 0.05" armature="0.05"
               damping="0.1"/>
        <geom type="sphere" size="0.02" mass="0.3"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""
"""A box on x/z slides with a sprung prismatic leg: a foot sphere under it, two corner spheres."""

HOPPER_SPHERES = (('foot', (0.0, 0.0, 0.0)), ('base', (0.1, 0.0, -0.05)),
                  ('base', (-0.1, 0.0, -0.05)))

TUMBLER_XML = """
<mujoco model="tumbler">
  <compiler angle="radian"/>
  <option timestep="0.005"/>
  <worldbody>
    <body name="torso" pos="0 0 1">
      <freejoint/>
      <geom type="box" size="0.1 0.07 0.05" mass="3"/>
      <body name="arm" pos="0.1 0 0">
        <joint name="shoulder" type="hinge" axis="0 1 0" armature="0.01" damping="0.05"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02" mass="0.5"/>
        <body name="hand" pos="0.2 0 0">
          <joint name="elbow" type="hinge" axis="1 0 0" armature="0.01" range="-1 1"/>
          <geom type="capsule" fromto="0 0 0 0 0 -0.15" size="0.02" mass="0.3"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""
"""A free-floating box with a two-joint arm (3D rotations, quaternion state)."""


def hopper(cfg: simulator.SimConfig, kp=300.0, kd=5.0, corners=True):
    """
    (MjModel, Sim) of the hopper box; the action is the leg's position target.

    ``corners=False``: the foot sphere only (the box's corners pass through the ground).
    """
    m = mujoco.MjModel.from_xml_string(HOPPER_XML)
    spheres = HOPPER_SPHERES if corners else HOPPER_SPHERES[:1]
    sim = simulator.build(m, cfg, spheres, 0.02, ['leg'], [kp], [kd], [200.0],
                          key_points=[('foot', (0.0, 0.0, 0.0))])
    return m, sim


def tumbler(cfg: simulator.SimConfig, kd=(0.0, 0.0)):
    """(MjModel, Sim) of the tumbler; actions are the two arm joints' targets."""
    m = mujoco.MjModel.from_xml_string(TUMBLER_XML)
    sim = simulator.build(m, cfg, [('hand', (0.0, 0.0, -0.15))], 0.02, ['shoulder', 'elbow'],
                          [20.0, 10.0], list(kd), [50.0, 50.0])
    return m, sim


def _free_body(name: str, geom: str) -> str:
    """MJCF of one free 1 kg body with a single geom."""
    return f"""
<mujoco model="{name}">
  <worldbody>
    <body name="{name}">
      <freejoint/>
      <geom {geom} mass="1"/>
    </body>
  </worldbody>
</mujoco>
"""


BOX_XML = _free_body('box', 'type="box" size="0.1 0.1 0.05"')
"""A free 1 kg box, 20 x 20 x 10 cm, standing on four corner spheres."""

BOX_CORNERS = tuple(('box', (sx * 0.1, sy * 0.1, -0.05)) for sx in (-1, 1) for sy in (-1, 1))
BOX_CORNER_RADIUS = 0.01

BALL_XML = _free_body('ball', 'type="sphere" size="0.1"')
"""A free 1 kg ball of radius 0.1 m, colliding through one sphere of its own size."""


def box(cfg: simulator.SimConfig, terrain=None):
    """(MjModel, Sim) of the box on its four bottom corners; no actuators (empty actions)."""
    m = mujoco.MjModel.from_xml_string(BOX_XML)
    return m, simulator.build(m, cfg, BOX_CORNERS, BOX_CORNER_RADIUS, [], [], [], [],
                              terrain=terrain)


def ball(cfg: simulator.SimConfig):
    """(MjModel, Sim) of the ball; no actuators (empty actions)."""
    m = mujoco.MjModel.from_xml_string(BALL_XML)
    return m, simulator.build(m, cfg, [('ball', (0.0, 0.0, 0.0))], 0.1, [], [], [], [])
