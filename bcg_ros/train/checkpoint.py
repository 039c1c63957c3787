"""
Training checkpoints: the whole learner state as arrays, written atomically.

A checkpoint is one ``.npz`` file: every leaf of the learner state (networks,
optimisers, normalisers, discriminator and replay buffer, the environments'
state) as ``leaf_00000 ...`` in tree order, and ``meta``, a JSON string with
the iteration, the random key, the configuration and the history so far.
The tree structure is not stored: it comes from a freshly initialised state
of the same configuration, so loading needs no pickle and a mismatch (another
configuration, another version) fails naming the file and the leaf.

Writes go to a temporary file in the same folder, are flushed to disk and
then renamed over the old checkpoint (``os.replace``), so a run killed at any
moment leaves either the previous checkpoint or the new one, never half of one.
:func:`atomic_write` does this for every file a run rewrites (history.jsonl at
the start, curves.png, summary.json, policy.onnx).
"""

import dataclasses
import json
import os
import pathlib
import tempfile
from typing import Any, Dict, Sequence, Tuple

import jax
import numpy as np

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint that is unreadable or does not fit the state it is loaded into."""


def save(path, state: Any, meta: Dict) -> pathlib.Path:
    """Write ``state`` (a pytree of arrays) and ``meta`` (JSON-able) to ``path`` atomically."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    leaves = jax.tree.leaves(jax.device_get(state))
    arrays = {f'leaf_{i:05d}': np.asarray(x) for i, x in enumerate(leaves)}
    meta = dict(meta, format_version=FORMAT_VERSION, num_leaves=len(leaves))
    arrays['meta'] = np.asarray(json.dumps(meta))
    return atomic_write(path, lambda f: np.savez(f, **arrays))


def atomic_write(path, write) -> pathlib.Path:
    """
    Write a file with ``write(binary_file)`` so that ``path`` is never half written.

    The bytes go to a temporary file in the same folder, are flushed to disk, and the
    file is renamed over ``path``; on any error the temporary file is removed.
    """
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + '.', suffix='.tmp', dir=path.parent)
    try:
        with os.fdopen(fd, 'wb') as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def read_meta(path) -> Dict:
    """Return the ``meta`` mapping of a checkpoint without loading its arrays."""
    path = pathlib.Path(path)
    try:
        with np.load(path) as z:
            return json.loads(str(z['meta']))
    except (OSError, KeyError, ValueError) as exc:
        raise CheckpointError(f'{path}: not a bcg_ros checkpoint ({exc})') from exc


def load(path, template: Any, transient: Sequence[str] = ()) -> Tuple[Any, Dict]:
    """
    Return ``(state, meta)``: the arrays of ``path`` in the tree structure of ``template``.

    ``transient``: fields of the top-level dataclass ``template`` that may be taken from
    the template instead (one at most may differ in its number of arrays): a checkpoint
    whose environments' state has another layout (a version that randomises one more
    thing) still gives its networks and optimisers, and its episodes start afresh.
    ``meta['fresh']`` lists the fields so taken.
    """
    path = pathlib.Path(path)
    meta = read_meta(path)
    t_leaves, treedef = jax.tree.flatten(template)
    spans = _field_spans(template, transient)
    stored = meta.get('num_leaves')
    lo = hi = len(t_leaves)     # the leaves taken from the template: none
    fresh = []
    if stored != len(t_leaves):
        # Only one field's count is unknown; the file must hold all the others.
        held = len(t_leaves) - sum(b - a for a, b in spans.values())
        if len(spans) != 1 or not isinstance(stored, int) or stored < held:
            raise CheckpointError(f'{path}: {stored} arrays, the configured '
                                  f'learner has {len(t_leaves)} (another configuration?)')
        (name, (lo, hi)), = spans.items()
        fresh = [name]
        shift = stored - len(t_leaves)
    else:
        shift = 0
    leaves = []
    with np.load(path) as z:
        for i, t in enumerate(t_leaves):
            if lo <= i < hi:
                leaves.append(np.asarray(t))
                continue
            j = i + shift if i >= hi else i
            x = z[f'leaf_{j:05d}']
            if x.shape != np.shape(t) or x.dtype != np.asarray(t).dtype:
                raise CheckpointError(
                    f'{path}: leaf_{j:05d} is {x.dtype}{list(x.shape)}, the configured '
                    f'learner expects {np.asarray(t).dtype}{list(np.shape(t))}')
            leaves.append(x)
    return jax.tree.unflatten(treedef, leaves), dict(meta, fresh=fresh)


def _field_spans(template: Any, names: Sequence[str]) -> Dict[str, Tuple[int, int]]:
    """Return each named field's ``[first, end)`` range in ``template``'s flat leaves."""
    if not names:
        return {}
    spans, start = {}, 0
    for f in dataclasses.fields(template):
        n = len(jax.tree.leaves(getattr(template, f.name)))
        if f.name in names:
            spans[f.name] = (start, start + n)
        start += n
    missing = set(names) - set(spans)
    if missing:
        raise ValueError(f'{type(template).__name__} has no field {", ".join(sorted(missing))}')
    return spans
