"""The old home of :func:`~function.edge.codec.state_entry`, now in
:mod:`function.edge.codec` with the rest of the wire splice. Kept as an import path
while ``function/composers/modelcache.py`` (being replaced on another branch) reads it
from here; new code imports from :mod:`function.edge.codec`.
"""

from function.edge.codec import state_entry

__all__ = ["state_entry"]
