"""The demo of ``tessera-ref demo`` as a program of several processes (MESH-MP-*).

``tessera-ref launch -n 4 examples/multiprocess_demo.py`` runs it as 4 processes, each owning
18 of the 72 simulated devices; rank 0 prints what one process prints — the same Graph IR,
collectives, bits, SHA-256 and simulated-machine report — apart from the seconds each section took.
"""
from tessera_ref import demo

demo.main()
