"""TacoMAS (Xu et al., test-time co-evolution of topology and capability; spec ``methods/tacomas.md``): a team of
role agents on a directed graph with cycles; every round a judge scores each agent's contribution and a coach
writes its next-round plan (fast loop); every K rounds, while the answer is not good enough, a meta-LLM proposes
bounded births, deaths and edge edits, validated by ``ops.team_project`` (slow loop).

Layout: :mod:`.settings` (settings and sampling per call kind), :mod:`.team` (the team's arrays, agents and
roles; pure), :mod:`.parsing` (schemas, lenient parsing, the meta output as ``team_project`` rows; pure),
:mod:`.scorer` (the pluggable answer scorer), :mod:`.method` (the episode loop).
"""

from __future__ import annotations

from .method import KINDS, ROLE_KINDS, TacoMAS
from .settings import CALL_KINDS, FINALS, META_KINDS, SCORERS, TEMPLATES, TacoMASSettings
from .team import Agent, KindTool, RoleTable, Team, kind_tool

__all__ = [
    "CALL_KINDS",
    "FINALS",
    "KINDS",
    "META_KINDS",
    "ROLE_KINDS",
    "SCORERS",
    "TEMPLATES",
    "Agent",
    "KindTool",
    "RoleTable",
    "TacoMAS",
    "TacoMASSettings",
    "Team",
    "kind_tool",
]
