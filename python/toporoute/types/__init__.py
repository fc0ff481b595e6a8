"""The types below both :mod:`toporoute.ops` and :mod:`toporoute.backends`: the ops' result types
(:mod:`.results`), the Agent Q-Mix weights and their files (:mod:`.qmix_params`, :mod:`._safetensors`), the
AgentConductor plan language and its PyYAML reference checker (:mod:`.conductor_topology`), and the code tables
of the HiVA DAG edits (:mod:`.dag_codes`) and the TacoMAS team operations (:mod:`.team_codes`).

Imports point down (DESIGN.md): ``ops`` -> ``backends`` -> ``types`` / ``_core``. Nothing here imports
``ops`` or ``backends`` (tests/project/test_layering.py); the public names are re-exported by
:mod:`toporoute.ops`.
"""
