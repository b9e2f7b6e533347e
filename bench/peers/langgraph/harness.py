"""The peers bench's LangGraph harness (`cargo xtask bench --peers`).

The work: a chain of 3 agents, each answering 300 bytes at once, run N
times, each a new run (a new thread). Every run of the chain is timed
alone; the figure is a run's cost / 3, the median over the N runs.

--config sqlite: the graph checkpoints into LangGraph's SqliteSaver (the
synchronous saver: WAL, SQLite's default synchronous=FULL, one commit per
checkpoint and per batch of writes), invoked with durability="sync", so
each step is on disk before the next starts.
--config memory: the same graph on InMemorySaver (MemorySaver), also
durability="sync".

The storage is made in a fresh directory before the first run is timed
and removed after the last one. Prints one JSON line of results.

Usage: python harness.py --config sqlite|memory [--runs N]
"""

import argparse
import json
import operator
import platform
import shutil
import sqlite3
import tempfile
import time
from importlib.metadata import version
from typing import Annotated, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

STEPS = 3
ANSWER_BYTES = 300


class Chain(TypedDict):
    input: str
    answers: Annotated[list[str], operator.add]


def agent(step):
    """A stub agent: answers 300 bytes at once."""
    head = f"answer of a{step}: "

    def answer(state: Chain):
        return {"answers": [head + "x" * (ANSWER_BYTES - len(head))]}

    return answer


def chain(checkpointer):
    graph = StateGraph(Chain)
    for step in range(STEPS):
        graph.add_node(f"a{step}", agent(step))
    graph.add_edge(START, "a0")
    for step in range(1, STEPS):
        graph.add_edge(f"a{step - 1}", f"a{step}")
    graph.add_edge(f"a{STEPS - 1}", END)
    return graph.compile(checkpointer=checkpointer)


def percentile(ordered, p):
    last = len(ordered) - 1
    return ordered[min(round(p * last), last)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", choices=["sqlite", "memory"], required=True)
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args()

    directory = tempfile.mkdtemp(prefix="peers-langgraph-")
    conn = None
    if args.config == "sqlite":
        conn = sqlite3.connect(f"{directory}/checkpoints.sqlite", check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
        synchronous = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[
            conn.execute("PRAGMA synchronous").fetchone()[0]
        ]
        durability = (
            f"SqliteSaver, durability=sync: each checkpoint and each batch of writes "
            f"one commit, journal_mode={journal}, synchronous={synchronous}"
        )
    else:
        saver = InMemorySaver()
        durability = "InMemorySaver, durability=sync: nothing on disk"
    graph = chain(saver)

    per_step = []
    started = time.perf_counter()
    for run in range(args.runs):
        config = {"configurable": {"thread_id": f"run-{run}"}}
        t = time.perf_counter_ns()
        done = graph.invoke({"input": "go", "answers": []}, config, durability="sync")
        per_step.append((time.perf_counter_ns() - t) / 1000 / STEPS)
        answers = done["answers"]
        if len(answers) != STEPS or any(len(a) != ANSWER_BYTES for a in answers):
            raise SystemExit(f"run {run} ended with {answers!r}")
    wall = time.perf_counter() - started
    # The last run's checkpoints are on record.
    last = {"configurable": {"thread_id": f"run-{args.runs - 1}"}}
    checkpoints = len(list(saver.list(last)))
    if checkpoints < STEPS:
        raise SystemExit(f"{checkpoints} checkpoints of the last run")

    del graph, saver
    if conn is not None:
        conn.close()
    shutil.rmtree(directory)
    per_step.sort()
    print(
        json.dumps(
            {
                "config": f"langgraph-{args.config}",
                "system": f"langgraph {version('langgraph')} "
                f"(Python {platform.python_version()})",
                "durability": durability,
                "checkpoints_per_run": checkpoints,
                "runs": args.runs,
                "steps_per_run": STEPS,
                "answer_bytes": ANSWER_BYTES,
                "per_step_us_median": percentile(per_step, 0.5),
                "per_step_us_p10": percentile(per_step, 0.1),
                "per_step_us_p90": percentile(per_step, 0.9),
                "wall_s": wall,
            }
        )
    )


if __name__ == "__main__":
    main()
