"""Run directories, per-round traces and the HTML report.

- :mod:`.schema`: the typed records (:class:`~.schema.RoundRecord`, :class:`~.schema.EpisodeRecord`,
  :class:`~.schema.EpisodeFile`) and the blocks every method builds them from; ``to_json`` writes the format
  below, ``from_json`` reads every version of it since v1;
- :mod:`.writer`: appends a method's round records to its trace file as rounds finish;
- :mod:`.reader`: loads a run directory into typed records, tolerating partial and damaged runs;
- :mod:`.report`: the HTML page and its figures;
- :mod:`.otel`: the run as OpenTelemetry traces over OTLP (``toporoute export-otel``; extra ``otel``).

A run directory holds one or more method runs over the same task set (``toporoute run A B C --out RUN_DIR``)::

    RUN_DIR/
      <method>/                  one folder per method (dytopo, qmix, conductor, single, ...)
        run.json                 config: method, params (all settings), tasks, task_ids, engine, model, started,
                                 versions, argv; task_selection where the method leaves tasks out (qmix: its
                                 checkpoint's training tasks)
        episodes/<episode>.json  one per finished episode (written atomically by the runtime)
        traces/<episode>.jsonl   one JSON record per round, appended as rounds finish
        summary.json             per-method totals, rewritten at the end of every run
      report.html                ``toporoute report RUN_DIR``: self-contained page (inline SVG/JS, no network)
      figures/*.png              the report's figures as PNG files

``toporoute report`` also accepts a single method folder (one that holds ``run.json``).

Round record (``traces/<episode>.jsonl``, one line per round; ``v`` is the format version). Every method writes
every field below; one that does not apply to a method is null (``goal``, ``descriptors``, ``scores``,
``manager``) or empty::

    {"v": 1, "method": "dytopo", "episode": "HumanEval-0", "task": "HumanEval/0", "round": 0,
     "goal": "...",                                   # the round goal every worker saw
     "agents": ["Developer", "Researcher", ...],     # worker names, index order (node i of every matrix)
     "roles": ["Code Developer", ...],
     "descriptors": {"query": [str] * N, "key": [str] * N},   # what each worker needs / offers
     "scores": [[float] * N] * N | null,             # scores[src][dst]; null when the topology is not scored
     "edges": [{"src": "Developer", "dst": "Tester", "score": 0.77 | null}],
     "order": ["Developer", ...],                    # sigma: the round's aggregation order
     "levels": [int] * N,                            # longest-path layer per agent (index order)
     "removed": [{"src": ..., "dst": ...}],          # back edges placed against sigma (cycles); every one of
                                                     # them is also in "edges" (it still routes)
     "is_dag": bool,
     "inbox": {"Tester": ["Developer", ...]},        # delivery order of each recipient's routed messages
     "messages": {"Developer": {"public": str, "private": str, "answer": str | null,
                                "parse_error": str | null}},
     "usage": {"agents": {"Developer": {"prompt_tokens": int, "completion_tokens": int, "latency_s": float,
                                        "attempts": int, "ok": bool}, "Manager": {...}},
               "edges": [{"src": str, "dst": str, "tokens": int}]},   # routed message sizes
     "manager": {"is_complete": bool, "next_goal": str, "public": str, "parse_error": str | null} | null,
     "stats": {"edges": int, "density": float, "reciprocity": float,
               "jaccard_similarity_prev": float | null},   # Jaccard similarity |E & E'| / |E | E'| of the
                                                           # edge set to the previous round's (1 when both are
                                                           # empty; null in round 0). Older files hold
                                                           # "jaccard_prev", the distance 1 - similarity;
                                                           # from_json converts it
     "timing": {"round_s": float, "llm_s": float, "routing_s": float}}

Agent Q-Mix rounds (``method: "qmix"``) use the same record with ``goal``, ``descriptors``, ``scores`` and
``manager`` null, plus::

     "actions": {"CodeWriter_0": "broadcast_all", ...},   # each agent's communication action this round
     "q": {"CodeWriter_0": [float] * 6} | null,           # its Q-values (null when actions were not reselected)
     "explored": ["AnalyzeAgent_2"],                      # agents whose action was epsilon-random
     "waves": [["CodeWriter_0"], ["CodeWriter_1", ...]],  # execution waves (each wave's calls run together)
     "skipped": [...],                                    # agents that did not run (legacy_repo_exec only)
     "final": {"text": str, "answer": str, "usage": {...}, "error": str | null}   # last round: FinalRefer

There ``edges`` are the round graph phi(u), ``inbox`` the agents whose output of this round each agent read, and
``removed`` the edges that delivered nothing (a debate pair's edge into its lower index, which runs first). The
episode record adds ``"qmix": {"steps": [{"obs", "adj", "actions", "state"}], "actions": [[int] * n]}``: what
the policy saw and chose each round (the trainer's replay entries).

AgentConductor turns (``method: "conductor"``, one record per turn; ``round`` is the turn) add::

     "level": "easy", "level_source": "task" | "setting" | "default", "n_max": 4,
     "orchestrator": {"text": str, "usage": {...}, "error": str | null, "guided": bool,
                      "grammar": "validator" | "strict" | null,  # the plan grammar sent (null: none)
                      "prompt": [[role, content], ...]},        # the orchestrator's messages (for training)
     "yaml": str | null,                                       # the extracted plan
     "check": {"error": "[YAML LOGIC INVALID]" | null, "message": str, "warnings": [str]},
     "steps": [int], "layers": [["planner@1", "searcher@1"], ...],   # nodes are "<id>@<step>"; an earlier
     "edges": [{"src": "t1:coder@2", "dst": "debugger@4", "kind": "intra" | "cross" | "self"}],  # turn's: "t1:"
     "tester": {"agent", "tested", "code", "verdict", "tests": "public" | "hidden" | "none", "passed", "total",
                "logs"},
     "verdict": "PASSED" | "[WRONG ANSWER]" | ... | "[NO VISIBLE TESTS]",  # the tester's (feedback, early stop)
     "reward_verdict": ...,                                    # the real tests' (the reward)
     "density": {"nodes", "edges", "steps", "depth", "s_complex"},
     "reward": {"r_e": float, "r_g": float, "r": float}, "return_so_far": float

There ``order`` lists the nodes layer by layer, ``levels`` are the layers, ``stats`` adds ``intra_edges`` (its
``edges`` counts cross-turn refs too) and ``usage.agents`` holds the orchestrator's call beside the agents'. An
invalid plan's record has no agents or edges: the orchestrator, yaml, check and reward only. The episode record adds
``"conductor": {"level", "level_source", "n_max", "turns": [...], "rewards": [float], "return": float,
"passed_feedback": bool}``.

TacoMAS rounds (``method: "tacomas"``) fill the shared fields (edges of kind ``lagged`` / ``same_round``, the waves
as ``levels``; ``usage.agents`` keyed by agent id and ``<id>:tool<n>``, ``judge:<id>``, ``coach:<id>``,
``reflect:<id>``, ``meta``, ``scorer:verifier``) and add::

     "tacomas": {"team": [{"id", "slot", "gen", "role", "goal", "sink": bool, "parent": str | null, "born": int,
                           "tools": [str]}],
                 "edges": [{"src", "dst", "lagged": bool}], "waves": [[id, ...], ...],
                 "scores": {id: {"score": float | null, "reason": str, "error": str | null}},   # the judge
                 "tools": {id: [{"tool", "call": int, "revised": bool, "ok": bool, "output": str,
                                 "error": str | null, "attempts", "wall_s", "cut", "isolation"}]},  # its runs
                 "coaching": {id: {"errors": str, "plan": str, "error": str | null}},          # {} uncoached
                 "reflections": {id: str},                                      # self-reflections, {} none
                 "pi": {id: float}, "mean": float | null, "var": float | null, "death_candidates": [id],
                 "answer": str, "answer_score": float | null, "scorer": "verifier" | "tests" | "oracle",
                 "scorer_detail": str,
                 "slow": null | {"why": "cadence" | "slow_again", "meta_raw": str, "meta_error": str | null,
                                 "rationale": str, "time_control": "continue" | "slow_again" | "stop",
                                 "ops": [{"op", "text", "accepted": bool, "reason": str, "new": id | null}],
                                 "diff": {"nodes_added", "nodes_removed", "edges_added", "edges_removed",
                                          "inherited", "repaired"},
                                 "distance": int, "feedback": {id: {"prompt_delta", "memory_seed"}}},
                 "calls": {"agent" | "judge" | "coach" | "meta" | "verifier" | "reflect": {
                     "calls", "prompt_tokens", "completion_tokens", "latency_s"}},
                 "errors": [{"agent", "step", "error"}]}

An operation's ``reason`` is a name of ``ops.TEAM_REASONS`` or a parse-level one (``unparsed``,
``unknown_role_name``, ``over_row_limit``). The episode record adds ``"tacomas": {"scorer", "oracle": bool,
"slow_steps", "stopped": "tau" | "rounds" | "meta_stop", "final": "sink_last" | "best_scored", "rounds", ...}``.

Episode record (``episodes/<episode>.json``; the runtime's wrapper around the method's own record)::

    {"episode": "HumanEval-0", "status": "ok" | "error",
     "error": str | null,                            # the traceback of an episode that ended with an error
     "cause": str | null,                            # its one-line cause, e.g. the engine's failure
     "wall_s": float,
     "record": {"method": str, "task": "HumanEval/0", "kind": "code" | "math" | "choice", "rounds": int,
                "halted": bool,                      # the manager declared the task complete
                "answer": str,                       # the extracted final answer (code or math answer)
                "score": {"passed": bool, "status": str, "detail": str},
                "llm_s": float, "routing_s": float, "eval_s": float},
     "usage": {"prompt_tokens": int, "completion_tokens": int, "calls": int,
               "failed_calls": int, "engine_failed_calls": int,   # no valid reply | no reply from the engine
               "reprompts": int, "llm_latency_s": float, "messages_routed": int, "tokens_routed": int,
               "servers": {url: {"calls": int, "failed_calls": int, "prompt_tokens": int,
                                 "completion_tokens": int}}},   # "servers" (and each ledger call's "server")
                                                     # only from an engine over several servers (openai)
     "ledger": {...}}

An episode in which the engine failed a call (connection refused, a timeout or server error after the
engine's retries) ends with ``"status": "error"`` and the engine's message as its cause: it is no scored
attempt, ``summary.json`` counts it under ``errors`` and a rerun runs it again. A method whose calls are
independent samples (``engine_failures = "all"``: self-consistency, debate) goes on when only some calls of a
batch failed; its record counts them in ``engine_failed_calls``.

``summary.json``::

    {"method": str, "tasks": str, "model": str, "episodes": int, "ok": int, "errors": int,
     "passed": int, "accuracy": float,               # passed / finished (ok) episodes
     "tokens_per_task": float, "prompt_tokens_per_task": float, "completion_tokens_per_task": float,
     "calls_per_task": float, "rounds_per_task": float, "wall_s": float,
     "llm_s": float, "routing_s": float, "episode_wall_s": float,  # sums over the episodes
     "routing_share": float,                         # routing_s / episode_wall_s
     "engine_calls": int, "mean_batch": float}       # LLM engine calls of the run and their mean size
"""
