"""The simulated machine (DESIGN §7; spec: docs/spec/sim.md, clauses ``SIM-*``).

Hardware presets (:mod:`~tessera_ref.sim.presets`), a memory accountant
(:mod:`~tessera_ref.sim.memory`), alpha-beta collective costs
(:mod:`~tessera_ref.sim.collectives`), roofline op times (:mod:`~tessera_ref.sim.roofline`)
and the :class:`Machine` that puts them on a per-device timeline, exported as a Chrome trace
and a text report. ``with sim.use(machine):`` makes a machine current; the simulated mesh
(``tessera_ref.dist``) records into :func:`current`.

``sim.machine`` is the convenience function :func:`~tessera_ref.sim.active.machine` (it
shadows the submodule of the same name as an attribute; import ``Machine`` from the package);
``sim.plot`` is :func:`~tessera_ref.sim.figures.plot` (matplotlib figures, SIM-PLOT-1).
"""
from .analysis import SCHEMA, AxisSummary, DeviceSummary, MachineSummary, summarize
from .active import current, is_paused, last_used, machine, paused, report, use
from .collectives import ALGORITHMS, CollectiveCost, alpha_beta, collective_cost, tier_of
from .machine import Machine
from .memory import WARN_FRACTION, Allocation, MemoryAccountant
from .figures import plot
from .presets import PRESETS, Link, MemoryTier, Preset, get_preset, preset_card, presets_table
from .roofline import Roofline, peak_key, roofline
from .timeline import Event, Timeline

__all__ = [
    "Machine", "use", "current", "paused", "is_paused", "report", "machine", "last_used",
    "Preset", "Link", "MemoryTier", "PRESETS", "get_preset", "presets_table", "preset_card",
    "MemoryAccountant", "Allocation", "WARN_FRACTION",
    "ALGORITHMS", "CollectiveCost", "alpha_beta", "collective_cost", "tier_of",
    "Roofline", "roofline", "peak_key", "Event", "Timeline",
    "MachineSummary", "DeviceSummary", "AxisSummary", "summarize", "SCHEMA", "plot",
]
