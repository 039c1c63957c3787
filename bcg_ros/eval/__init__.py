"""
MuJoCo sim2sim evaluation of G1 policies: the paper's falls, delta-d and E_track.

Pure Python and MuJoCo; no ROS import. ``policy`` loads a policy and its
contract, ``rollout`` runs it in MuJoCo, ``metrics`` scores the runs,
``report`` writes JSON, Markdown and plots, ``cli`` is ``bcg-eval``.
"""
